#!/bin/bash
# The fine-tuning example (docs/models.md, "Transfer learning"):
#   1. task A: the CNN trained on Fashion-MNIST classes 0-4 (pretrain.flags);
#   2. task B, classes 5-9 from 1,000 labelled images, the same budget twice (finetune.flags):
#      from scratch, and from task A's model with the convolutions frozen and a new head;
#   3. prints both task-B test accuracies (and one JSON line).
# usage: examples/finetune/run.sh [--out DIR] [--workers W] [--b-train N] [--steps N] [--a-steps N]
#   --steps: task B's budget (finetune.flags: 60); --a-steps: task A's (one epoch: 234)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/runs/finetune workers=2 b_train=1000 steps="" a_steps=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --b-train) b_train=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --a-steps) a_steps=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
eps=$root/build/bin/elasticps
data=$out/data
/usr/bin/python3 "$here/make_subsets.py" --out "$data" --b-train "$b_train"
task() {  # task NAME(a|b) RUN_DIR JOB_FILE [job flags]
  local name=$1 dir=$2 job=$3; shift 3
  rm -rf "$dir"
  "$eps" train --job "$job" --run-dir "$dir" --workers "$workers" \
    --train_data="$data/${name}_train_x.npy" --train_labels="$data/${name}_train_y.npy" \
    --test_data="$data/${name}_test_x.npy" --test_labels="$data/${name}_test_y.npy" "$@" > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log" >&2; echo "run.sh: $dir failed (log: $dir.log)" >&2; exit 1; }
}
budget=() a_budget=()
[ -n "$steps" ] && budget=(--steps="$steps")
[ -n "$a_steps" ] && a_budget=(--steps="$a_steps")
echo "== task A: classes 0-4, every training image"
task a "$out/a" "$here/pretrain.flags" "${a_budget[@]}"
echo "== task B: classes 5-9, $b_train training images; from scratch"
task b "$out/b_scratch" "$here/finetune.flags" "${budget[@]}"
echo "== task B: from task A's model, convolutions frozen, a new head"
task b "$out/b_finetuned" "$here/finetune.flags" "${budget[@]}" \
  --init_from="$out/a/model.safetensors" --freeze='^conv' --reinit='^fc2\.'
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
r = {k: json.load(open(os.path.join(out, k, "result.json"))) for k in ("a", "b_scratch", "b_finetuned")}
print(f"{'run':<36s} | {'steps':>5s} | test accuracy")
print(f"{'task A (classes 0-4)':<36s} | {r['a']['steps']:>5d} | {r['a']['test_accuracy']:.4f}")
print(f"{'task B from scratch':<36s} | {r['b_scratch']['steps']:>5d} | {r['b_scratch']['test_accuracy']:.4f}")
print(f"{'task B fine-tuned (conv frozen)':<36s} | {r['b_finetuned']['steps']:>5d} | "
      f"{r['b_finetuned']['test_accuracy']:.4f}")
print(json.dumps({"program": "finetune", "task_a": r["a"]["test_accuracy"],
                  "scratch": r["b_scratch"]["test_accuracy"], "finetuned": r["b_finetuned"]["test_accuracy"],
                  "steps": r["b_finetuned"]["steps"], "frozen_parameters": r["b_finetuned"]["frozen_parameters"]}))
PY
