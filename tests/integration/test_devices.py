"""Device kinds: a job takes workers of one kind (cpu, or one GPU model) unless it allows mixed devices.

A CPU-only test: the second worker claims another kind with the worker's testing aid
--reported_device_kind (what it computes is unchanged)."""
import os
import subprocess

from harness import (BIN, ENV, LOCAL, MLP, RunDirTest, read_events, read_report, read_result, read_text,
                     wait_for_event, wait_for_file, worker_ids_of_pid)

STEPS = 120


class MixedDevices(RunDirTest):
    def start_job(self, name, extra=()):
        """Starts the job and holds it (elasticps hold) after its first step, so that it is still running when the
        second worker comes however fast the host runs it; returns (run dir, local.sh's process)."""
        d = self.run_dir(name)
        job = self.start([LOCAL, "--job", MLP, "--workers", "1", "--run-dir", d, "--", f"--steps={STEPS}", *extra],
                         os.path.join(self.tmp, name + ".out"))
        wait_for_event(d, "step_completed", timeout=120, proc=job)  # per step (progress events: once a second)
        self.control(d, "hold")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)
        return d, job

    def worker(self, d, kind):
        """The command line of a worker of the job in d that claims the device `kind`."""
        addr = wait_for_file(os.path.join(d, "coordinator.addr"))
        return [os.path.join(BIN, "worker"), f"--coordinator={addr}", f"--token_file={d}/token",
                f"--reported_device_kind={kind}", f"--report_file={d}/attached.json"]

    def attach(self, d, kind):
        return subprocess.run(self.worker(d, kind), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=120)

    def test_a_worker_of_another_kind_is_refused_and_the_job_goes_on(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[f"--steps={STEPS}"])
        d, job = self.start_job("mixed")
        p = self.attach(d, "cuda:NVIDIA H200")
        self.assertNotEqual(p.returncode, 0, p.stdout)
        refused = read_events(d, "worker_refused")
        self.assertEqual(len(refused), 1, p.stdout)
        self.assertEqual(refused[0]["device_kind"], "cuda:NVIDIA H200")
        self.assertIn("--allow_mixed_devices", refused[0]["error"])
        report = read_report(f"{d}/attached.json")
        self.assertEqual(report["outcome"], "failed", report)
        self.assertIn("--allow_mixed_devices", report["error"])
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=300), 0)
        r = read_result(d)
        self.assertEqual(r["params_sha256"], ref["params_sha256"])
        self.assertEqual(r["workers_seen"], 1)

    def test_a_job_that_allows_mixed_devices_takes_the_worker(self):
        d, job = self.start_job("allowed", extra=["--allow_mixed_devices"])
        p = self.start(self.worker(d, "cuda:NVIDIA H200"), f"{d}/attached.log")
        wait_for_event(d, "worker_ready", lambda e: e["worker"] in worker_ids_of_pid(d, p.pid), timeout=120, proc=job)
        self.control(d, "release")
        self.assertEqual(p.wait(timeout=120), 0, read_text(f"{d}/attached.log"))
        self.assertEqual(read_report(f"{d}/attached.json")["outcome"], "done")
        self.assertEqual(job.wait(timeout=300), 0)
        self.assertEqual(read_result(d)["workers_seen"], 2)
        self.assertEqual(read_events(d, "worker_refused"), [])
        self.assertIn("cuda:NVIDIA H200", [e["device_kind"] for e in read_events(d, "worker_joined")])


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
