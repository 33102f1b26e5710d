"""Device kinds: a job takes workers of one kind (cpu, or one GPU model) unless it allows mixed devices.

A CPU-only test: the second worker claims another kind with the worker's testing aid
--reported_device_kind (what it computes is unchanged)."""
import os
import subprocess

from harness import BIN, ENV, LOCAL, MLP, RunDirTest, read_events, read_report, read_result, wait_for_file, wait_for_step

STEPS = 120


class MixedDevices(RunDirTest):
    def start_job(self, name, extra=()):
        d = self.run_dir(name)
        # Slowed down so that the job is still running when the second worker comes.
        job = self.start([LOCAL, "--job", MLP, "--workers", "1", "--slowdowns", "8", "--run-dir", d, "--",
                          f"--steps={STEPS}", *extra], os.path.join(self.tmp, name + ".out"))
        wait_for_step(d, 1, proc=job)
        return d, job

    def attach(self, d, kind):
        addr = wait_for_file(os.path.join(d, "coordinator.addr"))
        return subprocess.run([os.path.join(BIN, "worker"), f"--coordinator={addr}", f"--token_file={d}/token",
                               f"--reported_device_kind={kind}", f"--report_file={d}/attached.json"],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)

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
        self.assertEqual(job.wait(timeout=300), 0)
        r = read_result(d)
        self.assertEqual(r["params_sha256"], ref["params_sha256"])
        self.assertEqual(r["workers_seen"], 1)

    def test_a_job_that_allows_mixed_devices_takes_the_worker(self):
        d, job = self.start_job("allowed", extra=["--allow_mixed_devices"])
        p = self.attach(d, "cuda:NVIDIA H200")
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertEqual(read_report(f"{d}/attached.json")["outcome"], "done")
        self.assertEqual(job.wait(timeout=300), 0)
        self.assertEqual(read_result(d)["workers_seen"], 2)
        self.assertEqual(read_events(d, "worker_refused"), [])
        self.assertIn("cuda:NVIDIA H200", [e["device_kind"] for e in read_events(d, "worker_joined")])


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
