"""Elastic membership: workers join, leave and crash mid-training without changing a bit.

Each scenario runs the mlp job long enough for the events to land mid-run and
compares its params_sha256 with the undisturbed 1x8 run of the same job.
"""
import os
import signal
import subprocess
import time
import unittest

from harness import ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_result, wait_for_file, wait_for_line, wait_for_step

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
STEPS = 1200
EXTRA = [f"--steps={STEPS}", "--heartbeat_timeout_ms=1500", "--test_limit=-1"]
_reference = {}


class ElasticRun(RunDirTest):
    def reference(self):
        if "digest" not in _reference:
            _, _, r = self.run_local("reference", MLP, servers=2, workers=1, extra=EXTRA)
            _reference["digest"] = r["params_sha256"]
        return _reference["digest"]

    def start_job(self, workers):
        self.dir = self.run_dir("job")
        cmd = [LOCAL, "--job", MLP, "--servers", "2", "--workers", str(workers), "--run-dir", self.dir, "--"] + EXTRA
        self.log = open(os.path.join(self.tmp, "local.out"), "w")
        self.job = subprocess.Popen(cmd, env=ENV, stdout=self.log, stderr=subprocess.STDOUT)
        self.procs.append(self.job)
        self.addr = wait_for_file(os.path.join(self.dir, "coordinator.addr"), proc=self.job)
        self.coord_log = os.path.join(self.dir, "logs", "coordinator.log")

    def attach(self, name, token=None):
        token = token or os.path.join(self.dir, "token")
        log = os.path.join(self.dir, "logs", f"{name}.log")
        p = subprocess.Popen([ATTACH, "--coordinator", self.addr, "--token-file", token, "--log", log], env=ENV)
        self.procs.append(p)
        return p, log

    def worker_pid(self, i):
        with open(os.path.join(self.dir, "pids", f"worker{i}.pid")) as f:
            return int(f.read())

    def finish(self, min_workers_seen=None):
        rc = self.job.wait(timeout=600)
        self.log.close()
        self.assertEqual(rc, 0, logs(self.dir))
        result = read_result(self.dir)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], self.reference(), logs(self.dir))
        if min_workers_seen is not None:
            self.assertGreaterEqual(result["workers_seen"], min_workers_seen)
        return result

    def coordinator_log(self):
        with open(self.coord_log, errors="replace") as f:
            return f.read()


class Elasticity(ElasticRun):
    def test_a_workers_attach_during_the_run(self):
        self.start_job(workers=1)
        wait_for_step(self.coord_log, 1)
        self.attach("attached1")
        wait_for_line(self.coord_log, "assignment epoch 2", timeout=120)
        self.attach("attached2")
        wait_for_line(self.coord_log, "assignment epoch 3", timeout=120)
        self.finish(min_workers_seen=3)

    def test_b_sigterm_leaves_gracefully(self):
        self.start_job(workers=3)
        wait_for_step(self.coord_log, 1)
        pid = self.worker_pid(1)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        while time.monotonic() - t0 < 10:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        self.assertLess(time.monotonic() - t0, 10, "the worker did not exit after SIGTERM")
        wait_for_line(os.path.join(self.dir, "logs", "worker1.log"), "leaves the job", timeout=10)
        self.finish()
        self.assertIn("left (", self.coordinator_log())

    def test_c_sigkill_mid_step_is_recomputed(self):
        self.start_job(workers=3)
        wait_for_step(self.coord_log, 1)
        os.kill(self.worker_pid(1), signal.SIGKILL)
        wait_for_line(self.coord_log, "missed heartbeats", timeout=60)
        self.finish()

    def test_d_all_workers_killed_job_pauses_and_resumes(self):
        self.start_job(workers=2)
        wait_for_step(self.coord_log, 1)
        for i in range(2):
            os.kill(self.worker_pid(i), signal.SIGKILL)
        wait_for_line(self.coord_log, "paused at step", timeout=60)
        self.attach("fresh")
        wait_for_line(self.coord_log, "resumed at step", timeout=120)
        self.finish()

    def test_e_wrong_token_is_refused_and_the_job_is_unaffected(self):
        self.start_job(workers=1)
        wait_for_step(self.coord_log, 1)
        bad = os.path.join(self.tmp, "bad-token")
        with open(bad, "w") as f:
            f.write("not-the-token\n")
        p, log = self.attach("intruder", token=bad)
        self.assertNotEqual(p.wait(timeout=60), 0)
        with open(log) as f:
            self.assertIn("wrong job token", f.read())
        result = self.finish()
        self.assertEqual(result["workers_seen"], 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
