#!/bin/bash
# The fine-tuning examples (docs/models.md, "Transfer learning"):
#   --app image (default): task A, the CNN trained on Fashion-MNIST classes 0-4 (pretrain.flags);
#     task B, classes 5-9 from 1,000 labelled images (finetune.flags), the same budget twice: from
#     scratch, and from task A's model with the convolutions frozen and a new head.
#   --app text: task A, text_transformer learns spam on SpamAssassin's 2002 release
#     (text_pretrain.flags); task B, spam in its 2003 release from 50 labelled mails
#     (text_finetune.flags): from scratch, and from task A's vocabulary and model.
# Prints task A's and both task-B test accuracies (and one JSON line).
# usage: examples/finetune/run.sh [--app image|text] [--out DIR] [--workers W] [--b-train N]
#                                 [--steps N] [--a-steps N] [--reuse-a]
#   --b-train: task B's training samples; --steps, --a-steps: task B's and task A's steps;
#   --reuse-a: keep the task A run already in --out (try other task-B budgets)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
app=image out="" workers=2 b_train="" steps="" a_steps="" reuse_a=0
while [ $# -gt 0 ]; do
  case $1 in
    --app) app=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --b-train) b_train=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --a-steps) a_steps=$2; shift 2 ;;
    --reuse-a) reuse_a=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $app in
  image) b_train=${b_train:-1000} pretrain=pretrain.flags finetune=finetune.flags
         what_a="classes 0-4, every training image" what_b="classes 5-9, $b_train training images"
         transfer=(--freeze='^conv' --reinit='^fc2\.') how="convolutions frozen, a new head" ;;
  text)  b_train=${b_train:-50} pretrain=text_pretrain.flags finetune=text_finetune.flags
         what_a="spam in the 2002 release" what_b="spam in the 2003 release from $b_train labelled mails"
         transfer=() how="its words and every tensor" ;;
  *) echo "run.sh: --app is image or text, not '$app'" >&2; exit 2 ;;
esac
out=${out:-$root/runs/finetune_$app}
mkdir -p "$out"
out=$(cd "$out" && pwd)
eps=$root/build/bin/elasticps
data=$out/data
task() {  # task NAME(a|b) RUN_DIR JOB_FILE [job flags]
  local name=$1 dir=$2 job=$3; shift 3
  local files=(--train_data="$data/${name}_train.jsonl" --test_data="$data/${name}_test.jsonl")
  [ "$app" = image ] && files=(--train_data="$data/${name}_train_x.npy" --train_labels="$data/${name}_train_y.npy"
                               --test_data="$data/${name}_test_x.npy" --test_labels="$data/${name}_test_y.npy")
  rm -rf "$dir"
  "$eps" train --job "$here/$job" --run-dir "$dir" --workers "$workers" "${files[@]}" "$@" > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log" >&2; echo "run.sh: $dir failed (log: $dir.log)" >&2; exit 1; }
}
if [ "$app" = image ]; then
  /usr/bin/python3 "$here/make_subsets.py" --out "$data" --b-train "$b_train"
else
  /usr/bin/python3 "$here/make_text_tasks.py" --out "$data" --b-train "$b_train"
  transfer+=(--vocab_from="$out/a/vocab.json")
fi
budget=() a_budget=()
[ -n "$steps" ] && budget=(--steps="$steps")
[ -n "$a_steps" ] && a_budget=(--steps="$a_steps")
echo "== task A: $what_a"
if [ "$reuse_a" = 1 ] && [ -f "$out/a/result.json" ]; then
  echo "   (reused: $out/a)"
else
  task a "$out/a" "$pretrain" "${a_budget[@]}"
fi
echo "== task B: $what_b; from scratch"
task b "$out/b_scratch" "$finetune" "${budget[@]}"
echo "== task B: from task A's model: $how"
task b "$out/b_finetuned" "$finetune" "${budget[@]}" --init_from="$out/a/model.safetensors" "${transfer[@]}"
/usr/bin/python3 - "$out" "$app" <<'PY'
import json, os, sys
out, app = sys.argv[1], sys.argv[2]
r = {k: json.load(open(os.path.join(out, k, "result.json"))) for k in ("a", "b_scratch", "b_finetuned")}
print(f"{'run':<36s} | {'steps':>5s} | test accuracy")
for key, what in (("a", "task A"), ("b_scratch", "task B from scratch"), ("b_finetuned", "task B fine-tuned")):
    print(f"{what:<36s} | {r[key]['steps']:>5d} | {r[key]['test_accuracy']:.4f}")
print(json.dumps({"program": "finetune", "app": app, "task_a": r["a"]["test_accuracy"],
                  "scratch": r["b_scratch"]["test_accuracy"], "finetuned": r["b_finetuned"]["test_accuracy"],
                  "steps": r["b_finetuned"]["steps"], "frozen_parameters": r["b_finetuned"]["frozen_parameters"]}))
PY
