"""A child process in a process group of its own, which ends with everything it started."""
import os
import signal
import subprocess
import time
from typing import List, NamedTuple, Optional


class ProcessGroup:
    """Starts `args` as the leader of a new session (so a terminal's Ctrl-C reaches only Python, which then stops
    it), with stdout and stderr to files. stop() asks it to end (SIGTERM: local.sh and attach.sh stop every process
    they started, a worker leaves gracefully), waits (bounded), then SIGKILLs the whole group. Not thread-safe."""

    def __init__(self, args: List[str], env, stdout_path: str, stderr_path: Optional[str] = None, cwd=None):
        self.args = list(args)
        out = open(stdout_path, "ab")
        err = open(stderr_path, "ab") if stderr_path else None
        try:
            self.proc = subprocess.Popen(self.args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err if err else subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
            if err:
                err.close()
        self.pgid = self.proc.pid  # the session's leader leads its process group

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.returncode

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def wait(self, timeout: Optional[float] = None) -> int:
        return self.proc.wait(timeout=timeout)

    def members(self) -> List[int]:
        """The pids of the processes still in the group (from /proc)."""
        return group_members(self.pgid)

    def stop(self, grace_s: float = 15.0) -> Optional[int]:
        """Ends the process and every process of its group; returns the leader's exit code (None if it was
        killed)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # What the leader left (or everything, if it hung): bounded, then SIGKILL.
        deadline = time.monotonic() + 5
        while self.members() and time.monotonic() < deadline:
            _signal_group(self.pgid, signal.SIGTERM)
            time.sleep(0.05)
        if self.members():
            _signal_group(self.pgid, signal.SIGKILL)
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return self.proc.returncode


def _signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> List[int]:
    """The pids of live processes (zombies excluded) whose process group is `pgid`."""
    return [p.pid for p in live_processes() if p.pgid == pgid]


class ProcessInfo(NamedTuple):
    """A process as /proc shows it: its id, its parent's, its process group's, and (when asked for) its command
    line, the arguments joined by spaces."""
    pid: int
    ppid: int
    pgid: int
    cmdline: str = ""


def live_processes(cmdline: bool = False) -> List[ProcessInfo]:
    """Every live process of the host (zombies, which have ended but not been reaped, excluded), from /proc;
    `cmdline`: with their command lines. A process that ends while it is read is left out."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) < 3 or fields[0] == "Z":
                continue
            line = ""
            if cmdline:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out.append(ProcessInfo(int(entry), int(fields[1]), int(fields[2]), line))
    return out
