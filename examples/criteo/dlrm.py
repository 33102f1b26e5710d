#!/usr/bin/python3
"""Writes a DLRM-style click model as TorchScript for ElasticPS (`--model=FILE.pt --data_format=criteo`).

The model takes a Criteo sample as ElasticPS reads it (data/criteo.h): 39 int64 features, the 13 counts and the
26 categories already hashed with their column into rows [0, ROWS) of one shared table (row 0: missing). As DLRM
(Naumov et al., 2019): the counts through log1p and a bottom MLP to a DIM vector, the categories through
`nn.Embedding(ROWS, DIM, sparse=True)` (a sparse table: a step moves and steps only the rows its batch touched), the
pairwise dot products of the 27 vectors, then a top MLP to 2 classes (click or not).

  examples/criteo/dlrm.py OUT.pt [--rows 1048576] [--dim 16] [--seed 0]

Train with the same rows as --hash_buckets, e.g. (the data from examples/criteo/synth.py, or Criteo's own logs):
  launcher/local.sh --job examples/criteo/dlrm.flags --servers 2 --workers 2 --run-dir runs/dlrm
"""
import argparse

import torch
import torch.nn as nn

INTEGERS, CATEGORIES = 13, 26


class Dlrm(nn.Module):
    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(rows, dim, sparse=True)
        self.bottom = nn.Sequential(nn.Linear(INTEGERS, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        pairs = (CATEGORIES + 1) * CATEGORIES // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x):
        # 13 counts, 26 categories (TorchScript takes no module-level constants).
        d = self.bottom(torch.log1p(x[:, :13].clamp(min=0).float()))  # [b, dim]
        z = torch.cat([d.unsqueeze(1), self.emb(x[:, 13:])], 1)  # [b, 27, dim]
        dots = torch.bmm(z, z.transpose(1, 2))  # [b, 27, 27]
        ij = torch.triu_indices(27, 27, 1)
        return self.top(torch.cat([d, dots[:, ij[0], ij[1]]], 1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--rows", type=int, default=1 << 20)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.jit.script(Dlrm(a.rows, a.dim)).save(a.out)


if __name__ == "__main__":
    main()
