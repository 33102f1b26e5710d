#!/usr/bin/env bash
# Plays a random schedule of worker attaches, SIGTERMs and SIGKILLs against a
# running job, then checks that the trained parameters equal those of the
# undisturbed run. Exits nonzero on any difference.
#
#   scripts/chaos.sh --job FILE --events N --seed S [--servers S] [--workers W] [--steps T] [--run-dir DIR]
#                    [--durable]
#
# --durable also SIGKILLs shards and the coordinator: the job then runs with
# local.sh --checkpoint-every 20 --supervise, which restarts them (shards roll
# the job back to their newest common checkpoint, the coordinator resumes).
# The job runs with --steps T (default 400 + 40*N) so that the events land
# mid-training, and is held before its last step (elasticps hold) until every
# event was played: however fast the host, the job cannot end first (events that
# come once it waits there land on a held job). At least one worker is kept
# alive or re-attached after each event. Without --run-dir the runs go to a
# temporary folder, kept only when something failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
job="" events=10 seed=1 servers=2 workers=2 steps="" run_dir="" durable=0
bin=${EPS_BIN:-$root/build/bin}
while [ $# -gt 0 ]; do
  case "$1" in
    --job) job=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --run-dir) run_dir=$2; shift 2 ;;
    --durable) durable=1; shift ;;
    *) echo "chaos.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$job" ] || { echo "usage: chaos.sh --job FILE --events N --seed S" >&2; exit 2; }
steps=${steps:-$((400 + 40 * events))}
own_dir=0  # a run dir of its own goes when the digests agree; --run-dir's stays
if [ -z "$run_dir" ]; then run_dir=$(mktemp -d /tmp/eps-chaos.XXXXXX); own_dir=1; fi
mkdir -p "$run_dir"
extra=(--steps="$steps" --test_limit=-1 --heartbeat_timeout_ms=1500)
export OMP_WAIT_POLICY=passive

echo "== chaos: $events events, seed $seed, $steps steps, run dir $run_dir"
echo "== undisturbed reference (1 worker)"
"$root/launcher/local.sh" --job "$job" --servers "$servers" --workers 1 --run-dir "$run_dir/reference" -- "${extra[@]}" > "$run_dir/reference.out" 2>&1 ||
  { cat "$run_dir/reference.out" >&2; exit 1; }
ref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["params_sha256"])' "$run_dir/reference/result.json")

job_dir=$run_dir/chaos
durability=()
[ $durable = 1 ] && durability=(--checkpoint-every 20 --supervise)
"$root/launcher/local.sh" --job "$job" --servers "$servers" --workers "$workers" --run-dir "$job_dir" "${durability[@]}" \
  -- "${extra[@]}" > "$run_dir/chaos.out" 2>&1 &
local_pid=$!
attached=()
cleanup() {
  for p in "${attached[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  kill -TERM "$local_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 600); do [ -s "$job_dir/coordinator.addr" ] && break; sleep 0.05; done
[ -s "$job_dir/coordinator.addr" ] || { echo "chaos.sh: the job did not start" >&2; cat "$run_dir/chaos.out" >&2; exit 1; }
addr=$(cat "$job_dir/coordinator.addr")
"$bin/elasticps" hold --run-dir "$job_dir" --from-step $((steps - 1)) > /dev/null ||
  { echo "chaos.sh: could not hold the job before its last step" >&2; exit 1; }
# Until training is under way (its first completed step: progress events come once a second, and a short job may
# be held before the first), bounded.
python3 "$root/scripts/events.py" wait "$job_dir" step_completed --timeout 60 --pid "$local_pid" || true

live_workers() {  # pids of worker processes still running
  local p
  for f in "$job_dir"/pids/worker*.pid; do [ -f "$f" ] && p=$(cat "$f") && kill -0 "$p" 2>/dev/null && echo "$p"; done
  for p in "${attached[@]}"; do kill -0 "$p" 2>/dev/null && echo "$p"; done
  return 0
}
attach() {
  "$root/launcher/attach.sh" --coordinator "$addr" --token-file "$job_dir/token" \
    --log "$job_dir/logs/attached${#attached[@]}.log" &
  attached+=($!)
}

RANDOM=$seed
for ((e = 1; e <= events; e++)); do
  if ! kill -0 "$local_pid" 2>/dev/null; then
    echo "chaos.sh: the job ended before event $e" >&2; tail -n 30 "$run_dir/chaos.out" >&2; exit 1
  fi
  sleep "0.$((RANDOM % 8 + 2))"
  mapfile -t live < <(live_workers)
  action=$((RANDOM % (durable ? 5 : 3)))
  if [ $action -ge 3 ]; then  # --durable: a shard or the coordinator dies; the supervisor restarts it
    if [ $action -eq 3 ]; then victim_name=shard$((RANDOM % servers)); else victim_name=coordinator; fi
    kill -KILL "$(cat "$job_dir/pids/$victim_name.pid")" 2>/dev/null || true
    echo "event $e: SIGKILL $victim_name"
    continue
  fi
  if [ ${#live[@]} -eq 0 ] || [ $action -eq 0 ]; then
    attach; echo "event $e: attach (now $(( ${#live[@]} + 1 )) workers)"
    continue
  fi
  victim=${live[$((RANDOM % ${#live[@]}))]}
  if [ $action -eq 1 ]; then
    kill -TERM "$victim" 2>/dev/null || true; echo "event $e: SIGTERM worker pid $victim"
  else
    kill -KILL "$victim" 2>/dev/null || true; echo "event $e: SIGKILL worker pid $victim"
  fi
  if [ ${#live[@]} -le 1 ]; then attach; echo "event $e: attach (keep the job going)"; fi
done
# Keep at least one worker until the end.
mapfile -t live < <(live_workers)
[ ${#live[@]} -gt 0 ] || attach
# Released (bounded retries: a coordinator SIGKILLed by the last event is being restarted, held).
released=0
for _ in $(seq 60); do
  "$bin/elasticps" release --run-dir "$job_dir" > /dev/null 2>&1 && { released=1; break; }
  sleep 1
done
[ $released = 1 ] || { echo "chaos.sh: could not release the job" >&2; tail -n 30 "$run_dir/chaos.out" >&2; exit 1; }

rc=0
wait "$local_pid" || rc=$?
if [ $rc -ne 0 ]; then echo "chaos.sh: the job failed" >&2; tail -n 30 "$run_dir/chaos.out" >&2; exit 1; fi
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["params_sha256"])' "$job_dir/result.json")
echo "reference params_sha256 $ref"
echo "chaos     params_sha256 $got"
if [ "$got" != "$ref" ]; then echo "chaos.sh: DIGEST MISMATCH" >&2; exit 1; fi
echo "chaos.sh: same digest after $events events"
if [ $own_dir = 1 ]; then cleanup; rm -rf "$run_dir"; fi
