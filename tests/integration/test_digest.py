"""The consistency contract: one job, many placements, one params_sha256."""
import hashlib
import json
import os
import struct
import unittest

from harness import MLP, RunDirTest, read_metrics, read_result

# (workers) placements of V = 8 virtual workers: 1x8, 2x4, 4x2, 8x1 and an uneven 3-way split (3, 3, 2).
PLACEMENTS = [1, 2, 4, 8, 3]
# On two shards, the kinds docs/design.md names (1xV, Vx1, an uneven split): the (3, 3, 2) workers push partials of
# aligned blocks of 1 and 2 VWs, through the TreeReducer whose blocks of 2 and 4 the even splits 4x2 and 2x4 push; those
# two run on one shard above.
TWO_SHARD_PLACEMENTS = [1, 8, 3]


class DigestAcrossPlacements(RunDirTest):
    def digests(self, servers, steps=200, placements=PLACEMENTS):
        """Runs each placement (the first is the reference of the others' curves; the last, the uneven split); returns
        their digests once their metrics.csv training curves are checked equal."""
        out, curves = {}, {}
        for w in placements:
            _, _, r = self.run_local(f"s{servers}-w{w}", MLP, servers=servers, workers=w, extra=[f"--steps={steps}"])
            self.assertEqual(r["steps"], steps)
            self.assertEqual(r["virtual_workers"], 8)
            out[w] = r["params_sha256"]
            rows = read_metrics(os.path.join(self.tmp, f"s{servers}-w{w}"))
            self.assertEqual([row["step"] for row in rows], list(range(1, steps + 1)))
            self.assertAlmostEqual(rows[-1]["test_accuracy"], r["test_accuracy"], places=6)  # at the end only
            self.assertEqual([row["step"] for row in rows if row["test_accuracy"] is not None], [steps])
            curves[w] = rows
        for w in placements[1:]:
            self.assertSameTrainingCurve(curves[w], curves[placements[0]], f"{w} workers against {placements[0]}:")
        return out

    def test_mlp_one_shard_every_placement_same_digest(self):
        d = self.digests(1)
        # Pinned: each worker's compute thread on CPU 0, its other threads on the rest (timing only).
        _, _, r = self.run_local("s1-w2-pinned", MLP, servers=1, workers=2, launcher=["--compute-cpus", "0:0"])
        d["2 pinned"] = r["params_sha256"]
        for w in range(2):
            with open(os.path.join(self.tmp, "s1-w2-pinned", "logs", f"worker{w}.log")) as f:
                self.assertIn("computing on CPUs 0", f.read())
        self.assertEqual(len(set(d.values())), 1, d)

    def test_mlp_two_shards_placements_same_digest_as_one_shard(self):
        d = self.digests(2, steps=100, placements=TWO_SHARD_PLACEMENTS)  # the one-shard test runs the whole 200
        _, _, ref = self.run_local("s1-w1-ref", MLP, servers=1, workers=1, extra=["--steps=100"])
        d["1 shard"] = ref["params_sha256"]
        self.assertEqual(len(set(d.values())), 1, d)
        # The optimizer state too (momentum), summed over shards holding other chunks.
        two = read_result(os.path.join(self.tmp, f"s2-w{TWO_SHARD_PLACEMENTS[-1]}"))
        self.assertEqual(two["optimizer_digest"], ref["optimizer_digest"])

    def short_job(self):
        """The MLP job (its seed 7) for 20 steps on 2 workers, run once for the class (run_shared, in
        self.shared_dir("steps20")): (returncode, output, result.json's dict)."""
        return self.run_shared("steps20", job=MLP, workers=2, extra=["--steps=20"])

    def test_mlp_digest_depends_on_the_seed(self):
        # Guards the test itself: a digest that ignores training would make the tests above vacuous.
        _, _, a = self.short_job()
        _, _, b = self.run_local("seed8", MLP, workers=2, extra=["--steps=20", "--seed=8"])
        self.assertNotEqual(a["params_sha256"], b["params_sha256"])

    def test_adagrad_same_digest_1x1_and_2_shards_x_3_workers(self):
        # The dense Adagrad of the shards (server/optimizer.h), its accumulator split over two shards.
        flags = ["--steps=30", "--optimizer=adagrad", "--momentum=0", "--lr=0.05", "--eps=1e-10",
                 "--weight_decay=0.001"]
        _, _, one = self.run_local("adagrad-1x1", MLP, workers=1, extra=flags)
        _, _, many = self.run_local("adagrad-2x3", MLP, servers=2, workers=3, extra=flags)
        self.assertEqual(many["params_sha256"], one["params_sha256"])
        _, _, sgd = self.run_local("sgd-1x1", MLP, workers=1, extra=["--steps=30", "--lr=0.05"])
        self.assertNotEqual(sgd["params_sha256"], one["params_sha256"])

    def test_exported_model_holds_the_digested_parameters(self):
        _, _, r = self.short_job()
        with open(os.path.join(self.shared_dir("steps20"), "model.safetensors"), "rb") as f:
            blob = f.read()
        n = struct.unpack("<Q", blob[:8])[0]
        header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
        self.assertEqual(header["__metadata__"]["params_sha256"], r["params_sha256"])
        tensors = sorted((v["data_offsets"], k, v) for k, v in header.items() if k != "__metadata__")
        self.assertEqual([k for _, k, _ in tensors], ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
        sha = hashlib.sha256()
        for (begin, end), _, v in tensors:
            self.assertEqual(end - begin, 4 * v["shape"][0] * (v["shape"][1] if len(v["shape"]) > 1 else 1))
            sha.update(data[begin:end])
        self.assertEqual(sha.hexdigest(), r["params_sha256"])


class BatchNormBuffers(RunDirTest):
    def test_cnn_bn_same_digest_1x4_and_2x2(self):
        extra = ["--model=cnn_bn", "--virtual_workers=4", "--batch_per_vw=16", "--steps=30",
                 "--train_limit=2048", "--test_limit=500"]
        _, _, a = self.run_local("bn-1x4", MLP, servers=2, workers=1, extra=extra)
        _, _, b = self.run_local("bn-2x2", MLP, servers=2, workers=2, extra=extra)
        self.assertEqual(a["params_sha256"], b["params_sha256"])
        self.assertEqual(a["buffers_sha256"], b["buffers_sha256"])
        # BatchNorm statistics really travel: the buffers are not the empty digest.
        self.assertNotEqual(a["buffers_sha256"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


if __name__ == "__main__":
    unittest.main(verbosity=2)
