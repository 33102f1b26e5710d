#!/usr/bin/python3
"""usermodel: a model from Python (docs/models.md) against the built-in one it copies.

Samples/s of the CNN job (examples/fashion_mnist_cnn.flags, 1 shard, 1 worker x 8 VWs) with the built-in cnn and
with the same network written in Python and scripted with torch.jit.script (--model=FILE.pt): the TorchScript
interpreter, graph optimization off (the worker turns the JIT's re-optimization and fusers off for the bits), against
libtorch's C++ modules. Goal: the TorchScript model within 10 % of the built-in one's step time. Three interleaved
rounds, medians, and the median and range of the per-round ratios.
"""
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

import analysis
import common

ROUNDS = 3


class Cnn(nn.Module):
    """worker/models.cc's cnn, layer for layer."""

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
    runs = {
        "built-in cnn": lambda r: b.job_sps(f"usermodel_builtin_{r}", 1, common.CNN, *job_flags),
        "TorchScript cnn": lambda r: b.job_sps(f"usermodel_script_{r}", 1, common.CNN, *job_flags,
                                               f"--model={model}"),
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


if __name__ == "__main__":
    common.main(run)
