"""Slurm: the servers of a job in one Slurm job, its workers as preemptible Slurm jobs, on a cluster of hosts.

The test runs a real Slurm as root, every file in a temporary folder, on four hosts in network
namespaces (tests/integration/netns.py): slurmctld on host "ctl", a slurmd on each of the nodes
n1, n2 and n3 (one CPU each; each node's host name is its own and resolves on every host), munged
beside them. Partitions: "main" (n1: the servers; never preempted), "train" (n2, n3: workers;
PreemptMode=REQUEUE) and "serve" (n2, n3; a higher PriorityTier that preempts train). It runs the
mlp job through launcher/slurm/servers.sbatch on n1 (which binds and advertises n1's address)
and a 2-task array of launcher/slurm/worker.sbatch (one worker on n2, one on n3), then submits a
job on "serve" that needs one worker's CPU: Slurm preempts that worker (SIGTERM: a graceful
leave), requeues it, and the requeued worker attaches again. The job ends on the digest of the
same job run undisturbed by local.sh, and the workers pushed nothing through shared memory: the
hosts talked through the network only.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import netns
from harness import (ENV, MLP, ROOT, RunDirTest, logs, poll_until, read_events, read_metrics, read_report,
                     read_result, skip_or_fail, wait_for_event)

SERVERS = os.path.join(ROOT, "launcher", "slurm", "servers.sbatch")
WORKER = os.path.join(ROOT, "launcher", "slurm", "worker.sbatch")
STEPS = 500
EXTRA = [f"--steps={STEPS}", "--test_limit=500"]
SLOWDOWN = "15"       # the Slurm run's workers (timing only): the preemption lands mid-run (holds make sure of it)
GRACE_S = 20          # the train partition's GraceTime: the worker must be gone well before it
CRED_EXPIRE_S = 5     # a requeued job may start again cred_expire + 1 s after its requeue (default 120)
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")
HOSTS = ["ctl", "n1", "n2", "n3"]  # slurmctld's host, then the nodes (host i of the Network)
SERVERS_NODE, WORKER_NODES = "n1", "n2,n3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cgroup_mounts():
    """A shell command that mounts under /sys/fs/cgroup the cgroup hierarchies this machine has there (a tmpfs of
    v1 controllers, or the v2 unified hierarchy), as they are mounted in this process's mount namespace."""
    cmds = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            where, fstype, options = fields[4], fields[sep + 1], fields[sep + 3]
            if not (where == "/sys/fs/cgroup" or where.startswith("/sys/fs/cgroup/")):
                continue
            if fstype == "tmpfs":
                cmds.append(f"mount -t tmpfs -o mode=755 tmpfs {where}")
            elif fstype in ("cgroup", "cgroup2"):
                hierarchy = ",".join(o for o in options.split(",") if o not in ("rw", "ro"))  # cpu, name=systemd
                cmds.append(f"mkdir -p {where} && mount -t {fstype} {'-o ' + hierarchy if hierarchy else ''} "
                            f"{fstype} {where}")
    return " && ".join(cmds) or "true"


class SlurmCluster:
    """A Slurm cluster in a temporary folder on the hosts of `net` (a netns.Network of HOSTS): munged with its own
    key and socket on this machine, slurmctld on host 0 and a slurmd on every other host, in the foreground
    (processes this object and the Network own). Slurm's commands run on host 0. close() cancels every job, waits
    for them to end, stops the daemons and removes the folder."""

    def __init__(self, net):
        self.net = net
        self.dir = tempfile.mkdtemp(prefix="eps-slurm-")
        os.chmod(self.dir, 0o755)  # munged wants its socket's folder searchable by all
        self.procs = []
        self.jobs = []
        self.nodes = net.names[1:]
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(ENV, SLURM_CONF=self.conf)
        self.env.pop("EPS_ROOT", None)  # the scripts find the repository from the path given to sbatch
        for sub in ["state", "spool", *[f"spool/{n}" for n in self.nodes]]:
            os.makedirs(os.path.join(self.dir, sub))
        d = self.dir
        nodes = "".join(f"NodeName={n} NodeAddr={net.address(i + 1)} CPUs=1 RealMemory=1000 State=UNKNOWN\n"
                        for i, n in enumerate(self.nodes))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=epstest
SlurmctldHost={net.names[0]}({net.address(0)})
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock,cred_expire={CRED_EXPIRE_S}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=10
MinJobAge=2
{nodes}PartitionName=main Nodes={SERVERS_NODE} PriorityTier=1 PreemptMode=OFF Default=YES MaxTime=INFINITE State=UP
PartitionName=train Nodes={WORKER_NODES} PriorityTier=1 PreemptMode=REQUEUE GraceTime={GRACE_S} MaxTime=INFINITE State=UP
PartitionName=serve Nodes={WORKER_NODES} PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
""")
        try:
            key = os.path.join(d, "munge.key")
            subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30,
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            self.daemon("munged", ["munged", "-F", f"--key-file={key}", f"--socket={d}/munge.sock",
                                   f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                                   f"--seed-file={d}/munged.seed"])
            poll_until(lambda: True if os.path.exists(f"{d}/munge.sock") else self.check_daemons(), 30,
                       "munged did not create its socket")
            self.daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf], host=0)
            for i, n in enumerate(self.nodes):
                # `ip netns exec` gives the host a sysfs of its own, without the cgroup filesystems slurmd's cgroup
                # plugin looks for: mount this machine's there (the host's mount namespace is its own).
                self.daemon(f"slurmd-{n}", ["sh", "-c", cgroup_mounts() + ' && exec "$@"', "sh",
                                            "slurmd", "-D", "-f", self.conf], host=i + 1)
            poll_until(lambda: True if self.node_states() == ["idle"] * len(self.nodes) else self.check_daemons(),
                       60, "the nodes did not become idle")
        except BaseException:
            print(self.logs())
            self.close()
            raise

    def daemon(self, name, cmd, host=None):
        """Starts a daemon on this machine, or on Network host `host` (its host name, namespaces and address)."""
        log_path = os.path.join(self.dir, f"{name}.out")
        if host is not None:
            with open(log_path, "w") as log:
                p = subprocess.Popen(self.net.command(host, cmd), env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.procs.append((name, netns.HostProcess(p, name)))
            return
        with open(log_path, "w") as log:
            self.procs.append((name, subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)))

    def check_daemons(self):
        for name, p in self.procs:
            if p.poll() is not None:
                raise AssertionError(f"{name} exited with {p.returncode}:\n{self.logs()}")
        return None

    def run(self, *cmd, timeout=30):
        """Runs a Slurm command on slurmctld's host; its output, or AssertionError."""
        p = subprocess.run(self.net.command(0, cmd, pid_namespace=False), env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited with {p.returncode}: {p.stdout}")
        return p.stdout

    def node_states(self):
        """Every node's state, in node order (None for a node sinfo does not list), or None."""
        try:
            # One line per partition a node is in, each with the node's state.
            lines = self.run("sinfo", "-h", "-N", "-o", "%N %T").split("\n")
            states = dict(line.split() for line in lines if len(line.split()) == 2)
            return [states.get(n, "").rstrip("*") or None for n in self.nodes]
        except (AssertionError, subprocess.TimeoutExpired):
            return None

    def sbatch(self, *args):
        """Submits a job (sbatch --parsable ARGS); returns its id."""
        job = self.run("sbatch", "--parsable", *args).strip().split(";")[0]
        self.jobs.append(job)
        return job

    def queue(self):
        """{job id: state} of the jobs Slurm knows (array tasks as ARRAYJOB_TASK)."""
        out = self.run("squeue", "-h", "-o", "%i %T %r")
        return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.strip()}

    def job_field(self, job, field):
        out = self.run("scontrol", "show", "job", "-o", job)
        for line in out.splitlines():
            for kv in line.split():
                if kv.startswith(field + "="):
                    return kv[len(field) + 1:]
        return None

    def logs(self):
        out = []
        names = ["munged.out", "munged.log", "slurmctld.out", "slurmctld.log"]
        for n in self.nodes:
            names += [f"slurmd-{n}.out", f"slurmd-{n}.log"]
        for name in names:
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
        return "\n".join(out)

    def close(self, keep_logs_in=None):
        """Cancels the jobs, stops the daemons and removes the folder (its daemons' logs copied to keep_logs_in/slurm
        first, if given)."""
        try:
            if self.jobs and all(p.poll() is None for _, p in self.procs):
                subprocess.run(self.net.command(0, ["scancel", *self.jobs], pid_namespace=False), env=self.env,
                               timeout=30, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

                def ended():
                    try:
                        if self.queue():
                            return None
                    except (AssertionError, subprocess.TimeoutExpired):
                        return None
                    # Each slurmstepd removes its socket from its node's spool folder when it ends.
                    for n in self.nodes:
                        if [f for f in os.listdir(os.path.join(self.dir, "spool", n)) if f.startswith(n + "_")]:
                            return None
                    return True
                try:
                    poll_until(ended, 60, "the Slurm jobs did not end")
                except AssertionError as e:
                    print(e, file=sys.stderr)
        finally:
            for _, p in reversed(self.procs):
                if p.poll() is None:
                    p.terminate()
            for _, p in reversed(self.procs):
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=20)
            if keep_logs_in:
                keep = os.path.join(keep_logs_in, "slurm-daemons")
                os.makedirs(keep, exist_ok=True)
                for name in os.listdir(self.dir):
                    if name.endswith((".log", ".out", ".conf")):
                        shutil.copy(os.path.join(self.dir, name), keep)
            shutil.rmtree(self.dir, ignore_errors=True)


class SlurmPreemption(RunDirTest):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            skip_or_fail(self, "slurmctld and slurmd run here as root: run the test as root")
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            skip_or_fail(self, f"Slurm is not installed ({', '.join(missing)} missing): scripts/setup.sh installs "
                         "slurm-wlm and munge")
        why = netns.unavailable()
        if why:
            skip_or_fail(self, f"the cluster's hosts are network namespaces: {why}")
        self.net = self.cluster = None

    def tearDown(self):
        if self.cluster is not None:
            self.cluster.close(keep_logs_in=self.tmp)  # before the run dirs go: no job writes into them any more
        if self.net is not None:
            self.net.close()
        super().tearDown()

    def test_a_preempted_worker_leaves_is_requeued_attaches_again_and_the_digest_is_the_same(self):
        t_start = time.monotonic()
        _, _, reference = self.run_local("reference", MLP, servers=2, workers=1, extra=EXTRA)
        t_reference = time.monotonic() - t_start
        # 3 nodes of one CPU: the servers' job on n1, a worker on each of n2 and n3; the serve job needs one of
        # theirs.
        self.net = netns.Network(len(HOSTS), subnet="10.78.0", names=HOSTS)
        self.cluster = cluster = SlurmCluster(self.net)
        d = self.run_dir("slurm")
        servers = cluster.sbatch("-p", "main", "-n", "1", "-o", f"{d}/slurm-servers.out", SERVERS, "--job", MLP,
                                 "--servers", "2", "--workers", "2", "--run-dir", d, "--", *EXTRA)
        workers = cluster.sbatch("-p", "train", "-n", "1", "--array=0-1", "-o", f"{d}/slurm-worker-%A_%a.out",
                                 WORKER, "--run-dir", d, "--slowdown", SLOWDOWN, "--wait", "120")

        def servers_running():
            state = cluster.queue().get(servers)
            if state is None:
                raise AssertionError(f"the servers' job ended early:\n{read_file(f'{d}/slurm-servers.out')}\n"
                                     f"{logs(d)}")
            return None
        # Both workers compute a step before the preemption.
        wait_for_event(d, "step_completed", lambda e: len(e["ranges"]) == 2, timeout=90)
        servers_running()
        joined = {e["worker"]: e for e in read_events(d, "worker_joined")}
        self.assertEqual(len(joined), 2, joined)
        # servers.sbatch bound and advertised its node's address; a worker runs on each worker node.
        with open(f"{d}/coordinator.addr") as f:
            self.assertTrue(f.read().startswith(f"tcp://{self.net.address(HOSTS.index(SERVERS_NODE))}:"))
        self.assertEqual(sorted(e["host"].split(":")[0] for e in joined.values()), WORKER_NODES.split(","))

        # Slurm preempts a job this young only at its backfill pass, some 20 s after the serving job's submission
        # (docs/cluster.md): held before its last two steps (elasticps hold, from the servers' node), the job does
        # not end first however fast the host runs its steps, and still has a step to run after the leave.
        on_servers_node = self.net.command(HOSTS.index(SERVERS_NODE), [], pid_namespace=False)
        self.control(d, "hold", f"--from-step={STEPS - 2}", prefix=on_servers_node)
        t_submit = time.time()
        cluster.sbatch("-p", "serve", "-n", "1", "-o", f"{d}/slurm-serve.out", "--wrap", "sleep 3")
        left = wait_for_event(d, "worker_left", timeout=60)
        self.control(d, "hold", f"--from-step={STEPS - 1}", prefix=on_servers_node)  # one step more if held there
        # A graceful leave on Slurm's SIGTERM, not a crash.
        self.assertIn(left["worker"], joined)
        self.assertEqual((left["reason"], left["host_fault"]), ("SIGTERM", False), left)
        host = joined[left["worker"]]["host"]
        task = poll_until(lambda: preempted_task(d, workers, host), 30, f"no worker report names {host}")
        report = read_report(f"{d}/logs/slurm-worker-{task}.0.json")
        self.assertEqual((report["outcome"], report["worker_ids"]), ("left", [left["worker"]]), report)
        next_step = wait_for_event(d, "step_completed", lambda e: e["t"] > left["t"], timeout=30)
        # Held from here until the requeued worker is back: however fast the host runs the job's steps, it does not
        # end before the requeue.
        self.control(d, "hold", prefix=on_servers_node)

        # Requeued (Slurm's restart count), it starts again and attaches under a new id.
        rejoined = wait_for_event(d, "worker_joined", lambda e: e["t"] > left["t"], timeout=90)
        self.assertNotIn(rejoined["worker"], joined)
        wait_for_event(d, "worker_ready", lambda e: e["worker"] == rejoined["worker"], timeout=60)
        self.assertGreaterEqual(int(cluster.job_field(task, "Restarts") or 0), 1)
        self.control(d, "release", prefix=on_servers_node)

        def finished():
            result = read_result(d)
            if result is not None:
                return result
            return servers_running()
        result = poll_until(finished, 180, "the job did not finish")
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(d))
        self.assertGreaterEqual(result["workers_seen"], 3)
        # The preempted worker's VWs moved by its leave: nobody was declared dead.
        self.assertEqual(read_events(d, "worker_dead"), [])
        # Every worker ends when the job does (exit 0): the requeued one with outcome "done".
        again = read_report(f"{d}/logs/slurm-worker-{task}.1.json", timeout=60)
        self.assertEqual((again["outcome"], again["worker_ids"]), ("done", [rejoined["worker"]]), again)
        # Across hosts, through the network only: no push through shared memory.
        for report in [again] + [read_report(f"{d}/logs/slurm-worker-{workers}_{i}.0.json") for i in (0, 1)]:
            self.assertEqual(report["pushes"].get("shm", 0), 0, report)
        poll_until(lambda: True if not cluster.queue() else None, 60, "the Slurm jobs did not end")
        # The coordinator has exited (its job ended): metrics.csv is complete.
        self.assertSameTrainingCurve(read_metrics(d), read_metrics(self.run_dir("reference")),
                                     "metrics.csv against the reference's:")

        # For the benchmark notes (printed, never asserted).
        steps_between = next_step["step"] - left["step"]
        print(f"\nslurm preemption: serve job submitted -> worker_left {left['t'] - t_submit:.3f} s, "
              f"worker_left -> next step_completed (step {next_step['step']}, {steps_between} after the leave's) "
              f"{next_step['t'] - left['t']:.3f} s, serve job submitted -> next step_completed "
              f"{next_step['t'] - t_submit:.3f} s; requeued worker joined {rejoined['t'] - left['t']:.1f} s "
              f"after the leave; reference run {t_reference:.1f} s, test {time.monotonic() - t_start:.1f} s",
              flush=True)


def read_file(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def preempted_task(d, workers, host):
    """The array task (ARRAYJOB_TASK) whose first worker reported `host` ("NODE:PID"), from the reports in d/logs
    (the worker writes one when it ends); None while there is none."""
    for task in (f"{workers}_0", f"{workers}_1"):
        try:
            with open(f"{d}/logs/slurm-worker-{task}.0.json") as f:
                if json.load(f)["host"] == host:
                    return task
        except (FileNotFoundError, ValueError):
            pass
    return None


if __name__ == "__main__":
    unittest.main(verbosity=2)
