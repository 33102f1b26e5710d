#!/usr/bin/python3
"""hetero: the speed-aware planner.

Steps/s of the mlp job (V = 8 x 512 samples, --train_limit=20000, 1 shard) on 3 workers slowed 1x, 2x, 4x (local.sh
--slowdowns), --planner=speed against --planner=equal and against the ideal (the sum of the workers' speeds, from a
1-worker run at 1x); the speed run's final assignment (its events and the workers' reports); both runs must end on
the same params_sha256 (else the section fails). With 2 or more cores the 1x worker is pinned alone to CPU 0,
everything else to CPU 1.
"""
import os

import analysis
import common

SLOWDOWNS = ("1", "2", "4")


def run(b):
    common_flags = [f"--steps={b.steps}", "--batch_per_vw=512", "--train_limit=20000", "--test_limit=-1"]
    slow = ",".join(SLOWDOWNS)
    print(f"== hetero: mlp, V = 8 x 512 samples, {b.steps} steps, --train_limit=20000, 1 shard, 3 workers slowed "
          "1x, 2x, 4x")
    print(f"   (local.sh --slowdowns {slow}). ideal = the sum of the workers' speeds, (1/t1 + 1/(2 t1) + 1/(4 t1)) / V")
    print("   steps/s, t1 = seconds per VW of one 1x worker alone (train_seconds / steps / V of a 1-worker run of the")
    print(f"   same job, parameter server included) (host load {common.load1()}, {os.cpu_count()} cores)")
    # Each worker computes at its own speed only with a core of its own: with 2 or more cores the 1x worker gets
    # core 0 to itself, the slowed workers (idle most of the time), the coordinator and the shard share core 1.
    pin = os.cpu_count() >= 2
    if pin:
        print("   pinned: the 1x worker alone on CPU 0; the 2x and 4x workers, the coordinator and the shard on CPU 1")

    def job(name, workers, slowdowns, cpus, *extra):
        """(steps/s, seconds, V, params_sha256), or None if it failed."""
        launch = ["--slowdowns", slowdowns] + (["--worker-cpus", cpus, "--server-cpus", "1"] if pin else [])
        r = b.job(name, workers, common.MLP, *common_flags, *extra, launch=launch)
        return (r["steps"] / r["train_seconds"], r["train_seconds"], r["virtual_workers"], r["params_sha256"]) \
            if r else None

    runs, loads = {}, {}
    for name, workers, slowdowns, cpus, extra in (("alone", 1, "1", "0", ()),
                                                  ("equal", 3, slow, "0:1:1", ("--planner=equal",)),
                                                  ("speed", 3, slow, "0:1:1", ("--planner=speed",))):
        loads[name] = common.load1()
        runs[name] = job(f"hetero_{name}", workers, slowdowns, cpus, *extra)
    v = next((r[2] for r in runs.values() if r), 0)
    rate = {k: r[0] if r else None for k, r in runs.items()}
    ideal, t1_ms = None, "-"
    if rate["alone"]:
        t1_ms = f"{1000 / (rate['alone'] * v):.3f}"
        ideal = rate["alone"] * sum(1 / float(f) for f in SLOWDOWNS)
    width = 28

    def row(cfg, sps, seconds, load):
        # csv: samples/s = steps/s x V x 512, ratio = vs equal; None sps marks a failed run
        if sps is None:
            b.failed = True
            print(f"{cfg:<{width}s} | {'failed':>8s} | {'-':>8s} | -")
            b.csv("hetero", cfg, load=load)
            return
        vs_equal = common.fmt_ratio(sps, rate["equal"])
        print(f"{cfg:<{width}s} | {sps:8.2f} | {vs_equal:>8s} | {common.fmt_ratio(sps, ideal)}")
        b.csv("hetero", cfg, f"{sps * v * 512:.1f}", vs_equal, seconds=seconds, load=load)

    print(f"{'config':<{width}s} | {'steps/s':>8s} | {'vs equal':>8s} | vs ideal")
    row("1 worker at 1x alone", rate["alone"], runs["alone"] and f"{runs['alone'][1]:.3f}", loads["alone"])
    row("ideal (1x + 2x + 4x)", ideal, "", loads["alone"])
    row("3 workers --planner=equal", rate["equal"], runs["equal"] and f"{runs['equal'][1]:.3f}", loads["equal"])
    row("3 workers --planner=speed", rate["speed"], runs["speed"] and f"{runs['speed'][1]:.3f}", loads["speed"])
    print(f"t1 = {t1_ms} ms per VW at 1x. csv: samples_per_s = steps/s x V x 512, ratio = vs equal (the ideal row:")
    print("predicted, no seconds).")
    print("goals: planner=speed >= 1.3x equal and >= 0.85x ideal")
    for name, x, goal in (("planner=speed vs equal", analysis.ratio(rate["speed"], rate["equal"]), 1.3),
                          ("planner=speed vs ideal", analysis.ratio(rate["speed"], ideal), 0.85)):
        print(common.verdict(name, x, goal, 28))
    for line in analysis.hetero_report(common.run_dir("hetero_speed"), SLOWDOWNS, t1_ms, rate["speed"]):
        print(line)
    sha = {k: r[3] if r else "-" for k, r in runs.items()}
    print(f"params_sha256: equal {sha['equal']}")
    print(f"               speed {sha['speed']}")
    print(f"               alone {sha['alone']}")
    if sha["equal"] == "-" or sha["speed"] == "-":
        print("digest check: not made (a run failed)")
    elif sha["equal"] != sha["speed"] or sha["alone"] not in ("-", sha["speed"]):
        common.warn("hetero: the runs ended on different params_sha256: placement changed the bits")
        print("digest check: MISMATCH")
        b.failed = True
    else:
        print("digest check: equal and speed identical" +
              ("" if sha["alone"] == "-" else ", and the same as the 1-worker run"))
    if os.cpu_count() < 5:
        n = os.cpu_count()
        print(f"note: {n} cores for 5 processes (3 workers, the shard, the coordinator): the workers' compute competes")
        print("for CPU and runs slower than t1 (measured with no other worker), and --slowdown idles in proportion "
              "to that")
        print("slower compute. The ideal assumes every worker keeps its lone speed: on this host it is out of reach, "
              "and")
        print("both ratios are figures of this host's contention as much as of the planner.")


if __name__ == "__main__":
    common.main(run)
