"""Large models as files (docs/design.md, "How the model reaches the workers"): a TorchScript file larger than the
coordinator's lowered message limit (--max_message_mb=1) reaches the workers in FetchModel chunks and trains to the
same digest as with the default limit; a second worker of the host (the same --model_cache_dir) fetches no model
byte; a damaged cache entry is found and fetched again; a cache directory that cannot be written is a warning, and the
worker trains with the bytes it fetched. Every count is read from the workers' JSON reports (docs/events.md)."""
import hashlib
import os
import subprocess
import tempfile
import unittest

from harness import RunDirTest, logs, poll_until, read_events, read_report, read_result, skip_or_fail

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PY = os.environ.get("EPS_TORCH_PYTHON", "/usr/bin/python3")  # Debian's python3-torch
SCRIPT_MODELS = os.path.join(HERE, "script_models.py")
# V = 8 of 8 samples, a few steps: seconds on two cores.
JOB = ["--virtual_workers=8", "--batch_per_vw=8", "--steps=8", "--train_limit=512", "--test_limit=200",
       "--eval_batch=100", "--startup_timeout_s=120"]
MIB = 1 << 20


class ModelFiles(RunDirTest):
    def setUp(self):
        super().setUp()
        models = tempfile.mkdtemp(prefix="eps-model-files-", dir=self.tmp)
        p = subprocess.run([TORCH_PY, SCRIPT_MODELS, models, "wide"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        if p.returncode != 0:
            skip_or_fail(self, f"{TORCH_PY} cannot script the test's module: {p.stdout[-500:]}")
        self.model = os.path.join(models, "wide.pt")
        with open(self.model, "rb") as f:
            self.sha256 = hashlib.sha256(f.read()).hexdigest()
        self.size = os.path.getsize(self.model)

    def train(self, name, coordinator_flags, worker_flags):
        """A job of 1 shard and len(worker_flags) workers, the workers started one after another, each once the one
        before is ready (it has its model): returns (result.json, [each worker's report])."""
        d = self.run_dir(name)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("model-files-token\n")
        coord, addr = self.start_coordinator(d, token, f"--model={self.model}", f"--workers={len(worker_flags)}",
                                             *JOB, *coordinator_flags)
        self.start_shard(d, addr, token, 0)
        for i, flags in enumerate(worker_flags):
            self.start_worker(d, addr, token, i, *flags)
            if i + 1 < len(worker_flags):
                self.wait_ready(d, i + 1, coord)
        self.assertEqual(coord.wait(timeout=600), 0, logs(d))
        result = read_result(d)
        self.assertIsNotNone(result, logs(d))
        self.assertEqual(result["steps"], 8)
        return result, [read_report(f"{d}/worker{i}.json") for i in range(len(worker_flags))]

    def wait_ready(self, d, count, coord):
        """Waits until `count` workers reported their model (worker_ready events)."""
        poll_until(lambda: True if len(read_events(d, "worker_ready")) >= count else None, 180,
                   f"{count} workers ready")
        self.assertIsNone(coord.poll(), logs(d))

    def model_file(self, report):
        """The report's one model file, checked to be the job's."""
        self.assertEqual(report["outcome"], "done", report)
        files = report["model_files"]
        self.assertEqual([f["what"] for f in files], ["model"], report)
        self.assertEqual(files[0]["sha256"], self.sha256)
        self.assertEqual(files[0]["size"], self.size)
        self.assertEqual(report["model_bytes_fetched"], files[0]["fetched_bytes"])
        return files[0]

    def test_a_model_over_the_message_limit_trains_a_second_worker_fetches_nothing_and_a_bad_cache_is_survived(self):
        self.assertGreater(self.size, MIB, "the test's model must be larger than a 1 MiB message")
        cache = os.path.join(self.tmp, "host-cache")
        # Lowered limit: no message of the coordinator may hold the model.
        small, reports = self.train("limit-1mib", ["--max_message_mb=1"],
                                    [[f"--model_cache_dir={cache}"], [f"--model_cache_dir={cache}"]])
        first, second = (self.model_file(r) for r in reports)
        self.assertEqual(first["cache"], "miss")
        self.assertEqual(first["fetched_bytes"], self.size)
        self.assertGreaterEqual(first["chunks"], 2)  # 1 MiB less the envelope's room each
        self.assertEqual(second["cache"], "hit")
        self.assertEqual(second["fetched_bytes"], 0)
        self.assertEqual(reports[1]["model_bytes_fetched"], 0)
        entry = os.path.join(cache, self.sha256)
        with open(entry, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), self.sha256)

        # The entry damaged (one byte, same size); a second worker's cache directory cannot be created (a file is
        # in its way). Default limit: the same bits.
        with open(entry, "r+b") as f:
            f.seek(self.size // 2)
            b = f.read(1)
            f.seek(self.size // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        blocked = os.path.join(self.tmp, "not-a-dir")
        with open(blocked, "w") as f:
            f.write("x")
        default, reports = self.train("default-limit", [],
                                      [[f"--model_cache_dir={cache}"], [f"--model_cache_dir={blocked}/cache"]])
        repaired, uncached = (self.model_file(r) for r in reports)
        self.assertEqual(repaired["cache"], "corrupt")
        self.assertEqual(repaired["fetched_bytes"], self.size)
        self.assertEqual(repaired["chunks"], 1)
        with open(entry, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), self.sha256, "the entry is fetched again")
        self.assertEqual(uncached["cache"], "off")
        self.assertEqual(uncached["fetched_bytes"], self.size)
        self.assertTrue(any(f"{blocked}/cache" in w and "cannot be created" in w for w in reports[1]["warnings"]),
                        reports[1]["warnings"])

        self.assertEqual(small["params_sha256"], default["params_sha256"])
        self.assertEqual(small["buffers_sha256"], default["buffers_sha256"])


if __name__ == "__main__":
    unittest.main()
