"""Sparse tables (docs/design.md, "Sparse tables"): a TorchScript module whose nn.EmbeddingBag is created with
sparse=True trains with the table on the shards as a sparse table: only the touched rows travel and are stepped, the
rows beyond --shard_memory_mb spill to RocksDB, and the digest is the same for 1 x 1, 6 shards x 3 workers, a join
plus a SIGKILL, and a shard SIGKILLed and rolled back; --init_from seeds a table with a file's rows."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import (BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_events, read_result, read_safetensors,
                     skip_or_fail, wait_for_event, wait_for_file)
from test_serve import ELASTICPS, ServeClient, read_npy_int64, write_npy

TORCH_PY = os.environ.get("EPS_TORCH_PYTHON", "/usr/bin/python3")  # Debian's python3-torch
ROWS, DIM = 1 << 16, 32
# The job: Adam (moments on the touched rows only), V = 8 virtual workers of 8 samples.
JOB = ["--virtual_workers=8", "--batch_per_vw=8", "--steps=30", "--optimizer=adam", "--momentum=0", "--lr=0.01",
       "--test_limit=512", "--eval_batch=256"]
# 1 MiB a shard holds about 2,200 rows of (32 weights + 64 Adam moments) floats and the cache's bookkeeping: of the
# ~21,000 rows 30 steps touch, most live only in RocksDB on 1 or 2 shards, and a third on each of 6.
SPILL = ["--shard_memory_mb=1"]
# The workers look the table (8 MiB) up by their batches' rows instead of holding it (the module names them in
# table_ids): the bits are the held table's.
LOOKUP = ["--worker_table_mb=1"]

MAKE = f"""
import sys
from typing import Dict
import numpy as np
import torch
import torch.nn as nn

class Hashed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag({ROWS}, {DIM}, mode="sum", sparse=True)
        self.fc1 = nn.Linear({DIM}, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(self.emb(x))))

    @torch.jit.export
    def table_ids(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {{"emb.weight": x}}

class Keyed(Hashed):  # over a table of unbounded keys (0 rows): the workers look it up into compact tables

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(0, {DIM}, mode="sum", sparse=True)

    @torch.jit.export
    def with_table_ids(self, x: torch.Tensor, ids: Dict[str, torch.Tensor]) -> torch.Tensor:
        return ids["emb.weight"]

d = sys.argv[1]
torch.manual_seed(0)
torch.jit.script(Hashed()).save(d + "/hashed.pt")
torch.jit.script(Keyed()).save(d + "/keyed.pt")
# 20 hashed categorical ids a sample, power-law over the buckets; the label is planted in whether a few hot ids
# appear (synthetic, for the test).
rng = np.random.default_rng(3)
n = 2048
ids = np.minimum(rng.zipf(1.05, (n, 20)) * 7919 % {ROWS}, {ROWS} - 1).astype(np.int64)
labels = (np.isin(ids, np.arange(0, {ROWS}, 97)).sum(1) % 2).astype(np.int64)
np.save(d + "/ids.npy", ids)
np.save(d + "/labels.npy", labels)
"""
_made = {}


def tearDownModule():
    """The folder made() made goes with the module's tests (and is made again for another module's, e.g.
    test_reshard's, run in the same process)."""
    shutil.rmtree(_made.get("tmp", ""), ignore_errors=True)
    _made.clear()


def made():
    """The module and the data, made once per run (None without python3-torch)."""
    if "dir" not in _made:
        d = tempfile.mkdtemp(prefix="eps-sparse-")
        _made["tmp"] = d  # removed by tearDownModule
        script = os.path.join(d, "make.py")  # TorchScript reads the module's source from its file
        with open(script, "w") as f:
            f.write(MAKE)
        p = subprocess.run([TORCH_PY, script, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=300)
        _made["dir"] = d if p.returncode == 0 else None
        _made["log"] = p.stdout
    return _made["dir"]


def shard_reports(test, run_dir, shards):
    """The reports (docs/events.md) of the run's `shards` shards, each done."""
    reports = []
    for s in range(shards):
        with open(os.path.join(run_dir, "logs", f"shard{s}.json")) as f:
            reports.append(json.load(f))
        test.assertEqual(reports[-1]["outcome"], "done", reports[-1])
    return reports


def worker_reports(test, run_dir):
    """The reports (docs/events.md) of the run's workers: at least one."""
    reports = []
    for name in sorted(os.listdir(os.path.join(run_dir, "logs"))):
        if name.startswith("worker") and name.endswith(".json"):
            with open(os.path.join(run_dir, "logs", name)) as f:
                reports.append(json.load(f))
    test.assertTrue(reports, logs(run_dir))
    return reports


def assert_looked_up(test, run_dir, table):
    """Every worker report of the run looks `table` up by rows, and the rows came by id (docs/events.md)."""
    reports = worker_reports(test, run_dir)
    for r in reports:
        test.assertEqual(r["lookup_tables"], [table], r)
    test.assertGreater(sum(r["lookup_rows"] for r in reports), 0, reports)


class SparseTables(ServeClient, RunDirTest):
    def setUp(self):
        super().setUp()
        if made() is None:
            skip_or_fail(self, "cannot script the module: " + _made["log"][-2000:])
        d = made()
        self.job = [f"--model={d}/hashed.pt", f"--train_data={d}/ids.npy", f"--train_labels={d}/labels.npy",
                    f"--test_data={d}/ids.npy", f"--test_labels={d}/labels.npy", *JOB]

    def train(self, name, servers, workers, extra=()):
        _, _, r = self.run_local(name, MLP, servers=servers, workers=workers, extra=[*self.job, *extra])
        return r

    def reference80(self):
        """The job for 80 steps on 1 x 1, the reference of test_b and test_c: run once for the class (run_shared);
        returns its result.json's dict."""
        return self.run_shared("reference80", job=MLP, servers=1, workers=1, extra=[*self.job, "--steps=80"])[2]

    def test_a_the_bits_are_the_same_for_every_placement_with_rows_spilled(self):
        reference = self.train("1x1", 1, 1)
        # 6 shards for the model's 5 dense chunks (the loss among them): a shard holds only table rows.
        spread = self.train("6x3-spill", 6, 3, SPILL)
        self.assertEqual(spread["params_sha256"], reference["params_sha256"], logs(self.run_dir("6x3-spill")))
        # Rows left memory, and the shards read the ones the workers named for their next plans ahead of the step
        # (the module's table_ids): the shards' reports (docs/events.md).
        tables = [t for r in shard_reports(self, self.run_dir("6x3-spill"), 6) for t in r["sparse_tables"]]
        self.assertGreater(sum(t["evictions"] for t in tables), 0, tables)
        self.assertGreater(sum(t["warm_reads"] for t in tables), 0, tables)
        # And every stored row's Adam moments and every dense chunk's, summed over the shards.
        self.assertEqual(spread["optimizer_digest"], reference["optimizer_digest"])
        self.assertEqual(spread["test_loss"], reference["test_loss"])
        # Only the touched rows travel: a step moves a small part of the table (8 MiB), where the dense path moved
        # the whole table both ways.
        table = ROWS * DIM * 4
        per_step = (reference["push_bytes"] + reference["pull_bytes"]) / reference["steps"]
        self.assertLess(per_step, 0.1 * table, reference)
        # On the shard's host the rows go through the worker's shared memory both ways (schema/shm_rows.h): every
        # pulled row; pushed, all but those of a plan a start-up race had the worker push again inline.
        [rows] = [r["sparse_row_bytes"] for r in worker_reports(self, self.run_dir("1x1"))]
        self.assertGreater(rows["pulled"]["shm"], 0, rows)
        self.assertEqual(rows["pulled"]["inline"], 0, rows)
        self.assertGreater(rows["pushed"]["shm"], 0, rows)
        self.assertLessEqual(rows["pushed"]["inline"], 2 * rows["pushed"]["shm"] / reference["steps"], rows)
        # Lazy is not exact: the table stepped as a dense tensor (every row's Adam moments decay) ends elsewhere.
        exact = self.train("exact", 1, 1, ["--sparse_optimizer=exact"])
        self.assertNotEqual(exact["params_sha256"], reference["params_sha256"])
        self.assertNotEqual(exact["optimizer_digest"], reference["optimizer_digest"])
        self.assertGreater((exact["push_bytes"] + exact["pull_bytes"]) / exact["steps"], 1.9 * table)

    def test_b_a_join_and_a_worker_sigkill_change_no_bit_with_the_table_looked_up(self):
        reference = self.reference80()  # test_c's (the heartbeat timeout is timing only, never bits)
        d = self.run_dir("job")
        cmd = [LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d, "--", *self.job, *SPILL,
               *LOOKUP, "--steps=80", "--heartbeat_timeout_ms=1500"]
        result = self.run_with_join_and_sigkill(d, cmd)
        self.assertGreaterEqual(result["workers_seen"], 3)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(d))
        self.assertEqual(result["optimizer_digest"], reference["optimizer_digest"])
        assert_looked_up(self, d, "emb.weight")

    def test_c_a_shard_sigkilled_with_rows_spilled_rolls_back_to_the_same_bits(self):
        steps = ["--steps=80"]
        reference = self.reference80()
        d = self.run_dir("job")
        out = open(os.path.join(self.tmp, "local.out"), "w")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "10", "--supervise", "--", *self.job, *SPILL, *LOOKUP, *steps],
                               env=ENV, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        # Held at step 45 (between the checkpoints of 40 and 50) so that the kill lands mid-run however fast the
        # steps go, and released at once.
        self.control(d, "hold", "--from-step=45")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)
        with open(os.path.join(d, "pids", "shard1.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        out.close()
        back = read_events(d, "rolling_back")
        self.assertEqual(len(back), 1, logs(d))
        self.assertEqual(back[0]["step"], 40, back)
        self.assertEqual(read_result(d)["params_sha256"], reference["params_sha256"], logs(d))
        # The rollback brought the rows' moments back with their weights.
        self.assertEqual(read_result(d)["optimizer_digest"], reference["optimizer_digest"])
        assert_looked_up(self, d, "emb.weight")
        # export_model from the stores (the tables' checkpoints read beside them, read-only): the final step's file is
        # the job's own model.safetensors byte for byte; an older held checkpoint exports too, other bits.
        final = os.path.join(self.tmp, "final.safetensors")
        p = subprocess.run([os.path.join(BIN, "export_model"), f"--stores={d}/store", f"--out={final}"], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(final, "rb") as a, open(os.path.join(d, "model.safetensors"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        older = os.path.join(self.tmp, "older.safetensors")
        p = subprocess.run([os.path.join(BIN, "export_model"), f"--stores={d}/store", f"--out={older}", "--step=70"],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(final, "rb") as a, open(older, "rb") as b:
            self.assertNotEqual(a.read(), b.read())

    def test_d_init_from_seeds_the_table_and_the_bits_survive_a_join_a_kill_and_a_rollback(self):
        """--init_from a trained job's export: the table starts from the file's rows (on the shards, spilled to
        RocksDB), not from its initializer's; 1 x 1, 2 x 2 through a join and a worker SIGKILL, and 2 x 2 through a
        shard SIGKILL and its rollback end on the same bits; --freeze keeps the table at the file's bits."""
        self.train("source", 1, 1, ["--steps=10"])
        source = os.path.join(self.tmp, "source.safetensors")
        os.replace(os.path.join(self.run_dir("source"), "model.safetensors"), source)
        # Another seed: every row of the file differs from the new job's initializer, so all 65,536 are seeded.
        tune = ["--steps=20", "--seed=5", "--heartbeat_timeout_ms=1500"]
        one = self.train("tune-1x1", 1, 1, [*tune, f"--init_from={source}"])
        scratch = self.train("scratch", 1, 1, tune)
        self.assertNotEqual(one["params_sha256"], scratch["params_sha256"])

        def table(path):  # the table's bytes (the interpreter running the tests may have no numpy)
            shape, raw = read_safetensors(path)[1]["emb.weight"]
            self.assertEqual(shape, [ROWS, DIM])
            return raw
        loaded = table(source)
        row = DIM * 4
        # The rows fine-tuning did not touch are the file's, bit for bit; from scratch none is.
        for name, want_most in (("tune-1x1", True), ("scratch", False)):
            got = table(os.path.join(self.run_dir(name), "model.safetensors"))
            same = sum(got[r * row:(r + 1) * row] == loaded[r * row:(r + 1) * row] for r in range(ROWS))
            if want_most:
                self.assertGreater(same, ROWS // 2, name)
                self.assertLess(same, ROWS, f"{name}: no row trained")
            else:
                self.assertEqual(same, 0, name)

        d = self.run_dir("tune-join")
        cmd = [LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d, "--", *self.job, *SPILL,
               *tune, f"--init_from={source}"]
        joined = self.run_with_join_and_sigkill(d, cmd)
        self.assertGreaterEqual(joined["workers_seen"], 3)
        self.assertEqual(joined["params_sha256"], one["params_sha256"], logs(d))
        self.assertEqual(joined["optimizer_digest"], one["optimizer_digest"])

        # A shard SIGKILLed after the checkpoint of step 10: the job rolls back to it, the workers pull the tables
        # from scratch (the seeded rows from the shards' stores again).
        d = self.run_dir("tune-rollback")
        out = open(os.path.join(self.tmp, "rollback.out"), "w")
        job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "2", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "5", "--supervise", "--", *self.job, *SPILL, *tune,
                                f"--init_from={source}"], env=ENV, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        self.control(d, "hold", "--from-step=12")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", proc=job)
        with open(os.path.join(d, "pids", "shard1.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=600), 0, logs(d))
        out.close()
        self.assertEqual([e["step"] for e in read_events(d, "rolling_back")], [10], logs(d))
        self.assertEqual(read_result(d)["params_sha256"], one["params_sha256"], logs(d))
        self.assertEqual(read_result(d)["optimizer_digest"], one["optimizer_digest"])

        # Frozen, the table is a dense tensor that takes no gradient: the file's bits at the end.
        self.train("frozen", 1, 1, ["--steps=5", f"--init_from={source}", "--freeze=^emb"])
        frozen = table(os.path.join(self.run_dir("frozen"), "model.safetensors"))
        self.assertEqual(frozen, loaded)

    def test_e_a_module_of_unbounded_keys_ends_with_its_table_in_a_table_file_and_no_scripted_export(self):
        """A module's nn.EmbeddingBag(0, dim, sparse=True) with with_table_ids: 1 x 1 and 2 x 2 agree, the job ends
        with model.safetensors, its table file and model.pt, and without model.script.pt, which would need the
        table inside the module (export_model says so and succeeds). The export evaluates, predicts and serves
        through the job's module: the job's own test accuracy, predict's bits over HTTP."""
        module = os.path.join(self.tmp, "keyed.pt")  # 1 x 1 trains a copy of its own, changed below
        shutil.copyfile(f"{made()}/keyed.pt", module)
        one = self.train("keys-1x1", 1, 1, [f"--model={module}", "--steps=15"])
        many = self.train("keys-2x2", 2, 2, [f"--model={made()}/keyed.pt", "--steps=15"])
        self.assertEqual(many["params_sha256"], one["params_sha256"], logs(self.run_dir("keys-2x2")))
        self.assertEqual(many["optimizer_digest"], one["optimizer_digest"])
        for name in ("keys-1x1", "keys-2x2"):
            d = self.run_dir(name)
            meta, tensors = read_safetensors(os.path.join(d, "model.safetensors"))
            self.assertNotIn("emb.weight", tensors)
            self.assertEqual(json.loads(meta["table_files"])["emb.weight"]["rows"], 0)
            self.assertTrue(os.path.exists(os.path.join(d, "model.pt")))
            self.assertFalse(os.path.exists(os.path.join(d, "model.script.pt")))
            assert_looked_up(self, d, "emb.weight")
        self.assert_served_through_its_module(self.run_dir("keys-2x2"), many)
        # The job's module file changed since the job: refused (bad input), unless --script names the module.
        shutil.copyfile(f"{made()}/hashed.pt", module)
        export = os.path.join(self.run_dir("keys-1x1"), "model.safetensors")
        self.assertEqual(self.evaluate(export, expect=2), None)
        got = self.evaluate(export, "--script", f"{made()}/keyed.pt")
        self.assertEqual((got["accuracy"], got["loss"]), (one["test_accuracy"], one["test_loss"]))

    def evaluate(self, model, *flags, expect=0):
        """`elasticps evaluate --json` of `model` on the test set as the job evaluates it (JOB's --test_limit and
        --eval_batch): its JSON, or None when it exits `expect` != 0."""
        d = made()
        p = subprocess.run([ELASTICPS, "evaluate", "--model", model, "--data", f"{d}/ids.npy", "--labels",
                            f"{d}/labels.npy", "--limit", "512", "--batch", "256", "--json", *flags],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        self.assertEqual(p.returncode, expect, p.stderr[-2000:])
        return json.loads(p.stdout.strip().splitlines()[-1]) if expect == 0 else None

    def assert_served_through_its_module(self, run, result, n=12):
        """A TorchScript job's model.safetensors, its table in a table file: evaluate gives the job's own test
        accuracy and loss (the module its metadata names), and serve answers ids instances with predict's bits."""
        model, d = os.path.join(run, "model.safetensors"), made()
        got = self.evaluate(model)
        self.assertEqual((got["count"], got["accuracy"], got["loss"]),
                         (512, result["test_accuracy"], result["test_loss"]))
        head, out = os.path.join(self.tmp, "head.npy"), os.path.join(self.tmp, "predicted.csv")
        ids = read_npy_int64(f"{d}/ids.npy", n)
        write_npy(head, ids, [len(ids[0])], dtype="<i8")
        p = subprocess.run([ELASTICPS, "predict", "--model", model, "--data", head, "--batch", str(n), "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        flags = ["--model", model, "--input-dtype", "int64", "--input-shape", str(len(ids[0]))]
        self.assert_serves_as_predicted(flags, ids, out, bad=[-1] * len(ids[0]))  # a negative id


CRITEO = os.path.join(ROOT, "examples", "criteo")
CRITEO_ROWS = 1 << 16


class Criteo(ServeClient, RunDirTest):
    """examples/criteo: the DLRM-style model on synthetic Criteo-format logs (--data_format=criteo): the categories
    hashed into its sparse=True table, the same bits on 1 x 1 and on 2 shards x 3 workers with rows spilled."""

    @classmethod
    def setUpClass(cls):
        """The model and the data files, written once for the class into a folder of its own (their scripts are
        deterministic): cls.data, or cls.failed, the command that failed and its output."""
        cls.data = tempfile.mkdtemp(prefix="eps-criteo-")
        cls.failed = None
        d = cls.data
        steps = [[TORCH_PY, os.path.join(CRITEO, "dlrm.py"), f"{d}/dlrm.pt", "--rows", str(CRITEO_ROWS)],
                 [TORCH_PY, os.path.join(CRITEO, "synth.py"), "--rows", "3000", "--out", f"{d}/train.txt"],
                 [TORCH_PY, os.path.join(CRITEO, "synth.py"), "--rows", "500", "--seed", "2", "--out", f"{d}/test.txt"]]
        for cmd in steps:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
            if p.returncode != 0:
                cls.failed = f"{cmd[1]} failed: {p.stdout[-2000:]}"
                break

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.data, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        if self.failed:
            skip_or_fail(self, self.failed)
        d = self.data
        self.job = [f"--model={d}/dlrm.pt", f"--train_data={d}/train.txt", f"--test_data={d}/test.txt",
                    f"--hash_buckets={CRITEO_ROWS}", "--steps=30", "--batch_per_vw=16", "--eval_batch=250"]

    def test_a_placements_agree_and_only_touched_rows_travel(self):
        flags = os.path.join(CRITEO, "dlrm.flags")
        _, _, one = self.run_local("1x1", flags, extra=self.job)
        _, _, many = self.run_local("2x3", flags, servers=2, workers=3, extra=[*self.job, *SPILL])
        self.assertEqual(many["params_sha256"], one["params_sha256"], logs(self.run_dir("2x3")))
        self.assertEqual(many["test_loss"], one["test_loss"])
        table = CRITEO_ROWS * 16 * 4
        self.assertLess((one["push_bytes"] + one["pull_bytes"]) / one["steps"], 0.5 * table, one)
        # Categories hashed into more rows than the model's table: the job fails at start (the dry run), it does
        # not train on rows that are not there.
        code, _, result = self.run_local("wide", flags, extra=[*self.job, f"--hash_buckets={4 * CRITEO_ROWS}"],
                                         expect_ok=False, timeout=120)
        self.assertNotEqual(code, 0)
        self.assertIsNone(result)

    def test_b_the_built_in_dlrm_agrees_across_placements_with_rows_spilled(self):
        """--model=dlrm: the same network built in, its table dlrm.emb.weight a sparse table; a join and a worker
        SIGKILL with most rows in RocksDB end on the 1 x 1 bits, weights and Adam moments alike."""
        flags = os.path.join(CRITEO, "dlrm_builtin.flags")
        job = [*self.job[1:], "--steps=40", "--heartbeat_timeout_ms=1500"]  # not the TorchScript file
        _, _, one = self.run_local("builtin-1x1", flags, extra=job)
        # `elasticps evaluate` rebuilds the model from its export (the table's rows from the metadata) and hashes the
        # categories as the job did: the job's own test accuracy.
        p = subprocess.run([f"{BIN}/elasticps", "evaluate", "--model", f"{self.run_dir('builtin-1x1')}/model.safetensors",
                            "--data", f"{self.data}/test.txt", "--data-format", "criteo", "--batch", "250", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["accuracy"], one["test_accuracy"])
        # --script runs a TorchScript job's export: with a built-in model's it is bad input, not ignored.
        p = subprocess.run([f"{BIN}/elasticps", "evaluate", "--model", f"{self.run_dir('builtin-1x1')}/model.safetensors",
                            "--script", f"{self.data}/dlrm.pt", "--data", f"{self.data}/test.txt", "--data-format",
                            "criteo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr[-2000:])
        # The workers look the table up by their batches' rows: the same bits as holding it.
        d = self.run_dir("builtin-join")
        cmd = [LOCAL, "--job", flags, "--servers", "2", "--workers", "2", "--run-dir", d, "--", *job, *SPILL,
               *LOOKUP]
        result = self.run_with_join_and_sigkill(d, cmd)
        self.assertGreaterEqual(result["workers_seen"], 3)
        self.assertEqual(result["params_sha256"], one["params_sha256"], logs(d))
        self.assertEqual(result["optimizer_digest"], one["optimizer_digest"])
        assert_looked_up(self, d, "dlrm.emb.weight")
        tables = [t for r in shard_reports(self, d, 2) for t in r["sparse_tables"]]
        self.assertGreater(sum(t["spill_writes"] for t in tables), 0, tables)
        table = CRITEO_ROWS * 16 * 4  # --model_dim=16
        self.assertLess((one["push_bytes"] + one["pull_bytes"]) / one["steps"], 0.5 * table, one)

    def test_c_a_table_larger_than_any_worker_trains_and_exports_as_a_table_file(self):
        """The built-in dlrm with 2^25 rows of 32 (a 4 GiB table): no worker holds it (each looks up its batches'
        rows), no process lays it out, and it leaves the job as a table file of its stored rows, which
        elasticps.load_tables reads; 1 x 1 and 2 x 2 through a join and a worker SIGKILL agree."""
        flags = os.path.join(CRITEO, "dlrm_builtin.flags")
        rows, dim = 1 << 25, 32
        job = [*self.job[1:], f"--hash_buckets={rows}", f"--model_dim={dim}", "--steps=20",
               "--heartbeat_timeout_ms=1500"]
        _, _, one = self.run_local("big-1x1", flags, extra=job)
        d = self.run_dir("big-join")
        # The final pull reads the stored rows in pages of 64 KiB.
        cmd = [LOCAL, "--job", flags, "--servers", "2", "--workers", "2", "--run-dir", d, "--", *job, *SPILL,
               "--final_pull_kb=64"]
        result = self.run_with_join_and_sigkill(d, cmd)
        self.assertEqual(result["params_sha256"], one["params_sha256"], logs(d))
        self.assertEqual(result["optimizer_digest"], one["optimizer_digest"])
        assert_looked_up(self, d, "dlrm.emb.weight")  # above the default --worker_table_mb
        # The table is not in model.safetensors: a table file beside it holds the stored rows, the same in both.
        loaded = []
        for run in (self.run_dir("big-1x1"), d):
            meta, tensors = read_safetensors(os.path.join(run, "model.safetensors"))
            self.assertNotIn("dlrm.emb.weight", tensors)
            self.assertIn("dlrm.top2.bias", tensors)
            self.assertIn("dlrm.emb.weight", json.loads(meta["table_files"]))
            loaded.append(table_of(self, LOAD_TABLE, run))
        self.assertEqual(loaded[0], loaded[1])
        table = loaded[0]
        self.assertEqual((table["rows"], table["dim"]), (rows, dim))
        # 20 steps of 128 samples of 26 categories touched at most 66,560 rows of the 33.5 M.
        self.assertGreater(table["stored"], 1000)
        self.assertLessEqual(table["stored"], 20 * 128 * 26)
        # One request a shard for the rows in pages of 64 MiB; of 64 KiB, as many as the rows' bytes need (beside
        # each shard's optimizer digest and page of chunks).
        self.assertEqual(one["final_pull"]["requests"], 3, one["final_pull"])
        pages = -(-table["stored"] * (8 + 4 * dim) // (64 << 10))
        self.assertGreaterEqual(result["final_pull"]["requests"], 2 + 2 + pages, result["final_pull"])
        self.assertGreater(pages, 2)
        self.assertTrue(table["stored_row_from_file"] and table["initial_row_computed"], table)
        self.assert_served_as_trained(d, result)

    def test_d_unbounded_keys_agree_through_a_join_and_a_kill_and_leave_as_a_table_file(self):
        """--hash_buckets=0: the categories keep 63-bit keys, rows of a table of unbounded keys (dlrm.emb.weight of
        0 rows) that grows with the rows the job touches; every worker looks the rows up into a compact table. 1 x 1
        and 2 x 2 through a join and a worker SIGKILL, most rows in RocksDB, agree, and the table leaves as a table
        file whose ids are the keys."""
        flags = os.path.join(CRITEO, "dlrm_builtin.flags")
        job = [*self.job[1:], "--hash_buckets=0", "--steps=20", "--heartbeat_timeout_ms=1500"]
        _, _, one = self.run_local("keys-1x1", flags, extra=job)
        d = self.run_dir("keys-join")
        cmd = [LOCAL, "--job", flags, "--servers", "2", "--workers", "2", "--run-dir", d, "--", *job, *SPILL]
        result = self.run_with_join_and_sigkill(d, cmd)
        self.assertEqual(result["params_sha256"], one["params_sha256"], logs(d))
        self.assertEqual(result["optimizer_digest"], one["optimizer_digest"])
        self.assertEqual(result["test_loss"], one["test_loss"])
        assert_looked_up(self, d, "dlrm.emb.weight")
        loaded = [table_of(self, LOAD_KEYS, run) for run in (self.run_dir("keys-1x1"), d)]
        self.assertEqual(loaded[0], loaded[1])
        table = loaded[0]
        self.assertTrue(table["unbounded"], table)
        self.assertGreater(table["stored"], 1000)
        self.assertLessEqual(table["stored"], 20 * 128 * 26)
        self.assertGreater(table["largest_id"], 1 << 40)  # keys, not rows of a table of 2^32
        self.assertLess(table["largest_id"], (1 << 63) - 1)
        self.assert_served_as_trained(d, result)

    def assert_served_as_trained(self, run, result, n=12):
        """The export of `run`, its table left to a table file: `elasticps evaluate` on the test set gives the job's
        own test accuracy and loss (each batch's rows read from the file, the others their initial rows), and
        `elasticps serve` answers Criteo samples sent as their fields with `elasticps predict`'s bits."""
        model, test = os.path.join(run, "model.safetensors"), os.path.join(self.data, "test.txt")
        p = subprocess.run([ELASTICPS, "evaluate", "--model", model, "--data", test, "--data-format", "criteo",
                            "--batch", "250", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=ENV, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        got = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((got["count"], got["accuracy"]), (500, result["test_accuracy"]))
        self.assertAlmostEqual(got["loss"], result["test_loss"], places=5)
        # n samples in one request are one batch of n: predict's --batch n over the same samples.
        with open(test) as f:
            lines = [next(f).rstrip("\n") for _ in range(n)]
        head, out = os.path.join(self.tmp, "head.txt"), os.path.join(self.tmp, "predicted.csv")
        with open(head, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        p = subprocess.run([ELASTICPS, "predict", "--model", model, "--data", head, "--data-format", "criteo",
                            "--batch", str(n), "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        fields = [line.split("\t", 1)[1] for line in lines]  # a sample less its label
        self.assert_serves_as_predicted(["--model", model], fields, out, bad="1\t2")  # a sample of two fields


def table_of(test, script, run):
    """What `script` (LOAD_TABLE, LOAD_KEYS) prints of run dir `run`'s table file, as JSON."""
    p = subprocess.run([TORCH_PY, "-c", script, run], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(ENV, PYTHONPATH=os.path.join(ROOT, "python")), timeout=120)
    test.assertEqual(p.returncode, 0, p.stderr[-2000:])
    return json.loads(p.stdout)


# Prints a table of unbounded keys as load_tables reads it.
LOAD_KEYS = """
import hashlib, json, sys
import numpy as np
import elasticps
t = elasticps.load_tables(sys.argv[1])["dlrm.emb.weight"]
print(json.dumps({"unbounded": t.unbounded, "stored": len(t.ids), "largest_id": int(t.ids[-1]),
                  "sha256": hashlib.sha256(np.ascontiguousarray(t.ids).tobytes() +
                                           np.ascontiguousarray(t.values).tobytes()).hexdigest()}))
"""


# Prints a run's table file as load_tables reads it: its size, a digest of its stored rows, and that a stored row
# comes from the file and an untouched one from the initializer.
LOAD_TABLE = """
import hashlib, json, sys
import numpy as np
import elasticps
t = elasticps.load_tables(sys.argv[1])["dlrm.emb.weight"]
stored = int(t.ids[len(t.ids) // 2])
held = set(t.ids.tolist())
untouched = next(r for r in range(t.rows) if r not in held)
both = t[[stored, untouched]]
print(json.dumps({"rows": t.rows, "dim": t.dim, "stored": len(t.ids),
                  "sha256": hashlib.sha256(np.ascontiguousarray(t.ids).tobytes() +
                                           np.ascontiguousarray(t.values).tobytes()).hexdigest(),
                  "stored_row_from_file": bool((both[0] == t.values[len(t.ids) // 2]).all()),
                  "initial_row_computed": both[1].tolist() == elasticps.initial_row(t.seed, t.table, untouched,
                                                                                   t.dim)}))
"""


if __name__ == "__main__":
    unittest.main()
