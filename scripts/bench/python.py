#!/usr/bin/python3
"""python: the Python package's `Trainer.fit` against `elasticps train` on the demo's job.

The demo's job (examples/fashion_mnist_cnn.flags: the built-in cnn, V = 8 x 16, AdamW, cosine), --steps steps, 1 shard,
2 workers, run through the command line (`elasticps train --job FILE --workers 2 --steps=N`) and through
`elasticps.Trainer.from_job(FILE).fit(steps=N, workers=2)` in this process, in interleaved rounds. Columns:
samples/s (result.json's steady rate) and the time from the call (the subprocess's start, or fit()) to the first
step_completed event. Goals (docs/python.md): the same samples/s within the noise, at most 1 s more to the first
step. The Python layer is not in the step: it starts the command line and watches files. Also: fit() on NumPy
arrays of all 60,000 images (written to NPY in the run folder first) to the first step. --steps must exceed the job's
100 warm-up steps.
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

import analysis
import common

sys.path.insert(0, os.path.join(common.ROOT, "python"))
import elasticps  # noqa: E402

ROUNDS = 3


def first_step_t(run_dir):
    """The time of the run's first step_completed event, or None (none yet)."""
    try:
        f = open(os.path.join(run_dir, "events.jsonl"))
    except OSError:
        return None
    with f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e["event"] == "step_completed":
                return e["t"]
    return None


def fashion_mnist():
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, 1, rows, cols)
    with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        y = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    return ((x.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)), y


def run(b):
    b.need_bin("elasticps")
    print(f"== python: the demo's job (cnn, 8 x 16), {b.steps} steps, 1 shard, 2 workers: elasticps train against "
          f"Trainer.fit, medians of {ROUNDS} interleaved rounds (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs CLI | to the first step")
    env = dict(common.ENV, EPS_BIN=common.BIN, EPS_ROOT=common.ROOT)
    sps = {"elasticps train": [], "Trainer.fit": []}
    first = {"elasticps train": [], "Trainer.fit": []}
    digests = set()
    for r in range(ROUNDS):
        d = common.run_dir(f"python_cli_{r}")
        subprocess.run(["rm", "-rf", d])
        t0 = time.time()
        p = subprocess.run([os.path.join(common.BIN, "elasticps"), "train", "--job", common.CNN, "--workers", "2",
                            "--run-dir", d, f"--steps={b.steps}"], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        result = analysis.read_result(d)
        ok = p.returncode == 0 and result is not None
        sps["elasticps train"].append(analysis.samples_per_s(result) if ok else None)
        first["elasticps train"].append(first_step_t(d) - t0 if ok else None)
        if ok:
            digests.add(result["params_sha256"])
        d = common.run_dir(f"python_fit_{r}")
        subprocess.run(["rm", "-rf", d])
        t0 = time.time()
        try:
            trainer = elasticps.Trainer.from_job(common.CNN, bin_dir=common.BIN)
            run_ = trainer.fit(steps=b.steps, workers=2, run_dir=d, progress=False)
            sps["Trainer.fit"].append(analysis.samples_per_s(run_.result))
            first["Trainer.fit"].append(first_step_t(d) - t0)
            digests.add(run_.digest)
        except elasticps.JobError as e:
            common.warn(f"fit failed: {e}")
            sps["Trainer.fit"].append(None)
            first["Trainer.fit"].append(None)
    load = common.load1()
    base = None if None in sps["elasticps train"] else analysis.median(sps["elasticps train"])
    for config in ("elasticps train", "Trainer.fit"):
        if None in sps[config]:
            b.row("python", config, None, base, 0, load)
            continue
        s, f = analysis.median(sps[config]), analysis.median(first[config])
        print(f"{config:<24s} | {s:10.1f} | {common.fmt_ratio(s, base):>12s} | {f:.2f} s "
              f"(rounds {', '.join(f'{x:.2f}' for x in first[config])})")
        b.csv("python", config, f"{s:.1f}", common.fmt_ratio(s, base), seconds=f"{f:.3f}", load=load)
    print(f"   digests: {'the same' if len(digests) == 1 else 'DIFFER: ' + ' '.join(sorted(digests))}")
    if len(digests) != 1:
        b.failed = True

    # fit() on arrays: 60,000 images written to NPY before the job starts.
    x, y = fashion_mnist()
    d = common.run_dir("python_fit_arrays")
    subprocess.run(["rm", "-rf", d])
    t0 = time.time()
    trainer = elasticps.Trainer.from_job(common.CNN, bin_dir=common.BIN)
    try:
        with trainer.start((x, y), steps=b.steps, workers=2, run_dir=d) as job:
            common.wait_until(lambda: first_step_t(d) is not None, 300, proc=job._launcher)
        f = first_step_t(d) - t0
        print(f"{'Trainer.fit on arrays':<24s} | {'':>10s} | {'':>12s} | {f:.2f} s (60,000 x 1 x 28 x 28 float32 "
              f"written to NPY first; stopped after its first step)")
        b.csv("python", "Trainer.fit on arrays: to the first step", seconds=f"{f:.3f}", load=load)
    except (elasticps.JobError, TypeError) as e:
        common.warn(f"fit on arrays failed: {e}")
        b.failed = True


if __name__ == "__main__":
    common.main(run)
