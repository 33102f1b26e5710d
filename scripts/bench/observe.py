#!/usr/bin/python3
"""observe: what watching a job costs.

Samples/s of the CNN job (examples/fashion_mnist_cnn.flags, 2 workers x 4 VWs, 1 shard) as is, against the same job
with every process serving Prometheus metrics (local.sh --metrics) while this program scrapes every target of the
job's prometheus_targets.json every 100 ms (ten times a usual 1 s scrape interval) and asks `elasticps status --json`
every 500 ms. Three interleaved rounds, medians; the ratio is observed / not observed (goal: within the noise, the
per-round spread of the unobserved runs). Also the latency of a scrape of /metrics under training (p50, p99, max, by
role) and the size of a scrape.
"""
import json
import os
import subprocess
import threading
import time
import urllib.request

import common

ROUNDS = 3
SCRAPE_EVERY = 0.1
STATUS_EVERY = 0.5


class Observer(threading.Thread):
    """Scrapes a job's targets and asks for its status until stopped; keeps the latencies."""

    def __init__(self, run_dir):
        super().__init__(daemon=True)
        self.run_dir = run_dir
        self.stop = threading.Event()
        self.latency = {}  # role -> [seconds]
        self.bytes = {}    # role -> size of the newest scrape
        self.status_ok = self.status_failed = 0

    def targets(self):
        try:
            with open(os.path.join(self.run_dir, "prometheus_targets.json")) as f:
                return [(t["labels"]["eps_role"], addr) for t in json.load(f) for addr in t["targets"]]
        except (OSError, ValueError, KeyError):
            return []

    def run(self):
        next_status = 0.0
        while not self.stop.is_set():
            started = time.monotonic()
            for role, addr in self.targets():
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=2) as r:
                        body = r.read()
                except OSError:
                    continue  # a process that ended between the targets file and the scrape
                self.latency.setdefault(role, []).append(time.monotonic() - t0)
                self.bytes[role] = len(body)
            if started >= next_status and os.path.exists(os.path.join(self.run_dir, "coordinator.addr")):
                next_status = started + STATUS_EVERY
                p = subprocess.run([os.path.join(common.BIN, "elasticps"), "status", "--run-dir", self.run_dir,
                                    "--json", "--timeout-s", "1"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                if p.returncode == 0:
                    self.status_ok += 1
                else:
                    self.status_failed += 1
            self.stop.wait(max(0.0, SCRAPE_EVERY - (time.monotonic() - started)))


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def run(b):
    print(f"== observe: cnn, 2 workers x 4 VWs, {b.steps} steps, 1 shard, medians of {ROUNDS} interleaved rounds "
          f"(host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs not observed")
    flags = common.job_flags(b.steps)
    sps = {"not observed": [], "observed": []}
    secs = {"not observed": [], "observed": []}
    latency, sizes, statuses = {}, {}, [0, 0]
    load = common.load1()
    for r in range(1, ROUNDS + 1):
        s, t = b.job_sps(f"observe_off_{r}", 2, common.CNN, *flags)
        sps["not observed"].append(s)
        secs["not observed"].append(t)
        name = f"observe_on_{r}"
        observer = Observer(common.run_dir(name))
        observer.start()
        s, t = b.job_sps(name, 2, common.CNN, *flags, launch=["--metrics"])
        observer.stop.set()
        observer.join()
        sps["observed"].append(s)
        secs["observed"].append(t)
        for role, xs in observer.latency.items():
            latency.setdefault(role, []).extend(xs)
        sizes.update(observer.bytes)
        statuses[0] += observer.status_ok
        statuses[1] += observer.status_failed
    b.paired_rows("observe", "not observed", "observed", sps, secs, load, "the unobserved runs")
    print(f"   {'scrape of /metrics':<24s} | {'scrapes':>7s} | {'p50 ms':>7s} | {'p99 ms':>7s} | {'max ms':>7s} | bytes")
    for role in ("coordinator", "shard", "worker"):
        xs = latency.get(role, [])
        if not xs:
            print(f"   {role:<24s} | {0:7d} |       - |       - |       - | -")
            continue
        print(f"   {role:<24s} | {len(xs):7d} | {percentile(xs, 0.5) * 1e3:7.2f} | {percentile(xs, 0.99) * 1e3:7.2f} | "
              f"{max(xs) * 1e3:7.2f} | {sizes.get(role, 0)}")
    print(f"   elasticps status: {statuses[0]} answered, {statuses[1]} not (each a fresh process and connection)")
    if not latency:
        common.warn("observe: no scrape succeeded")
        b.failed = True


if __name__ == "__main__":
    common.main(run)
