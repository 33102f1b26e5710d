#!/usr/bin/env python3
"""The probe of `launcher/lend.sh --serve-metrics`: the load of an `elasticps serve` (docs/serving.md), read from its
Prometheus /metrics over one keep-alive connection. lend.sh runs it as a co-process: for each line it reads on
stdin, it scrapes the server once and answers one line on stdout,

    STATE IN_FLIGHT ARRIVED WINDOW_MS

A line `wait MS [PID [SIGNAL]]` (lend.sh's, while a worker is lent) first waits up to MS milliseconds for --busy-in-flight requests
to be inside the server, on the server's own wake-up (GET /v1/load?in_flight=N&wait_ms=MS, which answers the moment
they are), so that the node is given back when requests come rather than at the next poll; a server without that
endpoint is waited for by sleeping MS. With --busy-rate 0 (any request makes the node busy) the wait also names the
requests the server had counted at the last wait of the same lending (arrived_above=A): a request that came and
went between two waits wakes the next one at once instead of going unseen until a later request. A wait the server
ends busy is answered from its wake-up without a scrape (WINDOW_MS 0): the node is given back at once. With PID (the
lent worker's), the probe sends it SIGTERM (or the signal numbered SIGNAL: SIGUSR1 parks a worker, lend.sh
--keep-warm) itself the moment the wake-up says busy, before it answers, and the line ends with a fifth word,
`signalled` (lend.sh then sends none: a worker's second signal kills it); a hop through bash cost the node about
10 ms of its worker's compute. With --give-back-file F (lend.sh's, which the server reads too: its --give_back_file)
the probe first claims F by renaming it to F.taken; when F is gone the server has claimed it and signalled the worker
itself as the first request arrived, and the probe sends nothing but still answers `signalled`.

STATE `busy` when eps_serve_in_flight >= --busy-in-flight, or when more than --busy-rate predict requests/s arrived
over the last --rate-window seconds (ARRIVED in WINDOW_MS, from the scrapes of that window: requests answered, by any
status, plus those inside), or when the server did not answer within --timeout (IN_FLIGHT and ARRIVED are then -1);
`idle` when under the in-flight bound and at most --idle-rate requests/s arrived; `neither` in between, and at the
first scrape (no rate yet) when not busy. Standard library only, any python3 (it runs on the serving node). A scrape
costs well under a millisecond of CPU; lend.sh in bash reading /metrics itself cost the node a fifth of a core at
5 polls a second (bash reads a socket one byte at a time).
"""
import argparse
import collections
import http.client
import json
import os
import signal
import sys
import time
import urllib.parse


def parse(text):
    """(in flight, arrived so far) from the metrics' text; None without eps_serve_in_flight."""
    in_flight, answered = None, 0.0
    for line in text.splitlines():
        if line.startswith("eps_serve_in_flight "):
            in_flight = float(line.split()[-1])
        elif line.startswith("eps_serve_requests_total{") or line.startswith("eps_serve_requests_total "):
            answered += float(line.split()[-1])
    if in_flight is None:
        return None
    return int(in_flight), int(answered + in_flight)


class Probe:
    def __init__(self, url, timeout, busy_in_flight, busy_rate, idle_rate, window_s):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path or "/metrics"
        self.timeout, self.window = timeout, window_s
        self.busy_in_flight, self.busy_rate, self.idle_rate = busy_in_flight, busy_rate, idle_rate
        self.conn = None
        self.samples = collections.deque()  # (monotonic seconds, arrived)
        self.arrived = None  # the server's count of requests at the last /v1/load answer

    def scrape(self):
        for attempt in range(2):  # a keep-alive connection the server closed meanwhile: once more, fresh
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.request("GET", self.path)
                r = self.conn.getresponse()
                body = r.read()
                return parse(body.decode(errors="replace")) if r.status == 200 else None
            except (OSError, http.client.HTTPException, ValueError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        return None

    def wait_busy(self, ms):
        """Returns once --busy-in-flight requests are inside the server (or, with --busy-rate 0, one more has
        arrived), or after `ms` milliseconds: the answer line when the server's wake-up says busy (no scrape: the
        node is given back at once), else None."""
        deadline = time.monotonic() + ms / 1000
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout + ms / 1000)
            try:
                query = f"in_flight={self.busy_in_flight}"
                if self.busy_rate == 0 and self.arrived is not None:
                    query += f"&arrived_above={self.arrived}"
                conn.request("GET", f"/v1/load?{query}&wait_ms={int(ms)}")
                r = conn.getresponse()
                body = r.read()
                if r.status == 200:
                    load = json.loads(body)
                    before, self.arrived = self.arrived, load.get("arrived")
                    in_flight = load.get("in_flight", 0)
                    came = self.busy_rate == 0 and None not in (before, self.arrived) and self.arrived > before
                    if in_flight >= self.busy_in_flight or came:
                        return f"busy {in_flight} {self.arrived - before if came else 0} 0"
                    return None
            finally:
                conn.close()
        except (OSError, http.client.HTTPException, ValueError):
            pass
        self.arrived = None
        time.sleep(max(0.0, deadline - time.monotonic()))  # no wake-up from this server: the period
        return None

    def answer(self):
        got = self.scrape()
        now = time.monotonic()
        if got is None:
            self.samples.clear()
            return "busy -1 -1 0"
        in_flight, arrived = got
        if self.samples and arrived < self.samples[-1][1]:  # a restarted server: the window starts again
            self.samples.clear()
        self.samples.append((now, arrived))
        while len(self.samples) > 1 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        t0, n0 = self.samples[0]
        dt, count = now - t0, arrived - n0
        if in_flight >= self.busy_in_flight or (dt > 0 and count > self.busy_rate * dt):
            state = "busy"
        elif dt > 0 and count <= self.idle_rate * dt:
            state = "idle"
        else:
            state = "neither"
        return f"{state} {in_flight} {count} {int(dt * 1000)}"


def claim(give_back_file):
    """Whether the probe may signal the lent worker: no give-back file, or the probe claimed it (renamed to
    FILE.taken); False when the server claimed it first (and signalled the worker)."""
    if not give_back_file:
        return True
    try:
        os.rename(give_back_file, give_back_file + ".taken")
        return True
    except FileNotFoundError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="http://HOST:PORT/metrics")
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--busy-in-flight", type=int, default=1)
    ap.add_argument("--busy-rate", type=float, default=0)
    ap.add_argument("--idle-rate", type=float, default=0)
    ap.add_argument("--rate-window", type=float, default=1)
    ap.add_argument("--give-back-file", default="")
    a = ap.parse_args()
    probe = Probe(a.url, a.timeout, a.busy_in_flight, a.busy_rate, a.idle_rate, a.rate_window)
    for line in sys.stdin:
        words = line.split()
        woke = None
        if len(words) in (2, 3, 4) and words[0] == "wait" and all(w.isdigit() for w in words[1:]):
            woke = probe.wait_busy(min(int(words[1]), 10000))
            if woke and len(words) >= 3:
                sig = int(words[3]) if len(words) == 4 else signal.SIGTERM
                try:
                    if claim(a.give_back_file):
                        os.kill(int(words[2]), sig)  # the node back first; the line after
                    woke += " signalled"
                except OSError:  # gone already: lend.sh reaps it
                    pass
        else:
            probe.arrived = None  # no worker lent: the next lending's first wait starts from what is there then
        print(woke or probe.answer(), flush=True)


if __name__ == "__main__":
    try:
        main()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
