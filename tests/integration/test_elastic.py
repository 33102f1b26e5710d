"""Elastic membership: workers join, leave and crash mid-training without changing a bit.

Each scenario places its events mid-run (a join, a refused worker, a host's
failures: with the job held at a step boundary by `elasticps hold`; a leave or a
crash: with a hold ahead, released once it is done, so that a fast host does not
end the job first) and compares its params_sha256, and its training curve in
metrics.csv, with the undisturbed 1x8 run of the same job.
"""
import os
import shutil
import signal
import subprocess
import time
import unittest

from harness import (BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_events, read_metrics, read_report, read_result,
                     read_text, skip_or_fail,
                     wait_for_event, wait_for_file, worker_ids_of_pid)

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
PLOT = os.path.join(ROOT, "scripts", "plot_run.py")
STEPS = 60
EVAL_EVERY = 20
EXTRA = [f"--steps={STEPS}", "--heartbeat_timeout_ms=1500", "--test_limit=500", f"--eval_every={EVAL_EVERY}"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_reference = {}  # the undisturbed run, made once for the module: its digest, metrics.csv rows and files


class ElasticRun(RunDirTest):
    def reference(self):
        if "digest" not in _reference:
            _, _, r = self.run_local("reference", MLP, servers=2, workers=1, extra=EXTRA)
            d = os.path.join(self.tmp, "reference")
            _reference["digest"] = r["params_sha256"]
            _reference["metrics"] = read_metrics(d)
            _reference["files"] = {}
            for name in ("metrics.csv", "events.jsonl"):
                with open(os.path.join(d, name), "rb") as f:
                    _reference["files"][name] = f.read()
        return _reference["digest"]

    def reference_dir(self):
        """A run dir in this test's folder holding the reference's metrics.csv and events.jsonl (the reference ran
        in the folder of the test that needed it first)."""
        self.reference()
        d = self.run_dir("reference")
        for name, data in _reference["files"].items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        return d

    def start_job(self, workers):
        self.dir = self.run_dir("job")
        cmd = [LOCAL, "--job", MLP, "--servers", "2", "--workers", str(workers), "--run-dir", self.dir, "--"] + EXTRA
        self.log = open(os.path.join(self.tmp, "local.out"), "w")
        self.job = subprocess.Popen(cmd, env=ENV, stdout=self.log, stderr=subprocess.STDOUT)
        self.procs.append(self.job)
        self.addr = wait_for_file(os.path.join(self.dir, "coordinator.addr"), proc=self.job)

    def attach(self, name, token=None):
        """Attaches a worker logging to logs/<name>.log, its report to logs/<name>.json; returns (process, log)."""
        token = token or os.path.join(self.dir, "token")
        log = os.path.join(self.dir, "logs", f"{name}.log")
        p = subprocess.Popen([ATTACH, "--coordinator", self.addr, "--token-file", token, "--log", log,
                              "--report-file", log[:-len(".log")] + ".json"], env=ENV)
        self.procs.append(p)
        return p, log

    def worker_pid(self, i):
        with open(os.path.join(self.dir, "pids", f"worker{i}.pid")) as f:
            return int(f.read())

    def finish(self, min_workers_seen=None):
        rc = self.job.wait(timeout=600)
        self.log.close()
        self.assertEqual(rc, 0, logs(self.dir))
        return self.check_end(min_workers_seen)

    def check_end(self, min_workers_seen=None):
        """The ended job's result.json and metrics.csv against the reference's; returns result.json's dict."""
        result = read_result(self.dir)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], self.reference(), logs(self.dir))
        if min_workers_seen is not None:
            self.assertGreaterEqual(result["workers_seen"], min_workers_seen)
        # One metrics.csv row per step, the same training curve (loss, lr, evaluations) as the undisturbed run's.
        rows = read_metrics(self.dir)
        self.assertEqual([r["step"] for r in rows], list(range(1, STEPS + 1)))
        self.assertEqual([r["step"] for r in rows if r["test_accuracy"] is not None],
                         list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)))
        self.assertSameTrainingCurve(rows, _reference["metrics"], "metrics.csv against the reference's:")
        return result

    def wait_for_event(self, kind, predicate=None, timeout=60):
        return wait_for_event(self.dir, kind, predicate, timeout, proc=self.job)

    def hold_after_first_step(self):
        """Holds the job (elasticps hold) at the step boundary after its first step, however fast the host runs its
        steps; returns the step it waits at. `elasticps release` (self.release()) lets it go on."""
        self.wait_for_event("step_completed", timeout=180)  # per step (progress events: once a second)
        self.control(self.dir, "hold")
        return self.wait_for_event("paused", lambda e: e["cause"] == "hold")["step"]

    def hold_ahead(self):
        """Holds the job from its middle step on (elasticps hold --from-step), however far it has come: a leave or a
        crash placed after its first step then lands before its end; self.release() lets it go on (and fails if the
        job is over). Returns the step of the first step_completed event."""
        self.control(self.dir, "hold", f"--from-step={STEPS // 2}")
        return self.wait_for_event("step_completed", timeout=180)["step"]

    def release(self):
        self.control(self.dir, "release")

    def wait_until_ready(self, p):
        """Waits (bounded) until the worker process p (attach.sh execs the worker) is ready for VWs."""
        return self.wait_for_event("worker_ready", lambda e: e["worker"] in worker_ids_of_pid(self.dir, p.pid),
                                   timeout=120)


class Elasticity(ElasticRun):
    def test_a_workers_attach_during_the_run(self):
        self.start_job(workers=1)
        held = self.hold_after_first_step()
        # Each attached worker is in the next assignment epoch (every ready worker is, with or without VWs): the
        # first one in that of the one step the hold is moved on by, the second in the one after the release.
        self.wait_until_ready(self.attach("attached1")[0])
        self.control(self.dir, "hold", f"--from-step={held + 1}")
        self.wait_for_event("assignment", lambda e: len(e["ranges"]) == 2, timeout=120)
        self.wait_until_ready(self.attach("attached2")[0])
        self.release()
        self.wait_for_event("assignment", lambda e: len(e["ranges"]) == 3, timeout=120)
        self.finish(min_workers_seen=3)

    def test_b_sigterm_leaves_gracefully(self):
        self.start_job(workers=3)
        self.hold_ahead()
        pid = self.worker_pid(1)
        ids = worker_ids_of_pid(self.dir, pid)
        self.assertEqual(len(ids), 1, read_events(self.dir, "worker_joined"))
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        while time.monotonic() - t0 < 10:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        self.assertLess(time.monotonic() - t0, 10, "the worker did not exit after SIGTERM")
        # It left gracefully (a leave, not missed heartbeats).
        self.wait_for_event("worker_left", lambda e: e["worker"] in ids, timeout=10)
        report = read_report(os.path.join(self.dir, "logs", "worker1.json"))
        self.assertEqual((report["outcome"], report["worker_ids"]), ("left", sorted(ids)), report)
        self.release()
        self.finish()
        self.assertEqual([e for e in read_events(self.dir, "worker_dead") if e["worker"] in ids], [])

    def test_c_a_worker_attaches_then_one_is_sigkilled_mid_step_and_recomputed(self):
        # Placed by holds (harness): one step on the three (in metrics.csv: a row with workers = 3), then worker1
        # SIGKILLed at a step boundary and the job released at once: the next step is planned with it, and what it
        # would have computed is recomputed once it is declared dead.
        self.dir = self.run_dir("job")
        self.run_with_join_and_sigkill(self.dir, [LOCAL, "--job", MLP, "--servers", "2", "--workers", "2",
                                                  "--run-dir", self.dir, "--"] + EXTRA)
        ids = worker_ids_of_pid(self.dir, self.worker_pid(1))
        self.assertEqual([e["cause"] for e in read_events(self.dir, "worker_dead") if e["worker"] in ids],
                         ["missed_heartbeats"])
        self.check_end(min_workers_seen=3)
        # The training columns matched the reference's (check_end); the placement columns tell what happened.
        rows = read_metrics(self.dir)
        self.assertEqual((rows[0]["workers"], rows[-1]["workers"]), (2, 2))
        self.assertIn(3, {r["workers"] for r in rows})
        for r in (rows[0], rows[-1]):
            self.assertEqual(sum(r["vws_per_worker"].values()), 8, r)
        self.assertFalse(ids & set(rows[-1]["vws_per_worker"]), rows[-1])
        self.assertGreater(len({tuple(r["vws_per_worker"].items()) for r in rows}), 2)
        # The curves of the two runs, drawn over each other.
        png = os.path.join(self.tmp, "curves.png")
        p = subprocess.run([PLOT, self.reference_dir(), self.dir, "--label", "undisturbed", "--label", "elastic",
                            "--out", png], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(png, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(PNG_SIGNATURE) and len(data) > len(PNG_SIGNATURE), data[:16])

    def test_d_all_workers_killed_job_pauses_and_resumes(self):
        self.start_job(workers=2)
        self.hold_ahead()
        for i in range(2):
            os.kill(self.worker_pid(i), signal.SIGKILL)
        self.release()  # if the kills came once it was held, released it has no worker either
        paused = self.wait_for_event("paused", lambda e: e["cause"] == "no_worker")
        self.attach("fresh")
        resumed = self.wait_for_event("resumed", lambda e: e["t"] >= paused["t"], timeout=120)
        self.assertEqual(resumed["step"], paused["step"])
        self.finish()

    def test_e_wrong_token_is_refused_and_the_job_is_unaffected(self):
        self.start_job(workers=1)
        self.hold_after_first_step()
        bad = os.path.join(self.tmp, "bad-token")
        with open(bad, "w") as f:
            f.write("not-the-token\n")
        p, log = self.attach("intruder", token=bad)
        self.assertNotEqual(p.wait(timeout=60), 0)
        report = read_report(log[:-len(".log")] + ".json")
        self.assertEqual(report["outcome"], "failed", report)
        self.assertIn("wrong job token", report["error"])
        self.assertEqual(report["worker_ids"], [])
        self.release()
        result = self.finish()
        self.assertEqual(result["workers_seen"], 1)


    def test_f_a_host_that_cannot_read_the_data_is_backed_off_and_the_job_goes_on(self):
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            skip_or_fail(self, "needs root and unshare(1) for a mount and a UTS namespace")
        self.start_job(workers=1)
        self.hold_after_first_step()
        # A host whose data folder is empty: a mount namespace with a tmpfs over it, and a UTS
        # namespace with a host name of its own (the coordinator backs hosts off by name).
        data = "/usr/share/datasets/fashion-mnist"
        host = "eps-bad-host"

        def attach_bad(name):
            log = os.path.join(self.dir, "logs", f"{name}.log")
            p = subprocess.Popen(["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c",
                                  f'hostname {host} && mount -t tmpfs none {data} && exec "$0" "$@"', ATTACH,
                                  "--coordinator", self.addr, "--token-file", os.path.join(self.dir, "token"),
                                  "--log", log, "--report-file", log[:-len(".log")] + ".json"], env=ENV)
            self.procs.append(p)
            self.assertNotEqual(p.wait(timeout=120), 0)
            report = read_report(log[:-len(".log")] + ".json")
            self.assertEqual(report["outcome"], "failed", report)
            return report

        # Twice it registers, cannot set itself up, and leaves with a host fault...
        for i in range(2):
            report = attach_bad(f"nodata{i}")
            self.assertEqual(len(report["worker_ids"]), 1, report)
            left = self.wait_for_event("worker_left", lambda e: e["worker"] == report["worker_ids"][0], timeout=30)
            self.assertTrue(left["host_fault"], left)
        backed = self.wait_for_event("host_backed_off", lambda e: e["host"] == host, timeout=30)
        self.assertEqual(backed["failures"], 2, backed)
        self.assertGreater(backed["backoff_s"], 0, backed)
        # ... and the third time it is refused at registration: no worker id, no job failure.
        report = attach_bad("nodata2")
        self.assertEqual(report["worker_ids"], [], report)
        refused = self.wait_for_event("worker_refused", lambda e: e["cause"] == "host_backed_off", timeout=30)
        self.assertTrue(refused["host"].startswith(host + ":"), refused)
        self.assertEqual(read_events(self.dir, "job_failed"), [])
        self.release()
        self.finish(min_workers_seen=3)

class NoCoordinator(RunDirTest):
    """A worker pointed at an endpoint nobody serves (a coordinator that ended) gives up after
    --register_timeout_s with exit code 3 (docs/operations.md), directly and through attach.sh."""

    def test_a_worker_nobody_answers_exits_3_after_its_register_timeout(self):
        d = self.run_dir("nobody")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("t\n")
        endpoint = f"ipc://{d}/nobody.sock"
        runs = {
            "worker": [os.path.join(BIN, "worker"), f"--coordinator={endpoint}", f"--token_file={token}",
                       "--register_timeout_s=2", f"--report_file={d}/worker.json"],
            "attach": [ATTACH, "--coordinator", endpoint, "--token-file", token, "--register-timeout", "2",
                       "--log", f"{d}/attach.log", "--report-file", f"{d}/attach.json"],
        }
        for name, cmd in runs.items():
            t0 = time.monotonic()
            p = self.start(cmd, f"{d}/{name}.out")
            self.assertEqual(p.wait(timeout=60), 3, f"{name}: {read_text(f'{d}/{name}.out')}")
            self.assertLess(time.monotonic() - t0, 30, f"{name} did not give up in time")
            report = read_report(f"{d}/{name}.json")
            self.assertEqual((report["outcome"], report["worker_ids"]), ("unreachable", []), report)


class PlotRun(RunDirTest):
    def test_a_dir_without_metrics_csv_or_no_dir_exits_2_without_a_traceback(self):
        empty = self.run_dir("empty")
        with open(os.path.join(empty, "events.jsonl"), "w") as f:
            f.write('{"event":"worker_joined","t":1.0,"worker":0,"host":"h:1","pid":1,"device_kind":"cpu"}\n')
        png = os.path.join(self.tmp, "curves.png")
        for d in (empty, os.path.join(self.tmp, "missing")):
            p = subprocess.run([PLOT, d, "--out", png], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(d, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertFalse(os.path.exists(png))


if __name__ == "__main__":
    unittest.main(verbosity=2)
