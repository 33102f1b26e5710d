"""The inter-job scheduler (pool_scheduler) shares a pool of workers between two
running jobs: the job closest to its end gets the workers first; when it ends,
its workers leave it and attach to the other job. Both jobs end with the digest
of their undisturbed runs, and every decision is logged with its reason."""
import os
import signal
import subprocess
import unittest

from harness import BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_events, read_result, read_text, wait_for_file

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
SHORT, LONG = 300, 3000
EXTRA = ["--test_limit=-1", "--heartbeat_timeout_ms=1500"]


class Pool(RunDirTest):
    def test_workers_move_to_the_other_job_when_the_first_ends_and_digests_stay(self):
        refs = {}
        for name, steps in (("short", SHORT), ("long", LONG)):
            _, _, r = self.run_local(f"ref_{name}", MLP, servers=1, workers=1, extra=[f"--steps={steps}"] + EXTRA)
            refs[name] = r["params_sha256"]

        jobs, dirs = {}, {}
        for name, steps in (("short", SHORT), ("long", LONG)):
            d = self.run_dir(name)
            dirs[name] = d
            jobs[name] = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "1", "--workers", "0", "--run-dir", d,
                                           "--", f"--steps={steps}"] + EXTRA,
                                          env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            self.procs.append(jobs[name])
        jobs_file = os.path.join(self.tmp, "jobs")
        with open(jobs_file, "w") as f:
            for name in ("short", "long"):
                addr = wait_for_file(os.path.join(dirs[name], "coordinator.addr"), proc=jobs[name])
                f.write(f"{name} {addr} {dirs[name]}/token\n")

        sched_log = os.path.join(self.tmp, "scheduler.log")
        sched_dir = self.run_dir("scheduler")  # its decisions: sched_dir/events.jsonl
        sched = self.start([os.path.join(BIN, "pool_scheduler"), f"--jobs={jobs_file}",
                            f"--events_file={sched_dir}/events.jsonl",
                            f"--addr_file={self.tmp}/scheduler.addr", "--round_ms=500", "--worker_timeout_ms=3000"],
                           sched_log)
        addr = wait_for_file(os.path.join(self.tmp, "scheduler.addr"), proc=sched)
        pool = [self.start([ATTACH, "--scheduler", addr], os.path.join(self.tmp, f"pool{i}.log")) for i in range(3)]

        for name in ("short", "long"):
            self.assertEqual(jobs[name].wait(timeout=600), 0, logs(dirs[name]) + (read_text(sched_log) or ""))
        self.assertEqual(sched.wait(timeout=60), 0, read_text(sched_log))  # every job ended
        for p in pool:
            p.send_signal(signal.SIGTERM)
        for i, p in enumerate(pool):
            self.assertEqual(p.wait(timeout=60), 0, read_text(os.path.join(self.tmp, f"pool{i}.log")))

        out = read_text(sched_log)
        decisions = read_events(sched_dir, "decision")
        # Shortest remaining first: the short job got the pool first; when it ended its workers moved to the
        # long one (through idle: a worker that saw its job end says so, and the scheduler frees it at once).
        self.assertIn(("", "short"), [(d["from"], d["to"]) for d in decisions], out)
        moved = {d["host"] for d in decisions if d["to"] == "long" and d["from"] in ("", "short")}
        self.assertGreaterEqual(len(moved), 2, out)
        to_short = [i for i, d in enumerate(decisions) if d["to"] == "short"]
        to_long = [i for i, d in enumerate(decisions) if d["to"] == "long"]
        self.assertLess(max(to_short), min(to_long), out)
        for name in ("short", "long"):
            r = read_result(dirs[name])
            self.assertEqual(r["params_sha256"], refs[name], f"{name}\n{out}")
        self.assertGreaterEqual(read_result(dirs["long"])["workers_seen"], 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
