"""The worker asks the shards for w(t+1) right behind its last push of step t. A shard holds such a
pull at most --pull_wait_ms: with a slow worker in the job the fast one's prefetch expires, and the
fast worker pulls again instead of giving up its plan; the digest is the undisturbed run's."""
import os
import unittest

from harness import MLP, RunDirTest, read_result


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
