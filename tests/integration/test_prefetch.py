"""A worker works ahead. It asks the shards for w(t+1) as soon as it has w(t), and a shard holds such a
pull at most --pull_wait_ms: with a slow worker in the job the fast one's prefetch expires, and the
fast worker pulls again instead of giving up its plan. And it runs step t+1 over the same VWs while
the coordinator answers its request: an answer that plans otherwise (here an evaluation) drops what
ran ahead. In both cases the digest is the undisturbed run's."""
import os
import shutil
import unittest

from harness import MLP, RunDirTest, logs, read_events, read_report, read_result, read_text, requires


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
        report = read_report(f"{d}/worker0.json")
        self.assertGreaterEqual(report["prefetches_pulled_again"], 1, read_text(f"{d}/worker0.log")[-3000:])
        self.assertEqual(report["abandoned_plans"], 0)


class RunAhead(RunDirTest):
    def test_each_step_runs_ahead_of_its_plan_and_an_evaluation_drops_the_guess(self):
        _, _, ref = self.run_local("ref", MLP, extra=["--steps=40", "--test_limit=-1"])
        # Evaluations after steps 10, 20 and 30 (and at the end): of the 39 steps that follow a train
        # plan, the 3 that follow an evaluation are planned otherwise and dropped.
        _, _, r = self.run_local("eval", MLP, extra=["--steps=40", "--eval_every=10", "--test_limit=500"])
        self.assertEqual(r["params_sha256"], ref["params_sha256"])
        d = self.run_dir("eval")
        report = read_report(os.path.join(d, "logs", "worker0.json"))
        self.assertEqual((report["ran_ahead"], report["ahead_dropped"]), (36, 3), logs(d))
        self.assertEqual(report["outcome"], "done")
        # The report's means are a train plan's: the waits for the evaluations' plans and for the stop (the final
        # evaluation, the job's final pull and export) are not in them, so the timed plans fit in the span of the
        # training steps on the coordinator's clock.
        events = read_events(d)
        completed = [e["t"] for e in events if e["event"] == "step_completed"]
        first_plan = min(e["t"] for e in events if e["event"] == "assignment")
        timed_s = report["timed_plans"] * sum(report["ms_per_train_plan"].values()) / 1e3
        self.assertLessEqual(timed_s, completed[-1] - first_plan, report)


class SharedMemory(RunDirTest):
    """Pull replies and pushes between a worker and a shard on the same host go through shared memory,
    with the bits of a job that sends them through the socket."""
    STEPS = "--steps=40"

    def counts(self, report):
        """(pull replies through shared memory, inline, pushes through shared memory, inline) in a worker report."""
        r = read_report(report)
        return r["pull_replies"]["shm"], r["pull_replies"]["inline"], r["pushes"]["shm"], r["pushes"]["inline"]

    def run_with_shard(self, name, *flags, shard_prefix=(), worker_flags=()):
        """One worker and one shard (started under `shard_prefix`); returns (digest, the worker's report path)."""
        d = self.run_dir(name)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("shm-token\n")
        coord, addr = self.start_coordinator(d, token, self.STEPS, "--workers=1")
        self.start_shard(d, addr, token, 0, *flags, prefix=shard_prefix)
        self.start_worker(d, addr, token, 0, *worker_flags)
        self.assertEqual(coord.wait(timeout=300), 0, read_text(f"{d}/coordinator.log")[-3000:])
        return read_result(d)["params_sha256"], f"{d}/worker0.json"

    def setUp(self):
        super().setUp()
        _, _, ref = self.run_local("ref", MLP, extra=[self.STEPS])
        self.ref = ref["params_sha256"]
        self.ref_counts = self.counts(os.path.join(self.run_dir("ref"), "logs", "worker0.json"))

    def test_a_shard_on_the_same_host_moves_every_pull_reply_and_push_through_shared_memory(self):
        shm_replies, inline_replies, shm_pushes, inline_pushes = self.ref_counts
        self.assertGreater(shm_replies, 40)
        self.assertEqual(inline_replies, 0)
        self.assertGreaterEqual(shm_pushes, 39)  # every step's pushes
        # Only the initial values: read from the model, not a region; pushed again if the shard had no layout yet
        # when they came (the worker gives up that plan, step -1, an abandoned plan, and pushes them again).
        abandoned = read_report(os.path.join(self.run_dir("ref"), "logs", "worker0.json"))["abandoned_plans"]
        self.assertGreaterEqual(inline_pushes, 1)
        self.assertLessEqual(inline_pushes, 1 + abandoned)
        # The same job with shared memory turned off: everything inline, the same digest.
        digest, report = self.run_with_shard("socket", worker_flags=["--shm=false"])
        self.assertEqual(digest, self.ref)
        shm_replies, inline_replies, shm_pushes, inline_pushes = self.counts(report)
        self.assertEqual((shm_replies, shm_pushes), (0, 0))
        self.assertGreater(inline_replies, 40)
        self.assertGreater(inline_pushes, 40)

    @requires(shutil.which("unshare") and os.geteuid() == 0, "needs unshare and root")
    def test_a_shard_that_cannot_see_the_worker_answers_and_is_pushed_to_inline(self):
        # The shard in its own pid namespace (with its own /proc) cannot open the worker's regions: it answers
        # every pull inline, and the worker, never shown that the shard can read its memory, pushes inline.
        digest, report = self.run_with_shard("pidns", shard_prefix=["unshare", "--pid", "--fork", "--mount-proc",
                                                                    "--kill-child"])
        self.assertEqual(digest, self.ref)
        shm_replies, inline_replies, shm_pushes, inline_pushes = self.counts(report)
        self.assertEqual((shm_replies, shm_pushes), (0, 0))
        self.assertGreater(inline_replies, 40)
        self.assertGreater(inline_pushes, 40)

    def test_a_refused_push_in_shared_memory_is_pushed_again_through_the_socket(self):
        digest, report = self.run_with_shard("refused", "--refuse_shm_pushes")
        self.assertEqual(digest, self.ref)
        text = read_text(report[:-len(".json")] + ".log")
        self.assertEqual(read_report(report)["shm_push_refusals"], 1, text[-3000:])
        self.assertEqual(read_report(report)["abandoned_plans"], 1, text[-3000:])
        shm_replies, inline_replies, shm_pushes, inline_pushes = self.counts(report)
        self.assertGreater(shm_replies, 40)      # pull replies still come through shared memory
        self.assertLessEqual(shm_pushes, self.ref_counts[2] // 39 + 1)  # the refused step's pushes only
        self.assertGreater(inline_pushes, 40)


if __name__ == "__main__":
    unittest.main(verbosity=2)
