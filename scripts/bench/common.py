"""What every benchmark section shares: its command line, running the programs and jobs it measures, the table rows
and build/bench/results.csv. The figures themselves come from analysis.py.

A section is a file scripts/bench/<name>.py that ends with `common.main(run)`, where run(bench) runs the section
with a Bench; scripts/bench.sh calls it as

    /usr/bin/python3 scripts/bench/<name>.py --steps N --run-id ID --git REV

and it exits 1 when a run failed (the benchmark never fails on timing).
"""
import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

import analysis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")
OUT = os.path.join(ROOT, "build", "bench")
RUNS = os.path.join(OUT, "runs")
CSV = os.path.join(OUT, "results.csv")
LOCAL = os.path.join(ROOT, "launcher", "local.sh")
ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
PY = "/usr/bin/python3"  # Debian's: libtorch (ddp_baseline.py) and matplotlib
CNN = os.path.join(ROOT, "examples", "fashion_mnist_cnn.flags")
MLP = os.path.join(ROOT, "examples", "fashion_mnist_mlp.flags")
CSV_HEADER = "run,git,section,config,samples_per_s,ratio_vs_baseline,steps,seconds,load1"

# Several libtorch processes share this host: no OpenMP spinning. Their host-wide files (the workers' model cache, a
# shard's default store) go to a TMPDIR of this section's own, removed when it ends.
PROCESS_TMP = tempfile.mkdtemp(prefix="eps-bench-tmp-")
atexit.register(shutil.rmtree, PROCESS_TMP, True)
ENV = dict(os.environ, OMP_WAIT_POLICY="passive", TMPDIR=PROCESS_TMP)

# glibc frees big blocks back to the kernel (munmap, trim) and a VM may pay 10-20 us per page fault: "reuse" keeps
# freed pages in the process (one arena, no mmap, no trim) so every buffer allocated per step lands on warm pages.
ALLOC_ENV = {
    "default": {},
    "reuse": {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "1073741824",
              "MALLOC_TRIM_THRESHOLD_": "1073741824"},
}


def load1():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_seconds(pid):
    """utime + stime of a live process in seconds (/proc/PID/stat fields 14 and 15); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def fmt_ratio(x, y, digits=2):
    """x / y as text with `digits` decimals, "-" when either is missing or not positive."""
    r = analysis.ratio(x, y)
    return "-" if r is None else f"{r:.{digits}f}"


def job_flags(steps):
    """The coordinator flags of a measured CNN run of `steps` steps, no evaluation. The cosine schedule needs more
    steps than its warm-up: shortened for short runs."""
    return [f"--steps={steps}", "--test_limit=-1"] + ([f"--warmup_steps={steps // 2}"] if steps <= 200 else [])


def interleaved(runs, rounds):
    """Runs every config's go(r) of `runs` ({config: go}) once per round, in the dict's order within a round, for
    rounds 1..rounds (a shared host drifts within minutes: interleaving spreads the drift over all configs); returns
    ({config: [samples/s]}, {config: [seconds]}), None where a run failed."""
    sps = {c: [] for c in runs}
    secs = {c: [] for c in runs}
    for r in range(1, rounds + 1):
        for config, go in runs.items():
            s, t = go(r)
            sps[config].append(s)
            secs[config].append(t)
    return sps, secs


def verdict(name, x, goal, width):
    """A goal's line: "  NAME  1.23x: met" (or "not met", or "not measured" when x is None)."""
    if x is None:
        return f"  {name:<{width}s} not measured"
    return f"  {name:<{width}s} {x:5.2f}x: {'met' if x >= goal else 'not met'}"


def warn(msg):
    print(f"bench.sh: {msg}", file=sys.stderr)


def tail(path, n=5):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Bench:
    """One section's run: its csv rows, the programs it runs, and whether one failed."""

    def __init__(self, steps, run_id, git, minutes=60):
        self.steps, self.run_id, self.git, self.minutes = steps, run_id, git, minutes
        self.failed = False
        os.makedirs(RUNS, exist_ok=True)
        if not os.path.exists(CSV) or os.path.getsize(CSV) == 0:
            with open(CSV, "w") as f:
                f.write(CSV_HEADER + "\n")

    # ---- rows ---------------------------------------------------------------------------

    def csv(self, section, config, samples_per_s="", ratio="", steps=None, seconds="", load=""):
        """Appends a row to results.csv (config is a csv field: commas become ';')."""
        steps = self.steps if steps is None else steps
        fields = [self.run_id, self.git, section, config.replace(",", ";"), samples_per_s, ratio, steps, seconds, load]
        with open(CSV, "a") as f:
            f.write(",".join(str(x) for x in fields) + "\n")

    def row(self, section, config, sps, base, seconds, load, width=24):
        """A row of samples/s against the baseline's (None sps: a failed run), printed and appended."""
        if sps is None:
            self.failed = True
            print(f"{config:<{width}s} | {'failed':>10s} | -")
            self.csv(section, config, load=load)
            return
        r = fmt_ratio(sps, base)
        print(f"{config:<{width}s} | {sps:10.1f} | {r}")
        self.csv(section, config, f"{sps:.1f}", r, seconds=f"{seconds:.3f}", load=load)

    def paired_rows(self, section, base, other, sps, secs, load, base_runs):
        """The rows of two configs measured in interleaved rounds (sps, secs: config -> [per round, None: failed]),
        medians, the ratio against `base`; then the per-round ratios' median and range, and the base runs' own
        spread (`base_runs` names them in the line)."""
        median = None if None in sps[base] else analysis.median(sps[base])
        for config in (base, other):
            ok = None not in sps[config]
            self.row(section, config, analysis.median(sps[config]) if ok else None, median,
                     analysis.median(secs[config]) if ok else None, load)
        p = analysis.paired(sps[base], sps[other])
        runs = [x for x in sps[base] if x]
        spread = f"{min(runs) / max(runs):.2f}-1.00" if runs else "-"
        print(f"   paired (median and range of the per-round ratios): "
              f"{'-' if p is None else f'{p[0]:.2f} ({p[1]:.2f}-{p[2]:.2f})'}; {base_runs}' own spread "
              f"(slowest / fastest): {spread}")

    def csv_ms(self, section, config, ms, ratio, steps, load):
        """A csv row timed in ms (None ms: failed): seconds = ms / 1000, no samples/s."""
        if ms is None:
            self.failed = True
            self.csv(section, config, steps=steps, load=load)
            return
        self.csv(section, config, "", ratio, steps, f"{ms / 1000:.4f}", load)

    # ---- running ------------------------------------------------------------------------

    def need_bin(self, name):
        if not os.access(os.path.join(BIN, name), os.X_OK):
            warn(f"{BIN}/{name} is missing: run scripts/setup.sh")
            sys.exit(2)

    def program(self, name, cmd, env=None):
        """Runs a bench program to its end, its output to runs/NAME.log; returns the JSON objects it printed, or
        None if it failed."""
        log = os.path.join(RUNS, f"{name}.log")
        with open(log, "w") as f:
            p = subprocess.run(cmd, env=dict(ENV, **(env or {})), stdout=subprocess.PIPE, stderr=f, text=True)
            f.write(p.stdout)
        if p.returncode != 0:
            warn(f"{os.path.basename(cmd[0])} {name} failed (log: {log}):\n{tail(log)}")
            return None
        return analysis.json_lines(p.stdout)

    def baseline(self, name, *args, steps=None):
        """build/bin/baseline over `steps` steps (default --steps): (samples/s, seconds), or (None, None) if it
        failed."""
        steps = self.steps if steps is None else steps
        out = self.program(name, [os.path.join(BIN, "baseline"), f"--steps={steps}", *args])
        r = analysis.find(out or [], program="baseline")
        return (r["samples_per_s"], r["seconds"]) if r else (None, None)

    def ps_transfer(self, name, *args, alloc="default", prefix=()):
        """build/bin/ps_transfer with the allocator settings `alloc`: the JSON objects it printed ([] if it
        failed)."""
        logs = os.path.join(RUNS, name)
        shutil.rmtree(logs, ignore_errors=True)
        os.makedirs(logs)
        out = self.program(name, [*prefix, os.path.join(BIN, "ps_transfer"), f"--log_dir={logs}", *args],
                           ALLOC_ENV[alloc])
        return out or []

    def job(self, name, workers, flags, *extra, shards=1, launch=()):
        """A job through launcher/local.sh (local.sh options `launch`, coordinator flags `extra`) to its end, run dir
        runs/NAME, output in runs/NAME.log; returns the run dir's result.json as a dict, or None if it failed."""
        d = os.path.join(RUNS, name)
        shutil.rmtree(d, ignore_errors=True)
        cmd = [LOCAL, "--job", flags, "--servers", str(shards), "--workers", str(workers), "--run-dir", d, *launch,
               "--", *extra]
        with open(f"{d}.log", "w") as f:
            p = subprocess.run(cmd, env=ENV, stdout=f, stderr=subprocess.STDOUT)
        result = analysis.read_result(d)
        if p.returncode != 0 or result is None:
            warn(f"job {name} failed (log: {d}.log):\n{tail(d + '.log')}")
            return None
        return result

    def job_sps(self, name, workers, flags, *extra, **kw):
        """job(), as (samples/s, train seconds) or (None, None)."""
        r = self.job(name, workers, flags, *extra, **kw)
        return (analysis.samples_per_s(r), r["train_seconds"]) if r else (None, None)


def run_dir(name):
    return os.path.join(RUNS, name)


def wait_until(check, timeout, proc=None, every=0.05):
    """Calls check() every `every` s until it is true (True), `timeout` s pass or process `proc` ends (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline or (proc is not None and proc.poll() is not None):
            return False
        time.sleep(every)


def stop(procs):
    """SIGTERM to every process still running (local.sh stops its job within 5 s), SIGKILL after 10 s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(run, add_args=None):
    """A section's entry point: parses the command line scripts/bench.sh passes (and the section's own options, which
    add_args(parser) adds; bench.args holds them all), runs run(bench), exits 1 when a run failed."""
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--run-id", default=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    p.add_argument("--git", default="unknown")
    p.add_argument("--minutes", type=int, default=60, help="the soak's length")
    if add_args is not None:
        add_args(p)
    a = p.parse_args()
    bench = Bench(a.steps, a.run_id, a.git, a.minutes)
    bench.args = a
    run(bench)
    sys.stdout.flush()
    sys.exit(1 if bench.failed else 0)
