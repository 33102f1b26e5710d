#!/usr/bin/python3
"""usermodel: a model from Python (docs/models.md) against the built-in one it copies.

Samples/s of the CNN job (examples/fashion_mnist_cnn.flags, 1 shard, 1 worker x 8 VWs) with the built-in cnn and
with the same network written in Python and scripted with torch.jit.script (--model=FILE.pt): the TorchScript
interpreter, graph optimization off (the worker turns the JIT's re-optimization and fusers off for the bits), against
libtorch's C++ modules. Goal: the TorchScript model within 10 % of the built-in one's step time. Three interleaved
rounds, medians, and the median and range of the per-round ratios.

Also: (a) the same network trained by plain PyTorch in Python (scripts/ddp_baseline.py --plain: one process, the same
8 microbatches of 16 accumulated per step, the same AdamW and schedule, threads and steps, 5 untimed warm-up steps
as the job's steady_samples_per_s), in the same rounds: goal, the 1-worker job at least as fast (ratio >= 1.0);
(b) the peak RSS (VmHWM) of the one worker with the TorchScript cnn at V = 1, 4, 16 VWs: goal, flat.
"""
import os
import tempfile
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import analysis
import common

ROUNDS = 3


class Cnn(nn.Module):
    """models/models.cc's cnn, layer for layer."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 256)
        self.dropout = nn.Dropout(0.25)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.dropout(F.relu(self.fc1(torch.flatten(x, 1)))))


def run(b):
    print(f"== usermodel: cnn built in and from TorchScript, 1 worker x 8 VWs, {b.steps} steps, 1 shard, medians of "
          f"{ROUNDS} interleaved rounds (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs built-in")
    model = os.path.join(tempfile.mkdtemp(prefix="eps-bench-usermodel-"), "cnn.pt")
    torch.manual_seed(0)
    torch.jit.script(Cnn()).save(model)
    job_flags = common.job_flags(b.steps)

    def plain(r):
        out = b.program(f"usermodel_plain_{r}", [common.PY, os.path.join(common.ROOT, "scripts", "ddp_baseline.py"),
                                                 "--ranks", "1", "--plain", "--steps", str(b.steps)])
        found = analysis.find(out or [], program="ddp")
        return (found["samples_per_s"], found["seconds"]) if found else (None, None)

    runs = {
        "built-in cnn": lambda r: b.job_sps(f"usermodel_builtin_{r}", 1, common.CNN, *job_flags),
        "TorchScript cnn": lambda r: b.job_sps(f"usermodel_script_{r}", 1, common.CNN, *job_flags,
                                               f"--model={model}"),
        "plain PyTorch (Python)": plain,
    }
    load = common.load1()
    sps, secs = common.interleaved(runs, ROUNDS)
    failed = any(None in v for v in sps.values())
    base = None if None in sps["built-in cnn"] else analysis.median(sps["built-in cnn"])
    for config in runs:
        ok = None not in sps[config]
        b.row("usermodel", config, analysis.median(sps[config]) if ok else None, base,
              analysis.median(secs[config]) if ok else None, load)
    b.failed = b.failed or failed
    p = analysis.paired(sps["built-in cnn"], sps["TorchScript cnn"])
    print("   paired (median and range of the per-round ratios, TorchScript / built-in samples/s): " +
          ("-" if p is None else f"{p[0]:.2f} ({p[1]:.2f}-{p[2]:.2f}); goal >= 0.90"))
    for config in ("built-in cnn", "TorchScript cnn"):
        p = analysis.paired(sps["plain PyTorch (Python)"], sps[config])
        print(f"   paired, {config} (ElasticPS, 1 worker) / plain PyTorch samples/s: " +
              ("-" if p is None else f"{p[0]:.2f} ({p[1]:.2f}-{p[2]:.2f}); goal >= 1.00"))
    memory(b, model)


def peak_rss_mib(run_dir, done):
    """The worker's VmHWM (MiB), polled from /proc while the job runs (the high-water mark only grows: the last
    reading is the peak but for the worker's last moments)."""
    pid_file, peak = os.path.join(run_dir, "pids", "worker0.pid"), None
    while not done.is_set():
        try:
            with open(pid_file) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1]) / 1024.0
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return peak


def memory(b, model):
    steps = min(b.steps, 60)
    print(f"== usermodel: peak RSS of the 1 worker with the TorchScript cnn as V grows ({steps} steps, 16 samples "
          "per VW, 1 shard)")
    print(f"{'config':<24s} | {'peak RSS MiB':>12s} | ratio vs V = 1")
    base = None
    for v in (1, 4, 16):
        name = f"usermodel_rss_v{v}"
        done, got = threading.Event(), {}
        poll = threading.Thread(target=lambda: got.setdefault("mib", peak_rss_mib(common.run_dir(name), done)))
        poll.start()
        r = b.job(name, 1, common.CNN, *common.job_flags(steps), f"--model={model}", f"--virtual_workers={v}")
        done.set()
        poll.join()
        mib = got.get("mib") if r else None
        base = mib if v == 1 else base
        print(f"{'V = ' + str(v):<24s} | {'-' if mib is None else f'{mib:.1f}':>12s} | "
              f"{common.fmt_ratio(mib, base)}")
        b.failed = b.failed or mib is None


if __name__ == "__main__":
    common.main(run)
