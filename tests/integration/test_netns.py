"""A job over several hosts: network namespaces joined by a bridge (tests/integration/netns.py), every
process in a pid namespace of its own, so that workers and shards talk over the network only.

One run of the mlp job on five hosts (the coordinator and shard 0, shard 1, three workers) lives
through a worker's link cut (declared dead, its VWs move; restored, it registers again and is
ready), a worker's link delayed by 20 ms (where the kernel has netem) and rate-limited, and a
shard partitioned for less than the timeouts (the job stalls, then goes on), and ends on the
digest of the undisturbed one-host run. Needs root.
"""
import contextlib
import os
import shutil
import subprocess
import time
import unittest

from harness import BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, poll_until, read_events, read_report, read_result, \
    read_text, requires, wait_for_event, wait_for_file
import netns

STEPS = 300
EXTRA = [f"--steps={STEPS}", "--test_limit=500"]
HEARTBEAT_TIMEOUT_MS = 1500
SLOWDOWN = 12  # each VW idles 11 x its compute time: the run lasts long enough for every phase
_reference = {}
WHY_NOT = netns.unavailable()
SSH_SH = os.path.join(ROOT, "launcher", "ssh.sh")
SSHD = "/usr/sbin/sshd"
SSH_PORT = 2222  # each host's own (a network namespace has its own ports)
WHY_NOT_SSH = WHY_NOT or next((f"needs {t} (openssh-server, openssh-client)" for t in (SSHD, "ssh", "ssh-keygen")
                               if shutil.which(t) is None), None)


class ReferenceTest(RunDirTest):
    """Tests that end on the digest of the undisturbed one-host run of the job (1 worker, 2 shards), made once
    for the module, in the background while a test runs."""

    def start_reference(self):
        if "digest" in _reference:
            return None
        d = self.run_dir("reference")
        return d, self.start([LOCAL, "--job", MLP, "--servers", "2", "--workers", "1", "--run-dir", d, "--", *EXTRA],
                             f"{self.tmp}/reference.out")

    def reference(self, started):
        """(digest, the reference worker's report), once the run start_reference started is over."""
        if started is not None:
            d, p = started
            self.assertEqual(p.wait(timeout=300), 0, f"the reference run failed:\n{logs(d)}")
            _reference["digest"] = read_result(d)["params_sha256"]
            _reference["report"] = read_report(os.path.join(d, "logs", "worker0.json"))
        return _reference["digest"], _reference["report"]


@requires(not WHY_NOT, f"hosts in network namespaces: {WHY_NOT}")
class MultiHost(ReferenceTest):
    def test_a_job_on_five_hosts_lives_through_a_cut_a_delay_and_a_partition(self):
        ref = self.start_reference()  # meanwhile: the workers here mostly idle (--slowdown)
        d = self.run_dir("hosts")
        os.makedirs(f"{d}/logs")
        token = f"{d}/token"
        with open(token, "w") as f:
            f.write("netns-test-token\n")
        with netns.Network(5, names=["coord", "shardhost", "wa", "wb", "wc"]) as net:
            coord_host, shard_host, workers = 0, 1, [2, 3, 4]
            coord = net.popen(coord_host, [f"{BIN}/coordinator", f"--flagfile={MLP}", *EXTRA, "--shards=2",
                                           "--workers=3", f"--run_dir={d}", f"--addr_file={d}/coordinator.addr",
                                           f"--token_file={token}", f"--bind=tcp://{net.address(coord_host)}:0",
                                           f"--heartbeat_timeout_ms={HEARTBEAT_TIMEOUT_MS}"],
                              f"{d}/logs/coordinator.log", env=ENV)
            addr = wait_for_file(f"{d}/coordinator.addr", proc=coord)
            self.assertEqual(addr.rsplit(":", 1)[0], f"tcp://{net.address(coord_host)}")
            for s, host in enumerate([coord_host, shard_host]):
                net.popen(host, [f"{BIN}/shard", f"--coordinator={addr}", f"--shard_id={s}", f"--token_file={token}",
                                 f"--bind=tcp://{net.address(host)}:0", f"--addr_file={d}/shard{s}.addr"],
                          f"{d}/logs/shard{s}.log", env=ENV)
            for i, host in enumerate(workers):
                net.popen(host, [f"{BIN}/worker", f"--coordinator={addr}", f"--token_file={token}",
                                 f"--slowdown={SLOWDOWN}", f"--report_file={d}/logs/worker{i}.json"],
                          f"{d}/logs/worker{i}.log", env=ENV)

            def event(kind, predicate=None, timeout=60):
                return wait_for_event(d, kind, predicate, timeout, proc=coord.popen)

            def step_after(t, timeout=60):
                """The first step completed after time t."""
                return event("step_completed", lambda e: e["t"] > t, timeout)

            # Every shard registered at its host's address; every worker under its host's name.
            for s, host in enumerate([coord_host, shard_host]):
                e = event("shard_registered", lambda e, s=s: e["shard"] == s)
                self.assertEqual(e["address"].rsplit(":", 1)[0], f"tcp://{net.address(host)}", e)
            joined = {net.names[h]: event("worker_joined", lambda e, h=h: e["host"].startswith(net.names[h] + ":"))
                      for h in workers}
            step_after(0, timeout=120)

            # 1. Worker wa's link is cut: it is declared dead and its VWs move; the others go on.
            first = joined["wa"]
            net.cut(workers[0])
            dead = event("worker_dead", lambda e: e["worker"] == first["worker"], timeout=30)
            self.assertEqual(dead["cause"], "missed_heartbeats", dead)
            self.assertGreaterEqual(dead["silent_ms"], HEARTBEAT_TIMEOUT_MS, dead)
            moved = event("assignment", lambda e: e["t"] >= dead["t"], timeout=30)
            self.assertNotIn(first["worker"], [r["worker"] for r in moved["ranges"]], moved)
            self.assertEqual(sum(r["hi"] - r["lo"] for r in moved["ranges"]), 8, moved)
            step_after(dead["t"])
            # Restored, the same process (host and pid) registers again under a new id and is ready.
            net.restore(workers[0])
            again = event("worker_joined", lambda e: e["t"] > dead["t"] and e["host"] == first["host"], timeout=60)
            self.assertEqual(again["pid"], first["pid"], again)
            self.assertNotEqual(again["worker"], first["worker"], again)
            event("worker_ready", lambda e: e["worker"] == again["worker"], timeout=60)

            # 2. Worker wb's link delayed by 20 ms each way (netem), then limited to 50 Mbit/s (tbf): steps complete.
            if net.has_netem():
                net.delay(workers[1], 20)
                t = time.time()
                for _ in range(3):
                    t = step_after(t)["t"]
                net.clear(workers[1])
            else:
                print("netem is not in this kernel: the 20 ms delay is left out (the rate limit is not)")
            net.rate(workers[1], "50mbit")
            t = time.time()
            for _ in range(3):
                t = step_after(t)["t"]
            net.clear(workers[1])

            # 3. Shard 1's host partitioned for 3 s (under every timeout): no step completes meanwhile, no worker
            # dies, and the job goes on once it is back.
            self.assertIsNone(coord.poll(), "the job ended before the partition: give it more steps")
            cut_at = time.time()
            net.cut(shard_host)
            time.sleep(3)
            restored_at = time.time()
            net.restore(shard_host)
            after = step_after(restored_at, timeout=60)
            during = [e["step"] for e in read_events(d, "step_completed") if cut_at + 0.5 < e["t"] < restored_at]
            self.assertEqual(during, [], "steps completed while shard 1 was cut off")
            self.assertEqual([e for e in read_events(d, "worker_dead") if e["t"] > cut_at], [])
            self.assertGreater(after["step"], 0)

            rc = coord.wait(timeout=300)
            self.assertEqual(rc, 0, logs(d))
            reports = [read_report(f"{d}/logs/worker{i}.json") for i in range(len(workers))]
        digest, ref_report = self.reference(ref)
        result = read_result(d)
        self.assertEqual(result["steps"], STEPS)
        self.assertEqual(result["params_sha256"], digest, logs(d))
        # Over the network only: no pull reply and no push went through shared memory on these hosts, while the
        # one-host reference used it (the check is not empty).
        self.assertGreater(ref_report["pushes"]["shm"], 0, ref_report)
        for i, r in enumerate(reports):
            self.assertEqual(r["outcome"], "done", r)
            self.assertEqual((r["pushes"]["shm"], r["pull_replies"]["shm"]), (0, 0), r)
            self.assertGreater(r["pushes"]["inline"], 0, r)
            self.assertEqual(r["host"].split(":")[0], net.names[workers[i]], r)
        self.assertEqual(reports[0]["worker_ids"], [first["worker"], again["worker"]], reports[0])
        self.assertGreaterEqual(reports[0]["reregistrations"], 1, reports[0])



@requires(not WHY_NOT_SSH, f"ssh launcher over hosts in network namespaces: {WHY_NOT_SSH}")
class SshLauncher(ReferenceTest):
    """launcher/ssh.sh from a login host to three hosts, each running an sshd of the test's own (a generated host
    key and authorized key) in its network, pid and mount namespace; each host's remote run dir is a tmpfs of its
    own, so what the processes write comes back over ssh or not at all."""

    @contextlib.contextmanager
    def ssh_hosts(self):
        """Yields (network, ssh config, remote run dir, the hosts' sshd processes); host 0 is the login host."""
        keys = self.run_dir("keys")
        os.chmod(keys, 0o700)
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{keys}/{key}"], check=True)
        shutil.copy(f"{keys}/id.pub", f"{keys}/authorized_keys")
        remote = self.run_dir("remote")  # every host mounts a tmpfs of its own over it
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        with open(f"{keys}/host_key.pub") as f:
            host_key = f.read().split()[:2]
        with netns.Network(4, names=["login", "hc", "hs", "hw"]) as net:
            sshds = {}
            with open(f"{keys}/known_hosts", "w") as known:
                for i in range(1, 4):
                    cfg = f"{keys}/sshd_config{i}"
                    with open(cfg, "w") as f:
                        f.write(f"Port {SSH_PORT}\nListenAddress {net.address(i)}\nHostKey {keys}/host_key\n"
                                f"AuthorizedKeysFile {keys}/authorized_keys\nPidFile none\nUsePAM no\n"
                                "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                                "KbdInteractiveAuthentication no\n")
                    sshds[i] = net.popen(i, ["sh", "-c", f'mount -t tmpfs eps-remote "$0" && exec {SSHD} -D -e -f "$1"',
                                             remote, cfg], f"{keys}/sshd{i}.log")
                    known.write(f"[{net.address(i)}]:{SSH_PORT} {' '.join(host_key)}\n")
            config = f"{keys}/ssh_config"
            with open(config, "w") as f:
                f.write(f"Host *\n  User root\n  Port {SSH_PORT}\n  IdentityFile {keys}/id\n  IdentitiesOnly yes\n"
                        f"  UserKnownHostsFile {keys}/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
                        "  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
            for i in range(1, 4):
                poll_until(lambda i=i: net.run(0, ["ssh", "-F", config, "-o", "BatchMode=yes", net.address(i),
                                                   "true"]).returncode == 0 or None, 30, f"no sshd on host {i}")
            yield net, config, remote, sshds

    def ssh_launcher(self, net, config, remote, d, extra):
        hostfile = f"{self.tmp}/hosts"
        with open(hostfile, "w") as f:
            f.write(f"# the launcher runs on {net.address(0)}\n{net.address(1)} coordinator shard:1\n"
                    f"{net.address(2)} shard  # shard 1\n{net.address(3)} worker:2\n")
        return net.popen(0, [SSH_SH, "--hostfile", hostfile, "--job", MLP, "--run-dir", d, "--remote-run-dir", remote,
                             "--ssh-config", config, "--", *extra], f"{self.tmp}/ssh.sh.out", env=ENV)

    def test_a_job_over_ssh_ends_on_the_one_host_digest_with_its_files_collected(self):
        ref = self.start_reference()
        d = self.run_dir("job")
        with self.ssh_hosts() as (net, config, remote, _):
            launcher = self.ssh_launcher(net, config, remote, d, EXTRA)
            rc = launcher.wait(timeout=300)
            out = read_text(f"{self.tmp}/ssh.sh.out")
            self.assertEqual(rc, 0, f"{out}\n{logs(d)}")
            addresses = [net.address(i) for i in range(4)]
        digest, _ = self.reference(ref)
        result = read_result(d)
        # sshd gives its processes an environment of its own (no OPENBLAS_CORETYPE of this one): the workers apply
        # the job's CPU kernels all the same.
        self.assertEqual(result["cpu_kernels"], "x86-64-v3")
        self.assertEqual((result["steps"], result["params_sha256"]), (STEPS, digest), logs(d))
        # Everything came back over ssh (this machine's view of the remote run dir stayed empty).
        self.assertEqual(os.listdir(remote), [])
        for name in ("coordinator.log", "shard0.log", "shard1.log", "worker0.log", "worker1.log"):
            self.assertTrue(os.path.getsize(f"{d}/logs/{name}") > 0, name)
        self.assertTrue(os.path.exists(f"{d}/metrics.csv") and os.path.exists(f"{d}/model.safetensors"))
        self.assertFalse(os.path.exists(f"{d}/store"), "the stores stay on their hosts")
        shards = {e["shard"]: e["address"].rsplit(":", 1)[0] for e in read_events(d, "shard_registered")}
        self.assertEqual(shards, {0: f"tcp://{addresses[1]}", 1: f"tcp://{addresses[2]}"})
        for i in range(2):
            report = read_report(f"{d}/logs/worker{i}.json")
            self.assertEqual(report["outcome"], "done", report)
            self.assertTrue(report["host"].startswith("hw:"), report)
            self.assertEqual(report["pushes"]["shm"], 0, report)
            with open(f"{d}/pids/worker{i}.pid") as f:
                self.assertEqual(f.read().split()[0], addresses[3])

    def test_b_sigterm_stops_every_remote_process(self):
        d = self.run_dir("stopped")
        with self.ssh_hosts() as (net, config, remote, sshds):
            launcher = self.ssh_launcher(net, config, remote, d, ["--steps=100000"])
            # Training has started: the coordinator's events, read in its host's own mount namespace.
            wait_for_event(f"/proc/{sshds[1].pid}/root{remote}", "step_completed", timeout=120, proc=launcher.popen)
            t0 = time.monotonic()
            launcher.terminate()
            self.assertEqual(launcher.wait(timeout=60), 130)
            self.assertLess(time.monotonic() - t0, 30)
            left = []
            for i in range(1, 4):
                for pid in net.run(0, ["ip", "netns", "pids", net.netns(i)]).stdout.split():
                    stat = read_text(f"/proc/{pid}/stat") or "(gone) X"
                    comm, state = stat.rsplit(")", 1)[0].split("(", 1)[1], stat.rsplit(")", 1)[1].split()[0]
                    if comm in ("coordinator", "shard", "worker"):
                        left.append((net.names[i], comm, pid, state))
            self.assertEqual(left, [], "processes ssh.sh started outlived it")
            # What they wrote came back all the same; the job did not finish.
            self.assertGreater(os.path.getsize(f"{d}/logs/coordinator.log"), 0)
            self.assertTrue(os.path.exists(f"{d}/events.jsonl"))
            self.assertIsNone(read_result(d))


if __name__ == "__main__":
    unittest.main(verbosity=2)
