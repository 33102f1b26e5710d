#!/usr/bin/python3
"""network: the CNN job across hosts, under link rates and latencies.

Step time and samples/s of the CNN job (examples/fashion_mnist_cnn.flags, 1 shard, 2 workers x 4 VWs) on three hosts
in network namespaces joined by a bridge (tests/integration/netns.py: the coordinator and the shard on one host, a
worker on each of two others; every process in a pid namespace of its own, so no shared memory between hosts), against
the same job on one host (launcher/local.sh) and against PyTorch DDP (gloo, scripts/ddp_baseline.py's ranks, one on
each worker host, the rendezvous on the first) on the same hosts and links. Links: no shaping; every host's link
limited to 10 Gbit/s and to 1 Gbit/s each way (tc tbf); one-way latency 1, 5 and 20 ms between any two hosts (tc
netem, half of it on each end) where the kernel has netem. Configurations are interleaved over a few rounds; the
table has the medians. Bytes per step: what each worker host sent and received on its link (the veth counters), the
pushes and pull replies per step of the worker reports, and DDP's all-reduce by theory (2 (n - 1) / n x the model's
fp32 bytes per rank). Needs root (skipped with a message otherwise); not in CI.
"""
import os
import shutil
import subprocess
import sys
import time

import analysis
import common

sys.path.insert(0, os.path.join(common.ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(common.ROOT, "scripts"))
import netns  # noqa: E402  (tests/integration/netns.py)
import ddp_baseline  # noqa: E402  (scripts/ddp_baseline.py)

ROUNDS = 2
PS_HOST, WORKER_HOSTS = 0, (1, 2)
# The rendezvous port of DDP's rank 0, in the worker host's own network namespace, where nothing else listens.
DDP_PORT = 29500
RATES = [("10 Gbit/s", "10gbit", "5mb"), ("1 Gbit/s", "1gbit", "512kb")]  # burst: about 4 ms at the rate
LATENCIES_MS = [1, 5, 20]
V, B = 8, 16  # the job's VWs and samples per VW
CNN_PARAMS = (1 * 16 * 25 + 16) + (16 * 32 * 25 + 32) + (32 * 7 * 7 * 256 + 256) + (256 * 10 + 10)
TIMEOUT_S = 600


def link_bytes(net, i):
    """(bytes host i sent, bytes it received) on its link so far: its veth end on the bridge counts them reversed."""
    def read(what):
        with open(f"/sys/class/net/{net.link(i)}/statistics/{what}") as f:
            return int(f.read())
    return read("rx_bytes"), read("tx_bytes")


def shape(net, link):
    """Puts every host's link under `link`: None (no shaping), ("rate", rate, burst) or ("delay", one-way ms)."""
    for i in range(len(net.names)):
        net.clear(i)
        if link is None:
            continue
        if link[0] == "rate":
            net.rate(i, link[1], burst=link[2], latency="50ms")
        else:
            net.delay(i, f"{link[1] / 2:g}")


def stop(procs):
    """Waits for the processes of a run to end (bounded), killing what is left."""
    netns.stop(procs, 10)


def eps_on_hosts(b, net, name):
    """The job on the hosts: (samples/s, median step ms, [(sent, received) bytes per step of each worker host],
    (pushes, pull replies) per step and worker), or None if it failed."""
    d = common.run_dir(name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{d}/logs")
    with open(f"{d}/token", "w") as f:
        f.write(f"bench-{name}\n")
    before = [link_bytes(net, i) for i in WORKER_HOSTS]
    ps = net.address(PS_HOST)
    coord = net.popen(PS_HOST, [f"{common.BIN}/coordinator", f"--flagfile={common.CNN}", *common.job_flags(b.steps),
                                "--shards=1", "--workers=2", f"--run_dir={d}", f"--addr_file={d}/coordinator.addr",
                                f"--token_file={d}/token", f"--store={d}/store/coordinator", f"--bind=tcp://{ps}:0"],
                      f"{d}/logs/coordinator.log", env=common.ENV)
    procs = [coord]
    try:
        if not common.wait_until(lambda: os.path.exists(f"{d}/coordinator.addr") and
                                 os.path.getsize(f"{d}/coordinator.addr") > 0, 30, coord.popen):
            raise RuntimeError("the coordinator did not start")
        with open(f"{d}/coordinator.addr") as f:
            addr = f.read().strip()
        procs.append(net.popen(PS_HOST, [f"{common.BIN}/shard", f"--coordinator={addr}", "--shard_id=0",
                                         f"--token_file={d}/token", f"--bind=tcp://{ps}:0",
                                         f"--addr_file={d}/shard0.addr"], f"{d}/logs/shard0.log", env=common.ENV))
        for w, host in enumerate(WORKER_HOSTS):
            procs.append(net.popen(host, [f"{common.BIN}/worker", f"--coordinator={addr}", f"--token_file={d}/token",
                                          f"--report_file={d}/logs/worker{w}.json"], f"{d}/logs/worker{w}.log",
                                   env=common.ENV))
        rc = coord.wait(timeout=TIMEOUT_S)
        stop(procs)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        rc = f"{e}"
        for p in procs:
            p.kill()
        stop(procs)
    result = analysis.read_result(d)
    if rc != 0 or result is None:
        common.warn(f"job {name} failed ({rc}; logs: {d}/logs):\n{common.tail(d + '/logs/coordinator.log')}")
        return None
    steps = result["steps"]
    after = [link_bytes(net, i) for i in WORKER_HOSTS]
    per_step = [((a[0] - s[0]) / steps, (a[1] - s[1]) / steps) for s, a in zip(before, after)]
    msgs = []
    for w in range(len(WORKER_HOSTS)):
        r = analysis.read_report(d, w) or {}
        msgs.append((sum(r.get("pushes", {}).values()) / steps, sum(r.get("pull_replies", {}).values()) / steps))
    return analysis.samples_per_s(result), analysis.median_step_ms(d), per_step, msgs


def ddp_on_hosts(b, net, name):
    """DDP's 2 ranks on the worker hosts: (samples/s, step ms, [(sent, received) bytes per step of each worker
    host]), or None if it failed."""
    d = common.run_dir(name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    argv = ["--ranks", "2", "--steps", str(b.steps), "--mode", "accumulate"]
    a = ddp_baseline.parse_args(argv)
    script = os.path.join(common.ROOT, "scripts", "ddp_baseline.py")
    before = [link_bytes(net, i) for i in WORKER_HOSTS]
    procs = []
    for r, host in enumerate(WORKER_HOSTS):
        env = ddp_baseline.rank_env(a, net.address(WORKER_HOSTS[0]), DDP_PORT, r, base=common.ENV)
        env["GLOO_SOCKET_IFNAME"] = "eth0"  # the host's name resolves nowhere: gloo takes the interface's address
        procs.append(net.popen(host, [common.PY, script, *argv, "--rank", str(r)], f"{d}/rank{r}.log", env=env))
    codes = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            if codes[-1] != 0:
                break
    except subprocess.TimeoutExpired:
        codes.append("timeout")
    for p in procs:
        p.kill()
    stop(procs)
    with open(f"{d}/rank0.log", errors="replace") as f:
        r = analysis.find(analysis.json_lines(f.read()), program="ddp")
    if any(c != 0 for c in codes) or len(codes) < len(procs) or r is None:
        common.warn(f"ddp {name} failed (exit codes {codes}; logs: {d}):\n{common.tail(d + '/rank0.log')}"
                    f"{common.tail(d + '/rank1.log')}")
        return None
    after = [link_bytes(net, i) for i in WORKER_HOSTS]
    per_step = [((x[0] - s[0]) / b.steps, (x[1] - s[1]) / b.steps) for s, x in zip(before, after)]
    return r["samples_per_s"], r["seconds"] * 1e3 / (b.steps - min(5, b.steps - 1)), per_step


def ddp_local(b, name):
    out = b.program(name, [common.PY, os.path.join(common.ROOT, "scripts", "ddp_baseline.py"), "--ranks", "2",
                           "--steps", str(b.steps), "--mode", "accumulate"])
    r = analysis.find(out or [], program="ddp")
    return (r["samples_per_s"], r["seconds"] * 1e3 / (b.steps - min(5, b.steps - 1))) if r else None


def kb(x):
    return f"{x / 1024:.0f}"


def run(b):
    why = netns.unavailable()
    if why:
        print(f"== network: skipped: hosts in network namespaces {why}")
        return
    model_bytes = CNN_PARAMS * 4
    print(f"== network: cnn (examples/fashion_mnist_cnn.flags), V = {V} x {B} (global batch {V * B}), {b.steps} steps, "
          f"{ROUNDS} interleaved rounds, medians")
    print("   ElasticPS: 1 shard, 2 workers x 4 VWs; on hosts: coordinator + shard on one network namespace, a worker on "
          "each of two others")
    print("   DDP: gloo, 2 ranks x 4 microbatches of 16 (accumulate), a rank on each worker host; "
          "one host: scripts/ddp_baseline.py")
    print(f"   host load {common.load1()}, {os.cpu_count()} cores; every process on this machine's cores (the links are "
          "the only difference)")
    with netns.Network(3, names=["ps", "wa", "wb"]) as net:
        netem = net.has_netem()
        links = [("no shaping (0 ms)", None)] + [(f"rate {label}", ("rate", r, burst)) for label, r, burst in RATES]
        if netem:
            links += [(f"latency {ms} ms", ("delay", ms)) for ms in LATENCIES_MS]
        configs = [("one host", None, "eps"), ("one host", None, "ddp")]
        for label, link in links:
            configs += [(label, link, "eps"), (label, link, "ddp")]
        res = {}  # (label, kind) -> [outcome per round]
        for rnd in range(ROUNDS):
            order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]  # each round starts elsewhere
            for label, link, kind in order:
                name = f"network_{kind}_{label.split(' (')[0].replace(' ', '_').replace('/', '')}_{rnd}"
                load = common.load1()
                if label == "one host":
                    if kind == "eps":
                        r = b.job(name, 2, common.CNN, *common.job_flags(b.steps))
                        out = (analysis.samples_per_s(r), analysis.median_step_ms(common.run_dir(name)), None,
                               None) if r else None
                    else:
                        out = ddp_local(b, name)
                else:
                    shape(net, link)
                    out = eps_on_hosts(b, net, name) if kind == "eps" else ddp_on_hosts(b, net, name)
                    shape(net, None)
                res.setdefault((label, kind), []).append((out, load))

    def med(label, kind, idx=0):
        vals = [o[idx] for o, _ in res.get((label, kind), []) if o is not None and o[idx] is not None]
        return analysis.median(vals) if vals else None

    base = {kind: med("one host", kind) for kind in ("eps", "ddp")}
    width = 34
    print(f"{'config':<{width}s} | {'step ms':>8s} | {'samples/s':>10s} | {'vs one host':>11s} | "
          f"{'vs DDP same link':>16s} | sent/recv KB per step per worker host")
    for label in ["one host"] + [label for label, _ in links]:
        for kind in ("eps", "ddp"):
            runs = res[(label, kind)]
            config = f"{'ElasticPS' if kind == 'eps' else 'DDP'} {label}"
            load = runs[0][1]
            sps, ms = med(label, kind), med(label, kind, 1)
            if sps is None or any(o is None for o, _ in runs):
                b.failed = True
            if sps is None:
                print(f"{config:<{width}s} | {'-':>8s} | {'failed':>10s} | -")
                b.csv("network", config, load=load)
                continue
            vs_one = common.fmt_ratio(sps, base[kind])
            vs_ddp = common.fmt_ratio(sps, med(label, "ddp")) if kind == "eps" else "1.00"
            traffic = ""
            if label != "one host":
                done = [o for o, _ in runs if o is not None]
                sent = analysis.median([h[0] for o in done for h in o[2]])
                recv = analysis.median([h[1] for o in done for h in o[2]])
                traffic = f"{kb(sent)} / {kb(recv)}"
                if kind == "eps":
                    pushes = analysis.median([w[0] for o in done for w in o[3]])
                    pulls = analysis.median([w[1] for o in done for w in o[3]])
                    traffic += f" ({pushes:.1f} pushes, {pulls:.1f} pull replies)"
            ms_text = "-" if ms is None else f"{ms:.1f}"
            print(f"{config:<{width}s} | {ms_text:>8s} | {sps:10.1f} | {vs_one:>11s} | {vs_ddp:>16s} | {traffic}")
            b.csv("network", config, f"{sps:.1f}", vs_one, seconds=f"{(ms or 0) / 1000:.4f}", load=load)
    if not netem:
        for ms in LATENCIES_MS:
            print(f"{'latency ' + str(ms) + ' ms':<{width}s} | not measurable: no netem in this kernel")
    print(f"DDP by theory: 2 (n - 1) / n x {kb(model_bytes)} KB of fp32 gradients = {kb(model_bytes)} KB sent and "
          "received per rank per step (n = 2 ranks).")
    print("ratios: 'vs one host' against the same framework on one host; csv ratio_vs_baseline = 'vs one host', "
          "seconds = median step time.")


if __name__ == "__main__":
    common.main(run)
