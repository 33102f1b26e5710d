"""`elasticps evaluate` and `elasticps predict` (docs/operations.md, docs/models.md): an exported model evaluated on
the test set gives the job's own test accuracy exactly, and its predictions are what Debian's python3-torch computes
with the same export, row by row; bad input exits 2 naming the flag."""
import json
import os
import subprocess
import unittest

from harness import BIN, ENV, MLP, RunDirTest, skip_or_fail
from test_script_model import DATA, TORCH_PY, models_dir
from test_script_model import tearDownModule  # noqa: F401 (removes the modules models_dir() scripted)

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_predict.py")
ELASTICPS = os.path.join(BIN, "elasticps")
IMAGES = os.path.join(DATA, "t10k-images-idx3-ubyte.gz")
LABELS = os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")
TEST_LIMIT, EVAL_BATCH = 300, 100
JOB = ["--virtual_workers=4", "--batch_per_vw=8", "--steps=12", "--train_limit=512", f"--test_limit={TEST_LIMIT}",
       f"--eval_batch={EVAL_BATCH}"]
DATA_FLAGS = ["--data", IMAGES, "--labels", LABELS, "--limit", str(TEST_LIMIT), "--batch", str(EVAL_BATCH)]


class Predict(RunDirTest):
    def elasticps(self, *args):
        return subprocess.run([ELASTICPS, *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120)

    def evaluate(self, model, *extra):
        p = self.elasticps("evaluate", "--model", model, *DATA_FLAGS, "--json", *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def predict_matches_python(self, kind, model, *extra):
        out = os.path.join(self.tmp, kind + ".csv")
        p = self.elasticps("predict", "--model", model, *DATA_FLAGS, "--out", out, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        # Python computes with the job's CPU kernels, as eps_predict does (elasticps kernels: their environment).
        kernels = self.elasticps("kernels")
        self.assertEqual(kernels.returncode, 0, kernels.stderr)
        env = dict(ENV, OPENBLAS_NUM_THREADS="1", **dict(line.split("=", 1) for line in kernels.stdout.split()))
        self.assertEqual(env.get("OPENBLAS_CORETYPE"), "Haswell", kernels.stdout)
        c = subprocess.run([TORCH_PY, CHECK, kind, model, IMAGES, LABELS,
                            str(TEST_LIMIT), str(EVAL_BATCH), out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300, env=env)
        self.assertEqual(c.returncode, 0, c.stderr)
        got = json.loads(c.stdout)
        self.assertEqual(got["header"], ["index", "class"] + [f"p{i}" for i in range(10)])
        self.assertEqual(got["rows"], TEST_LIMIT)
        self.assertEqual(got["wrong_class"], [])
        # The same library (Debian's libtorch) with the same kernels at the same thread counts computes the same
        # floats: the probabilities are equal exactly. OPENBLAS_NUM_THREADS=1 matters: Debian's pthread OpenBLAS otherwise splits a matrix
        # product over every core, with other sums (up to 1e-6 apart), where the worker's SetCpuThreads keeps it to 1.
        self.assertEqual(got["inexact"], 0, got)

    def test_a_script_model_evaluates_to_the_jobs_accuracy_and_predicts_what_python_computes(self):
        if models_dir() is None:
            skip_or_fail(self, f"{TORCH_PY} cannot script the test's modules")
        _, _, r = self.run_local("script", MLP, workers=2,
                                 extra=[f"--model={os.path.join(models_dir(), 'net.pt')}", *JOB])
        model = os.path.join(self.tmp, "script", "model.script.pt")
        got = self.evaluate(model)
        self.assertEqual(got["count"], TEST_LIMIT)
        self.assertEqual(got["accuracy"], r["test_accuracy"])
        self.assertAlmostEqual(got["loss"], r["test_loss"], places=5)
        self.predict_matches_python("script", model)

    def test_b_a_builtin_models_exports_evaluate_alike_and_predict_what_python_computes(self):
        _, _, r = self.run_local("mlp", MLP, workers=1, extra=JOB)
        d = os.path.join(self.tmp, "mlp")
        # safetensors name their model in their metadata; a state dict needs --arch.
        from_safetensors = self.evaluate(os.path.join(d, "model.safetensors"))
        from_pt = self.evaluate(os.path.join(d, "model.pt"), "--arch", "mlp")
        self.assertEqual(from_safetensors["accuracy"], r["test_accuracy"])
        self.assertEqual(from_pt, from_safetensors)
        self.predict_matches_python("mlp", os.path.join(d, "model.pt"), "--arch", "mlp")
        self.bad_input(d)

    def bad_input(self, d):
        pt, st = os.path.join(d, "model.pt"), os.path.join(d, "model.safetensors")
        out = os.path.join(self.tmp, "bad.csv")
        broken = os.path.join(self.tmp, "broken.safetensors")
        with open(broken, "wb") as f:
            f.write((1 << 40).to_bytes(8, "little") + b"{}")
        cases = [
            (["evaluate", "--data", IMAGES, "--labels", LABELS], "--model"),
            (["evaluate", "--model", os.path.join(d, "missing.pt"), *DATA_FLAGS], "--model"),
            (["evaluate", "--model", st, "--data", os.path.join(d, "missing.gz"), "--labels", LABELS], "--data"),
            (["evaluate", "--model", st, "--data", IMAGES], "--labels"),
            (["evaluate", "--model", broken, *DATA_FLAGS], "--model"),
            (["evaluate", "--model", pt, *DATA_FLAGS], "--arch"),  # a state dict is no TorchScript module
            (["evaluate", "--model", st, "--arch", "cnn", *DATA_FLAGS], "--model"),  # other tensors
            (["evaluate", "--model", st, "--arch", "nope", *DATA_FLAGS], "--arch"),
            (["predict", "--model", st, *DATA_FLAGS], "--out"),
            (["evaluate", "--model", st, *DATA_FLAGS, "--batch", "0"], "--batch"),
        ]
        if models_dir() is not None:  # a module that refuses 28x28 images
            cases.append((["evaluate", "--model", os.path.join(models_dir(), "bad_shape.pt"), *DATA_FLAGS], "--data"))
        for args, flag in cases:
            p = self.elasticps(*args)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stderr}")
            self.assertIn(flag, p.stderr, args)
        self.assertFalse(os.path.exists(out))

    def test_c_each_command_has_help(self):
        for command in ("evaluate", "predict"):
            p = self.elasticps(command, "--help")
            self.assertEqual(p.returncode, 0)
            self.assertIn("--model", p.stdout)


if __name__ == "__main__":
    unittest.main()
