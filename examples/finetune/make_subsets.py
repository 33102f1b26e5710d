#!/usr/bin/python3
"""Fashion-MNIST split by class for the fine-tuning example (examples/finetune/run.sh).

Writes into OUT, as NPY files the built-in models take (float32 [n, 1, 28, 28] normalized as the IDX
reader does, int64 labels):
  a_train_{x,y}.npy, a_test_{x,y}.npy   task A: classes 0-4 (T-shirt, trouser, pullover, dress, coat),
                                        every training and test image of them
  b_train_{x,y}.npy, b_test_{x,y}.npy   task B: classes 5-9 (sandal, shirt, sneaker, bag, ankle boot),
                                        the first --b-train training images of them (a small labelled
                                        set: where starting from a trained model pays) and every test one
Labels keep their Fashion-MNIST numbers (task B's are 5-9).
"""
import argparse
import gzip
import os

import numpy as np

MEAN, STD = np.float32(0.2860), np.float32(0.3530)


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", required=True)
    p.add_argument("--b-train", type=int, default=1000, help="task B's training images (default 1000)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(a.data_dir, f"{prefix}-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
        y = read_idx(os.path.join(a.data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 8).astype(np.int64)
        # As the IDX reader computes it, in float32: (p / 255 - mean) / std.
        x = ((x.astype(np.float32) / np.float32(255)) - MEAN) / STD
        for task, classes in (("a", range(0, 5)), ("b", range(5, 10))):
            keep = np.isin(y, list(classes))
            xs, ys = x[keep], y[keep]
            if task == "b" and split == "train":
                xs, ys = xs[:a.b_train], ys[:a.b_train]
            np.save(os.path.join(a.out, f"{task}_{split}_x.npy"), np.ascontiguousarray(xs, dtype=np.float32))
            np.save(os.path.join(a.out, f"{task}_{split}_y.npy"), ys)
            print(f"{task}_{split}: {len(ys)} images of classes {classes.start}-{classes.stop - 1}")


if __name__ == "__main__":
    main()
