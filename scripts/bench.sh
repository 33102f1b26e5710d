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
#   elastic  one mlp job (examples/fashion_mnist_mlp.flags, 3000 steps whatever --steps says,
#        1 shard, 2 workers, --heartbeat_timeout_ms=1000): the median step time, then 3 rounds
#        of: attach a worker (launcher/attach.sh) and time its first counted contribution;
#        SIGKILL it and time the next completed step. Medians of the 3 rounds, in ms and in
#        step times. Reads the coordinator's log at --v=1 (step and confirmation lines).
#
# Every row is also appended to build/bench/results.csv; run logs go to build/bench/runs/.
# elastic rows leave samples_per_s empty, put the time in seconds and its ratio to the median
# step time in ratio_vs_baseline.
# Timings are wall-clock on a shared host: the csv records the load average seen
# before each row, so a noisy row can be told from a slow one. This never fails on timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# A new section: a function section_NAME below, NAME here, and a line in the case at the end.
all_sections=(vw elastic)
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

# row_ms SECTION METRIC MS STEP_MS LOAD1: prints a row of a timing table and appends it to the
# csv (time in seconds, ratio to the step time); an empty MS marks a metric not measured.
row_ms() {
  local ratio
  if [ -z "$3" ]; then
    failed=1
    printf '%-44s | %10s | %s\n' "$2" failed -
    echo "$run_id,$git_rev,$1,$2,,,$elastic_steps,,$5" >> "$csv"
    return
  fi
  ratio=$(awk -v x="$3" -v b="$4" 'BEGIN { if (b > 0) printf "%.1f", x / b; else print "-" }')
  printf '%-44s | %10s | %s\n' "$2" "$3" "$ratio"
  echo "$run_id,$git_rev,$1,$2,,$ratio,$elastic_steps,$(awk -v x="$3" 'BEGIN { printf "%.4f", x / 1000 }'),$5" >> "$csv"
}

# wait_until SECONDS CMD...: runs CMD every 50 ms until it succeeds (0), SECONDS pass or the
# process $watch_pid (when set) is gone (1).
watch_pid=""
wait_until() {
  local deadline=$(($(date +%s%N) + $1 * 1000000000))
  shift
  until "$@"; do
    [ -z "$watch_pid" ] || kill -0 "$watch_pid" 2>/dev/null || return 1
    [ "$(date +%s%N)" -lt $deadline ] || return 1
    sleep 0.05
  done
}

# Membership under load: one job, workers attached and killed while it trains.
elastic_steps=3000
elastic_timeout_ms=1000
elastic_pids=()  # processes this section started and has not reaped yet
elastic_cleanup() {
  local pid
  for pid in "${elastic_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  watch_pid="" wait_until 10 elastic_all_gone || true  # local.sh stops its job within 5 s
  for pid in "${elastic_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait "${elastic_pids[@]}" 2>/dev/null || true
  elastic_pids=()
}
elastic_all_gone() {
  local pid
  for pid in "${elastic_pids[@]}"; do ! kill -0 "$pid" 2>/dev/null || return 1; done
}
# elastic_last_step LOG: prints the last completed step (-1 before the first).
elastic_last_step() {
  tail -n 50 "$1" 2>/dev/null | grep -oE '\] step [0-9]+ complete$' | tail -n 1 | grep -oE '[0-9]+' || echo -1
}
elastic_step_reached() { [ "$(elastic_last_step "$1")" -ge "$2" ]; }
# elastic_worker_id LOG PID: prints the id of the worker registered with process id PID.
elastic_worker_id() { grep -oE "worker [0-9]+ registered from [^ ]*:$2\$" "$1" | head -n 1 | cut -d' ' -f2; }
elastic_counted() {  # elastic_counted LOG PID: that worker's first range was confirmed
  local w
  w=$(elastic_worker_id "$1" "$2") && [ -n "$w" ] && grep -qE "\] worker $w confirmed " "$1"
}
elastic_recovered() {  # elastic_recovered LOG PID: declared dead, and a step completed after that
  local w
  w=$(elastic_worker_id "$1" "$2") && [ -n "$w" ] &&
    awk -v d="] worker $w missed heartbeats" 'index($0, d) { dead = 1 }
      dead && /\] step [0-9]+ complete$/ { found = 1; exit } END { exit !found }' "$1"
}

# elastic_report LOG EVENTS: prints "metric|ms" lines (empty ms: not measured) and "# ..."
# lines with the details of each round, from the coordinator's log and the events file
# ("attach|kill EPOCH_SECONDS PID" lines written by this script).
elastic_report() {
  python3 - "$1" "$2" "$elastic_timeout_ms" <<'EOF'
import re, statistics, sys, time
log, events, timeout_ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
this_year = time.localtime().tm_year

def stamp(line):  # glog: "I1129 16:45:01.123456" or "I20261129 ...", local time
    m = re.match(r"[IWEF](\d{4})?(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ", line)
    if not m:
        return None
    y, mo, d, h, mi, s, us = m.groups()
    t = time.mktime((int(y) if y else this_year, int(mo), int(d), int(h), int(mi), int(s), 0, 0, -1))
    return t + int(us) / 1e6

registered, ready, first_counted, dead = {}, {}, {}, {}
completes, epochs = [], []  # (t, step), (from_step, workers)
for line in open(log, errors="replace"):
    t = stamp(line)
    if t is None:
        continue
    if m := re.search(r"\] step (\d+) complete$", line):
        completes.append((t, int(m.group(1))))
    elif m := re.search(r"\] worker (\d+) confirmed \[\d+,\d+\) of step (\d+)", line):
        first_counted.setdefault(m.group(1), (t, int(m.group(2))))
    elif m := re.search(r"\] worker (\d+) registered from \S*:(\d+)$", line):
        registered[m.group(2)] = (m.group(1), t)
    elif m := re.search(r"\] worker (\d+) is ready", line):
        ready.setdefault(m.group(1), t)
    elif m := re.search(r"\] worker (\d+) missed heartbeats for (\d+) ms", line):
        dead.setdefault(m.group(1), t)
    elif m := re.search(r"\] assignment epoch \d+ from step (\d+): (.*)$", line):
        epochs.append((int(m.group(1)), len(re.findall(r"w\d+:", m.group(2)))))

def workers_at(step):
    n = 0
    for from_step, count in epochs:
        if from_step <= step:
            n = count
    return n

intervals = {}  # workers -> step times (ms)
for (t0, s0), (t1, s1) in zip(completes, completes[1:]):
    if s1 == s0 + 1:
        intervals.setdefault(workers_at(s1), []).append((t1 - t0) * 1e3)

attach = {k: [] for k in ("total", "start_reg", "reg_first", "ready_first")}
crash = {k: [] for k in ("total", "detect", "recompute")}
for n, line in enumerate(l for l in open(events) if l.strip()):
    kind, t, pid = line.split()
    t = float(t)
    w, t_reg = registered.get(pid, (None, None))
    if kind == "attach":
        if w is None or w not in first_counted:
            print(f"# attach (pid {pid}): no counted contribution")
            continue
        t_first, step = first_counted[w]
        t_ready = ready.get(w, t_first)
        attach["total"].append((t_first - t) * 1e3)
        attach["start_reg"].append((t_reg - t) * 1e3)
        attach["reg_first"].append((t_first - t_reg) * 1e3)
        attach["ready_first"].append((t_first - t_ready) * 1e3)
        print(f"# attach worker {w}: registered +{(t_reg - t) * 1e3:.0f} ms, ready +{(t_ready - t) * 1e3:.0f} ms, "
              f"first range confirmed (step {step}) +{(t_first - t) * 1e3:.0f} ms")
    elif kind == "kill":
        t_dead = dead.get(w)
        after = [(tc, s) for tc, s in completes if t_dead is not None and tc > t_dead]
        if not after:
            print(f"# kill worker {w} (pid {pid}): no recovery seen")
            continue
        t_rec, step = after[0]
        crash["total"].append((t_rec - t) * 1e3)
        crash["detect"].append((t_dead - t) * 1e3)
        crash["recompute"].append((t_rec - t_dead) * 1e3)
        print(f"# kill worker {w}: declared dead +{(t_dead - t) * 1e3:.0f} ms, "
              f"step {step} complete +{(t_rec - t) * 1e3:.0f} ms")

def med(xs):
    return f"{statistics.median(xs):.1f}" if xs else ""

two = intervals.get(2, [])
three = intervals.get(3, [])
print(f"# medians of {len(two)} steps at 2 workers, {len(three)} at 3; of {len(attach['total'])} attaches"
      f" and {len(crash['total'])} kills")
# Metric names are csv fields: no commas.
print(f"step time median (2 workers)|{med(two)}")
print(f"step time median (3 workers)|{med(three)}")
print(f"attach: attach.sh start -> first counted|{med(attach['total'])}")
print(f"attach: attach.sh start -> registered|{med(attach['start_reg'])}")
print(f"attach: registered -> first counted|{med(attach['reg_first'])}")
print(f"attach: ready -> first counted|{med(attach['ready_first'])}")
print(f"kill: SIGKILL -> next completed step|{med(crash['total'])}")
print(f"kill: detection (SIGKILL -> declared dead)|{med(crash['detect'])}")
print(f"kill: recompute (declared dead -> step)|{med(crash['recompute'])}")
print(f"kill: next completed step - timeout|{med([x - timeout_ms for x in crash['total']])}")
EOF
}

section_elastic() {
  local dir=$out/runs/elastic
  local log=$dir/logs/coordinator.log events=$dir/events
  echo "== elastic: mlp, $elastic_steps steps, 1 shard, 2 workers, heartbeat timeout $elastic_timeout_ms ms" \
    "(host load $(load1), $(nproc) cores)"
  rm -rf "$dir" "$dir.log"
  mkdir -p "$dir/logs"
  : > "$events"
  trap elastic_cleanup EXIT
  trap 'exit 130' INT TERM
  local l job_pid pid w i t ok=1
  l=$(load1)
  "$root/launcher/local.sh" --job "$root/examples/fashion_mnist_mlp.flags" --servers 1 --workers 2 \
    --run-dir "$dir" -- --steps=$elastic_steps --test_limit=-1 --heartbeat_timeout_ms=$elastic_timeout_ms --v=1 \
    > "$dir.log" 2>&1 &
  job_pid=$!
  elastic_pids+=("$job_pid")
  watch_pid=$job_pid
  # A steady start, then 3 rounds; each waits 30 steps after its event so the next starts clean.
  if ! wait_until 120 elastic_step_reached "$log" 100; then
    echo "bench.sh: the elastic job did not reach step 100 (log: $dir.log)" >&2
    ok=0
  fi
  for ((i = 1; i <= 3 && ok; i++)); do
    t=$(date +%s.%N)
    "$root/launcher/attach.sh" --coordinator "$(cat "$dir/coordinator.addr")" --token-file "$dir/token" \
      --log "$dir/logs/attach$i.log" &
    pid=$!
    elastic_pids+=("$pid")
    echo "attach $t $pid" >> "$events"
    if ! wait_until 60 elastic_counted "$log" "$pid"; then
      echo "bench.sh: round $i: the attached worker (pid $pid) made no counted contribution" >&2
      ok=0
      break
    fi
    w=$(elastic_worker_id "$log" "$pid")
    wait_until 30 elastic_step_reached "$log" $(($(elastic_last_step "$log") + 30)) || true
    t=$(date +%s.%N)
    kill -KILL "$pid" 2>/dev/null || true
    echo "kill $t $pid" >> "$events"
    wait "$pid" 2>/dev/null || true
    elastic_pids=("$job_pid")
    if ! wait_until 30 elastic_recovered "$log" "$pid"; then
      echo "bench.sh: round $i: no step completed after worker $w was killed" >&2
      ok=0
      break
    fi
    wait_until 30 elastic_step_reached "$log" $(($(elastic_last_step "$log") + 30)) || true
  done
  # The job runs to its end: a failed job is a failed section even when every round was timed.
  watch_pid=""
  if ! wait_until 300 elastic_all_gone; then
    echo "bench.sh: the elastic job did not finish within 300 s (log: $dir.log)" >&2
    ok=0
  elif ! wait "$job_pid"; then
    echo "bench.sh: the elastic job failed (log: $dir.log):" >&2
    tail -n 5 "$dir.log" >&2
    ok=0
  fi
  elastic_cleanup
  trap - EXIT INT TERM
  [ $ok = 1 ] || failed=1

  local report metric ms step_ms
  report=$(elastic_report "$log" "$events")
  step_ms=$(echo "$report" | grep '^step time median (2 workers)|' | cut -d'|' -f2 || true)
  printf '%-44s | %10s | %s\n' metric "value (ms)" "in step times"
  while IFS='|' read -r metric ms; do
    if [[ "$metric" == "#"* ]]; then continue; fi
    row_ms elastic "$metric" "$ms" "$step_ms" "$l"
  done <<< "$report"
  echo "$report" | grep '^#' || true
  local attach_ms reg_ms kill_ms
  attach_ms=$(echo "$report" | grep '^attach: attach.sh start -> first counted|' | cut -d'|' -f2 || true)
  reg_ms=$(echo "$report" | grep '^attach: registered -> first counted|' | cut -d'|' -f2 || true)
  kill_ms=$(echo "$report" | grep '^kill: SIGKILL -> next completed step|' | cut -d'|' -f2 || true)
  awk -v s="$step_ms" -v t="$elastic_timeout_ms" -v a="$attach_ms" -v r="$reg_ms" -v k="$kill_ms" '
    function verdict(name, x) {
      if (x == "") printf "  %-36s not measured\n", name
      else printf "  %-36s %8.0f ms: %s\n", name, x, x <= goal ? "within" : sprintf("over by %.0f ms", x - goal)
    }
    BEGIN {
      goal = 1000 + s
      printf "goal: within 1 s plus one step = %.0f ms (torchrun and EasyScale restart the job: 20-30 s)\n", goal
      verdict("attach.sh start -> first counted", a)
      verdict("registered -> first counted", r)
      verdict("SIGKILL -> next completed step", k)
      printf "detection is bounded below by --heartbeat_timeout_ms=%d, less the time since the victim'"'"'s last\n", t
      print "message (a step request, or a heartbeat every 500 ms): recovery minus the timeout is what the system"
      print "adds. A step that completes between the kill and the detection does not count as recovery."
    }'
}

for s in "${all_sections[@]}"; do
  [ -z "$only" ] || [ "$only" = "$s" ] || continue
  case "$s" in
    vw) section_vw ;;
    elastic) section_elastic ;;
  esac
done
echo "results appended to $csv"
exit $failed
