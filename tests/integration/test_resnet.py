"""The zoo's ResNet (models/resnet.h): a ResNet-8 with BatchNorm on a slice of Fashion-MNIST trains to the same
bits on one worker of 8 VWs and on an uneven placement over three, and across a worker joining and one SIGKILLed;
a depth that is not 6n+2 is refused at the coordinator's start."""
import os
import unittest

from harness import LOCAL, ROOT, RunDirTest, logs

JOB_FILE = os.path.join(ROOT, "examples", "fashion_mnist_resnet.flags")
# A ResNet-8 on 1024 samples, a few steps: seconds per run.
JOB = ["--model_depth=8", "--train_limit=1024", "--test_limit=256", "--batch_per_vw=4", "--steps=12",
       "--warmup_steps=2", "--eval_every=0", "--eval_batch=128"]


class Resnet(RunDirTest):
    def run_resnet(self, name, workers, extra=(), **kw):
        return self.run_local(name, JOB_FILE, servers=1, workers=workers, extra=[*JOB, *extra], **kw)

    def test_a_two_placements_train_the_same_bits(self):
        _, _, one = self.run_resnet("w1", 1)
        _, _, three = self.run_resnet("w3", 3)
        self.assertEqual(one["model"], "resnet")
        self.assertEqual(one["steps"], 12)
        self.assertEqual(three["params_sha256"], one["params_sha256"])
        self.assertEqual(three["test_accuracy"], one["test_accuracy"])
        _, _, other = self.run_resnet("seed", 1, extra=["--seed=2"])
        self.assertNotEqual(other["params_sha256"], one["params_sha256"])

    def test_b_a_join_and_a_sigkill_keep_the_bits(self):
        _, _, reference = self.run_resnet("ref", 2, extra=["--steps=24"])
        d = self.run_dir("job")
        cmd = [LOCAL, "--job", JOB_FILE, "--servers", "1", "--workers", "2", "--run-dir", d, "--", *JOB, "--steps=24"]
        result = self.run_with_join_and_sigkill(d, cmd, timeout=300)
        self.assertGreaterEqual(result["workers_seen"], 3)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(d))

    def test_c_a_depth_that_is_not_6n_plus_2_is_refused_at_start(self):
        code, out, _ = self.run_local("depth", JOB_FILE, servers=1, workers=1, extra=[*JOB, "--model_depth=21"],
                                      expect_ok=False)
        self.assertEqual(code, 2, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
