"""Durable state: a shard SIGKILLed mid-step or mid-checkpoint and restarted by
local.sh --supervise restores its checkpoint, the job rolls back to the newest
step every shard holds durably, replays, and ends with the undisturbed digest;
with no checkpoint every shard holds, it starts over from the initial values."""
import os
import signal
import subprocess
import unittest

from harness import BIN, ENV, LOCAL, MLP, RunDirTest, logs, read_events, read_result, wait_for_file, wait_for_step

STEPS = 500  # the kills land at steps 60 to 300, each with 200 or more steps after it
EXTRA = [f"--steps={STEPS}", "--test_limit=-1"]
_reference = {}


class DurableRun(RunDirTest):
    def reference(self):
        if "digest" not in _reference:
            _, _, r = self.run_local("reference", MLP, servers=1, workers=1, extra=EXTRA)
            _reference["digest"] = r["params_sha256"]
        return _reference["digest"]


class ShardCrash(DurableRun):
    def run_and_kill_shard(self, checkpoint_every, kill_at_step, expect="rolling_back"):
        ref = self.reference()
        d = self.run_dir("job")
        out = open(os.path.join(self.tmp, "local.out"), "w")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", str(checkpoint_every), "--supervise", "--"] + EXTRA,
                               env=ENV, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        wait_for_step(d, kill_at_step, proc=job)
        with open(os.path.join(d, "pids", "shard1.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        out.close()
        result = read_result(d)
        restarts = [e["shard"] for e in read_events(d, "shard_registered") if e["restarted"]]
        self.assertEqual(restarts, [1])
        back = read_events(d, expect)
        self.assertEqual(len(back), 1, read_events(d))
        self.assertEqual(back[0]["shard"], 1)
        if expect == "rolling_back":
            self.assertLessEqual(back[0]["step"], back[0]["shard_checkpoint"], back)
        else:
            self.assertEqual(back[0]["step"], -1, back)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)

    def test_coordinator_killed_mid_run_is_restarted_and_resumes_with_the_same_digest(self):
        ref = self.reference()
        d = self.run_dir("job")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "50", "--supervise", "--"] + EXTRA,
                               env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        wait_for_step(d, 200, proc=job)
        with open(os.path.join(d, "pids", "coordinator.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        # The restarted coordinator appended to its predecessor's events: resumed at or after step 200.
        resumed = read_events(d, "coordinator_resumed")
        self.assertEqual(len(resumed), 1, read_events(d)[-20:])
        self.assertGreaterEqual(resumed[0]["step"], 200)
        self.assertEqual(len(read_events(d, "job_finished")), 1)
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)

    def test_shard_killed_mid_step_restarts_rolls_back_and_gives_the_same_digest(self):
        self.run_and_kill_shard(checkpoint_every=50, kill_at_step=120)

    def test_shard_killed_while_checkpointing_every_step_gives_the_same_digest(self):
        # Checkpointing every step keeps a write in flight almost always: the kill lands in one.
        self.run_and_kill_shard(checkpoint_every=1, kill_at_step=60)

    def test_shard_killed_without_any_checkpoint_starts_the_job_over_with_the_same_digest(self):
        # No store at all: the restarted shard holds nothing, so the job goes back to its initial values.
        self.run_and_kill_shard(checkpoint_every=0, kill_at_step=60, expect="starting_over")


class StopAndResume(DurableRun):
    def test_a_stopped_job_resumes_from_its_stores_with_the_same_digest(self):
        ref = self.reference()
        d = self.run_dir("job")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "50", "--"] + EXTRA,
                               env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        wait_for_step(d, 300, proc=job)
        job.send_signal(signal.SIGTERM)  # Ctrl-C: every process stops
        self.assertNotEqual(job.wait(timeout=60), 0)
        self.assertFalse(os.path.exists(os.path.join(d, "result.json")))
        # The stopped job's model can be exported from its stores: the newest step all shards hold.
        stopped = os.path.join(self.tmp, "stopped.safetensors")
        rc, out = self.export(d, stopped)
        self.assertEqual(rc, 0, out)
        step = int(out.split("exported step ")[1].split()[0])
        self.assertEqual(step % 50, 0, out)
        self.assertGreaterEqual(step, 250, out)
        rc, out = self.export(d, stopped, "--step=7")  # never checkpointed: a clear error
        self.assertEqual(rc, 1, out)
        self.assertIn("holds steps", out)

        rc, out, result = self.run_local_resume(d)
        self.assertEqual(rc, 0, out + logs(d))
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)
        # Exported from the stores after the end: the final model, byte for byte.
        final = os.path.join(self.tmp, "final.safetensors")
        rc, out = self.export(d, final)
        self.assertEqual(rc, 0, out)
        self.assertIn(f"exported step {STEPS} ", out)
        self.assertIn(f"params_sha256 {ref}", out)
        with open(final, "rb") as a, open(os.path.join(d, "model.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def export(self, d, out_file, *flags):
        p = subprocess.run([os.path.join(BIN, "export_model"), f"--stores={d}/store", f"--out={out_file}", *flags],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        return p.returncode, p.stdout

    def run_local_resume(self, d):
        p = subprocess.run([LOCAL, "--resume", "--run-dir", d], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        return p.returncode, p.stdout, read_result(d)


if __name__ == "__main__":
    unittest.main(verbosity=2)
