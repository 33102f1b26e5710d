#!/usr/bin/python3
"""freeze: what --freeze saves (docs/models.md, "Transfer learning").

Two jobs each of the CNN (examples/fashion_mnist_cnn.flags) and of a ResNet-8 (examples/fashion_mnist_resnet.flags,
--model_depth=8), 1 shard, 2 workers x 4 VWs: the whole network trained, and with the convolutions frozen
(cnn: --freeze=^conv, 13 k of its 417 k parameters but most of its compute; ResNet-8: everything but the linear head,
--freeze=^(conv1|bn1|stage), 77 k of 78 k parameters). Three interleaved rounds; medians of samples/s (the job's
steady_samples_per_s), the workers' compute ms per train plan (their reports), and the bytes the shard took in pushes
and sent in pulls per step (result.json's push_bytes and pull_bytes over the steps: the initial values' push, once,
is included). A frozen tensor is neither pushed nor pulled, and backward computes nothing for it nor below it.
"""
import os

import analysis
import common

ROUNDS = 3
RESNET = os.path.join(common.ROOT, "examples", "fashion_mnist_resnet.flags")


def compute_ms(run_dir, workers):
    ms = [analysis.read_report(run_dir, i)["ms_per_train_plan"]["compute"] for i in range(workers)]
    return sum(ms) / len(ms)


def run(b):
    cnn_steps, resnet_steps = b.steps, min(b.steps, 60)
    print(f"== freeze: the whole network against its convolutions frozen, 1 shard, 2 workers x 4 VWs, medians of "
          f"{ROUNDS} interleaved rounds (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"   cnn: {cnn_steps} steps of 8 x 16; resnet (depth 8): {resnet_steps} steps of 8 x 16")
    width = 30
    print(f"{'config':<{width}s} | {'samples/s':>10s} | {'ratio':>5s} | {'compute ms':>10s} | "
          f"{'push KiB/step':>13s} | {'pull KiB/step':>13s}")
    configs = {
        "cnn whole": (common.CNN, cnn_steps, []),
        "cnn --freeze=^conv": (common.CNN, cnn_steps, ["--freeze=^conv"]),
        "resnet-8 whole": (RESNET, resnet_steps, ["--model_depth=8"]),
        "resnet-8 all but the head": (RESNET, resnet_steps, ["--model_depth=8", "--freeze=^(conv1|bn1|stage)"]),
    }
    got = {c: [] for c in configs}

    def job(config, r):
        flags, steps, extra = configs[config]
        name = f"freeze_{config.split()[0]}_{'frozen' if extra and extra[-1].startswith('--freeze') else 'whole'}_{r}"
        result = b.job(name, 2, flags, *common.job_flags(steps), "--eval_every=0", *extra)
        if result is None:
            return None, None
        got[config].append((result, compute_ms(common.run_dir(name), 2)))
        return analysis.samples_per_s(result), result["train_seconds"]

    load = common.load1()
    sps, _ = common.interleaved({c: (lambda r, c=c: job(c, r)) for c in configs}, ROUNDS)
    for config in configs:
        base = list(configs)[0 if config.startswith("cnn") else 2]
        rows = got[config]
        if None in sps[config] or not rows:
            b.failed = True
            print(f"{config:<{width}s} | {'failed':>10s} |")
            b.csv("freeze", config, load=load)
            continue
        steps = rows[0][0]["steps"]
        s = analysis.median(sps[config])
        ratio = common.fmt_ratio(s, analysis.median(sps[base])) if None not in sps[base] else "-"
        ms = analysis.median([c for _, c in rows])
        push = analysis.median([r["push_bytes"] / steps / 1024 for r, _ in rows])
        pull = analysis.median([r["pull_bytes"] / steps / 1024 for r, _ in rows])
        print(f"{config:<{width}s} | {s:10.1f} | {ratio:>5s} | {ms:10.1f} | {push:13.1f} | {pull:13.1f}")
        b.csv("freeze", config, f"{s:.1f}", ratio, steps=steps, load=load)


if __name__ == "__main__":
    common.main(run)
