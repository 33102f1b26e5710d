#!/usr/bin/python3
"""harvest: a serving node lent to training by its own load (launcher/lend.sh --serve-metrics), measured.

The node is one core (CPU 1): `elasticps serve` (the cnn's export) and lend.sh with the worker it lends both run
there (taskset), the worker in Linux's idle scheduling class (lend.sh --worker-idle; --nice: at nice 19, as
before 2026-12-07). The job (coordinator and shard, local.sh --workers 0: only lent workers
train) and scripts/loadgen.py run on CPU 0. The same open-loop trace (Poisson arrivals on a diurnal rate curve,
TRACE below) is sent to a fresh server in each of two runs, in turn (ROUNDS rounds, alone first in odd ones):
  alone    serving alone;
  lending  serving while lend.sh lends the node: it attaches a worker after IDLE_FOR polls at most IDLE_RATE
           requests/s over the last WINDOW seconds and makes it leave (SIGTERM: at its next VW boundary) as soon
           as more than BUSY_RATE requests/s arrive or BUSY_IN_FLIGHT requests are inside the server; after the
           trace, a new agent with lend.sh's defaults (any request: busy) and its give-back file (the server
           signals the worker itself at a burst's first request) and BURSTS bursts from quiet;
then the same worker (CPU 1, the same class) is lent full time, with no server, for FULL_SECONDS: what the node could train.
With --keep-warm both agents run lend.sh --keep-warm: a busy node parks its worker (SIGUSR1) instead of ending it, and
the next idle period makes the same process join again.

Figures, per round: client-side latency p50 / p99 (lending against alone; also of the requests sent while a worker
was lent, against those sent at the same moments of the trace alone), failed requests, the node's busy CPU time over
the trace (utime + stime from /proc/PID/stat: the server's, and the agent's with its workers and probe, sampled every
0.25 s while they live) with lending against alone, training samples/s harvested (samples of the steps the lent
workers computed, over the trace's length) against the worker lent full time; and the time from each burst's first
request to the worker's leave (`worker_left`), against one VW's compute (the full-time worker's report). The plot
of round 1 (request rate, p99, the worker's presence, harvested samples/s over time) goes to build/bench/harvest.png.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import time

import analysis
import common

NODE_CPU, OTHER_CPU = "1", "0"
# One day of 90 s, trough at the start and the end, peak in the middle.
TRACE = {"curve": "diurnal", "peak": 200, "peak-to-trough": 4, "period": 90, "seconds": 90, "seed": 7}
EVERY, IDLE_RATE, BUSY_RATE, WINDOW, BUSY_IN_FLIGHT, IDLE_FOR = 0.2, 90, 120, 1.0, 8, 5
WORKER_CLASS = ["--worker-idle"]  # lend.sh's flags for the lent worker's scheduling; run() sets it from --nice
FULL_SECONDS = 40
ROUNDS, BURSTS, BURST_RATE, BURST_SECONDS = 3, 2, 150, 1.5
LEND = os.path.join(common.ROOT, "launcher", "lend.sh")
LOADGEN = os.path.join(common.ROOT, "scripts", "loadgen.py")


def children(pid):
    """{child pid: its command name} of a live process."""
    out = {}
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return out
    for k in kids:
        try:
            with open(f"/proc/{k}/comm") as f:
                out[int(k)] = f.read().strip()
        except OSError:
            pass
    return out


def batch_per_vw(flags):
    with open(flags) as f:
        return next(int(line.split("=")[1]) for line in f if line.startswith("--batch_per_vw="))


def start_server(model, log, give_back_file="", events_file=""):
    """elasticps serve pinned to the node (with a lending agent's give-back file and the server's events file, if
    given); (process, port)."""
    with open(log, "w") as err:
        p = subprocess.Popen(["taskset", "-c", NODE_CPU, os.path.join(common.BIN, "elasticps"), "serve", "--model",
                              model, "--name", "cnn", "--port", "0",
                              *(["--give_back_file", give_back_file] if give_back_file else []),
                              *(["--events_file", events_file] if events_file else [])],
                             stdout=subprocess.PIPE, stderr=err, text=True, env=common.ENV)
    ready, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline() if ready else ""
    if not line:
        p.kill()
        raise RuntimeError(f"the server did not start (log: {log})")
    return p, json.loads(line)["port"]


def loadgen(port, name):
    """Starts the trace (on CPU 0); returns (process, records path, summary path)."""
    out, summary = os.path.join(common.RUNS, f"{name}.jsonl"), os.path.join(common.RUNS, f"{name}.json")
    args = [f"--{k}={v}" for k, v in TRACE.items()]
    p = subprocess.Popen(["taskset", "-c", OTHER_CPU, common.PY, LOADGEN, "--url", f"http://127.0.0.1:{port}",
                          "--model", "cnn", *args, "--out", out, "--summary", summary],
                         stdout=subprocess.DEVNULL, env=common.ENV)
    return p, out, summary


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def terminate(p, timeout):
    """SIGTERM (the server drains, the agent makes its worker leave), SIGKILL after `timeout` seconds."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def start_job(name):
    """The cnn job on CPU 0 with no worker of its own (local.sh --workers 0); (process, run dir, coordinator)."""
    d = common.run_dir(name)
    shutil.rmtree(d, ignore_errors=True)
    log = open(f"{d}.log", "w")
    p = subprocess.Popen([common.LOCAL, "--job", common.CNN, "--servers", "1", "--workers", "0", "--run-dir", d,
                          "--server-cpus", OTHER_CPU, "--", "--steps=1000000", "--test_limit=-1"],
                         env=common.ENV, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    path = os.path.join(d, "coordinator.addr")
    if not common.wait_until(lambda: os.path.exists(path) and os.path.getsize(path) > 0, 60, p):
        raise RuntimeError(f"job {name} did not start (log: {d}.log)")
    with open(path) as f:
        return p, d, f.read().strip()


def agent(d, addr, probe, log, keep_warm=False):
    """lend.sh pinned to the node, its worker scheduled as WORKER_CLASS says; `probe`: its probe flags."""
    with open(log, "w") as f:
        return subprocess.Popen(["taskset", "-c", NODE_CPU, LEND, "--coordinator", addr, "--token-file",
                                 os.path.join(d, "token"), *probe, "--idle-for", str(IDLE_FOR),
                                 *(["--keep-warm"] if keep_warm else []),
                                 *WORKER_CLASS, "--", "--log", os.path.join(d, "logs", "lent.log"),
                                 "--report-file", os.path.join(d, "logs", "lent.json")],
                                env=common.ENV, stdout=f, stderr=subprocess.STDOUT)


def presence(events):
    """[(ready t, left t or None)] of every worker, in order of readiness."""
    left = {e["worker"]: e["t"] for e in events if e["event"] in ("worker_left", "worker_dead")}
    return [(e["t"], left.get(e["worker"]), e["worker"]) for e in events if e["event"] == "worker_ready"]


def samples_between(events, per_vw, t0, t1):
    """Training samples of the steps completed in [t0, t1]."""
    return sum((r["hi"] - r["lo"]) * per_vw for e in events if e["event"] == "step_completed" and t0 <= e["t"] <= t1
               for r in e["ranges"])


def p99_series(records, t0, width):
    """[(bin start - t0, p99 ms)] of the requests answered 200, by send time, in bins of `width` seconds."""
    bins = {}
    for r in records:
        if r["status"] == 200:
            bins.setdefault(int((r["t"] - t0) // width), []).append(r["latency_s"] * 1000)
    out = []
    for k in sorted(bins):
        xs = sorted(bins[k])
        out.append((k * width, xs[min(len(xs) - 1, int(0.99 * len(xs)))]))
    return out


def plot(alone, lending, events, per_vw, t0, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    seconds = TRACE["seconds"]
    fig, ax = plt.subplots(4, 1, figsize=(9, 8.5), sharex=True)
    for recs, label in ((alone, "alone"), (lending, "lending")):
        start = min(r["t"] for r in recs)
        counts = [0] * (int(seconds) + 1)
        for r in recs:
            counts[min(int(r["t"] - start), int(seconds))] += 1
        ax[0].plot(range(int(seconds)), counts[:int(seconds)], label=label, lw=1)
        xs = p99_series(recs, start, 5)
        ax[1].step([x for x, _ in xs], [y for _, y in xs], where="post", label=label)
    ax[0].axhline(BUSY_RATE, color="r", ls=":", lw=1, label="busy above")
    ax[0].axhline(IDLE_RATE, color="g", ls=":", lw=1, label="idle at or below")
    ax[0].set_ylabel("requests/s")
    ax[0].legend(fontsize=7, loc="upper right")
    ax[1].set_ylabel("p99 ms (5 s bins)")
    ax[1].legend(fontsize=7, loc="upper right")
    for ready, left, _ in presence(events):
        ax[2].axvspan(ready - t0, (left or t0 + seconds) - t0, color="tab:green", alpha=0.5)
    ax[2].set_yticks([])
    ax[2].set_ylabel("worker lent")
    width = 2
    rate = [samples_between(events, per_vw, t0 + k, t0 + k + width) / width for k in range(0, int(seconds), width)]
    ax[3].step(list(range(0, int(seconds), width)), rate, where="post")
    ax[3].set_ylabel("samples/s trained")
    ax[3].set_xlabel("seconds into the trace")
    ax[3].set_xlim(0, seconds)
    fig.suptitle(f"harvest: diurnal trace (peak {TRACE['peak']} req/s, peak/trough {TRACE['peak-to-trough']}, "
                 f"day {TRACE['period']} s), one core", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def lent_p99(records, t0, stints):
    """p99 ms of the requests answered 200 that were sent while a worker was lent (stints: [(start, end)] in seconds
    from t0), and of the others."""
    inside, outside = [], []
    for r in records:
        if r["status"] == 200:
            x = r["t"] - t0
            (inside if any(a <= x < b for a, b in stints) else outside).append(r["latency_s"] * 1000)
    return percentile(inside, 0.99), percentile(outside, 0.99)


def serve_alone(model, name):
    """The trace against a server alone: (records, summary, the server's CPU seconds over the trace)."""
    server, port = start_server(model, os.path.join(common.RUNS, f"{name}_serve.log"))
    try:
        cpu0 = common.cpu_seconds(server.pid)
        gen, out, summary = loadgen(port, name)
        gen.wait()
        cpu = common.cpu_seconds(server.pid) - cpu0
    finally:
        terminate(server, 30)
    return read_lines(out), analysis.read_json(summary), cpu


def serve_lending(model, name, keep_warm):
    """The trace against a server on a node lent by lend.sh --serve-metrics, then BURSTS bursts from quiet; a dict of
    what it measured."""
    job, d, addr = start_job(name)
    # The bursts' agent (lend.sh's default bands) hands the server the worker to give back at the first request.
    give_back, served = os.path.join(d, "give-back"), os.path.join(d, "serve-events.jsonl")
    server, port = start_server(model, os.path.join(common.RUNS, f"{name}_serve.log"), give_back, served)
    lender = agent(d, addr, ["--serve-metrics", f"http://127.0.0.1:{port}/metrics", "--every", str(EVERY),
                             "--idle-rate", str(IDLE_RATE), "--busy-rate", str(BUSY_RATE), "--rate-window",
                             str(WINDOW), "--busy-in-flight", str(BUSY_IN_FLIGHT)], f"{d}/agent.log", keep_warm)
    try:
        cpu0, agent0 = common.cpu_seconds(server.pid), common.cpu_seconds(lender.pid)
        gen, out, summary = loadgen(port, name)
        kids = {}  # (pid, command name) -> CPU seconds of the agent's workers and probe, sampled while they live
        while gen.poll() is None:
            for pid, comm in children(lender.pid).items():
                c = common.cpu_seconds(pid)
                if c is not None:
                    kids[(pid, comm)] = c
            time.sleep(0.25)
        t_end = time.time()
        m = {"cpu_server": common.cpu_seconds(server.pid) - cpu0, "cpu_agent": common.cpu_seconds(lender.pid) - agent0,
             "cpu_workers": sum(c for (_, comm), c in kids.items() if comm in ("worker", "exe", "attach.sh")),
             "cpu_probe": sum(c for (_, comm), c in kids.items() if comm.startswith("python")), "t_end": t_end,
             "records": read_lines(out), "summary": analysis.read_json(summary), "lags": [], "server_lags": [],
             "burst_failed": 0}
        m["cpu_other"] = sum(kids.values()) - m["cpu_workers"] - m["cpu_probe"]
        # Bursts from quiet, with lend.sh's defaults (any request is busy): a lent worker computing, then BURST_RATE
        # requests/s for BURST_SECONDS.
        lender.send_signal(signal.SIGTERM)
        lender.wait(timeout=90)
        lender = agent(d, addr, ["--serve-metrics", f"http://127.0.0.1:{port}/metrics", "--every", str(EVERY),
                                 "--give-back-file", give_back], f"{d}/agent-bursts.log", keep_warm)
        for k in range(BURSTS):
            since = time.time()

            def lent():
                left = {e["worker"] for e in analysis.read_events(d, "worker_left")}
                ready = [e for e in analysis.read_events(d, "worker_ready") if e["worker"] not in left]
                steps = [e for e in analysis.read_events(d, "step_completed") if e["t"] > since and ready and
                         any(r["worker"] == ready[-1]["worker"] for r in e["ranges"])]
                return ready[-1]["worker"] if steps else None
            if not common.wait_until(lent, 120, job):
                common.warn(f"harvest: no worker lent before burst {k + 1}")
                break
            w = lent()
            bname = f"{name}_burst{k + 1}"
            burst = subprocess.run(["taskset", "-c", OTHER_CPU, common.PY, LOADGEN, "--url",
                                    f"http://127.0.0.1:{port}", "--model", "cnn", "--curve", "constant", "--peak",
                                    str(BURST_RATE), "--seconds", str(BURST_SECONDS), "--seed", str(k + 1), "--out",
                                    os.path.join(common.RUNS, f"{bname}.jsonl")], env=common.ENV,
                                   stdout=subprocess.PIPE, text=True)
            m["burst_failed"] += json.loads(burst.stdout)["failed"]
            first = min(r["sent"] for r in read_lines(os.path.join(common.RUNS, f"{bname}.jsonl")))
            gone = [e for e in analysis.read_events(d, "worker_left") if e["worker"] == w]
            if gone:
                m["lags"].append(gone[0]["t"] - first)
                # From the request's arrival at the server, which signalled the worker (docs/serving.md).
                gave = [e for e in (read_lines(served) if os.path.exists(served) else [])
                        if e["event"] == "gave_back" and since <= e["t"] <= gone[0]["t"]]
                if gave:
                    m["server_lags"].append(gone[0]["t"] - gave[0]["t"])
        m["events"] = analysis.read_events(d)
    finally:
        terminate(lender, 90)
        terminate(server, 30)
        common.stop([job])
    return m


def full_time():
    """The same worker (the node, WORKER_CLASS) lent full time with no server: (samples/s, one VW's compute ms)."""
    job, d, addr = start_job("harvest_full")
    lender = agent(d, addr, ["--probe", "true", "--every", "0.2"], f"{d}/agent.log")
    try:
        ok = common.wait_until(lambda: analysis.read_events(d, "worker_ready"), 120, job)
        time.sleep(FULL_SECONDS)  # the measurement's length, not a wait for readiness
    finally:
        terminate(lender, 90)
        common.stop([job])
    events = analysis.read_events(d)
    ready = [e["t"] for e in events if e["event"] == "worker_ready"]
    steps = [e for e in events if e["event"] == "step_completed"]
    sps = vw_ms = None
    if ok and ready and len(steps) > 1:
        sps = samples_between(events, batch_per_vw(common.CNN), ready[0], steps[-1]["t"]) / (steps[-1]["t"] - ready[0])
    report = analysis.read_json(os.path.join(d, "logs", "lent.json"))
    held = [r["hi"] - r["lo"] for e in events if e["event"] == "assignment" for r in e["ranges"]]
    if report and report.get("ms_per_train_plan") and held:
        vw_ms = report["ms_per_train_plan"]["compute"] / held[-1]
    return sps, vw_ms


def run(b):
    if shutil.which("taskset") is None or os.cpu_count() < 2:
        common.warn("harvest: needs taskset and 2 cores (the node on CPU 1, the rest on CPU 0): skipped")
        return
    b.need_bin("eps_serve")
    global WORKER_CLASS
    WORKER_CLASS = ["--worker-nice", "19"] if b.args.nice else ["--worker-idle"]
    per_vw = batch_per_vw(common.CNN)
    print("== harvest: a serving node (CPU 1: elasticps serve of the cnn, lend.sh and its worker "
          + ("at nice 19" if b.args.nice else "in the idle scheduling class") + ") lent to")
    print(f"   the cnn job (CPU 0, with scripts/loadgen.py) by lend.sh --serve-metrics (every {EVERY} s; idle at <= "
          f"{IDLE_RATE} req/s, busy above {BUSY_RATE} req/s")
    print(f"   over {WINDOW:g} s or {BUSY_IN_FLIGHT} in flight; {IDLE_FOR} idle polls to attach). Trace: "
          + ", ".join(f"{k} {v}" for k, v in TRACE.items()) + f"; {ROUNDS} rounds of alone and lending")
    print("   (in turn: alone first in odd rounds);")
    print(f"   then {BURSTS} bursts of {BURST_RATE} req/s from quiet (host load {common.load1()})"
          + ("; lend.sh --keep-warm: a busy node parks its worker" if b.args.keep_warm else ""))
    if b.job("harvest_export", 1, common.CNN, "--steps=20", "--warmup_steps=5", "--test_limit=64") is None:
        b.failed = True
        return
    model = os.path.join(common.run_dir("harvest_export"), "model.safetensors")
    seconds = TRACE["seconds"]
    rows, lags, server_lags, first = [], [], [], None
    for r in range(1, ROUNDS + 1):
        load = common.load1()
        # Alone first in odd rounds, lending first in even ones: the host's drift falls on both.
        if r % 2:
            alone, s_alone, cpu_alone = serve_alone(model, f"harvest_alone{r}")
        m = serve_lending(model, f"harvest_lending{r}", b.args.keep_warm)
        if r % 2 == 0:
            alone, s_alone, cpu_alone = serve_alone(model, f"harvest_alone{r}")
        t0 = min(x["t"] for x in m["records"])
        stints = [(a - t0, min(left or m["t_end"], m["t_end"]) - t0) for a, left, _ in presence(m["events"])
                  if a < m["t_end"]]
        lent_s = sum(max(0, y - max(x, 0)) for x, y in stints)
        harvested = samples_between(m["events"], per_vw, t0, t0 + seconds) / seconds
        t0a = min(x["t"] for x in alone)
        rows.append({"load": load, "alone": s_alone, "lend": m["summary"], "cpu_alone": cpu_alone, "m": m,
                     "lent_s": lent_s, "stints": len(stints), "harvested": harvested,
                     "p99_lent": lent_p99(m["records"], t0, stints), "p99_lent_alone": lent_p99(alone, t0a, stints)})
        lags += m["lags"]
        server_lags += m["server_lags"]
        if first is None:
            first = (alone, m, t0)
    full_sps, vw_ms = full_time()

    print(f"{'round':>5s} | {'p50 ms':>13s} | {'p99 ms':>13s} | {'p99 ms, lent':>13s} | {'failed':>6s} | "
          f"{'node CPU s':>12s} | {'gain':>7s} | {'lent s':>6s} | {'samples/s':>9s} | vs full")
    print(f"{'':>5s} | {'alone / lend':>13s} | {'alone / lend':>13s} | {'alone / lend':>13s} | {'':>6s} | "
          f"{'alone / lend':>12s} | {'':>7s} | {'':>6s} | {'harvested':>9s} |")
    for i, x in enumerate(rows, 1):
        m = x["m"]
        cpu_lend = m["cpu_server"] + m["cpu_agent"] + m["cpu_workers"] + m["cpu_probe"] + m["cpu_other"]
        x["gain"] = (cpu_lend / x["cpu_alone"] - 1) * 100
        pl, pa = x["p99_lent"][0], x["p99_lent_alone"][0]
        lent_p = f"{pa or 0:5.1f} / {pl or 0:5.1f}" if pl is not None else "-"
        print(f"{i:5d} | {x['alone']['p50_ms']:5.1f} / {x['lend']['p50_ms']:5.1f} | {x['alone']['p99_ms']:5.1f} / "
              f"{x['lend']['p99_ms']:5.1f} | {lent_p:>13s} | {x['alone']['failed'] + x['lend']['failed']:6d} | "
              f"{x['cpu_alone']:5.1f} / {cpu_lend:5.1f} | {x['gain']:+6.0f}% | {x['lent_s']:6.1f} | "
              f"{x['harvested']:9.1f} | {common.fmt_ratio(x['harvested'], full_sps)}")
        print(f"      node CPU with lending: server {m['cpu_server']:.1f} s, lent workers {m['cpu_workers']:.1f} s, "
              f"agent {m['cpu_agent']:.2f} s, its probe {m['cpu_probe']:.2f} s; {x['stints']} stints; p99 ms of the "
              f"requests sent while no worker was lent: alone {x['p99_lent_alone'][1] or 0:.1f}, lending "
              f"{x['p99_lent'][1] or 0:.1f} (host load {x['load']})")
        b.csv("harvest", f"round {i} alone p99 ms", "", "", 0, f"{x['alone']['p99_ms'] / 1000:.4f}", x["load"])
        b.csv("harvest", f"round {i} lending p99 ms", "", common.fmt_ratio(x["lend"]["p99_ms"], x["alone"]["p99_ms"]),
              0, f"{x['lend']['p99_ms'] / 1000:.4f}", x["load"])
        b.csv("harvest", f"round {i} harvested samples/s", f"{x['harvested']:.1f}",
              common.fmt_ratio(x["harvested"], full_sps), 0, seconds, x["load"])
        if x["alone"]["failed"] or x["lend"]["failed"]:
            b.failed = True
    print(f"the worker lent full time (CPU 1, {' '.join(WORKER_CLASS)}, no server): {full_sps or 0:.1f} samples/s; one VW's compute "
          f"{vw_ms or 0:.1f} ms")
    burst_failed = sum(x["m"]["burst_failed"] for x in rows)
    print(f"bursts from quiet ({BURST_RATE} req/s): the first request to worker_left, ms: "
          + (", ".join(f"{v * 1000:.0f}" for v in lags) or "-") + " from the load generator's send, "
          + (", ".join(f"{v * 1000:.1f}" for v in server_lags) or "-") + " from its arrival at the server"
          + f" (bound: one VW's compute {vw_ms or 0:.1f} ms + the polling period {EVERY * 1000:.0f} ms); "
          f"{burst_failed} burst requests failed")
    print("goals: p99 with lending <= 1.1x alone; 0 failed; node CPU gain >= +62.1 % (EasyScale's deployment); "
          "leave within one VW's compute")
    b.csv("harvest", "full-time samples/s", f"{full_sps or 0:.1f}", "", 0, FULL_SECONDS, common.load1())
    if burst_failed:
        b.failed = True
    try:
        out = os.path.join(common.OUT, "harvest.png")
        alone, m, t0 = first
        plot(alone, m["records"], m["events"], per_vw, t0, out)
        print(f"plot (round 1): {out}")
    except ImportError:
        common.warn("harvest: no matplotlib (python3-matplotlib): no plot")


if __name__ == "__main__":
    def options(p):
        p.add_argument("--keep-warm", action="store_true", help="lend.sh --keep-warm: park the lent worker between stints")
        p.add_argument("--nice", action="store_true", help="lend.sh --worker-nice 19 instead of --worker-idle")
    common.main(run, options)
