#!/usr/bin/env bash
# Benchmarks ElasticPS on this host and prints one table per section.
#
#   scripts/bench.sh [--only NAME] [--steps N] [--minutes M] [--no-setup]
#     --only NAME  run one section (default: all of them, in order, but soak)
#     --steps N    optimizer steps per measured run (default 300, at least 10)
#     --minutes M  soak: how long it trains (default 60)
#     --no-setup   use the binaries already in build/bin instead of calling scripts/setup.sh
#
# Sections, in order, each a program of its own, scripts/bench/NAME.py (its docstring says what it
# measures; docs/benchmarks.md has the figures): vw elastic transfer wire ps_share ddp scaling hetero durable
# observe limits network (network: hosts in network namespaces under link rates and latencies; needs root, else skipped)
# usermodel (the cnn as a TorchScript model from Python against the built-in one and against plain PyTorch;
# a worker's peak RSS with a TorchScript model as V grows) freeze (--freeze: bytes per step and step time with the
# convolutions frozen against the whole network trained) zoo (each zoo model, cnn, resnet-8 and text_transformer,
# in a 2-worker job against the same network under PyTorch DDP) kernels (what pinning the CPU kernels costs) scale
# (37 M and 108 M models: the PS share of a step, 1.3 GB checkpoints and recovery, push + pull up to 400 M floats;
# the coordinator's JobState CPU per step for 8/64/256 workers and V 8/512/4096; re-plans on an unchanged membership)
# sparse (a 2^20-row sparse=True EmbeddingBag model against plain PyTorch with SparseAdam: samples/s, bytes a step,
# 2 workers, the spill tier, the exact path) python (the Python package's Trainer.fit against elasticps train on the demo's job: samples/s, time to the first step)
# harvest (a serving node lent by its load, lend.sh --serve-metrics, over a diurnal trace: latency against serving
# alone, the node's busy CPU, samples/s harvested, the leave after a burst; the plot build/bench/harvest.png)
# reshard (a shard attached to and one removed from a running 37 M job: MB moved, the move's seconds, the step that
# took it; samples/s of the mlp with 4 workers on 1 to 4 shards).
# Run only when named: soak (an hour of training under periodic joins, leaves, kills and barrages: the long-lived
# processes' RSS and descriptors, the digest), storm (64 workers attaching at once to a running job: registration,
# readiness, all contributing, the coordinator's CPU per step with 1 and 65 workers; 65 worker processes).
# They share scripts/bench/common.py (running jobs and programs, table and csv rows); the figures come
# from scripts/bench/analysis.py, which reads the JSON a run leaves (the coordinator's events.jsonl,
# the workers' reports, result.json, the bench programs' JSON lines) and draws the plot.
#
# Every row is also appended to build/bench/results.csv; run logs go to build/bench/runs/;
# build/bench/bench.png is drawn from the csv after the run.
# Rows timed in ms (elastic, transfer, wire, ps_share, scaling, scale) and durable's byte rows leave samples_per_s
# empty and put the time in seconds; ratio_vs_baseline is what the section's table calls its ratio
# (hetero: vs equal; durable: vs raw RocksDB, or vs no checkpoints for its mlp rows).
# Timings are wall-clock on a shared host: the csv records the load average seen
# before each row, so a noisy row can be told from a slow one. This never fails on timing: it exits 1
# only when a run fails, or when the runs of hetero, durable or python end on different digests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# A new section: scripts/bench/NAME.py (ending with common.main(run)) and NAME here.
all_sections=(vw elastic transfer wire ps_share ddp scaling hetero durable observe limits network usermodel freeze zoo kernels scale sparse python harvest recovery reshard)
named_only=(soak storm)
only="" steps=300 minutes=60 setup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=${2:-}; shift 2 ;;
    --steps) steps=${2:-}; shift 2 ;;
    --minutes) minutes=${2:-}; shift 2 ;;
    --no-setup) setup=0; shift ;;
    -h|--help) usage ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt 10 ]; then
  echo "bench.sh: --steps must be an integer >= 10" >&2
  exit 2
fi
if ! [[ "$minutes" =~ ^[0-9]+$ ]] || [ "$minutes" -lt 1 ]; then
  echo "bench.sh: --minutes must be an integer >= 1" >&2
  exit 2
fi
if [ -n "$only" ] && [[ " ${all_sections[*]} ${named_only[*]} " != *" $only "* ]]; then
  echo "bench.sh: unknown section '$only' (have: ${all_sections[*]} ${named_only[*]})" >&2
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
for b in coordinator shard worker baseline; do
  [ -x "$root/build/bin/$b" ] || { echo "bench.sh: $root/build/bin/$b is missing: run scripts/setup.sh" >&2; exit 2; }
done

# Debian's python3: its libtorch runs scripts/ddp_baseline.py, its matplotlib draws the plot.
py=/usr/bin/python3
out=$root/build/bench
run_id=$(date -u +%Y-%m-%dT%H:%M:%SZ)
git_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || git_rev+="-dirty"
failed=0
for s in "${all_sections[@]}" "${named_only[@]}"; do
  if [ -z "$only" ]; then [[ " ${named_only[*]} " != *" $s "* ]] || continue; else [ "$only" = "$s" ] || continue; fi
  "$py" "$root/scripts/bench/$s.py" --steps "$steps" --minutes "$minutes" --run-id "$run_id" --git "$git_rev" || failed=1
done
echo "results appended to $out/results.csv"
"$py" "$root/scripts/bench/analysis.py" plot --csv "$out/results.csv" --out "$out/bench.png" ||
  echo "bench.sh: no plot (the tables and csv stand)" >&2
exit $failed
