"""`elasticps status` against a live job: every field there and consistent with the job's own
files (result.json, metrics.csv, the launcher's pid files), a killed worker shown dead with its
VWs moved, a wrong token refused without harm, and a clear failure once the job is gone."""
import csv
import json
import os
import signal
import struct
import subprocess
import time
import unittest

from harness import BIN, ENV, LOCAL, MLP, RunDirTest, logs, poll_until, read_result, wait_for_event, wait_for_file

ELASTICPS = os.path.join(BIN, "elasticps")
JOB_KEYS = {"job_id", "model", "phase", "paused", "step", "steps", "epoch", "loss", "lr", "samples_per_s", "eta_s",
            "elapsed_s", "virtual_workers", "batch_per_vw", "assignment_epoch", "test_accuracy", "workers", "shards",
            "events", "rejected_messages", "hold_from", "cpu_kernels", "map_generation", "resharding"}
WORKER_KEYS = {"worker", "host", "pid", "device", "state", "vw_lo", "vw_hi", "seconds_per_vw", "since_heartbeat_s",
               "steps_contributed", "metrics_address", "cpu_kernels"}
SHARD_KEYS = {"shard", "address", "registered", "version", "durable_step", "since_checkpoint_s", "bytes_in",
              "bytes_out", "metrics_address", "role"}


def status(*args, timeout=20):
    return subprocess.run([ELASTICPS, "status", *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def status_json(run_dir):
    """The job's status as a dict, or None when the coordinator did not answer."""
    p = status("--run-dir", run_dir, "--json", "--events", "50", "--timeout-s", "2")
    return json.loads(p.stdout) if p.returncode == 0 else None


def as_float32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


class StatusTest(RunDirTest):
    def test_status_of_a_live_job(self):
        d = self.run_dir("job")
        job = self.start([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d, "--",
                          "--steps=1000", "--heartbeat_timeout_ms=1500"], os.path.join(self.tmp, "local.log"))
        wait_for_file(f"{d}/coordinator.addr", proc=job)
        first = poll_until(lambda: (lambda s: s if s and s["step"] >= 20 else None)(status_json(d)), 120,
                           "a status past step 20")
        self.assertEqual(set(first), JOB_KEYS)
        self.assertEqual(first["phase"], "training")
        self.assertEqual(len(first["workers"]), 2)
        self.assertEqual(len(first["shards"]), 2)
        self.assertEqual((first["map_generation"], first["resharding"]), (0, False))
        self.assertEqual([s["role"] for s in first["shards"]], ["member", "member"])
        pids = set()
        for name in os.listdir(f"{d}/pids"):
            if name.startswith("worker"):
                with open(f"{d}/pids/{name}") as f:
                    pids.add(int(f.read()))
        self.assertEqual({w["pid"] for w in first["workers"]}, pids, "the workers local.sh started")
        for w in first["workers"]:
            self.assertEqual(set(w), WORKER_KEYS)
            self.assertEqual((w["state"], w["device"]), ("ready", "cpu"))
            self.assertLessEqual(w["steps_contributed"], first["step"] + 1, "the steps done and the one in flight")
            self.assertGreater(w["steps_contributed"], 0)
        # Two contiguous ranges over the 8 VWs ([0, 4) and [4, 8), or what the speed planner made of the two
        # workers' measured speeds on a loaded host).
        ranges = sorted((w["vw_lo"], w["vw_hi"]) for w in first["workers"])
        self.assertEqual((ranges[0][0], ranges[0][1], ranges[1][1]), (0, ranges[1][0], 8), ranges)
        self.assertTrue(all(lo < hi for lo, hi in ranges), ranges)
        for s in first["shards"]:
            self.assertEqual(set(s), SHARD_KEYS)
            self.assertTrue(s["registered"])
            self.assertIn(s["version"], (first["step"], first["step"] + 1))
            self.assertGreater(s["bytes_in"], 0)
            self.assertGreater(s["bytes_out"], 0)
        self.assertEqual(sum(e.get("event") == "worker_joined" for e in first["events"]), 2)
        self.assertFalse(any(e.get("event") == "range_confirmed" for e in first["events"]), "no per-step events")
        # Held (elasticps hold) until a worker is killed: mid-run however fast the host runs the steps.
        self.control(d, "hold")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)

        # The tables, for people: the same coordinator answers.
        p = status("--run-dir", d)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(first["job_id"], p.stdout)

        # A wrong token is refused, and the job goes on.
        wrong = os.path.join(self.tmp, "wrong-token")
        with open(wrong, "w") as f:
            f.write("not-the-token\n")
        with open(f"{d}/coordinator.addr") as f:
            endpoint = f.read().strip()
        p = status("--coordinator", endpoint, "--token-file", wrong, "--timeout-s", "5")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "")

        # A killed worker: dead, its VWs on the other one.
        victim = first["workers"][1]
        os.kill(victim["pid"], signal.SIGKILL)
        self.control(d, "release")

        def moved():
            s = status_json(d)
            if not s:
                return None
            by_id = {w["worker"]: w for w in s["workers"]}
            if by_id[victim["worker"]]["state"] != "dead":
                return None
            live = [w for w in s["workers"] if w["state"] == "ready"]
            return s if len(live) == 1 and (live[0]["vw_lo"], live[0]["vw_hi"]) == (0, 8) else None
        after = poll_until(moved, 120, "the killed worker dead and its VWs moved")
        self.assertTrue(any(e.get("event") == "worker_dead" and e.get("worker") == victim["worker"]
                            for e in after["events"]))

        # To the end: every answer consistent with what the job leaves.
        seen = [first, after]
        while job.poll() is None:
            s = status_json(d)
            if s:
                seen.append(s)
            time.sleep(0.2)
        self.assertEqual(job.returncode, 0, logs(d))
        result = read_result(d)
        with open(f"{d}/metrics.csv") as f:
            rows = {int(r["step"]): r for r in csv.DictReader(f)}
        steps = [s["step"] for s in seen]
        self.assertEqual(steps, sorted(steps), "the step never goes back")
        for s in seen:
            for key in ("job_id", "model", "steps", "virtual_workers", "batch_per_vw"):
                self.assertEqual(s[key], result[key], key)
            self.assertLessEqual(s["step"], result["steps"])
            if s["step"] > 0:
                row = rows[s["step"]]
                self.assertEqual(as_float32(s["loss"]), as_float32(row["loss"]), f"step {s['step']}")
                self.assertEqual(as_float32(s["lr"]), as_float32(row["lr"]))
                self.assertAlmostEqual(s["epoch"], float(row["epoch"]), places=5)
        self.assertLessEqual(len({w["worker"] for s in seen for w in s["workers"]}), result["workers_seen"])

        # The job is gone: a clear failure, quickly.
        started = time.monotonic()
        p = status("--run-dir", d, "--timeout-s", "1")
        self.assertEqual(p.returncode, 1)
        self.assertLess(time.monotonic() - started, 10)

    def test_bad_flags(self):
        self.assertEqual(status().returncode, 2, "neither --run-dir nor --coordinator")
        self.assertEqual(status("--run-dir", self.tmp, "--no-such-flag").returncode, 2)
        self.assertEqual(status("--run-dir", os.path.join(self.tmp, "missing")).returncode, 1)
        self.assertEqual(subprocess.run([ELASTICPS, "frobnicate"], env=ENV, capture_output=True).returncode, 2)


if __name__ == "__main__":
    unittest.main()
