#!/usr/bin/python3
"""Draws the training curves of one or more run dirs, overlaid: training loss and test accuracy over steps, with
each run's membership changes (workers joining, becoming ready, leaving, dying) as vertical lines.

    scripts/plot_run.py DIR [DIR ...] --out curves.png [--label NAME ...]

Reads DIR/metrics.csv and DIR/events.jsonl (docs/operations.md, "Training curves"). A --label per DIR, in order
(default: the dir's name). Exit 0 with the PNG written, 2 for a missing dir or a missing or malformed metrics.csv,
1 without matplotlib (Debian's python3-matplotlib, for /usr/bin/python3).
"""
import argparse
import math
import os
import sys

from events import EventReader
from metrics import MetricsError, read_metrics

# Membership events (docs/events.md) and how they are drawn. Their "step" is the step in flight, i.e. the steps
# done: the line at x = t sits between the rows of steps t and t + 1. Events without a step (before training
# started, the initial members) are not drawn.
MEMBERSHIP = {"worker_joined": ":", "worker_ready": "-.", "worker_left": "--", "worker_dead": "-"}


def load(run_dir):
    """(metrics rows, membership events) of a run dir; raises MetricsError."""
    if not os.path.isdir(run_dir):
        raise MetricsError(f"{run_dir}: no such directory")
    rows = read_metrics(run_dir)
    if not rows:
        raise MetricsError(f"{os.path.join(run_dir, 'metrics.csv')}: no step (only the header)")
    events = [e for e in EventReader(run_dir).poll() if e.get("event") in MEMBERSHIP and "step" in e]
    return rows, events


def plot(runs, out):
    """runs: [(label, rows, events)]. Writes the figure to `out`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, (loss_ax, acc_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    evaluated_any = False
    for i, (label, rows, events) in enumerate(runs):
        color = colors[i % len(colors)]
        # Runs that coincide (the point of elasticity) would hide each other: each later one thinner, on top.
        width = max(0.8, 3.0 - 1.0 * i)
        loss = [math.nan if r["loss"] is None else r["loss"] for r in rows]  # a gap where no loss was reported
        loss_ax.plot([r["step"] for r in rows], loss, color=color, linewidth=width,
                     label=label, zorder=2 + i)
        evaluated = [r for r in rows if r["test_accuracy"] is not None]
        if evaluated:
            evaluated_any = True
            acc_ax.plot([r["step"] for r in evaluated], [r["test_accuracy"] for r in evaluated], color=color,
                        linewidth=width, marker="o", markersize=max(3.0, 8.0 - 2.5 * i), label=label, zorder=2 + i)
        for e in events:
            for ax in (loss_ax, acc_ax):
                ax.axvline(e["step"], color=color, linestyle=MEMBERSHIP[e["event"]], linewidth=0.9, alpha=0.7,
                           zorder=1)
    loss_ax.set_ylabel("training loss (mean over VWs)")
    loss_ax.set_title("training loss per step")
    acc_ax.set_ylabel("test accuracy")
    acc_ax.set_title("test accuracy where evaluated")
    acc_ax.set_xlabel("step (steps done)")
    if not evaluated_any:
        acc_ax.text(0.5, 0.5, "the test set was not evaluated", transform=acc_ax.transAxes, ha="center",
                    va="center", color="grey")
    kinds = sorted({e["event"] for _, _, events in runs for e in events}, key=list(MEMBERSHIP).index)
    markers = [Line2D([], [], color="grey", linestyle=MEMBERSHIP[k], linewidth=0.9, label=k) for k in kinds]
    handles, _ = loss_ax.get_legend_handles_labels()
    loss_ax.legend(handles=handles + markers, fontsize=8, loc="upper right")
    for ax in (loss_ax, acc_ax):
        ax.grid(True, linewidth=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run dirs (launcher/local.sh --run-dir)")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--label", action="append", default=[], help="a run's name in the legend, one per DIR")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.dirs):
        parser.error(f"{len(args.label)} --label for {len(args.dirs)} dirs: give one per DIR or none")
    labels = args.label or [os.path.basename(os.path.normpath(d)) for d in args.dirs]
    runs = []
    for label, d in zip(labels, args.dirs):
        try:
            runs.append((label, *load(d)))
        except MetricsError as e:
            print(f"plot_run.py: {e}", file=sys.stderr)
            return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_run.py: python3-matplotlib is missing (scripts/setup.sh installs it; run with /usr/bin/python3)",
              file=sys.stderr)
        return 1
    try:
        plot(runs, args.out)
    except OSError as e:
        print(f"plot_run.py: cannot write {args.out}: {e}", file=sys.stderr)
        return 2
    print(f"plot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
