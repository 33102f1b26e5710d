"""A worker works ahead. It asks the shards for w(t+1) as soon as it has w(t), and a shard holds such a
pull at most --pull_wait_ms: with a slow worker in the job the fast one's prefetch expires, and the
fast worker pulls again instead of giving up its plan. And it runs step t+1 over the same VWs while
the coordinator answers its request: an answer that plans otherwise (here an evaluation) drops what
ran ahead. In both cases the digest is the undisturbed run's."""
import os
import re
import unittest

from harness import MLP, RunDirTest, logs, read_result


class PrefetchExpiry(RunDirTest):
    STEPS = "--steps=40"

    def test_an_expired_prefetch_is_pulled_again_and_changes_nothing(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[self.STEPS])
        d = self.run_dir("job")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("prefetch-token\n")
        coord, addr = self.start_coordinator(d, token, self.STEPS, "--workers=2", "--planner=equal")
        # A pull may wait 50 ms; the slow worker's 4 VWs take far longer than that.
        self.start_shard(d, addr, token, 0, "--pull_wait_ms=50")
        for w, slowdown in enumerate([1, 40]):
            self.start_worker(d, addr, token, w, f"--slowdown={slowdown}")
        self.assertEqual(coord.wait(timeout=300), 0, open(f"{d}/coordinator.log").read()[-3000:])
        self.assertEqual(read_result(d)["params_sha256"], ref["params_sha256"])
        fast = open(f"{d}/worker0.log").read()
        self.assertIn("expired at shard 0: pulling again", fast)
        self.assertNotIn("gave up the plan", fast)


class RunAhead(RunDirTest):
    def test_each_step_runs_ahead_of_its_plan_and_an_evaluation_drops_the_guess(self):
        _, _, ref = self.run_local("ref", MLP, extra=["--steps=40", "--test_limit=-1"])
        # Evaluations after steps 10, 20 and 30 (and at the end): of the 39 steps that follow a train
        # plan, the 3 that follow an evaluation are planned otherwise and dropped.
        _, _, r = self.run_local("eval", MLP, extra=["--steps=40", "--eval_every=10", "--test_limit=500"])
        self.assertEqual(r["params_sha256"], ref["params_sha256"])
        d = self.run_dir("eval")
        times = re.search(r"(\d+) run ahead of their plan, (\d+) runs ahead dropped",
                          open(os.path.join(d, "logs", "worker0.log")).read())
        self.assertIsNotNone(times, logs(d))
        self.assertEqual((int(times.group(1)), int(times.group(2))), (36, 3))


class SharedMemoryPulls(RunDirTest):
    REPLIES = r"(\d+) pull replies through shared memory, (\d+) inline"

    def test_a_shard_on_the_same_host_answers_every_pull_through_shared_memory_with_the_same_bits(self):
        _, _, ref = self.run_local("shm", MLP, extra=["--steps=40"])
        d = self.run_dir("shm")
        replies = re.search(self.REPLIES, open(os.path.join(d, "logs", "worker0.log")).read())
        self.assertIsNotNone(replies, logs(d))
        self.assertGreater(int(replies.group(1)), 40)
        self.assertEqual(int(replies.group(2)), 0)
        # The same job with the offer turned off: every reply inline, the same digest.
        d = self.run_dir("socket")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("shm-token\n")
        coord, addr = self.start_coordinator(d, token, "--steps=40", "--workers=1")
        self.start_shard(d, addr, token, 0)
        self.start_worker(d, addr, token, 0, "--shm_pulls=false")
        self.assertEqual(coord.wait(timeout=300), 0, open(f"{d}/coordinator.log").read()[-3000:])
        self.assertEqual(read_result(d)["params_sha256"], ref["params_sha256"])
        replies = re.search(self.REPLIES, open(f"{d}/worker0.log").read())
        self.assertIsNotNone(replies)
        self.assertEqual(int(replies.group(1)), 0)
        self.assertGreater(int(replies.group(2)), 40)


if __name__ == "__main__":
    unittest.main(verbosity=2)
