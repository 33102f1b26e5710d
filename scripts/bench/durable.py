#!/usr/bin/python3
"""durable: checkpoints and recovery.

build/bin/durable_bench (no libtorch): StateStore::WriteCheckpoint of 10 M and 100 M floats in 4 MiB blobs against
one synced raw RocksDB WriteBatch of the same keys and values (and one reserved up front), in GB/s; recovery of a
100 M-parameter shard (values + momentum, 800 MB) in a fresh process, warm page cache: store open +
LatestCheckpoint, + ShardState::Restore, against raw RocksDB open + iterate; medians of 3. Then the mlp job (1
shard, 1 worker, --steps steps) without checkpoints and with local.sh --checkpoint-every 1, 10, 100: steps/s,
medians of 3 interleaved rounds; all runs must end on the same params_sha256 (else the section fails).
"""
import os
import shutil

import analysis
import common

WRITE_ELEMS = (10000000, 100000000)
RECOVER_ELEMS = 100000000
EVERY = (0, 1, 10, 100)  # checkpoint every K steps, 0: never
ROUNDS = 3


def run(b):
    b.need_bin("durable_bench")
    print("== durable: checkpoints (storage/state_store.h) against raw RocksDB, and their cost per training step")
    print(f"   (host load {common.load1()}, {os.cpu_count()} cores). GB/s = 1e9 bytes/s of model bytes; medians of 3 "
          "rounds, store and raw")
    print("   alternating. write: the WriteCheckpoint call (one synced batch: blobs + manifest) vs building and writing")
    print("   one synced WriteBatch of the same 4 MiB values under keys of the same size (RocksDB defaults without")
    print("   compression), each round into a fresh directory after a warm-up round; 'reserved': that batch sized up")
    print("   front. recover: each round in a fresh process (a restarted shard), files in the page cache (written just")
    print("   before: warm); 800 MB = values + momentum slot of 100 M fp32 parameters (ShardState::Snapshot's blobs);")
    print("   raw = DB::Open and one iterator copying every value into one buffer.")
    width = 52

    def row(cfg, seconds, rate, ratio):
        if seconds is None:
            print(f"{cfg:<{width}s} | {'failed':>9s} | {'-':>16s} | -")
        else:
            print(f"{cfg:<{width}s} | {seconds:9.3f} | {rate:>16s} | {ratio}")

    def row_bytes(cfg, seconds, nbytes, raw_seconds, load):
        """A row of GB/s (ratio: raw seconds / these) and its csv row."""
        rate = f"{nbytes / seconds / 1e9:.3f} GB/s" if seconds else ""
        ratio = common.fmt_ratio(raw_seconds, seconds)
        row(cfg, seconds, rate, ratio)
        b.csv_ms("durable", cfg, None if seconds is None else seconds * 1000, ratio, 3, load)

    print(f"{'config':<{width}s} | {'seconds':>9s} | {'rate':>16s} | vs raw RocksDB / vs no checkpoints")
    scratch = common.run_dir("durable_scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    load = common.load1()
    out = b.program("durable_bench", [os.path.join(common.BIN, "durable_bench"), f"--dir={scratch}",
                                      "--write_elems=" + ",".join(str(n) for n in WRITE_ELEMS),
                                      f"--recover_elems={RECOVER_ELEMS}", f"--reps={ROUNDS}"])
    shutil.rmtree(scratch, ignore_errors=True)
    if out is None:
        b.failed = True
        out = []

    def find(kind, **match):
        return analysis.find(out, kind=kind, **match) or {}

    for elems in WRITE_ELEMS:
        w = find("write", elems=elems)
        cfg = f"write {elems // 1000000} M fp32 ({elems * 4 // 1000000} MB)"
        raw = w.get("raw_s")
        row_bytes(f"{cfg}: raw RocksDB", raw, w.get("bytes"), raw, load)
        row_bytes(f"{cfg}: raw RocksDB reserved", w.get("reserved_s"), w.get("bytes"), raw, load)
        row_bytes(f"{cfg}: StateStore", w.get("store_s"), w.get("bytes"), raw, load)
    rec = find("recover", cache="warm")
    cfg = f"recover 100 M ({rec.get('bytes', 0) // 1000000} MB)"
    raw = rec.get("raw_s")
    row_bytes(f"{cfg}: raw RocksDB", raw, rec.get("bytes"), raw, load)
    row_bytes(f"{cfg}: open + LatestCheckpoint", rec.get("read_s"), rec.get("bytes"), raw, load)
    row_bytes(f"{cfg}: + ShardState::Restore", rec.get("restore_s"), rec.get("bytes"), raw, load)

    runs = {k: [] for k in EVERY}  # K -> [(steps/s, seconds) or None]
    loads, written, shas = {}, {k: [] for k in EVERY}, set()
    for rnd in range(1, ROUNDS + 1):
        for k in EVERY:
            if rnd == 1:
                loads[k] = common.load1()
            name = f"durable_k{k}_r{rnd}"
            r = b.job(name, 1, common.MLP, f"--steps={b.steps}", "--test_limit=-1",
                      launch=["--checkpoint-every", str(k)])
            d = common.run_dir(name)
            shutil.rmtree(os.path.join(d, "store"), ignore_errors=True)  # the checkpoints themselves are not kept
            runs[k].append((r["steps"] / r["train_seconds"], r["train_seconds"]) if r else None)
            written[k].append(len(analysis.read_events(d, "checkpoint_durable")))
            if r:
                shas.add(r["params_sha256"])

    def median_run(k):
        """(steps/s, seconds) of K's median run by steps/s; None if any run failed."""
        if None in runs[k]:
            return None
        return sorted(runs[k])[(len(runs[k]) - 1) // 2]

    base = median_run(0)
    ratios = {}
    for k in EVERY:
        cfg = "mlp 1 shard 1 worker: " + ("no checkpoints" if k == 0 else f"checkpoint every {k}")
        m = median_run(k)
        if m is None:
            row(cfg, None, "", "")
            b.csv("durable", cfg, load=loads[k])
            b.failed = True
            continue
        ratios[k] = common.fmt_ratio(m[0], base and base[0])
        row(cfg, m[1], f"{m[0]:.2f} steps/s", ratios[k])
        # samples_per_s: steps/s x V x batch_per_vw of examples/fashion_mnist_mlp.flags (8 x 32)
        b.csv("durable", cfg, f"{m[0] * 256:.1f}", ratios[k], seconds=f"{m[1]:.3f}", load=loads[k])
    memory, snapshot = find("memory"), find("snapshot")
    if memory:
        print(f"this host: memcpy into fresh pages {memory['fresh_gbps']:.3f} GB/s, into warm pages "
              f"{memory['warm_gbps']:.2f} GB/s ({memory['bytes'] / 1e6:.0f} MB): every recovery")
        print("lands its bytes on fresh pages of a new process, so that first figure bounds it.")
    if snapshot:
        print(f"ShardState::Snapshot of the 100 M shard (copies the momentum slot, on the event loop): "
              f"{snapshot['ms']:.1f} ms")
    print("checkpoints written per run (checkpoint_durable events), K = 1 10 100: " +
          " / ".join(" ".join(str(n) for n in written[k]) for k in EVERY[1:]))
    print(f"mlp: {b.steps} steps, examples/fashion_mnist_mlp.flags with --test_limit=-1; a checkpoint = 101,770 "
          "values +")
    print("momentum = 814 KB, written by the shard's writer thread (at most one waiting). seconds = train_seconds of "
          "the")
    print("median run. csv: byte rows put seconds, the ratio vs raw and 3 (rounds) as steps; mlp rows steps/s x 256 "
          "as")
    print("samples/s.")
    if len(shas) == 1:
        print("digest check: every mlp run ended on the same params_sha256")
    elif len(shas) > 1:
        common.warn("durable: the mlp runs ended on different params_sha256: checkpointing changed the bits")
        print(f"digest check: MISMATCH ({' '.join(sorted(shas))})")
        b.failed = True
    print("goals: recovery close to RocksDB read speed (issue 4 measured 3.8 GB/s); checkpoints cost <= 5 % of "
          "steps/s")
    rd, rs, rw = rec.get("read_gbps"), rec.get("restore_gbps"), rec.get("raw_gbps")
    if rw and rs:
        print(f"  recover (warm): {rd:.3f} GB/s read, {rs:.3f} GB/s with Restore, raw RocksDB {rw:.3f} GB/s here: "
              f"{rd / rw:.2f}x / {rs / rw:.2f}x")
    else:
        print("  recover: not measured")
    for k in EVERY[1:]:
        name = f"steps/s, checkpoint every {k} vs none"
        x = ratios.get(k, "-")
        print(common.verdict(name, None if x == "-" else float(x), 0.95, 40))


if __name__ == "__main__":
    common.main(run)
