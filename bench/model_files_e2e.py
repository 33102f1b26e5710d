#!/usr/bin/python3
"""A large TorchScript model to real workers (docs/benchmarks.md, "model files"): scripts an MLP of the given widths
with Debian's python3-torch, runs a coordinator, one shard and N workers that share one --model_cache_dir (each worker
started once the one before is ready), and prints what each worker's report says about the model file.

    /usr/bin/python3 bench/model_files_e2e.py --widths 784,4096,4096,4096,10 [--max-message-mb 64] [--workers 2]
                                              [--no-cache] [--steps 2] [--out DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("EPS_BIN", os.path.join(ROOT, "build", "bin"))

SCRIPT = """
import sys, torch, torch.nn as nn, torch.nn.functional as F
class MLP(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:])])
    def forward(self, x):
        x = torch.flatten(x, 1)
        for i, l in enumerate(self.layers):
            x = l(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x
torch.manual_seed(0)
m = torch.jit.script(MLP([int(w) for w in sys.argv[2].split(",")]))
print(sum(p.numel() for p in m.parameters()))
m.save(sys.argv[1])
"""


def wait_for(check, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise SystemExit(f"timed out: {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="784,4096,4096,4096,10")
    ap.add_argument("--max-message-mb", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    d = a.out or tempfile.mkdtemp(prefix="eps-model-files-")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    model = os.path.join(d, "model.pt")
    maker = os.path.join(d, "make_model.py")  # torch.jit.script reads the class's source from a file
    with open(maker, "w") as f:
        f.write(SCRIPT)
    params = subprocess.run(["/usr/bin/python3", maker, model, a.widths], check=True, text=True,
                            stdout=subprocess.PIPE).stdout.strip()
    with open(f"{d}/token", "w") as f:
        f.write("bench\n")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    procs = []

    def start(args, log):
        p = subprocess.Popen(args, stdout=open(f"{d}/{log}", "w"), stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    try:
        t0 = time.monotonic()
        coord = start([f"{BIN}/coordinator", f"--flagfile={ROOT}/examples/fashion_mnist_mlp.flags", f"--model={model}",
                       f"--steps={a.steps}", "--virtual_workers=2", "--batch_per_vw=4", "--train_limit=64",
                       "--test_limit=-1", f"--run_dir={d}", f"--addr_file={d}/coordinator.addr",
                       f"--token_file={d}/token", f"--max_message_mb={a.max_message_mb}", f"--workers={a.workers}",
                       "--optimizer=sgd", "--momentum=0"], "coordinator.log")
        addr = wait_for(lambda: os.path.exists(f"{d}/coordinator.addr") and open(f"{d}/coordinator.addr").read().strip(),
                        600, "the coordinator's address")
        print(f"{os.path.getsize(model)} bytes, {params} parameters; coordinator up in "
              f"{time.monotonic() - t0:.1f} s (it reads and hashes the file)")
        start([f"{BIN}/shard", f"--coordinator={addr}", "--shard_id=0", f"--token_file={d}/token",
               f"--addr_file={d}/shard0.addr"], "shard0.log")
        cache = "none" if a.no_cache else f"{d}/cache"
        for i in range(a.workers):
            start([f"{BIN}/worker", f"--coordinator={addr}", f"--token_file={d}/token",
                   f"--report_file={d}/worker{i}.json", f"--model_cache_dir={cache}"], f"worker{i}.log")

            def ready(n=i + 1):
                if not os.path.exists(f"{d}/events.jsonl"):
                    return None
                with open(f"{d}/events.jsonl") as f:
                    return len([1 for line in f if json.loads(line).get("event") == "worker_ready"]) >= n
            if i + 1 < a.workers:
                wait_for(ready, 900, f"worker {i} ready")
        rc = coord.wait(timeout=3600)
        for p in procs[1:]:  # told to stop by the coordinator: let them end on their own
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        with open(f"{d}/result.json") as f:
            result = json.load(f)
        print(f"coordinator exit {rc}, params_sha256 {result['params_sha256'][:16]}")
        for i in range(a.workers):
            with open(f"{d}/worker{i}.json") as f:
                r = json.load(f)
            m = r["model_files"][0]
            print(f"worker{i}: model_bytes_fetched={r['model_bytes_fetched']} chunks={m['chunks']} "
                  f"cache={m['cache']} ms={m['ms']:.0f}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
