#!/usr/bin/python3
"""scaling: the cost per step as V and shards grow.

Ms per step of the mlp with 1 sample per VW (--train_limit=2048, 1 worker at 1 thread) as V grows from 1 to 1024,
and as shards grow (1, 2, 4 at V = 16), against the plain libtorch loop (build/bin/baseline) over V microbatches.
Ms per step is the median interval between consecutive step_completed events; each figure the best of 2
interleaved passes.
"""
import os

import analysis
import common

VS = (1, 4, 16, 64, 256, 1024)
SHARDS = (1, 2, 4)


def steps_for(v):
    return min(200, max(20, 4096 // v))


def run(b):
    print("== scaling: mlp (784-128-10, 101,770 params), 1 sample per VW, --train_limit=2048, 1 worker at 1 thread;")
    print("   ms/step = the median interval between completed steps (step_completed events); plain loop =")
    print("   build/bin/baseline over the same V microbatches (no parameter server; total time / steps); each figure")
    print(f"   the best of 2 interleaved passes (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<22s} | {'steps':>6s} | {'ms/step':>9s} | {'ms per VW':>9s} | {'plain ms/step':>12s} | "
          f"{'vs plain loop':>13s} | vs first row")
    common_flags = ["--test_limit=-1", "--batch_per_vw=1", "--train_limit=2048"]
    plain = ["--model=mlp", "--batch_per_vw=1", "--train_limit=2048", "--optimizer=sgd", "--lr=0.05",
             "--momentum=0.9", "--threads=1"]
    job_ms, plain_ms, load = {}, {}, {}

    def keep_min(table, key, ms):
        if ms is not None and (table.get(key) is None or ms < table[key]):
            table[key] = ms

    for p in (1, 2):
        for v in VS:
            n = steps_for(v)
            if p == 1:
                load[f"v{v}"] = common.load1()
            if b.job(f"scaling_v{v}", 1, common.MLP, *common_flags, f"--virtual_workers={v}", f"--steps={n}"):
                keep_min(job_ms, f"v{v}", analysis.median_step_ms(common.run_dir(f"scaling_v{v}")))
            _, seconds = b.baseline(f"scaling_plain_v{v}", *plain, f"--microbatches={v}", steps=n)
            keep_min(plain_ms, f"v{v}", 1000 * seconds / n if seconds else None)
        for s in SHARDS:
            if p == 1:
                load[f"s{s}"] = common.load1()
            if b.job(f"scaling_s{s}", 1, common.MLP, *common_flags, "--virtual_workers=16", "--steps=200", shards=s):
                keep_min(job_ms, f"s{s}", analysis.median_step_ms(common.run_dir(f"scaling_s{s}")))

    first = None

    def row(cfg, steps, v, ms, plain, load):
        nonlocal first
        if ms is None:
            print(f"{cfg:<22s} | {steps:6d} | {'failed':>9s} |")
            b.csv_ms("scaling", cfg, None, "", steps, load)
            return
        first = first or ms
        print(f"{cfg:<22s} | {steps:6d} | {ms:9.2f} | {ms / v:9.3f} | "
              f"{'-' if plain is None else f'{plain:.3f}':>12s} | {common.fmt_ratio(ms, plain):>13s} | "
              f"{common.fmt_ratio(ms, first)}")
        b.csv_ms("scaling", cfg, ms, common.fmt_ratio(ms, plain), steps, load)

    for v in VS:
        row(f"V={v} / 1 shard", steps_for(v), v, job_ms.get(f"v{v}"), plain_ms.get(f"v{v}"), load[f"v{v}"])
    first = None
    for s in SHARDS:
        cfg = "V=16 / 1 shard (again)" if s == 1 else f"V=16 / {s} shards"
        row(cfg, 200, 16, job_ms.get(f"s{s}"), plain_ms.get("v16"), load[f"s{s}"])
    print("vs first row: growth against V=1 (upper part) and against 1 shard (lower part); csv ratio = vs plain loop.")


if __name__ == "__main__":
    common.main(run)
