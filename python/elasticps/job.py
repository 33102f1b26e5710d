"""A job (`Job`: watch, hold, lend workers to, wait for) and a finished one (`Run`: its result, curve, events and
model)."""
import copy
import csv
import json
import os
import subprocess
import tempfile
import time
import weakref
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _data
from ._process import ProcessGroup
from ._progress import Progress
from ._tree import Tree
from .errors import (ArgumentError, CommandError, InvalidJobError, JobError, JobFailedError, WorkerError)

POLL_S = 0.1  # how often a waiting Job reads the run folder
STATUS_S = 1.0  # how often a waiting Job known only by its coordinator asks it for its status
# A worker report's outcomes (docs/events.md) that say it never trained or stopped training for an error.
_FAILED_OUTCOMES = ("failed", "unreachable")


def _command(tree: Tree, args: List[str], timeout: float, what: str, run_dir: Optional[str] = None
             ) -> subprocess.CompletedProcess:
    """Runs `elasticps ARGS` to its end (bounded); CommandError with its message when it fails."""
    try:
        p = subprocess.run([tree.binary("elasticps"), *args], env=tree.env(), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CommandError(f"elasticps {what}: no answer within {timeout:g} s", 1, run_dir) from None
    if p.returncode != 0:
        message = (p.stderr.strip() or p.stdout.strip() or f"exit code {p.returncode}")
        if not message.startswith(f"elasticps {what}"):
            message = f"elasticps {what}: {message}"
        raise CommandError(message, p.returncode, run_dir)
    return p


class Run:
    """A finished job's run folder: `digest` (params_sha256), `test_accuracy`, `test_loss`, `result` (result.json),
    `history` (metrics.csv: a pandas DataFrame when pandas is installed, else a list of dicts), `events`
    (events.jsonl) and the model (`model()`, `state_dict()`; `evaluate`, `predict` run `elasticps evaluate` /
    `predict` on it). `module`: the torch.nn.Module the job trained (model() returns a copy of it with the trained
    weights), or None (model() then loads model.script.pt)."""

    def __init__(self, run_dir: str, module=None, *, bin_dir: Optional[str] = None, tree: Optional[Tree] = None):
        self.run_dir = os.path.abspath(run_dir)
        self._tree = tree or Tree(bin_dir)
        self._module = module
        path = os.path.join(self.run_dir, "result.json")
        try:
            with open(path) as f:
                self.result: Dict[str, Any] = json.load(f)
        except (OSError, ValueError) as e:
            raise JobError(f"{path}: not a finished job's result ({e})", self.run_dir) from None

    def __repr__(self) -> str:
        return (f"Run({self.run_dir!r}, steps={self.result.get('steps')}, test_accuracy={self.test_accuracy}, "
                f"digest={self.digest[:12]}...)")

    @property
    def digest(self) -> str:
        """The SHA-256 of the trained parameters (result.json's params_sha256): the same for every placement."""
        return self.result["params_sha256"]

    @property
    def test_accuracy(self) -> Optional[float]:
        return self.result.get("test_accuracy")

    @property
    def test_loss(self) -> Optional[float]:
        return self.result.get("test_loss")

    @property
    def history(self):
        """One row per step from metrics.csv (scripts/metrics.py's columns): a pandas DataFrame when pandas is
        installed, else a list of dicts."""
        rows = self._tree.load_script_module("metrics").read_metrics(self.run_dir)
        try:
            import pandas
        except ImportError:
            return rows
        return pandas.DataFrame(rows)

    def history_rows(self) -> List[Dict[str, Any]]:
        """metrics.csv's rows as a list of dicts, with or without pandas."""
        return self._tree.load_script_module("metrics").read_metrics(self.run_dir)

    def events(self, kind: Optional[str] = None) -> List[Dict[str, Any]]:
        """The job's events (of `kind` only, if given), in order (docs/events.md)."""
        reader = self._tree.load_script_module("events").EventReader(self.run_dir)
        return [e for e in reader.poll() if kind is None or e["event"] == kind]

    def file(self, name: str) -> str:
        path = os.path.join(self.run_dir, name)
        if not os.path.exists(path):
            raise JobError(f"{path}: the run has no {name}", self.run_dir)
        return path

    def state_dict(self) -> Dict[str, Any]:
        """The trained tensors by name (model.pt: torch.load)."""
        import torch
        return torch.load(self.file("model.pt"))

    def model(self):
        """The trained model: a copy of the module the job trained with the trained weights, or, without one,
        torch.jit.load of model.script.pt (a TorchScript job's)."""
        import torch
        if self._module is not None:
            module = copy.deepcopy(self._module)
            module.load_state_dict(self.state_dict())
            return module
        if os.path.exists(os.path.join(self.run_dir, "model.script.pt")):
            return torch.jit.load(self.file("model.script.pt"))
        raise JobError(f"{self.run_dir}: a built-in model ({self.result.get('model')}) has no Python module: "
                       "load run.state_dict() into your own copy of it", self.run_dir)

    def _model_args(self) -> List[str]:
        script = os.path.join(self.run_dir, "model.script.pt")
        args = ["--model", script if os.path.exists(script) else self.file("model.safetensors")]
        vocab = os.path.join(self.run_dir, "vocab.json")
        if os.path.exists(vocab):
            args += ["--vocab", vocab]
        return args + ["--threads", str(self.result.get("threads", 1))]

    @property
    def labels(self) -> Optional[List[str]]:
        """A text job's class labels, in class order (vocab.json's), else None."""
        try:
            with open(os.path.join(self.run_dir, "vocab.json")) as f:
                return json.load(f).get("labels")
        except (OSError, ValueError):
            return None

    def _job_flag(self, name: str, default: str) -> str:
        """The value of --name in the run's job.flags (the last one), else `default`."""
        value = default
        try:
            with open(os.path.join(self.run_dir, "job.flags")) as f:
                for line in f:
                    if line.strip().startswith(f"--{name}="):  # `elasticps train` writes underscores
                        value = line.strip().split("=", 1)[1]
        except OSError:
            pass
        return value

    def _data_args(self, data, labels_required: bool, folder: str) -> List[str]:
        if (not labels_required and isinstance(data, (list, tuple)) and data
                and all(isinstance(t, str) for t in data) and not all(os.path.exists(t) for t in data)):
            # predict's raw texts: a JSONL file the job's vocabulary tokenizes
            path = os.path.join(folder, "texts.jsonl")
            column = self._job_flag("text_column", "text")
            with open(path, "w") as f:
                for text in data:
                    f.write(json.dumps({column: text}) + "\n")
            return ["--data", path]
        samples_only = not labels_required and not isinstance(data, _data.PathTypes) and not (
            isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[0], _data.PathTypes))
        if samples_only:  # predict's x: an array or tensor of samples
            path = os.path.join(folder, "x.npy")
            np.save(path, np.ascontiguousarray(_data.features(data, "x")))
            return ["--data", path]
        paths = _data.write(_data.check(data, "data"), folder, "data")
        return ["--data", paths["data"]] + (["--labels", paths["labels"]] if "labels" in paths else [])

    def evaluate(self, data, *, batch: int = 1000, timeout: float = 3600) -> Dict[str, Any]:
        """Accuracy and mean loss of the trained model on `data` ((x, y) arrays, or paths as fit takes them), as
        `elasticps evaluate --json` computes them (the job's test set gives the job's test_accuracy exactly):
        {"count", "correct", "accuracy", "loss", "loss_kind"}. Raises ArgumentError, CommandError."""
        with tempfile.TemporaryDirectory(prefix="eps-eval-") as tmp:
            args = ["evaluate", *self._model_args(), *self._data_args(data, True, tmp), "--batch", str(batch),
                    "--json"]
            p = _command(self._tree, args, timeout, "evaluate", self.run_dir)
        return json.loads(p.stdout)

    def predict(self, x, *, batch: int = 1000, raw: bool = False, timeout: float = 3600) -> np.ndarray:
        """The trained model's output on the samples `x` (an array or tensor [n, ...], or a data file path), as
        `elasticps predict` writes it: for a classifier, each sample's class probabilities (softmax), float32
        [n, classes]; else (or with raw=True) the raw outputs. Raises ArgumentError, CommandError."""
        with tempfile.TemporaryDirectory(prefix="eps-predict-") as tmp:
            out = os.path.join(tmp, "predictions.csv")
            args = ["predict", *self._model_args(), *self._data_args(x, False, tmp), "--batch", str(batch),
                    "--out", out]
            if raw:
                args.append("--raw")
            _command(self._tree, args, timeout, "predict", self.run_dir)
            return read_predictions(out)


def read_predictions(path: str) -> np.ndarray:
    """The probabilities (p0..) or outputs (y0..) of an `elasticps predict` CSV, float32 [n, width]."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    columns = [i for i, name in enumerate(header) if name[:1] in ("p", "y") and name[1:].isdigit()]
    values = np.array([[float(row[i]) for i in columns] for row in rows[1:]], dtype=np.float32)
    return values.reshape(len(rows) - 1, len(columns))


class JoinedRun:
    """A job this host lent workers to and watched to its end, known only by its coordinator's endpoint
    (`Trainer.fit(coordinator="tcp://...", token=...)`, `Job("tcp://...", token).wait()`): what can be known of it
    from here. Its result (digest, test accuracy, curve, model) is in its run folder, on its coordinator's host:
    joined by that folder (`coordinator=RUN_DIR`, on this host or a shared filesystem), fit returns a Run instead.

    `status`: the newest `elasticps status --json` dict read while the job ran (asked every second: step, steps,
    loss, samples_per_s, workers, the newest evaluation's test_accuracy); {} if the coordinator never answered.
    `workers`: the end-of-run reports of the workers this host lent (docs/events.md: outcome, train_plans,
    ms_per_train_plan, ...). `log_dir`: the folder of their logs and reports (None when it was a temporary one).
    `digest`, `test_accuracy`, `test_loss` are None (not known here); history, model(), evaluate(), predict()
    raise JobError saying where they are."""

    digest: Optional[str] = None
    test_accuracy: Optional[float] = None
    test_loss: Optional[float] = None
    run_dir: Optional[str] = None

    def __init__(self, coordinator: str, status: Dict[str, Any], workers: List[Dict[str, Any]],
                 log_dir: Optional[str]):
        self.coordinator = coordinator
        self.status = status
        self.workers = workers
        self.log_dir = log_dir

    def __repr__(self) -> str:
        return (f"JoinedRun({self.coordinator!r}, job_id={self.status.get('job_id')!r}, step={self.status.get('step')}"
                f", workers lent={len(self.workers)})")

    def _elsewhere(self, what: str) -> JobError:
        return JobError(f"{what}: the job joined at {self.coordinator} keeps it in its run folder on its coordinator's "
                        "host; join it by that folder (fit(coordinator=RUN_DIR) on this host or a shared filesystem) "
                        "for a Run that has it, or open elasticps.Run(RUN_DIR) where the folder is")

    @property
    def history(self):
        raise self._elsewhere("history (metrics.csv)")

    def model(self):
        raise self._elsewhere("model()")

    def evaluate(self, data, **kwargs: Any) -> Dict[str, Any]:
        raise self._elsewhere("evaluate() (the trained model)")

    def predict(self, x, **kwargs: Any) -> np.ndarray:
        raise self._elsewhere("predict() (the trained model)")


def _progress_event(status: Dict[str, Any]) -> Dict[str, Any]:
    """A status dict as the `progress` event the progress bar reads."""
    return {"step": status.get("step", 0), "steps": status.get("steps", 0), "loss": status.get("loss"),
            "samples_per_s": status.get("samples_per_s"), "workers": len(status.get("workers", [])),
            "t": time.time()}


class Job:
    """A running job, named by its run folder (`Job("runs/mlp")`: its coordinator.addr and token) or by its
    coordinator's endpoint and token (`Job("tcp://10.0.0.5:4000", token)`: the token's text or its file).

    status(), hold(), release() are `elasticps status/hold/release --json`; attach(workers) lends this host's
    workers to the job (launcher/attach.sh); wait() waits for its end. A Job owns the processes it started (the
    attached workers; for `Trainer.start`, the whole job): close() (or leaving a `with` block, or the interpreter's
    exit) stops every one of them. `log_dir`: where attach() writes its workers' logs and reports (default: the run
    folder's logs/, or for a job known by its coordinator a temporary folder removed at close()). Not
    thread-safe."""

    def __init__(self, target: str, token: Optional[str] = None, *, bin_dir: Optional[str] = None,
                 tree: Optional[Tree] = None, log_dir: Optional[str] = None, _launcher: Optional[ProcessGroup] = None,
                 _module=None):
        self._tree = tree or Tree(bin_dir)
        self._launcher = _launcher
        self._module = _module
        self._log_dir = os.path.abspath(log_dir) if log_dir is not None else None
        self._attached: List[ProcessGroup] = []
        self._reports: List[str] = []  # the attached workers' report files, in attach order
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        target = os.fspath(target)
        if "://" in target:
            self.run_dir: Optional[str] = None
            self.coordinator: Optional[str] = target
            if token is None:
                raise ArgumentError("Job: a coordinator's endpoint needs the job's token (its text or its file)")
            self.token_file = self._token_file(token)
        else:
            self.run_dir = os.path.abspath(target)
            if _launcher is None and not os.path.isdir(self.run_dir):
                raise ArgumentError(f"Job: {self.run_dir}: no such run folder")
            self.coordinator = None
            self.token_file = os.path.join(self.run_dir, "token")
        self._finalizer = weakref.finalize(self, _stop_all, self._launcher, self._attached, self._tmp)

    def _token_file(self, token: str) -> str:
        if os.path.isfile(token):
            return os.path.abspath(token)
        self._tmp = tempfile.TemporaryDirectory(prefix="eps-job-")
        path = os.path.join(self._tmp.name, "token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token.strip())
        return path

    def __repr__(self) -> str:
        return f"Job({self.run_dir or self.coordinator!r})"

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- control -------------------------------------------------------------------------------

    def _target_args(self) -> List[str]:
        if self.run_dir is not None:
            return ["--run-dir", self.run_dir]
        return ["--coordinator", self.coordinator, "--token-file", self.token_file]

    def _control(self, command: str, *flags: str, timeout_s: float = 5) -> Dict[str, Any]:
        if self._launcher is not None and self.run_dir is not None:
            self._wait_for_coordinator(60)
        p = _command(self._tree, [command, *self._target_args(), "--json", "--timeout-s", f"{timeout_s:g}", *flags],
                     timeout_s + 30, command, self.run_dir)
        return json.loads(p.stdout)

    def status(self, *, events: int = 10, timeout_s: float = 5) -> Dict[str, Any]:
        """The job's status, the dict `elasticps status --json` prints (step, steps, loss, samples_per_s, workers,
        shards, the newest `events`). Raises CommandError (no answer, or the job has ended)."""
        return self._control("status", "--events", str(events), timeout_s=timeout_s)

    def hold(self, from_step: Optional[int] = None) -> Dict[str, Any]:
        """Holds the job at its next step boundary (or once `from_step` steps are done); returns its status."""
        return self._control("hold", *([f"--from-step={from_step}"] if from_step is not None else []))

    def release(self) -> Dict[str, Any]:
        """Lets a held job go on, on the same bits; returns its status."""
        return self._control("release")

    def attach(self, workers: int = 1, *, device: str = "cpu", threads: int = 0) -> List[int]:
        """Lends `workers` worker processes of this host to the job (launcher/attach.sh): they register and get
        VWs at the next step boundary; they end with the job, or leave it gracefully at close(). Returns their
        pids."""
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ArgumentError(f"attach: workers={workers!r}: give a number >= 1")
        if self._launcher is not None and self.run_dir is not None:
            self._wait_for_coordinator(60)
        coordinator = self.coordinator or _read(os.path.join(self.run_dir, "coordinator.addr"))
        if not coordinator:
            raise JobError(f"{self.run_dir}: no coordinator.addr: the job is not running", self.run_dir)
        logs = self._log_dir or (os.path.join(self.run_dir, "logs") if self.run_dir else self._scratch())
        os.makedirs(logs, exist_ok=True)
        pids = []
        for _ in range(workers):
            n = len(self._attached)
            report = os.path.join(logs, f"attached-py{n}.json")
            args = [self._tree.script("launcher", "attach.sh"), "--coordinator", coordinator,
                    "--token-file", self.token_file, "--device", device, "--threads", str(threads),
                    "--report-file", report]
            if self.run_dir and os.path.exists(os.path.join(self.run_dir, "keys", "server.pub")):
                args += ["--secure-dir", self.run_dir]
            group = ProcessGroup(args, self._tree.env(), os.path.join(logs, f"attached-py{n}.log"))
            self._attached.append(group)
            self._reports.append(report)
            pids.append(group.pid)
        return pids

    def reports(self) -> List[Dict[str, Any]]:
        """The end-of-run reports (docs/events.md) of the workers attach() started that have ended and written one,
        in attach order."""
        return [r for r in map(_read_report, self._reports) if r is not None]

    def _attached_failure(self) -> Optional[List[str]]:
        """A job this Job joined (it did not start it): when every worker it attached has ended without training
        (its report's outcome failed or unreachable, or no report and a non-zero exit code), their errors; else
        None."""
        if self._launcher is not None or not self._attached or any(g.poll() is None for g in self._attached):
            return None
        errors = []
        for group, path in zip(self._attached, self._reports):
            report = _read_report(path)
            if (report.get("outcome") not in _FAILED_OUTCOMES) if report else group.returncode == 0:
                return None
            log = _read(path[:-len(".json")] + ".log").strip().splitlines()  # attach.sh's, e.g. a refused argument
            errors.append((report or {}).get("error") or (log[-1] if log else f"exit code {group.returncode}"))
        return errors

    def _scratch(self) -> str:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="eps-job-")
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _stop_all, self._launcher, self._attached, self._tmp)
        return self._tmp.name

    def _wait_for_coordinator(self, timeout: float) -> None:
        """A job this Job started: waits (bounded) until its coordinator serves."""
        deadline = time.monotonic() + timeout
        addr = os.path.join(self.run_dir, "coordinator.addr")
        while not _read(addr):
            if self._launcher.poll() is not None:
                self._raise_failure()
            if time.monotonic() > deadline:
                raise JobError(f"{self.run_dir}: the coordinator did not start within {timeout:g} s", self.run_dir)
            time.sleep(POLL_S / 2)

    # ---- the end -------------------------------------------------------------------------------

    def events(self, kind: Optional[str] = None) -> List[Dict[str, Any]]:
        """The job's events so far (of `kind` only), in order; [] without a run folder."""
        if self.run_dir is None:
            return []
        reader = self._tree.load_script_module("events").EventReader(self.run_dir)
        return [e for e in reader.poll() if kind is None or e["event"] == kind]

    @property
    def running(self) -> bool:
        """A job this Job started: its launcher is still running."""
        return self._launcher is not None and self._launcher.poll() is None

    def wait(self, timeout: Optional[float] = None, *, progress: bool = False) -> Union[Run, JoinedRun]:
        """Waits for the job's end and returns its Run; for a job known only by its coordinator, waits for the
        workers attach() started (they end with the job) and returns a JoinedRun (the newest status, their reports).
        `progress` shows a progress bar (from the run folder's events, or the coordinator's status every second).
        Raises JobFailedError (the job's job_failed event), InvalidJobError (refused at start), WorkerError (every
        worker failed: those of a job this Job started, or those it attached to a job it joined), TimeoutError; on
        any exception (Ctrl-C included) what this Job started is stopped first (attached workers leave the job)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(progress)
        events = self._tree.load_script_module("events").EventReader(self.run_dir) if self.run_dir else None
        seen = 0
        status: Dict[str, Any] = {}
        next_status = 0.0
        try:
            while True:
                if events is not None:
                    all_events = events.poll()
                    for e in all_events[seen:]:
                        if e["event"] == "progress":
                            bar.update(e)
                    seen = len(all_events)
                finished = self._finished(all_events if events is not None else [])
                errors = self._attached_failure()
                if errors is not None and not (finished and self.run_dir is not None):  # else the job's own end
                    raise WorkerError("every worker this host lent failed: " + "; ".join(errors), errors,
                                      self.run_dir)
                if finished:
                    break
                if events is None and time.monotonic() >= next_status:
                    next_status = time.monotonic() + STATUS_S
                    try:
                        status = self.status(events=0, timeout_s=2)
                        bar.update(_progress_event(status))
                    except CommandError:
                        pass  # not serving yet, or ended: the attached workers' ends say which
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{self!r} did not end within {timeout:g} s")
                time.sleep(POLL_S)
        except BaseException:
            bar.close()
            self.close()
            raise
        bar.close()
        if self._launcher is not None:
            self._launcher.stop()  # ended: what it may have left in its group
        for group in self._attached:  # they end with the job: bounded
            try:
                group.wait(timeout=60)
            except subprocess.TimeoutExpired:
                group.stop()
        if self.run_dir is None:
            return JoinedRun(self.coordinator, status, self.reports(), self._log_dir)
        if self._launcher is not None and self._launcher.returncode != 0:
            self._raise_failure()
        failed = [e for e in self.events("job_failed")]
        if failed and not os.path.exists(os.path.join(self.run_dir, "result.json")):
            raise JobFailedError(failed[-1].get("error", ""), failed[-1].get("code", ""), self.run_dir)
        return Run(self.run_dir, self._module, tree=self._tree)

    def _finished(self, events: List[Dict[str, Any]]) -> bool:
        if self._launcher is not None:
            return self._launcher.poll() is not None
        if self.run_dir is None:
            return all(g.poll() is not None for g in self._attached)
        ended = any(e["event"] in ("job_finished", "job_failed") for e in events)
        if any(e["event"] == "job_failed" for e in events):
            return True
        # local.sh writes the exports after the coordinator's result.
        return ended and os.path.exists(os.path.join(self.run_dir, "result.json")) and (
            os.path.exists(os.path.join(self.run_dir, "model.pt")))

    def _raise_failure(self) -> None:
        """The launcher ended without success: raises the error that says why, from the run folder's files."""
        rc = self._launcher.wait()
        stderr = _read(os.path.join(self.run_dir, "logs", "launcher.err")).strip()
        failed = self.events("job_failed")
        if failed:
            raise JobFailedError(failed[-1].get("error", ""), failed[-1].get("code", ""), self.run_dir)
        if rc == 2:
            raise InvalidJobError(stderr or "the job was refused (exit code 2)", self.run_dir)
        errors = []
        logs = os.path.join(self.run_dir, "logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if name.startswith("worker") and name.endswith(".json"):
                try:
                    with open(os.path.join(logs, name)) as f:
                        report = json.load(f)
                except (OSError, ValueError):
                    continue
                if report.get("outcome") == "failed" and report.get("error"):
                    errors.append(report["error"])
        if errors:
            raise WorkerError("every worker failed: " + "; ".join(errors), errors, self.run_dir)
        if rc < 0 or rc == 130:
            raise JobError(f"the job was stopped (launcher exit {rc})", self.run_dir)
        raise JobError(stderr or f"the job failed (launcher exit {rc})", self.run_dir)

    def stop(self) -> None:
        """Stops what this Job started: the job itself (Trainer.start) and the attached workers (they leave
        gracefully first)."""
        for group in self._attached:
            group.stop()
        if self._launcher is not None:
            self._launcher.stop()

    def close(self) -> None:
        """stop(), and the Job's temporary files removed."""
        self._finalizer()

    def processes(self) -> List[int]:
        """The pids of every process this Job started that still runs (the job's process group, attached
        workers)."""
        groups = ([self._launcher] if self._launcher else []) + self._attached
        return [pid for g in groups for pid in g.members()]


def _stop_all(launcher: Optional[ProcessGroup], attached: List[ProcessGroup], tmp) -> None:
    for group in attached:
        group.stop()
    if launcher is not None:
        launcher.stop()
    if tmp is not None:
        tmp.cleanup()


def _read_report(path: str) -> Optional[Dict[str, Any]]:
    """A worker's report file as a dict, or None (not written: the worker runs, or was killed)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read().strip() if path.endswith(".addr") else f.read()
    except OSError:
        return ""
