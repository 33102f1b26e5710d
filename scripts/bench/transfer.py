#!/usr/bin/python3
"""transfer: the data path against raw ZeroMQ.

Push + pull of a 10 M-float model through real shard processes (build/bin/ps_transfer plays coordinator and
workers), 1 shard / 1 client and 2 / 2, against raw ZeroMQ moving the same 4 MiB frames out and back; with glibc's
default allocator and with one that reuses freed pages (common.ALLOC_ENV); ps-lite's figures beside.
"""
import os

import analysis
import common


def run(b):
    b.need_bin("ps_transfer")
    print("== transfer: 10 M fp32 (40 MB) pushed and pulled back per client and step, chunks of 2^20 floats (4 MiB),")
    print("   real shard processes (plain SGD applied between push and pull); raw ZeroMQ: each client's DEALER sends")
    print("   the same 4 MiB frames zero-copy to each server's ROUTER, which answers with as many bytes zero-copy.")
    print(f"   Both in one run, alternating rounds; medians of 15 steps per client (host load {common.load1()}, "
          f"{os.cpu_count()} cores)")
    fmt = "{:<36s} | {:>8s} | {:>8s} | {:>8s} | {:>8s} | {}"
    print(fmt.format("config", "push ms", "pull ms", "PS ms", "raw ms", "raw / PS"))
    memory = None
    for alloc in ("default", "reuse"):
        for shards, clients in ((1, 1), (2, 2)):
            cfg = (f"1 shard 1 client / malloc {alloc}" if shards == 1
                   else f"{shards} shards {clients} clients / malloc {alloc}")
            load = common.load1()
            out = b.ps_transfer(f"transfer_{shards}x{clients}_{alloc}", "--mode=transfer", f"--shards={shards}",
                                f"--clients={clients}", "--rounds=3", "--iters=5", alloc=alloc)
            memory = memory or analysis.find(out, mode="memory")
            r = analysis.find(out, mode="transfer")
            if r is None:
                print(fmt.format(cfg, "failed", "-", "-", "-", "-"))
                b.csv_ms("transfer", f"{cfg}: ElasticPS", None, "", 0, load)
                continue
            ratio = common.fmt_ratio(r["raw_ms"], r["ps_ms"])
            print(f"{cfg:<36s} | {r['push_ms']:8.1f} | {r['pull_ms']:8.1f} | {r['ps_ms']:8.1f} | {r['raw_ms']:8.1f} "
                  f"| {ratio}")
            b.csv_ms("transfer", f"{cfg}: raw ZeroMQ", r["raw_ms"], "1.00", 15, load)
            b.csv_ms("transfer", f"{cfg}: ElasticPS", r["ps_ms"], ratio, 15, load)
    print(fmt.format("ps-lite 1/1 (figures of issue 6)", "170", "370", "540", "-", "-"))
    print("goal: raw / PS >= 0.7 in 4 MiB frames. ps-lite's push carries keys too; its figures are from the same host.")
    if memory:
        w, f, n = memory["warm_ms"], memory["fresh_ms"], memory["bytes"]
        print(f"memory on this host: memcpy of {n / 1e6:.0f} MB takes {w:.1f} ms into warm pages, {f:.1f} ms into "
              "fresh ones")
        print(f"({(f - w) * 1e3 / (n / 4096):.1f} us per 4 KiB page fault). With glibc's default allocator every "
              "4 MiB ZeroMQ receive buffer")
        print("and every per-step std::vector of that size can land on fresh pages; \"malloc reuse\" keeps freed "
              "pages")
        print("in the process.")


if __name__ == "__main__":
    common.main(run)
