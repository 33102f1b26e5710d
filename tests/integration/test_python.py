"""The Python package (python/elasticps, docs/python.md): Trainer.fit runs the job `elasticps train` runs, to the
same digest in every placement; its Run's history, model, evaluate and predict are the run folder's and the command
line's numbers; bad arguments raise before any process starts, a failed job raises its reason, and no process
outlives an exception or Ctrl-C; Job controls a running job and lends it workers."""
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn

from harness import BIN, ENV, ROOT, RunDirTest, poll_until, read_events, read_metrics, read_result, wait_for_event
from python_helper import OPTIONS, fashion_mnist, net

sys.path.insert(0, os.path.join(ROOT, "python"))
import elasticps  # noqa: E402
from elasticps._process import live_processes  # noqa: E402  (the package's reader of /proc)

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "python_helper.py")
ELASTICPS = os.path.join(BIN, "elasticps")
STEPS = 6
# The CLI spelling of OPTIONS, with Trainer's default --threads and --lr_schedule unset.
CLI_FLAGS = ["--optimizer=adamw", "--lr=0.002", "--weight-decay=0.0001", "--virtual-workers=4", "--batch-per-vw=16",
             "--seed=3", "--eval-batch=100", "--threads=1", f"--steps={STEPS}"]


def processes_naming(text):
    """The pids of live processes (not this one) whose command line holds `text` (a run folder)."""
    return [p.pid for p in live_processes(cmdline=True) if text in p.cmdline and p.pid != os.getpid()]


def children():
    """This process's live children (a zombie, not yet reaped, is no process left running)."""
    return [p.pid for p in live_processes() if p.ppid == os.getpid()]


class Unscriptable(nn.Module):
    def forward(self, x):
        return x.numpy()


class Python(RunDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="eps-py-")
        cls.x, cls.y = fashion_mnist("train", 640)
        cls.tx, cls.ty = fashion_mnist("test", 200)
        cls.trainer = elasticps.Trainer(net(), **OPTIONS)
        cls.reference = cls.trainer.fit((cls.x, cls.y), test=(cls.tx, cls.ty), steps=STEPS, workers=1,
                                        run_dir=os.path.join(cls.shared, "reference"), progress=False)

    def test_fit_gives_the_clis_digest_on_one_and_on_two_workers_and_shards(self):
        ref = self.reference
        self.assertEqual(ref.result["steps"], STEPS)
        self.assertEqual(len(ref.digest), 64)
        self.assertIsNotNone(ref.test_accuracy)
        # Two workers and two shards (another Trainer: self.trainer's newest run stays the reference): the same bits.
        two = elasticps.Trainer(net(), **OPTIONS).fit((self.x, self.y), test=(self.tx, self.ty), steps=STEPS, workers=2, servers=2,
                               run_dir=self.run_dir("two"), progress=False)
        self.assertEqual(two.digest, ref.digest)
        self.assertEqual({len(e["ranges"]) for e in two.events("step_completed")}, {2})
        # The command line, given the same module and arrays by hand.
        d = self.run_dir("cli")
        torch.jit.script(net()).save(os.path.join(d, "net.pt"))
        files = {}
        for name, array in (("x", self.x), ("y", self.y), ("tx", self.tx), ("ty", self.ty)):
            files[name] = os.path.join(d, name + ".npy")
            np.save(files[name], array)
        p = subprocess.run([ELASTICPS, "train", "--run-dir", os.path.join(d, "run"), "--workers", "1",
                            f"--model={d}/net.pt", f"--train-data={files['x']}", f"--train-labels={files['y']}",
                            f"--test-data={files['tx']}", f"--test-labels={files['ty']}", *CLI_FLAGS],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout)
        cli = read_result(os.path.join(d, "run"))
        self.assertEqual(cli["params_sha256"], ref.digest)
        self.assertEqual(cli["test_accuracy"], ref.test_accuracy)

    def test_history_is_metrics_csv_and_the_model_gives_the_test_accuracy_in_python(self):
        ref = self.reference
        rows = read_metrics(ref.run_dir)
        self.assertEqual(len(rows), STEPS)
        self.assertEqual(ref.history_rows(), rows)
        history = ref.history
        if isinstance(history, list):
            self.assertEqual(history, rows)
        else:  # pandas
            self.assertEqual(history.to_dict("records"), rows)
        self.assertEqual([e["step"] for e in ref.events("step_completed")], list(range(STEPS)))
        # run.model() in Python, with the job's CPU kernels, counts what the job counted.
        kernels = subprocess.run([ELASTICPS, "kernels"], env=ENV, stdout=subprocess.PIPE, text=True, timeout=30)
        env = dict(ENV, OPENBLAS_NUM_THREADS="1", **dict(line.split("=", 1) for line in kernels.stdout.split()))
        tx, ty = os.path.join(self.tmp, "tx.npy"), os.path.join(self.tmp, "ty.npy")
        np.save(tx, self.tx)
        np.save(ty, self.ty)
        p = subprocess.run(["/usr/bin/python3", HELPER, "accuracy", ref.run_dir, tx, ty, "100"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["accuracy"], ref.test_accuracy)
        module = ref.model()
        self.assertIsInstance(module, type(net()))
        self.assertEqual(sorted(module.state_dict()), sorted(ref.state_dict()))

    def test_predict_and_evaluate_are_the_command_lines(self):
        ref = self.reference
        probs = self.trainer.predict(self.tx)
        self.assertEqual(probs.shape, (200, 10))
        self.assertEqual(probs.dtype, np.float32)
        d = self.run_dir("predict")
        np.save(os.path.join(d, "tx.npy"), self.tx)
        out = os.path.join(d, "p.csv")
        p = subprocess.run([ELASTICPS, "predict", "--model", os.path.join(ref.run_dir, "model.script.pt"),
                            "--data", os.path.join(d, "tx.npy"), "--out", out], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(out, newline="") as f:
            rows = list(csv.reader(f))[1:]
        self.assertEqual(len(rows), 200)
        for i, row in enumerate(rows):
            self.assertEqual(int(row[1]), int(np.argmax(probs[i])), f"row {i}")
            self.assertEqual([np.float32(v) for v in row[2:]], list(probs[i]), f"row {i}")
        # evaluate at the job's batch: the job's own numbers.
        ev = self.trainer.evaluate((self.tx, self.ty), batch=100)
        self.assertEqual((ev["count"], ev["accuracy"]), (200, ref.test_accuracy))
        self.assertAlmostEqual(ev["loss"], ref.test_loss, places=5)

    def test_bad_arguments_raise_before_any_process_starts(self):
        d = os.path.join(self.tmp, "never")
        x, y = self.x, self.y
        cases = {
            "unknown option": lambda: elasticps.Trainer(net(), stepz=3),
            "a value of the wrong type": lambda: elasticps.Trainer(net(), lr="fast"),
            "a flag the launcher sets": lambda: elasticps.Trainer(net(), shards=2),
            "unscriptable module": lambda: elasticps.Trainer(Unscriptable()),
            "fewer labels than samples": lambda: self.trainer.fit((x, y[:-1]), steps=1, run_dir=d),
            "images of the wrong shape": lambda: self.trainer.fit((x[:, :, :27], y), steps=1, run_dir=d),
            "a class the model does not have": lambda: self.trainer.fit((x, y + 5), steps=1, run_dir=d),
            "test samples of another shape": lambda: self.trainer.fit((x, y), test=(x[:, 0], y), steps=1, run_dir=d),
            "a missing file": lambda: self.trainer.fit(os.path.join(self.tmp, "none.csv"), steps=1, run_dir=d),
            "an unknown launcher option": lambda: self.trainer.fit((x, y), steps=1, run_dir=d, supervize=True),
        }
        messages = {}
        for what, call in cases.items():
            with self.subTest(what):
                with self.assertRaises(elasticps.ArgumentError) as caught:
                    call()
                messages[what] = str(caught.exception)
                self.assertFalse(os.path.exists(d), "a run folder was made")
                self.assertEqual(children(), [])
        self.assertIn("--stepz", messages["unknown option"])
        self.assertIn("steps", messages["unknown option"])  # the suggestion
        self.assertIsInstance(elasticps.ScriptError("x"), elasticps.ArgumentError)
        self.assertIn("numpy", messages["unscriptable module"])  # TorchScript's message names the line
        self.assertIn("639 labels for 640 samples", messages["fewer labels than samples"])
        self.assertIn("class 14", messages["a class the model does not have"])

    def test_a_failed_job_raises_its_reason_and_leaves_no_process(self):
        d = self.run_dir("frozen")
        with self.assertRaises(elasticps.JobFailedError) as caught:
            elasticps.Trainer(net(), **OPTIONS, freeze="^nothing").fit((self.x, self.y), steps=2, run_dir=d,
                                                                      progress=False)
        self.assertIn("--freeze", caught.exception.message)
        self.assertEqual(caught.exception.code, read_events(d, "job_failed")[-1]["code"])
        self.assertEqual(processes_naming(d), [])
        self.assertEqual(children(), [])
        d = self.run_dir("refused")
        with self.assertRaises(elasticps.InvalidJobError) as caught:
            elasticps.Trainer(net(), **dict(OPTIONS, optimizer="adamx")).fit((self.x, self.y), steps=2, run_dir=d,
                                                                              progress=False)
        self.assertIn("adamx", caught.exception.message)
        self.assertEqual(processes_naming(d), [])
        self.assertEqual(children(), [])

    def test_ctrl_c_stops_the_job_and_every_process(self):
        d = self.run_dir("interrupted")
        fit = subprocess.Popen(["/usr/bin/python3", HELPER, "fit", d, "100000"], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        self.procs.append(fit)
        wait_for_event(d, "step_completed", timeout=120, proc=fit)
        self.assertNotEqual(processes_naming(d), [])
        fit.send_signal(signal.SIGINT)
        _, err = fit.communicate(timeout=60)
        self.assertNotEqual(fit.returncode, 0)
        self.assertIn("KeyboardInterrupt", err)
        self.assertEqual(processes_naming(d), [], "processes left behind")
        self.assertIsNone(read_result(d))

    def test_a_job_lends_workers_and_ends_on_the_undisturbed_digest(self):
        d = self.run_dir("attached")
        job = self.trainer.start((self.x, self.y), test=(self.tx, self.ty), steps=STEPS, workers=1, run_dir=d)
        with job:
            self.assertIn("step", job.status())  # (once its coordinator serves)
            # Held from step 2 on, through Job's public constructor on the run folder.
            control = elasticps.Job(d)
            held = control.hold(from_step=2)
            self.assertEqual(held["hold_from"], 2)
            wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=120)
            self.assertEqual(control.status()["step"], 2)
            # A worker lent by a Job that knows only the coordinator and the token's text.
            with open(os.path.join(d, "token")) as token, open(os.path.join(d, "coordinator.addr")) as addr:
                lender = elasticps.Job(addr.read().strip(), token.read())
            with lender:
                self.assertEqual(len(lender.attach(1)), 1)
                poll_until(lambda: True if len(read_events(d, "worker_ready")) >= 2 else None, 120,
                           "the attached worker is not ready")
                control.release()
                run = job.wait()
                self.assertIsNone(lender.wait(timeout=60))
                self.assertEqual(lender.processes(), [])
        self.assertEqual(run.digest, self.reference.digest)
        after = [e for e in run.events("step_completed") if e["step"] >= 2]
        self.assertTrue(after and all(len(e["ranges"]) == 2 for e in after), after)
        self.assertEqual(processes_naming(d), [])


if __name__ == "__main__":
    unittest.main()
