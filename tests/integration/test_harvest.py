"""The harvest loop (docs/serving.md, lending a serving node by its load): a serving host (a network namespace of
its own) runs `elasticps serve` and `launcher/lend.sh --serve-metrics`, which reads the server's /metrics every
0.2 s; the job (coordinator, shard, its own worker) runs on another host. Quiet, the agent lends the serving host's
worker to the job; a burst of predict requests (scripts/loadgen.py, from the job's host) makes it leave
(`worker_left`) within one VW's compute plus the polling period, from the burst's first request; quiet again, a new
worker attaches after the hysteresis (no attach while requests come) and is given VWs; the job ends on the
undisturbed run's digest and every request was answered 200; with `lend.sh --keep-warm` the same, the burst parking
the worker (SIGUSR1, sent by the probe) and the quiet period making the same process join again. Holds (`elasticps
hold`) keep the job from ending before the test is done with it. Needs root (network namespaces).
"""
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import unittest

from harness import BIN, ENV, MLP, ROOT, RunDirTest, logs, poll_until, read_events, read_report, read_result, \
    read_text, requires, wait_for_event, wait_for_file
import netns

LEND = os.path.join(ROOT, "launcher", "lend.sh")
LOADGEN = os.path.join(ROOT, "scripts", "loadgen.py")
PROBE = os.path.join(ROOT, "launcher", "serve_probe.py")
PY = "/usr/bin/python3"  # Debian's: numpy, for loadgen.py
JOB = ["--steps=100", "--test_limit=64"]
EVERY = 0.2  # the agent's polling period, seconds
IDLE_FOR = 3  # idle polls before a worker attaches
SLOWDOWN = "15"  # every worker idles 14 x each VW's compute: a worker told to leave is mid-VW
LENT_STEPS = 40  # steps the job runs with the first lent worker (then held again): the burst comes during them
BURST = ["--curve", "constant", "--peak", "100", "--seconds", "1.5"]
SLACK = 1.5  # seconds allowed beyond a VW's compute plus the polling period: processes scheduled on a loaded host
WHY_NOT = netns.unavailable()


@requires(not WHY_NOT, f"hosts in network namespaces: {WHY_NOT}")
class Harvest(RunDirTest):
    def test_a_burst_reclaims_the_serving_host_and_a_quiet_period_lends_it_again(self):
        self.harvest(keep_warm=False)

    def test_kept_warm_the_burst_parks_the_worker_and_the_quiet_period_makes_it_join_again(self):
        """lend.sh --keep-warm: the probe's signal is SIGUSR1 (the worker leaves and stays, parked), and the worker
        that joins after the quiet period is the same process."""
        self.harvest(keep_warm=True)

    def harvest(self, keep_warm):
        _, _, ref = self.run_local("reference", extra=JOB)
        model = os.path.join(self.tmp, "reference", "model.safetensors")
        d = self.run_dir("harvest")
        os.makedirs(f"{d}/logs")
        token = f"{d}/token"
        with open(token, "w") as f:
            f.write("harvest-test-token\n")
        with netns.Network(2, names=["jobhost", "servehost"]) as net:
            job_host, serve_host = 0, 1
            on_job_host = net.command(job_host, [], pid_namespace=False)
            coord = net.popen(job_host, [f"{BIN}/coordinator", f"--flagfile={MLP}", *JOB, "--shards=1", "--workers=1",
                                         f"--run_dir={d}", f"--addr_file={d}/coordinator.addr", f"--token_file={token}",
                                         f"--bind=tcp://{net.address(job_host)}:0"], f"{d}/logs/coordinator.log",
                              env=ENV)
            addr = wait_for_file(f"{d}/coordinator.addr", proc=coord)
            net.popen(job_host, [f"{BIN}/shard", f"--coordinator={addr}", "--shard_id=0", f"--token_file={token}",
                                 f"--bind=tcp://{net.address(job_host)}:0", f"--addr_file={d}/shard0.addr"],
                      f"{d}/logs/shard0.log", env=ENV)
            own = net.popen(job_host, [f"{BIN}/worker", f"--coordinator={addr}", f"--token_file={token}",
                                       f"--slowdown={SLOWDOWN}", f"--report_file={d}/logs/worker0.json"],
                            f"{d}/logs/worker0.log", env=ENV)

            def event(kind, predicate=None, timeout=60):
                return wait_for_event(d, kind, predicate, timeout, proc=coord.popen)

            own_joined = event("worker_joined")
            event("step_completed", timeout=120)
            self.control(d, "hold", prefix=on_job_host)
            held = event("paused", lambda e: e["cause"] == "hold")["step"]

            # The serving host: the server, then the agent reading its metrics. Quiet: a worker attaches.
            # One host (one pid namespace) for both: the server itself signals the lent worker named by the
            # give-back file at the burst's first request.
            give_back = f"{d}/give-back"
            serve = [f"{BIN}/elasticps", "serve", "--model", model, "--host", net.address(serve_host), "--port", "0",
                     "--port_file", f"{d}/serve.port", "--give_back_file", give_back,
                     "--events_file", f"{d}/serve-events.jsonl"]
            agent = [LEND, "--coordinator", addr, "--token-file", token,
                     "--serve-metrics", f"http://{net.address(serve_host)}:@PORT@/metrics",
                     "--every", str(EVERY), "--idle-for", str(IDLE_FOR),
                     # Kept warm at niceness 0; otherwise in the idle scheduling class.
                     *(["--keep-warm"] if keep_warm else ["--worker-idle"]),
                     "--give-back-file", give_back, "--", "--slowdown", SLOWDOWN,
                     "--log", f"{d}/logs/lent.log", "--report-file", f"{d}/logs/lent.json"]
            host = net.popen(serve_host, ["bash", "-c", SERVE_THEN_LEND, "bash", f"{d}/logs/serve.log",
                                          f"{d}/serve.port", str(len(serve)), *serve, *agent],
                             f"{d}/logs/agent.log", env=ENV)
            port = wait_for_file(f"{d}/serve.port", timeout=60, proc=host)
            url = f"http://{net.address(serve_host)}:{port}"

            def lent_joined(after):
                """The first worker_joined after time `after` of a process other than the job's own worker."""
                return next((e for e in read_events(d, "worker_joined")
                             if e["pid"] != own_joined["pid"] and e["t"] > after), None)

            joined = poll_until(lambda: lent_joined(0), 60,
                                f"no lent worker joined:\n{read_text(f'{d}/logs/agent.log')}")
            self.assertTrue(joined["host"].startswith("servehost:"), joined)
            w = joined["worker"]
            event("worker_ready", lambda e: e["worker"] == w, timeout=60)
            self.control(d, "hold", f"--from-step={held + LENT_STEPS}", prefix=on_job_host)
            event("assignment", lambda e: any(r["worker"] == w for r in e["ranges"]), timeout=30)

            # A burst from the job's host: the lent worker leaves within a VW's compute plus the polling period.
            burst = net.popen(job_host, [PY, LOADGEN, "--url", url, "--model", "fashion_mnist_mlp", *BURST,
                                         "--out", f"{d}/burst.jsonl", "--summary", f"{d}/burst.json"],
                              f"{d}/logs/burst.log", env=ENV)
            left = event("worker_left", lambda e: e["worker"] == w, timeout=30)
            self.assertEqual(burst.wait(timeout=60), 0, read_text(f"{d}/logs/burst.log"))
            with open(f"{d}/burst.jsonl") as f:
                requests = [json.loads(line) for line in f]
            with open(f"{d}/burst.json") as f:
                summary = json.load(f)
            self.assertEqual(summary["failed"], 0, summary)
            self.assertEqual(summary["requests"], len(requests))
            first = min(r["sent"] for r in requests)
            last = max(r["sent"] for r in requests)
            report = read_report(f"{d}/logs/lent.json")
            self.assertEqual(report["scheduling"], "other" if keep_warm else "idle", report)  # --worker-idle
            vws = [r["hi"] - r["lo"] for e in read_events(d, "assignment") for r in e["ranges"] if r["worker"] == w]
            per_vw = report["ms_per_train_plan"]["compute"] / vws[-1] / 1000
            lag = left["t"] - first
            print(f"worker_left {lag:.3f} s after the burst's first request; one VW's compute {per_vw:.3f} s, the "
                  f"polling period {EVERY} s: bound {per_vw + EVERY:.3f} s (+ {SLACK} s asserted for a loaded host)")
            self.assertEqual(left["reason"], "SIGUSR1" if keep_warm else "SIGTERM", left)
            self.assertGreater(lag, 0, "the worker left before the burst")
            self.assertLess(lag, per_vw + EVERY + SLACK)
            self.assertEqual(report["outcome"], "left", report)
            # The server gave the node back itself (one claim of the file: the worker got one signal).
            scrape = net.popen(job_host, [PY, "-c", SCRAPE, f"{url}/metrics"], f"{d}/logs/scrape.log", env=ENV)
            self.assertEqual(scrape.wait(timeout=30), 0, read_text(f"{d}/logs/scrape.log"))
            metrics = dict(line.rsplit(" ", 1) for line in read_text(f"{d}/logs/scrape.log").splitlines()
                           if line.startswith("eps_serve_give_backs_total"))
            self.assertEqual(float(metrics.get("eps_serve_give_backs_total", 0)), 1, metrics)
            # Its event names the lent worker, stamped at the burst's first request's arrival (docs/serving.md):
            # what the leave is measured from.
            text = read_text(f"{d}/serve-events.jsonl")
            self.assertTrue(text, "the server wrote no event")
            gave = [json.loads(line) for line in text.splitlines() if line.strip()]
            self.assertEqual([(e["event"], e["pid"]) for e in gave], [("gave_back", joined["pid"])], gave)
            self.assertLessEqual(first, gave[0]["t"])
            self.assertLessEqual(gave[0]["t"], left["t"])
            print(f"worker_left {left['t'] - gave[0]['t']:.3f} s after the server's first request")

            # Quiet again: a new worker attaches, after the last request and the hysteresis, and is given VWs.
            again = poll_until(lambda: lent_joined(left["t"]), 60, "no second lent worker joined")
            print(f"a new worker joined {again['t'] - last:.3f} s after the burst's last request")
            if keep_warm:
                self.assertEqual(again["pid"], joined["pid"], "not the parked process")
            else:
                self.assertNotEqual(again["pid"], joined["pid"])
            self.assertGreater(again["t"] - last, (IDLE_FOR - 1) * EVERY)
            event("worker_ready", lambda e: e["worker"] == again["worker"], timeout=60)
            self.control(d, "release", prefix=on_job_host)
            event("assignment", lambda e: any(r["worker"] == again["worker"] for r in e["ranges"]), timeout=60)

            self.assertEqual(coord.wait(timeout=180), 0, logs(d))
            own.wait(timeout=30)
            done = read_report(f"{d}/logs/lent.json")
            self.assertEqual(done["outcome"], "done", done)
        result = read_result(d)
        self.assertEqual(result["steps"], 100)
        self.assertEqual(result["params_sha256"], ref["params_sha256"], logs(d))
        print(f"the job's digest {result['params_sha256'][:16]}... equals the undisturbed run's; {len(requests)} "
              f"requests, all answered 200 (p99 {summary['p99_ms']} ms)")


# bash -c SERVE_THEN_LEND bash SERVE_LOG PORT_FILE N SERVE... LEND...: the server (its first N words) in the
# background, then, once it has written its port (a bounded wait), lend.sh in this process, @PORT@ in its words
# replaced by the port: one host, one pid namespace.
SERVE_THEN_LEND = r'''
log=$1 port_file=$2 n=$3
shift 3
"${@:1:n}" > "$log" 2>&1 &
shift "$n"
for _ in $(seq 600); do [ -s "$port_file" ] && break; sleep 0.1; done
exec "${@//@PORT@/$(cat "$port_file")}"
'''
SCRAPE = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())"


class FakeMetrics:
    """An HTTP server on loopback port 0 answering GET /metrics with eps_serve's two load metrics as set, or 500, and
    GET /v1/load at once with the load as set (the wake-up's answer; the real wait is inference_server_test's)."""

    def __init__(self):
        self.in_flight, self.answered, self.status = 0, 0, 200
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path.startswith("/v1/load"):
                    body = json.dumps({"in_flight": fake.in_flight, "arrived": fake.answered + fake.in_flight})
                    body = body.encode()
                else:
                    body = (f"# TYPE eps_serve_in_flight gauge\neps_serve_in_flight {fake.in_flight}\n"
                            f'eps_serve_requests_total{{code="200"}} {fake.answered}\n'
                            f'eps_serve_requests_total{{code="503"}} 0\n').encode()
                self.send_response(fake.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Probe(RunDirTest):
    """launcher/serve_probe.py's bands on a fake server: no rate at the first scrape, idle, busy by rate and by
    requests in flight, neither between the rates, busy without an answer."""

    def ask(self, probe, line=""):
        probe.stdin.write(line + "\n")
        probe.stdin.flush()
        state, in_flight, arrived, ms, *sent = probe.stdout.readline().split()
        return (state, int(in_flight), int(arrived), int(ms), *sent)

    def test_the_bands(self):
        fake = FakeMetrics()
        self.addCleanup(fake.close)
        probe = subprocess.Popen([PY, PROBE, "--url", fake.url, "--timeout", "5", "--busy-in-flight", "4",
                                  "--busy-rate", "100", "--idle-rate", "20", "--rate-window", "10"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(probe)
        self.assertEqual(self.ask(probe)[0], "neither")  # no rate yet
        self.assertEqual(self.ask(probe)[:3], ("idle", 0, 0))
        time.sleep(1)  # the rate's interval, not a wait for readiness
        fake.answered = 50  # 50 requests in 1-2.5 s: between the bands
        self.assertEqual(self.ask(probe)[:3], ("neither", 0, 50))
        fake.in_flight = 4
        self.assertEqual(self.ask(probe)[:3], ("busy", 4, 54))  # in flight, counted as arrived
        fake.in_flight, fake.answered = 0, 5000
        self.assertEqual(self.ask(probe)[:3], ("busy", 0, 5000))
        fake.status = 500
        self.assertEqual(self.ask(probe), ("busy", -1, -1, 0))
        fake.status, fake.answered = 200, 10  # a restarted server: the window starts again
        self.assertEqual(self.ask(probe)[0], "neither")
        probe.stdin.close()
        self.assertEqual(probe.wait(timeout=10), 0)
        probe.stdout.close()

    def test_a_request_between_two_waits_wakes_the_next_one_busy(self):
        """With --busy-rate 0 the waits of one lending carry the server's count of requests: one that came and went
        between two waits makes the next answer busy from the wake-up itself (no scrape: WINDOW_MS 0); a line
        without a wait (no worker lent) forgets the count, so the next lending does not start busy."""
        fake = FakeMetrics()
        self.addCleanup(fake.close)
        probe = subprocess.Popen([PY, PROBE, "--url", fake.url, "--timeout", "5"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(probe)
        self.ask(probe)
        self.assertEqual(self.ask(probe, "wait 50")[:3], ("idle", 0, 0))  # the lending's first wait: its count
        fake.answered = 1  # one request, already answered
        self.assertEqual(self.ask(probe, "wait 5000"), ("busy", 0, 1, 0))
        fake.answered = 3
        self.ask(probe)  # no worker lent
        self.assertNotEqual(self.ask(probe, "wait 50")[3], 0, "a new lending woke on an old count")
        probe.stdin.close()
        self.assertEqual(probe.wait(timeout=10), 0)
        probe.stdout.close()


    def test_a_wait_naming_the_worker_signals_it_the_moment_the_server_is_busy(self):
        """`wait MS PID`: an idle wait leaves the process alone; a busy one sends it SIGTERM before the answer,
        which says so (lend.sh then sends no second signal); `wait MS PID SIGNAL` sends that signal."""
        fake = FakeMetrics()
        self.addCleanup(fake.close)
        worker = subprocess.Popen(["sleep", "60"])
        self.procs.append(worker)
        probe = subprocess.Popen([PY, PROBE, "--url", fake.url, "--timeout", "5"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(probe)
        self.ask(probe)
        self.assertEqual(len(self.ask(probe, f"wait 50 {worker.pid}")), 4)  # idle: no signal
        self.assertIsNone(worker.poll())
        fake.in_flight = 1
        self.assertEqual(self.ask(probe, f"wait 5000 {worker.pid}"), ("busy", 1, 1, 0, "signalled"))
        self.assertEqual(worker.wait(timeout=10), -signal.SIGTERM)
        # `wait MS PID SIGNAL` (lend.sh --keep-warm): that signal instead.
        parked = subprocess.Popen(["sleep", "60"])
        self.procs.append(parked)
        self.assertEqual(self.ask(probe, f"wait 5000 {parked.pid} {int(signal.SIGUSR1)}")[-1], "signalled")
        self.assertEqual(parked.wait(timeout=10), -signal.SIGUSR1)
        probe.stdin.close()
        self.assertEqual(probe.wait(timeout=10), 0)
        probe.stdout.close()

    def test_with_a_give_back_file_the_probe_signals_only_when_it_claims_the_file(self):
        """--give-back-file F: a busy wait claims F (renamed to F.taken) and signals the worker; when F is gone (the
        server claimed it and signalled the worker itself) it sends nothing and still answers `signalled`."""
        fake = FakeMetrics()
        self.addCleanup(fake.close)
        fake.in_flight = 1
        give_back = os.path.join(self.tmp, "give-back")
        probe = subprocess.Popen([PY, PROBE, "--url", fake.url, "--timeout", "5", "--give-back-file", give_back],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(probe)
        self.ask(probe)
        lent = subprocess.Popen(["sleep", "60"])
        self.procs.append(lent)
        with open(give_back, "w") as f:
            f.write(f"{lent.pid} {int(signal.SIGTERM)}\n")
        self.assertEqual(self.ask(probe, f"wait 5000 {lent.pid}")[-1], "signalled")
        self.assertEqual(lent.wait(timeout=10), -signal.SIGTERM)
        self.assertFalse(os.path.exists(give_back))
        self.assertTrue(os.path.exists(give_back + ".taken"))
        # F gone: the server signalled the worker; the probe must not send a second signal.
        other = subprocess.Popen(["sleep", "60"])
        self.procs.append(other)
        self.assertEqual(self.ask(probe, f"wait 5000 {other.pid}")[-1], "signalled")
        with self.assertRaises(subprocess.TimeoutExpired):  # not signalled: it does not end
            other.wait(timeout=0.5)
        probe.stdin.close()
        self.assertEqual(probe.wait(timeout=10), 0)
        probe.stdout.close()


class Arguments(RunDirTest):
    def test_serve_metrics_refuses_bad_arguments(self):
        d = self.run_dir("args")
        with open(f"{d}/token", "w") as f:
            f.write("t\n")
        base = ["--coordinator", "tcp://127.0.0.1:1", "--token-file", f"{d}/token"]
        for args, flag in [(["--serve-metrics", "https://h:1/metrics"], "--serve-metrics"),
                           (["--serve-metrics", "http://h:1/metrics", "--probe", "true"], "--serve-metrics"),
                           (["--serve-metrics", "http://h:1/metrics", "--idle-rate", "5"], "--idle-rate"),
                           (["--serve-metrics", "http://h:1/metrics", "--rate-window", "0"], "--rate-window"),
                           (["--serve-metrics", "http://h:1/metrics", "--busy-in-flight", "0"], "--busy-in-flight"),
                           (["--serve-metrics", "http://h:1/metrics", "--worker-nice", "20"], "--worker-nice"),
                           (["--probe", "true", "--give-back-file", f"{d}/give-back"], "--give-back-file"),
                           (["--serve-metrics", "http://h:1/metrics", "--give-back-file", f"{d}/no/such/give-back"],
                            "--give-back-file"),
                           (["--serve-metrics", "http://h:1/metrics", "--give-back-file", f"{d}/give-back",
                             "--busy-rate", "5"], "--give-back-file")]:
            p = subprocess.run([LEND, *base, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=10)
            self.assertEqual(p.returncode, 2, (args, p.stdout))
            self.assertIn(flag, p.stdout, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
