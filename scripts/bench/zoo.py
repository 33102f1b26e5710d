#!/usr/bin/python3
"""zoo: each zoo model against PyTorch DDP.

Samples/s of a 2-worker ElasticPS job (1 shard, 2 workers, the V and per-VW batch of the model's example) of cnn (the
known row: examples/fashion_mnist_cnn.flags), resnet at a small depth (examples/fashion_mnist_resnet.flags with
--model_depth=8) and text_transformer on SpamAssassin (examples/spam_transformer.flags), against the same network
trained with PyTorch DDP (gloo, 2 ranks, scripts/ddp_baseline.py --model: the same tensor names and shapes, checked
against the job's model.safetensors) on the same global batch, steps, threads and optimizer, in the 'accumulate'
mode of the ddp section (V/2 microbatches per rank with no_sync: ElasticPS's semantics). Text: DDP tokenizes the
training mails with the job's vocab.json as data/text.h does. Interleaved rounds (the job, then DDP, per model),
medians; goal: ElasticPS >= 1.2x DDP for every model.
"""
import os

import analysis
import common

ROUNDS = 3
RESNET_DEPTH = 8  # ResNet-8 (n = 1): a row in about a minute on 2 loaded cores; the example's 20 is ~3x the work
EXAMPLES = os.path.join(common.ROOT, "examples")
# (row name, example, flags on top of the example's)
MODELS = (
    ("cnn", "fashion_mnist_cnn.flags", ()),
    (f"resnet-{RESNET_DEPTH}", "fashion_mnist_resnet.flags", (f"--model_depth={RESNET_DEPTH}",)),
    ("text_transformer", "spam_transformer.flags", ()),
)
# ElasticPS flag -> ddp_baseline.py option, taken from the example as they are.
SAME = {"virtual_workers": "--vws", "batch_per_vw": "--batch_per_vw", "threads": "--threads", "seed": "--seed",
        "optimizer": "--optimizer", "lr": "--lr", "weight_decay": "--weight_decay", "momentum": "--momentum",
        "min_lr": "--min_lr", "model_depth": "--model_depth", "seq_len": "--seq_len", "vocab_size": "--vocab_size",
        "model_dim": "--model_dim", "model_layers": "--model_layers", "model_heads": "--model_heads"}


def read_flags(path, extra=()):
    """{flag: value} of a flagfile's `--name=value` lines (comments and blank lines skipped), then of `extra`."""
    out = {}
    with open(path) as f:
        lines = [line.strip() for line in f]
    for line in lines + list(extra):
        if line.startswith("--") and "=" in line:
            k, v = line[2:].split("=", 1)
            out[k] = v
    return out


def warmup(flags, steps):
    """The warm-up both sides use: the example's, cut to steps / 2 for short runs (as common.job_flags does)."""
    return min(int(flags.get("warmup_steps", "0")), steps // 2)


def job_extra(flags, steps):
    """Coordinator flags on top of the example's for a measured run: `steps` steps, no evaluation."""
    return [f"--steps={steps}", "--test_limit=-1", f"--warmup_steps={warmup(flags, steps)}"]


def ddp_args(model, flags, steps, run_dir):
    """scripts/ddp_baseline.py's options for the job of `flags` (example + extra) whose run dir is `run_dir`."""
    args = ["--ranks", "2", "--steps", str(steps), "--mode", "accumulate", "--model", model,
            "--warmup_steps", str(warmup(flags, steps)), "--check_tensors", os.path.join(run_dir, "model.safetensors")]
    for k, opt in SAME.items():
        if k in flags:
            args += [opt, flags[k]]
    if flags.get("nesterov") in ("true", "1"):
        args.append("--nesterov")
    schedule = flags.get("lr_schedule", "constant")
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"lr_schedule '{schedule}': ddp_baseline.py has constant and cosine")
    args += ["--lr_schedule", schedule]
    if model == "text_transformer":
        args += ["--text_data", flags["train_data"], "--text_vocab", os.path.join(run_dir, "vocab.json")]
    return args


def run(b):
    print(f"== zoo: each zoo model, ElasticPS 1 shard 2 workers against PyTorch DDP (gloo, 2 ranks), {b.steps} steps, "
          f"medians of {ROUNDS} interleaved rounds,")
    print(f"   1 intra-op thread per process, OMP_WAIT_POLICY=passive (host load {common.load1()}, "
          f"{os.cpu_count()} cores). Each model at its example's V x b and optimizer;")
    print("   DDP 'accumulate' (V/2 microbatches of b per rank, no_sync: ElasticPS's semantics), broadcast_buffers on")
    print("   (DDP's default; ElasticPS's step t+1 buffers are VW 0's). Text: DDP tokenizes the mails with the job's")
    print("   vocab.json (data/text.h's rules). Timed after 5 warm-up steps (result.json's steady_samples_per_s).")
    fmt = "{:<18s} | {:>10s} | {:>7s} | {:>5s} | {:>10s} | {:>10s} | {}"
    print(fmt.format("model", "parameters", "V x b", "load", "DDP s/s", "EPS s/s",
                     "ElasticPS / DDP (paired: median, range)"))
    ratios = {}
    for name, example, extra in MODELS:
        flags_file = os.path.join(EXAMPLES, example)
        flags = read_flags(flags_file, extra)
        model = flags["model"]
        tag = name.replace("-", "_")
        # The round's job run dir (DDP checks its tensors against it and reads its vocabulary), parameter counts.
        state = {"run_dir": None, "eps": None, "ddp": None}

        def eps(r, tag=tag, flags_file=flags_file, extra=extra, flags=flags, state=state):
            name = f"zoo_{tag}_eps_{r}"
            res = b.job(name, 2, flags_file, *extra, *job_extra(flags, b.steps))
            state["run_dir"] = None if res is None else common.run_dir(name)
            if res is None:
                return None, None
            state["eps"] = res.get("parameters")
            return analysis.samples_per_s(res), res["train_seconds"]

        def ddp(r, tag=tag, model=model, flags=flags, state=state):
            if state["run_dir"] is None:
                return None, None  # no job: no tensors to check against, no vocabulary
            out = b.program(f"zoo_{tag}_ddp_{r}", [common.PY, os.path.join(common.ROOT, "scripts", "ddp_baseline.py"),
                                                   *ddp_args(model, flags, b.steps, state["run_dir"])])
            found = analysis.find(out or [], program="ddp")
            if not found:
                return None, None
            state["ddp"] = found.get("parameters")
            return found["samples_per_s"], found["seconds"]

        load = common.load1()
        sps, secs = common.interleaved({"ElasticPS": eps, "DDP": ddp}, ROUNDS)
        med = {c: None if None in v else analysis.median(v) for c, v in sps.items()}
        sec = {c: None if None in v else analysis.median(v) for c, v in secs.items()}
        p = analysis.paired(sps["DDP"], sps["ElasticPS"])
        ratio = common.fmt_ratio(med["ElasticPS"], med["DDP"])
        ratios[name] = None if ratio == "-" else float(ratio)
        shown = "-" if state["eps"] is None else str(state["eps"])
        if state["ddp"] is not None and state["ddp"] != state["eps"]:
            shown = f"{state['eps']}/{state['ddp']}"  # cannot happen past --check_tensors; shown if it does
            b.failed = True
        vb = f"{flags['virtual_workers']}x{flags['batch_per_vw']}"
        print(fmt.format(name, shown, vb, load, "failed" if med["DDP"] is None else f"{med['DDP']:.1f}",
                         "failed" if med["ElasticPS"] is None else f"{med['ElasticPS']:.1f}",
                         ratio if p is None else f"{ratio} ({p[0]:.2f}, {p[1]:.2f}-{p[2]:.2f})"))
        for config in ("DDP", "ElasticPS"):
            label = (f"{name}: DDP 2 ranks x {int(flags['virtual_workers']) // 2} x {flags['batch_per_vw']} (accumulate)"
                     if config == "DDP" else f"{name}: ElasticPS 1 shard 2 workers")
            if med[config] is None:
                b.failed = True
                b.csv("zoo", label, load=load)
            else:
                b.csv("zoo", label, f"{med[config]:.1f}", common.fmt_ratio(med[config], med["DDP"]),
                      seconds=f"{sec[config]:.3f}", load=load)
    print("goal: ElasticPS >= 1.2x DDP for every model:")
    for name, r in ratios.items():
        print(common.verdict(name, r, 1.2, 18))


if __name__ == "__main__":
    common.main(run)
