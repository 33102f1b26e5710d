"""CPU kernel sets: a job pins the math kernels of its CPU workers (common/cpu_kernels.h), so that hosts of other CPU
generations, or with other environments, train on the same bits.

OpenBLAS takes its kernels from OPENBLAS_CORETYPE when it loads: a worker whose environment names another core
computes other gradient bits unless the worker sets the job's set and executes itself again. Nehalem and Haswell both
run on any x86-64 host with AVX2, so the test runs on every host the default set runs on."""
import os
import subprocess

from harness import (BARE_ENV, BIN, LOCAL, MLP, RunDirTest, read_events, read_report, read_result, read_text,
                     wait_for_event, wait_for_file, worker_ids_of_pid)

STEPS = 100


def env_with(**values):
    """The environment of a user's shell (BARE_ENV: no kernel set selected yet, unlike the other tests' ENV) with
    these variables set (None: removed)."""
    env = dict(BARE_ENV)
    for k, v in values.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


class CpuKernels(RunDirTest):
    def start_held(self, name, env, extra=()):
        """Starts the job on one worker with `env`, held (elasticps hold) at step 2, so that it still runs when
        the next worker comes, however fast the host; returns (run dir, local.sh's process)."""
        d = self.run_dir(name)
        log = open(os.path.join(self.tmp, name + ".out"), "w")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--workers", "1", "--run-dir", d, "--", f"--steps={STEPS}",
                                *extra], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        self.control(d, "hold", "--from-step=2")  # placed before the job can get there
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=job)
        return d, job

    def attach(self, d, env, *flags, name="attached"):
        """Starts one more worker of the job in d with `env`; returns its process."""
        addr = wait_for_file(os.path.join(d, "coordinator.addr"))
        log = open(f"{d}/{name}.log", "w")
        p = subprocess.Popen([os.path.join(BIN, "worker"), f"--coordinator={addr}", f"--token_file={d}/token",
                              f"--report_file={d}/{name}.json", *flags], env=env, stdout=log,
                             stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def test_workers_whose_environments_ask_for_other_kernels_end_on_the_one_worker_digest(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[f"--steps={STEPS}"], env=BARE_ENV)
        self.assertEqual(ref["cpu_kernels"], "x86-64-v3")
        # Without the pin these two would compute with OpenBLAS's Nehalem and Haswell kernels: other bits.
        d, job = self.start_held("mixed", env_with(OPENBLAS_CORETYPE="Nehalem", ATEN_CPU_CAPABILITY="default"))
        p = self.attach(d, env_with(OPENBLAS_CORETYPE="Haswell", ATEN_CPU_CAPABILITY=None, ONEDNN_MAX_CPU_ISA=None))
        wait_for_event(d, "worker_ready", lambda e: e["worker"] in worker_ids_of_pid(d, p.pid), timeout=120, proc=job)
        status = self.control(d, "status")
        self.assertEqual(status["cpu_kernels"], "x86-64-v3")
        self.assertEqual(sorted(w["cpu_kernels"] for w in status["workers"] if w["state"] == "ready"),
                         ["x86-64-v3", "x86-64-v3"], status["workers"])
        self.control(d, "release")
        self.assertEqual(p.wait(timeout=300), 0, read_text(f"{d}/attached.log"))
        self.assertEqual(job.wait(timeout=300), 0)
        r = read_result(d)
        self.assertEqual(r["workers_seen"], 2)
        self.assertEqual(read_events(d, "worker_refused"), [])
        # Both computed: the attached worker's ranges were confirmed in some step.
        self.assertGreater(read_report(f"{d}/attached.json")["train_plans"], 0)
        self.assertEqual(read_report(f"{d}/attached.json")["cpu_kernels"], "x86-64-v3")
        self.assertEqual(read_report(f"{d}/logs/worker0.json")["cpu_kernels"], "x86-64-v3")
        self.assertEqual(r["params_sha256"], ref["params_sha256"])

    def test_a_worker_that_cannot_apply_the_kernels_is_refused_and_the_job_goes_on(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[f"--steps={STEPS}"], env=BARE_ENV)
        d, job = self.start_held("refused", BARE_ENV)
        # As on a host whose CPU cannot run the job's set: the worker applies none and says what it runs.
        p = self.attach(d, env_with(OPENBLAS_CORETYPE="Nehalem"), "--testing_skip_cpu_kernels")
        self.assertEqual(p.wait(timeout=120), 5, read_text(f"{d}/attached.log"))
        refused = read_events(d, "worker_refused")
        self.assertEqual([e["cause"] for e in refused], ["cpu_kernels"], refused)
        self.assertIn("x86-64-v3", refused[0]["error"])
        self.assertIn("Nehalem", refused[0]["error"])
        report = read_report(f"{d}/attached.json")
        self.assertEqual(report["outcome"], "failed", report)
        self.assertIn("cpu kernels mismatch", report["error"])
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=300), 0)
        self.assertEqual(read_result(d)["params_sha256"], ref["params_sha256"])

    def test_a_job_of_another_set_runs_its_workers_again_with_it_and_keeps_one_digest(self):
        flags = [f"--steps={STEPS}", "--cpu_kernels=x86-64-v2"]
        _, _, one = self.run_local("v2x1", MLP, workers=1, extra=flags, env=BARE_ENV)
        _, _, two = self.run_local("v2x2", MLP, workers=2, extra=flags, env=BARE_ENV)
        self.assertEqual((one["cpu_kernels"], two["cpu_kernels"]), ("x86-64-v2", "x86-64-v2"))
        self.assertEqual(one["params_sha256"], two["params_sha256"])
        d = os.path.join(self.tmp, "v2x2")
        for i in (0, 1):
            self.assertEqual(read_report(f"{d}/logs/worker{i}.json")["cpu_kernels"], "x86-64-v2")
        # Each worker registered under the default set first, left, and came back with the job's.
        left = [e for e in read_events(d, "worker_left") if "x86-64-v2" in e["reason"]]
        self.assertEqual(len(left), 2, read_events(d, "worker_left"))
        self.assertFalse(any(e["host_fault"] for e in left), left)
        self.assertEqual(read_events(d, "worker_refused"), [])


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
