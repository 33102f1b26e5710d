#!/usr/bin/python3
"""The elasticps package's test model and data, and what test_python.py runs in a process of its own.

    python_helper.py accuracy RUN_DIR TEST_X.npy TEST_Y.npy BATCH
        prints {"accuracy": ...}: run.model() (the Net with the trained weights) evaluated here, in Python, by BATCH
        (run it with `elasticps kernels`' environment for the job's floats)
    python_helper.py fit RUN_DIR STEPS
        trains the Net for STEPS steps (test_python.py interrupts it with SIGINT)
"""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("EPS_ROOT", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, os.path.join(ROOT, "python"))
import elasticps  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
# The job: V = 4 VWs of 16 samples, a few steps on 640 images; evaluated on 200.
OPTIONS = dict(optimizer="adamw", lr=2e-3, weight_decay=1e-4, virtual_workers=4, batch_per_vw=16, seed=3,
               eval_batch=100)


class Net(nn.Module):
    """A small CNN for [b, 1, 28, 28] images, 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(x, 1))


def net() -> Net:
    torch.manual_seed(0)
    return Net()


def fashion_mnist(split: str, limit: int):
    """(x float32 [n, 1, 28, 28] normalized as the workers read IDX, y int64 [n])."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, limit)
        pixels = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    with gzip.open(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = np.frombuffer(f.read(n), dtype=np.uint8).astype(np.int64)
    x = (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.2860)) / np.float32(0.3530)
    return x.reshape(n, 1, rows, cols), labels


def main():
    command, run_dir = sys.argv[1], sys.argv[2]
    if command == "accuracy":
        test_x, test_y, batch = np.load(sys.argv[3]), np.load(sys.argv[4]), int(sys.argv[5])
        torch.set_num_threads(1)
        model = elasticps.Run(run_dir, net()).model()
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_x), batch):
                out = model(torch.from_numpy(test_x[i:i + batch]))
                correct += int((out.argmax(1) == torch.from_numpy(test_y[i:i + batch])).sum())
        print(json.dumps({"accuracy": correct / len(test_x)}))
    elif command == "fit":
        x, y = fashion_mnist("train", 640)
        elasticps.Trainer(net(), **OPTIONS).fit((x, y), steps=int(sys.argv[3]), run_dir=run_dir, progress=False)


if __name__ == "__main__":
    main()
