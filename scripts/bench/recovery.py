#!/usr/bin/python3
"""recovery: how long a running job stands still after a SIGKILL of a shard, or of the coordinator and a shard.

The mlp job (examples/fashion_mnist_mlp.flags) on 2 shards x 2 workers, a checkpoint every 5 steps, local.sh
--supervise (which restarts a killed shard or coordinator after 0.2 s), not held: the kill lands wherever the steps
are once step KILL_AFTER is done. From the coordinator's events: the seconds from the SIGKILL to the rollback done
(rolled_back; a restarted coordinator whose shards are at most a step apart resumes without one: coordinator_resumed)
and to the first step completed after it, which is a step done again. ROUNDS fresh jobs per case; each job is stopped after its kill. A run whose next step
comes more than SLOW_S after the kill is counted: such a run waited on a timeout (--pull_wait_ms 30 s,
--rpc_timeout_s 60 s, --step_timeout_s), not on work.
"""
import os
import signal
import subprocess
import time

import analysis
import common

ROUNDS = 5
KILL_AFTER = 40
SLOW_S = 5.0
FLAGS = ["--steps=100000", "--test_limit=-1"]
CASES = (("shard1", ("shard1",)), ("coordinator + shard1", ("coordinator", "shard1")))


def kill_once(b, name, victims):
    """One job: SIGKILL of `victims` after step KILL_AFTER; returns (to rollback, to next step) in s, or None."""
    d = common.run_dir(name)
    subprocess.run(["rm", "-rf", d, f"{d}.log"], check=True)
    with open(f"{d}.log", "w") as log:
        job = subprocess.Popen([common.LOCAL, "--job", common.MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "5", "--supervise", "--", *FLAGS],
                               env=common.ENV, stdout=log, stderr=subprocess.STDOUT)
    try:
        done = lambda: analysis.read_events(d, "step_completed")  # noqa: E731
        if not common.wait_until(lambda: any(e["step"] >= KILL_AFTER for e in done()), 180, job):
            common.warn(f"recovery: {name} did not reach step {KILL_AFTER} (log: {d}.log)")
            return None
        pids = [int(open(os.path.join(d, "pids", f"{v}.pid")).read()) for v in victims]
        killed = time.time()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        after = lambda kind: [e for e in analysis.read_events(d, kind) if e["t"] > killed]  # noqa: E731
        back = lambda: after("rolled_back") + after("coordinator_resumed")  # noqa: E731
        if not common.wait_until(lambda: after("step_completed") and back(), 300, job):
            common.warn(f"recovery: {name} did not step again within 300 s of the kill (log: {d}.log)")
            return None
        return min(e["t"] for e in back()) - killed, after("step_completed")[0]["t"] - killed
    finally:
        common.stop([job])


def run(b):
    b.need_bin("worker")
    print(f"== recovery: SIGKILL to the rollback done and to the next completed step, mlp 2 shards x 2 workers, "
          f"a checkpoint every 5 steps, {ROUNDS} jobs per case (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'killed':<22s} | {'runs':>4s} | {'to rollback, median':>19s} | {'to next step, median':>20s} | "
          f"{'max':>7s} | over {SLOW_S:.0f} s")
    for label, victims in CASES:
        runs = [kill_once(b, f"recovery_{'_'.join(victims)}_{i}", victims) for i in range(ROUNDS)]
        ok = [r for r in runs if r is not None]
        if len(ok) < len(runs):
            b.failed = True
        if not ok:
            print(f"{label:<22s} | {0:4d} | failed")
            continue
        rollback = analysis.median([r[0] for r in ok])
        step = analysis.median([r[1] for r in ok])
        worst = max(r[1] for r in ok)
        slow = sum(1 for r in ok if r[1] > SLOW_S)
        print(f"{label:<22s} | {len(ok):4d} | {rollback:17.2f} s | {step:18.2f} s | {worst:5.2f} s | {slow}")
        b.csv_ms("recovery", f"{label}: to the next step (median)", step * 1000, "", "", common.load1())


if __name__ == "__main__":
    common.main(run)
