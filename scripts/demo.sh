#!/usr/bin/env bash
# The demo: installs what is missing, builds, and trains the Fashion-MNIST CNN
# on a local cluster (1 coordinator, 2 server shards, 2 worker processes sharing
# V = 8 virtual workers), then prints the test accuracy.
#
#   scripts/demo.sh [--run-dir DIR]     (default: runs/demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run_dir=$root/runs/demo
while [ $# -gt 0 ]; do
  case "$1" in
    --run-dir) run_dir=$2; shift 2 ;;
    *) echo "demo.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh"

echo "== training examples/fashion_mnist_cnn.flags: 2 shards, 2 workers, V = 8"
"$root/launcher/local.sh" --job "$root/examples/fashion_mnist_cnn.flags" --servers 2 --workers 2 --run-dir "$run_dir"

python3 - "$run_dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== done: {r['steps']} steps in {r['train_seconds']:.0f} s, final loss {r['final_loss']:.4f}")
print(f"   test accuracy {r['test_accuracy']:.4f} (target 0.91)")
print(f"   params_sha256 {r['params_sha256']}")
sys.exit(0 if r["test_accuracy"] >= 0.91 else 1)
PY
