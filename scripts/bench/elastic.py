#!/usr/bin/python3
"""elastic: joining and crashing.

One mlp job (examples/fashion_mnist_mlp.flags, 3000 steps whatever --steps says, 1 shard, 2 workers,
--heartbeat_timeout_ms=1000): the median step time, then 3 rounds of: attach a worker (launcher/attach.sh) and time
its first counted contribution; SIGKILL it and time the next completed step. Medians of the 3 rounds, in ms and in
step times. The section follows the job through its events (step_completed, worker_joined, range_confirmed,
worker_dead) and writes what it did and when to RUN_DIR/marks.json; analysis.elastic_report turns both into the
figures.
"""
import json
import os
import signal
import subprocess
import time

import analysis
import common

STEPS = 3000
TIMEOUT_MS = 1000
ROUNDS = 3


def run(b):
    d = common.run_dir("elastic")
    print(f"== elastic: mlp, {STEPS} steps, 1 shard, 2 workers, heartbeat timeout {TIMEOUT_MS} ms "
          f"(host load {common.load1()}, {os.cpu_count()} cores)")
    subprocess.run(["rm", "-rf", d, f"{d}.log"], check=True)
    os.makedirs(os.path.join(d, "logs"))
    load = common.load1()
    with open(f"{d}.log", "w") as log:
        job = subprocess.Popen([common.LOCAL, "--job", common.MLP, "--servers", "1", "--workers", "2", "--run-dir", d,
                                "--", f"--steps={STEPS}", "--test_limit=-1", f"--heartbeat_timeout_ms={TIMEOUT_MS}"],
                               env=common.ENV, stdout=log, stderr=subprocess.STDOUT)
    attached = []
    try:
        ok = measure(b, d, job, attached)
        # The job runs to its end: a failed job is a failed section even when every round was timed.
        try:
            code = job.wait(timeout=300)
            if code != 0:
                common.warn(f"the elastic job failed (log: {d}.log):\n{common.tail(d + '.log')}")
                ok = False
        except subprocess.TimeoutExpired:
            common.warn(f"the elastic job did not finish within 300 s (log: {d}.log)")
            ok = False
    finally:
        common.stop([job, *attached])
    b.failed = b.failed or not ok

    metrics, details = analysis.elastic_report(d, TIMEOUT_MS)
    got = dict(metrics)
    step_ms = got["step time median (2 workers)"]
    print(f"{'metric':<44s} | {'value (ms)':>10s} | in step times")
    for name, ms in metrics:
        if ms is None:
            b.failed = True
            print(f"{name:<44s} | {'failed':>10s} | -")
            b.csv_ms("elastic", name, None, "", STEPS, load)
            continue
        r = f"{ms / step_ms:.1f}" if step_ms else "-"
        print(f"{name:<44s} | {ms:10.1f} | {r}")
        b.csv_ms("elastic", name, ms, r, STEPS, load)
    for line in details:
        print(f"# {line}")
    goal = 1000 + (step_ms or 0)
    print(f"goal: within 1 s plus one step = {goal:.0f} ms (torchrun and EasyScale restart the job: 20-30 s)")
    for label, metric in (("attach.sh start -> first counted", "attach: attach.sh start -> first counted"),
                          ("registered -> first counted", "attach: registered -> first counted"),
                          ("SIGKILL -> next completed step", "kill: SIGKILL -> next completed step")):
        x = got[metric]
        if x is None:
            print(f"  {label:<36s} not measured")
        else:
            verdict = "within" if x <= goal else f"over by {x - goal:.0f} ms"
            print(f"  {label:<36s} {x:8.0f} ms: {verdict}")
    print(f"detection is bounded below by --heartbeat_timeout_ms={TIMEOUT_MS}, less the time since the victim's last")
    print("message (a step request, or a heartbeat every 500 ms): recovery minus the timeout is what the system")
    print("adds. A step that completes between the kill and the detection does not count as recovery.")


def measure(b, d, job, attached):
    """A steady start, then the rounds; each waits 30 steps after its event so the next starts clean. Returns
    False when a round could not be timed."""
    reader = analysis.EventReader(d)
    marks = []

    def save_marks():
        with open(os.path.join(d, "marks.json"), "w") as f:
            json.dump(marks, f)

    def steps_past(n, timeout):
        return common.wait_until(lambda: analysis.last_step(reader.poll()) >= n, timeout, job)

    if not steps_past(100, 120):
        common.warn(f"the elastic job did not reach step 100 (log: {d}.log)")
        return False
    addr = open(os.path.join(d, "coordinator.addr")).read().strip()
    for i in range(1, ROUNDS + 1):
        t = time.time()
        w = subprocess.Popen([common.ATTACH, "--coordinator", addr, "--token-file", os.path.join(d, "token"),
                              "--log", os.path.join(d, "logs", f"attach{i}.log")], env=common.ENV)
        attached.append(w)  # attach.sh execs the worker: w.pid is the worker's
        marks.append({"kind": "attach", "t": t, "pid": w.pid})
        save_marks()
        if not common.wait_until(lambda: analysis.counted(reader.poll(), w.pid), 60, job):
            common.warn(f"round {i}: the attached worker (pid {w.pid}) made no counted contribution")
            return False
        steps_past(analysis.last_step(reader.poll()) + 30, 30)
        t = time.time()
        w.send_signal(signal.SIGKILL)
        marks.append({"kind": "kill", "t": t, "pid": w.pid})
        save_marks()
        w.wait()
        if not common.wait_until(lambda: analysis.recovered(reader.poll(), w.pid), 30, job):
            common.warn(f"round {i}: no step completed after the worker of pid {w.pid} was killed")
            return False
        steps_past(analysis.last_step(reader.poll()) + 30, 30)
    return True


if __name__ == "__main__":
    common.main(run)
