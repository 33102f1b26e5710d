"""The exceptions of the elasticps package: every one is a JobError carrying the job's own message."""
from typing import List, Optional


class JobError(Exception):
    """Something about a job went wrong. `message` is what the job (or the check that refused it) said;
    `run_dir` is the job's run folder when there is one."""

    def __init__(self, message: str, run_dir: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.run_dir = run_dir


class ArgumentError(JobError, ValueError):
    """A bad argument found in Python, before any process started: an unknown option, a value of the wrong
    type, data of the wrong shape. The message names the argument."""


class ScriptError(ArgumentError):
    """The torch.nn.Module cannot be scripted (torch.jit.script's message, which names the line)."""


class InvalidJobError(JobError):
    """The job's coordinator (or the launcher) refused the job before it ran: a flag's value, a file, the model
    (`elasticps train` exit code 2). The message is theirs."""


class JobFailedError(JobError):
    """The job failed while it ran (`job_failed` in events.jsonl): `code` is the status code's name
    (e.g. INVALID_ARGUMENT), the message the job's `error`."""

    def __init__(self, message: str, code: str = "", run_dir: Optional[str] = None):
        super().__init__(message, run_dir)
        self.code = code


class WorkerError(JobError):
    """Every worker failed before the job started (each worker's report's `error`, docs/events.md)."""

    def __init__(self, message: str, errors: Optional[List[str]] = None, run_dir: Optional[str] = None):
        super().__init__(message, run_dir)
        self.errors = list(errors or [])


class CommandError(JobError):
    """A command of the `elasticps` command line (status, hold, evaluate, predict, ...) failed; `returncode` is
    its exit code (1: no answer or an internal error, 2: bad input), the message its own."""

    def __init__(self, message: str, returncode: int = 1, run_dir: Optional[str] = None):
        super().__init__(message, run_dir)
        self.returncode = returncode
