"""Prometheus metrics: a real Prometheus scrapes a live job through its coordinator's targets file.

The job (mlp, 2 shards, every process with --metrics_port=0 through local.sh --metrics) is
scraped every 500 ms by Debian's Prometheus, which finds its targets only in
RUN_DIR/prometheus_targets.json (file_sd). The test reads Prometheus' HTTP API, never the
processes' /metrics: the steps go up, eps_workers follows an attach and a SIGKILL, the shards'
push bytes grow, the attached worker is a target that is up and the killed one stops being a
target; the example dashboard's queries answer with data; and the job still ends on the digest
of the same job run undisturbed without metrics. The example Prometheus config passes promtool.
"""
import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import (ENV, LOCAL, MLP, ROOT, RunDirTest, logs, poll_until, read_events, read_result, requires,
                     wait_for_event, wait_for_file, worker_ids_of_pid)
import prometheus
from prometheus import Prometheus, write_targets

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
CONFIG = os.path.join(ROOT, "examples", "prometheus", "prometheus.yml")
DASHBOARD = os.path.join(ROOT, "examples", "grafana", "elasticps.json")
JOB = "fashion_mnist_mlp"  # examples/fashion_mnist_mlp.flags' --job_id
STEPS = 700
EXTRA = [f"--steps={STEPS}", "--heartbeat_timeout_ms=1500", "--test_limit=-1"]
# Timing only (never bits): each worker idles 3x its compute, so the job lasts through the
# membership changes while the undisturbed reference runs at full speed.
SLOWDOWN = "4"
# What Grafana's $__rate_interval is at a 500 ms scrape interval: 4 scrapes.
RATE_INTERVAL = "2s"


def needs_prometheus(test):
    return requires(prometheus.available(), f"needs {prometheus.PROMETHEUS} and promtool "
                    "(Debian package prometheus)")(test)


def dashboard_queries(job, rate_interval=RATE_INTERVAL):
    """Every PromQL expression of the example dashboard, as (panel title, expression) with its variables filled in:
    the panels' targets and the job variable's query (label_values() is Grafana's, checked apart)."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$job", job).replace("$__rate_interval", rate_interval)
            out.append((panel["title"], expr))
    return out


@needs_prometheus
class Examples(unittest.TestCase):
    def test_a_example_config_passes_promtool(self):
        p = subprocess.run([prometheus.PROMTOOL, "check", "config", CONFIG], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("SUCCESS", p.stdout)

    def test_b_dashboard_is_grafana_json_whose_queries_prometheus_parses(self):
        with open(DASHBOARD) as f:
            dash = json.load(f)
        self.assertGreaterEqual(dash["schemaVersion"], 36)
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        self.assertEqual((variables["datasource"]["type"], variables["datasource"]["query"]),
                         ("datasource", "prometheus"))
        self.assertEqual(variables["job"]["type"], "query")
        self.assertRegex(variables["job"]["definition"], r"^label_values\(\w+, eps_job\)$")
        titles = [p["title"] for p in dash["panels"]]
        for wanted in ("Step and steps/s", "Loss", "Learning rate", "Samples/s", "Workers and membership changes",
                       "Seconds per VW, per worker", "Shard push / pull bytes rate", "Checkpoint duration p50/p99",
                       "Step duration quantiles"):
            self.assertIn(wanted, titles)
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        for p in dash["panels"]:
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p["targets"], p["title"])
            for key in ("x", "y", "w", "h"):
                self.assertIn(key, p["gridPos"], p["title"])
        queries = dashboard_queries(JOB)
        self.assertGreaterEqual(len(queries), 20)
        tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"eps-no-targets-{os.getpid()}.json")
        with Prometheus(tmp) as prom:
            for title, expr in queries:
                with self.subTest(panel=title, expr=expr):
                    prom.query(expr)  # Prometheus answers 400 bad_data to a query it cannot parse
            # The job variable's query, as Grafana sends label_values(METRIC, LABEL): a series query.
            metric = re.match(r"label_values\((\w+), eps_job\)", variables["job"]["definition"]).group(1)
            prom.api("series", **{"match[]": metric})

    def test_c_harness_prometheus_scrapes_the_targets_of_a_file_sd_file(self):
        # Prometheus scraping itself, found through a targets file written after it started.
        tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"eps-self-targets-{os.getpid()}.json")
        try:
            with Prometheus(tmp) as prom:
                self.assertTrue(os.path.isdir(prom.dir))
                folder = prom.dir
                write_targets(tmp, [(prom.url[len("http://"):], {"eps_job": "self", "eps_role": "coordinator"})])
                target = poll_until(lambda: next((t for t in prom.targets() if t["health"] == "up"), None), 30,
                                    "prometheus did not scrape itself")
                self.assertEqual(target["labels"]["eps_job"], "self")
                prom.wait_for('sum(prometheus_http_requests_total{eps_job="self"})', lambda v: v > 0, 30)
                write_targets(tmp, [])
                poll_until(lambda: True if not prom.targets() else None, 30, "the removed target stayed")
                pid = prom.proc.pid
            self.assertFalse(os.path.exists(folder), "the harness left its folder")
            self.assertFalse(os.path.exists(f"/proc/{pid}"), "the harness left prometheus running")
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


@needs_prometheus
class LiveJob(RunDirTest):
    def setUp(self):
        super().setUp()
        self.prom = None

    def tearDown(self):
        if self.prom is not None:
            self.prom.stop()
        super().tearDown()

    def value(self, expr):
        return self.prom.value(expr)

    def wait_for(self, expr, predicate, timeout, what):
        self.assertIsNone(self.job.poll(), f"the job ended ({self.job.returncode}) before: {what}\n{logs(self.dir)}")
        return self.prom.wait_for(expr, predicate, timeout, what)

    def mark(self, what):
        """Prints how far into the job `what` was reached (the job's length must cover every phase)."""
        print(f"  {time.monotonic() - self.t0:5.1f}s {what}", flush=True)

    def targets(self, role):
        return [t for t in self.prom.targets() if t["labels"].get("eps_role") == role
                and t["labels"].get("eps_job") == JOB]

    def wait_for_targets(self, role, predicate, timeout, what):
        def check():
            self.assertIsNone(self.job.poll(), f"the job ended before: {what}")
            got = self.targets(role)
            return got if predicate(got) else None
        return poll_until(check, timeout, what)

    def test_a_live_job_is_scraped_through_its_targets_file(self):
        _, _, reference = self.run_local("reference", MLP, servers=2, workers=1, extra=EXTRA)

        self.dir = self.run_dir("job")
        targets_file = os.path.join(self.dir, "prometheus_targets.json")
        self.prom = Prometheus(targets_file).start()
        log = open(os.path.join(self.tmp, "local.out"), "w")
        self.job = subprocess.Popen([LOCAL, "--metrics", "--job", MLP, "--servers", "2", "--workers", "1",
                                     "--run-dir", self.dir, "--checkpoint-every", "100", "--slowdowns", SLOWDOWN,
                                     "--", *EXTRA], env=ENV, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.t0 = time.monotonic()
        self.procs.append(self.job)
        addr = wait_for_file(os.path.join(self.dir, "coordinator.addr"), proc=self.job)
        job = f'eps_job="{JOB}"'

        # Every process is a target that is up, found through the targets file alone.
        self.wait_for_targets("shard", lambda ts: len(ts) == 2 and all(t["health"] == "up" for t in ts), 30,
                              "two shard targets up")
        self.wait_for_targets("coordinator", lambda ts: len(ts) == 1 and ts[0]["health"] == "up", 30,
                              "a coordinator target up")
        first = self.wait_for_targets("worker", lambda ts: len(ts) == 1 and ts[0]["health"] == "up", 30,
                                      "a worker target up")[0]
        self.mark("every process a target, up")

        # Steps go up, and so do the bytes the shards received.
        s1 = self.wait_for(f"eps_step{{{job}}}", lambda v: v >= 1, 30, "eps_step at 1 or more")
        self.wait_for(f"eps_step{{{job}}}", lambda v: v > s1, 30, f"eps_step above {s1}")
        pushed = f"sum(eps_shard_push_bytes_total{{{job}}})"
        b1 = self.wait_for(pushed, lambda v: v > 0, 30, "shard push bytes above 0")
        self.wait_for(pushed, lambda v: v > b1, 30, f"shard push bytes above {b1}")
        self.wait_for(f"eps_workers{{{job}}}", lambda v: v == 1, 30, "eps_workers at 1")
        self.mark("eps_step and the shard push bytes going up")

        # From here the job's course is placed by holds (elasticps hold), not by how fast the host runs it.
        self.control(self.dir, "hold")
        held = wait_for_event(self.dir, "paused", lambda e: e["cause"] == "hold", proc=self.job)
        self.wait_for(f"eps_held{{{job}}}", lambda v: v == 1, 30, "eps_held at 1")
        self.mark(f"held at step {held['step']}")

        # A worker attaches with metrics on: its target is up; a step later eps_workers is 2.
        attached = subprocess.Popen([ATTACH, "--metrics", "--coordinator", addr, "--token-file",
                                     os.path.join(self.dir, "token"), "--slowdown", SLOWDOWN,
                                     "--log", os.path.join(self.dir, "logs", "attached.log")], env=ENV)
        self.procs.append(attached)
        ready = wait_for_event(self.dir, "worker_ready",
                               lambda e: e["worker"] in worker_ids_of_pid(self.dir, attached.pid), timeout=60,
                               proc=self.job)
        ids = {f"w{ready['worker']}"}
        self.assertEqual(worker_ids_of_pid(self.dir, attached.pid), {ready["worker"]})
        self.wait_for_targets("worker", lambda ts: any(t["labels"]["eps_worker"] in ids and t["health"] == "up"
                                                       for t in ts), 30, "the attached worker's target up")
        self.control(self.dir, "hold", f"--from-step={held['step'] + 1}")  # one step on two workers
        self.wait_for(f"eps_workers{{{job}}}", lambda v: v == 2, 60, "eps_workers at 2 after the attach")
        self.mark("the attached worker counted and a target")

        # The first worker is SIGKILLed: eps_workers back to 1, its target gone from the targets file.
        with open(os.path.join(self.dir, "pids", "worker0.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.wait_for(f"eps_workers{{{job}}}", lambda v: v == 1, 30, "eps_workers at 1 after the SIGKILL")
        self.wait_for(f'eps_membership_changes_total{{{job}, kind="death"}}', lambda v: v >= 1, 30,
                      "a death counted")
        self.wait_for_targets("worker", lambda ts: [t["labels"]["eps_worker"] for t in ts] == sorted(ids) and
                              first["labels"]["eps_worker"] not in ids, 30, "only the attached worker a target")
        self.mark("the killed worker uncounted and no target")

        # On to the job's last step, held there until the dashboard was read.
        self.control(self.dir, "hold", f"--from-step={STEPS - 1}")
        # The dashboard's panels answer with live data (a second checkpoint makes the checkpoint quantiles').
        self.wait_for(f"max(eps_shard_durable_step{{{job}}})", lambda v: v >= 100, 60, "a checkpoint at step 100")
        queries = dashboard_queries(JOB)
        missing = []

        def all_answer():
            self.assertIsNone(self.job.poll(), f"the job ended before every panel had data: {missing}")
            missing[:] = [(title, expr) for title, expr in queries if not self.prom.query(expr)]
            return True if not missing else None
        try:
            poll_until(all_answer, 30, "every dashboard panel with data")
        except AssertionError as e:
            raise AssertionError(f"{e}; without: {missing}") from None
        self.assertIsNone(self.job.poll(), "the job ended before the dashboard was read")
        self.mark("every dashboard panel with data")
        self.control(self.dir, "release")
        rc = self.job.wait(timeout=300)
        self.assertEqual(rc, 0, logs(self.dir))
        result = read_result(self.dir)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(self.dir))
        self.assertGreaterEqual(result["workers_seen"], 2)
        attached.wait(timeout=30)


if __name__ == "__main__":
    unittest.main(verbosity=2)
