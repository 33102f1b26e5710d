#!/usr/bin/python3
"""storm: 64 workers attaching to a running job within a second (issue 35's registration storm).

The mlp job (examples/fashion_mnist_mlp.flags) with V = 128 VWs of 4 samples, 1 shard, its own worker, the equal
planner (every worker holds VWs, whatever its measured speed) and a 60 s heartbeat timeout (a worker starved for
seconds while 64 start on the same cores is not declared dead). Once it steps, 64 launcher/attach.sh start at once.
From the coordinator's events: when the attached workers registered (worker_joined), were ready (worker_ready: model
and data loaded), and the first step whose ranges hold every one of the 65 workers (all contributing); the
coordinator's CPU time (/proc/PID/stat) over the storm, and per step with 1 worker before it against 65 after it.
On a 2-core host the 64 processes loading libtorch and the data dominate: the figure the control plane owns is from
the last worker_ready to all contributing. Every process is stopped at the end.
"""
import json
import os
import subprocess
import time

import common

ATTACHED = 64
V = 128
FLAGS = [f"--virtual_workers={V}", "--batch_per_vw=4", "--steps=1000000", "--test_limit=-1", "--planner=equal",
         "--heartbeat_timeout_ms=60000", "--max_workers_per_host=0"]


def events(d):
    try:
        with open(os.path.join(d, "events.jsonl")) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return []


def steps_of(evs):
    return [e for e in evs if e["event"] == "step_completed"]


def cpu_per_step(d, pid, job, steps):
    """The coordinator's CPU seconds per step over the next `steps` completed steps (None if they did not come)."""
    start = len(steps_of(events(d)))
    cpu0 = common.cpu_seconds(pid)
    if not common.wait_until(lambda: len(steps_of(events(d))) >= start + steps, 300, job):
        return None
    return (common.cpu_seconds(pid) - cpu0) / steps


def run(b):
    b.need_bin("worker")
    d = common.run_dir("storm")
    subprocess.run(["rm", "-rf", d, f"{d}.log"], check=True)
    print(f"== storm: {ATTACHED} workers attaching at once to the mlp job (V {V}, 1 shard, 1 worker of its own; "
          f"host load {common.load1()}, {os.cpu_count()} cores)")
    with open(f"{d}.log", "w") as log:
        job = subprocess.Popen([common.LOCAL, "--job", common.MLP, "--servers", "1", "--workers", "1", "--run-dir", d,
                                "--", *FLAGS], env=common.ENV, stdout=log, stderr=subprocess.STDOUT)
    attached = []
    try:
        if not common.wait_until(lambda: len(steps_of(events(d))) >= 20, 180, job):
            common.warn(f"storm: the job did not reach step 20 (log: {d}.log)")
            b.failed = True
            return
        pid = int(open(os.path.join(d, "pids", "coordinator.pid")).read())
        before = cpu_per_step(d, pid, job, 100)
        addr = open(os.path.join(d, "coordinator.addr")).read().strip()
        os.makedirs(os.path.join(d, "logs"), exist_ok=True)
        cpu0 = common.cpu_seconds(pid)
        t0 = time.time()
        for i in range(ATTACHED):
            attached.append(subprocess.Popen(
                [common.ATTACH, "--coordinator", addr, "--token-file", os.path.join(d, "token"), "--log",
                 os.path.join(d, "logs", f"attach{i}.log")], env=common.ENV))
        spawned = time.time() - t0
        pids = {p.pid for p in attached}  # attach.sh execs the worker: the same pid

        def all_contributing():
            evs = events(d)
            ids = {e["worker"] for e in evs if e["event"] == "worker_joined" and e.get("pid") in pids}
            if len(ids) < ATTACHED:
                return None
            for e in steps_of(evs):
                if ids <= {r["worker"] for r in e["ranges"]}:
                    return e
            return None

        if not common.wait_until(lambda: all_contributing() is not None, 900, job, every=0.5):
            common.warn(f"storm: not every attached worker contributed within 900 s (log: {d}.log)")
            b.failed = True
            return
        storm_cpu = common.cpu_seconds(pid) - cpu0
        evs = events(d)
        done = all_contributing()
        joined = sorted(e["t"] for e in evs if e["event"] == "worker_joined" and e.get("pid") in pids)
        ids = {e["worker"] for e in evs if e["event"] == "worker_joined" and e.get("pid") in pids}
        ready = sorted(e["t"] for e in evs if e["event"] == "worker_ready" and e["worker"] in ids)
        after = cpu_per_step(d, pid, job, 100)
    finally:
        common.stop([*attached, job])
    rows = [(f"attach.sh started (all {ATTACHED})", spawned),
            ("first worker_joined", joined[0] - t0), ("last worker_joined", joined[-1] - t0),
            ("last worker_ready", ready[-1] - t0), (f"all {ATTACHED + 1} contributing", done["t"] - t0),
            ("last worker_ready -> all contributing", done["t"] - ready[-1])]
    print(f"{'from the start of the storm':<40s} | {'s':>8s}")
    for name, s in rows:
        print(f"{name:<40s} | {s:8.2f}")
        b.csv_ms("storm", name, s * 1000, "", "", common.load1())
    print(f"coordinator CPU over the storm: {storm_cpu:.2f} s; per step: {1e3 * before:.3f} ms with 1 worker, "
          f"{1e3 * after:.3f} ms with {ATTACHED + 1} ({after / before:.1f}x)" if before and after else
          f"coordinator CPU over the storm: {storm_cpu:.2f} s")
    print(f"goal: all contributing within 10 s of the storm: {'met' if done['t'] - t0 <= 10 else 'not met'} here "
          f"(the {ATTACHED} processes starting on {os.cpu_count()} cores)")


if __name__ == "__main__":
    common.main(run)
