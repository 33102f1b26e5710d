"""CURVE (docs/security.md): a job started with `local.sh --secure` and a worker
attached with `attach.sh --secure-dir` end on the same parameters as the same
job in the clear; workers with an unknown key, no key, or a revoked key are
refused (exit 4, report outcome "refused") and the job is unaffected; and a
capture of the job's loopback traffic (tshark, as root) holds the token and
bytes of the final parameters in the clear, and neither with CURVE. A worker
whose key is revoked mid-run (its .pub removed) is refused on its open
connections (exit 4, outcome "refused") and the job ends on the same digest; so is
an idle pool worker at the pool scheduler, which serves the others on."""
import os
import shutil
import signal
import struct
import subprocess
import unittest

from harness import BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, poll_until, read_events, read_report, read_result, \
    read_text, requires, wait_for_event, wait_for_file  # noqa: F401

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
ELASTICPS = os.path.join(BIN, "elasticps")
STEPS = "--steps=60"
REFUSED = 4  # the worker's exit code for a refused key (docs/operations.md)


def port_of(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


def parameter_windows(path, n=8, size=32):
    """n byte strings of `size` bytes spread over the tensor data of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    header = struct.unpack("<Q", blob[:8])[0]
    data = blob[8 + header:]
    step = max(1, (len(data) - size) // n)
    return [data[i * step:i * step + size] for i in range(n) if len(data[i * step:i * step + size]) == size]


@requires(shutil.which("tshark") and os.geteuid() == 0, "needs tshark (scripts/setup.sh) and root")
class Curve(RunDirTest):
    def capture(self, d, ports):
        """Starts tshark on lo for the job's ports; returns it once it captures."""
        pcap, log = f"{d}/lo.pcap", f"{d}/tshark.log"
        flt = " or ".join(f"tcp port {p}" for p in ports)
        p = self.start(["tshark", "-i", "lo", "-f", flt, "-w", pcap], log)
        poll_until(lambda: True if "Capturing on" in (read_text(log) or "") else
                   (_ for _ in ()).throw(AssertionError(read_text(log))) if p.poll() is not None else None,
                   30, "tshark did not start")
        return p, pcap

    def job(self, name, secure):
        """Runs the job (local.sh, no worker) and attaches one worker under a capture; returns (run dir, result,
        capture bytes, tshark process)."""
        d = self.run_dir(name)
        launcher = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", "0", "--run-dir", d,
                               *(["--secure"] if secure else []), "--", STEPS], f"{self.tmp}/{name}.log")
        addr = wait_for_file(f"{d}/coordinator.addr", proc=launcher)
        shard = wait_for_file(f"{d}/shard0.addr", proc=launcher)
        tshark, pcap = self.capture(d, [port_of(addr), port_of(shard)])
        return d, launcher, addr, tshark, pcap

    def attach(self, d, addr, secure, name="worker0"):
        args = [ATTACH, "--coordinator", addr, "--token-file", f"{d}/token", "--report-file", f"{d}/{name}.json",
                "--log", f"{d}/{name}.log"]
        if secure:
            args += ["--secure-dir", d]
        return self.start(args, f"{d}/{name}.out")

    def finish(self, d, launcher, tshark, pcap):
        self.assertEqual(launcher.wait(timeout=120), 0, read_text(f"{d}/logs/coordinator.log"))
        tshark.send_signal(signal.SIGINT)
        tshark.wait(timeout=20)
        with open(pcap, "rb") as f:
            return read_result(d), f.read()

    def refused_worker(self, d, addr, name, *flags):
        p = self.start([os.path.join(BIN, "worker"), f"--coordinator={addr}", f"--token_file={d}/token",
                        f"--report_file={d}/{name}.json", "--register_timeout_s=30", *flags], f"{d}/{name}.log")
        return p

    def status(self, d, key):
        return subprocess.run([ELASTICPS, "status", "--run-dir", d, "--curve-secret-key", key,
                               "--curve-server-key", f"{d}/keys/server.pub", "--json"], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)

    def test_secure_job_same_bits_refuses_strangers_and_hides_the_wire(self):
        # In the clear: the reference, and the proof that the capture sees what CURVE must hide.
        d, launcher, addr, tshark, pcap = self.job("plain", secure=False)
        self.attach(d, addr, secure=False)
        plain, wire = self.finish(d, launcher, tshark, pcap)
        token = read_text(f"{d}/token").strip().encode()
        windows = parameter_windows(f"{d}/model.safetensors")
        self.assertIn(token, wire, "the token is not in the plain capture: the check could not fail")
        self.assertTrue(any(w in wire for w in windows), "no parameter bytes in the plain capture")

        d, launcher, addr, tshark, pcap = self.job("secure", secure=True)
        self.assertEqual(os.stat(f"{d}/keys/server.key").st_mode & 0o777, 0o600)
        # Strangers first (the job waits for its one worker meanwhile).
        outsider = os.path.join(self.tmp, "outsider")
        os.makedirs(outsider)
        subprocess.run([ELASTICPS, "keygen", "--out", outsider, "--name", "w"], env=ENV, check=True, timeout=30,
                       stdout=subprocess.DEVNULL)
        again = subprocess.run([ELASTICPS, "keygen", "--out", outsider, "--name", "w"], env=ENV, timeout=30,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(again.returncode, 0, "keygen overwrote a key pair")
        # A key allowed, then revoked by removing its file: refused without a restart.
        subprocess.run([ELASTICPS, "keygen", "--out", f"{d}/keys", "--name", "revoked"], env=ENV, check=True,
                       timeout=30, stdout=subprocess.DEVNULL)
        shutil.copy(f"{d}/keys/revoked.pub", f"{d}/allowed_keys/revoked.pub")
        allowed = self.status(d, f"{d}/keys/revoked.key")
        self.assertEqual(allowed.returncode, 0, allowed.stdout)
        os.remove(f"{d}/allowed_keys/revoked.pub")
        refused_status = self.status(d, f"{d}/keys/revoked.key")
        self.assertEqual(refused_status.returncode, 1, refused_status.stdout)
        self.assertIn("PERMISSION_DENIED", refused_status.stdout)
        strangers = {
            "unknown": self.refused_worker(d, addr, "unknown", f"--curve_secret_key={outsider}/w.key",
                                           f"--curve_server_key={d}/keys/server.pub"),
            "nokey": self.refused_worker(d, addr, "nokey"),
            "revoked": self.refused_worker(d, addr, "revoked", f"--curve_secret_key={d}/keys/revoked.key",
                                           f"--curve_server_key={d}/keys/server.pub"),
        }
        for name, p in strangers.items():
            self.assertEqual(p.wait(timeout=60), REFUSED, f"{name}: {read_text(f'{d}/{name}.log')}")
            report = read_report(f"{d}/{name}.json")
            self.assertEqual(report["outcome"], "refused", f"{name}: {report}")
        self.assertEqual(read_events(d, "worker_joined"), [], "a refused worker joined")
        self.attach(d, addr, secure=True)
        secure, wire = self.finish(d, launcher, tshark, pcap)
        self.assertEqual(secure["params_sha256"], plain["params_sha256"])
        self.assertEqual(len(read_events(d, "worker_joined")), 1)
        token = read_text(f"{d}/token").strip().encode()
        self.assertNotIn(token, wire, "the token travels in the clear with CURVE")
        # At least the final parameters (the coordinator's pull from the shard) crossed the socket.
        self.assertGreater(len(wire), os.path.getsize(f"{d}/model.safetensors"), "the capture missed the job's traffic")
        found = [w.hex() for w in windows if w in wire]
        self.assertEqual(found, [], "parameter bytes travel in the clear with CURVE")


class Revocation(RunDirTest):
    STEPS = "--steps=1000"

    def test_key_revoked_mid_run_drops_its_open_connections_and_the_job_keeps_its_bits(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[self.STEPS])
        d = self.run_dir("job")
        # Training starts once both workers registered: the victim, with a key of its own, and one attached.
        launcher = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", "0", "--run-dir", d, "--secure",
                               "--", self.STEPS, "--workers=2"], f"{self.tmp}/job.log")
        addr = wait_for_file(f"{d}/coordinator.addr", proc=launcher)
        wait_for_file(f"{d}/shard0.addr", proc=launcher)  # its keys read before any is added
        subprocess.run([ELASTICPS, "keygen", "--out", f"{d}/keys", "--name", "victim"], env=ENV, check=True,
                       timeout=30, stdout=subprocess.DEVNULL)
        shutil.copy(f"{d}/keys/victim.pub", f"{d}/allowed_keys/victim.pub")
        victim = self.start([os.path.join(BIN, "worker"), f"--coordinator={addr}", f"--token_file={d}/token",
                             f"--report_file={d}/victim.json", f"--curve_secret_key={d}/keys/victim.key",
                             f"--curve_server_key={d}/keys/server.pub"], f"{d}/victim.log")
        self.start([ATTACH, "--coordinator", addr, "--token-file", f"{d}/token", "--report-file",
                    f"{d}/worker1.json", "--log", f"{d}/worker1.log", "--secure-dir", d], f"{d}/worker1.out")
        wait_for_event(d, "step_completed", lambda e: e["step"] >= 20, timeout=180, proc=launcher)
        # Held (elasticps hold) at a step boundary until the coordinator has read the revocation (it re-reads the
        # allowed keys every second), then moved one step on: that step runs with the victim on its open
        # connections, mid-run however fast the host runs the steps.
        self.control(d, "hold")
        held = wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=launcher)
        os.remove(f"{d}/allowed_keys/victim.pub")  # revoked: its connections are open and stay so
        as_victim = [ELASTICPS, "status", "--run-dir", d, "--curve-secret-key", f"{d}/keys/victim.key",
                     "--curve-server-key", f"{d}/keys/server.pub", "--json"]
        poll_until(lambda: True if subprocess.run(as_victim, env=ENV, capture_output=True, timeout=30).returncode == 1
                   else None, 30, "the coordinator did not refuse the revoked key")
        self.control(d, "hold", f"--from-step={held['step'] + 1}")
        self.assertEqual(victim.wait(timeout=60), REFUSED, read_text(f"{d}/victim.log")[-3000:])
        self.assertIsNone(launcher.poll(), "the job ended before the revocation took effect")
        self.control(d, "release")
        self.assertEqual(read_report(f"{d}/victim.json")["outcome"], "refused")
        self.assertIn("revoked", read_text(f"{d}/victim.log"))
        self.assertEqual(launcher.wait(timeout=300), 0, read_text(f"{d}/logs/coordinator.log")[-3000:])
        self.assertEqual(read_result(d)["params_sha256"], ref["params_sha256"])


class PoolRevocation(RunDirTest):
    def test_a_revoked_idle_pool_worker_is_refused_at_its_next_poll_and_the_scheduler_serves_on(self):
        d = self.run_dir("pool")
        for name in ("scheduler", "pool0", "pool1"):
            subprocess.run([ELASTICPS, "keygen", "--out", f"{d}/keys", "--name", name], env=ENV, check=True,
                           timeout=30, stdout=subprocess.DEVNULL)
        os.makedirs(f"{d}/allowed")
        for name in ("pool0", "pool1"):
            shutil.copy(f"{d}/keys/{name}.pub", f"{d}/allowed/{name}.pub")
        with open(f"{d}/jobs", "w") as f:
            f.write("ghost tcp://127.0.0.1:1 -\n")  # never answers: the pool stays idle
        sched = self.start([os.path.join(BIN, "pool_scheduler"), f"--jobs={d}/jobs", f"--events_file={d}/events.jsonl",
                            f"--addr_file={d}/scheduler.addr", "--round_ms=200", "--info_timeout_ms=50",
                            "--worker_timeout_ms=3000", f"--curve_secret_key={d}/keys/scheduler.key",
                            f"--allowed_keys={d}/allowed"], f"{d}/scheduler.log")
        addr = wait_for_file(f"{d}/scheduler.addr", proc=sched)
        pool = {name: self.start([os.path.join(BIN, "worker"), f"--scheduler={addr}", "--pool_poll_ms=100",
                                  f"--curve_secret_key={d}/keys/{name}.key",
                                  f"--pool_curve_server_key={d}/keys/scheduler.pub"], f"{d}/{name}.log")
                for name in ("pool0", "pool1")}
        wait_for_event(d, "pool", lambda e: e["members"] == 2, timeout=30, proc=sched)  # both connected and polling
        os.remove(f"{d}/allowed/pool0.pub")
        self.assertEqual(pool["pool0"].wait(timeout=30), REFUSED, read_text(f"{d}/pool0.log")[-3000:])
        wait_for_event(d, "pool", lambda e: e["members"] == 1, timeout=30, proc=sched)  # pool0's polls stopped counting
        self.assertIsNone(pool["pool1"].poll(), read_text(f"{d}/pool1.log")[-3000:])
        self.assertIsNone(sched.poll(), read_text(f"{d}/scheduler.log")[-3000:])
        pool["pool1"].send_signal(signal.SIGTERM)
        self.assertEqual(pool["pool1"].wait(timeout=30), 0, read_text(f"{d}/pool1.log")[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
