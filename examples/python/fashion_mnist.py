"""Shared by the examples: Fashion-MNIST from Debian's dataset-fashion-mnist as NumPy arrays, normalized as the
ElasticPS workers read the IDX files."""
import gzip
import os
import struct
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))
# `import elasticps` from the tree (scripts/setup.sh installs a .pth file that does the same).
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def load(split: str, limit: int = 0):
    """(x float32 [n, 1, 28, 28], y int64 [n]) of the `train` or `test` split, its first `limit` samples (0: all)."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, limit) if limit > 0 else n
        pixels = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    with gzip.open(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        y = np.frombuffer(f.read(n), dtype=np.uint8).astype(np.int64)
    x = (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.2860)) / np.float32(0.3530)
    return x.reshape(n, 1, rows, cols), y
