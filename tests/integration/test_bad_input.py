"""Bad input: a clear message and a nonzero exit before training starts; bad
network messages get error replies and change nothing."""
import json
import os
import subprocess
import threading
import time
import unittest
import urllib.request

from harness import (BIN, ENV, LOCAL, MLP, RunDirTest, poll_until, read_events, read_result, read_text, wait_for_event,
                     wait_for_step)


class BadJobSpec(RunDirTest):
    def fails_before_training(self, name, extra, needle):
        rc, out, result = self.run_local(name, MLP, workers=1, extra=extra, timeout=180, expect_ok=False)
        self.assertNotEqual(rc, 0, out)
        self.assertIsNone(result)
        self.assertIn(needle, out, out)
        # Training starts with the first assignment epoch.
        self.assertEqual(read_events(self.run_dir(name), "assignment"), [], "training started")

    def test_unknown_flag(self):
        self.fails_before_training("flag", ["--no_such_flag=1"], "no_such_flag")

    def test_missing_data_file(self):
        self.fails_before_training("data", [f"--data_dir={self.tmp}/nowhere"], "is missing")

    def test_zero_virtual_workers(self):
        self.fails_before_training("v0", ["--virtual_workers=0"], "virtual_workers must be at least 1")

    def test_zero_batch(self):
        self.fails_before_training("b0", ["--batch_per_vw=0"], "batch_per_vw must be at least 1")

    def test_unknown_model(self):
        self.fails_before_training("model", ["--model=resnet9000"], "resnet9000")

    def test_unknown_optimizer(self):
        self.fails_before_training("opt", ["--optimizer=lamb"], "lamb")

    def test_an_optimizer_option_of_another_optimizer_is_refused_at_start(self):
        # The MLP's flags are SGD with momentum: AdamW on top of them is a job the shards would refuse.
        rc, out, _ = self.run_local("adamw-momentum", MLP, workers=1, extra=["--optimizer=adamw"], timeout=180,
                                    expect_ok=False)
        self.assertEqual(rc, 2, "an invalid job, refused by the coordinator before any worker's model:\n" + out)
        self.assertIn("momentum", out)
        self.assertEqual(read_events(self.run_dir("adamw-momentum"), "worker_joined"), [])

    def test_a_job_whose_every_worker_fails_at_start_ends_instead_of_waiting(self):
        # The real binaries, but a worker that dies in its start-up checks (as one did on a module it could not run).
        bin_dir = self.run_dir("bin")
        for name in os.listdir(BIN):
            if name != "worker":
                os.symlink(os.path.join(BIN, name), os.path.join(bin_dir, name))
        with open(os.path.join(bin_dir, "worker"), "w") as f:
            f.write("#!/bin/sh\necho 'E0101 00:00:00.000000 1 worker.cc:1] cannot run this module' >&2\nkill -ABRT $$\n")
        os.chmod(os.path.join(bin_dir, "worker"), 0o755)
        d = self.run_dir("dead-workers")
        p = subprocess.run([LOCAL, "--job", MLP, "--workers", "2", "--run-dir", d], env=dict(ENV, EPS_BIN=bin_dir),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("cannot run this module", p.stdout, "the workers' reason is shown")
        self.assertIsNone(read_result(d))
    def test_a_message_limit_below_one_mib(self):
        self.fails_before_training("msg", ["--max_message_mb=0"], "--max_message_mb must be in [1, 1048576]")

    def test_unknown_wire_dtype(self):
        self.fails_before_training("wire", ["--wire_dtype=int8"], "unknown wire dtype 'int8'")
        self.fails_before_training("grad-wire", ["--grad_wire_dtype=fp8"], "--grad_wire_dtype")


class BadWorkerFlags(unittest.TestCase):
    def worker_refuses(self, flag, needle):
        # The flags are checked before the worker contacts anyone: no coordinator needed.
        p = subprocess.run([os.path.join(BIN, "worker"), "--coordinator=tcp://127.0.0.1:9", flag], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn(needle, p.stdout)

    def test_malformed_compute_cpus(self):
        self.worker_refuses("--compute_cpus=3-1", "reversed range '3-1'")
        self.worker_refuses("--compute_cpus=zero", "'zero' is not a CPU number")

    def test_model_fetches_in_flight_outside_1_to_64(self):
        self.worker_refuses("--model_fetch_in_flight=0", "--model_fetch_in_flight must be in [1, 64]")
        self.worker_refuses("--model_fetch_in_flight=65", "--model_fetch_in_flight must be in [1, 64]")

    def test_compute_cpus_outside_the_allowed_set(self):
        # One past the highest CPU this process may use: a number it can name, but not one it may run on.
        self.worker_refuses(f"--compute_cpus={max(os.sched_getaffinity(0)) + 1}", "this process may only use CPUs")


class FrameLimitTooSmallForTheJob(RunDirTest):
    def test_shard_refuses_a_job_whose_frames_exceed_its_limit(self):
        # Every job's largest legit frame is at least an envelope's 8 MiB (+ 64 KiB): 8 MiB is too small.
        d = self.run_dir("job")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("secret-token\n")
        coord, addr = self.start_coordinator(d, token, "--steps=20", "--startup_timeout_s=120")
        self.start_shard(d, addr, token, 0, "--max_message_mb=8")
        shard = self.procs[-1]
        self.start_worker(d, addr, token, 0)
        self.assertNotEqual(shard.wait(timeout=120), 0)
        self.assertIn("--max_message_mb", read_text(f"{d}/shard0.log"))


def rss_kib(pid):
    """VmRSS of a process, in KiB, from /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


class RssSampler:
    """Samples the VmRSS of some processes every 50 ms in a thread until stopped; keeps each one's peak."""

    def __init__(self, pids):
        self.pids, self.peak, self._stop = pids, {p: rss_kib(p) for p in pids}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.05):
            for p in self.pids:
                try:
                    self.peak[p] = max(self.peak[p], rss_kib(p))
                except (OSError, AssertionError):
                    pass  # it ended: the test says so

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
        return self.peak


def line_count(path):
    with open(path, "rb") as f:
        return f.read().count(b"\n")


class GarbageOnTheWire(RunDirTest):
    STEPS = "--steps=400"
    # The job is held (elasticps hold) from this step until the barrage is over, so that however fast the host runs
    # the steps, every server still answers when the test reads its counters; released, it trains on to STEPS.
    HOLD_AT = 300
    BARRAGE = 10000  # bad messages to each endpoint; their log lines are rate-limited
    BAD_ENVELOPES = 7  # probes of one garbage_peer run that surely do not decode
    CONNECTIONS = 200  # short-lived connections of the barrage, to each endpoint
    OVERSIZED = 2  # 80 MiB frames (over the 64 MiB and ~8 MiB frame limits), each on its own connection
    # The barrage's messages are small and answered one at a time, its queues are bounded (1000 messages a
    # peer), its oversized frames are refused before they are read: a server allocates nothing that grows
    # with it. 64 MiB covers allocator slack, the pipes of the short-lived connections and the training's
    # own growth meanwhile.
    RSS_BOUND_KIB = 64 << 10

    def garbage(self, endpoint, token, *flags):
        p = subprocess.run([os.path.join(BIN, "garbage_peer"), endpoint, token, *flags], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)

    def status(self, d):
        p = subprocess.run([os.path.join(BIN, "elasticps"), "status", "--run-dir", d, "--json", "--events", "0"],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def rejected(self, metrics_address, family="eps_rejected_messages_total", label="reason"):
        """A shard's eps_rejected_messages_total by reason (or another counter by another label), from its
        /metrics."""
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith(family + "{"):
                labels, value = line.rsplit(" ", 1)
                reason = labels.split(f'{label}="', 1)[1].split('"', 1)[0]
                out[reason] = float(value)
        return out

    def test_garbage_to_live_coordinator_and_shards_changes_nothing(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[self.STEPS])
        d = self.run_dir("job")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("secret-token\n")
        coord, addr = self.start_coordinator(d, token, self.STEPS, "--shards=2", "--workers=2",
                                             "--startup_timeout_s=120")
        shards = []
        for s in range(2):
            shards.append(self.start_shard(d, addr, token, s, "--metrics_port=0"))
            if s == 0:
                shard0_proc = self.procs[-1]
        # Before training: every endpoint answers garbage with errors.
        for endpoint in [addr] + shards:
            self.garbage(endpoint, token)
        self.assertEqual(self.control(d, "hold", f"--from-step={self.HOLD_AT}")["hold_from"], self.HOLD_AT)
        for w in range(2):
            self.start_worker(d, addr, token, w)
        # During training (or, on a fast host, already held): again.
        wait_for_step(d, 1, proc=coord)
        for endpoint in [addr] + shards:
            self.garbage(endpoint, token)
        held = wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=coord)
        self.assertEqual(held["step"], self.HOLD_AT)
        # Every rejection is counted: in the coordinator's status, and in each shard's metrics.
        status = self.status(d)
        self.assertGreaterEqual(status["rejected_messages"], 2 * (self.BAD_ENVELOPES + 1), status)
        shard0 = status["shards"][0]["metrics_address"]
        counts = self.rejected(shard0)
        self.assertGreaterEqual(counts["bad_envelope"], 2 * self.BAD_ENVELOPES, counts)
        self.assertGreaterEqual(counts["wrong_token"], 2, counts)
        # A shard holds at most 64 pulls of one peer waiting for the step in progress (held: version HOLD_AT + 1);
        # the rest are refused at once. A pull past that step waits for nothing: every one is refused (Aborted).
        def parked_pulls(version):
            p = subprocess.run([os.path.join(BIN, "garbage_peer"), shards[0], token, "--parked_pulls=200",
                                f"--parked_version={version}"], env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout)
            return json.loads(p.stdout.splitlines()[-1])
        waiting = parked_pulls(self.HOLD_AT + 1)
        self.assertEqual(waiting["refused"], 200 - 64, waiting)
        self.assertEqual(waiting["aborted"], 0, waiting)
        self.assertEqual(parked_pulls(1 << 30)["aborted"], 200)
        # A barrage: every message answered and counted, the log lines bounded by the rate
        # (common/rejections.h: 5 a second after a burst of 20, plus a summary every 10 s); a burst of
        # short-lived connections, each answered; frames over the limit, whose connections are closed
        # unread. The servers' RSS, sampled meanwhile, stays under baseline + RSS_BOUND_KIB.
        logs = {addr: f"{d}/coordinator.log", shards[0]: f"{d}/shard0.log"}
        rss = RssSampler([coord.pid, shard0_proc.pid])
        baseline = dict(rss.peak)
        for endpoint, log in logs.items():
            before, lines_before, start = self.status(d)["rejected_messages"], line_count(log), time.monotonic()
            counts_before = self.rejected(shard0)
            closed_before = self.rejected(shard0, "eps_connections_total", "event").get("closed", 0)
            self.garbage(endpoint, token, f"--barrage={self.BARRAGE}", f"--connections={self.CONNECTIONS}",
                         f"--oversized={self.OVERSIZED}")
            if endpoint != addr:  # counted as the shard's loop reads its socket's events
                want = closed_before + self.CONNECTIONS + self.OVERSIZED
                poll_until(lambda: self.rejected(shard0, "eps_connections_total", "event")["closed"] >= want or None,
                           30, "the shard did not count the connections it closed")
            self.status(d)  # the coordinator still answers
            time.sleep(1)  # the last lines written
            seconds = time.monotonic() - start
            lines = line_count(log) - lines_before
            self.assertLess(lines, 60 + 10 * seconds, f"{lines} log lines in {seconds:.1f} s from {log}")
            if endpoint == addr:
                self.assertGreaterEqual(self.status(d)["rejected_messages"] - before, self.BARRAGE)
            else:
                after = self.rejected(shard0)
                self.assertGreaterEqual(sum(after.values()) - sum(counts_before.values()), self.BARRAGE, after)
        peak = rss.stop()
        print(f"RSS KiB before the barrage and at its peak: coordinator {baseline[coord.pid]} -> {peak[coord.pid]}, "
              f"shard 0 {baseline[shard0_proc.pid]} -> {peak[shard0_proc.pid]}")
        # Still held where it was: no bad message moved the job.
        status = self.status(d)
        self.assertEqual((status["phase"], status["step"], status["hold_from"]), ("held", self.HOLD_AT, self.HOLD_AT))
        for pid, what in [(coord.pid, "coordinator"), (shard0_proc.pid, "shard 0")]:
            self.assertLess(peak[pid] - baseline[pid], self.RSS_BOUND_KIB,
                            f"{what}: RSS {baseline[pid]} KiB before the barrage, {peak[pid]} KiB at its peak")
        self.control(d, "release")
        self.assertEqual(coord.wait(timeout=300), 0, open(f"{d}/coordinator.log").read()[-3000:])
        result = read_result(d)
        self.assertEqual(result["params_sha256"], ref["params_sha256"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
