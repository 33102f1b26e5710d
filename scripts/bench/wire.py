#!/usr/bin/python3
"""wire: bf16 and fp16 on the wire.

The transfer section's push + pull (1 shard, 1 client) with --wire_dtype fp32, bf16 and fp16, against raw ZeroMQ
moving the fp32 bytes: on loopback, and on a 10 Gbit/s link (tc tbf on the loopback of a private network namespace;
needs root and iproute2, else those rows are skipped).
"""
import os
import shutil
import subprocess

import analysis
import common


def make_namespace():
    """A network namespace whose loopback is shaped to 10 Gbit/s; its name, or None."""
    if os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"):
        return None
    ns = f"eps-wire-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], stderr=subprocess.DEVNULL).returncode != 0:
        return None
    ok = (subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]).returncode == 0 and
          subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate",
                          "10gbit", "burst", "4mb", "latency", "100ms"]).returncode == 0)
    if not ok:
        subprocess.run(["ip", "netns", "del", ns])
        return None
    return ns


def run(b):
    b.need_bin("ps_transfer")
    print("== wire: 10 M floats pushed and pulled back per step, 1 shard / 1 client, as fp32, bf16 and fp16")
    print("   (--wire_dtype: the worker rounds and encodes, the shard decodes, reduces, optimizes in fp32 and encodes")
    print("   each version once), against raw ZeroMQ moving the fp32 bytes (40 MB each way) in the same run; on")
    print("   loopback and on a 10 Gbit/s link (tc tbf on the loopback of a private network namespace).")
    print(f"   Medians of 15 steps (host load {common.load1()}, {os.cpu_count()} cores)")
    print(f"{'link':<10s} | {'wire':<5s} | {'push ms':>8s} | {'pull ms':>8s} | {'PS ms':>8s} | {'raw ms':>8s} | "
          f"{'raw / PS':>8s} | fp32 PS / PS")
    ns = make_namespace()
    try:
        for link in ("loopback", "10gbit"):
            prefix = ()
            if link == "10gbit":
                if ns is None:
                    print("10gbit rows skipped: they need root, iproute2 and network namespaces")
                    continue
                prefix = ("ip", "netns", "exec", ns)
            fp32_ps = None
            for dtype in ("fp32", "bf16", "fp16"):
                load = common.load1()
                out = b.ps_transfer(f"wire_{link}_{dtype}", "--mode=transfer", f"--wire_dtype={dtype}", "--rounds=3",
                                    "--iters=5", prefix=prefix)
                r = analysis.find(out, mode="transfer")
                if r is None:
                    print(f"{link:<10s} | {dtype:<5s} | {'failed':>8s} |")
                    b.csv_ms("wire", f"{link} / {dtype}: ElasticPS", None, "", 0, load)
                    continue
                if dtype == "fp32":
                    fp32_ps = r["ps_ms"]
                ratio = common.fmt_ratio(r["raw_ms"], r["ps_ms"])
                print(f"{link:<10s} | {dtype:<5s} | {r['push_ms']:8.1f} | {r['pull_ms']:8.1f} | {r['ps_ms']:8.1f} | "
                      f"{r['raw_ms']:8.1f} | {ratio:>8s} | {common.fmt_ratio(fp32_ps, r['ps_ms'])}")
                b.csv_ms("wire", f"{link} / {dtype}: raw ZeroMQ fp32", r["raw_ms"], "1.00", 15, load)
                b.csv_ms("wire", f"{link} / {dtype}: ElasticPS", r["ps_ms"], ratio, 15, load)
    finally:
        if ns:
            subprocess.run(["ip", "netns", "del", ns])
    print("On loopback this host moves bytes at memory speed, so the conversions cost about what they save; on a")
    print("link slower than memory the halved bytes show.")


if __name__ == "__main__":
    common.main(run)
