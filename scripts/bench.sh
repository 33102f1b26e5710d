#!/usr/bin/env bash
# Benchmarks ElasticPS on this host and prints one table per section.
#
#   scripts/bench.sh [--only NAME] [--steps N] [--no-setup]
#     --only NAME  run one section (default: all of them, in order)
#     --steps N    optimizer steps per measured run (default 300, at least 10)
#     --no-setup   use the binaries already in build/bin instead of calling scripts/setup.sh
#
# Sections:
#   vw   samples/s of the CNN job (examples/fashion_mnist_cnn.flags, V = 8 x 16 samples,
#        1 shard) at 1 worker x 8 VWs and 2 workers x 4 VWs, against build/bin/baseline
#        (the same model and microbatches in one plain libtorch loop, no parameter server).
#
# Every row is also appended to build/bench/results.csv; run logs go to build/bench/runs/.
# Timings are wall-clock on a shared host: the csv records the load average seen
# before each row, so a noisy row can be told from a slow one. This never fails on timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# A new section: a function section_NAME below, NAME here, and a line in the case at the end.
all_sections=(vw)
only="" steps=300 setup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=${2:-}; shift 2 ;;
    --steps) steps=${2:-}; shift 2 ;;
    --no-setup) setup=0; shift ;;
    -h|--help) usage ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt 10 ]; then
  echo "bench.sh: --steps must be an integer >= 10" >&2
  exit 2
fi
if [ -n "$only" ] && [[ " ${all_sections[*]} " != *" $only "* ]]; then
  echo "bench.sh: unknown section '$only' (have: ${all_sections[*]})" >&2
  exit 2
fi

if [ $setup = 1 ]; then
  setup_log=$(mktemp)
  if ! "$root/scripts/setup.sh" > "$setup_log" 2>&1; then
    tail -n 30 "$setup_log" >&2
    echo "bench.sh: scripts/setup.sh failed (full log: $setup_log)" >&2
    exit 1
  fi
  rm -f "$setup_log"
fi
bin=$root/build/bin
for b in coordinator shard worker baseline; do
  [ -x "$bin/$b" ] || { echo "bench.sh: $bin/$b is missing: run scripts/setup.sh" >&2; exit 2; }
done

# Several libtorch processes share this host: no OpenMP spinning.
export OMP_WAIT_POLICY=passive
out=$root/build/bench
mkdir -p "$out/runs"
csv=$out/results.csv
[ -s "$csv" ] || echo "run,git,section,config,samples_per_s,ratio_vs_baseline,steps,seconds,load1" > "$csv"
run_id=$(date -u +%Y-%m-%dT%H:%M:%SZ)
git_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || git_rev+="-dirty"
failed=0

load1() { cut -d' ' -f1 /proc/loadavg; }

# row SECTION CONFIG SAMPLES_PER_S BASELINE_SAMPLES_PER_S SECONDS LOAD1: prints a table row and
# appends it to the csv; a SAMPLES_PER_S of 0 marks a failed run (and the exit status).
row() {
  local ratio
  if [ "$3" = 0 ]; then
    failed=1
    printf '%-24s | %10s | %s\n' "$2" failed -
    echo "$run_id,$git_rev,$1,$2,,,$steps,,$6" >> "$csv"
    return
  fi
  ratio=$(awk -v x="$3" -v b="$4" 'BEGIN { if (x > 0 && b > 0) printf "%.2f", x / b; else print "-" }')
  printf '%-24s | %10s | %s\n' "$2" "$3" "$ratio"
  echo "$run_id,$git_rev,$1,$2,$3,$ratio,$steps,$5,$6" >> "$csv"
}

# baseline NAME ARGS...: runs build/bin/baseline; prints "SAMPLES_PER_S SECONDS" ("0 0" if it failed).
baseline() {
  local log=$out/runs/$1.log line
  shift
  if "$bin/baseline" --steps="$steps" "$@" > "$log" 2>&1 && line=$(grep '^baseline ' "$log"); then
    echo "$line" | sed -E 's/.*samples_per_s=([0-9.]+).*seconds=([0-9.]+).*/\1 \2/'
  else
    echo "bench.sh: baseline $* failed:" >&2; tail -n 5 "$log" >&2
    echo "0 0"
  fi
}

# job NAME WORKERS FLAGFILE [extra coordinator flags]: runs a job with 1 shard through
# launcher/local.sh; prints "SAMPLES_PER_S SECONDS" from its result.json
# (steps * V * batch_per_vw / train_seconds), or "0 0" if it failed.
job() {
  local name=$1 workers=$2 flags=$3; shift 3
  local dir=$out/runs/$name
  rm -rf "$dir"
  if "$root/launcher/local.sh" --job "$flags" --servers 1 --workers "$workers" --run-dir "$dir" -- "$@" \
      > "$dir.log" 2>&1; then
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%.1f %.3f" % (r["steps"] * r["virtual_workers"] * r["batch_per_vw"] / r["train_seconds"], r["train_seconds"]))' \
      "$dir/result.json"
  else
    echo "bench.sh: job $name failed (log: $dir.log):" >&2; tail -n 5 "$dir.log" >&2
    echo "0 0"
  fi
}

# Virtual-worker overhead: the same 8 x 16-sample microbatches per step, run by the
# job on 1 worker (8 VWs) or 2 workers (4 VWs each, one thread each: this host's 2
# cores), against the plain loop at 1 thread (the reference) and at 2 threads.
section_vw() {
  echo "== vw: cnn, V = 8 x 16 samples, $steps steps, 1 shard (host load $(load1), $(nproc) cores)"
  printf '%-24s | %10s | %s\n' config samples/s "ratio vs baseline"
  local l base sps secs
  # The cosine schedule needs more steps than its warm-up: shorten it for short runs.
  local job_flags=(--steps="$steps" --test_limit=-1)
  [ "$steps" -gt 200 ] || job_flags+=(--warmup_steps=$((steps / 2)))
  local base_flags=(--model=cnn --microbatches=8 --batch_per_vw=16)

  l=$(load1); read -r base secs < <(baseline vw_baseline_1t "${base_flags[@]}" --threads=1)
  row vw "baseline (1 thread)" "$base" "$base" "$secs" "$l"
  l=$(load1); read -r sps secs < <(baseline vw_baseline_2t "${base_flags[@]}" --threads=2)
  row vw "baseline (2 threads)" "$sps" "$base" "$secs" "$l"
  l=$(load1); read -r sps secs < <(job vw_1x8 1 "$root/examples/fashion_mnist_cnn.flags" "${job_flags[@]}")
  row vw "1 worker x 8 VWs" "$sps" "$base" "$secs" "$l"
  l=$(load1); read -r sps secs < <(job vw_2x4 2 "$root/examples/fashion_mnist_cnn.flags" "${job_flags[@]}")
  row vw "2 workers x 4 VWs" "$sps" "$base" "$secs" "$l"
}

for s in "${all_sections[@]}"; do
  [ -z "$only" ] || [ "$only" = "$s" ] || continue
  case "$s" in
    vw) section_vw ;;
  esac
done
echo "results appended to $csv"
exit $failed
