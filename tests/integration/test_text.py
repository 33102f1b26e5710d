"""The text app (docs/text.md): text_transformer on a few hundred real SpamAssassin mails (JSONL, the fixed split
scripts/setup.sh writes) trains to the same bits over two placements and across a join and a SIGKILL, its token
embedding a sparse table (dense with --sparse_optimizer=exact); the coordinator's vocabulary (run_dir/vocab.json) is
the same in every run; bad text data fails the job at start."""
import csv
import json
import os
import re
import signal
import struct
import subprocess
import unittest

from harness import (BIN, ENV, LOCAL, ROOT, RunDirTest, logs, poll_until, read_events, read_report, read_result,
                     read_safetensors, requires, wait_for_event, wait_for_file)
SPAM = "/usr/share/datasets/spam-assassin"
JOB_FILE = os.path.join(ROOT, "examples", "spam_transformer.flags")
# A few hundred mails, short sequences, small dims: seconds per run.
JOB = ["--train_limit=400", "--test_limit=200", "--seq_len=48", "--vocab_size=1000", "--model_dim=16",
       "--model_heads=2", "--model_layers=2", "--virtual_workers=8", "--batch_per_vw=8", "--steps=30",
       "--eval_batch=100"]


def read_vocab(d):
    with open(os.path.join(d, "vocab.json")) as f:
        return json.load(f)


@requires(os.path.exists(f"{SPAM}/test.jsonl"), "no SpamAssassin corpus (scripts/setup.sh)")
class TextTransformer(RunDirTest):
    def run_text(self, name, workers, extra=(), servers=1, **kw):
        return self.run_local(name, JOB_FILE, servers=servers, workers=workers, extra=[*JOB, *extra], **kw)

    def sparse_tables(self, name, workers):
        """What each worker of run `name` reported it trained as sparse tables (its report's sparse_tables)."""
        return [read_report(os.path.join(self.run_dir(name), "logs", f"worker{i}.json"))["sparse_tables"]
                for i in range(workers)]

    def reference60(self):
        """The job for 60 steps on 2 workers, the reference of test_b and test_e: run once for the class (run_shared,
        in self.shared_dir("ref")); returns its result.json's dict."""
        return self.run_shared("ref", job=JOB_FILE, servers=1, workers=2, extra=[*JOB, "--steps=60"])[2]

    def test_a_two_placements_train_the_same_bits_with_the_same_vocabulary(self):
        _, _, one = self.run_text("w1", 1)
        # 2 shards: the table's rows are spread over them, the same bits.
        _, _, two = self.run_text("w2", 2, servers=2)
        self.assertEqual(one["steps"], 30)
        self.assertEqual(one["model"], "text_transformer")
        self.assertEqual(two["params_sha256"], one["params_sha256"])
        self.assertEqual(two["optimizer_digest"], one["optimizer_digest"])
        self.assertEqual(two["test_accuracy"], one["test_accuracy"])
        # The token embedding is a sparse table on every worker; the position embedding stays dense.
        self.assertEqual(self.sparse_tables("w1", 1), [["text.tok.weight"]])
        self.assertEqual(self.sparse_tables("w2", 2), [["text.tok.weight"]] * 2)
        # --sparse_optimizer=exact: the table a dense tensor again (every row pulled, pushed and stepped every
        # step), other bits (lazy Adam moves only the touched rows); the sparse table saves more than the table's
        # own bytes (1000 x 16 floats) a step.
        _, _, exact = self.run_text("exact", 1, extra=["--sparse_optimizer=exact"])
        self.assertEqual(self.sparse_tables("exact", 1), [[]])
        self.assertNotEqual(exact["params_sha256"], one["params_sha256"])
        per_step = {k: (r["push_bytes"] + r["pull_bytes"]) / r["steps"] for k, r in (("lazy", one), ("exact", exact))}
        self.assertGreater(per_step["exact"] - per_step["lazy"], 1000 * 16 * 4, per_step)
        v1, v2 = read_vocab(os.path.join(self.tmp, "w1")), read_vocab(os.path.join(self.tmp, "w2"))
        self.assertEqual(v1, v2)
        self.assertEqual(v1["labels"], ["ham", "spam"])
        self.assertEqual(v1["seq_len"], 48)
        self.assertEqual(len(v1["words"]), 1000)
        self.assertEqual(v1["words"][:3], ["<pad>", "<unk>", "<cls>"])
        # The mails longer than 47 words (<cls> + 47 = --seq_len) are counted as truncated: the tokenizer's word
        # rule (docs/text.md) written again here.
        word = re.compile("[0-9A-Za-z\u0080-\ufffc\ufffe-\U0010ffff]+")
        expected = {}
        for split, limit in (("train", 400), ("test", 200)):
            with open(f"{SPAM}/{split}.jsonl") as f:
                mails = [json.loads(f.readline())["text"] for _ in range(limit)]
            expected[split] = sum(len(word.findall(m)) > 47 for m in mails)
        self.assertEqual(one["truncated"], expected)
        self.assertGreater(expected["train"], 0)
        # Another seed: other bits (the digest says something).
        _, _, other = self.run_text("seed", 2, extra=["--seed=8"])
        self.assertNotEqual(other["params_sha256"], one["params_sha256"])

    def test_b_a_join_and_a_sigkill_keep_the_bits(self):
        reference = self.reference60()
        d = self.run_dir("job")
        cmd = [LOCAL, "--job", JOB_FILE, "--servers", "1", "--workers", "2", "--run-dir", d, "--", *JOB,
               "--steps=60"]
        result = self.run_with_join_and_sigkill(d, cmd, timeout=300)
        self.assertGreaterEqual(result["workers_seen"], 3)
        self.assertEqual(result["params_sha256"], reference["params_sha256"], logs(d))
        self.assertEqual(read_vocab(d), read_vocab(self.shared_dir("ref")))

    def test_c_a_test_label_outside_the_training_set_fails_at_start(self):
        d = self.run_dir("data")
        with open(f"{SPAM}/test.jsonl") as f:
            rows = [f.readline() for _ in range(3)]
        with open(f"{d}/test.jsonl", "w") as f:
            f.writelines(rows)
            f.write(json.dumps({"text": "hello", "label": "phishing"}) + "\n")
        with open(f"{d}/broken.jsonl", "w") as f:
            f.writelines(rows)
            f.write('{"text": "cut\n')
        for name, flags in (("label", [f"--test_data={d}/test.jsonl"]),
                            ("broken", [f"--train_data={d}/broken.jsonl"])):
            code, out, result = self.run_text(name, 1, extra=flags, expect_ok=False, timeout=120)
            self.assertNotEqual(code, 0, name)
            self.assertIsNone(result, name)


    def test_d_predict_on_raw_mails_gives_the_jobs_classes(self):
        _, _, r = self.run_text("job", 1)
        d = self.run_dir("job")
        with open(f"{SPAM}/test.jsonl") as f:
            rows = [json.loads(f.readline()) for _ in range(200)]
        raw = os.path.join(self.tmp, "raw.jsonl")
        with open(raw, "w") as f:  # mails only: no label
            for row in rows:
                f.write(json.dumps({"text": row["text"]}) + "\n")
        eps = [os.path.join(BIN, "elasticps")]
        model = ["--model", os.path.join(d, "model.safetensors"), "--vocab", os.path.join(d, "vocab.json"),
                 "--batch", "100"]
        out = os.path.join(self.tmp, "p.csv")
        p = subprocess.run([*eps, "predict", *model, "--data", raw, "--out", out], env=ENV, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(out) as f:
            predicted = list(csv.DictReader(f))
        self.assertEqual(len(predicted), 200)
        self.assertEqual(set(predicted[0]), {"index", "class", "label", "p0", "p1"})
        labels = read_vocab(d)["labels"]
        for row in predicted:
            self.assertEqual(row["label"], labels[int(row["class"])])
            self.assertAlmostEqual(float(row["p0"]) + float(row["p1"]), 1.0, places=5)
        correct = sum(row["label"] == mail["label"] for row, mail in zip(predicted, rows))
        self.assertEqual(correct / 200, r["test_accuracy"])
        # evaluate on the labelled mails: the job's figure exactly.
        p = subprocess.run([*eps, "evaluate", *model, "--data", f"{SPAM}/test.jsonl", "--limit", "200", "--json"],
                           env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["accuracy"], r["test_accuracy"])
        # Text without --vocab cannot be tokenized as the job did: refused, naming the flag.
        p = subprocess.run([*eps, "predict", "--model", model[1], "--data", raw, "--out", out], env=ENV, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn("--vocab", p.stdout)


    def test_e_a_restarted_coordinator_tokenizes_with_the_stored_vocabulary(self):
        reference = self.reference60()
        d = self.run_dir("job")
        job = subprocess.Popen([LOCAL, "--job", JOB_FILE, "--servers", "1", "--workers", "2", "--run-dir", d,
                                "--checkpoint-every", "10", "--supervise", "--", *JOB, "--steps=60"],
                               env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_file(os.path.join(d, "coordinator.addr"), proc=job)
        # Held (elasticps hold) at step 20, placed before the workers can get there, and SIGKILLed there: a short
        # job on a fast host does not end first. The restarted coordinator holds the job again until released.
        self.control(d, "hold", "--from-step=20")
        wait_for_event(d, "paused", lambda e: e["cause"] == "hold", timeout=180, proc=job)
        with open(os.path.join(d, "vocab.json")) as f:
            before = f.read()
        with open(os.path.join(d, "pids", "coordinator.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        poll_until(lambda: True if len([e for e in read_events(d, "paused") if e["cause"] == "hold"]) == 2 else None,
                   180, "the restarted coordinator did not hold the job again")
        self.control(d, "release")
        self.assertEqual(job.wait(timeout=300), 0, logs(d))
        self.assertEqual(len(read_events(d, "coordinator_resumed")), 1)
        with open(os.path.join(d, "vocab.json")) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(read_result(d)["params_sha256"], reference["params_sha256"], logs(d))


HASHED_FILE = os.path.join(ROOT, "examples", "spam_hashed.flags")
HASHED = ["--train_limit=600", "--test_limit=200", "--seq_len=96", "--hash_buckets=65536", "--model_dim=16",
          "--virtual_workers=8", "--batch_per_vw=8", "--steps=25", "--eval_batch=100"]


@requires(os.path.exists(f"{SPAM}/test.jsonl"), "no SpamAssassin corpus (scripts/setup.sh)")
class TextHashed(RunDirTest):
    """text_hashed (fastText-style): hashed words and bigrams into one sparse=True EmbeddingBag, a sparse table."""

    def run_hashed(self, name, servers, workers, extra=(), **kw):
        return self.run_local(name, HASHED_FILE, servers=servers, workers=workers, extra=[*HASHED, *extra], **kw)

    def test_a_placements_agree_only_touched_rows_travel_and_evaluate_gives_the_jobs_accuracy(self):
        _, _, one = self.run_hashed("w1", 1, 1)
        _, _, many = self.run_hashed("s2w3", 2, 3)
        self.assertEqual(one["model"], "text_hashed")
        self.assertEqual(many["params_sha256"], one["params_sha256"])
        self.assertEqual(many["test_accuracy"], one["test_accuracy"])
        vocab = read_vocab(self.run_dir("w1"))
        self.assertEqual((vocab["hash_buckets"], vocab["ngrams"]), (65536, 2))
        self.assertEqual(vocab["words"], ["<pad>", "<unk>", "<cls>"])
        # The table (65,536 x 16 floats) is a sparse table: a step moves the rows its batch touched, a few
        # hundred, not the table.
        table_bytes = 65536 * 16 * 4
        self.assertLess((one["push_bytes"] + one["pull_bytes"]) / one["steps"], 0.5 * table_bytes)
        d = self.run_dir("w1")
        self.assertEqual(read_report(os.path.join(d, "logs", "worker0.json"))["sparse_tables"], ["text.bag.weight"])
        p = subprocess.run([os.path.join(BIN, "elasticps"), "evaluate", "--model", f"{d}/model.safetensors",
                            "--vocab", f"{d}/vocab.json", "--data", f"{SPAM}/test.jsonl", "--limit", "200", "--json"],
                           env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["accuracy"], one["test_accuracy"])

    def test_b_text_hashed_of_63_bit_keys_agrees_across_placements_and_evaluates_from_its_table_file(self):
        """--hash_buckets=0: every word and bigram keeps its 63-bit key, a row of a table of unbounded keys
        (text.bag.weight of 0 rows) that the workers look up; 1 x 1 and 2 x 2 agree, the table leaves as a table
        file of keys, and `elasticps evaluate` reads it to the job's own test accuracy."""
        _, _, one = self.run_hashed("keys-1x1", 1, 1, extra=["--hash_buckets=0"])
        _, _, many = self.run_hashed("keys-2x2", 2, 2, extra=["--hash_buckets=0"])
        self.assertEqual(many["params_sha256"], one["params_sha256"])
        self.assertEqual(many["optimizer_digest"], one["optimizer_digest"])
        d = self.run_dir("keys-2x2")
        self.assertEqual(read_vocab(d)["hash_buckets"], 0)
        meta, tensors = read_safetensors(os.path.join(d, "model.safetensors"))
        self.assertNotIn("text.bag.weight", tensors)
        table = json.loads(meta["table_files"])["text.bag.weight"]
        self.assertEqual((table["rows"], table["dim"]), (0, 16))
        with open(os.path.join(d, table["ids"]), "rb") as f:
            npy = f.read()
        header = 10 + struct.unpack("<H", npy[8:10])[0]
        ids = struct.unpack(f"<{table['stored']}Q", npy[header:])
        self.assertGreater(table["stored"], 100)
        self.assertGreater(max(ids), 1 << 40)  # keys, not rows of a table of 2^32
        p = subprocess.run([os.path.join(BIN, "elasticps"), "evaluate", "--model", f"{d}/model.safetensors",
                            "--vocab", f"{d}/vocab.json", "--data", f"{SPAM}/test.jsonl", "--limit", "200",
                            "--batch", "100", "--json"], env=ENV, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(got["accuracy"], one["test_accuracy"])
        self.assertAlmostEqual(got["loss"], one["test_loss"], places=5)

    def test_c_text_hashed_from_a_file_seeds_its_table(self):
        # --init_from holding the table seeds it (docs/design.md, "Seeded tables"): loaded, still a sparse table,
        # and the run ends elsewhere than the same job from scratch.
        self.run_hashed("pre", 1, 1, extra=["--steps=2"])
        pre = self.run_dir("pre")
        _, _, tuned = self.run_hashed("init", 1, 1, extra=["--steps=3", f"--init_from={pre}/model.safetensors"])
        _, _, scratch = self.run_hashed("scratch", 1, 1, extra=["--steps=3"])
        report = read_report(os.path.join(self.run_dir("init"), "logs", "worker0.json"))
        self.assertIn("text.bag.weight", report["init"]["loaded"])
        self.assertEqual(report["sparse_tables"], ["text.bag.weight"])
        self.assertNotEqual(tuned["params_sha256"], scratch["params_sha256"])


if __name__ == "__main__":
    unittest.main()
