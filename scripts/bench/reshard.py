#!/usr/bin/python3
"""reshard: shards added and removed while a job runs (issue 39; docs/design.md "Elastic shards").

(a) What a change of shards costs a running job: the 36.8 M TorchScript MLP (examples/scale/mlp_37m: 8 VWs of 16,
    AdamW, 442 MB of state: values and two moments) on 2 shards and 2 workers; after step 3 a third shard attaches
    (launcher/attach.sh --shard), after three more steps shard 0 is removed (elasticps shards --remove). Per change:
    the bytes moved (the resharded event's bytes_in: values and optimizer slots), the move's seconds (from
    `resharding` to every shard's commit), the step that took the move (from the previous completed step to its own
    completion: the move, the workers registering again, the step) against the median step before the first
    change, and the median step after. The job's digest must equal the same job's on 2 fixed shards (else the
    section fails).
(b) samples/s against the number of shards: the mlp job (--chunk_elems=8192) with 4 workers on 1 to 4 shards, the
    same digest for all (else the section fails). Two cores bound this host's workers and shards alike: the egress a
    shard more would lift does not show here.
(c) (a) with rows: bench.sh sparse's model (EmbeddingBag(2^20, 32, sparse=True) + an MLP, Adam), 200 steps, the
    changes after step 40, the rows beyond --shard_memory_mb=8 spilled to RocksDB: the rows, their moments and
    versions move with their partitions (the partitions column).
"""
import os
import shutil
import subprocess
import tempfile

import analysis
import common
import sparse

SCALE = os.path.join(common.ROOT, "examples", "scale")
STEPS_A = 12
JOB_A = ["--test_limit=-1", "--lr_schedule=constant", "--warmup_steps=0", "--heartbeat_timeout_ms=20000",
         f"--steps={STEPS_A}"]
SHARDS_B = (1, 2, 3, 4)


def elasticps(*args):
    return subprocess.run([os.path.join(common.BIN, "elasticps"), *args], env=common.ENV, capture_output=True,
                          text=True, timeout=60)


def completed_at(events, step):
    return next((e["t"] for e in events if e["event"] == "step_completed" and e["step"] == step), None)


def change_rows(d, reshards):
    """For each `resharded` event: (label, MB moved, move s, the step that took it in ms)."""
    events = analysis.read_events(d)
    rows = []
    for label, done in reshards:
        step = done["step"]
        before, own = completed_at(events, step - 1), completed_at(events, step)
        took = None if before is None or own is None else 1000 * (own - before)
        rows.append((label, done["bytes_in"] / 1e6, done["seconds"], took))
    return rows


def changes(b, name, flags, extra, steps, attach_after):
    """A job (local.sh --job `flags`, coordinator flags `extra`, `steps` steps) on 2 shards and 2 workers: a third
    shard attached once step `attach_after` is done, shard 0 removed two steps after the move; and the same job on 2
    fixed shards. Prints the table of the two changes; False when a run failed or the digests differ."""
    reference = b.job(f"reshard_{name}_fixed", 2, flags, *extra, f"--steps={steps}", shards=2)
    d = common.run_dir(f"reshard_{name}")
    shutil.rmtree(d, ignore_errors=True)
    with open(f"{d}.log", "w") as log:
        job = subprocess.Popen([common.LOCAL, "--job", flags, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--", *extra, f"--steps={steps}"], env=common.ENV, stdout=log,
                               stderr=subprocess.STDOUT)
    procs = [job]
    try:
        def done(step):
            return completed_at(analysis.read_events(d), step) is not None

        def resharded(n):
            return len(analysis.read_events(d, "resharded")) >= n

        ok = common.wait_until(lambda: done(attach_after), 900, job)
        if ok:
            with open(f"{d}/shard2.log", "w") as log:
                procs.append(subprocess.Popen(
                    [os.path.join(common.ROOT, "launcher", "attach.sh"), "--shard", "2", "--coordinator",
                     open(f"{d}/coordinator.addr").read().strip(), "--token-file", f"{d}/token"],
                    env=common.ENV, stdout=log, stderr=subprocess.STDOUT))
            ok = common.wait_until(lambda: resharded(1), 600, job)
        if ok:
            added = analysis.read_events(d, "resharded")[0]["step"]
            ok = common.wait_until(lambda: done(added + 2), 600, job)
        if ok:
            ok = elasticps("shards", "--run-dir", d, "--remove=0").returncode == 0
        ok = ok and common.wait_until(lambda: resharded(2), 600, job)
        ok = ok and job.wait(timeout=900) == 0
    finally:
        common.stop(procs)
    result = analysis.read_result(d)
    if not ok or result is None or reference is None:
        common.warn(f"reshard: the job with changes of shards failed (log: {d}.log):\n{common.tail(d + '.log')}")
        return False
    same = result["params_sha256"] == reference["params_sha256"]
    if not same:
        common.warn(f"reshard: {name} whose shards changed ended on another digest than on 2 fixed shards")
    events = analysis.read_events(d)
    first = analysis.read_events(d, "resharding")[0]["step"]
    intervals = [1000 * (completed_at(events, s) - completed_at(events, s - 1)) for s in range(2, first)]
    before = analysis.median(intervals) if intervals else None
    last = analysis.read_events(d, "resharded")[-1]["step"]
    after_iv = [1000 * (completed_at(events, s) - completed_at(events, s - 1)) for s in range(last + 1, steps)
                if completed_at(events, s) and completed_at(events, s - 1)]
    after = analysis.median(after_iv) if after_iv else None
    moves = analysis.read_events(d, "resharding")
    done = analysis.read_events(d, "resharded")
    fmt = "{:<28s} | {:>9s} | {:>10s} | {:>8s} | {:>13s} | {:>14s}"
    print(fmt.format("change", "MB moved", "partitions", "move s", "its step, ms", "vs step before"))
    load = common.load1()
    labels = ["2 -> 3 shards (attach)", "3 -> 2 shards (remove 0)"]
    for (label, mb, seconds, took), move in zip(change_rows(d, list(zip(labels, done))), moves):
        print(fmt.format(label, f"{mb:.1f}", str(move["partitions"]), f"{seconds:.2f}",
                         "-" if took is None else f"{took:.0f}", common.fmt_ratio(took, before)))
        b.csv_ms("reshard", f"{name} {label}", took, common.fmt_ratio(took, before), steps, load)
    print(f"   median step before the first change: {before:.0f} ms; after the last: "
          f"{'-' if after is None else f'{after:.0f}'} ms; the digest equals 2 fixed shards': {same}")
    return same


def move_cost(b):
    print(f"-- (a) a change of shards in a running job: mlp_37m (AdamW, 442 MB of state), 2 workers, {STEPS_A} steps")
    out = tempfile.mkdtemp(prefix="eps-reshard-")
    try:
        r = b.program("reshard_models", [common.PY, os.path.join(SCALE, "make_models.py"), out, "mlp_37m"])
        ok = r is not None and changes(b, "mlp_37m", os.path.join(SCALE, "mlp_37m.flags"),
                                       [f"--model={out}/mlp_37m.pt", *JOB_A], STEPS_A, 2)
        b.failed = b.failed or not ok
        print("   'its step': from the previous completed step to the completion of the step the move came before (the")
        print("   move, every worker registering again, the step); the job pauses for it, it does not step during it.")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rows_cost(b):
    steps = 200
    print(f"-- (c) the same with rows: bench.sh sparse's model (EmbeddingBag(2^20, 32, sparse=True), Adam), "
          f"{steps} steps, the changes after step 40, the rows beyond --shard_memory_mb=8 spilled to RocksDB")
    out = tempfile.mkdtemp(prefix="eps-reshard-sparse-")
    try:
        with open(os.path.join(out, "make.py"), "w") as f:
            f.write(sparse.MAKE)
        r = b.program("reshard_sparse_model", [common.PY, os.path.join(out, "make.py"), out, "1"])
        job = [f"--model={out}/hashed.pt", f"--train_data={out}/ids.npy", f"--train_labels={out}/labels.npy",
               *sparse.JOB, "--shard_memory_mb=8"]
        ok = r is not None and changes(b, "sparse", common.MLP, job, steps, 40)
        b.failed = b.failed or not ok
    finally:
        shutil.rmtree(out, ignore_errors=True)


def by_shards(b):
    steps = min(b.steps, 200)
    print(f"-- (b) samples/s against the number of shards: mlp, 4 workers, --chunk_elems=8192, {steps} steps")
    print(f"{'shards':<24s} | {'samples/s':>10s} | vs 1 shard")
    base, digests = None, set()
    for s in SHARDS_B:
        load = common.load1()
        r = b.job(f"reshard_s{s}", 4, common.MLP, f"--steps={steps}", "--test_limit=-1", "--chunk_elems=8192",
                  shards=s)
        sps = analysis.samples_per_s(r) if r else None
        if r:
            digests.add(r["params_sha256"])
        base = base or sps
        b.row("reshard", f"mlp 4 workers {s} shards", sps, base, r["train_seconds"] if r else 0, load)
    if len(digests) > 1:
        common.warn(f"reshard: the mlp ended on different digests over 1 to 4 shards: {digests}")
        b.failed = True


def run(b):
    print(f"== reshard: shards added and removed while a job runs (host load {common.load1()}, "
          f"{os.cpu_count()} cores)")
    move_cost(b)
    by_shards(b)
    rows_cost(b)


if __name__ == "__main__":
    common.main(run)
