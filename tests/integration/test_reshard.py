"""Elastic shards (issue #39, docs/design.md "Elastic shards", docs/operations.md "Adding and removing shards"):
shards added and removed while a job runs (an mlp job, and one whose sparse table spills to RocksDB), with workers
joining and one SIGKILLed meanwhile, or with the receiving shard or the coordinator SIGKILLed mid-move, end on the
digest of the job that never changed its shards. Holds (`elasticps hold`) place every change at a known step, so no timing
decides where it lands."""
import os
import signal
import subprocess
import unittest

import test_sparse
from harness import (BIN, ENV, LOCAL, MLP, RunDirTest, logs, poll_until, read_events, read_result, skip_or_fail,
                     wait_for_event, wait_for_file)

STEPS = 40
# Chunks of 8192 elements: enough of them for every shard to hold some.
EXTRA = [f"--steps={STEPS}", "--test_limit=-1", "--chunk_elems=8192"]


def resharded(d, generation_at_least):
    return [e for e in read_events(d, "resharded") if e["generation"] >= generation_at_least]


class Reshard(RunDirTest):
    def shard_flags(self, d, s):
        return [f"--store={d}/store/shard{s}", "--checkpoint_every=5"]

    def wait_exit(self, pid, what):
        def gone():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return None
        poll_until(gone, 60, what)

    def test_a_shards_added_and_removed_mid_run_with_a_join_and_a_kill_keep_the_digest(self):
        self.scale_2_4_3("mlp", EXTRA)

    def test_c_a_sparse_table_job_scaled_2_4_3_with_a_join_and_a_kill_keeps_the_digest(self):
        """test_sparse's hashed EmbeddingBag model (a sparse=True table of 2^16 rows, Adam), its rows beyond 1 MB
        spilled to RocksDB: the rows, their moments and versions move with their partitions."""
        if test_sparse.made() is None:
            skip_or_fail(self, "cannot script the module: " + test_sparse._made["log"][-2000:])
        d = test_sparse.made()
        job = [f"--model={d}/hashed.pt", f"--train_data={d}/ids.npy", f"--train_labels={d}/labels.npy",
               *test_sparse.JOB, *test_sparse.SPILL, f"--steps={STEPS}", "--test_limit=-1", "--chunk_elems=128"]
        self.scale_2_4_3("sparse", job)

    def scale_2_4_3(self, name, extra):
        """The job `extra` (coordinator flags after the mlp's job file) on 2 shards and 2 workers, scaled to 4 shards
        at step 8 and to 3 at step 9, a worker joining and one SIGKILLed at step 12: the digests (parameters and
        optimizer state) of the same job on 2 fixed shards, and export_model reads them from the stores."""
        _, _, reference = self.run_local(name + "-reference", MLP, servers=2, workers=2, extra=extra)
        d = self.run_dir(name)
        job = self.start([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                          "--checkpoint-every", "5", "--", *extra], os.path.join(self.tmp, name + ".out"))
        addr = wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        token = os.path.join(d, "token")
        self.control(d, "hold", "--from-step=8")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=job)

        # Two shards more while held (the second by launcher/attach.sh): each is taken in at once.
        self.start_shard(d, addr, token, 2, *self.shard_flags(d, 2))
        self.start([os.path.join(ROOT_LAUNCHER, "attach.sh"), "--shard", "3", "--coordinator", addr, "--token-file",
                    token, "--store", f"{d}/store/shard3", "--checkpoint-every", "5", "--bind-host", "127.0.0.1"],
                   f"{d}/shard3.log")
        poll_until(lambda: True if any(e["shards"] == [0, 1, 2, 3] for e in read_events(d, "resharded")) else None,
                   120, "shards 2 and 3 were not taken in")
        moves = read_events(d, "resharding")
        self.assertTrue(all(e["step"] == 8 for e in moves), moves)
        self.assertTrue(all(e["bytes"] > 0 or e["partitions"] > 0 for e in moves), moves)
        status = self.control(d, "shards")
        self.assertEqual([(s["shard"], s["role"]) for s in status["shards"]],
                         [(0, "member"), (1, "member"), (2, "member"), (3, "member")])
        generation = status["map_generation"]
        self.assertGreaterEqual(generation, 1)

        # One step on the four shards, then one removed while held at step 9: it hands its state over and exits.
        self.control(d, "hold", "--from-step=9")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold" and e["step"] == 9, timeout=120, proc=job)
        with open(os.path.join(d, "pids", "shard0.pid")) as f:
            shard0 = int(f.read())
        status = self.control(d, "shards", "--remove=0")
        poll_until(lambda: resharded(d, generation + 1) or None, 120, "shard 0 was not removed")
        done = resharded(d, generation + 1)[0]
        self.assertEqual((done["step"], done["shards"], done["removed"]), (9, [1, 2, 3], [0]))
        self.wait_exit(shard0, "the removed shard did not exit")
        refused = subprocess.run([os.path.join(BIN, "elasticps"), "shards", "--run-dir", d, "--remove=0"], env=ENV,
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(refused.returncode, 1, refused.stderr)  # no longer a member

        # A worker joins and one is SIGKILLed while held at step 12; the job ends on three shards.
        self.control(d, "hold", "--from-step=12")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold" and e["step"] == 12, timeout=120, proc=job)
        ready = len(read_events(d, "worker_ready"))
        self.start([os.path.join(ROOT_LAUNCHER, "attach.sh"), "--coordinator", addr, "--token-file", token],
                   os.path.join(d, "logs", "attached.log"))
        poll_until(lambda: True if len(read_events(d, "worker_ready")) > ready else None, 120,
                   "the attached worker is not ready")
        with open(os.path.join(d, "pids", "worker1.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"])
        self.assertEqual(result["optimizer_digest"], reference["optimizer_digest"])
        self.assertEqual({e["step"] for e in read_events(d, "step_completed")}, set(range(STEPS)))
        # export_model reads the final step from the stores of the shards of the newest map.
        exported = subprocess.run([os.path.join(BIN, "export_model"), f"--stores={d}/store",
                                   f"--out={self.tmp}/{name}.safetensors"], env=ENV, capture_output=True, text=True,
                                  timeout=120)
        self.assertEqual(exported.returncode, 0, exported.stderr)
        self.assertIn(f"params_sha256 {reference['params_sha256']}", exported.stdout)

    def held_job_with_a_stalled_spare(self, name):
        """A supervised job of 2 shards held at step 8, and a spare shard 2 that stages its part of the move and then
        stalls 3 s before it says so (shard --move_stall_ms): the move cannot commit before a kill the test makes
        once the coordinator announced it. Returns (job process, run dir, coordinator address, token)."""
        d = self.run_dir(name)
        job = self.start([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                          "--checkpoint-every", "5", "--supervise", "--", *EXTRA], os.path.join(self.tmp, name + ".out"))
        addr = wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        token = os.path.join(d, "token")
        self.control(d, "hold", "--from-step=8")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=job)
        self.spare = self.start([os.path.join(BIN, "shard"), f"--coordinator={addr}", "--shard_id=2",
                                 f"--token_file={token}", *self.shard_flags(d, 2), "--move_stall_ms=3000"],
                                f"{d}/shard2.log")
        wait_for_event(d, "resharding", timeout=60, proc=job)
        self.assertEqual(read_events(d, "resharded"), [])
        return job, d, addr, token

    def finish(self, job, d, reference):
        poll_until(lambda: True if any(e["shards"] == [0, 1, 2] for e in read_events(d, "resharded")) else None,
                   120, "the move did not complete")
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"])

    def test_b_the_receiving_shard_or_the_coordinator_killed_mid_move_keep_the_digest(self):
        _, _, reference = self.run_local("reference", MLP, servers=2, workers=2, extra=EXTRA)

        # The receiver, SIGKILLed while its part is staged: started again on its store, it registers anew; the move
        # is abandoned and made again.
        job, d, addr, token = self.held_job_with_a_stalled_spare("receiver")
        self.spare.send_signal(signal.SIGKILL)
        self.spare.wait(timeout=30)
        self.start_shard(d, addr, token, 2, *self.shard_flags(d, 2))
        wait_for_event(d, "reshard_abandoned", timeout=60, proc=job)
        self.finish(job, d, reference)

        # The coordinator, SIGKILLed mid-move: restarted on its store (the old map: the move had not committed), it
        # holds the job again at step 8, which it recomputes when released (it cannot know whether pushes of it
        # reached the shards); the move is made at the next step boundary.
        job, d, addr, token = self.held_job_with_a_stalled_spare("coordinator")
        with open(os.path.join(d, "pids", "coordinator.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        wait_for_event(d, "coordinator_resumed", timeout=120, proc=job)
        poll_until(lambda: True if [(s["shard"], s["role"]) for s in self.control(d, "shards")["shards"]][2:] ==
                   [(2, "spare")] else None, 60, "the spare did not register with the restarted coordinator")
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        done = [e for e in read_events(d, "resharded") if e["shards"] == [0, 1, 2]]
        self.assertEqual([e["step"] for e in done], [9])
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"])


ROOT_LAUNCHER = os.path.join(os.path.dirname(LOCAL))


def tearDownModule():
    test_sparse.tearDownModule()  # the hashed model test_c made

if __name__ == "__main__":
    unittest.main()
