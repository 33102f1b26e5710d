#!/usr/bin/python3
"""limits: what the servers' socket limits cost.

Samples/s of the MLP job (examples/fashion_mnist_mlp.flags, 2 workers x 4 VWs, 1 shard: steps of a few ms, so the
sockets' share of a step is large) with the limits of
docs/security.md ("Bounded resources": queues of 1000 messages a peer, the largest frame bounded, pulls waiting per
peer bounded, every message's key checked) against the same job with its sockets unbounded (local.sh --no-limits).
Five interleaved rounds, medians; the ratio is limited / unbounded (goal: within the noise, the per-round spread of
the unbounded runs). Both end on the same digest (the limits never change the bits).
"""
import os

import analysis
import common

ROUNDS = 5


def run(b):
    print(f"== limits: mlp, 2 workers x 4 VWs, {b.steps} steps, 1 shard, medians of {ROUNDS} interleaved rounds "
          f"(host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs unbounded")
    flags = [f"--steps={b.steps}", "--test_limit=-1"]  # the MLP's step schedule needs no warm-up
    sps = {"unbounded": [], "limits": []}
    secs = {"unbounded": [], "limits": []}
    digests = set()
    load = common.load1()
    for r in range(1, ROUNDS + 1):
        for config, launch in (("unbounded", ["--no-limits"]), ("limits", [])):
            result = b.job(f"limits_{config}_{r}", 2, common.MLP, *flags, launch=launch)
            sps[config].append(analysis.samples_per_s(result) if result else None)
            secs[config].append(result["train_seconds"] if result else None)
            if result:
                digests.add(result["params_sha256"])
    b.paired_rows("limits", "unbounded", "limits", sps, secs, load, "the unbounded runs")
    print(f"   digests: {len(digests)} distinct over every run (1: the limits changed no bit)")
    if len(digests) > 1:
        common.warn("limits: the runs ended on different digests")
        b.failed = True


if __name__ == "__main__":
    common.main(run)
