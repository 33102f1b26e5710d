"""`elasticps train` and `elasticps export`: the app command line runs real jobs through local.sh and
reads real stores; bad arguments and bad job files end with exit code 2 before anything trains."""
import os
import subprocess
import unittest

from harness import BIN, ENV, MLP, RunDirTest, read_result

ELASTICPS = os.path.join(BIN, "elasticps")
SHORT = ["--train-limit=640", "--test-limit=200", "--virtual-workers=4", "--batch-per-vw=16"]


class Train(RunDirTest):
    def elasticps(self, *args, timeout=300):
        return subprocess.run([ELASTICPS, *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)

    def test_a_job_from_flags_alone_and_from_a_job_file_with_overrides(self):
        from_flags = os.path.join(self.tmp, "flags")
        p = self.elasticps("train", "--model=mlp", "--steps=8", "--seed=7", *SHORT, "--run-dir", from_flags)
        self.assertEqual(p.returncode, 0, p.stdout)
        r = read_result(from_flags)
        self.assertEqual((r["model"], r["steps"], r["batch_per_vw"]), ("mlp", 8, 16))
        with open(os.path.join(from_flags, "job.flags")) as f:
            self.assertIn("--train_limit=640", f.read().split())  # dashes read as underscores

        # The example job with its steps overridden, checkpointed, on 2 workers and 2 shards.
        from_file = os.path.join(self.tmp, "file")
        p = self.elasticps("train", "--job", MLP, "--servers=2", "--workers", "2", "--checkpoint-every", "3",
                           "--steps=6", "--train_limit=640", "--run-dir", from_file)
        self.assertEqual(p.returncode, 0, p.stdout)
        r = read_result(from_file)
        self.assertEqual((r["job_id"], r["steps"]), ("fashion_mnist_mlp", 6))

        # export reads the stores that run left: the final step's parameters, as result.json digests them.
        out = os.path.join(self.tmp, "exported.safetensors")
        p = self.elasticps("export", "--stores", os.path.join(from_file, "store"), "--out", out)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn(r["params_sha256"], p.stdout.split())
        self.assertTrue(os.path.getsize(out) > 400000)

    def test_bad_arguments_and_a_typo_in_a_job_file_exit_2_before_training(self):
        bad_job = os.path.join(self.tmp, "typo.flags")
        with open(MLP) as f, open(bad_job, "w") as out:
            out.write(f.read() + "--stepz=3\n")
        d = os.path.join(self.tmp, "typo")
        cases = {
            "unknown command": ["trian", "--model=mlp"],
            "positional argument": ["train", "--model=mlp", "job.flags"],
            "no job": ["train", "--steps=3"],
            "option without a value": ["train", "--model=mlp", "--workers"],
            "typo in a job file": ["train", "--job", bad_job, "--run-dir", d],
            "typo in a job flag": ["train", "--model=mlp", "--stepz=3", "--run-dir", d],
            "unknown status flag": ["status", "--run-dir", d, "--jsn"],
        }
        for what, args in cases.items():
            with self.subTest(what):
                p = self.elasticps(*args, timeout=60)
                self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIsNone(read_result(d))
        self.assertFalse(os.path.exists(os.path.join(d, "store", "shard0")))

    def test_every_command_has_help(self):
        for command in ["train", "export", "status", "keygen"]:
            with self.subTest(command):
                p = self.elasticps(command, "--help", timeout=30)
                self.assertEqual(p.returncode, 0, p.stdout)
                self.assertTrue(p.stdout.startswith("usage: elasticps " + command), p.stdout)


if __name__ == "__main__":
    unittest.main()
