"""Data from files users have (docs/data.md): the same job on Fashion-MNIST as IDX, as NPY and as CSV gives the same
digest over placements, and a worker whose data file differs from the job's is refused (exit 5, a worker_refused
event) while the job ends on the undisturbed digest."""
import os
import subprocess
import unittest

from harness import BIN, ENV, LOCAL, MLP, ROOT, RunDirTest, logs, read_events, read_result, read_text, requires, \
    wait_for_event, wait_for_file, wait_for_step

ATTACH = os.path.join(ROOT, "launcher", "attach.sh")
FASHION = "/usr/share/datasets/fashion-mnist"
# Debian's python with python3-numpy (scripts/setup.sh); the test itself may run on another.
NUMPY_PYTHON = "/usr/bin/python3"
JOB = ["--steps=40", "--train_limit=0", "--test_limit=0"]  # the files hold the samples: all of them

# Writes the first N training and M test samples of Fashion-MNIST in OUT as NPY (float32 features normalized
# exactly as data/ normalizes IDX pixels, in float32 arithmetic; uint8 train labels, int64 test labels), as CSV
# (each float32 written as the shortest decimal of its exact double value, so it reads back to the same bits), and
# train_x_other.npy: train_x.npy with sample 0 changed (same size, same header).
CONVERT = r"""
import gzip, sys, numpy as np
src, out, n, m = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def idx(name, offset, count, size):
    with gzip.open(f"{src}/{name}") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype=np.uint8, offset=offset)[:count * size]
def norm(p):
    return (p.astype(np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)
tx = norm(idx("train-images-idx3-ubyte.gz", 16, n, 784)).reshape(n, 28, 28)
ty = idx("train-labels-idx1-ubyte.gz", 8, n, 1)
vx = norm(idx("t10k-images-idx3-ubyte.gz", 16, m, 784)).reshape(m, 1, 28, 28)
vy = idx("t10k-labels-idx1-ubyte.gz", 8, m, 1).astype(np.int64)
np.save(f"{out}/train_x.npy", tx); np.save(f"{out}/train_y.npy", ty)
np.save(f"{out}/test_x.npy", vx); np.save(f"{out}/test_y.npy", vy)
other = tx.copy(); other[0] = -other[0]
np.save(f"{out}/train_x_other.npy", other)
for name, x, y in (("train", tx, ty), ("test", vx, vy)):
    with open(f"{out}/{name}.csv", "w") as f:
        f.write(",".join([f"p{i}" for i in range(784)] + ["label"]) + "\n")
        for row, label in zip(x.reshape(len(x), 784), y):
            f.write(",".join([repr(float(v)) for v in row] + [str(int(label))]) + "\n")
"""


def npy_flags(d, prefix=""):
    return [f"--train_data={prefix}train_x.npy", f"--train_labels={prefix}train_y.npy",
            f"--test_data={prefix}test_x.npy", f"--test_labels={prefix}test_y.npy"]


@requires(os.path.exists(f"{FASHION}/train-images-idx3-ubyte.gz"), "no Fashion-MNIST (dataset-fashion-mnist)")
class DataFormats(RunDirTest):
    def convert(self, n, m):
        d = self.run_dir("data")
        subprocess.run([NUMPY_PYTHON, "-c", CONVERT, FASHION, d, str(n), str(m)], check=True, timeout=120)
        return d

    def test_idx_npy_and_csv_train_the_same_bits_over_placements(self):
        d = self.convert(1024, 300)
        _, _, idx = self.run_local("idx-w1", MLP, workers=1,
                                   extra=JOB + ["--train_limit=1024", "--test_limit=300"])
        _, _, npy2 = self.run_local("npy-w2", MLP, workers=2, extra=JOB + npy_flags(d, d + "/"))
        _, _, npy3 = self.run_local("npy-w3", MLP, workers=3, extra=JOB + npy_flags(d, d + "/"))
        self.assertEqual(npy2["params_sha256"], idx["params_sha256"])
        self.assertEqual(npy3["params_sha256"], idx["params_sha256"])
        self.assertEqual(npy2["test_accuracy"], idx["test_accuracy"])
        # The job read the NPY files: their samples, fingerprinted.
        accepted = read_events(os.path.join(self.tmp, "npy-w2"), "model_accepted")[0]
        self.assertEqual((accepted["train_samples"], accepted["test_samples"]), (1024, 300))
        # CSV: the label column, parsed numbers: the same bits again.
        _, _, csv = self.run_local("csv-w2", MLP, workers=2,
                                   extra=JOB + [f"--train_data={d}/train.csv", f"--test_data={d}/test.csv"])
        self.assertEqual(csv["steps"], 40)
        self.assertEqual(csv["params_sha256"], idx["params_sha256"])

    def test_a_worker_with_another_data_file_is_refused_and_the_job_goes_on(self):
        d = self.convert(1024, 300)
        # The job names relative paths: the coordinator and its workers resolve them in `d`; the attached
        # worker in `other`, where train_x.npy is another file (as on a host that mounts other data there).
        other = self.run_dir("other")
        os.symlink(f"{d}/train_x_other.npy", f"{other}/train_x.npy")
        for name in ("train_y.npy", "test_x.npy", "test_y.npy"):
            os.symlink(f"{d}/{name}", f"{other}/{name}")
        _, _, ref = self.run_local("reference", MLP, workers=1, extra=JOB + npy_flags(d, d + "/"))

        run = self.run_dir("job")
        with open(f"{run}/local.out", "w") as out:
            job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "1", "--workers", "0", "--run-dir", run,
                                    "--", *JOB, *npy_flags(d)], cwd=d, env=ENV, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        token = f"{run}/token"
        address = wait_for_file(f"{run}/coordinator.addr", proc=job)
        attach = [ATTACH, "--coordinator", address, "--token-file", token]
        bad = subprocess.run(attach + ["--log", f"{run}/bad.log", "--report-file", f"{run}/bad.json"], cwd=other,
                             env=ENV, timeout=120)
        self.assertEqual(bad.returncode, 5, read_text(f"{run}/bad.log"))
        refused = wait_for_event(run, "worker_refused", proc=job)
        self.assertEqual(refused["cause"], "data_fingerprint")
        self.assertIn("train_data train_x.npy", refused["error"])
        good = subprocess.Popen(attach + ["--log", f"{run}/good.log"], cwd=d, env=ENV)
        self.procs.append(good)
        self.assertEqual(job.wait(timeout=300), 0, read_text(f"{run}/local.out") + logs(run))
        self.assertEqual(good.wait(timeout=60), 0)
        self.assertEqual(read_result(run)["params_sha256"], ref["params_sha256"])
        self.assertEqual(read_events(run, "job_failed"), [])

    def test_a_data_file_changed_while_the_job_runs_takes_the_worker_out_cleanly(self):
        d = self.convert(1024, 300)
        run = self.run_dir("changed")
        with open(f"{run}/local.out", "w") as out:
            job = subprocess.Popen([LOCAL, "--job", MLP, "--servers", "1", "--workers", "1", "--run-dir", run, "--",
                                    "--steps=100000", "--test_limit=-1", "--heartbeat_timeout_ms=60000",
                                    *npy_flags(d, d + "/")[:2]], env=ENV, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(job)
        wait_for_step(run, 3, timeout=120, proc=job)
        st = os.stat(f"{d}/train_x.npy")
        os.utime(f"{d}/train_x.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # modified in place
        left = wait_for_event(run, "worker_left", timeout=60, proc=job)
        self.assertTrue(left["host_fault"], left)
        self.assertIn(f"{d}/train_x.npy", left["reason"])
        self.assertEqual(read_events(run, "worker_dead"), [])  # it left, it did not crash

    def test_a_malformed_data_set_is_refused_at_start_with_exit_2(self):
        d = self.run_dir("bad")
        with open(f"{d}/ragged.csv", "w") as f:
            f.write("a,label\n1,0\n2\n")
        p = subprocess.run([os.path.join(BIN, "coordinator"), f"--flagfile={MLP}", f"--run_dir={d}", *JOB,
                            f"--train_data={d}/ragged.csv", "--test_limit=-1"], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn(f"{d}/ragged.csv", p.stdout)  # the message names the file

if __name__ == "__main__":
    unittest.main(verbosity=2)
