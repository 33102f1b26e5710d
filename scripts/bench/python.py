#!/usr/bin/python3
"""python: the Python package's `Trainer.fit` against `elasticps train` on the demo's job.

The demo's job (examples/fashion_mnist_cnn.flags: the built-in cnn, V = 8 x 16, AdamW, cosine), --steps steps, 1 shard,
2 workers, run through the command line (`elasticps train --job FILE --workers 2 --steps=N`) and through
`elasticps.Trainer.from_job(FILE).fit(steps=N, workers=2)` in this process, back to back, in ROUNDS rounds whose order
alternates (CLI then fit, fit then CLI, ...: a load that drifts over the run weighs on both alike). Columns:
samples/s (result.json's steady rate), its ratio to the CLI's, and the time from the call (the subprocess's start, or
fit(), which includes the Trainer's construction) to the job's first event (the coordinator is up) and to the first
step_completed event. Then each round's fit/CLI ratio and fit - CLI difference to the first step. Goals
(docs/python.md): the same samples/s within the noise, at most 1 s more to the first step. The Python layer is not in
the step: it starts the command line and watches files. Also: fit() on NumPy arrays of all 60,000 images (written to
NPY in the run folder first) to the first step. --steps must exceed the job's 100 warm-up steps.
"""
import gzip
import json
import os
import resource
import struct
import subprocess
import sys
import time

import numpy as np

import analysis
import common

sys.path.insert(0, os.path.join(common.ROOT, "python"))
import elasticps  # noqa: E402

ROUNDS = 2


def first_t(run_dir, kind=None):
    """The time of the run's first event (of `kind`, if given), or None (none yet)."""
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
            if kind is None or e["event"] == kind:
                return e["t"]
    return None


def first_step_t(run_dir):
    """The time of the run's first step_completed event, or None (none yet)."""
    return first_t(run_dir, "step_completed")


def fashion_mnist():
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        x = np.frombuffer(f.read(), dtype=np.uint8).reshape(n, 1, rows, cols)
    with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        y = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
    return ((x.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)), y


CLI, FIT = "elasticps train", "Trainer.fit"


def run_cli(b, env, d):
    """One `elasticps train` run: (samples/s, to the first event, to the first step, digest), or None."""
    t0 = time.time()
    p = subprocess.run([os.path.join(common.BIN, "elasticps"), "train", "--job", common.CNN, "--workers", "2",
                        "--run-dir", d, f"--steps={b.steps}"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    result = analysis.read_result(d)
    if p.returncode != 0 or result is None:
        common.warn(f"elasticps train failed (exit {p.returncode}): {d}")
        return None
    return (analysis.samples_per_s(result), first_t(d) - t0, first_step_t(d) - t0, result["params_sha256"])


def run_fit(b, d):
    """One Trainer.fit run, timed from the Trainer's construction: as run_cli, and this process's own CPU seconds
    (user + system, its children's not counted) over the run and the run's wall seconds; or None."""
    t0, cpu0 = time.time(), _cpu_s()
    try:
        trainer = elasticps.Trainer.from_job(common.CNN, bin_dir=common.BIN)
        run_ = trainer.fit(steps=b.steps, workers=2, run_dir=d, progress=False)
    except elasticps.JobError as e:
        common.warn(f"fit failed: {e}")
        return None
    return (analysis.samples_per_s(run_.result), first_t(d) - t0, first_step_t(d) - t0, run_.digest,
            _cpu_s() - cpu0, time.time() - t0)


def _cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(b):
    b.need_bin("elasticps")
    print(f"== python: the demo's job (cnn, 8 x 16), {b.steps} steps, 1 shard, 2 workers: elasticps train against "
          f"Trainer.fit back to back, {ROUNDS} rounds in alternating order, medians (host load {common.load1()}, "
          f"{os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs CLI | to the first event | to the first step")
    env = dict(common.ENV, EPS_BIN=common.BIN, EPS_ROOT=common.ROOT)
    got = {CLI: [], FIT: []}  # per round: run_cli's / run_fit's tuple, or None
    for r in range(ROUNDS):
        order = (CLI, FIT) if r % 2 == 0 else (FIT, CLI)
        for config in order:
            d = common.run_dir(f"python_{'cli' if config == CLI else 'fit'}_{r}")
            subprocess.run(["rm", "-rf", d])
            got[config].append(run_cli(b, env, d) if config == CLI else run_fit(b, d))
    load = common.load1()
    ok = all(x is not None for runs in got.values() for x in runs)
    base = analysis.median([x[0] for x in got[CLI]]) if ok else None
    for config in (CLI, FIT):
        if not ok:
            b.row("python", config, None, base, 0, load)
            continue
        runs = got[config]
        s = analysis.median([x[0] for x in runs])
        event, step = analysis.median([x[1] for x in runs]), analysis.median([x[2] for x in runs])
        print(f"{config:<24s} | {s:10.1f} | {common.fmt_ratio(s, base):>12s} | {event:16.2f} s | {step:.2f} s "
              f"(rounds {', '.join(f'{x[2]:.2f}' for x in runs)})")
        b.csv("python", config, f"{s:.1f}", common.fmt_ratio(s, base), seconds=f"{step:.3f}", load=load)
    if ok:
        print("   per round, fit against CLI: samples/s " + ", ".join(
            f"{f[0] / c[0]:.2f}" for c, f in zip(got[CLI], got[FIT])) + "; to the first step " + ", ".join(
            f"{f[2] - c[2]:+.2f} s" for c, f in zip(got[CLI], got[FIT])) + "; to the first event " + ", ".join(
            f"{f[1] - c[1]:+.2f} s" for c, f in zip(got[CLI], got[FIT])))
        print("   Python's own CPU during fit (the package watching the run folder): " + ", ".join(
            f"{f[4]:.2f} s over {f[5]:.1f} s" for f in got[FIT]))
    digests = {x[3] for runs in got.values() for x in runs if x is not None}
    print(f"   digests: {'the same' if len(digests) == 1 else 'DIFFER: ' + ' '.join(sorted(digests))}")
    if len(digests) != 1 or not ok:
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
        print(f"{'Trainer.fit on arrays':<24s} | {'':>10s} | {'':>12s} | {'':>18s} | {f:.2f} s (60,000 x 1 x 28 x 28 "
              f"float32 written to NPY first; stopped after its first step)")
        b.csv("python", "Trainer.fit on arrays: to the first step", seconds=f"{f:.3f}", load=common.load1())
    except (elasticps.JobError, TypeError) as e:
        common.warn(f"fit on arrays failed: {e}")
        b.failed = True


if __name__ == "__main__":
    common.main(run)
