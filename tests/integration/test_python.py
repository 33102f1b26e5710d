"""The Python package (python/elasticps, docs/python.md): Trainer.fit runs the job `elasticps train` runs, to the
same digest in every placement; its Run's history, model, evaluate and predict are the run folder's and the command
line's numbers; bad arguments raise before any process starts, a failed job raises its reason, and no process
outlives an exception or Ctrl-C; Job controls a running job and lends it workers, and fit(coordinator=...) joins one.
Run by pytest (ctest: `python3 -m pytest`), unittest-style."""
import concurrent.futures
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn

from harness import (BIN, ENV, ROOT, RunDirTest, poll_until, read_events, read_metrics, read_result, wait_for_event,
                     wait_for_file)
from python_helper import OPTIONS, fashion_mnist, net

sys.path.insert(0, os.path.join(ROOT, "python"))
import elasticps  # noqa: E402
from elasticps._process import live_processes  # noqa: E402  (the package's reader of /proc)

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "python_helper.py")
ELASTICPS = os.path.join(BIN, "elasticps")
STEPS = 6
ADDR = "tcp://127.0.0.1:1"  # an endpoint for the arguments that are refused before anything reaches it
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

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("EPS_KEEP"):
            shutil.rmtree(cls.shared, ignore_errors=True)

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
        p = subprocess.run(self.cli_job(d, os.path.join(d, "run")), env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout)
        cli = read_result(os.path.join(d, "run"))
        self.assertEqual(cli["params_sha256"], ref.digest)
        self.assertEqual(cli["test_accuracy"], ref.test_accuracy)

    def cli_job(self, d, run_dir):
        """`elasticps train` of the reference's job, its module and arrays written to files in d by hand."""
        torch.jit.script(net()).save(os.path.join(d, "net.pt"))
        files = {}
        for name, array in (("x", self.x), ("y", self.y), ("tx", self.tx), ("ty", self.ty)):
            files[name] = os.path.join(d, name + ".npy")
            np.save(files[name], array)
        return [ELASTICPS, "train", "--run-dir", run_dir, "--workers", "1", f"--model={d}/net.pt",
                f"--train-data={files['x']}", f"--train-labels={files['y']}", f"--test-data={files['tx']}",
                f"--test-labels={files['ty']}", *CLI_FLAGS]

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
            # Joining a running job (fit(coordinator=...)): the job's shape is its coordinator's.
            "servers for a joined job": lambda: self.trainer.fit(coordinator=ADDR, token="t", servers=2, run_dir=d),
            "data for a joined job": lambda: self.trainer.fit((x, y), coordinator=ADDR, token="t", run_dir=d),
            "steps for a joined job": lambda: self.trainer.fit(coordinator=ADDR, token="t", steps=3, run_dir=d),
            "a launcher option for a joined job": lambda: self.trainer.fit(coordinator=ADDR, token="t", run_dir=d,
                                                                           supervise=True),
            "a coordinator without its token": lambda: self.trainer.fit(coordinator=ADDR, run_dir=d),
            "a token and a token file": lambda: self.trainer.fit(coordinator=ADDR, token="t", token_file=HELPER,
                                                                 run_dir=d),
            "a token without a coordinator": lambda: self.trainer.fit(token="t", run_dir=d),
            "a missing token file": lambda: self.trainer.fit(coordinator=ADDR, token_file=os.path.join(self.tmp, "no"),
                                                             run_dir=d),
            "a coordinator that is no endpoint": lambda: self.trainer.fit(coordinator="127.0.0.1:4000", token="t",
                                                                          run_dir=d),
            "no workers for a joined job": lambda: self.trainer.fit(coordinator=ADDR, token="t", workers=0,
                                                                    run_dir=d),
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
        self.assertIn("servers=", messages["servers for a joined job"])
        self.assertIn("not an endpoint", messages["a coordinator that is no endpoint"])

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
                lent = lender.wait(timeout=60)  # a job known by its coordinator: the lent workers' end
                self.assertEqual([w["outcome"] for w in lent.workers], ["done"])
                self.assertEqual(lender.processes(), [])
        self.assertEqual(run.digest, self.reference.digest)
        # The step after the hold ran on both workers; later ones may not (the speed-aware planner may take a worker
        # it measured slow off the plan).
        after = [e for e in run.events("step_completed") if e["step"] >= 2]
        self.assertTrue(after and len(after[0]["ranges"]) == 2, after)
        self.assertEqual(processes_naming(d), [])

    def test_fit_joins_a_running_job_by_its_coordinator_or_its_run_folder(self):
        # The reference's job, started by the command line and held at step 2: it cannot end before the lent
        # workers are in.
        d = self.run_dir("joined")
        job_dir = os.path.join(d, "job")
        job = self.start(self.cli_job(d, job_dir), os.path.join(d, "train.out"))
        addr = wait_for_file(os.path.join(job_dir, "coordinator.addr"), timeout=60, proc=job)
        self.assertEqual(self.control(job_dir, "hold", "--from-step=2")["hold_from"], 2)
        wait_for_event(job_dir, "paused", lambda e: e["cause"] == "hold", timeout=120, proc=job)
        with open(os.path.join(job_dir, "token")) as f:
            token = f.read()
        # A wrong token: the lent worker is refused, and fit says why.
        with self.assertRaises(elasticps.WorkerError) as caught:
            elasticps.Trainer(net(), **OPTIONS).fit(coordinator=addr, token="not-the-token",
                                                    run_dir=os.path.join(d, "refused"), progress=False)
        self.assertIn("token", caught.exception.message)
        self.assertEqual(processes_naming(os.path.join(d, "refused")), [])
        # Two joiners (as two hosts would): by the endpoint and the token's text, and by the run folder.
        lent = os.path.join(d, "lent")
        by_endpoint = elasticps.Trainer(net(), **OPTIONS)
        by_folder = elasticps.Trainer(net(), **OPTIONS)
        pool = concurrent.futures.ThreadPoolExecutor(2)
        try:
            joined_f = pool.submit(by_endpoint.fit, coordinator=addr, token=token, run_dir=lent, progress=False)
            run_f = pool.submit(by_folder.fit, coordinator=job_dir, progress=False)
            poll_until(lambda: True if len(read_events(job_dir, "worker_ready")) >= 3 else None, 120,
                       "the lent workers are not ready")
            self.control(job_dir, "release")
            joined, run = joined_f.result(timeout=300), run_f.result(timeout=300)
        finally:
            if job.poll() is None and not (joined_f.done() and run_f.done()):
                job.terminate()  # the job's end ends the lent workers, and with them the fits
            pool.shutdown(wait=True)
        self.assertEqual(job.wait(timeout=60), 0)
        # The job ends on the undisturbed digest; step 2, the first after the release, ran on the three workers (the
        # planner may move VWs between them afterwards, as they report their speeds).
        self.assertEqual(read_result(job_dir)["params_sha256"], self.reference.digest)
        resumed = [e for e in read_events(job_dir, "step_completed") if e["step"] == 2]
        self.assertEqual([len(e["ranges"]) for e in resumed], [3], resumed)
        # By its run folder: the job's Run, with the Trainer's module.
        self.assertIsInstance(run, elasticps.Run)
        self.assertEqual(run.digest, self.reference.digest)
        self.assertEqual(run.test_accuracy, self.reference.test_accuracy)
        self.assertIsInstance(run.model(), type(net()))
        with open(os.path.join(job_dir, "logs", "attached-py0.json")) as f:
            self.assertEqual(json.load(f)["outcome"], "done")  # the lent worker's report, in the job's logs/
        # By its endpoint: what the coordinator said while the job ran and the lent worker's report.
        self.assertIsInstance(joined, elasticps.JoinedRun)
        self.assertIsNone(joined.digest)
        self.assertEqual(joined.status["steps"], STEPS)
        self.assertGreaterEqual(joined.status["step"], 2)
        self.assertEqual([(w["outcome"], w["error"]) for w in joined.workers], [("done", "")])
        self.assertGreater(joined.workers[0]["train_plans"], 0)
        self.assertEqual(joined.log_dir, lent)
        self.assertTrue(os.path.exists(os.path.join(lent, "attached-py0.log")))
        with self.assertRaises(elasticps.JobError):
            by_endpoint.evaluate((self.tx, self.ty))  # the model is in the job's run folder, not here
        # No process left: the job's, the lent workers', this process's children.
        self.assertEqual(processes_naming(job_dir), [])
        self.assertEqual(processes_naming(addr), [])
        self.assertEqual(children(), [])


if __name__ == "__main__":
    unittest.main()
