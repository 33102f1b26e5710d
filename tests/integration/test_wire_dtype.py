"""Compressed wire dtypes (--wire_dtype=bf16|fp16): the digest changes against fp32, stays one
across placements and shard counts, and the model still learns."""
import unittest

from harness import MLP, RunDirTest


class WireDTypes(RunDirTest):
    def run_job(self, name, servers, workers, extra):
        _, _, r = self.run_local(name, MLP, servers=servers, workers=workers, extra=extra)
        self.assertEqual(r["steps"], 200)
        return r

    def test_bf16_and_fp16_digests_are_independent_of_placement_and_differ_from_fp32(self):
        fp32 = self.run_job("fp32", 1, 1, [])
        self.assertEqual((fp32["grad_wire_dtype"], fp32["weight_wire_dtype"]), ("fp32", "fp32"))
        digests = {}
        for dtype, placements in (("bf16", [(1, 1), (2, 3), (2, 8)]), ("fp16", [(1, 1), (2, 2)])):
            runs = [self.run_job(f"{dtype}-s{s}-w{w}", s, w, [f"--wire_dtype={dtype}"]) for s, w in placements]
            self.assertEqual(len({r["params_sha256"] for r in runs}), 1, [(p, r["params_sha256"]) for p, r in
                                                                           zip(placements, runs)])
            r = runs[0]
            self.assertEqual((r["grad_wire_dtype"], r["weight_wire_dtype"]), (dtype, dtype))
            digests[dtype] = r["params_sha256"]
            # Rounding changes the numerics, not the learning: close to fp32's loss and accuracy.
            self.assertLess(abs(r["final_loss"] - fp32["final_loss"]), 0.1 * fp32["final_loss"] + 0.02, r)
            self.assertLess(abs(r["test_accuracy"] - fp32["test_accuracy"]), 0.03, r)
        self.assertEqual(len({fp32["params_sha256"], digests["bf16"], digests["fp16"]}), 3, digests)

    def test_gradients_and_weights_compress_separately(self):
        grads = self.run_job("grads", 1, 2, ["--grad_wire_dtype=bf16"])
        weights = self.run_job("weights", 2, 1, ["--weight_wire_dtype=bf16"])
        self.assertEqual((grads["grad_wire_dtype"], grads["weight_wire_dtype"]), ("bf16", "fp32"))
        self.assertEqual((weights["grad_wire_dtype"], weights["weight_wire_dtype"]), ("fp32", "bf16"))
        self.assertNotEqual(grads["params_sha256"], weights["params_sha256"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
