"""Heterogeneous workers: VW counts follow measured speed, bits do not move."""
import os
import re
import unittest

from harness import MLP, RunDirTest

# Larger microbatches than the default job so that compute, not noise, sets the measured speed.
EXTRA = ["--steps=150", "--batch_per_vw=512", "--train_limit=20000", "--test_limit=-1"]


class SpeedAwarePlacement(RunDirTest):
    def test_slowed_workers_get_fewer_vws_and_the_digest_is_unchanged(self):
        _, _, ref = self.run_local("reference", MLP, workers=1, extra=EXTRA)
        d = self.run_dir("hetero")
        _, _, got = self.run_local("hetero", MLP, workers=3, extra=EXTRA + ["--planner=speed"], slowdowns="1,2,4")
        self.assertEqual(got["params_sha256"], ref["params_sha256"])
        # Which worker id ran with which slowdown (ids follow registration order).
        slowdown_of = {}
        for i, factor in enumerate([1, 2, 4]):
            with open(os.path.join(d, "logs", f"worker{i}.log")) as f:
                slowdown_of[int(re.search(r"registered as worker (\d+)", f.read()).group(1))] = factor
        with open(os.path.join(d, "logs", "coordinator.log")) as f:
            epochs = re.findall(r"assignment epoch \d+ from step \d+: (.*)", f.read())
        self.assertGreater(len(epochs), 1, "the planner never re-planned by speed")
        counts = {slowdown_of[int(w)]: int(hi) - int(lo) for w, lo, hi in re.findall(r"w(\d+):\[(\d+),(\d+)\)", epochs[-1])}
        for factor in (1, 2, 4):
            counts.setdefault(factor, 0)
        # Optimal for V = 8 at speeds 1 : 1/2 : 1/4 is 5, 2, 1; allow one VW of measurement noise.
        self.assertGreaterEqual(counts[1], counts[2], counts)
        self.assertGreaterEqual(counts[2], counts[4], counts)
        self.assertGreaterEqual(counts[1], 4, counts)


if __name__ == "__main__":
    unittest.main(verbosity=2)
