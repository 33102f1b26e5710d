#!/usr/bin/python3
"""soak: an hour of training under periodic chaos. Not part of a plain bench.sh run: bench.sh --only soak
[--minutes M] (default 60).

The MLP job (examples/fashion_mnist_mlp.flags with a constant learning rate, so that every step changes the bits;
steps of a few ms, so an hour is hundreds of thousands of pulls and pushes), 2 shards, 2 workers from local.sh,
--heartbeat_timeout_ms=1500. Every M seconds (60 s for an hour) one chaos event, in turn: attach a worker
(attach.sh), SIGKILL a worker, attach one, SIGTERM one (a graceful leave), and a barrage at the coordinator and at
each shard (tests/garbage_peer: 10 000 malformed, wrong-token, out-of-range and replayed messages, 200 short-lived
connections, one 80 MiB frame). worker0 is never a victim: it, the shards and the coordinator live through the
whole run, and their RSS and open file descriptors are sampled all along.

The undisturbed reference (1 worker, same flags and steps) runs beside the soak, started with it, so the section
takes the soak's time rather than twice it. The steps are sized from a short calibration (both configurations side
by side, 10 % added): the soak is slower per step than the reference while both run, so it lasts about M minutes
or more.

The table: per long-lived process, RSS at the end of the warm-up (the first sixth of the run; the peak of its last
third), the peak after it, the growth, and the open descriptors' range after the warm-up; then the digests.
Goals (issue 21): RSS growth after the warm-up at most 10 %, descriptors flat, the reference's digest. Exits 1 when
a run or a barrage failed or the digests differ; never on timing or memory (those are the figures).
"""
import json
import math
import os
import signal
import subprocess
import threading
import time

import analysis
import common

FLAGS = ["--test_limit=-1", "--lr_schedule=constant", "--lr=0.02", "--heartbeat_timeout_ms=1500"]
SHARDS = 2
LONG_LIVED = ["coordinator", "shard0", "shard1", "worker0"]
CHAOS = ("attach", "sigkill", "attach", "sigterm", "barrage")
BARRAGE = ["--barrage=10000", "--connections=200", "--oversized=1"]
CALIBRATION_STEPS = 2000
GROWTH_GOAL = 0.10


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler(threading.Thread):
    """Samples (t, RSS KiB, open fds) of named pids every `every` s until stopped; a process gone is skipped."""

    def __init__(self, pids, every):
        super().__init__(daemon=True)
        self.pids, self.every = pids, every
        self.samples = {name: [] for name in pids}
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            now = time.monotonic()
            for name, pid in self.pids.items():
                try:
                    self.samples[name].append((now, proc_rss_kib(pid), proc_fds(pid)))
                except OSError:
                    pass
            self._done.wait(self.every)

    def stop(self):
        self._done.set()
        self.join()


def start_job(name, workers, steps):
    d = common.run_dir(name)
    subprocess.run(["rm", "-rf", d], check=True)
    log = open(f"{d}.log", "w")
    p = subprocess.Popen([common.LOCAL, "--job", common.MLP, "--servers", str(SHARDS), "--workers", str(workers),
                          "--run-dir", d, "--", f"--steps={steps}", *FLAGS],
                         env=common.ENV, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return d, p


def finish(d, p, timeout):
    """The job's result.json once local.sh exited 0 within `timeout` s, else None (and the job stopped)."""
    try:
        code = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        common.warn(f"job {d} did not finish within {timeout:.0f} s")
        common.stop([p])
        return None
    result = analysis.read_result(d)
    if code != 0 or result is None:
        common.warn(f"job {d} failed (log: {d}.log):\n{common.tail(d + '.log')}")
        return None
    return result


def calibrate():
    """ms per step of the soak's configuration while the reference's runs beside it (None if either failed)."""
    runs = [start_job("soak_calibrate_ref", 1, CALIBRATION_STEPS),
            start_job("soak_calibrate", 2, CALIBRATION_STEPS)]
    results = [finish(d, p, 600) for d, p in runs]
    if None in results:
        return None
    return 1000 * max(r["train_seconds"] for r in results) / CALIBRATION_STEPS


def read_pid(d, name):
    try:
        with open(os.path.join(d, "pids", f"{name}.pid")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


class Chaos:
    """The soak's events against the job in run dir `d`."""

    def __init__(self, b, d, job):
        self.b, self.d, self.job = b, d, job
        self.addr = open(os.path.join(d, "coordinator.addr")).read().strip()
        self.token = os.path.join(d, "token")
        self.victims = []  # live workers that may be killed, oldest first: worker1, then the attached ones
        self.attached = []
        self.counts = {kind: 0 for kind in CHAOS}
        self.failed_barrages = 0
        worker1 = read_pid(d, "worker1")
        if worker1 is not None:
            self.victims.append(worker1)

    def event(self, kind):
        self.victims = [v for v in self.victims if alive(v)]
        if kind == "attach":
            log = os.path.join(self.d, "logs", f"attached{len(self.attached)}.log")
            w = subprocess.Popen([common.ATTACH, "--coordinator", self.addr, "--token-file", self.token,
                                  "--log", log], env=common.ENV)  # attach.sh execs the worker
            self.attached.append(w)
            self.victims.append(w.pid)
        elif kind in ("sigkill", "sigterm"):
            if not self.victims:
                return
            os.kill(self.victims.pop(0), signal.SIGKILL if kind == "sigkill" else signal.SIGTERM)
        else:
            for endpoint in [self.addr] + self.shard_endpoints():
                p = subprocess.run([os.path.join(common.BIN, "garbage_peer"), endpoint, self.token, *BARRAGE],
                                   env=common.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=300)
                if p.returncode != 0:
                    self.failed_barrages += 1
                    common.warn(f"soak: a barrage at {endpoint} failed:\n{p.stdout[-2000:]}")
        for p in self.attached:
            p.poll()  # reap the workers that left or died
        self.counts[kind] += 1

    def shard_endpoints(self):
        return [open(os.path.join(self.d, f"shard{s}.addr")).read().strip() for s in range(SHARDS)]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def growth_rows(samples, warm_end):
    """Per process: (RSS KiB at the warm-up's end: the peak of its last third, the peak after it, the growth,
    fds at the warm-up's end, (min, max) fds after it), or None without samples on both sides."""
    rows = {}
    for name, xs in samples.items():
        t0 = xs[0][0] if xs else 0
        warm = [x for x in xs if t0 + warm_end * 2 / 3 <= x[0] <= t0 + warm_end]
        after = [x for x in xs if x[0] > t0 + warm_end]
        if not warm or not after:
            rows[name] = None
            continue
        base = max(x[1] for x in warm)
        peak = max(x[1] for x in after)
        rows[name] = (base, peak, peak / base - 1, warm[-1][2], (min(x[2] for x in after), max(x[2] for x in after)))
    return rows


def run(b):
    minutes = b.minutes
    print(f"== soak: mlp, {SHARDS} shards, 2 workers, chaos {'/'.join(CHAOS)}, at least {minutes} min "
          f"(host load {common.load1()}, {os.cpu_count()} cores)")
    load = common.load1()
    ms = calibrate()
    if ms is None:
        b.failed = True
        return
    steps = math.ceil(1.1 * minutes * 60 * 1000 / ms)  # 10 % over: the host's load drifts
    every = max(5.0, minutes)  # seconds between chaos events: 60 s for an hour
    print(f"   calibration: {ms:.2f} ms a step beside the reference: {steps} steps; a chaos event every {every:.0f} s")

    ref_dir, ref = start_job("soak_reference", 1, steps)
    d, job = start_job("soak", 2, steps)
    chaos = sampler = None
    start = time.monotonic()
    try:
        if not common.wait_until(lambda: all(read_pid(d, n) for n in LONG_LIVED) and
                                 os.path.exists(os.path.join(d, "events.jsonl")), 120, job):
            common.warn(f"soak: the job did not start (log: {d}.log)")
            b.failed = True
            return
        pids = {n: read_pid(d, n) for n in LONG_LIVED}
        sampler = Sampler(pids, max(1.0, minutes * 60 / 360))
        sampler.start()
        chaos = Chaos(b, d, job)
        e = 0
        while not common.wait_until(lambda: job.poll() is not None, every):
            chaos.event(CHAOS[e % len(CHAOS)])
            e += 1
        seconds = time.monotonic() - start
        result = finish(d, job, 60)
        sampler.stop()
        reference = finish(ref_dir, ref, 3 * seconds + 600)
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        common.stop([job, ref, *(chaos.attached if chaos else [])])

    print(f"   {seconds / 60:.1f} min, {steps} steps ({1000 * seconds / steps:.2f} ms a step); events: "
          + ", ".join(f"{k} {n}" for k, n in chaos.counts.items())
          + f"; workers seen {result['workers_seen'] if result else '-'}")
    warm_end = seconds / 6
    with open(os.path.join(d, "samples.json"), "w") as f:  # [t, RSS KiB, fds] per process, to plot a growth
        json.dump(sampler.samples, f)
    print(f"{'process':<12s} | {'RSS MiB warm':>12s} | {'peak after':>10s} | {'growth':>7s} | fds warm | fds after")
    for name, row in growth_rows(sampler.samples, warm_end).items():
        if row is None:
            print(f"{name:<12s} | {'-':>12s} | {'-':>10s} | {'-':>7s} | -        | -")
            b.failed = True
            continue
        base, peak, growth, fds_warm, (fmin, fmax) = row
        print(f"{name:<12s} | {base / 1024:12.1f} | {peak / 1024:10.1f} | {100 * growth:6.1f}% | {fds_warm:8d} | "
              f"{fmin}-{fmax}")
        b.csv("soak", f"rss_growth_{name}", "", f"{1 + growth:.3f}", steps, f"{seconds:.0f}", load)
    print(f"   warm-up: the first {warm_end / 60:.1f} min; goal: growth at most {100 * GROWTH_GOAL:.0f} %, "
          "descriptors flat")
    if chaos.failed_barrages:
        b.failed = True
    if result is None or reference is None:
        b.failed = True
        return
    same = result["params_sha256"] == reference["params_sha256"]
    print(f"   digests: soak {result['params_sha256'][:16]}, reference {reference['params_sha256'][:16]}: "
          f"{'the same' if same else 'DIFFERENT'}")
    if not same:
        common.warn("soak: the soak and its reference ended on different digests")
        b.failed = True


if __name__ == "__main__":
    common.main(run)
