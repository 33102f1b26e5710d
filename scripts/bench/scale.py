#!/usr/bin/python3
"""scale: the control plane as jobs grow (issue 35).

build/bin/jobstate_bench (no libtorch): the coordinator's state machine (elastic/job_state.h) alone, on a fake clock,
through whole steps of 8, 64 and 256 workers sharing V = 8, 512 and 4096 VWs over 2 shards: each worker's step
request (with a speed report), a heartbeat of each, the shards' step reports, a tick, and the step's events formatted
as events.jsonl lines. CPU time of the thread per step (state and events apart), medians of 3 rounds of 200 steps;
ratios against 8 workers x V 8 in the same run, per step and per worker and step.

Then re-plans on an unchanged membership: the mlp job (examples/fashion_mnist_mlp.flags, 1 shard, 3 identical workers,
REPLAN_STEPS steps, no evaluation) with --replan_min_steps=0 (no hysteresis in time: the planner before issue 35)
and with the default (50): replan events per 1000 steps, the smallest gap between two assignments (the job's joins
excluded), and the digests (which must agree).
"""
import os

import analysis
import common

WORKERS = (8, 64, 256)
VWS = (8, 512, 4096)
REPLAN_STEPS = 2000


def run(b):
    b.need_bin("jobstate_bench")
    print("== scale: the coordinator's JobState CPU per training step (jobstate_bench; medians of 3 rounds of 200 "
          f"steps; host load {common.load1()}, {os.cpu_count()} cores)")
    print("   state = its event handlers (requests, beats, step reports, tick, outgoing); events = the step's events as")
    print("   events.jsonl lines; ratio vs 8 workers x V 8 per step, and per worker and step.")
    load = common.load1()
    out = b.program("jobstate_bench", [os.path.join(common.BIN, "jobstate_bench"),
                                       "--workers=" + ",".join(map(str, WORKERS)), "--vws=" + ",".join(map(str, VWS)),
                                       "--steps=200", "--reps=3"])
    if out is None:
        b.failed = True
        out = []
    base = analysis.find(out, workers=WORKERS[0], vws=VWS[0])
    print(f"{'workers x V':<14s} | {'state us':>9s} | {'events us':>9s} | {'total us':>9s} | {'ratio':>6s} | "
          f"{'us/worker':>9s} | ratio")
    for w in WORKERS:
        for v in VWS:
            cfg = f"{w} x {v}"
            r = analysis.find(out, workers=w, vws=v)
            if r is None or base is None:
                print(f"{cfg:<14s} | {'failed':>9s} |")
                b.csv_ms("scale", f"jobstate {cfg}", None, "", 0, load)
                continue
            per, base_per = r["total_us"] / w, base["total_us"] / WORKERS[0]
            print(f"{cfg:<14s} | {r['state_us']:9.1f} | {r['events_us']:9.1f} | {r['total_us']:9.1f} | "
                  f"{r['ratio']:6.2f} | {per:9.2f} | {common.fmt_ratio(per, base_per)}")
            # csv: seconds = CPU per step, ratio = per worker and step vs the smallest's, steps = the timed steps
            b.csv_ms("scale", f"jobstate {cfg}", r["total_us"] / 1000, common.fmt_ratio(per, base_per), 200, load)
    print("goal (issue 35): the coordinator's CPU per step within 2x from the smallest to the largest; a step has one")
    print("request per worker, so that is read per worker and step here (the per-step ratio grows with the workers).")
    replans(b)


def replans(b):
    print(f"== scale: re-plans on an unchanged membership, mlp, 3 identical workers, {REPLAN_STEPS} steps, 1 shard "
          f"(host load {common.load1()})")
    print(f"{'config':<24s} | {'replans':>7s} | {'per 1000 steps':>14s} | {'min gap':>7s} | triggers")
    digests = set()
    for config, flag in (("no minimum", "--replan_min_steps=0"), ("--replan_min_steps=50", "--replan_min_steps=50")):
        load = common.load1()
        name = "scale_replans_" + ("off" if flag.endswith("=0") else "on")
        r = b.job(name, 3, common.MLP, f"--steps={REPLAN_STEPS}", "--test_limit=-1", flag)
        if r is None:
            print(f"{config:<24s} | {'failed':>7s} |")
            b.csv("scale", f"replans {config}", load=load)
            b.failed = True
            continue
        digests.add(r["params_sha256"])
        d = common.run_dir(name)
        events = analysis.read_events(d, "replan")
        assignments = analysis.read_events(d, "assignment")
        gaps = [y["step"] - x["step"] for x, y in zip(assignments, assignments[1:])]
        triggers = {}
        for e in events:
            triggers[e.get("trigger", "-")] = triggers.get(e.get("trigger", "-"), 0) + 1
        per = 1000 * len(events) / r["steps"]
        print(f"{config:<24s} | {len(events):7d} | {per:14.1f} | {min(gaps) if gaps else '-':>7} | "
              + " ".join(f"{k} {v}" for k, v in sorted(triggers.items())))
        # csv: samples_per_s left empty; ratio = replans per 1000 steps
        b.csv("scale", f"replans {config}", "", f"{per:.1f}", r["steps"], f"{r['train_seconds']:.3f}", load)
    print("goal: at most 1 re-plan per 50 steps (20 per 1000) on an unchanged membership; the soak (session 19) saw 1 "
          "per 38.")
    if len(digests) > 1:
        common.warn("scale: the re-plan runs ended on different digests")
        b.failed = True
    elif digests:
        print("digest check: both runs ended on the same params_sha256")


if __name__ == "__main__":
    common.main(run)
