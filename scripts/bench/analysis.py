#!/usr/bin/python3
"""The benchmark's analysis: reads the JSON a run leaves behind and turns it into figures, and draws the plot.

What it reads (never a log line):
  - RUN_DIR/events.jsonl, the coordinator's events (docs/events.md), through scripts/events.py's EventReader;
  - RUN_DIR/logs/worker<i>.json, each worker's end-of-run report;
  - RUN_DIR/result.json;
  - the JSON lines the bench programs print (build/bin/baseline, ps_transfer, durable_bench,
    scripts/ddp_baseline.py): the stdout lines that start with '{';
  - RUN_DIR/marks.json, what the elastic section did and when (attach, kill);
  - build/bench/results.csv, for the plot.

  /usr/bin/python3 scripts/bench/analysis.py plot [--csv build/bench/results.csv] [--out build/bench/bench.png]
  /usr/bin/python3 scripts/bench/analysis.py elastic RUN_DIR [--timeout-ms 1000]

Stdlib only, but for the plot (python3-matplotlib).
"""
import argparse
import csv
import json
import os
import platform
import statistics
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from events import EventReader  # noqa: E402  (scripts/events.py)

# ---- reading ------------------------------------------------------------------------------


def read_events(run_dir, kind=None):
    """The run dir's events, in order (of `kind` only, if given); [] without a file."""
    return [e for e in EventReader(run_dir).poll() if kind is None or e["event"] == kind]


def read_json(path):
    """The JSON object in a file, or None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_result(run_dir):
    return read_json(os.path.join(run_dir, "result.json"))


def read_report(run_dir, index):
    """Worker `index`'s end-of-run report (local.sh writes RUN_DIR/logs/worker<i>.json), or None."""
    return read_json(os.path.join(run_dir, "logs", f"worker{index}.json"))


def json_lines(text):
    """The JSON objects a bench program printed: its stdout lines that start with '{'."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def find(objs, **match):
    """The first of the JSON objects `objs` whose fields have the values `match`, or None."""
    return next((o for o in objs if all(o.get(k) == v for k, v in match.items())), None)


# ---- figures ------------------------------------------------------------------------------


def median(xs):
    """The median (of an even count, the mean of the middle two); None for no value."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(x, y):
    """x / y, or None when either is missing or not positive."""
    return x / y if x and y and x > 0 and y > 0 else None


def paired(base, runs):
    """The median, lowest and highest of the per-round ratios runs[i] / base[i] (a drift of the host between
    rounds moves both sides of a ratio); None when a round failed."""
    rs = [ratio(r, b) for b, r in zip(base, runs)]
    if not rs or None in rs:
        return None
    return median(rs), min(rs), max(rs)


def samples_per_s(result):
    """A job's samples/s from its result.json: steady_samples_per_s (after the first 5 steps, as the baseline skips
    5 warm-up steps), else steps * V * batch_per_vw / train_seconds."""
    return result.get("steady_samples_per_s") or (
        result["steps"] * result["virtual_workers"] * result["batch_per_vw"] / result["train_seconds"])


def step_completions(events):
    """[(t, step)] of the step_completed events."""
    return [(e["t"], e["step"]) for e in events if e["event"] == "step_completed"]


def step_intervals(events):
    """[(step, ms)]: the time from step - 1's completion to step's, for consecutive steps."""
    done = step_completions(events)
    return [(s1, (t1 - t0) * 1e3) for (t0, s0), (t1, s1) in zip(done, done[1:]) if s1 == s0 + 1]


def median_step_ms(run_dir):
    """The median interval between consecutive completed steps of a run, in ms (steady-state steps, robust to a
    burst of host noise); None without two completed steps."""
    return median([ms for _, ms in step_intervals(read_events(run_dir))])


def last_step(events):
    """The last completed step (-1 before the first)."""
    done = step_completions(events)
    return done[-1][1] if done else -1


def worker_of_pid(events, pid):
    """The first worker id the process `pid` registered as, or None."""
    return next((e["worker"] for e in events if e["event"] == "worker_joined" and e["pid"] == pid), None)


def counted(events, pid):
    """Whether the worker of process `pid` had a range confirmed (its contribution counted)."""
    w = worker_of_pid(events, pid)
    return w is not None and any(e["event"] == "range_confirmed" and e["worker"] == w for e in events)


def recovered(events, pid):
    """Whether the worker of process `pid` was declared dead and a step completed after that."""
    w = worker_of_pid(events, pid)
    dead = False
    for e in events:
        dead = dead or (e["event"] == "worker_dead" and e["worker"] == w)
        if dead and e["event"] == "step_completed":
            return True
    return False


def elastic_report(run_dir, timeout_ms):
    """The elastic section's figures from a run dir's events and marks.json ([{"kind": "attach"|"kill", "t": epoch
    seconds, "pid": P}]): returns ([(metric, ms or None)], [detail lines])."""
    events = read_events(run_dir)
    marks = read_json(os.path.join(run_dir, "marks.json")) or []
    registered, ready, first_counted, dead = {}, {}, {}, {}
    epochs = []  # (from step, workers)
    for e in events:
        kind = e["event"]
        if kind == "worker_joined":
            registered.setdefault(e["pid"], (e["worker"], e["t"]))
        elif kind == "worker_ready":
            ready.setdefault(e["worker"], e["t"])
        elif kind == "range_confirmed":
            first_counted.setdefault(e["worker"], (e["t"], e["step"]))
        elif kind == "worker_dead":
            dead.setdefault(e["worker"], e["t"])
        elif kind == "assignment":
            epochs.append((e["step"], len(e["ranges"])))
    completes = step_completions(events)

    def workers_at(step):
        n = 0
        for from_step, count in epochs:
            if from_step <= step:
                n = count
        return n

    intervals = {}  # workers -> step times (ms)
    for step, ms in step_intervals(events):
        intervals.setdefault(workers_at(step), []).append(ms)

    details = []
    attach = {k: [] for k in ("total", "start_reg", "reg_first", "ready_first")}
    crash = {k: [] for k in ("total", "detect", "recompute")}
    for m in marks:
        t, pid = m["t"], m["pid"]
        w, t_reg = registered.get(pid, (None, None))
        if m["kind"] == "attach":
            if w is None or w not in first_counted:
                details.append(f"attach (pid {pid}): no counted contribution")
                continue
            t_first, step = first_counted[w]
            t_ready = ready.get(w, t_first)
            attach["total"].append((t_first - t) * 1e3)
            attach["start_reg"].append((t_reg - t) * 1e3)
            attach["reg_first"].append((t_first - t_reg) * 1e3)
            attach["ready_first"].append((t_first - t_ready) * 1e3)
            details.append(f"attach worker {w}: registered +{(t_reg - t) * 1e3:.0f} ms, ready "
                           f"+{(t_ready - t) * 1e3:.0f} ms, first range confirmed (step {step}) "
                           f"+{(t_first - t) * 1e3:.0f} ms")
        elif m["kind"] == "kill":
            t_dead = dead.get(w)
            after = [(tc, s) for tc, s in completes if t_dead is not None and tc > t_dead]
            if not after:
                details.append(f"kill worker {w} (pid {pid}): no recovery seen")
                continue
            t_rec, step = after[0]
            crash["total"].append((t_rec - t) * 1e3)
            crash["detect"].append((t_dead - t) * 1e3)
            crash["recompute"].append((t_rec - t_dead) * 1e3)
            details.append(f"kill worker {w}: declared dead +{(t_dead - t) * 1e3:.0f} ms, "
                           f"step {step} complete +{(t_rec - t) * 1e3:.0f} ms")
    two, three = intervals.get(2, []), intervals.get(3, [])
    details.append(f"medians of {len(two)} steps at 2 workers, {len(three)} at 3; of {len(attach['total'])} "
                   f"attaches and {len(crash['total'])} kills")
    metrics = [  # names are csv fields: no commas
        ("step time median (2 workers)", median(two)),
        ("step time median (3 workers)", median(three)),
        ("attach: attach.sh start -> first counted", median(attach["total"])),
        ("attach: attach.sh start -> registered", median(attach["start_reg"])),
        ("attach: registered -> first counted", median(attach["reg_first"])),
        ("attach: ready -> first counted", median(attach["ready_first"])),
        ("kill: SIGKILL -> next completed step", median(crash["total"])),
        ("kill: detection (SIGKILL -> declared dead)", median(crash["detect"])),
        ("kill: recompute (declared dead -> step)", median(crash["recompute"])),
        ("kill: next completed step - timeout", median([x - timeout_ms for x in crash["total"]])),
    ]
    return metrics, details


def time_breakdown(report):
    """Where a worker's time went, from its report: "plan_wait 1.2, pull 0.1, ..." ms per train plan."""
    if not report or not report.get("ms_per_train_plan"):
        return "no worker report"
    parts = ", ".join(f"{k} {v:.2f}" for k, v in report["ms_per_train_plan"].items())
    return f"ms per train plan: {parts} ({report.get('train_plans', '?')} train plans)"


def render_ranges(ranges):
    return " ".join(f"w{r['worker']}:[{r['lo']},{r['hi']})" for r in ranges)


def hetero_report(run_dir, slowdowns, t1_ms, speed):
    """Lines on the speed run's final assignment, its workers named by slowdown (worker i is the i-th slowdown's;
    its report names its ids), the speeds the planner last saw and the ideal at those speeds."""
    assignments = read_events(run_dir, "assignment")
    if not assignments:
        return ["final assignment (speed run): no assignment event"]
    last = assignments[-1]
    lines = [f"final assignment (speed run): epoch {last['epoch']} from step {last['step']}: "
             f"{render_ranges(last['ranges'])}  ({len(assignments)} epochs, {len(assignments) - 1} re-plans or "
             "changes)"]
    names = {}  # worker id -> "2x"
    for i, f in enumerate(slowdowns):
        for w in (read_report(run_dir, i) or {}).get("worker_ids", []):
            names[w] = f"{f}x"
    counts = {r["worker"]: r["hi"] - r["lo"] for r in last["ranges"]}
    by_speed = sorted(names.items(), key=lambda x: float(x[1][:-1]))
    if names:
        lines.append("  VWs by worker: " + ", ".join(f"w{w} ({f}) {counts.get(w, 0)}" for w, f in by_speed))
    replans = read_events(run_dir, "replan")
    if names and replans:
        seen = {int(w): s for w, s in replans[-1]["seconds_per_vw"].items()}

        def ms(w):
            return "?" if seen.get(w) is None else f"{seen[w] * 1e3:.2f}"
        lines.append("  seconds per VW as the planner last saw them: "
                     + ", ".join(f"w{w} ({f}) {ms(w)} ms" for w, f in by_speed) + f"; t1 alone {t1_ms} ms")
        # The ideal at the speeds the workers had in this run (contention included): V VWs shared in proportion
        # to speed with no step overhead, i.e. sum(1/t_i) / V steps/s.
        t = [s for s in seen.values() if s is not None]
        if t and all(x > 0 for x in t) and speed:
            v = sum(counts.values()) or 8
            ideal = sum(1.0 / x for x in t) / v
            lines.append(f"  ideal at these measured speeds: {ideal:.2f} steps/s; planner=speed ran {speed:.2f} "
                         f"({speed / ideal:.2f}x: what the step protocol and the integer VW split leave)")
    return lines


# ---- the plot -----------------------------------------------------------------------------

SECTIONS = {  # name: (what the ratio_vs_baseline column of its csv rows is, goal line or None)
    "vw": ("samples/s vs plain libtorch loop (1 thread)", None),
    "elastic": ("time in median step times", None),
    "transfer": ("raw ZeroMQ ms / ElasticPS ms (higher is better)", 0.7),
    "wire": ("raw ZeroMQ fp32 ms / ElasticPS ms at each wire dtype (higher is better)", None),
    "ps_share": ("compute / step time (1 = free parameter server)", None),
    "ddp": ("samples/s vs PyTorch DDP (accumulate)", 1.2),
    "scaling": ("ms/step vs plain libtorch loop (lower is better)", None),
    "hetero": ("steps/s vs --planner=equal", 1.3),
    "durable": ("GB/s vs raw RocksDB; mlp rows: steps/s vs no checkpoints (goal: >= 0.95)", 0.95),
    "network": ("samples/s vs the same framework on one host", None),
}


def latest_rows(path):
    """{section: its rows of the newest run in the csv}."""
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


def plot(csv_path, out_path):
    """Draws one bar chart per section, from that section's newest run in the csv: the ratio_vs_baseline of each
    row, with a line at 1 and, where a section has a goal, at the goal. Rows without a ratio (failed runs) are left
    out. Returns an exit status."""
    if not os.path.exists(csv_path):
        print(f"analysis.py: {csv_path} does not exist: run scripts/bench.sh first", file=sys.stderr)
        return 2
    try:
        import matplotlib
    except ImportError:
        print("analysis.py: python3-matplotlib is missing: no plot (scripts/setup.sh installs it)", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def with_ratio(rows):
        return [r for r in rows if r.get("ratio_vs_baseline") not in ("", "-", None)]

    by_section = {s: with_ratio(rows) for s, rows in latest_rows(csv_path).items()}
    order = [s for s in SECTIONS if by_section.get(s)] + sorted(
        s for s in by_section if s not in SECTIONS and by_section[s])
    if not order:
        print("analysis.py: no rows with a ratio in the csv", file=sys.stderr)
        return 1
    most = max(len(by_section[s]) for s in order)  # durable has 13 bars: widen the figure for it
    fig, axes = plt.subplots(len(order), 1, figsize=(max(11, 1.15 * most), 3.2 * len(order)), squeeze=False)
    for ax, s in zip(axes[:, 0], order):
        rows = by_section[s]
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
        positive = [v for v in values if v > 0]
        if positive and max(values) > 20 * min(positive):
            ax.set_yscale("log")  # elastic: times from one step to hundreds
            ax.set_ylabel("ratio (log)")
        r0 = rows[0]
        ax.set_title(f"{s}: {what}   (run {r0['run']}, {r0['git']}, load {r0.get('load1', '?')})", fontsize=9)
    fig.suptitle(f"ElasticPS bench on {platform.node()} ({os.cpu_count()} cores)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (3.2 * len(order))))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    fig.savefig(out_path, dpi=110)
    print(f"plot written to {out_path}")
    return 0


def main():
    root = os.path.dirname(os.path.dirname(HERE))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("plot", help="draw bench.png from results.csv")
    pp.add_argument("--csv", default=os.path.join(root, "build", "bench", "results.csv"))
    pp.add_argument("--out", default=os.path.join(root, "build", "bench", "bench.png"))
    pe = sub.add_parser("elastic", help="the elastic section's figures of a run dir")
    pe.add_argument("run_dir")
    pe.add_argument("--timeout-ms", type=float, default=1000)
    a = p.parse_args()
    if a.command == "plot":
        return plot(a.csv, a.out)
    metrics, details = elastic_report(a.run_dir, a.timeout_ms)
    for name, ms in metrics:
        print(f"{name:44s} | {'-' if ms is None else f'{ms:.1f}'}")
    for line in details:
        print(f"# {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
