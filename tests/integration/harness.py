"""Helpers for ElasticPS multi-process integration tests.

Every process runs on loopback with port 0 (the real port is read back from the
address files the processes write), in a fresh temporary run dir; every wait is
bounded; every process a test starts is stopped when it ends. A test that cannot
run here (a missing tool, package or data set, no root) skips through `requires`
or `skip_or_fail`, which fail it instead under CI=true.
"""
import atexit
import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get("EPS_ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from events import EventReader  # noqa: E402  (scripts/events.py: the reader of events.jsonl)
from metrics import TRAINING_COLUMNS, read_metrics  # noqa: E402,F401  (scripts/metrics.py: metrics.csv)
BIN = os.environ.get("EPS_BIN", os.path.join(ROOT, "build", "bin"))
LOCAL = os.path.join(ROOT, "launcher", "local.sh")
MLP = os.path.join(ROOT, "examples", "fashion_mnist_mlp.flags")

# The processes' host-wide files (the workers' model cache, a shard's default store) go to a TMPDIR of this test
# module's own, removed when it ends: the suite leaves nothing in the host's /tmp.
PROCESS_TMP = tempfile.mkdtemp(prefix="eps-tmp-")
atexit.register(shutil.rmtree, PROCESS_TMP, True)
# And those a test starts with its own environment (the Python package's Trainer.fit in test_python); this process's
# own temporary files stay where tempfile already put them.
os.environ["TMPDIR"] = PROCESS_TMP
# The environment of the job's processes as a user's shell would give it (test_cpu_kernels starts from this one).
BARE_ENV = dict(os.environ, OMP_WAIT_POLICY="passive", EPS_BIN=BIN, TMPDIR=PROCESS_TMP)
DEFAULT_CPU_KERNELS = "x86-64-v3"  # common/cpu_kernels.h, kDefaultCpuKernels


def cpu_kernels_environment(kernel_set=DEFAULT_CPU_KERNELS):
    """The variables that select the CPU kernel set `kernel_set` as ApplyCpuKernels (common/cpu_kernels.h) leaves them
    when it executes a program again: `elasticps kernels`' and EPS_CPU_KERNELS, its kCpuKernelsEnv. {} where
    elasticps is not built (every test then fails on the missing binaries anyway)."""
    try:
        p = subprocess.run([os.path.join(BIN, "elasticps"), "kernels", f"--set={kernel_set}"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=60)
    except OSError:
        return {}
    if p.returncode != 0:
        return {}
    return dict(dict(line.split("=", 1) for line in p.stdout.split()), EPS_CPU_KERNELS=kernel_set)


# What the tests give the job's processes: BARE_ENV with the default CPU kernel set already selected, as a worker's
# second run (after it executed itself again to apply the set) has it. A worker, eps_predict or eps_serve then applies
# the set without executing itself again, which spares a second load of libtorch (about 1 s of CPU) per process: the
# suite starts hundreds. The bits are the same (the same variables select the same kernels); test_cpu_kernels tests the
# execution again, from BARE_ENV.
ENV = dict(BARE_ENV, **cpu_kernels_environment())
# CI (.ci/run with CI=true) runs every test: there a test that would skip fails, naming what is missing.
IN_CI = os.environ.get("CI") == "true"


def _would_skip(why):
    return f"CI=true: this test would skip ({why}); scripts/setup.sh, run as root, provides what it needs"


def skip_or_fail(testcase, why):
    """Skips the running test of `testcase` (a unittest.TestCase) because of `why`, what is missing here; under
    CI=true fails it instead, naming `why`. Raises unittest.SkipTest or AssertionError."""
    if IN_CI:
        testcase.fail(_would_skip(why))
    testcase.skipTest(why)


def requires(condition, why):
    """A decorator for a test method or a TestCase class that needs what `condition` (true where it is there) says:
    without it the test skips for `why`, or fails naming `why` under CI=true."""
    def decorate(test):
        if condition:
            return test
        if not IN_CI:
            return unittest.skip(why)(test)
        if isinstance(test, type):  # every test of the class fails in its setUp
            def setUp(self):
                self.fail(_would_skip(why))
            test.setUp = setUp
            return test

        @functools.wraps(test)
        def failing(self, *args, **kwargs):
            self.fail(_would_skip(why))
        return failing
    return decorate


class RunDirTest(unittest.TestCase):
    """A test case with a temporary folder, removed at the end unless the test failed; and a folder of its class's for
    the jobs several of its tests read (run_shared), removed after the class's last test unless one failed."""
    _shared = None  # per class (set by run_shared): {"dir": its folder, "runs": {name: run_local's tuple}, "failed"}

    @classmethod
    def tearDownClass(cls):
        shared = cls.__dict__.get("_shared")
        if shared is None:
            return
        if shared["failed"] or os.environ.get("EPS_KEEP"):
            print("shared run dirs kept in", shared["dir"])
        else:
            shutil.rmtree(shared["dir"], ignore_errors=True)
        cls._shared = None

    def run_shared(self, name, **kwargs):
        """run_local(name, **kwargs) once for this test class: the first test that asks runs the job in the class's
        folder, the others get the same (returncode, output, result dict or None) and read its run dir,
        self.shared_dir(name), without writing to it. Only for jobs whose every argument is the same for each test
        that asks (a failed job fails each of them)."""
        shared = self._shared_runs()
        if name not in shared["runs"]:
            shared["runs"][name] = self._run_local_in(os.path.join(shared["dir"], name), name, **kwargs)
        return shared["runs"][name]

    def shared_dir(self, name):
        """The run dir of run_shared's job `name`."""
        return os.path.join(self._shared_runs()["dir"], name)

    def _shared_runs(self):
        cls = type(self)
        if cls.__dict__.get("_shared") is None:
            cls._shared = {"dir": tempfile.mkdtemp(prefix=f"eps-it-{cls.__name__}-"), "runs": {}, "failed": False}
        return cls._shared

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="eps-it-")
        self.procs = []

    def tearDown(self):
        # SIGTERM first: local.sh then stops every process it started; SIGKILL only if it hangs.
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=20)
        failed = self._failed()
        if failed and type(self).__dict__.get("_shared") is not None:
            type(self)._shared["failed"] = True
        if not failed and not os.environ.get("EPS_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print("run dirs kept in", self.tmp)

    def _failed(self):
        """Whether this test (or a subtest of it) has failed or raised so far, under unittest's runner (its
        TestResult lists the test) or pytest's (its result object, TestCaseFunction, keeps the error in
        _excinfo)."""
        result = getattr(self._outcome, "result", None)
        if hasattr(result, "failures"):
            return any(getattr(t, "test_case", t) is self for t, _ in result.failures + result.errors)
        return bool(getattr(result, "_excinfo", None))

    def assertSameTrainingCurve(self, rows, reference, what=""):
        """metrics.csv rows (read_metrics) hold the reference's steps and, in each, the same values in every column
        that is the same bits in every placement (TRAINING_COLUMNS); a failure names the first step that differs."""
        self.assertEqual([r["step"] for r in rows], [r["step"] for r in reference], what)
        for got, want in zip(rows, reference):
            differ = [c for c in TRAINING_COLUMNS if got[c] != want[c]]
            self.assertEqual(differ, [], f"{what} step {got['step']}: got {[got[c] for c in differ]}, the reference "
                             f"{[want[c] for c in differ]}")

    def run_dir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        return d

    def run_local(self, name, job=MLP, servers=1, workers=1, extra=(), timeout=600, expect_ok=True, slowdowns=None,
                  launcher=(), env=ENV):
        """Runs launcher/local.sh (with the options `launcher`, in the environment `env`) to the end, in the run dir
        self.run_dir(name); returns (returncode, output, result dict or None)."""
        return self._run_local_in(self.run_dir(name), name, job, servers, workers, extra, timeout, expect_ok,
                                  slowdowns, launcher, env)

    def _run_local_in(self, d, name, job=MLP, servers=1, workers=1, extra=(), timeout=600, expect_ok=True,
                      slowdowns=None, launcher=(), env=ENV):
        os.makedirs(d, exist_ok=True)
        cmd = [LOCAL, "--job", job, "--servers", str(servers), "--workers", str(workers), "--run-dir", d,
               *launcher]
        if slowdowns:
            cmd += ["--slowdowns", slowdowns]
        if extra:
            cmd += ["--"] + list(extra)
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        result = read_result(d)
        if expect_ok:
            self.assertEqual(p.returncode, 0, f"{name}: local.sh failed:\n{p.stdout}\n{logs(d)}")
            self.assertIsNotNone(result, f"{name}: no result.json")
        return p.returncode, p.stdout, result

    def control(self, d, command, *flags, prefix=()):
        """Runs `elasticps hold|release|status --run-dir d --json` (with `flags`, after the command line `prefix`,
        e.g. a network namespace's `ip netns exec NS`); returns the job's status it printed."""
        p = subprocess.run([*prefix, os.path.join(BIN, "elasticps"), command, "--run-dir", d, "--json", *flags],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, f"elasticps {command}: {p.stderr}")
        return json.loads(p.stdout)

    def run_with_join_and_sigkill(self, d, cmd, timeout=600, workers=2):
        """Runs the job `cmd` (launcher/local.sh with `workers` workers and the run dir d) through a join and a
        SIGKILL placed by holds (`elasticps hold`), so that no timing decides where they land: held after its first
        step, one more worker attached; on its readiness the hold moves one step on, so that exactly one step runs
        with it; local.sh's worker1 is SIGKILLed while held and the hold moved one step on again: one step runs
        after the kill, planned before the coordinator knows of it (a part of the dead worker's is recomputed once
        it is declared dead), and the job, however short, cannot end before the dead worker's event, on which it is
        released. Waits for its end (exit 0); returns result.json's dict."""
        log = open(os.path.join(self.tmp, "local.out"), "w")
        job = subprocess.Popen(cmd, env=ENV, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(job)
        addr = wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        wait_for_event(d, "step_completed", timeout=180, proc=job)
        self.control(d, "hold")
        held = wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)
        ready_before = {e["worker"] for e in read_events(d, "worker_ready")}
        attached = subprocess.Popen([os.path.join(ROOT, "launcher", "attach.sh"), "--coordinator", addr,
                                     "--token-file", os.path.join(d, "token"),
                                     "--log", os.path.join(d, "logs", "attached.log")], env=ENV)
        self.procs.append(attached)
        poll_until(lambda: True if len(read_events(d, "worker_ready")) >= workers + 1 else None, 120,
                   "the attached worker is not ready")
        self.control(d, "hold", f"--from-step={held['step'] + 1}")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold" and e["step"] == held["step"] + 1, proc=job)
        # The step between the holds ran with the attached worker among those holding VWs (the speed-aware planner may
        # leave a worker it measured slow without VWs for a step: the count of ranges is not the test).
        joined = {e["worker"] for e in read_events(d, "worker_ready")} - ready_before
        on_three = [e for e in read_events(d, "step_completed") if e["step"] == held["step"]]
        self.assertEqual(len(on_three), 1, "the step between the holds")
        self.assertTrue(joined & {r["worker"] for r in on_three[0]["ranges"]}, (joined, on_three))
        with open(os.path.join(d, "pids", "worker1.pid")) as f:
            pid = int(f.read())
        ids = worker_ids_of_pid(d, pid)
        steps = read_events(d, "model_accepted")[0]["steps"]
        self.assertLess(held["step"] + 2, steps, "the job is too short for a step after the kill and a hold")
        os.kill(pid, signal.SIGKILL)
        self.control(d, "hold", f"--from-step={held['step'] + 2}")
        wait_for_event(d, "worker_dead", lambda e: e["worker"] in ids, timeout=60, proc=job)
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=timeout), 0, logs(d))
        return read_result(d)

    def start(self, args, log_path):
        """Starts one process in the background, logging to log_path; stopped at tearDown."""
        log = open(log_path, "w")
        p = subprocess.Popen(args, env=ENV, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    # A job started process by process (instead of by local.sh), for tests that need a flag local.sh
    # does not pass or a hand on each endpoint. Logs and address files go to the run dir d; token is
    # the path of the job's token file.
    def start_coordinator(self, d, token, *flags, job=MLP):
        """Starts the coordinator; returns (process, its endpoint)."""
        p = self.start([os.path.join(BIN, "coordinator"), f"--flagfile={job}", f"--run_dir={d}",
                        f"--addr_file={d}/coordinator.addr", f"--token_file={token}", *flags], f"{d}/coordinator.log")
        return p, wait_for_file(f"{d}/coordinator.addr", proc=p)

    def start_shard(self, d, coordinator, token, shard, *flags, prefix=()):
        """Starts shard `shard` (its command line after `prefix`); returns its endpoint."""
        p = self.start([*prefix, os.path.join(BIN, "shard"), f"--coordinator={coordinator}", f"--shard_id={shard}",
                        f"--token_file={token}", f"--addr_file={d}/shard{shard}.addr", *flags], f"{d}/shard{shard}.log")
        return wait_for_file(f"{d}/shard{shard}.addr", proc=p)

    def start_worker(self, d, coordinator, token, index, *flags):
        """Starts a worker logging to d/worker<index>.log, its report to d/worker<index>.json; returns its
        process."""
        return self.start([os.path.join(BIN, "worker"), f"--coordinator={coordinator}", f"--token_file={token}",
                           f"--report_file={d}/worker{index}.json", *flags], f"{d}/worker{index}.log")


def poll_until(check, timeout, what):
    """Calls check() every 20 ms until it returns something other than None; bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got is not None:
            return got
        time.sleep(0.02)
    raise AssertionError(f"{what} within {timeout}s")


def read_text(path):
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        return f.read()


def wait_for_file(path, timeout=30, proc=None):
    """Waits (bounded) until a file exists and is non-empty; returns its stripped content."""
    def check():
        text = read_text(path)
        if text:
            return text.strip()
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before writing {path}")
        return None
    return poll_until(check, timeout, f"{path} did not appear")


def read_events(run_dir, kind=None):
    """Every event of the run dir's events.jsonl so far (of `kind` only, if given), in order; [] without a file."""
    return [e for e in EventReader(run_dir).poll() if kind is None or e["event"] == kind]


def wait_for_event(run_dir, kind, predicate=None, timeout=60, proc=None):
    """Waits (bounded) for an event of `kind` for which predicate(event) holds; returns it. Fails early when `proc`
    (the job) exits first."""
    reader = EventReader(run_dir)

    def check():
        for e in reader.poll():
            if e["event"] == kind and (predicate is None or predicate(e)):
                return e
        if proc is not None and proc.poll() is not None:
            # One more read: the event may have been written just before the exit.
            for e in reader.poll():
                if e["event"] == kind and (predicate is None or predicate(e)):
                    return e
            raise AssertionError(f"the job exited ({proc.returncode}) before a '{kind}' event in {run_dir}")
        return None
    return poll_until(check, timeout, f"no '{kind}' event in {reader.path}")


def wait_for_step(run_dir, step, timeout=180, proc=None):
    """Waits (bounded) until the coordinator's progress events report at least `step` steps done."""
    return wait_for_event(run_dir, "progress", lambda e: e["step"] >= step, timeout, proc)


def worker_ids_of_pid(run_dir, pid):
    """The worker ids the coordinator gave the process `pid` (a re-registration gets a new one)."""
    return {e["worker"] for e in read_events(run_dir, "worker_joined") if e["pid"] == pid}


def read_report(path, timeout=30):
    """A worker's end-of-run report (docs/events.md) as a dict; waits (bounded) for the worker to write it."""
    def check():
        try:
            with open(path) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None
    return poll_until(check, timeout, f"no worker report {path}")


def read_result(d):
    """The run directory's result.json as a dict, or None when there is none."""
    path = os.path.join(d, "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def read_safetensors(path):
    """A model.safetensors as (metadata dict, {name: (shape, bytes)}), tensors in file order."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return meta, {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in tensors}


def logs(run_dir, tail=15):
    out = []
    d = os.path.join(run_dir, "logs")
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            try:
                with open(os.path.join(d, name), errors="replace") as f:
                    lines = f.readlines()[-tail:]
            except FileNotFoundError:  # a report's temporary file, renamed meanwhile
                continue
            out.append(f"--- {name}\n" + "".join(lines))
    return "\n".join(out)
