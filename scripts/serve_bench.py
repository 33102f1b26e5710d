#!/usr/bin/python3
"""A small benchmark of `elasticps serve` (docs/serving.md): closed-loop clients, each sending one-instance predict
requests back to back over a keep-alive connection, against the same export served without batching
(--max_batch 1) and with dynamic batching. Prints a table: requests/s, latency p50 / p99 (client side), the mean
batch size the server reports. It never fails on timing.

    /usr/bin/python3 scripts/serve_bench.py --model runs/mlp/model.safetensors [--clients 16] [--seconds 10]

Not a trace-driven load generator (open-loop Poisson arrivals on a diurnal curve: issue 37's scripts/loadgen.py).
"""
import argparse
import http.client
import json
import os
import random
import select
import signal
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELASTICPS = os.path.join(os.environ.get("EPS_BIN", os.path.join(ROOT, "build", "bin")), "elasticps")


def start(model, flags):
    p = subprocess.Popen([ELASTICPS, "serve", "--model", model, "--name", "m", "--port", "0", *flags],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    ready, _, _ = select.select([p.stdout], [], [], 60)
    if not ready:
        p.kill()
        raise SystemExit("the server did not start within 60 s")
    return p, json.loads(p.stdout.readline())["port"]


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def run(model, flags, clients, seconds):
    p, port = start(model, flags)
    rng = random.Random(0)
    bodies = [json.dumps({"instances": [[[[rng.gauss(0, 1) for _ in range(28)] for _ in range(28)]]]})
              for _ in range(32)]
    latencies, errors, reasons, stop = [], [0], [], threading.Event()

    def client(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        own, i = [], k
        while not stop.is_set():
            t = time.perf_counter()
            try:
                c.request("POST", "/v1/models/m:predict", body=bodies[i % len(bodies)],
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                errors[0] += r.status != 200
            except OSError as e:  # counted: a request the server did not answer
                errors[0] += 1
                reasons.append(f"{e!r} at {time.perf_counter() - t0:.1f} s, request {i - k} of client {k}")
                c.close()
            own.append(time.perf_counter() - t)
            i += 1
        latencies.extend(own)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start_t = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)  # the measurement's length, not a wait for readiness
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start_t
    batches = metric(port, "eps_serve_batch_instances_count")
    instances = metric(port, "eps_serve_batch_instances_sum")
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    if reasons:
        print("errors:", sorted(set(reasons)))
    latencies.sort()
    pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"requests_per_s": len(latencies) / elapsed, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "mean_batch": instances / batches if batches else 0, "errors": errors[0], "requests": len(latencies)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--max_batch", type=int, default=32)
    ap.add_argument("--max_delay_ms", type=float, default=2)
    a = ap.parse_args()
    configs = [("batch 1", ["--max_batch", "1"]),
               (f"dynamic (max {a.max_batch}, {a.max_delay_ms:g} ms)",
                ["--max_batch", str(a.max_batch), "--max_delay_ms", str(a.max_delay_ms)])]
    print(f"{a.clients} closed-loop clients, one instance per request, {a.seconds:g} s each; model {a.model}")
    print(f"| {'config':<28} | requests/s | p50 ms | p99 ms | mean batch | errors |")
    print(f"|{'-' * 30}|-----------:|-------:|-------:|-----------:|-------:|")
    for name, flags in configs:
        r = run(a.model, flags, a.clients, a.seconds)
        print(f"| {name:<28} | {r['requests_per_s']:10.0f} | {r['p50_ms']:6.2f} | {r['p99_ms']:6.2f} | "
              f"{r['mean_batch']:10.1f} | {r['errors']:6d} |", flush=True)


if __name__ == "__main__":
    main()
