"""Trainer: a model and a job's options; fit() runs the job on this host through `elasticps train`, or lends this host's
workers to a running job (launcher/attach.sh)."""
import datetime
import os
import re
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _data
from ._process import ProcessGroup
from ._tree import Tree
from .errors import ArgumentError, JobError, ScriptError
from .job import Job, JoinedRun, Run

# The flags fit() sets from its own arguments, and the model's.
_FIT_FLAGS = frozenset({"model", "train_data", "train_labels", "test_data", "test_labels"})
# launcher options fit() passes to `elasticps train` (local.sh's, tools/cli_train.cc).
_LAUNCHER_OPTIONS = frozenset({"slowdowns", "devices", "worker_cpus", "server_cpus", "compute_cpus",
                               "checkpoint_every", "shard_threads", "supervise", "metrics", "metrics_host",
                               "secure"})
# What fit(coordinator=...) takes of attach.sh's options: the rest is the joined job's.
_JOIN_OPTIONS = frozenset({"device"})


def _flag_value(name: str, kind: str, value: Any) -> str:
    """A Python value as the text of the gflags flag --name of type `kind`; ArgumentError if it does not fit."""
    def wrong(expected: str) -> ArgumentError:
        return ArgumentError(f"{name}={value!r}: the job flag --{name} takes {expected}")
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise wrong("True or False")
        return "true" if value else "false"
    if kind in ("int32", "int64", "uint32", "uint64"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise wrong("an integer")
        if kind.startswith("u") and value < 0:
            raise wrong("an integer >= 0")
        bits = 32 if kind.endswith("32") else 64
        if not (-(1 << (bits - 1)) <= value < (1 << bits)):
            raise wrong(f"a {bits}-bit integer")
        return str(int(value))
    if kind == "double":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise wrong("a number")
        return repr(float(value))
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise wrong("a string")
    if "\n" in value:
        raise wrong("one line of text")
    return value


def _parse_flag(name: str, kind: str, text: str, where: str) -> Any:
    """A flag's text in a job file as the Python value of its gflags type."""
    try:
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if kind in ("int32", "int64", "uint32", "uint64"):
            return int(text)
        if kind == "double":
            return float(text)
    except ValueError:
        raise ArgumentError(f"{where}: --{name}={text}: not a {kind}") from None
    return text


def script_module(module):
    """torch.jit.script(module), or ScriptError with TorchScript's message (it names the line that fails)."""
    import torch
    try:
        return torch.jit.script(module)
    except Exception as e:  # noqa: BLE001 - TorchScript raises several kinds; all mean "cannot be scripted"
        raise ScriptError(f"{type(module).__name__} cannot be scripted (torch.jit.script): {e}") from None


class Trainer:
    """A model and the options of its job; fit() trains it with ElasticPS on this host and returns a Run.

    `model`: a torch.nn.Module (scripted here: ScriptError when it cannot be) or a built-in model's name ("mlp",
    "cnn", "cnn_bn", "resnet", "text_transformer", "text_hashed"). The keyword arguments are the job's flags
    (`coordinator --help`, docs/models.md): `schedule` is --lr_schedule, `steps` and `epochs` the job's length (fit may override them),
    any other job flag by its name (`momentum=0.9`, `eval_every=100`, `init_from=...`, `freeze="^conv"`). A name
    the coordinator does not define, or a value of the wrong type, raises ArgumentError here, before any process
    starts. `loss`: a torch.nn.Module loss (e.g. nn.CrossEntropyLoss(label_smoothing=0.1)) that the job uses
    instead of the default one (cross-entropy for integer labels, mean squared error for float ones).

    The binaries are those of `bin_dir`, else $ELASTICPS_BIN, $EPS_BIN, else the tree's build/bin (docs/python.md).
    Not thread-safe; the module is read (not changed) when fit() starts a job.
    """

    def __init__(self, model, *, optimizer: str = "adamw", lr: float = 1e-3, weight_decay: float = 0.01,
                 schedule: Optional[str] = None, loss=None, virtual_workers: int = 8, batch_per_vw: int = 16,
                 seed: int = 1, threads: int = 1, bin_dir: Optional[str] = None, **flags: Any):
        self._tree = Tree(bin_dir)
        known = self._tree.job_flags()
        options = dict(optimizer=optimizer, lr=lr, weight_decay=weight_decay, lr_schedule=schedule,
                       virtual_workers=virtual_workers, batch_per_vw=batch_per_vw, seed=seed, threads=threads)
        for name, value in flags.items():
            if name in _FIT_FLAGS:
                raise ArgumentError(f"{name}=: give the model as Trainer's first argument and the data to fit()"
                                    if name != "model" else "model=: give the model as Trainer's first argument")
            if name not in known:
                close = [k for k in known if _near(name, k)]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ArgumentError(f"{name}=: the job has no flag --{name}{hint}; `coordinator --help` lists them")
            options[name] = value
        self._flags: Dict[str, str] = {}
        for name, value in options.items():
            if value is not None:
                self._flags[name] = _flag_value(name, known[name], value)
        if isinstance(model, str):
            if loss is not None:
                raise ArgumentError("loss=: a built-in model has its own loss; give a torch.nn.Module to set one")
            self.module = None
            self.scripted = None
            self.model_name: str = model
        else:
            import torch
            if not isinstance(model, torch.nn.Module):
                raise ArgumentError(f"model: a torch.nn.Module or a built-in model's name, not {type(model).__name__}")
            self.module = model
            self.scripted = script_module(_with_loss(model, loss) if loss is not None else model)
            self.model_name = type(model).__name__.lower()
        self.run: Optional[Union[Run, JoinedRun]] = None  # the newest fit's
        self._job_data: Dict[str, str] = {}  # from_job: the job file's data flags

    def __repr__(self) -> str:
        return f"Trainer({self.model_name!r}, {' '.join(self.flags())})"

    @classmethod
    def from_job(cls, job_file: str, model=None, *, bin_dir: Optional[str] = None, **overrides: Any) -> "Trainer":
        """A Trainer for an existing job file (one --flag=value a line, e.g. examples/fashion_mnist_cnn.flags):
        its flags, with `overrides` (keyword arguments as the constructor's) over them; `model` replaces the file's
        --model. The file's data flags (--train_data, ...) are fit()'s data when it is given none. Every flag is
        checked as the constructor checks them (ArgumentError)."""
        tree = Tree(bin_dir)
        known = tree.job_flags()
        values: Dict[str, Any] = {}
        try:
            with open(job_file) as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ArgumentError(f"{job_file}: {e.strerror}") from None
        for number, line in enumerate(lines, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, eq, text = line.lstrip("-").partition("=")
            name = name.replace("-", "_")
            if name.startswith("no") and not eq and name[2:] in known:
                name, text, eq = name[2:], "false", "="
            if name not in known and name != "model":
                raise ArgumentError(f"{job_file} line {number}: the job has no flag --{name}")
            values[name] = _parse_flag(name, known.get(name, "string"), text if eq else "true",
                                       f"{job_file} line {number}")
        file_model = values.pop("model", "mlp")
        data = {k: values.pop(k) for k in list(values) if k in _FIT_FLAGS}
        values.update(overrides)
        for name in ("optimizer", "lr", "weight_decay"):  # the file's, or the coordinator's default
            values.setdefault(name, None)
        trainer = cls(model if model is not None else file_model, bin_dir=bin_dir, **values)
        trainer._job_data = data
        return trainer

    def flags(self, **overrides: Any) -> List[str]:
        """The job's flags as `elasticps train` takes them (--name=value), less the model and the data."""
        known = self._tree.job_flags()
        values = dict(self._flags)
        for name, value in overrides.items():
            if value is not None:
                values[name] = _flag_value(name, known[name], value)
        return [f"--{k}={v}" for k, v in values.items()]

    # ---- fit -------------------------------------------------------------------------------------

    def start(self, train=None, *, test=None, epochs: Optional[float] = None, steps: Optional[int] = None,
              servers: Optional[int] = None, workers: int = 1, run_dir: Optional[str] = None,
              coordinator: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
              **launcher: Any) -> Job:
        """Starts the job (as fit does), or joins the running one at `coordinator` (as fit does), and returns at
        once: a Job that owns the processes it started (wait() for the Run, close() to stop them). Raises
        ArgumentError before any process starts."""
        if coordinator is not None or token is not None or token_file is not None:
            return self._join(coordinator, token, token_file, train=train, test=test, epochs=epochs, steps=steps,
                              servers=servers, workers=workers, run_dir=run_dir, launcher=launcher)
        servers = 1 if servers is None else servers
        for name, value in (("servers", servers), ("workers", workers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "servers" else 0):
                raise ArgumentError(f"{name}={value!r}: give a number >= {1 if name == 'servers' else 0}")
        for name in launcher:
            if name not in _LAUNCHER_OPTIONS:
                raise ArgumentError(f"{name}=: fit() takes the launcher options {', '.join(sorted(_LAUNCHER_OPTIONS))}")
        train_data = _data.check(train, "train") if train is not None else None
        test_data = _data.check(test, "test") if test is not None else None
        if train_data is not None and test_data is not None:
            _data.same_sample_shape(train_data, test_data)
        if self.scripted is not None and train_data is not None and train_data.x is not None:
            _dry_run(self.scripted, train_data.x, train_data.y)
        if epochs is not None and steps is None:
            steps = 0  # the job's length from epochs (--steps=0), whatever the Trainer's steps
        flags = self.flags(steps=steps, epochs=epochs)

        run_dir = os.path.abspath(run_dir or _fresh_run_dir(self._flags.get("job_id", self.model_name)))
        inputs = os.path.join(run_dir, "inputs")
        os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
        if self.scripted is not None:
            os.makedirs(inputs, exist_ok=True)
            model_path = os.path.join(inputs, "module.pt")
            self.scripted.save(model_path)
            flags.insert(0, f"--model={model_path}")
        else:
            flags.insert(0, f"--model={self.model_name}")
        if train is None and test is None:
            flags += [f"--{k}={v}" for k, v in self._job_data.items()]
        for role, prepared in (("train", train_data), ("test", test_data)):
            if prepared is not None:
                for what, path in _data.write(prepared, inputs, role).items():
                    flags.append(f"--{role}_{what}={path}")
        if not any(f.startswith("--job_id=") for f in flags):
            flags.append(f"--job_id={os.path.basename(run_dir)}")
        args = [self._tree.binary("elasticps"), "train", "--run-dir", run_dir, "--servers", str(servers),
                "--workers", str(workers)]
        for name, value in launcher.items():
            spelled = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                if value:
                    args.append(spelled)
            else:
                args += [spelled, str(value)]
        for stale in ("result.json", "model.pt", "model.script.pt", "model.safetensors", "metrics.csv"):
            if os.path.exists(os.path.join(run_dir, stale)):
                os.remove(os.path.join(run_dir, stale))
        group = ProcessGroup(args + flags, self._tree.env(), os.path.join(run_dir, "logs", "launcher.out"),
                             os.path.join(run_dir, "logs", "launcher.err"))
        return Job(run_dir, tree=self._tree, _launcher=group, _module=self.module)

    def fit(self, train=None, *, test=None, epochs: Optional[float] = None, steps: Optional[int] = None,
            servers: Optional[int] = None, workers: int = 1, run_dir: Optional[str] = None,
            coordinator: Optional[str] = None, token: Optional[str] = None, token_file: Optional[str] = None,
            progress: bool = True, **launcher: Any) -> Union[Run, JoinedRun]:
        """Trains the model on `train` and returns the Run; or, given `coordinator`, lends this host's workers to a
        running job and watches it to its end.

        `train`, `test`: (x, y) NumPy arrays or tensors (written as NPY files under RUN_DIR/inputs/), a data file
        (NPY, CSV, IDX, TSV/JSONL text: docs/data.md) or (data_path, labels_path); None: the job's own data
        (--data_dir's Fashion-MNIST). `servers` shards (default 1) and `workers` workers run on this host
        (`elasticps train`); `run_dir` defaults to a fresh runs/JOB_ID-TIME. `launcher`: local.sh's options
        (checkpoint_every=10, supervise=True, ...). `progress`: a progress bar (tqdm when installed).

        `coordinator`: join a job that runs elsewhere instead (launcher/attach.sh per worker): its coordinator's
        endpoint ("tcp://HOST:PORT") with its `token` (the text) or `token_file`, or its run folder (this host or a
        shared filesystem: its coordinator.addr and token). The job is its coordinator's: its model, data, flags
        and length (this Trainer's flags and data are not sent; no train, test, steps, epochs, servers); `workers`
        workers of this host join it (`device="cuda:0"` for a GPU), writing their logs and reports to `run_dir`
        (default: the job's run folder's logs/, or a fresh runs/joined-TIME). Returns the job's Run when joined by
        its run folder (the module is this Trainer's, for run.model()), else a JoinedRun (its newest status and
        the workers' reports; the digest is in the job's run folder).

        Raises ArgumentError (bad arguments: before any process starts), InvalidJobError (the coordinator refused
        the job), JobFailedError (it failed while running: the job's reason), WorkerError (every worker failed).
        Ctrl-C stops the job and every process it started (joined: this host's workers leave the job, which goes
        on), then raises KeyboardInterrupt.
        """
        job = self.start(train, test=test, epochs=epochs, steps=steps, servers=servers, workers=workers,
                         run_dir=run_dir, coordinator=coordinator, token=token, token_file=token_file, **launcher)
        with job:
            self.run = job.wait(progress=progress)
        return self.run

    def _join(self, coordinator, token, token_file, *, train, test, epochs, steps, servers, workers, run_dir,
              launcher: Dict[str, Any]) -> Job:
        """start() for a running job: the arguments checked, then Job.attach."""
        if coordinator is None:
            raise ArgumentError(f"{'token' if token is not None else 'token_file'}=: only with coordinator= (a running "
                                "job's endpoint)")
        for name, value in (("train", train), ("test", test), ("steps", steps), ("epochs", epochs),
                            ("servers", servers)):
            if value is not None:
                raise ArgumentError(f"{name}=: a joined job has its own data, length and shards (its coordinator's "
                                    "flags); fit(coordinator=...) lends it workers only")
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ArgumentError(f"workers={workers!r}: give a number >= 1 of workers to lend the job")
        for name in launcher:
            if name not in _JOIN_OPTIONS:
                raise ArgumentError(f"{name}=: a joined job's launcher set it; fit(coordinator=...) takes "
                                    f"{', '.join(sorted(_JOIN_OPTIONS))}")
        try:
            coordinator = os.fspath(coordinator)
        except TypeError:
            raise ArgumentError(f"coordinator={coordinator!r}: an endpoint (tcp://HOST:PORT) or a run folder") from None
        if "://" in coordinator:
            if not re.fullmatch(r"[a-z]+://\S+", coordinator):
                raise ArgumentError(f"coordinator={coordinator!r}: not an endpoint like tcp://HOST:PORT")
            if (token is None) == (token_file is None):
                raise ArgumentError("coordinator=: give the job's token (token=, its text) or its file (token_file=), "
                                    "one of them")
            if token_file is not None:
                token_file = os.fspath(token_file)
                if not os.path.isfile(token_file) or os.path.getsize(token_file) == 0:
                    raise ArgumentError(f"token_file={token_file!r}: no such file, or it is empty")
            elif not isinstance(token, str) or not token.strip() or "\n" in token.strip():
                raise ArgumentError("token=: the job's token, one line of text")
        else:
            if not os.path.isfile(os.path.join(coordinator, "coordinator.addr")):
                raise ArgumentError(f"coordinator={coordinator!r}: not an endpoint like tcp://HOST:PORT, nor the run "
                                    "folder of a running job (no coordinator.addr)")
            if token is not None or token_file is not None:
                raise ArgumentError(f"coordinator={coordinator!r}: a run folder holds its token; give none")
        if run_dir is None and "://" in coordinator:
            run_dir = _fresh_run_dir("joined")
        job = Job(coordinator, token if token is not None else token_file, tree=self._tree, log_dir=run_dir,
                  _module=self.module)
        try:
            job.attach(workers, device=launcher.get("device", "cpu"))
        except BaseException:
            job.close()
            raise
        return job

    def evaluate(self, data, **kwargs: Any) -> Dict[str, Any]:
        """The newest fit's model on `data`: Run.evaluate (`elasticps evaluate`)."""
        return self._fitted().evaluate(data, **kwargs)

    def predict(self, x, **kwargs: Any) -> np.ndarray:
        """The newest fit's model's probabilities on the samples `x`: Run.predict (`elasticps predict`)."""
        return self._fitted().predict(x, **kwargs)

    def _fitted(self) -> Union[Run, JoinedRun]:
        if self.run is None:
            raise JobError("the Trainer has not fitted a model yet: call fit() first")
        return self.run


def _near(a: str, b: str) -> bool:
    """Names one edit apart, or the same with dashes for underscores."""
    a = a.replace("-", "_")
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _fresh_run_dir(job_id: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join("runs", f"{job_id}-{stamp}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def _with_loss(module, loss):
    """The module with an exported loss(output, target) that calls `loss`: a subclass of its class sharing its
    parameters and children, with `loss` as one more child (it adds no parameter or buffer the job would train)."""
    import torch
    if not isinstance(loss, torch.nn.Module):
        raise ArgumentError(f"loss=: a torch.nn.Module (e.g. torch.nn.CrossEntropyLoss()), not {type(loss).__name__}")
    if list(loss.parameters()) or [b for b in loss.buffers() if b is not None]:
        raise ArgumentError("loss=: a loss with parameters or buffers (e.g. class weights) is not supported: put "
                            "it in the module's own loss() method")
    base = type(module)

    def loss_method(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.elasticps_loss(output, target)
    sub = type(base.__name__, (base,), {"loss": torch.jit.export(loss_method),
                                        "__module__": base.__module__})
    clone = base.__new__(sub)
    clone.__dict__ = dict(module.__dict__)
    clone._modules = type(module._modules)(module._modules)
    clone._modules["elasticps_loss"] = loss
    return clone


def _dry_run(scripted, x: np.ndarray, y: np.ndarray) -> None:
    """The module's forward on the first two samples, in eval mode (no buffer or random state changes): its
    output must fit the labels (docs/models.md, the worker's dry run), else ArgumentError."""
    import torch
    batch = torch.from_numpy(np.ascontiguousarray(x[:2]))
    was_training = scripted.training
    scripted.eval()
    try:
        with torch.no_grad():
            out = scripted(batch)
    except Exception as e:  # noqa: BLE001 - the module's own error
        raise ArgumentError(f"the model's forward fails on train's first samples, of shape "
                            f"{_data.shape_text(batch.shape)} {batch.dtype}: {e}") from None
    finally:
        scripted.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise ArgumentError(f"the model's forward returns {type(out).__name__}, not a tensor")
    n = batch.shape[0]
    if y.dtype == np.int64:
        if out.dim() != 2 or out.shape[0] != n:
            raise ArgumentError(f"train: integer labels (classes) need an output of shape [batch, classes]; the "
                                f"model gives {_data.shape_text(out.shape)} for {_data.shape_text(batch.shape)}")
        if int(y.max()) >= out.shape[1]:
            raise ArgumentError(f"train y: class {int(y.max())}, but the model's output has {out.shape[1]} classes")
    elif tuple(out.shape[1:]) != tuple(y.shape[1:]):
        raise ArgumentError(f"train: float targets of shape {_data.shape_text(y.shape[1:])} per sample, but the "
                            f"model gives {_data.shape_text(out.shape[1:])}")
