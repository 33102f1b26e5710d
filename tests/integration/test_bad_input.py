"""Bad input: a clear message and a nonzero exit before training starts; bad
network messages get error replies and change nothing."""
import os
import subprocess
import unittest

from harness import BIN, ENV, MLP, RunDirTest, read_events, read_result, wait_for_step


class BadJobSpec(RunDirTest):
    def fails_before_training(self, name, extra, needle):
        rc, out, result = self.run_local(name, MLP, workers=1, extra=extra, timeout=180, expect_ok=False)
        self.assertNotEqual(rc, 0, out)
        self.assertIsNone(result)
        self.assertIn(needle, out, out)
        # Training starts with the first assignment epoch.
        self.assertEqual(read_events(self.run_dir(name), "assignment"), [], "training started")

    def test_unknown_flag(self):
        self.fails_before_training("flag", ["--no_such_flag=1"], "no_such_flag")

    def test_missing_data_file(self):
        self.fails_before_training("data", [f"--data_dir={self.tmp}/nowhere"], "is missing")

    def test_zero_virtual_workers(self):
        self.fails_before_training("v0", ["--virtual_workers=0"], "virtual_workers must be at least 1")

    def test_zero_batch(self):
        self.fails_before_training("b0", ["--batch_per_vw=0"], "batch_per_vw must be at least 1")

    def test_unknown_model(self):
        self.fails_before_training("model", ["--model=resnet9000"], "resnet9000")

    def test_unknown_optimizer(self):
        self.fails_before_training("opt", ["--optimizer=lamb"], "lamb")

    def test_unknown_wire_dtype(self):
        self.fails_before_training("wire", ["--wire_dtype=int8"], "unknown wire dtype 'int8'")
        self.fails_before_training("grad-wire", ["--grad_wire_dtype=fp8"], "--grad_wire_dtype")


class BadWorkerFlags(unittest.TestCase):
    def worker_refuses(self, flag, needle):
        # The flags are checked before the worker contacts anyone: no coordinator needed.
        p = subprocess.run([os.path.join(BIN, "worker"), "--coordinator=tcp://127.0.0.1:9", flag], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn(needle, p.stdout)

    def test_malformed_compute_cpus(self):
        self.worker_refuses("--compute_cpus=3-1", "reversed range '3-1'")
        self.worker_refuses("--compute_cpus=zero", "'zero' is not a CPU number")

    def test_compute_cpus_outside_the_allowed_set(self):
        # One past the highest CPU this process may use: a number it can name, but not one it may run on.
        self.worker_refuses(f"--compute_cpus={max(os.sched_getaffinity(0)) + 1}", "this process may only use CPUs")


class GarbageOnTheWire(RunDirTest):
    STEPS = "--steps=400"

    def garbage(self, endpoint, token):
        p = subprocess.run([os.path.join(BIN, "garbage_peer"), endpoint, token], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)

    def test_garbage_to_live_coordinator_and_shards_changes_nothing(self):
        _, _, ref = self.run_local("ref", MLP, workers=1, extra=[self.STEPS])
        d = self.run_dir("job")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("secret-token\n")
        coord, addr = self.start_coordinator(d, token, self.STEPS, "--shards=2", "--workers=2",
                                             "--startup_timeout_s=120")
        shards = [self.start_shard(d, addr, token, s) for s in range(2)]
        # Before training: every endpoint answers garbage with errors.
        for endpoint in [addr] + shards:
            self.garbage(endpoint, token)
        for w in range(2):
            self.start_worker(d, addr, token, w)
        # During training: again.
        wait_for_step(d, 1, proc=coord)
        for endpoint in [addr] + shards:
            self.garbage(endpoint, token)
        self.assertEqual(coord.wait(timeout=300), 0, open(f"{d}/coordinator.log").read()[-3000:])
        result = read_result(d)
        self.assertEqual(result["params_sha256"], ref["params_sha256"])
        shard_log = open(f"{d}/shard0.log").read()
        self.assertIn("bad message from a worker", shard_log)
        self.assertIn("wrong job token", open(f"{d}/coordinator.log").read() + shard_log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
