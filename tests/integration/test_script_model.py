"""Models from Python (docs/models.md): a TorchScript module written and scripted here with Debian's python3-torch
trains to the same bits in every placement and across a join and a kill; its exports load in Python; bad models
fail the job cleanly at the start."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from harness import (BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_events, read_report, read_result,
                     skip_or_fail, wait_for_event, wait_for_file, wait_for_step, worker_ids_of_pid)

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = os.environ.get("EPS_TORCH_PYTHON", "/usr/bin/python3")  # Debian's python3-torch
SCRIPT_MODELS = os.path.join(HERE, "script_models.py")
ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
DATA = "/usr/share/datasets/fashion-mnist"  # the coordinator's --data_dir default
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
# A small job for the user's Net: V = 8 virtual workers, seconds of compute per run.
JOB = ["--virtual_workers=8", "--batch_per_vw=8", "--steps=24", "--train_limit=1024", "--test_limit=500",
       "--eval_batch=100"]
_models = {}


def tearDownModule():
    """The folder models_dir() made goes with the module's tests."""
    shutil.rmtree(_models.get("tmp", ""), ignore_errors=True)


def models_dir():
    """The test modules, scripted once per run into a temporary folder (None without python3-torch)."""
    if "dir" not in _models:
        d = tempfile.mkdtemp(prefix="eps-script-models-")
        _models["tmp"] = d  # removed by tearDownModule
        p = subprocess.run([TORCH_PY, SCRIPT_MODELS, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=300)
        _models["dir"] = d if p.returncode == 0 else None
        _models["log"] = p.stdout
    return _models["dir"]


class ScriptModels(RunDirTest):
    def setUp(self):
        super().setUp()
        if models_dir() is None:
            skip_or_fail(self, f"{TORCH_PY} cannot script the test's modules: {_models['log'][-500:]}")
        self.models = models_dir()

    def model(self, name):
        return os.path.join(self.models, name + ".pt")

    def run_model(self, name, model, workers, extra=(), **kw):
        return self.run_local(name, MLP, servers=2, workers=workers,
                              extra=[f"--model={self.model(model)}", *JOB, *extra], **kw)

    def net(self, workers):
        """The user's Net on 2 shards x `workers` workers (JOB), run once for the class (run_shared): (returncode,
        output, result.json's dict); its run dir is self.shared_dir(f"net-w{workers}")."""
        return self.run_shared(f"net-w{workers}", job=MLP, servers=2, workers=workers,
                               extra=[f"--model={self.model('net')}", *JOB])

    def reference(self):
        """The user's Net on 2 shards x 1 worker (JOB): its result.json's dict, run once for the class."""
        return self.net(1)[2]

    def test_a_user_module_gives_the_same_digest_over_1x8_2x4_and_3_uneven_workers(self):
        results = {w: self.net(w)[2] for w in (2, 3)}
        results[1] = self.reference()
        for w, r in results.items():
            self.assertEqual(r["steps"], 24, w)
            self.assertEqual(r["model"], self.model("net"))
        self.assertEqual(len({r["params_sha256"] for r in results.values()}), 1, results)
        self.assertEqual(len({r["buffers_sha256"] for r in results.values()}), 1, results)
        self.assertNotEqual(results[1]["buffers_sha256"], EMPTY_SHA256)  # BatchNorm statistics travel
        self.assertEqual(len({r["test_accuracy"] for r in results.values()}), 1, results)
        # The module's own loss(output, target) changes the training: another digest.
        _, _, smoothed = self.run_model("net-loss", "net_loss", 1)
        self.assertNotEqual(smoothed["params_sha256"], results[1]["params_sha256"])

    def test_h_modules_train_on_data_of_any_shape_and_dtype_with_the_same_bits_on_1_and_2_workers(self):
        d = self.run_dir("data")
        # The files, written by Debian's python (numpy); this test may run on another.
        make = f"""
import numpy as np
rng = np.random.default_rng(5)
n = 256
x = rng.standard_normal((n, 6)).astype(np.float32)
np.save("{d}/x.npy", x)
np.save("{d}/classes.npy", (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64))  # 0..2
np.save("{d}/targets.npy", np.stack([x[:, 0] - x[:, 2], 0.5 * x[:, 3]], 1).astype(np.float32))
np.save("{d}/tokens.npy", rng.integers(0, 50, (n, 12)).astype(np.int64))
np.save("{d}/parity.npy", rng.integers(0, 2, n).astype(np.int64))
"""
        p = subprocess.run([TORCH_PY, "-c", make], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        # sparse_tokens: an EmbeddingBag(sparse=True), whose sparse gradient trains as a dense tensor.
        cases = {"tabular": ("x", "classes"), "regressor": ("x", "targets"), "tokens": ("tokens", "parity"),
                 "sparse_tokens": ("tokens", "parity")}
        for model, (features, labels) in cases.items():
            with self.subTest(model):
                data = [f"--train_data={d}/{features}.npy", f"--train_labels={d}/{labels}.npy",
                        f"--test_data={d}/{features}.npy", f"--test_labels={d}/{labels}.npy", "--train_limit=0",
                        "--test_limit=0"]
                results = [self.run_model(f"{model}-w{w}", model, w, extra=data)[2] for w in (1, 2)]
                self.assertEqual(results[0]["steps"], 24)
                self.assertEqual(results[0]["params_sha256"], results[1]["params_sha256"])
                self.assertEqual(results[0]["test_loss"], results[1]["test_loss"])
                self.assertTrue(results[0]["test_loss"] > 0, results[0])

    def test_b_a_join_and_a_sigkill_mid_run_change_no_bit(self):
        # The join and the kill are placed by holds (harness): the job's 24 steps are enough.
        reference = self.reference()
        d = self.run_dir("job")
        cmd = [LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d, "--",
               f"--model={self.model('net')}", *JOB, "--heartbeat_timeout_ms=1500"]
        result = self.run_with_join_and_sigkill(d, cmd)
        self.assertGreaterEqual(result["workers_seen"], 3)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(d))
        self.assertEqual(result["buffers_sha256"], reference["buffers_sha256"])

    def test_c_a_torchvision_model_gives_the_same_digest_on_two_placements(self):
        if not os.path.exists(self.model("shufflenet")):
            skip_or_fail(self, "no python3-torchvision")
        extra = ["--virtual_workers=4", "--batch_per_vw=4", "--steps=4", "--test_limit=100"]
        _, _, a = self.run_model("tv-w1", "shufflenet", 1, extra)
        _, _, b = self.run_model("tv-w2", "shufflenet", 2, extra)
        self.assertEqual(a["params_sha256"], b["params_sha256"])
        self.assertEqual(a["buffers_sha256"], b["buffers_sha256"])
        self.assertNotEqual(a["buffers_sha256"], EMPTY_SHA256)

    def test_d_the_exports_load_in_python_and_give_the_jobs_evaluation(self):
        _, _, r = self.net(2)  # test_a's job on 2 workers
        d = self.shared_dir("net-w2")
        for name in ("model.safetensors", "model.pt", "model.script.pt"):
            self.assertTrue(os.path.exists(os.path.join(d, name)), name)
        # In Python: torch.load(model.pt) into the original module, torch.jit.load(model.script.pt) as it is.
        check = os.path.join(HERE, "check_exports.py")
        p = subprocess.run([TORCH_PY, check, d, os.path.join(DATA, "t10k-images-idx3-ubyte.gz"),
                            os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"), "500", "100"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        self.assertEqual(got["state_dict_keys"][:2], ["conv1.weight", "conv1.bias"])
        self.assertIn("bn1.running_mean", got["state_dict_keys"])
        self.assertEqual(got["count"], 500)
        # The same predictions as the job's evaluation: the same accuracy exactly, the same loss (summed the same
        # way up to the order of the slices' sums).
        self.assertEqual(got["correct"] / got["count"], r["test_accuracy"])
        self.assertAlmostEqual(got["loss_sum"] / got["count"], r["test_loss"], places=5)
        self.assertTrue(got["scripted_outputs_equal"], "the scripted export computes other outputs")
        # A built-in model's job exports model.pt too, and no scripted module.
        _, _, _ = self.run_local("builtin", MLP, workers=1, extra=["--steps=5"])
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "builtin", "model.pt")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "builtin", "model.script.pt")))

    def coordinator_exit(self, name, *flags):
        d = self.run_dir(name)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("t\n")
        p = subprocess.run([os.path.join(BIN, "coordinator"), f"--flagfile={MLP}", f"--run_dir={d}",
                            f"--token_file={token}", *flags], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        return p.returncode, p.stdout

    def test_e_a_file_that_is_no_torchscript_module_is_refused_at_the_start(self):
        junk = os.path.join(self.tmp, "junk.pt")
        with open(junk, "wb") as f:
            f.write(os.urandom(4096))
        for name, path in (("state-dict", self.model("state_dict")), ("junk", junk),
                           ("missing", os.path.join(self.tmp, "nothing.pt"))):
            rc, out = self.coordinator_exit(name, f"--model={path}")
            self.assertEqual(rc, 2, out)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, name, "result.json")))
        rc, out = self.coordinator_exit("pinned", f"--model={self.model('net')}", "--model_sha256=" + "0" * 64)
        self.assertEqual(rc, 2, out)

    def test_f_a_model_that_does_not_fit_the_data_fails_the_job_naming_the_cause(self):
        for model, cause in (("bad_shape", "forward fails"), ("nonscalar_loss", "not a scalar"),
                             ("five_classes", "labels out of range")):
            rc, _, result = self.run_model(model, model, 1, expect_ok=False, timeout=180)
            d = os.path.join(self.tmp, model)
            self.assertNotEqual(rc, 0, model)
            self.assertIsNone(result, model)
            failed = read_events(d, "job_failed")
            self.assertEqual(len(failed), 1, f"{model}: {logs(d)}")
            self.assertEqual(failed[0]["code"], "FAILED_PRECONDITION", failed[0])  # the job cannot run
            self.assertIn(cause, failed[0]["error"], failed[0])
            self.assertEqual(read_events(d, "model_accepted"), [], model)
            # The servers were not the ones that failed: every shard left cleanly.
            for name in os.listdir(os.path.join(d, "logs")):
                if name.startswith("shard"):
                    with open(os.path.join(d, "logs", name), errors="replace") as f:
                        self.assertNotIn("Check failed", f.read(), name)

    def test_g_a_nondeterministic_module_is_warned_of_in_the_workers_report(self):
        _, _, r = self.run_model("nondet", "nondeterministic", 1, ["--steps=2"])
        self.assertIsNotNone(r)
        report = read_report(os.path.join(self.tmp, "nondet", "logs", "worker0.json"))
        self.assertTrue(any(w.startswith("nondeterministic module") for w in report["warnings"]), report)
        # The deterministic Net (the reference's job) is warned of nothing.
        self.reference()
        report = read_report(os.path.join(self.shared_dir("net-w1"), "logs", "worker0.json"))
        self.assertEqual(report["warnings"], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
