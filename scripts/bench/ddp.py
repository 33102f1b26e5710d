#!/usr/bin/python3
"""ddp: against PyTorch DDP.

Samples/s of the CNN job at 1 shard, 2 workers x 4 VWs, against PyTorch DDP (gloo, 2 ranks,
scripts/ddp_baseline.py) on the same model, global batch, steps and threads: 'accumulate' (4 microbatches of 16 per
rank with no_sync, ElasticPS's semantics) and 'batch' (one batch of 64 per rank, DDP's usual form).
"""
import os

import analysis
import common


def run(b):
    print("== ddp: cnn (examples/fashion_mnist_cnn.flags: AdamW, cosine), V = 8 x 16 (global batch 128), "
          f"{b.steps} steps,")
    print(f"   2 processes at 1 intra-op thread each, OMP_WAIT_POLICY=passive (host load {common.load1()}, "
          f"{os.cpu_count()} cores).")
    print("   DDP: gloo, ranks started by scripts/ddp_baseline.py; 'accumulate' = 4 microbatches of 16 per rank with")
    print("   no_sync gradient accumulation (ElasticPS's semantics: mean of 8 microbatch gradients); 'batch' = one")
    print("   batch of 64 per rank (DDP's usual form). All timed after 5 warm-up steps (result.json's "
          "steady_samples_per_s).")
    width = 36
    print(f"{'config':<{width}s} | {'samples/s':>10s} | ratio vs DDP (accumulate)")

    def ddp(name, mode):
        out = b.program(name, [common.PY, os.path.join(common.ROOT, "scripts", "ddp_baseline.py"), "--ranks", "2",
                               "--steps", str(b.steps), "--mode", mode])
        r = analysis.find(out or [], program="ddp")
        return (r["samples_per_s"], r["seconds"]) if r else (None, None)

    load = common.load1()
    base, secs = ddp("ddp_accumulate", "accumulate")
    b.row("ddp", "DDP 2 ranks x 4 x 16 (accumulate)", base, base, secs, load, width)
    load = common.load1()
    sps, secs = ddp("ddp_batch", "batch")
    b.row("ddp", "DDP 2 ranks x 1 x 64 (batch)", sps, base, secs, load, width)
    load = common.load1()
    sps, secs = b.job_sps("ddp_elasticps", 2, common.CNN, *common.job_flags(b.steps))
    b.row("ddp", "ElasticPS 1 shard 2 workers x 4 VWs", sps, base, secs, load, width)
    print("goal: ElasticPS >= 1.2x DDP (accumulate).")


if __name__ == "__main__":
    common.main(run)
