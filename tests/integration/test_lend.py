"""launcher/lend.sh on a live mlp job: a probe that reads a file the test flips between idle and
busy. Idle: the agent attaches a worker (worker_ready); busy: the worker leaves (worker_left)
within about one VW's compute plus the probe period of the flip; idle again: a new worker
attaches; Ctrl-C stops the agent and makes its worker leave; a new agent lends a worker again,
which stays until the job is over, and that agent then exits 0 by itself. The job ends on the
undisturbed run's digest. Holds (`elasticps hold`) keep the job from ending before the test is done
with it, however fast the host runs its steps."""
import os
import signal
import subprocess
import time
import unittest

from harness import LOCAL, MLP, ROOT, RunDirTest, logs, poll_until, read_events, read_report, read_result, \
    read_text, wait_for_event, wait_for_file

LEND = os.path.join(ROOT, "launcher", "lend.sh")
EVERY = 0.2  # the probe period, seconds
SLOWDOWN = "15"  # every worker idles 14 x each VW's compute: a lent worker told to leave is mid-VW
LENT_STEPS = 20  # steps the job runs with the first lent worker (then held again): it leaves during them


def cpu_ticks(pid):
    """A process's user + system CPU time so far, in clock ticks (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Lend(RunDirTest):
    def flip(self, state):
        tmp = self.probe_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(state + "\n")
        os.replace(tmp, self.probe_file)
        return time.time()

    def start_agent(self, d, name, *flags):
        return self.start([LEND, "--coordinator", self.addr, "--token-file", f"{d}/token",
                           "--probe", f"grep -qx idle {self.probe_file}", "--every", str(EVERY), "--idle-for", "2",
                           *flags, "--", "--slowdown", SLOWDOWN, "--log", f"{d}/{name}-worker.log",
                           "--report-file", f"{d}/{name}-report.json"], f"{d}/{name}.log")

    def agent_says(self, log, text, timeout=30):
        """Waits (bounded) until the agent's log holds `text`."""
        poll_until(lambda: True if text in (read_text(log) or "") else None, timeout, f"no '{text}' in {log}")

    def lent_joined(self, d, seen):
        """The first worker_joined event of a process not in `seen` (the job's own worker's and earlier lent
        ones' pids), or None."""
        for e in read_events(d, "worker_joined"):
            if e["pid"] not in seen:
                return e
        return None

    def start_held_job(self, d):
        """The mlp job with a worker of its own, the probe busy, held after its first step: (local.sh, the own
        worker's pid, the step it is held at)."""
        self.probe_file = os.path.join(d, "probe")
        self.flip("busy")
        job = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", "1", "--run-dir", d,
                          "--slowdowns", SLOWDOWN], f"{d}/local.log")
        self.addr = wait_for_file(f"{d}/coordinator.addr", proc=job)
        own = int(wait_for_file(f"{d}/pids/worker0.pid", proc=job))
        wait_for_event(d, "step_completed", timeout=120, proc=job)
        self.control(d, "hold")
        return job, own, wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)["step"]

    def test_lends_while_idle_and_reclaims_when_busy(self):
        _, _, ref = self.run_local("reference")
        d = self.run_dir("lend")
        job, own, held = self.start_held_job(d)
        seen = {own}
        agent = self.start_agent(d, "agent1")
        time.sleep(5 * EVERY)  # busy probes: nothing attaches
        self.assertIsNone(self.lent_joined(d, seen), read_text(f"{d}/agent1.log"))

        # Idle: a worker attaches and is given VWs.
        t_idle = self.flip("idle")
        joined = poll_until(lambda: self.lent_joined(d, seen), 30, "no lent worker joined")
        w = joined["worker"]
        seen.add(joined["pid"])
        ready = wait_for_event(d, "worker_ready", lambda e: e["worker"] == w, timeout=30, proc=job)
        self.control(d, "hold", f"--from-step={held + LENT_STEPS}")  # the first step's assignment counts it
        wait_for_event(d, "assignment", lambda e: any(r["worker"] == w for r in e["ranges"]), timeout=30, proc=job)
        print(f"attached {ready['t'] - t_idle:.2f} s after the flip to idle (2 idle probes of {EVERY} s)")

        # Busy: it leaves within a VW's compute plus the probe period (the bound asserted is generous).
        t_busy = self.flip("busy")
        left = wait_for_event(d, "worker_left", lambda e: e["worker"] == w, timeout=30, proc=job)
        self.agent_says(f"{d}/agent1.log", f"worker {joined['pid']} left (exit 0)")
        # One VW's compute (the slowdown's idling included), from the worker's report and its last range.
        report = read_report(f"{d}/agent1-report.json")
        held = [r["hi"] - r["lo"] for e in read_events(d, "assignment") for r in e["ranges"] if r["worker"] == w]
        per_vw = report["ms_per_train_plan"]["compute"] / held[-1] / 1000
        print(f"worker_left {left['t'] - t_busy:.3f} s after the flip to busy; one VW's compute {per_vw:.3f} s, "
              f"the probe period {EVERY} s: bound {per_vw + EVERY:.3f} s")
        self.assertLess(left["t"] - t_busy, 10)
        self.assertEqual(left["reason"], "SIGTERM")

        # Idle again: a new worker attaches.
        self.flip("idle")
        joined = poll_until(lambda: self.lent_joined(d, seen), 30, "no second lent worker joined")
        w = joined["worker"]
        seen.add(joined["pid"])
        wait_for_event(d, "worker_ready", lambda e: e["worker"] == w, timeout=30, proc=job)

        # Ctrl-C: the agent makes its worker leave and exits 0.
        agent.send_signal(signal.SIGINT)
        self.assertEqual(agent.wait(timeout=30), 0, read_text(f"{d}/agent1.log"))
        wait_for_event(d, "worker_left", lambda e: e["worker"] == w, timeout=10, proc=job)
        self.agent_says(f"{d}/agent1.log", f"worker {joined['pid']} exited with 0", timeout=0.1)

        # A new agent lends a worker that stays to the end; the agent then exits 0 by itself.
        agent = self.start_agent(d, "agent2")
        joined = poll_until(lambda: self.lent_joined(d, seen), 30, "no third lent worker joined")
        wait_for_event(d, "worker_ready", lambda e: e["worker"] == joined["worker"], timeout=30, proc=job)
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=120), 0, logs(d))
        self.assertEqual(agent.wait(timeout=30), 0, read_text(f"{d}/agent2.log"))
        self.agent_says(f"{d}/agent2.log", f"worker {joined['pid']} exited 0: the job is over", timeout=0.1)
        result = read_result(d)
        self.assertEqual(result["params_sha256"], ref["params_sha256"])
        self.assertGreaterEqual(result["workers_seen"], 4)
        print(f"the job's digest {result['params_sha256'][:16]}... equals the undisturbed run's; "
              f"{result['workers_seen']} workers took part")

    def test_a_kept_worker_parks_when_busy_and_joins_again_when_idle(self):
        """--keep-warm: busy parks the lent worker (it leaves the job, reason SIGUSR1, and its process lives on
        without using the CPU); idle makes the same process join again (a new worker id, the same pid); Ctrl-C of the
        agent ends the parked worker. The job ends on the undisturbed run's digest."""
        _, _, ref = self.run_local("reference")
        d = self.run_dir("warm")
        job, own, held = self.start_held_job(d)
        agent = self.start_agent(d, "warm", "--keep-warm")

        t_idle = self.flip("idle")
        joined = poll_until(lambda: self.lent_joined(d, {own}), 30, "no lent worker joined")
        pid, w = joined["pid"], joined["worker"]
        ready = wait_for_event(d, "worker_ready", lambda e: e["worker"] == w, timeout=30, proc=job)
        self.control(d, "hold", f"--from-step={held + LENT_STEPS}")
        wait_for_event(d, "assignment", lambda e: any(r["worker"] == w for r in e["ranges"]), timeout=30, proc=job)

        # Busy: the worker leaves the job and stays, parked: its CPU time stands still.
        self.flip("busy")
        left = wait_for_event(d, "worker_left", lambda e: e["worker"] == w, timeout=30, proc=job)
        self.assertEqual(left["reason"], "SIGUSR1", left)
        wait_for_file(f"{d}/warm-report.json")  # written as Run returns, before the process parks

        def still():
            """True once the worker's CPU time stood still over a second (None: it moved)."""
            before = cpu_ticks(pid)
            time.sleep(1)  # the measurement's window, not a wait for readiness
            return True if cpu_ticks(pid) - before <= 2 else None
        poll_until(still, 15, "a parked worker kept using the CPU")
        self.assertEqual(read_report(f"{d}/warm-report.json")["outcome"], "left")

        # Idle: the same process joins again, as a new worker.
        t_again = self.flip("idle")
        again = poll_until(lambda: next((e for e in read_events(d, "worker_joined")
                                         if e["pid"] == pid and e["worker"] != w), None), 30, "the worker did not rejoin")
        ready_again = wait_for_event(d, "worker_ready", lambda e: e["worker"] == again["worker"], timeout=30, proc=job)
        print(f"from the flip to idle to worker_ready: {ready['t'] - t_idle:.2f} s for a new process, "
              f"{ready_again['t'] - t_again:.2f} s for the parked one (2 idle probes of {EVERY} s in each)")

        # Busy again, and the agent stopped while the worker is parked: the worker exits.
        self.flip("busy")
        left = wait_for_event(d, "worker_left", lambda e: e["worker"] == again["worker"], timeout=30, proc=job)
        self.assertEqual(left["reason"], "SIGUSR1", left)
        agent.send_signal(signal.SIGINT)
        self.assertEqual(agent.wait(timeout=30), 0, read_text(f"{d}/warm.log"))
        poll_until(lambda: None if os.path.exists(f"/proc/{pid}") else True, 10, "the parked worker did not exit")

        self.control(d, "release")
        self.assertEqual(job.wait(timeout=120), 0, logs(d))
        self.assertEqual(read_result(d)["params_sha256"], ref["params_sha256"])

    def test_refuses_bad_arguments(self):
        d = self.run_dir("args")
        for args, what in [([], "--coordinator (or --scheduler) is required"),
                           (["--coordinator", "tcp://127.0.0.1:1", "--token-file", f"{d}/none", "--probe", "true"],
                            "cannot read the token file"),
                           (["--scheduler", "tcp://127.0.0.1:1", "--probe", "true", "--every", "0"],
                            "--every must be"),
                           (["--scheduler", "tcp://127.0.0.1:1"], "--probe CMD is required"),
                           (["--scheduler", "tcp://127.0.0.1:1", "--probe", "true", "--keep-warm"],
                            "--keep-warm lends to one job")]:
            p = subprocess.run([LEND, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, p.stdout)
            self.assertIn(what, p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
