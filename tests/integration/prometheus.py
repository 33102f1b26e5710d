"""A real Prometheus server for integration tests.

Starts Debian's /usr/bin/prometheus (EPS_PROMETHEUS overrides it) on a loopback port chosen by
the kernel, in a temporary folder of its own, scraping the targets of a file_sd file (a job's
RUN_DIR/prometheus_targets.json) every 500 ms; queries its HTTP API; stops it and removes the
folder always (a `with` block, or stop()).

    with Prometheus(os.path.join(run_dir, "prometheus_targets.json")) as prom:
        prom.value('eps_step{eps_job="mlp"}')   # a float, or None while there is no sample
        prom.targets()                          # /api/v1/targets' active targets
"""
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from harness import poll_until

PROMETHEUS = os.environ.get("EPS_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("EPS_PROMTOOL", os.path.join(os.path.dirname(PROMETHEUS), "promtool"))

CONFIG = """\
global:
  scrape_interval: {scrape_interval}
  scrape_timeout: {scrape_interval}
scrape_configs:
  - job_name: elasticps
    file_sd_configs:
      - files: [{targets_file}]
        refresh_interval: {refresh_interval}
"""


def available():
    """Whether the Prometheus binary and promtool are there (Debian package `prometheus`)."""
    return all(os.access(p, os.X_OK) for p in (PROMETHEUS, PROMTOOL))


def listening_ports(pid):
    """The TCP ports the process `pid` listens on, read from /proc (its sockets' inodes matched against its network
    namespace's tcp tables): no log wording."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address (hex ip:port), st (0A: LISTEN), inode
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Prometheus:
    """One Prometheus process scraping the targets of `targets_file` (file_sd; the file may appear later)."""

    def __init__(self, targets_file, scrape_interval="500ms", refresh_interval="1s", start_timeout=30):
        self.targets_file = os.path.abspath(targets_file)
        self.scrape_interval = scrape_interval
        self.refresh_interval = refresh_interval
        self.start_timeout = start_timeout
        self.dir = None
        self.proc = None
        self.url = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="eps-prometheus-")
        try:
            config = os.path.join(self.dir, "prometheus.yml")
            with open(config, "w") as f:
                f.write(CONFIG.format(scrape_interval=self.scrape_interval, refresh_interval=self.refresh_interval,
                                      targets_file=json.dumps(self.targets_file)))
            self.log_path = os.path.join(self.dir, "prometheus.log")
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.dir}/data",
                     "--web.listen-address=127.0.0.1:0", "--storage.tsdb.retention.time=1h"],
                    stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)

            def port():
                self._check_alive()
                ports = listening_ports(self.proc.pid)
                # Prometheus listens on its web address only; more than one would be a surprise to report.
                if len(ports) > 1:
                    raise AssertionError(f"prometheus listens on several ports {sorted(ports)}")
                return ports.pop() if ports else None
            self.url = f"http://127.0.0.1:{poll_until(port, self.start_timeout, 'prometheus did not listen')}"
            poll_until(lambda: True if self._ready() else None, self.start_timeout, "prometheus was not ready")
            return self
        except BaseException:
            self.stop(keep=True)
            raise

    def stop(self, keep=False):
        """Stops Prometheus (SIGTERM, SIGKILL after 10 s) and removes its folder (kept, and printed, if `keep`)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.dir is not None:
            if keep or os.environ.get("EPS_KEEP"):
                print("prometheus folder kept in", self.dir)
                if os.path.exists(getattr(self, "log_path", "")):
                    with open(self.log_path, errors="replace") as f:
                        print("--- prometheus.log\n" + "".join(f.readlines()[-20:]))
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _check_alive(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: see {self.log_path}")

    def _ready(self):
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            self._check_alive()
            return False

    def api(self, path, **params):
        """GET /api/v1/<path>?params; returns the `data` of a success, raises AssertionError with Prometheus' error
        otherwise (a query it cannot parse is a 400 bad_data)."""
        self._check_alive()
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise AssertionError(f"prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr):
        """An instant query: the result of /api/v1/query (for a vector, a list of {"metric", "value"})."""
        return self.api("query", query=expr)["result"]

    def value(self, expr):
        """The value of an instant query that has at most one sample, as a float; None when it has none."""
        result = self.query(expr)
        if len(result) > 1:
            raise AssertionError(f"{expr} has {len(result)} series: {result}")
        return float(result[0]["value"][1]) if result else None

    def targets(self):
        """The active targets (/api/v1/targets): each with "labels", "health" ("up", "down", "unknown"), "scrapeUrl"."""
        return self.api("targets", state="active")["activeTargets"]

    def wait_for(self, expr, predicate, timeout, what=None):
        """Waits (bounded) until the single-sample query `expr` has a value v with predicate(v); returns v."""
        last = []

        def check():
            v = self.value(expr)
            last[:] = [v]
            return v if v is not None and predicate(v) else None
        try:
            return poll_until(check, timeout, what or f"{expr} did not reach the expected value")
        except AssertionError as e:
            raise AssertionError(f"{e} (last value {last[0] if last else None})") from None


def write_targets(path, targets):
    """Writes a file_sd targets file atomically (what the coordinator does): targets is a list of
    (address, labels dict)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump([{"targets": [a], "labels": labels} for a, labels in targets], f)
    os.replace(tmp, path)
