"""An operator's hold (`elasticps hold`, `elasticps release`, docs/operations.md): a live job waits at the step
asked for, well past its step timeout, every process kept; a hold with the wrong token changes nothing; the hold
outlives a SIGKILL of the coordinator (local.sh --supervise restarts it on its store); once released the job ends on
the digest of the same job never held."""
import os
import signal
import subprocess
import time
import unittest

from harness import (BIN, ENV, LOCAL, MLP, RunDirTest, logs, poll_until, read_events, read_result, wait_for_event,
                     wait_for_file)

STEPS = 150
HOLD_AT = 60
EXTRA = [f"--steps={STEPS}", "--test_limit=-1", "--step_timeout_s=2"]


class Hold(RunDirTest):
    def held_events(self, d):
        return [e for e in read_events(d, "paused") if e["cause"] == "hold"]

    def test_a_held_job_waits_outlives_its_coordinator_and_ends_on_the_same_bits(self):
        _, _, reference = self.run_local("reference", MLP, servers=1, workers=2, extra=EXTRA)
        d = self.run_dir("job")
        job = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", "2", "--run-dir", d,
                          "--checkpoint-every", "20", "--supervise", "--", *EXTRA], os.path.join(self.tmp, "local.out"))
        addr = wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        status = self.control(d, "hold", f"--from-step={HOLD_AT}")
        self.assertEqual(status["hold_from"], HOLD_AT)
        self.assertLess(status["step"], HOLD_AT)
        held = wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=job)
        self.assertEqual(held["step"], HOLD_AT)

        # Three step timeouts (2 s) held: still held at the same step, both workers ready, the job alive.
        until = time.monotonic() + 6
        while time.monotonic() < until:
            status = self.control(d, "status")
            self.assertEqual((status["phase"], status["step"]), ("held", HOLD_AT), logs(d))
            time.sleep(0.5)
        self.assertEqual([w["state"] for w in status["workers"]], ["ready", "ready"])
        self.assertIsNone(job.poll())

        # Refused: a step the job never starts, and a release with a wrong token. Neither moves the hold.
        too_late = subprocess.run([os.path.join(BIN, "elasticps"), "hold", "--run-dir", d,
                                   f"--from-step={STEPS}"], env=ENV, capture_output=True, text=True, timeout=60)
        self.assertEqual(too_late.returncode, 1, too_late.stderr)
        bad_token = os.path.join(self.tmp, "bad-token")
        with open(bad_token, "w") as f:
            f.write("not-the-token\n")
        stranger = subprocess.run([os.path.join(BIN, "elasticps"), "release", "--coordinator", addr,
                                   "--token-file", bad_token], env=ENV, capture_output=True, text=True, timeout=60)
        self.assertEqual(stranger.returncode, 1, stranger.stderr)
        status = self.control(d, "status")
        self.assertEqual((status["phase"], status["hold_from"]), ("held", HOLD_AT))

        # SIGKILLed while held, the coordinator comes back on its store still held, at the same step.
        with open(os.path.join(d, "pids", "coordinator.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        poll_until(lambda: True if len(self.held_events(d)) == 2 else None, 180,
                   "the restarted coordinator did not hold the job again")
        resumed = read_events(d, "coordinator_resumed")
        self.assertEqual([e["step"] for e in resumed], [HOLD_AT])
        self.assertEqual(self.held_events(d)[1]["step"], HOLD_AT)
        status = self.control(d, "status")
        self.assertEqual((status["phase"], status["step"], status["hold_from"]), ("held", HOLD_AT, HOLD_AT))

        status = self.control(d, "release")
        self.assertEqual(status["hold_from"], -1)
        self.assertEqual(job.wait(timeout=300), 0, logs(d))
        events = read_events(d)
        released = next(i for i, e in enumerate(events) if e["event"] == "resumed")
        before = [e["step"] for e in events[:released] if e["event"] == "step_completed"]
        self.assertEqual(max(before), HOLD_AT - 1, "no step ran while held")
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
