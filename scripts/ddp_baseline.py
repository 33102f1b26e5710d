#!/usr/bin/python3
"""PyTorch DDP baseline for scripts/bench.sh's ddp section.

Trains the `cnn` of worker/models.cc on Fashion-MNIST with DistributedDataParallel
(gloo, CPU) the way an ElasticPS job of V virtual workers x b samples does, and
prints one JSON object on one line:

    {"program": "ddp", "ranks": R, "mode": M, "steps": N, "samples_per_s": X, "seconds": S, "final_loss": L}

  /usr/bin/python3 scripts/ddp_baseline.py [--ranks 2] [--steps 300] [--vws 8] [--batch_per_vw 16]
      [--mode accumulate|batch] [--plain] [--threads 1] [--data_dir DIR] [--timeout_s 900]
  --plain (with --ranks 1): plain PyTorch in one process, no process group and no DDP wrapper.

Debian's torchrun is broken on Python 3.11, so the ranks are started here by hand:
one process per rank with MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port),
RANK and WORLD_SIZE, torch.set_num_threads(--threads) and OPENBLAS_NUM_THREADS (OpenBLAS keeps its own
thread pool, which torch's setting does not reach; the workers set both too), OMP_WAIT_POLICY=passive.

What matches the ElasticPS job (examples/fashion_mnist_cnn.flags):
  - the model: Conv2d(1,16,5,p2) ReLU MaxPool2 Conv2d(16,32,5,p2) ReLU MaxPool2
    Linear(1568,256) ReLU Dropout(0.25) Linear(256,10);
  - the global batch V*b and its data: VW v of step t takes samples
    [(t*V+v)*b, (t*V+v+1)*b) of the concatenated per-epoch permutations (numpy's
    generator here, not ElasticPS's xoshiro: the same access pattern, not the same
    order); rank r hosts VWs [r*V/R, (r+1)*V/R);
  - --mode accumulate (default): each rank runs its V/R microbatches of b one after
    another with gradient accumulation (no_sync on all but the last, loss / (V/R)),
    so the step's gradient is the mean of the V microbatch gradients, as ElasticPS's
    sum/V; --mode batch: one batch of V*b/R per rank (DDP's usual, faster form, a
    different computation: one forward over the bigger batch);
  - AdamW (lr 0.002, weight decay 1e-4) with the job's cosine schedule (warm-up
    100 steps, or steps/2 when steps <= 200 as bench.sh shortens it; min lr 5e-5);
  - pixels normalised as worker/dataset.h does ((p/255 - 0.2860) / 0.3530).
What does not: dropout draws from torch's global generator, not a per-VW seed.
Timing: from a barrier after the first 5 steps (warm-up) to a barrier after the
last step, as the coordinator's steady_samples_per_s leaves out its first 5 steps.
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import socket
import subprocess
import sys
import time

import numpy as np


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--vws", type=int, default=8, help="V: microbatches per global step")
    p.add_argument("--batch_per_vw", type=int, default=16)
    p.add_argument("--mode", choices=("accumulate", "batch"), default="accumulate")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--weight_decay", type=float, default=0.0001)
    p.add_argument("--warmup_steps", type=int, default=-1, help="-1: 100, or steps/2 when steps <= 200")
    p.add_argument("--min_lr", type=float, default=0.00005)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--timeout_s", type=int, default=900, help="the whole run, ranks included")
    p.add_argument("--plain", action="store_true",
                   help="plain PyTorch: one process, no process group and no DDP wrapper (--ranks 1)")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # set for the rank processes
    a = p.parse_args(argv)
    if a.ranks < 1 or a.steps < 1 or a.vws < 1 or a.batch_per_vw < 1 or a.threads < 1:
        p.error("counts must be positive")
    if a.plain and a.ranks != 1:
        p.error("--plain trains in one process: --ranks 1")
    if a.vws % a.ranks:
        p.error("--vws must be a multiple of --ranks")
    if a.warmup_steps < 0:
        a.warmup_steps = a.steps // 2 if a.steps <= 200 else 100
    return a


def read_idx(path, magic, dims):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    head = np.frombuffer(raw, dtype=">u4", count=1 + dims)
    if head[0] != magic:
        raise ValueError(f"{path}: magic {head[0]:#x}, expected {magic:#x}")
    shape = tuple(int(d) for d in head[1:])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 * (1 + dims)).reshape(shape)


def make_model(nn):
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 256), nn.ReLU(), nn.Dropout(0.25), nn.Linear(256, 10))


class Stream:
    """Samples [lo, hi) of the concatenated per-epoch permutations of n samples."""

    def __init__(self, n, seed):
        self.n, self.seed, self.cache = n, seed, {}

    def perm(self, epoch):
        if epoch not in self.cache:
            self.cache = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.n)}
        return self.cache[epoch]

    def take(self, lo, hi):
        out = []
        while lo < hi:
            e, i = divmod(lo, self.n)
            k = min(hi - lo, self.n - i)
            out.append(self.perm(e)[i:i + k])
            lo += k
        return np.concatenate(out)


def run_rank(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    rank = int(os.environ["RANK"])
    if not a.plain:
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)

    images = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz"), 0x801, 1)
    x_all = ((torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530).unsqueeze(1).contiguous()
    y_all = torch.from_numpy(labels.astype(np.int64))

    torch.manual_seed(a.seed)
    model = make_model(nn) if a.plain else DDP(make_model(nn))  # DDP broadcasts rank 0's parameters
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)

    def lr_factor(step):  # the coordinator's cosine schedule with linear warm-up
        if step < a.warmup_steps:
            return (step + 1) / a.warmup_steps
        t = (step - a.warmup_steps) / max(1, a.steps - a.warmup_steps)
        return (a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))) / a.lr

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    stream = Stream(len(y_all), a.seed)
    per_rank = a.vws // a.ranks
    mine = range(rank * per_rank, (rank + 1) * per_rank)
    b, V = a.batch_per_vw, a.vws

    warmup = min(5, a.steps - 1)  # untimed, as the job's first steps
    loss_sum = 0.0
    for t in range(a.steps):
        if t == warmup:
            if not a.plain:
                dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        if a.mode == "batch":
            idx = torch.from_numpy(stream.take((t * V + mine[0]) * b, (t * V + mine[-1] + 1) * b))
            loss = F.cross_entropy(model(x_all.index_select(0, idx)), y_all.index_select(0, idx))
            loss.backward()
            loss_sum = loss.item()
        else:
            for j, v in enumerate(mine):
                idx = torch.from_numpy(stream.take((t * V + v) * b, (t * V + v + 1) * b))
                sync = j == per_rank - 1
                with (contextlib.nullcontext() if sync or a.plain else model.no_sync()):
                    loss = F.cross_entropy(model(x_all.index_select(0, idx)), y_all.index_select(0, idx))
                    (loss / per_rank).backward()
                loss_sum += loss.item() / per_rank
        opt.step()
        sched.step()
    if not a.plain:
        dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        timed = a.steps - warmup
        print(json.dumps({"program": "ddp", "ranks": a.ranks, "mode": a.mode, "plain": a.plain, "steps": a.steps,
                          "samples_per_s": round(timed * V * b / seconds, 1), "seconds": round(seconds, 3),
                          "final_loss": round(loss_sum, 4)}), flush=True)
    if not a.plain:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(a, master_addr, master_port, rank, base=None):
    """The environment of rank `rank`'s process (started as this script with --rank R and the launcher's arguments):
    the rendezvous at master_addr:master_port and the thread settings. scripts/bench/network.py starts ranks on hosts
    in network namespaces with it."""
    return dict(os.environ if base is None else base, MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                WORLD_SIZE=str(a.ranks), RANK=str(rank), OMP_NUM_THREADS=str(a.threads),
                OPENBLAS_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="passive")


def launch(a, argv):
    port = free_port()
    procs = []
    deadline = time.monotonic() + a.timeout_s
    try:
        for r in range(a.ranks):
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--rank", str(r)],
                                          env=rank_env(a, "127.0.0.1", port, r)))
        codes = []
        for p in procs:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            if codes[-1] != 0:
                break  # a rank failed: the others would wait for it until gloo's timeout
        if any(codes) or len(codes) < len(procs):
            print(f"ddp_baseline.py: a rank failed (exit codes {codes})", file=sys.stderr)
            return 1
        return 0
    except subprocess.TimeoutExpired:
        print(f"ddp_baseline.py: the ranks did not finish within {a.timeout_s} s", file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main():
    a = parse_args()
    if a.rank >= 0:
        run_rank(a)
        return 0
    return launch(a, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
