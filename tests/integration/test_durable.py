"""Durable state: a shard SIGKILLed mid-step or mid-checkpoint and restarted by
local.sh --supervise restores its checkpoint, the job rolls back to the newest
step every shard holds durably, replays, and ends with the undisturbed digest;
with no checkpoint every shard holds, it starts over from the initial values.

Every kill lands mid-run however fast the host runs the steps: the job is held
(`elasticps hold --from-step=HOLD`) from its start, so it cannot end before the
kill, and released once the kill is done (a release fails once the job is over)."""
import os
import signal
import subprocess
import unittest

from harness import (BIN, ENV, LOCAL, MLP, RunDirTest, logs, poll_until, read_events, read_result, wait_for_event,
                     wait_for_file)

STEPS = 100  # past the MLP's learning-rate step at 80: the replays cross it
KILL = 30  # the kills land after this step is done ...
HOLD = 60  # ... and before this one starts (the job waits at it until released)
CHECKPOINT_EVERY = 10
EXTRA = [f"--steps={STEPS}", "--test_limit=-1"]
_reference = {}


class DurableRun(RunDirTest):
    def reference(self):
        if "digest" not in _reference:
            _, _, r = self.run_local("reference", MLP, servers=1, workers=1, extra=EXTRA)
            _reference["digest"] = r["params_sha256"]
            _reference["optimizer"] = r["optimizer_digest"]  # the momentum buffers
        return _reference["digest"]

    def start_held(self, checkpoint_every, supervise=True, hold=HOLD):
        """Starts the 2 x 2 job (local.sh, run dir self.dir) and holds it from step `hold` on; returns the job."""
        self.dir = self.run_dir("job")
        self.out = open(os.path.join(self.tmp, "local.out"), "w")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", self.dir,
                                "--checkpoint-every", str(checkpoint_every), *(["--supervise"] if supervise else []),
                                "--"] + EXTRA, env=ENV, stdout=self.out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(self.dir, "coordinator.addr"), proc=job)
        self.control(self.dir, "hold", f"--from-step={hold}")
        return job

    def wait_for_kill_point(self, job, checkpoint_every):
        """Waits (bounded) until step KILL is done and, with checkpoints, until both shards hold one step durably
        (the newest one it was not too late to wait for)."""
        wait_for_event(self.dir, "step_completed", lambda e: e["step"] >= KILL, timeout=180, proc=job)
        if checkpoint_every:
            def common():
                held = [{e["step"] for e in read_events(self.dir, "checkpoint_durable") if e["shard"] == s}
                        for s in (0, 1)]
                return max(held[0] & held[1], default=None)
            return poll_until(common, 120, "no checkpoint durable on both shards")
        return None

    def pid(self, name):
        with open(os.path.join(self.dir, "pids", f"{name}.pid")) as f:
            return int(f.read())


class ShardCrash(DurableRun):
    def run_and_kill_shard(self, checkpoint_every, expect="rolling_back"):
        ref = self.reference()
        job = self.start_held(checkpoint_every)
        durable = self.wait_for_kill_point(job, checkpoint_every)
        os.kill(self.pid("shard1"), signal.SIGKILL)
        self.control(self.dir, "release")  # fails if the job were over: the kill landed mid-run
        self.assertEqual(job.wait(timeout=600), 0, logs(self.dir))
        self.out.close()
        result = read_result(self.dir)
        restarts = [e["shard"] for e in read_events(self.dir, "shard_registered") if e["restarted"]]
        self.assertEqual(restarts, [1])
        back = read_events(self.dir, expect)
        self.assertEqual(len(back), 1, read_events(self.dir))
        self.assertEqual(back[0]["shard"], 1)
        if expect == "rolling_back":
            self.assertLessEqual(back[0]["step"], back[0]["shard_checkpoint"], back)
            self.assertGreaterEqual(back[0]["step"], durable, back)  # a step both shards held before the kill
        else:
            self.assertEqual(back[0]["step"], -1, back)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)
        # The restored and rolled-back shards brought their momentum back with the weights.
        self.assertEqual(result["optimizer_digest"], _reference["optimizer"])

    def test_coordinator_killed_mid_run_is_restarted_and_resumes_with_the_same_digest(self):
        ref = self.reference()
        job = self.start_held(CHECKPOINT_EVERY)
        self.wait_for_kill_point(job, 0)
        os.kill(self.pid("coordinator"), signal.SIGKILL)
        # The restarted coordinator appended to its predecessor's events: resumed at or after step KILL, and held
        # again at HOLD (the hold is in its store) until released.
        resumed = wait_for_event(self.dir, "coordinator_resumed", timeout=180, proc=job)
        self.assertGreaterEqual(resumed["step"], KILL)
        self.assertLessEqual(resumed["step"], HOLD)
        self.control(self.dir, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(self.dir))
        self.out.close()
        self.assertEqual(len(read_events(self.dir, "coordinator_resumed")), 1, read_events(self.dir)[-20:])
        self.assertEqual(len(read_events(self.dir, "job_finished")), 1)
        result = read_result(self.dir)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)

    def test_coordinator_and_a_shard_killed_together_roll_back_on_resume_with_the_same_digest(self):
        # Held at a step past a checkpoint: the restarted shard comes back from an older one than the other shard
        # serves, so the restarted coordinator rolls back, before the idle workers are back.
        ref = self.reference()
        hold = HOLD + CHECKPOINT_EVERY // 2
        job = self.start_held(CHECKPOINT_EVERY, hold=hold)
        wait_for_event(self.dir, "step_completed", lambda e: e["step"] == hold - 1, timeout=180, proc=job)
        os.kill(self.pid("coordinator"), signal.SIGKILL)
        os.kill(self.pid("shard1"), signal.SIGKILL)
        back = wait_for_event(self.dir, "rolling_back", timeout=180, proc=job)
        self.assertLess(back["step"], hold)
        self.control(self.dir, "release")
        self.assertEqual(job.wait(timeout=300), 0, logs(self.dir))
        self.out.close()
        self.assertEqual(len(read_events(self.dir, "coordinator_resuming")), 1)
        result = read_result(self.dir)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], ref)
        self.assertEqual(result["optimizer_digest"], _reference["optimizer"])

    def test_shard_killed_mid_step_restarts_rolls_back_and_gives_the_same_digest(self):
        self.run_and_kill_shard(checkpoint_every=CHECKPOINT_EVERY)

    def test_shard_killed_while_checkpointing_every_step_gives_the_same_digest(self):
        # Checkpointing every step keeps a write in flight almost always: the kill lands in one.
        self.run_and_kill_shard(checkpoint_every=1)

    def test_shard_killed_without_any_checkpoint_starts_the_job_over_with_the_same_digest(self):
        # No store at all: the restarted shard holds nothing, so the job goes back to its initial values.
        self.run_and_kill_shard(checkpoint_every=0, expect="starting_over")


class StopAndResume(DurableRun):
    def test_a_stopped_job_resumes_from_its_stores_with_the_same_digest(self):
        ref = self.reference()
        job = self.start_held(CHECKPOINT_EVERY, supervise=False)
        durable = self.wait_for_kill_point(job, CHECKPOINT_EVERY)
        job.send_signal(signal.SIGTERM)  # Ctrl-C: every process stops
        self.assertNotEqual(job.wait(timeout=60), 0)
        self.out.close()
        self.assertFalse(os.path.exists(os.path.join(self.dir, "result.json")))
        # The stopped job's model can be exported from its stores: the newest step all shards hold.
        d = self.dir
        stopped = os.path.join(self.tmp, "stopped.safetensors")
        rc, out = self.export(d, stopped)
        self.assertEqual(rc, 0, out)
        step = int(out.split("exported step ")[1].split()[0])
        self.assertEqual(step % CHECKPOINT_EVERY, 0, out)
        self.assertGreaterEqual(step, durable, out)
        self.assertLessEqual(step, HOLD, out)
        rc, out = self.export(d, stopped, "--step=7")  # never checkpointed: a clear error
        self.assertEqual(rc, 1, out)
        self.assertIn("holds steps", out)

        # Resumed, the job is held again at HOLD (the hold is in the coordinator's store) until released: once the
        # coordinator read its store (coordinator_resuming; with the shards more than a step apart it rolls back
        # instead of emitting coordinator_resumed) and serves (its address file, removed by local.sh before it
        # starts, is there again).
        resume = self.start([LOCAL, "--resume", "--run-dir", d], os.path.join(self.tmp, "resume.out"))
        wait_for_event(d, "coordinator_resuming", timeout=180, proc=resume)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=resume)
        self.control(d, "release")
        self.assertEqual(resume.wait(timeout=600), 0, logs(d))
        result = read_result(d)
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
