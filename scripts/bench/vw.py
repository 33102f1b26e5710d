#!/usr/bin/python3
"""vw: the cost of virtual workers.

Samples/s of the CNN job (examples/fashion_mnist_cnn.flags, V = 8 x 16 samples, 1 shard) at 1 worker x 8 VWs and
2 workers x 4 VWs (one thread each: this host's 2 cores), each as is and with the compute threads pinned (local.sh
--compute-cpus), against build/bin/baseline (the same model and microbatches in one plain libtorch loop, no
parameter server) at 1 thread (the reference) and at 2 threads. Five interleaved rounds of all six, medians: a
shared host drifts by 10-30 % within minutes, more than the overhead measured. Also the median and range of the
per-round ratios, and where the 1 x 8 worker's time goes (its report's ms_per_train_plan).
"""
import os

import analysis
import common

ROUNDS = 5


def run(b):
    print(f"== vw: cnn, V = 8 x 16 samples, {b.steps} steps, 1 shard, medians of {ROUNDS} interleaved rounds "
          f"(host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs baseline")
    job_flags = common.job_flags(b.steps)
    base_flags = ["--model=cnn", "--microbatches=8", "--batch_per_vw=16"]
    # config: (how to run round r), in the order of a round
    runs = {
        "baseline (1 thread)": lambda r: b.baseline(f"vw_baseline_1t_{r}", *base_flags, "--threads=1"),
        "1 worker x 8 VWs": lambda r: b.job_sps(f"vw_1x8_{r}", 1, common.CNN, *job_flags),
        "1 worker x 8 VWs pinned": lambda r: b.job_sps(f"vw_1x8_pinned_{r}", 1, common.CNN, *job_flags,
                                                      launch=["--compute-cpus", "0"]),
        "baseline (2 threads)": lambda r: b.baseline(f"vw_baseline_2t_{r}", *base_flags, "--threads=2"),
        "2 workers x 4 VWs": lambda r: b.job_sps(f"vw_2x4_{r}", 2, common.CNN, *job_flags),
        "2 workers x 4 VWs pinned": lambda r: b.job_sps(f"vw_2x4_pinned_{r}", 2, common.CNN, *job_flags,
                                                       launch=["--compute-cpus", "0:1"]),
    }
    load = common.load1()
    sps, secs = common.interleaved(runs, ROUNDS)
    failed = any(None in v for v in sps.values())
    base = None if None in sps["baseline (1 thread)"] else analysis.median(sps["baseline (1 thread)"])
    for config in ("baseline (1 thread)", "baseline (2 threads)", "1 worker x 8 VWs", "1 worker x 8 VWs pinned",
                   "2 workers x 4 VWs", "2 workers x 4 VWs pinned"):
        ok = None not in sps[config]
        b.row("vw", config, analysis.median(sps[config]) if ok else None, base,
              analysis.median(secs[config]) if ok else None, load)
    b.failed = b.failed or failed

    def paired(config):
        p = analysis.paired(sps["baseline (1 thread)"], sps[config])
        return "-" if p is None else f"{p[0]:.2f} ({p[1]:.2f}-{p[2]:.2f})"
    print("   paired (median and range of the per-round ratios to the same round's baseline): "
          f"1 x 8 {paired('1 worker x 8 VWs')}, pinned {paired('1 worker x 8 VWs pinned')}; "
          f"2 x 4 {paired('2 workers x 4 VWs')}, pinned {paired('2 workers x 4 VWs pinned')}")
    for name in ("1x8", "1x8_pinned"):
        report = analysis.read_report(common.run_dir(f"vw_{name}_{ROUNDS}"), 0)
        print(f"   {name}, where the worker's time goes (last round): {analysis.time_breakdown(report)}")


if __name__ == "__main__":
    common.main(run)
