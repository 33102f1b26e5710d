#!/usr/bin/python3
"""Writes SYNTHETIC click logs in the Criteo format (data/criteo.h, docs/data.md "Criteo"): one line a sample,
the label, 13 integer features and 26 categorical features as 8 hex digits, tab-separated, some cells empty.

Not real data: a stand-in of Criteo's shape for the benchmarks and tests (Criteo's own logs need its licence and a
download this project cannot make). Its shape follows what is published about the real logs: categories per column
drawn from a power law (numpy's Zipf, a = 1.1 to 1.5 by column, so a few values are most of the traffic and most
values are rare), column cardinalities from hundreds to millions, counts as integers (geometric), about 5 % of the
cells missing, and a click rate near 25 %. The label is planted: a logistic function of a few hot categories of
three columns and of two integer columns, so that a model can learn it.

  examples/criteo/synth.py --rows N --out FILE [--seed S]
"""
import argparse
import sys

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.rows < 1:
        p.error("--rows must be at least 1")
    shape = np.random.default_rng(0)  # the distribution: the same for every --seed (train and test files)
    count_p = shape.uniform(0.02, 0.5, 13)
    salt = shape.integers(0, 1 << 32, 26, dtype=np.int64)
    zipf_a = np.linspace(1.1, 1.5, 26)
    cardinality = np.geomspace(300, 3_000_000, 26).astype(np.int64)
    rng = np.random.default_rng(a.seed)  # the samples
    n = a.rows
    ints = rng.geometric(count_p, size=(n, 13)) - 1
    ranks = np.stack([np.minimum(rng.zipf(zipf_a[c], n), cardinality[c]) - 1 for c in range(26)], axis=1)
    cats = (ranks * 2654435761 + salt) % (1 << 32)  # a value's hex: a fixed scramble of its rank
    # The planted signal: hot ranks of columns 0, 5 and 9, and two counts.
    logit = -1.6 + 0.8 * np.log1p(ints[:, 0]) - 0.5 * np.log1p(ints[:, 4])
    for c, w in ((0, 1.5), (5, -1.2), (9, 1.0)):
        logit += w * (ranks[:, c] % 3 == 0)
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    missing_int = rng.random((n, 13)) < 0.05
    missing_cat = rng.random((n, 26)) < 0.05
    with open(a.out, "w") as f:
        for i in range(n):
            cells = [str(labels[i])]
            cells += ["" if missing_int[i, j] else str(ints[i, j]) for j in range(13)]
            cells += ["" if missing_cat[i, j] else f"{cats[i, j]:08x}" for j in range(26)]
            f.write("\t".join(cells) + "\n")
    print(f"{n} synthetic Criteo-format rows, click rate {labels.mean():.3f}: {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
