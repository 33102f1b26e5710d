#!/usr/bin/python3
"""ps_share: the parameter server's share of a step.

One worker hosting V = 8 VWs on 1 shard, whose compute is a 10 ms busy loop per VW (80 ms per step; ps_transfer
--mode=share): the share of the step spent outside that compute, at 1 M and 10 M parameters, with glibc's default
allocator and with freed pages reused.
"""
import analysis
import common


def run(b):
    b.need_bin("ps_transfer")
    print("== ps_share: one worker hosting V = 8 VWs, 1 shard; compute = a 10 ms busy loop per VW (80 ms per step).")
    print("   Per step, as the worker does: pull w(t) and copy it into the model, run the 8 VWs (each: compute,")
    print("   copy its gradient into a flat buffer, add it into the block's tree), push the block [0,8) (one push per")
    print("   shard), wait for the replies; the shard reduces, applies SGD and serves w(t+1). PS ms = step - compute:")
    print(f"   the parameter server's share, its copies on the worker included. Medians of 5 steps (host load "
          f"{common.load1()})")
    print(f"{'config':<30s} | {'step ms':>8s} | {'compute':>8s} | {'pull':>8s} | {'copies':>8s} | {'tree':>8s} | "
          f"{'push':>8s} | PS share")
    for alloc in ("default", "reuse"):
        for elems in (1000000, 10000000):
            cfg = f"{elems // 1000000} M params / malloc {alloc}"
            load = common.load1()
            out = b.ps_transfer(f"ps_share_{elems}_{alloc}", "--mode=share", f"--elems={elems}", "--vws_per_client=8",
                                "--compute_ms=10", "--warmup=1", "--iters=5", alloc=alloc)
            r = analysis.find(out, mode="share")
            if r is None:
                print(f"{cfg:<30s} | {'failed':>8s} |")
                b.csv_ms("ps_share", cfg, None, "", 0, load)
                continue
            step, comp = r["step_ms"], r["compute_ms"]
            share = f"{100 * (step - comp) / step:.0f} %" if step > 0 else "-"
            print(f"{cfg:<30s} | {step:8.1f} | {comp:8.1f} | {r['pull_ms']:8.1f} | {r['worker_ms']:8.1f} | "
                  f"{r['tree_ms']:8.1f} | {r['push_ms']:8.1f} | {share}")
            # ratio: compute / step, the fraction of the step spent computing (1.00 = a free PS)
            b.csv_ms("ps_share", cfg, step, common.fmt_ratio(comp, step), 5, load)
    print("copies = the worker's flat gradient copies and tree adds (tree: the adds alone); push = sending the block")
    print("and waiting for the shard's reply (its reduction and SGD included). csv ratio = compute / step.")


if __name__ == "__main__":
    common.main(run)
