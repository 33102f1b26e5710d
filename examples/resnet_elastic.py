#!/usr/bin/env python3
"""ResNet-20 on Fashion-MNIST (examples/fashion_mnist_resnet.flags), trained elastically: launcher/local.sh with
two workers, a third attached at step JOIN (default 3000), local.sh's worker1 SIGTERMed (a graceful leave) at step
LEAVE (default 6000). Prints result.json at the end (docs/models.md, "The zoo", has the figures).

    examples/resnet_elastic.py RUN_DIR [EPOCHS]      # EPOCHS: 30, the recipe's"""
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from events import EventReader
d = sys.argv[1]
epochs = sys.argv[2] if len(sys.argv) > 2 else "30"
JOIN, LEAVE = int(os.environ.get("JOIN", 3000)), int(os.environ.get("LEAVE", 6000))
env = dict(os.environ, OMP_WAIT_POLICY="passive", EPS_BIN=os.path.join(ROOT, "build", "bin"))
job = subprocess.Popen([os.path.join(ROOT, "launcher", "local.sh"), "--job", os.path.join(ROOT, "examples", "fashion_mnist_resnet.flags"),
                        "--servers", "1", "--workers", "2", "--run-dir", d, "--", f"--epochs={epochs}"],
                       env=env, stdout=open(d + ".local.log", "w"), stderr=subprocess.STDOUT)
def wait_step(n):
    r = None
    while True:
        if r is None and os.path.exists(os.path.join(d, "events.jsonl")):
            r = EventReader(d)
        for e in (r.poll() if r else []):
            if e["event"] == "step_completed" and e["step"] >= n:
                return
        if job.poll() is not None:
            raise SystemExit(f"job exited {job.returncode}")
        time.sleep(1)
wait_step(JOIN)
addr = open(os.path.join(d, "coordinator.addr")).read().strip()
att = subprocess.Popen([os.path.join(ROOT, "launcher", "attach.sh"), "--coordinator", addr, "--token-file", os.path.join(d, "token"),
                        "--log", os.path.join(d, "logs", "attached.log"), "--report-file", os.path.join(d, "logs", "attached.json")], env=env)
print("attached at", JOIN, time.ctime(), flush=True)
wait_step(LEAVE)
pid = int(open(os.path.join(d, "pids", "worker1.pid")).read())
os.kill(pid, signal.SIGTERM)
print("worker1 SIGTERMed at", LEAVE, time.ctime(), flush=True)
print("local.sh exit", job.wait(), time.ctime(), flush=True)
att.wait(timeout=120)
print(json.dumps(json.load(open(os.path.join(d, "result.json"))), indent=1))
