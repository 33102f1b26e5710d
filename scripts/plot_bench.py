#!/usr/bin/python3
"""Draws build/bench/bench.png from scripts/bench.sh's results.csv.

  /usr/bin/python3 scripts/plot_bench.py [--csv build/bench/results.csv] [--out build/bench/bench.png]

One bar chart per section, from that section's newest run in the csv: the
ratio_vs_baseline of each row (what the section's table calls its ratio, see the
header of scripts/bench.sh), with a line at 1 and, where a section has a goal, at
the goal. Rows without a ratio (failed runs) are left out. Needs python3-matplotlib.
"""
import argparse
import csv
import os
import platform
import sys
import textwrap

SECTIONS = {  # name: (what the ratio is, goal line or None)
    "vw": ("samples/s vs plain libtorch loop (1 thread)", None),
    "elastic": ("time in median step times", None),
    "transfer": ("raw ZeroMQ ms / ElasticPS ms (higher is better)", 0.7),
    "wire": ("raw ZeroMQ fp32 ms / ElasticPS ms at each wire dtype (higher is better)", None),
    "ps_share": ("compute / step time (1 = free parameter server)", None),
    "ddp": ("samples/s vs PyTorch DDP (accumulate)", 1.2),
    "scaling": ("ms/step vs plain libtorch loop (lower is better)", None),
    "durable": ("GB/s vs raw RocksDB; mlp rows: steps/s vs no checkpoints (goal: >= 0.95)", 0.95),
}


def latest_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    newest = {}
    for r in rows:
        s = r.get("section", "")
        if s and r.get("run", "") >= newest.get(s, ""):
            newest[s] = r["run"]
    out = {}
    for r in rows:
        s = r.get("section", "")
        if s in newest and r["run"] == newest[s]:
            out.setdefault(s, []).append(r)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csv", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench", "results.csv"))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench", "bench.png"))
    a = p.parse_args()
    if not os.path.exists(a.csv):
        print(f"plot_bench.py: {a.csv} does not exist: run scripts/bench.sh first", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_section = latest_rows(a.csv)
    order = [s for s in SECTIONS if s in by_section] + sorted(s for s in by_section if s not in SECTIONS)
    order = [s for s in order if any(r.get("ratio_vs_baseline") not in ("", "-", None) for r in by_section[s])]
    if not order:
        print("plot_bench.py: no rows with a ratio in the csv", file=sys.stderr)
        return 1
    def with_ratio(s):
        return [r for r in by_section[s] if r.get("ratio_vs_baseline") not in ("", "-", None)]

    most = max(len(with_ratio(s)) for s in order)  # durable has 13 bars: widen the figure for it
    fig, axes = plt.subplots(len(order), 1, figsize=(max(11, 1.15 * most), 3.2 * len(order)), squeeze=False)
    for ax, s in zip(axes[:, 0], order):
        rows = with_ratio(s)
        labels = ["\n".join(textwrap.wrap(r["config"], 22 if len(rows) <= 10 else 16)) for r in rows]
        values = [float(r["ratio_vs_baseline"]) for r in rows]
        what, goal = SECTIONS.get(s, ("ratio vs baseline", None))
        bars = ax.bar(range(len(values)), values, color="#4c72b0")
        for b, v in zip(bars, values):
            ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                        fontsize=8)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        if goal is not None:
            ax.axhline(goal, color="#c44e52", linestyle="--", linewidth=1, label=f"goal {goal}")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("ratio")
        if max(values) > 20 * max(1e-9, min(v for v in values if v > 0) if any(v > 0 for v in values) else 1):
            ax.set_yscale("log")  # elastic: times from one step to hundreds
            ax.set_ylabel("ratio (log)")
        r0 = rows[0]
        ax.set_title(f"{s}: {what}   (run {r0['run']}, {r0['git']}, load {r0.get('load1', '?')})", fontsize=9)
    fig.suptitle(f"ElasticPS bench on {platform.node()} ({os.cpu_count()} cores)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (3.2 * len(order))))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"plot written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
