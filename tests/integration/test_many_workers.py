"""Many worker processes (issue 35): 32 workers of a small job end on the same digest as 1, and every one of them
contributed.

The MLP job of examples/fashion_mnist_mlp.flags, cut down (V = 32 VWs of 8 samples, a few steps, no evaluation),
through launcher/local.sh with 1 worker and with 32 (each with one thread; the coordinator starts training once all
32 are ready, so step 0 has one VW on each). What the test reads is structured: result.json, events.jsonl (the
step_completed ranges say whose computation of each range counted) and each worker's report (docs/events.md).

On a loaded 2-core host 32 libtorch processes starting at once take most of the time (each loads libtorch and the
data); the heartbeat timeout is raised so that one starved for seconds in that storm is not declared dead. Every
wait is bounded; local.sh, stopped by tearDown's SIGTERM if the test fails, stops every process it started.
"""
import os
import unittest

from harness import LOCAL, MLP, RunDirTest, logs, read_events, read_report, read_result

WORKERS = 32
FLAGS = ["--virtual_workers=32", "--batch_per_vw=8", "--steps=6", "--train_limit=2048", "--test_limit=-1",
         "--heartbeat_timeout_ms=30000"]
TIMEOUT = 240  # seconds for one job, the 32-process one included; measured: see docs/benchmarks.md


class ManyWorkers(RunDirTest):
    def run_job(self, name, workers):
        """Runs the job with `workers` worker processes to its end (bounded); returns (run dir, result.json)."""
        d = self.run_dir(name)
        job = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", str(workers), "--run-dir", d, "--",
                          *FLAGS], os.path.join(self.tmp, f"{name}.log"))
        self.assertEqual(job.wait(timeout=TIMEOUT), 0, f"{name}: local.sh failed\n{logs(d)}")
        result = read_result(d)
        self.assertIsNotNone(result, f"{name}: no result.json")
        return d, result

    def test_thirty_two_worker_processes_end_on_one_workers_digest_and_each_contributed(self):
        _, ref = self.run_job("one", 1)
        d, got = self.run_job("many", WORKERS)
        self.assertEqual(got["steps"], ref["steps"])
        self.assertEqual(got["params_sha256"], ref["params_sha256"])
        self.assertEqual(got["buffers_sha256"], ref["buffers_sha256"])
        self.assertEqual(got["workers_seen"], WORKERS)

        ready = {e["worker"] for e in read_events(d, "worker_ready")}
        self.assertEqual(len(ready), WORKERS, "every process became a member once")
        completed = read_events(d, "step_completed")
        self.assertEqual([e["step"] for e in completed], list(range(got["steps"])))
        counted = {r["worker"] for e in completed for r in e["ranges"]}
        self.assertEqual(counted, ready, "workers whose computation never counted in any step")
        # Each step covers the 32 VWs exactly once.
        for e in completed:
            vws = sorted((r["lo"], r["hi"]) for r in e["ranges"])
            self.assertEqual(vws[0][0], 0, e)
            self.assertEqual(vws[-1][1], 32, e)
            self.assertTrue(all(a[1] == b[0] for a, b in zip(vws, vws[1:])), e)

        # Each process's own report: one id, done, and plans it trained.
        ids = set()
        for i in range(WORKERS):
            report = read_report(os.path.join(d, "logs", f"worker{i}.json"))
            self.assertEqual(report["outcome"], "done", f"worker{i}")
            self.assertEqual(len(report["worker_ids"]), 1, f"worker{i} registered again")
            self.assertGreater(report["train_plans"], 0, f"worker{i} trained nothing")
            ids.update(report["worker_ids"])
        self.assertEqual(ids, ready)


if __name__ == "__main__":
    unittest.main(verbosity=2)
