"""`elasticps serve` (docs/serving.md): a trained job's export served over the KServe / TF Serving V1 REST protocol.

Predictions over HTTP are `elasticps predict`'s, bit for bit: the server writes each float32 with 9 significant
digits (%.9g, as predict's CSV does), which read back as the same float32, and a request served as one batch of
N instances is predict's `--batch N` over those N samples (a batch's bits depend on its size: BLAS blocks by it).
Bad requests get a 4xx JSON reason and the next good one is answered; a hot swap (--follow, a new export written
atomically) under concurrent requests loses none; SIGTERM drains the queue and exits 0. Port 0 everywhere."""
import ast
import csv
import hashlib
import http.client
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from harness import BIN, ENV, LOCAL, MLP, RunDirTest, logs, poll_until, wait_for_event, wait_for_file

ELASTICPS = os.path.join(BIN, "elasticps")
JOB = ["--steps=6", "--virtual_workers=2", "--batch_per_vw=16", "--train_limit=256", "--test_limit=64",
       "--eval_batch=64"]
N = 12  # samples sent


def f32(x):
    """The float32 bits of a number read from JSON or CSV (9 significant digits: exact for a float32)."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def write_npy(path, rows, shape, dtype="<f4"):
    """An NPY 1.0 file of `rows` (flat lists) of one sample's `shape` each, float32 or ("<i8") int64 (no numpy
    needed)."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (dtype, ", ".join(
        str(d) for d in [len(rows), *shape]))
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        for r in rows:
            f.write(struct.pack(f"<{len(r)}{'q' if dtype == '<i8' else 'f'}", *r))


def read_npy_int64(path, n):
    """The first `n` rows of an NPY 1.0 file of int64 [N, D] (as numpy saves it), as lists."""
    with open(path, "rb") as f:
        assert f.read(8) == b"\x93NUMPY\x01\x00"
        header = ast.literal_eval(f.read(struct.unpack("<H", f.read(2))[0]).decode())
        assert header["descr"] == "<i8" and not header["fortran_order"], header
        d = header["shape"][1]
        return [list(struct.unpack(f"<{d}q", f.read(8 * d))) for _ in range(n)]


def read_predict_csv(path):
    """elasticps predict's CSV as [(class, [float32 bits of p0..])]."""
    with open(path) as f:
        rows = list(csv.reader(f))
    return [(int(r[1]), [f32(p) for p in r[2:]]) for r in rows[1:]]


def as_bits(predictions):
    return [(p["class"], [f32(x) for x in p["probabilities"]]) for p in predictions]


class ServeClient:
    """Starting `elasticps serve` and talking to it, for a RunDirTest (its self.procs and self.tmp)."""

    def serve(self, *flags):
        """Starts `elasticps serve --port 0 flags`; returns (process, port, the JSON line it printed)."""
        log = open(os.path.join(self.tmp, f"serve{len(self.procs)}.log"), "w")
        p = subprocess.Popen([ELASTICPS, "serve", "--port", "0", *flags], env=ENV, stdout=subprocess.PIPE,
                             stderr=log, text=True)
        log.close()
        self.procs.append(p)
        deadline = time.monotonic() + 60
        while True:
            ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = p.stdout.readline()
                if line:
                    first = json.loads(line)
                    self.assertEqual(first["event"], "serving")
                    return p, first["port"], first
            if p.poll() is not None or time.monotonic() > deadline:
                self.fail(f"elasticps serve did not start (exit {p.poll()}):\n{self.serve_log()}")

    def serve_log(self):
        out = []
        for name in sorted(os.listdir(self.tmp)):
            if name.startswith("serve"):
                with open(os.path.join(self.tmp, name), errors="replace") as f:
                    out.append(f.read()[-3000:])
        return "\n".join(out)

    def http(self, port, method, path, body=None, timeout=30):
        """(status, parsed JSON body or text, headers)."""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            r = c.getresponse()
            text = r.read().decode()
            try:
                payload = json.loads(text)
            except ValueError:
                payload = text
            return r.status, payload, dict(r.getheaders())
        finally:
            c.close()

    def assert_serves_as_predicted(self, serve_flags, instances, predicted_csv, bad):
        """`elasticps serve serve_flags` answers `instances`, in one request (one batch), with the bits of
        `elasticps predict`'s CSV `predicted_csv` over the same samples (a batch as large); refuses the instance
        `bad` with a 400 and answers the next good request; drains on SIGTERM."""
        server, port, first = self.serve(*serve_flags)
        path = f"/v1/models/{first['name']}:predict"
        status, body, _ = self.http(port, "POST", path, json.dumps({"instances": instances}))
        self.assertEqual(status, 200, body)
        self.assertEqual(as_bits(body["predictions"]), read_predict_csv(predicted_csv))
        status, body, _ = self.http(port, "POST", path, json.dumps({"instances": [bad]}))
        self.assertEqual(status, 400, body)
        self.assertEqual(self.http(port, "POST", path, json.dumps({"instances": instances[:1]}))[0], 200)
        server.send_signal(signal.SIGTERM)
        self.assertEqual(server.wait(timeout=30), 0)
        server.stdout.close()


class Serve(ServeClient, RunDirTest):
    @classmethod
    def setUpClass(cls):
        # One tiny job for every test: its export is what they serve.
        cls.job_tmp = tempfile.mkdtemp(prefix="eps-it-serve-")
        cls.job_dir = os.path.join(cls.job_tmp, "run")
        p = subprocess.run([LOCAL, "--job", MLP, "--servers", "1", "--workers", "1", "--run-dir", cls.job_dir, "--",
                            *JOB], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if p.returncode != 0:
            raise AssertionError(f"the job failed:\n{p.stdout}\n{logs(cls.job_dir)}")
        cls.model = os.path.join(cls.job_dir, "model.safetensors")
        rng = random.Random(0)
        # float32 values (a Python float holds each exactly), one flat list of 784 per sample
        cls.samples = [list(struct.unpack("<784f", struct.pack("<784f", *[rng.gauss(0, 1) for _ in range(784)])))
                       for _ in range(N)]
        cls.data = os.path.join(cls.job_tmp, "x.npy")
        write_npy(cls.data, cls.samples, [1, 28, 28])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.job_tmp, ignore_errors=True)

    def tearDown(self):
        super().tearDown()  # stops every server still running
        for p in self.procs:
            if p.stdout is not None:
                p.stdout.close()

    # -- helpers --------------------------------------------------------------------------------------------------

    def predict(self, model, batch):
        """elasticps predict over the N samples, `batch` at a time: [(class, probability bits)]."""
        out = os.path.join(self.tmp, f"p{batch}-{os.path.basename(model)}.csv")
        p = subprocess.run([ELASTICPS, "predict", "--model", model, "--data", self.data, "--batch", str(batch),
                            "--out", out], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        return read_predict_csv(out)

    def instances(self, rows):
        # Each [1, 28, 28]; json writes a float so that it reads back the same, here a float32 exactly.
        return json.dumps({"instances": [[[self.samples[i][28 * y:28 * y + 28] for y in range(28)]] for i in rows]})

    def metric(self, port, name):
        _, text, _ = self.http(port, "GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    # -- tests ----------------------------------------------------------------------------------------------------

    def test_predictions_over_http_are_elasticps_predicts_bit_for_bit(self):
        p, port, first = self.serve("--model", self.model)
        self.assertEqual(first["name"], "fashion_mnist_mlp")  # the export's job_id
        path = "/v1/models/fashion_mnist_mlp:predict"
        # One request of N instances is one batch of N: predict's --batch N.
        status, body, headers = self.http(port, "POST", path, self.instances(range(N)))
        self.assertEqual(status, 200, body)
        self.assertEqual(headers.get("X-Batch-Instances"), str(N))
        whole = self.predict(self.model, N)
        self.assertEqual(as_bits(body["predictions"]), whole)
        # One request at a time of one instance each: predict's --batch 1, which differs from --batch N in bits.
        single = [as_bits(self.http(port, "POST", path, self.instances([i]))[1]["predictions"])[0] for i in range(N)]
        self.assertEqual(single, self.predict(self.model, 1))
        # The model.pt of the same job, with --arch, serves the same bits.
        p2, port2, _ = self.serve("--model", os.path.join(self.job_dir, "model.pt"), "--arch", "mlp", "--name", "pt")
        status, body, _ = self.http(port2, "POST", "/v1/models/pt:predict", self.instances(range(N)))
        self.assertEqual(as_bits(body["predictions"]), whole)

        status, body, _ = self.http(port, "GET", "/v1/models/fashion_mnist_mlp")
        self.assertEqual(status, 200)
        self.assertEqual((body["ready"], body["input_shape"], body["steps"]), (True, [1, 28, 28], "6"))
        self.assertEqual(self.http(port, "GET", "/healthz")[0], 200)
        self.assertEqual(self.metric(port, 'eps_serve_requests_total{code="200"}'), N + 1)
        self.assertEqual(self.metric(port, "eps_serve_batch_instances_count"), N + 1)
        self.assertIsNotNone(self.metric(port, "eps_serve_request_seconds_count"))
        for proc in (p, p2):
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)

    def test_bad_requests_get_a_4xx_reason_and_the_next_good_one_is_answered(self):
        p, port, _ = self.serve("--model", self.model, "--name", "m", "--max_body_mb", "0.05")
        good = self.instances([0])
        big = self.instances(range(N))  # about 200 kB
        self.assertGreater(len(big), 0.05 * 1024 * 1024)
        cases = [
            ("POST", "/v1/models/m:predict", '{"instances": [[1, 2', 400, "not JSON"),
            ("POST", "/v1/models/m:predict", '{"instances": [[1, 2, 3]]}', 400, "shape [3]"),
            ("POST", "/v1/models/m:predict", '{"rows": []}', 400, '"instances"'),
            ("POST", "/v1/models/m:predict", json.dumps({"instances": [[["x"] * 28] * 28]}), 400, "string"),
            ("POST", "/v1/models/m:predict", big, 413, "--max_body_mb"),
            ("POST", "/v1/models/nope:predict", good, 404, "no model 'nope'"),
            ("GET", "/v1/models/nope", None, 404, "no model 'nope'"),
            ("GET", "/v2/health/ready", None, 404, "no such path"),
        ]
        for method, path, body, want, reason in cases:
            with self.subTest(path=path, want=want, reason=reason):
                try:
                    status, answer, _ = self.http(port, method, path, body)
                except (ConnectionResetError, BrokenPipeError) as e:
                    self.fail(f"the server closed the connection instead of answering: {e}")
                self.assertEqual(status, want, answer)
                self.assertIn(reason, answer["error"])
                status, answer, _ = self.http(port, "POST", "/v1/models/m:predict", good)
                self.assertEqual(status, 200, answer)
        self.assertEqual(self.metric(port, 'eps_serve_errors_total{reason="bad_request"}'), 4)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 0)

    def test_a_hot_swap_under_concurrent_requests_loses_none(self):
        follow = os.path.join(self.tmp, "follow")
        os.makedirs(follow)
        served = os.path.join(follow, "model.safetensors")
        shutil.copy(self.model, served)
        # The second export: the same model with fc2's bias moved, written beside and renamed in (atomic).
        with open(self.model, "rb") as f:
            blob = bytearray(f.read())
        n = struct.unpack("<Q", blob[:8])[0]
        start, end = json.loads(blob[8:8 + n])["fc2.bias"]["data_offsets"]
        bias = struct.unpack("<10f", bytes(blob[8 + n + start:8 + n + end]))
        blob[8 + n + start:8 + n + end] = struct.pack("<10f", *[b + c for c, b in enumerate(bias)])
        second = os.path.join(self.tmp, "second.safetensors")
        with open(second, "wb") as f:
            f.write(bytes(blob))
        want = {"a": self.predict(self.model, 1), "b": self.predict(second, 1)}
        self.assertNotEqual(want["a"], want["b"])

        # --max_batch 1: every request is one forward pass of its own, so each answer is exactly a's or b's.
        p, port, _ = self.serve("--follow", follow, "--name", "m", "--follow_interval_ms", "20", "--max_batch", "1")
        answers, failures, stop = [], [], threading.Event()

        def client(k):
            seen = []
            while not stop.is_set():
                i = (k + len(seen)) % N
                try:
                    status, body, _ = self.http(port, "POST", "/v1/models/m:predict", self.instances([i]))
                except OSError as e:
                    failures.append(repr(e))
                    continue
                if status != 200:
                    failures.append((status, body))
                    continue
                got = as_bits(body["predictions"])[0]
                seen.append("a" if got == want["a"][i] else "b" if got == want["b"][i] else "neither")
            answers.append(seen)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        try:
            poll_until(lambda: True if (self.metric(port, 'eps_serve_requests_total{code="200"}') or 0) >= 20 else None,
                       30, "20 answers before the swap")
            tmp = os.path.join(follow, ".model.safetensors.tmp")
            shutil.copy(second, tmp)
            os.replace(tmp, served)
            poll_until(lambda: True if self.http(port, "GET", "/v1/models/m")[1]["version"] == 2 else None, 30,
                       "the second export swapped in")
            swapped_at = self.metric(port, 'eps_serve_requests_total{code="200"}')
            poll_until(lambda: True if self.metric(port, 'eps_serve_requests_total{code="200"}') >= swapped_at + 20
                       else None, 30, "20 answers after the swap")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        self.assertEqual(failures, [])
        flat = [s for seen in answers for s in seen]
        self.assertNotIn("neither", flat)
        self.assertIn("a", flat)
        self.assertIn("b", flat)
        for seen in answers:  # once a client got the new model, never the old one again
            self.assertNotIn("a", seen[seen.index("b"):] if "b" in seen else [], seen)
        status, body, _ = self.http(port, "GET", "/v1/models/m")
        with open(second, "rb") as f:
            self.assertEqual(body["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(self.metric(port, "eps_serve_model_swaps_total"), 1)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 0)

    def test_follow_serves_a_live_jobs_newest_durable_checkpoint_then_its_final_model(self):
        d = self.run_dir("live")
        job = self.start([LOCAL, "--job", MLP, "--servers", "1", "--workers", "1", "--run-dir", d,
                          "--checkpoint-every", "4", "--", *[f for f in JOB if not f.startswith("--steps")],
                          "--steps=40"], os.path.join(self.tmp, "local.out"))
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        # Held at step 20: the job has checkpoints but no export; the server serves the newest checkpoint.
        self.control(d, "hold", "--from-step=20")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=120, proc=job)
        self.assertFalse(os.path.exists(os.path.join(d, "model.safetensors")))
        p, port, _ = self.serve("--follow", d, "--name", "m", "--follow_interval_ms", "50")
        status = self.http(port, "GET", "/v1/models/m")[1]
        step = int(status["steps"])
        self.assertTrue(0 < step <= 20, status)
        # It is that checkpoint as `elasticps export` writes it, byte for byte.
        ckpt = os.path.join(self.tmp, "ckpt.safetensors")
        e = subprocess.run([ELASTICPS, "export", "--stores", os.path.join(d, "store"), "--step", str(step), "--out",
                            ckpt], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(e.returncode, 0, e.stdout)
        with open(ckpt, "rb") as f:
            self.assertEqual(status["sha256"], hashlib.sha256(f.read()).hexdigest())

        # Released, it trains to its end while a client asks all along: every request is answered.
        failures, stop, count = [], threading.Event(), [0]

        def client():
            while not stop.is_set():
                st, body, _ = self.http(port, "POST", "/v1/models/m:predict", self.instances([count[0] % N]))
                count[0] += 1
                if st != 200:
                    failures.append((st, body))

        t = threading.Thread(target=client)
        t.start()
        try:
            self.control(d, "release")
            self.assertEqual(job.wait(timeout=300), 0, logs(d))
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                final = hashlib.sha256(f.read()).hexdigest()
            poll_until(lambda: True if self.http(port, "GET", "/v1/models/m")[1]["sha256"] == final else None, 60,
                       "the final model served")
        finally:
            stop.set()
            t.join(timeout=60)
        self.assertEqual(failures, [])
        self.assertGreater(count[0], 0)
        self.assertEqual(self.http(port, "GET", "/v1/models/m")[1]["steps"], "40")
        self.assertGreaterEqual(self.metric(port, "eps_serve_model_swaps_total"), 1)
        self.assertEqual(self.metric(port, "eps_serve_model_load_failures_total"), 0)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 0)

    def test_sigterm_answers_every_queued_request_then_exits_0(self):
        # A batch waits 60 s for more: only the drain makes the queued requests run.
        p, port, _ = self.serve("--model", self.model, "--name", "m", "--max_batch", "64", "--max_delay_ms", "60000",
                                "--max_queue", "4")
        results = [None] * 4

        def client(k):
            results[k] = self.http(port, "POST", "/v1/models/m:predict", self.instances([k]), timeout=60)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        poll_until(lambda: True if self.metric(port, "eps_serve_queue_depth") == 4 else None, 30, "4 queued")
        status, body, headers = self.http(port, "POST", "/v1/models/m:predict", self.instances([5]))
        self.assertEqual(status, 503, body)
        self.assertIn("queue is full", body["error"])
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(p.wait(timeout=30), 0, self.serve_log())
        self.assertLess(time.monotonic() - sent, 30)  # not the 60 s batch delay
        for k, r in enumerate(results):
            self.assertIsNotNone(r, k)
            self.assertEqual(r[0], 200, r)
            self.assertEqual(len(r[1]["predictions"]), 1)
            self.assertEqual(r[2].get("X-Batch-Instances"), "4")  # the four ran as one batch
        last = json.loads(p.stdout.read().strip().splitlines()[-1])
        self.assertEqual(last, {"event": "drained", "answered": 4})


if __name__ == "__main__":
    unittest.main()
