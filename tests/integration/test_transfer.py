"""Transfer learning (docs/models.md, "Transfer learning"): a job starts from another job's exported model with
--init_from, --reinit starts the head afresh and --freeze keeps the convolutions at their loaded bits while
nothing is pushed for them; the bits stay independent of the placement; bad transfer flags and files fail
clearly, before training or as a failed job."""
import json
import os
import subprocess
import unittest

from harness import ENV, ROOT, RunDirTest, logs, read_events, read_report, read_safetensors, requires

CNN = os.path.join(ROOT, "examples", "fashion_mnist_cnn.flags")
SMALL = ["--train_limit=512", "--test_limit=128", "--batch_per_vw=4", "--warmup_steps=2", "--eval_every=0"]
STEPS = 8


class Transfer(RunDirTest):
    def source(self, name="model.safetensors"):
        """The model every fine-tuning job starts from: the CNN after a few steps (run once for the class:
        run_shared). Returns the path of its export `name`."""
        self.run_shared("source", job=CNN, workers=1, extra=[*SMALL, "--steps=6"])
        return os.path.join(self.shared_dir("source"), name)

    def finetune(self, name, init, workers=1, extra=(), shared=False):
        """The fine-tuning job from `init`; shared: run once for the class (run_shared), in self.shared_dir(name)."""
        run = self.run_shared if shared else self.run_local
        return run(name, job=CNN, workers=workers,
                   extra=[*SMALL, f"--steps={STEPS}", f"--init_from={init}", "--reinit=^fc2\\.", "--seed=5", *extra])

    def frozen(self):
        """finetune() from source() on 1 worker with the convolutions frozen, for test_a and test_b: run once."""
        return self.finetune("frozen", self.source(), extra=["--freeze=^conv"], shared=True)

    def test_a_frozen_tensors_keep_the_loaded_bits_and_push_nothing(self):
        init = self.source()
        _, loaded = read_safetensors(init)
        _, _, frozen = self.frozen()
        _, _, whole = self.finetune("whole", init)
        _, got = read_safetensors(os.path.join(self.shared_dir("frozen"), "model.safetensors"))
        _, trained = read_safetensors(os.path.join(self.run_dir("whole"), "model.safetensors"))
        for name in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"):
            self.assertEqual(got[name], loaded[name], f"{name} changed though frozen")
            self.assertNotEqual(trained[name], loaded[name], f"{name} did not train without --freeze")
        for name in ("fc1.weight", "fc2.weight"):
            self.assertNotEqual(got[name], loaded[name], f"{name} did not train")
        # What the report says the model took: all but the head, which started afresh.
        report = read_report(os.path.join(self.shared_dir("frozen"), "logs", "worker0.json"))
        self.assertEqual(report["init"]["loaded"],
                         ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias"])
        self.assertEqual(report["init"]["reinit"], ["fc2.weight", "fc2.bias"])
        self.assertEqual(report["init"]["skipped"], [])
        # Nothing was pushed for the frozen tensors: one worker pushes each chunk once a step, in fp32.
        conv = sum(len(got[n][1]) for n in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"))
        self.assertEqual(frozen["frozen_parameters"] * 4, conv)
        self.assertEqual(whole["frozen_parameters"], 0)
        self.assertEqual(whole["push_bytes"] - frozen["push_bytes"], STEPS * conv)
        # Nor pulled: every pull (one a step, and the evaluation's) leaves them out. (A prefetch that waited too
        # long at a loaded shard is pulled again, in part: then the bytes say nothing exact.)
        again = sum(read_report(os.path.join(d, "logs", "worker0.json"))["prefetches_pulled_again"]
                    for d in (self.shared_dir("frozen"), self.run_dir("whole")))
        fewer = whole["pull_bytes"] - frozen["pull_bytes"]
        if again == 0:
            self.assertGreaterEqual(fewer, STEPS * conv)
            self.assertEqual(fewer % conv, 0)

    def test_b_the_bits_do_not_depend_on_the_placement(self):
        init = self.source()
        _, _, one = self.frozen()  # test_a's job
        _, _, two = self.finetune("two", init, workers=2, extra=["--freeze=^conv"])
        self.assertEqual(two["params_sha256"], one["params_sha256"], logs(self.run_dir("two")))
        # And a model.pt works as a model.safetensors does.
        pt = self.source("model.pt")
        _, _, from_pt = self.finetune("pt", pt, workers=1, extra=["--freeze=^conv"])
        self.assertEqual(from_pt["params_sha256"], one["params_sha256"])

    def test_c_bad_transfer_input_fails_clearly(self):
        init = self.source()
        garbage = os.path.join(self.tmp, "garbage.pt")
        with open(garbage, "wb") as f:
            f.write(b"not a model at all")
        for name, extra, needle in [
                ("regex", ["--freeze=conv("], "--freeze"),
                ("noinit", ["--reinit=^fc2"], "--init_from"),
                ("missing", [f"--init_from={self.tmp}/nowhere.safetensors"], "nowhere.safetensors"),
                ("garbage", [f"--init_from={garbage}"], "garbage.pt"),
                ("pin", [f"--init_from={init}", "--init_sha256=" + "0" * 64], "--init_sha256")]:
            with self.subTest(name):
                code, out, _ = self.run_local(name, CNN, workers=1, extra=[*SMALL, "--steps=3", *extra],
                                              expect_ok=False)
                self.assertEqual(code, 2, out)
                self.assertIn(needle, out)
                self.assertEqual(read_events(self.run_dir(name), "assignment"), [], "training started")
        # Known only once the model is: the job fails, naming the flag.
        for name, extra, needle in [
                ("typo", ["--freeze=^cnov"], "--freeze"),
                ("arch", [f"--init_from={init}", "--model=resnet", "--model_depth=8"], "--init_from")]:
            with self.subTest(name):
                code, out, result = self.run_local(name, CNN, workers=1, extra=[*SMALL, "--steps=3", *extra],
                                                   expect_ok=False)
                self.assertNotEqual(code, 0, out)
                self.assertIsNone(result)
                failed = read_events(self.run_dir(name), "job_failed")
                self.assertEqual(len(failed), 1, logs(self.run_dir(name)))
                self.assertIn(needle, failed[0]["error"])
        # Unless asked to proceed: the ResNet starts from its own initial values.
        _, _, r = self.run_local("allowed", CNN, workers=1,
                                 extra=[*SMALL, "--steps=3", f"--init_from={init}", "--model=resnet",
                                        "--model_depth=8", "--init_allow_mismatch"])
        self.assertEqual(r["model"], "resnet")


    def test_d_the_fine_tuning_example_runs(self):
        out = self.run_dir("example")
        p = subprocess.run([os.path.join(ROOT, "examples", "finetune", "run.sh"), "--out", out, "--workers", "1",
                            "--b-train", "64", "--a-steps", "21", "--steps", "11"],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout)
        line = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual(line["program"], "finetune")
        self.assertEqual(line["steps"], 11)
        self.assertEqual(line["frozen_parameters"], 416 + 12832)  # conv1 and conv2
        for key in ("task_a", "scratch", "finetuned"):
            self.assertTrue(0 <= line[key] <= 1, line)

    @requires(os.path.exists("/usr/share/datasets/spam-assassin/train.jsonl"),
              "no SpamAssassin corpus (scripts/setup.sh)")
    def test_e_the_text_fine_tuning_example_runs_on_the_pretrained_vocabulary(self):
        out = self.run_dir("text")
        p = subprocess.run([os.path.join(ROOT, "examples", "finetune", "run.sh"), "--app", "text", "--out", out,
                            "--workers", "1", "--b-train", "64", "--a-steps", "3", "--steps", "3"],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout)
        line = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((line["app"], line["steps"]), ("text", 3))
        vocab = {k: json.load(open(os.path.join(out, k, "vocab.json"))) for k in ("a", "b_scratch", "b_finetuned")}
        # The fine-tuned job tokenizes with task A's words (the ids its embeddings learned), not its own mails'.
        self.assertEqual(vocab["b_finetuned"]["words"], vocab["a"]["words"])
        self.assertEqual(vocab["b_finetuned"]["labels"], ["ham", "spam"])
        self.assertNotEqual(vocab["b_scratch"]["words"], vocab["a"]["words"])
        report = read_report(os.path.join(out, "b_finetuned", "logs", "worker0.json"))
        self.assertIn("text.tok.weight", report["init"]["loaded"])
        # The token embedding a sparse table, seeded with task A's rows (docs/design.md, "Seeded tables").
        self.assertEqual(report["sparse_tables"], ["text.tok.weight"])
        self.assertEqual((report["init"]["skipped"], report["init"]["unused"]), ([], []))


if __name__ == "__main__":
    unittest.main(verbosity=2)
