#!/usr/bin/python3
"""sparse: a model whose parameters are almost all one embedding table (issue 36), as ElasticPS trains it with the
table a sparse table, against plain PyTorch in one process.

The model (written here with Debian's python3-torch): nn.EmbeddingBag(2^20, 32, mode="sum", sparse=True) over 49
hashed categorical ids a sample, then Linear(32, 64), ReLU, Linear(64, 2): 33.6 M parameters, 99.99 % of them the
table. The data is synthetic and Criteo-shaped (documented as such): 65,536 samples of 49 ids drawn from a power law
(numpy's Zipf, a = 1.2, hashed into the 2^20 buckets), the label planted in a few hot ids. A step is 8 VWs of 16
(128 samples), Adam (the table: lazy, row-wise Adam = torch.optim.SparseAdam's arithmetic).

Rows:
  plain PyTorch   one process, 1 thread: SparseAdam for the table, Adam for the MLP, batch 128 (the goal's baseline);
                  from a new model (its table's moments untouched, as a job's), before the jobs and again after them
                  (the mean of both)
  plain, 8 x 16   the same, its 128 samples as 8 micro-batches of 16 whose gradients accumulate: what 8 VWs of 16
                  compute (the column "vs 8 x 16": each V = 8 row against it)
  1 worker        local.sh 1 shard x 1 worker (the ratio: the goal is 1.0x)
  2 workers       1 shard x 2 workers (goal 1.6x of 1 worker, on 2 cores: what the cores allow)
  10x memory      1 worker, --shard_memory_mb a tenth of the state of the rows the run touches (its distinct ids
                  over steps x 128 samples, with Adam's moments and the cache's overhead): the spill tier; the
                  module's table_ids names the next plan's rows, which the shard reads ahead (warm rows)
  looked up       1 worker, --worker_table_mb=16: the worker does not hold the table (128 MiB) but pulls the rows its
                  batches read by id at each step (the module's table_ids) into a compact table of the batch's rows
                  (its with_table_ids); 2 workers likewise
  looked up, 10x  looked up with 10x memory's --shard_memory_mb (the ratio against looked up)
  looked up, lazy the same without with_table_ids: the rows written at their ids into lazy memory
  exact           --sparse_optimizer=exact: the table as a dense tensor (what ElasticPS did before), fewer steps
  1 VW of 128     1 worker, V = 1 of 128 samples: plain PyTorch's batch as one VW, so that the ratio is the parameter
                  server's cost alone (another job: other bits than V = 8's)
Columns: samples/s (result.json's steady rate), the ratio to plain PyTorch, the ratio to plain 8 x 16, and the bytes
pushed + pulled a step against the table's 128 MiB. The digests of every row but exact's and 1 VW of 128's must agree
(else the section fails).

Then a table larger than the host's memory: the built-in dlrm (--model=dlrm) on synthetic Criteo-format logs
(examples/criteo/synth.py, 20,000 rows; documented there as synthetic), 8 x 16, Adam, dim 16, 1 shard x 1 worker:
  held            2^20 rows (64 MiB): the worker holds the table
  looked up       the same table, --worker_table_mb=16: looked up by the batches' rows
  2^31 rows       a 128 GiB table on this 24 GiB host: looked up (above the default 1024 MiB), exported as a
                  table file
  unbounded keys  --hash_buckets=0: the categories' 63-bit keys, a table of unbounded keys (always looked up)
Columns: samples/s, the ratio to held, and the worker's peak resident memory (its report's peak_rss_mb). Then each
run's export evaluated over the 20,000 rows (`elasticps evaluate`, batch 250): the held table's export holds it dense,
the others' leave it to a table file, whose rows each batch reads by id; samples/s over the command's whole wall
time (libtorch's start and the model's load included) and the command's peak resident memory (GNU time's %M).
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

import analysis
import common

ROWS, DIM, IDS = 1 << 20, 32, 49
MAKE = f"""
import sys, time, json
from typing import Dict
import numpy as np
import torch
import torch.nn as nn

class Hashed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag({ROWS}, {DIM}, mode="sum", sparse=True)
        self.fc1 = nn.Linear({DIM}, 64)
        self.fc2 = nn.Linear(64, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(self.emb(x))))

    @torch.jit.export
    def table_ids(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {{"emb.weight": x}}

class Compact(Hashed):
    @torch.jit.export
    def with_table_ids(self, x: torch.Tensor, ids: Dict[str, torch.Tensor]) -> torch.Tensor:
        return ids["emb.weight"]

d, steps, again = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["again"]  # again: measure only
torch.manual_seed(0)
torch.set_num_threads(1)
m = Hashed()
c = Compact()
c.load_state_dict(m.state_dict())
rng = np.random.default_rng(11)
n = 65536
ids = (rng.zipf(1.2, (n, {IDS})) * 2654435761 % {ROWS}).astype(np.int64)
labels = (np.isin(ids, np.arange(0, 4096, 7)).sum(1) % 2).astype(np.int64)
if not again:
    torch.jit.script(m).save(d + "/hashed.pt")
    torch.jit.script(c).save(d + "/compact.pt")
    np.save(d + "/ids.npy", ids)
    np.save(d + "/labels.npy", labels)
# Plain PyTorch, one process: SparseAdam for the table, Adam for the rest, 128 samples a step.
x, y = torch.from_numpy(ids), torch.from_numpy(labels)
loss_fn = nn.CrossEntropyLoss()
# k micro-batches of 128 / k a step, their gradients accumulated: k = 8 computes what 8 VWs of 16 do. Each rate starts
# from a new model and optimizer, its table and moments untouched (as a job's start): neither rate finds the rows the
# other faulted in.
def rate(k):
    torch.manual_seed(0)
    m = Hashed()
    opt = [torch.optim.SparseAdam([m.emb.weight], lr=1e-3),
           torch.optim.Adam([p for n_, p in m.named_parameters() if not n_.startswith("emb")], lr=1e-3)]
    def step(i):
        lo, b = (i * 128) % (n - 128), 128 // k
        for o in opt: o.zero_grad()
        for j in range(k):
            (loss_fn(m(x[lo + j * b:lo + (j + 1) * b]), y[lo + j * b:lo + (j + 1) * b]) / k).backward()
        for o in opt: o.step()
    for i in range(5): step(i)
    t = time.perf_counter()
    for i in range(steps): step(i + 5)
    return steps * 128 / (time.perf_counter() - t)
print(json.dumps({{"program": "plain", "samples_per_s": rate(1), "accumulated_samples_per_s": rate(8),
                  "touched_rows": int(np.unique(ids[:min(n, steps * 128)]).size)}}))
"""
JOB = ["--virtual_workers=8", "--batch_per_vw=16", "--optimizer=adam", "--momentum=0", "--lr=0.001",
       "--test_limit=-1", "--seed=1", "--lr_schedule=constant", "--warmup_steps=0"]
TABLE_BYTES = ROWS * DIM * 4


def run(b):
    b.need_bin("worker")
    d = tempfile.mkdtemp(prefix="eps-bench-sparse-")
    try:
        measure(b, d, min(b.steps, 300))
    finally:
        shutil.rmtree(d, ignore_errors=True)  # the module files and the data: 300 MB


def measure(b, d, steps):
    with open(os.path.join(d, "make.py"), "w") as f:
        f.write(MAKE)
    print(f"== sparse: EmbeddingBag(2^20, 32, sparse=True) + MLP, 49 ids a sample (synthetic, Criteo-shaped), "
          f"8 x 16, Adam, {steps} steps (host load {common.load1()}, {os.cpu_count()} cores)")
    out = b.program("sparse_plain", [common.PY, os.path.join(d, "make.py"), d, str(steps)])
    plain = analysis.find(out or [], program="plain")
    if plain is None:
        return
    data = [f"--train_data={d}/ids.npy", f"--train_labels={d}/labels.npy"]
    lazy, compact = f"--model={d}/hashed.pt", f"--model={d}/compact.pt"
    # The state of the rows a run touches: 3 x 32 floats a row with Adam's moments, and the shard cache's 86 bytes
    # of bookkeeping (server/row_cache.cc RowCache::OverheadBytes).
    touched_mb = plain["touched_rows"] * (DIM * 3 * 4 + 86) / (1 << 20)
    runs = [("1 worker", 1, [lazy, f"--steps={steps}"]), ("2 workers", 2, [lazy, f"--steps={steps}"]),
            ("10x memory", 1, [lazy, f"--steps={steps}", f"--shard_memory_mb={max(1, round(touched_mb / 10))}"]),
            ("looked up", 1, [compact, f"--steps={steps}", "--worker_table_mb=16"]),
            ("looked up, 2 w", 2, [compact, f"--steps={steps}", "--worker_table_mb=16"]),
            ("looked up, 10x", 1, [compact, f"--steps={steps}", "--worker_table_mb=16",
                                   f"--shard_memory_mb={max(1, round(touched_mb / 10))}"]),
            ("looked up, lazy", 1, [lazy, f"--steps={steps}", "--worker_table_mb=16"]),
            ("exact", 1, [lazy, f"--steps={min(steps, 20)}", "--sparse_optimizer=exact"]),
            ("1 VW of 128", 1, [lazy, f"--steps={steps}", "--virtual_workers=1", "--batch_per_vw=128"])]
    results = [(name, b.job(f"sparse_{name.replace(' ', '_')}", workers, common.MLP, *data, *JOB, *extra))
               for name, workers, extra in runs]
    # Plain PyTorch again after the jobs (this host's share drifts over the section's minutes): the mean of both.
    out = b.program("sparse_plain_again", [common.PY, os.path.join(d, "make.py"), d, str(steps), "again"])
    again = analysis.find(out or [], program="plain") or plain
    base = (plain["samples_per_s"] + again["samples_per_s"]) / 2
    accumulated = (plain["accumulated_samples_per_s"] + again["accumulated_samples_per_s"]) / 2
    print(f"{'config':<16s} | {'samples/s':>10s} | vs plain | vs 8 x 16 | bytes a step / table")
    print(f"{'plain PyTorch':<16s} | {base:10.0f} |    1.00x |           | "
          f"(before and after the jobs: {plain['samples_per_s']:.0f}, {again['samples_per_s']:.0f})")
    print(f"{'plain, 8 x 16':<16s} | {accumulated:10.0f} | {accumulated / base:7.2f}x |     1.00x | "
          f"({plain['accumulated_samples_per_s']:.0f}, {again['accumulated_samples_per_s']:.0f})")
    b.csv("sparse", "plain PyTorch", f"{base:.1f}", "1.00", steps)
    b.csv("sparse", "plain, 8 x 16", f"{accumulated:.1f}", f"{accumulated / base:.3f}", steps)
    digests = {}
    for name, r in results:
        if r is None:
            continue
        sps = analysis.samples_per_s(r)
        per_step = (r["push_bytes"] + r["pull_bytes"]) / r["steps"]
        same = "" if name in ("exact", "1 VW of 128") else f"{sps / accumulated:7.2f}x"
        print(f"{name:<16s} | {sps:10.0f} | {sps / base:7.2f}x | {same:>9s} | {per_step / 1e3:9.0f} kB = "
              f"{100 * per_step / TABLE_BYTES:.2f} %")
        b.csv("sparse", name, f"{sps:.1f}", f"{sps / base:.3f}", r["steps"])
        if name not in ("exact", "1 VW of 128"):
            digests[name] = r["params_sha256"]
    print(f"(10x memory: the run touches {plain['touched_rows']:,} rows, {touched_mb:.0f} MiB of state; "
          f"--shard_memory_mb={max(1, round(touched_mb / 10))})")
    if len(set(digests.values())) > 1:
        common.warn(f"sparse: the digests differ: {digests}")
        b.failed = True
    larger_than_memory(b, d, steps)


def larger_than_memory(b, d, steps):
    criteo = os.path.join(common.ROOT, "examples", "criteo")
    data = os.path.join(d, "criteo.txt")
    if b.program("sparse_criteo_data", [common.PY, os.path.join(criteo, "synth.py"), "--rows", "20000", "--out",
                                        data]) is None:
        return
    flags = os.path.join(criteo, "dlrm_builtin.flags")
    job = [f"--train_data={data}", "--test_limit=-1", "--batch_per_vw=16", f"--steps={steps}"]
    runs = [("held (2^20 rows)", [f"--hash_buckets={1 << 20}"]),
            ("looked up (2^20)", [f"--hash_buckets={1 << 20}", "--worker_table_mb=16"]),
            ("2^31 rows, 128 GiB", [f"--hash_buckets={1 << 31}"]),
            ("unbounded keys", ["--hash_buckets=0"])]
    print(f"\n{'dlrm, dim 16':<20s} | {'samples/s':>10s} | vs held | worker peak RSS | evaluate: samples/s, peak RSS")
    base = None
    for name, extra in runs:
        tag = "sparse_dlrm_" + name.split(" ")[0].replace("^", "")
        r = b.job(tag, 1, flags, *job, *extra)
        if r is None:
            continue
        with open(os.path.join(common.RUNS, tag, "logs", "worker0.json")) as f:
            rss = json.load(f)["peak_rss_mb"]
        sps = analysis.samples_per_s(r)
        base = base or sps
        evaluated = evaluate(b, tag, data)
        print(f"{name:<20s} | {sps:10.0f} | {sps / base:6.2f}x | {rss:11d} MiB | "
              + (f"{evaluated[0]:8.0f}, {evaluated[1]:6.0f} MiB" if evaluated else "failed"))
        b.csv("sparse", "dlrm " + name, f"{sps:.1f}", f"{sps / base:.3f}", r["steps"])
        if evaluated:
            b.csv("sparse", "dlrm evaluate " + name, f"{evaluated[0]:.1f}", "", 0)


def evaluate(b, tag, data):
    """`elasticps evaluate` of run `tag`'s export over `data`: (samples/s over its wall time, peak RSS in MiB), or
    None if it failed."""
    rss = os.path.join(common.RUNS, f"{tag}_evaluate.rss")
    start = time.monotonic()
    out = b.program(f"{tag}_evaluate", ["/usr/bin/time", "-f", "%M", "-o", rss, os.path.join(common.BIN, "elasticps"),
                                        "evaluate", "--model", os.path.join(common.RUNS, tag, "model.safetensors"),
                                        "--data", data, "--data-format", "criteo", "--batch", "250", "--json"])
    seconds = time.monotonic() - start
    counted = [o for o in out or [] if "count" in o]
    if not counted:
        b.failed = True
        return None
    with open(rss) as f:
        return counted[-1]["count"] / seconds, int(f.read().split()[-1]) / 1024


if __name__ == "__main__":
    common.main(run)
