#!/usr/bin/python3
"""PyTorch DDP baseline for scripts/bench.sh's ddp and zoo sections.

Trains a network of the built-in zoo (default the `cnn` of models/models.cc on Fashion-MNIST) with
DistributedDataParallel (gloo, CPU) the way an ElasticPS job of V virtual workers x b samples does, and
prints one JSON object on one line:

    {"program": "ddp", "ranks": R, "mode": M, "steps": N, "samples_per_s": X, "seconds": S, "final_loss": L,
     "model": NAME, "parameters": P}

  /usr/bin/python3 scripts/ddp_baseline.py [--ranks 2] [--steps 300] [--vws 8] [--batch_per_vw 16]
      [--mode accumulate|batch] [--plain] [--threads 1] [--data_dir DIR] [--timeout_s 900]
      [--model cnn|resnet|text_transformer] [--model_depth 20] [--check_tensors FILE.safetensors]
      [--optimizer adamw|adam|sgd] [--momentum M] [--nesterov] [--lr_schedule cosine|constant] [--script FILE.pt]
      [--text_data FILE.jsonl] [--text_vocab vocab.json] [--seq_len 128] [--vocab_size 8000]
      [--model_dim 64] [--model_layers 2] [--model_heads 4]
  --plain (with --ranks 1): plain PyTorch in one process, no process group and no DDP wrapper.
  --model: the network of scripts/zoo_nets.py (the C++ one's tensor names and shapes); resnet and cnn on
      Fashion-MNIST, text_transformer on --text_data (JSONL, members "text" and "label") tokenized as data/text.h
      does with a job's --text_vocab (run_dir/vocab.json), or, without one, random ids in [3, vocab_size) of the
      same [b, seq_len] shape and random labels (a throughput run: no padding).
  --script: a TorchScript module (torch.jit.load) on Fashion-MNIST instead of --model, as `--model=FILE.pt` trains it
      in a job (e.g. examples/scale/make_models.py's 108.5 M MLP).
  --check_tensors: before training, compare the network's parameters and buffers (names and shapes) with a
      job's model.safetensors; a difference ends the run with exit code 2.
  The defaults are the cnn job's (examples/fashion_mnist_cnn.flags): AdamW, cosine.

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
  - pixels normalised as data/dataset.h does ((p/255 - 0.2860) / 0.3530).
The other models take their job's optimizer by flags (scripts/bench/zoo.py passes the example's).
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
    p.add_argument("--model", choices=("cnn", "resnet", "text_transformer"), default="cnn")
    p.add_argument("--model_depth", type=int, default=20, help="resnet: 6n+2")
    p.add_argument("--check_tensors", default="", help="a job's model.safetensors to compare the network with")
    p.add_argument("--script", default="", help="a TorchScript module to train instead of --model")
    p.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), default="adamw")
    p.add_argument("--momentum", type=float, default=0.0, help="sgd")
    p.add_argument("--nesterov", action="store_true", help="sgd")
    p.add_argument("--lr_schedule", choices=("cosine", "constant"), default="cosine")
    p.add_argument("--text_data", default="/usr/share/datasets/spam-assassin/train.jsonl")
    p.add_argument("--text_vocab", default="", help="a job's vocab.json; none: random ids")
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--model_dim", type=int, default=64)
    p.add_argument("--model_layers", type=int, default=2)
    p.add_argument("--model_heads", type=int, default=4)
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
    if a.script and a.model != "cnn":
        p.error("--script trains the module on Fashion-MNIST in place of --model: give one of the two")
    if a.text_vocab and a.model != "text_transformer":
        p.error("--text_vocab is for --model text_transformer")
    if a.model == "resnet" and (a.model_depth < 8 or (a.model_depth - 2) % 6):
        p.error(f"--model_depth {a.model_depth}: resnet needs 6n+2 with n >= 1 (8, 14, 20, ...)")
    if a.model == "text_transformer" and (a.model_dim < 1 or a.model_heads < 1 or a.model_dim % a.model_heads
                                          or a.model_layers < 1 or a.seq_len < 2 or a.vocab_size <= 3):
        p.error(f"text_transformer: --model_dim {a.model_dim} must be a positive multiple of --model_heads "
                f"{a.model_heads}, --model_layers {a.model_layers} >= 1, --seq_len {a.seq_len} >= 2, "
                f"--vocab_size {a.vocab_size} > 3")
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


def fashion_mnist(torch, a):
    """The training images, normalised as data/dataset.h does, [n, 1, 28, 28], and their labels."""
    images = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz"), 0x801, 1)
    x_all = ((torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530).unsqueeze(1).contiguous()
    return x_all, torch.from_numpy(labels.astype(np.int64))


def text_samples(torch, a):
    """--text_data as int64 token ids [n, seq_len] and classes, and the class count: tokenized with --text_vocab,
    or random ids and labels of the same shape without one."""
    import zoo_nets

    with open(a.text_data) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not a.text_vocab:
        g = np.random.default_rng(a.seed)
        ids = g.integers(zoo_nets.CLS_ID + 1, a.vocab_size, size=(len(rows), a.seq_len), dtype=np.int64)
        ids[:, 0] = zoo_nets.CLS_ID
        return torch.from_numpy(ids), torch.from_numpy(g.integers(0, 2, size=len(rows), dtype=np.int64)), 2
    word_ids, labels, seq_len = zoo_nets.read_vocab(a.text_vocab)
    if seq_len != a.seq_len:
        raise ValueError(f"{a.text_vocab}: seq_len {seq_len}, --seq_len {a.seq_len}")
    classes = {label: i for i, label in enumerate(labels)}
    ids = [zoo_nets.encode(r["text"], word_ids, seq_len) for r in rows]
    y = [classes[str(r["label"])] for r in rows]
    return torch.tensor(ids, dtype=torch.int64), torch.tensor(y, dtype=torch.int64), len(labels)


def check_tensors(model, path):
    """Exits 2 when the network's tensor table differs from the safetensors file's."""
    import zoo_nets

    diff = zoo_nets.table_differences(zoo_nets.tensor_table(model), zoo_nets.safetensors_table(path))
    if diff:
        more = f"\n  ... {len(diff) - 20} more" if len(diff) > 20 else ""
        print(f"ddp_baseline.py: --model's tensors differ from {path}:\n  " + "\n  ".join(diff[:20]) + more,
              file=sys.stderr)
        sys.exit(2)


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
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    rank = int(os.environ["RANK"])
    if not a.plain:
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)

    import zoo_nets

    if a.model == "text_transformer":
        x_all, y_all, classes = text_samples(torch, a)
    else:
        (x_all, y_all), classes = fashion_mnist(torch, a), 10

    torch.manual_seed(a.seed)
    if a.script:
        net = torch.jit.load(a.script)
    else:
        net = zoo_nets.make(a.model, depth=a.model_depth, vocab_size=a.vocab_size, seq_len=a.seq_len,
                            dim=a.model_dim, layers=a.model_layers, heads=a.model_heads, classes=classes)
    if a.check_tensors and rank == 0:
        check_tensors(net, a.check_tensors)
    parameters = sum(p.numel() for p in net.parameters())
    model = net if a.plain else DDP(net)  # DDP broadcasts rank 0's parameters (and its buffers before a step)
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    elif a.optimizer == "adam":  # the job's weight decay is an L2 penalty for adam and sgd
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, nesterov=a.nesterov,
                              weight_decay=a.weight_decay)

    def lr_factor(step):  # the coordinator's cosine schedule with linear warm-up
        if a.lr_schedule == "constant":
            return 1.0
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
                          "final_loss": round(loss_sum, 4), "model": a.script or a.model, "parameters": parameters}),
              flush=True)
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
