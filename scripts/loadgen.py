#!/usr/bin/python3
"""An open-loop load generator for `elasticps serve` (docs/serving.md): KServe V1 predict requests sent at the
times of a Poisson process whose rate follows a curve, each recorded with its latency and status.

    /usr/bin/python3 scripts/loadgen.py --url http://HOST:PORT --model NAME [--curve diurnal] [--peak 200]
        [--peak-to-trough 4] [--period 60] [--seconds 60] [--out requests.jsonl] [--summary summary.json]
    /usr/bin/python3 scripts/loadgen.py --url ... --model NAME --curve constant --peak 100 --seconds 2

The curves (requests/s at t seconds after the start):
- diurnal: a day compressed into --period seconds, trough at the start and end, peak in the middle:
      rate(t) = trough + (peak - trough) * (1 - cos(2 pi (t / period + phase))) / 2,  trough = peak / ratio
  A raised cosine is the first-order shape of the daily cycle that production request traces show: the Azure
  Functions trace of 2019 (per-minute invocation counts of every function over 14 days; Shahrad et al., "Serverless
  in the Wild", USENIX ATC 2020, github.com/Azure/AzurePublicDataset) shows a diurnal and a weekly cycle in its
  aggregate load. The trace is not reproduced here: its peak-to-trough ratio and the length of a day are flags
  (--peak-to-trough, default 4, and --period), and the weekly cycle and the bursts within minutes are left out.
- constant: --peak requests/s throughout (a burst, for tests).

Open loop: a request is sent at its time whether or not earlier ones were answered (--connections threads, each
with a keep-alive connection, take the requests in time order; a request waiting for a free thread is late, and its
latency counts from its scheduled time, so that a slow server cannot slow the load down: no coordinated omission).
Each request's record (one JSON object per line in --out, or a CSV when --out ends with .csv): `t` its scheduled
time (seconds since the epoch, as events.jsonl's `t`), `sent` when it was sent, `latency_s` from `t` to the end of
its answer, `status` (the HTTP status, 0 when no answer came: a refused or reset connection, a timeout) and `error`.
The summary (one JSON line on stdout, and --summary): requests, ok (status 200), failed, p50_ms, p99_ms, max_ms
(latencies of the requests answered 200), by_status, seconds, mean_rate. Exits 0 even when requests failed (the
summary says so); 2 on bad arguments. Standard library plus numpy (Debian's /usr/bin/python3).
"""
import argparse
import csv
import http.client
import json
import math
import queue
import sys
import threading
import time
import urllib.parse

import numpy as np


def rate_at(curve, t, peak, ratio, period, phase):
    """Requests/s of `curve` at t seconds after the start."""
    if curve == "constant":
        return peak
    trough = peak / ratio
    return trough + (peak - trough) * (1 - math.cos(2 * math.pi * (t / period + phase))) / 2


def arrivals(curve, seconds, peak, ratio, period, phase, seed):
    """The times (seconds after the start, increasing) of a Poisson process of rate rate_at(t) over [0, seconds):
    a homogeneous process of rate `peak` thinned (Lewis and Shedler), so that the arrivals are the same for a seed
    whatever the host's speed."""
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    while True:
        t += rng.exponential(1 / peak)
        if t >= seconds:
            return out
        if rng.random() * peak < rate_at(curve, t, peak, ratio, period, phase):
            out.append(t)


def make_bodies(shape, instances, seed, count=32):
    """`count` request bodies of `instances` random instances of `shape` each (floats written with %.6g)."""
    rng = np.random.default_rng(seed + 1)
    bodies = []
    for _ in range(count):
        x = rng.standard_normal((instances, *shape)).astype(np.float32)
        bodies.append(json.dumps({"instances": np.round(x, 5).tolist()}).encode())
    return bodies


class Sender:
    """`connections` threads sending the requests put in `todo` (index, scheduled wall time) to the server; each
    record lands in `records[index]`."""

    def __init__(self, host, port, path, bodies, connections, timeout, records):
        self.host, self.port, self.path, self.bodies, self.timeout = host, port, path, bodies, timeout
        self.records = records
        self.todo = queue.Queue()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(connections)]
        for th in self.threads:
            th.start()

    def loop(self):
        conn = None
        while True:
            item = self.todo.get()
            if item is None:
                if conn is not None:
                    conn.close()
                return
            i, t = item
            sent = time.time()
            status, error = 0, ""
            for attempt in range(2):  # a keep-alive connection the server closed meanwhile: once more, fresh
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                    conn.request("POST", self.path, body=self.bodies[i % len(self.bodies)],
                                 headers={"Content-Type": "application/json"})
                    r = conn.getresponse()
                    body = r.read()
                    status = r.status
                    if status != 200:
                        error = body[:200].decode(errors="replace")
                    break
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                    conn.close()
                    conn = None
                    error = repr(e)
                    if attempt == 1 or time.time() - sent > 1:
                        break
                except OSError as e:  # refused, timed out: no answer
                    if conn is not None:
                        conn.close()
                    conn = None
                    error = repr(e)
                    break
            done = time.time()
            self.records[i] = {"t": round(t, 6), "sent": round(sent, 6), "latency_s": round(done - t, 6),
                               "status": status, "error": error}

    def finish(self):
        for _ in self.threads:
            self.todo.put(None)
        for th in self.threads:
            th.join()


def summarize(records, seconds):
    ok = np.array([r["latency_s"] for r in records if r["status"] == 200])
    by_status = {}
    for r in records:
        by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1

    def pct(q):
        return round(float(np.percentile(ok, q)) * 1000, 3) if len(ok) else None
    return {"requests": len(records), "ok": int(len(ok)), "failed": len(records) - int(len(ok)),
            "p50_ms": pct(50), "p99_ms": pct(99), "max_ms": round(float(ok.max()) * 1000, 3) if len(ok) else None,
            "by_status": by_status, "seconds": seconds, "mean_rate": round(len(records) / seconds, 3)}


def write_records(path, records):
    if path.endswith(".csv"):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["t", "sent", "latency_s", "status", "error"])
            w.writeheader()
            w.writerows(records)
    else:
        with open(path, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the server, http://HOST:PORT")
    ap.add_argument("--model", required=True, help="the model's name (/v1/models/NAME:predict)")
    ap.add_argument("--curve", choices=["diurnal", "constant"], default="diurnal")
    ap.add_argument("--peak", type=float, default=200, help="the peak rate, requests/s (constant: the rate)")
    ap.add_argument("--peak-to-trough", type=float, default=4, help="diurnal: peak rate / trough rate (>= 1)")
    ap.add_argument("--period", type=float, default=60, help="diurnal: one day's length in seconds")
    ap.add_argument("--phase", type=float, default=0, help="diurnal: the start's place in the day (0: the trough, "
                    "0.5: the peak)")
    ap.add_argument("--seconds", type=float, default=60, help="how long requests are sent")
    ap.add_argument("--seed", type=int, default=1, help="the arrivals' and bodies' seed")
    ap.add_argument("--input-shape", default="28,28", help="one instance's shape (default the image models')")
    ap.add_argument("--instances", type=int, default=1, help="instances per request")
    ap.add_argument("--connections", type=int, default=32, help="sending threads, one keep-alive connection each")
    ap.add_argument("--timeout", type=float, default=30, help="seconds a request may take")
    ap.add_argument("--start-at", type=float, default=0, help="start at this time (seconds since the epoch)")
    ap.add_argument("--out", help="the requests' records: JSON lines, or CSV when the name ends with .csv")
    ap.add_argument("--summary", help="also write the summary JSON there")
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    if u.scheme != "http" or not u.hostname or not u.port:
        ap.error("--url must be http://HOST:PORT")
    if a.peak <= 0 or a.peak_to_trough < 1 or a.period <= 0 or a.seconds <= 0 or a.instances < 1 or \
            a.connections < 1:
        ap.error("--peak, --period, --seconds > 0; --peak-to-trough >= 1; --instances, --connections >= 1")
    try:
        shape = [int(d) for d in a.input_shape.split(",")]
    except ValueError:
        ap.error("--input-shape must be D,D,... (whole numbers)")

    times = arrivals(a.curve, a.seconds, a.peak, a.peak_to_trough, a.period, a.phase, a.seed)
    records = [None] * len(times)
    sender = Sender(u.hostname, u.port, f"/v1/models/{a.model}:predict", make_bodies(shape, a.instances, a.seed),
                    a.connections, a.timeout, records)
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    wall0, mono0 = time.time(), time.monotonic()
    for i, at in enumerate(times):
        delay = mono0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sender.todo.put((i, wall0 + at))
    sender.finish()
    summary = summarize(records, a.seconds)
    if a.out:
        write_records(a.out, records)
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
