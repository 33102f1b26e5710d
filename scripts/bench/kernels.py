#!/usr/bin/python3
"""kernels: what pinning the CPU kernels costs.

Samples/s of the MLP job (1 worker, V = 8) and of the CNN job (1 worker, V = 8) with the job's default kernel set
(--cpu_kernels=x86-64-v3: OpenBLAS's Haswell kernels, ATen's AVX2, oneDNN up to AVX2) against the host's own
(--cpu_kernels=native: what OpenBLAS, ATen and oneDNN pick for this CPU and environment; on an AVX-512 host, wider
kernels). Three interleaved rounds, medians; the ratio is pinned / native. Each set ends on one digest in every round
(the sets differ from each other: other kernels, other bits).
"""
import os

import analysis
import common

ROUNDS = 3


def run(b):
    print(f"== kernels: 1 worker, V = 8, {b.steps} steps (cnn: {max(10, b.steps // 5)}), medians of {ROUNDS} "
          f"interleaved rounds (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'config':<24s} | {'samples/s':>10s} | ratio vs native")
    for model, flagfile, flags in (("mlp", common.MLP, [f"--steps={b.steps}", "--test_limit=-1"]),
                                   ("cnn", common.CNN, common.job_flags(max(10, b.steps // 5)))):
        sps = {f"{model} native": [], f"{model} x86-64-v3": []}
        secs = {k: [] for k in sps}
        digests = {k: set() for k in sps}
        load = common.load1()
        for r in range(1, ROUNDS + 1):
            for config in sps:
                kernels = config.split(" ")[1]
                result = b.job(f"kernels_{model}_{kernels}_{r}", 1, flagfile, *flags, f"--cpu_kernels={kernels}")
                sps[config].append(analysis.samples_per_s(result) if result else None)
                secs[config].append(result["train_seconds"] if result else None)
                if result:
                    digests[config].add(result["params_sha256"])
        b.paired_rows("kernels", f"{model} native", f"{model} x86-64-v3", sps, secs, load, "the native runs")
        print(f"   digests per set: {', '.join(f'{k}: {len(v)}' for k, v in digests.items())} (1 each: "
              f"reproducible)")
        if any(len(v) > 1 for v in digests.values()):
            common.warn(f"kernels: a set's {model} runs ended on different digests")
            b.failed = True


if __name__ == "__main__":
    common.main(run)
