"""Hosts in network namespaces, for tests of jobs spread over several hosts on one machine (root only).

A Network is N "hosts": network namespaces joined by a Linux bridge through veth pairs, host i at
SUBNET.(i + 2) on a /24 (loopback up, the host's end named eth0). Every process started on a host
runs in the host's network namespace and in a pid, mount and UTS namespace of its own (its /proc
shows only itself, its host name is the host's; every host's name resolves, to its address, on every
host: iproute2 mounts /etc/netns/NAMESPACE/hosts over /etc/hosts in the namespace): a shard can open no worker's /proc/<pid>/fd, so
workers and shards on different hosts talk through the network only, never through shared memory
(common/shm.h), as on separate machines. Files are the machine's: a run dir is shared by all hosts.

Operations on a host's link (its veth end on the bridge, and for delays and rates eth0 too, so
both directions are affected): cut / restore (the link down and up again), delay (tc netem; not
every kernel has it: has_netem()), rate (tc tbf), clear (no qdisc).

Every name (namespaces, links) starts with a prefix unique to the Network (FAMILY + 4 hex digits);
close() removes all of it, killing the processes still in the namespaces: call it in a finally or
a test's cleanup. It also runs at exit, and SIGTERM is turned into SystemExit while a Network is
open so that cleanups run. `python3 netns.py cleanup [PREFIX]` removes leftovers (of a test killed
by SIGKILL) of PREFIX, by default of every Network (FAMILY).
"""
import atexit
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

FAMILY = "epsn"
_open = set()


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=check)


def _tc(*args, check=True):
    return subprocess.run(["tc", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=check)


def unavailable():
    """Why Networks cannot be made here (a string), or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, a bridge)"
    for tool in ("ip", "tc", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux, hostname)"
    probe = f"{FAMILY}probe{os.getpid() % 1000}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _etc(netns):
    """The folder whose files `ip netns exec` mounts over /etc's in namespace `netns`."""
    return os.path.join("/etc/netns", netns)


def cleanup(prefix=FAMILY):
    """Kills every process in the namespaces whose names start with `prefix`, deletes those namespaces, their
    /etc/netns folders and every link whose name starts with it. Returns the names removed."""
    removed = []
    if os.path.isdir("/etc/netns"):
        for name in os.listdir("/etc/netns"):
            if name.startswith(prefix):
                shutil.rmtree(_etc(name), ignore_errors=True)
    r = _ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(prefix):
            continue
        pids = _ip("netns", "pids", name, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _ip("netns", "del", name, check=False)
        removed.append(name)
    r = _ip("-o", "link", "show", check=False)
    for line in r.stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        if name.startswith(prefix) and _ip("link", "del", name, check=False).returncode == 0:
            removed.append(name)
    return removed


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


class HostProcess:
    """A process started on a host (Network.popen). `pid` is its process id in this machine's pid namespace
    (it is pid 1 in its own); terminate() and kill() signal it there (kill() ends its namespace)."""

    def __init__(self, popen, name):
        self.popen = popen
        self.name = name
        self._pid = None

    @property
    def pid(self):
        if self._pid is None:
            # The process is the one child of unshare(1) (which forks it into the new pid namespace).
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    children = []
                    for tid in os.listdir(f"/proc/{self.popen.pid}/task"):
                        with open(f"/proc/{self.popen.pid}/task/{tid}/children") as f:
                            children += f.read().split()
                    if children:
                        self._pid = int(children[0])
                        break
                except FileNotFoundError:
                    break
                if self.popen.poll() is not None:
                    break
                time.sleep(0.01)
            if self._pid is None:
                raise RuntimeError(f"{self.name}: no process in its namespace (exit status {self.popen.poll()})")
        return self._pid

    def _signal(self, sig):
        if self.popen.poll() is not None:
            return
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, RuntimeError):
            pass

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def poll(self):
        return self.popen.poll()

    def wait(self, timeout=None):
        return self.popen.wait(timeout=timeout)

    @property
    def returncode(self):
        return self.popen.returncode


class Network:
    """`hosts` hosts on SUBNET.0/24 (subnet: the first three numbers), host i named names[i] (default h<i>) at
    SUBNET.(i + 2). Use as a context manager, or call close()."""

    def __init__(self, hosts, subnet="10.77.0", names=None):
        self.prefix = f"{FAMILY}{secrets.token_hex(2)}"
        self.subnet = subnet
        self.names = list(names) if names else [f"h{i}" for i in range(hosts)]
        assert len(self.names) == hosts and hosts <= 200
        self.bridge = f"{self.prefix}-br"
        self.procs = []
        self._netem = None
        self._closed = False
        _open.add(self)
        if len(_open) == 1 and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self):
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(i)} {n}\n" for i, n in enumerate(self.names))
        for i in range(len(self.names)):
            os.makedirs(_etc(self.netns(i)), exist_ok=True)
            with open(os.path.join(_etc(self.netns(i)), "hosts"), "w") as f:
                f.write(hosts)
        _ip("link", "add", self.bridge, "type", "bridge", "forward_delay", "0")
        _ip("link", "set", self.bridge, "up")
        for i in range(len(self.names)):
            ns, outer, inner = self.netns(i), self.link(i), f"{self.prefix}-i{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", self.bridge, "up")
            _ip("-n", ns, "link", "set", inner, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def netns(self, i):
        return f"{self.prefix}-{self.names[i]}"

    def link(self, i):
        """Host i's veth end on the bridge (in this machine's namespace)."""
        return f"{self.prefix}-v{i}"

    def address(self, i):
        return f"{self.subnet}.{i + 2}"

    def command(self, i, args, pid_namespace=True):
        """The command line that runs `args` on host i (its network namespace; with pid_namespace, in a pid, mount
        and UTS namespace of its own, under the host's name)."""
        cmd = ["ip", "netns", "exec", self.netns(i)]
        if pid_namespace:
            cmd += ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--kill-child",
                    "sh", "-c", 'hostname "$0" && exec "$@"', self.names[i]]
        return cmd + list(args)

    def popen(self, i, args, log_path, env=None):
        """Starts `args` on host i, stdout and stderr to log_path; returns a HostProcess (stopped by close())."""
        with open(log_path, "w") as log:
            p = subprocess.Popen(self.command(i, args), env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        proc = HostProcess(p, f"{self.names[i]}:{os.path.basename(args[0])}")
        self.procs.append(proc)
        return proc

    def run(self, i, args, timeout=30):
        """Runs `args` on host i (in its network namespace only) to the end; returns the CompletedProcess."""
        return subprocess.run(self.command(i, args, pid_namespace=False), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)

    # ---- the links

    def cut(self, i):
        """Host i loses its link: nothing goes in or out (its sockets stay open, as when a cable is pulled)."""
        _ip("link", "set", self.link(i), "down")

    def restore(self, i):
        _ip("link", "set", self.link(i), "up")

    def _qdisc(self, i, *spec):
        _tc("qdisc", "replace", "dev", self.link(i), "root", *spec)
        _tc("-n", self.netns(i), "qdisc", "replace", "dev", "eth0", "root", *spec)

    def has_netem(self):
        """Whether this kernel has the netem qdisc (delay() needs it)."""
        if self._netem is None:
            r = _tc("qdisc", "add", "dev", self.bridge, "root", "netem", "delay", "1ms", check=False)
            self._netem = r.returncode == 0
            if self._netem:
                _tc("qdisc", "del", "dev", self.bridge, "root", check=False)
        return self._netem

    def delay(self, i, ms):
        """Delays every packet to and from host i by `ms` milliseconds (each way)."""
        self._qdisc(i, "netem", "delay", f"{ms}ms")

    def rate(self, i, rate="10mbit", burst="32kbit", latency="50ms"):
        """Limits host i's traffic to `rate` each way (a token bucket)."""
        self._qdisc(i, "tbf", "rate", rate, "burst", burst, "latency", latency)

    def clear(self, i):
        """Removes host i's delay or rate limit."""
        _tc("qdisc", "del", "dev", self.link(i), "root", check=False)
        _tc("-n", self.netns(i), "qdisc", "del", "dev", "eth0", "root", check=False)

    # ---- the end

    def close(self):
        """Stops every process started on the hosts (SIGTERM, SIGKILL after 5 s), then removes every namespace and
        link of this Network. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            p.terminate()
        stop(self.procs, 5)
        cleanup(self.prefix)
        _open.discard(self)
        if not _open and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop(procs, grace_s):
    """Waits for the processes (Network.popen's) to end, all within grace_s seconds together, then kills what is
    left: kill() ends a process's pid namespace; if it has not ended 5 s later, the unshare itself is killed."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.popen.kill()


@atexit.register
def _close_all():
    for net in list(_open):
        net.close()


if __name__ == "__main__":
    if len(sys.argv) in (2, 3) and sys.argv[1] == "cleanup":
        prefix = sys.argv[2] if len(sys.argv) == 3 else FAMILY
        if not prefix.startswith(FAMILY):
            sys.exit(f"netns.py: a prefix starts with {FAMILY}")
        for name in cleanup(prefix):
            print("removed", name)
        sys.exit(0)
    sys.exit(f"usage: {sys.argv[0]} cleanup [PREFIX]   (removes leftovers of Networks; PREFIX default {FAMILY})")
