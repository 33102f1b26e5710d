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
#        1 shard) at 1 worker x 8 VWs and 2 workers x 4 VWs, each as is and with the compute
#        threads pinned (local.sh --compute-cpus), against build/bin/baseline (the same model
#        and microbatches in one plain libtorch loop, no parameter server); medians of 5
#        interleaved rounds and of the per-round ratios (with their range), and where the 1 x 8
#        worker's time goes.
#   elastic  one mlp job (examples/fashion_mnist_mlp.flags, 3000 steps whatever --steps says,
#        1 shard, 2 workers, --heartbeat_timeout_ms=1000): the median step time, then 3 rounds
#        of: attach a worker (launcher/attach.sh) and time its first counted contribution;
#        SIGKILL it and time the next completed step. Medians of the 3 rounds, in ms and in
#        step times. Reads the coordinator's log at --v=1 (step and confirmation lines).
#   transfer  push + pull of a 10 M-float model through real shard processes (build/bin/ps_transfer
#        plays coordinator and workers), 1 shard / 1 client and 2 / 2, against raw ZeroMQ moving
#        the same 4 MiB frames out and back; with glibc's default allocator and with one that
#        reuses freed pages (MALLOC_* env); ps-lite's figures beside.
#   wire  the same push + pull (1 shard, 1 client) with --wire_dtype fp32, bf16 and fp16, against raw
#        ZeroMQ moving the fp32 bytes: on loopback, and on a 10 Gbit/s link (tc tbf on the loopback of
#        a private network namespace; needs root and iproute2, else those rows are skipped).
#   ps_share  the parameter server's share of step time, 1 M and 10 M parameters: one worker of
#        V = 8 VWs with a 10 ms busy loop per VW as compute (ps_transfer --mode=share).
#   ddp  samples/s of the CNN job at 1 shard, 2 workers x 4 VWs, against PyTorch DDP (gloo, 2
#        ranks, scripts/ddp_baseline.py) on the same model, global batch, steps and threads.
#   scaling  ms per step of the mlp with 1 sample per VW as V grows (1 .. 1024, 1 worker) and as
#        shards grow (1, 2, 4 at V = 16), against the plain libtorch loop over V microbatches.
#   hetero  steps/s of the mlp job (V = 8 x 512 samples, --train_limit=20000, 1 shard) on 3 workers
#        slowed 1x, 2x, 4x (local.sh --slowdowns), --planner=speed against --planner=equal and
#        against the ideal (the sum of the workers' speeds, from a 1-worker run at 1x); the speed
#        run's final assignment; both runs must end on the same params_sha256 (else exit 1). With 2
#        or more cores the 1x worker is pinned alone to CPU 0, everything else to CPU 1.
#   durable  build/bin/durable_bench (no libtorch): StateStore::WriteCheckpoint of 10 M and 100 M
#        floats in 4 MiB blobs against one synced raw RocksDB WriteBatch of the same keys and values
#        (and one reserved up front), in GB/s; recovery of a 100 M-parameter shard (values + momentum,
#        800 MB) in a fresh process, warm page cache: store open + LatestCheckpoint, + ShardState::
#        Restore, against raw RocksDB open + iterate; medians of 3. Then the mlp job (1 shard, 1 worker,
#        --steps steps) without checkpoints and with local.sh --checkpoint-every 1, 10, 100: steps/s,
#        medians of 3 interleaved rounds; all runs must end on the same params_sha256 (else exit 1).
#
# Every row is also appended to build/bench/results.csv; run logs go to build/bench/runs/;
# scripts/plot_bench.py draws build/bench/bench.png from the csv after the run.
# Rows timed in ms (elastic, transfer, wire, ps_share, scaling) and durable's byte rows leave samples_per_s
# empty and put the time in seconds; ratio_vs_baseline is what the section's table calls its ratio
# (hetero: vs equal; durable: vs raw RocksDB, or vs no checkpoints for its mlp rows).
# Timings are wall-clock on a shared host: the csv records the load average seen
# before each row, so a noisy row can be told from a slow one. This never fails on timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,52p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# A new section: a function section_NAME below, NAME here, and a line in the case at the end.
all_sections=(vw elastic transfer wire ps_share ddp scaling hetero durable)
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

row_w=24  # width of row()'s config column (a section may widen it with a local)
# row SECTION CONFIG SAMPLES_PER_S BASELINE_SAMPLES_PER_S SECONDS LOAD1: prints a table row and
# appends it to the csv; a SAMPLES_PER_S of 0 marks a failed run (and the exit status).
row() {
  local ratio
  if [ "$3" = 0 ]; then
    failed=1
    printf "%-${row_w}s | %10s | %s\n" "$2" failed -
    echo "$run_id,$git_rev,$1,${2//,/;},,,$steps,,$6" >> "$csv"
    return
  fi
  ratio=$(awk -v x="$3" -v b="$4" 'BEGIN { if (x > 0 && b > 0) printf "%.2f", x / b; else print "-" }')
  printf "%-${row_w}s | %10s | %s\n" "$2" "$3" "$ratio"
  echo "$run_id,$git_rev,$1,${2//,/;},$3,$ratio,$steps,$5,$6" >> "$csv"
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
# (steady_samples_per_s: after the first 5 steps, as the baseline skips 5 warm-up steps;
# else steps * V * batch_per_vw / train_seconds), or "0 0" if it failed.
job() { job_on 1 "$@"; }
# job_on SHARDS NAME WORKERS FLAGFILE [extra coordinator flags]: job() on SHARDS shards, with the
# local.sh options in the array job_launch (none by default).
job_launch=()
job_on() {
  local shards=$1 name=$2 workers=$3 flags=$4; shift 4
  local dir=$out/runs/$name
  rm -rf "$dir"
  if "$root/launcher/local.sh" --job "$flags" --servers "$shards" --workers "$workers" --run-dir "$dir" \
      "${job_launch[@]}" -- "$@" \
      > "$dir.log" 2>&1; then
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
sps = r.get("steady_samples_per_s") or r["steps"] * r["virtual_workers"] * r["batch_per_vw"] / r["train_seconds"]
print("%.1f %.3f" % (sps, r["train_seconds"]))' \
      "$dir/result.json"
  else
    echo "bench.sh: job $name failed (log: $dir.log):" >&2; tail -n 5 "$dir.log" >&2
    echo "0 0"
  fi
}

# Virtual-worker overhead: the same 8 x 16-sample microbatches per step, run by the
# job on 1 worker (8 VWs) or 2 workers (4 VWs each, one thread each: this host's 2
# cores), against the plain loop at 1 thread (the reference) and at 2 threads.
# Five interleaved rounds of all six, medians: this host drifts by 10-30 % within
# minutes, more than the overhead measured.
# median X...: the median (of an even count, the mean of the middle two).
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# paired "B1 B2 ..." "J1 J2 ...": the median of the per-round ratios Ji / Bi and their range, as
# "M (LO-HI)" (a drift of the host between rounds moves both sides of a ratio; see ratio below).
paired() {
  local -a b j ratios
  read -r -a b <<< "$1"
  read -r -a j <<< "$2"
  local i
  for i in "${!b[@]}"; do ratios+=("$(ratio "${j[$i]}" "${b[$i]}")"); done
  printf '%s (%s-%s)' "$(median "${ratios[@]}")" "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" \
    "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
}
section_vw() {
  local rounds=5
  echo "== vw: cnn, V = 8 x 16 samples, $steps steps, 1 shard, medians of $rounds interleaved rounds (host load $(load1), $(nproc) cores)"
  printf '%-24s | %10s | %s\n' config samples/s "ratio vs baseline"
  local l r sps secs
  # The cosine schedule needs more steps than its warm-up: shorten it for short runs.
  local job_flags=(--steps="$steps" --test_limit=-1)
  [ "$steps" -gt 200 ] || job_flags+=(--warmup_steps=$((steps / 2)))
  local base_flags=(--model=cnn --microbatches=8 --batch_per_vw=16)
  local cnn=$root/examples/fashion_mnist_cnn.flags
  local -a b1 b1s b2 b2s j1 j1s p1 p1s j2 j2s p2 p2s
  l=$(load1)
  for r in $(seq "$rounds"); do
    read -r sps secs < <(baseline "vw_baseline_1t_$r" "${base_flags[@]}" --threads=1); b1+=("$sps"); b1s+=("$secs")
    read -r sps secs < <(job "vw_1x8_$r" 1 "$cnn" "${job_flags[@]}"); j1+=("$sps"); j1s+=("$secs")
    job_launch=(--compute-cpus 0)
    read -r sps secs < <(job "vw_1x8_pinned_$r" 1 "$cnn" "${job_flags[@]}"); p1+=("$sps"); p1s+=("$secs")
    job_launch=()
    read -r sps secs < <(baseline "vw_baseline_2t_$r" "${base_flags[@]}" --threads=2); b2+=("$sps"); b2s+=("$secs")
    read -r sps secs < <(job "vw_2x4_$r" 2 "$cnn" "${job_flags[@]}"); j2+=("$sps"); j2s+=("$secs")
    job_launch=(--compute-cpus 0:1)
    read -r sps secs < <(job "vw_2x4_pinned_$r" 2 "$cnn" "${job_flags[@]}"); p2+=("$sps"); p2s+=("$secs")
    job_launch=()
  done
  for sps in "${b1[@]}" "${j1[@]}" "${p1[@]}" "${b2[@]}" "${j2[@]}" "${p2[@]}"; do [ "$sps" != 0 ] || failed=1; done
  local base; base=$(median "${b1[@]}")
  row vw "baseline (1 thread)" "$base" "$base" "$(median "${b1s[@]}")" "$l"
  row vw "baseline (2 threads)" "$(median "${b2[@]}")" "$base" "$(median "${b2s[@]}")" "$l"
  row vw "1 worker x 8 VWs" "$(median "${j1[@]}")" "$base" "$(median "${j1s[@]}")" "$l"
  row vw "1 worker x 8 VWs pinned" "$(median "${p1[@]}")" "$base" "$(median "${p1s[@]}")" "$l"
  row vw "2 workers x 4 VWs" "$(median "${j2[@]}")" "$base" "$(median "${j2s[@]}")" "$l"
  row vw "2 workers x 4 VWs pinned" "$(median "${p2[@]}")" "$base" "$(median "${p2s[@]}")" "$l"
  echo "   paired (median and range of the per-round ratios to the same round's baseline): 1 x 8 $(paired "${b1[*]}" "${j1[*]}"), pinned $(paired "${b1[*]}" "${p1[*]}"); 2 x 4 $(paired "${b1[*]}" "${j2[*]}"), pinned $(paired "${b1[*]}" "${p2[*]}")"
  local name
  for name in 1x8 1x8_pinned; do
    echo "   $name, where the worker's time goes (last round): $(grep -h 'ms per train plan' -r "$out/runs/vw_${name}_$rounds/logs" | sed 's/.*ms per train plan/ms per train plan/' || true)"
  done
}

# row_ms SECTION METRIC MS STEP_MS LOAD1: prints a row of a timing table and appends it to the
# csv (time in seconds, ratio to the step time); an empty MS marks a metric not measured.
row_ms() {
  local ratio
  if [ -z "$3" ]; then
    failed=1
    printf '%-44s | %10s | %s\n' "$2" failed -
    echo "$run_id,$git_rev,$1,${2//,/;},,,$elastic_steps,,$5" >> "$csv"
    return
  fi
  ratio=$(awk -v x="$3" -v b="$4" 'BEGIN { if (b > 0) printf "%.1f", x / b; else print "-" }')
  printf '%-44s | %10s | %s\n' "$2" "$3" "$ratio"
  echo "$run_id,$git_rev,$1,${2//,/;},,$ratio,$elastic_steps,$(awk -v x="$3" 'BEGIN { printf "%.4f", x / 1000 }'),$5" >> "$csv"
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

# ---- sections timed in ms (transfer, ps_share, scaling) ---------------------------------

# csv_ms SECTION CONFIG MS RATIO STEPS LOAD1: appends a row timed in ms (empty MS: failed).
# CONFIG is a csv field: no commas.
csv_ms() {
  if [ -z "$3" ]; then
    failed=1
    echo "$run_id,$git_rev,$1,${2//,/;},,,$5,,$6" >> "$csv"
    return
  fi
  echo "$run_id,$git_rev,$1,${2//,/;},,$4,$5,$(awk -v x="$3" 'BEGIN { printf "%.4f", x / 1000 }'),$6" >> "$csv"
}
# ratio X Y: X / Y with 2 decimals ("-" when either is missing or 0).
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (x > 0 && y > 0) printf "%.2f", x / y; else print "-" }'; }
# field KEY LINE: the value of KEY=... in a "result key=value ..." line.
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
need_bin() { [ -x "$bin/$1" ] || { echo "bench.sh: $bin/$1 is missing: run scripts/setup.sh" >&2; exit 2; }; }

# glibc frees big blocks back to the kernel (munmap, trim) and this host pays ~10-20 us per
# page fault: "reuse" keeps freed pages in the process (one arena, no mmap, no trim) so
# every buffer allocated per step lands on warm pages. Both the servers and the clients get it.
alloc_env() {
  case "$1" in
    default) echo "" ;;
    reuse) echo "MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824" ;;
  esac
}

# ps_transfer NAME ARGS...: runs build/bin/ps_transfer (env from $alloc); prints its "result" lines.
ps_transfer() {
  local name=$1; shift
  local logs=$out/runs/$name
  rm -rf "$logs"; mkdir -p "$logs"
  # shellcheck disable=SC2046
  # shellcheck disable=SC2086
  if ${run_prefix:-} env $(alloc_env "$alloc") "$bin/ps_transfer" --log_dir="$logs" "$@" > "$logs.log" 2>&1; then
    grep '^result ' "$logs.log" || true
  else
    echo "bench.sh: ps_transfer $name failed (log: $logs.log):" >&2; tail -n 5 "$logs.log" >&2
  fi
}

section_transfer() {
  need_bin ps_transfer
  echo "== transfer: 10 M fp32 (40 MB) pushed and pulled back per client and step, chunks of 2^20 floats (4 MiB),"
  echo "   real shard processes (plain SGD applied between push and pull); raw ZeroMQ: each client's DEALER sends"
  echo "   the same 4 MiB frames zero-copy to each server's ROUTER, which answers with as many bytes zero-copy."
  echo "   Both in one run, alternating rounds; medians of 15 steps per client (host load $(load1), $(nproc) cores)"
  printf '%-36s | %8s | %8s | %8s | %8s | %s\n' config "push ms" "pull ms" "PS ms" "raw ms" "raw / PS"
  local alloc shape l res ps raw push pull mem="" cfg best_raw=""
  for alloc in default reuse; do
    for shape in "1 1" "2 2"; do
      set -- $shape
      cfg="$1 shard $2 client / malloc $alloc"
      [ "$1" = 1 ] || cfg="$1 shards $2 clients / malloc $alloc"
      l=$(load1)
      res=$(ps_transfer "transfer_${1}x${2}_$alloc" --mode=transfer --shards="$1" --clients="$2" --rounds=3 --iters=5)
      ps=$(field ps_ms "$(echo "$res" | grep mode=transfer)")
      raw=$(field raw_ms "$(echo "$res" | grep mode=transfer)")
      push=$(field push_ms "$(echo "$res" | grep mode=transfer)")
      pull=$(field pull_ms "$(echo "$res" | grep mode=transfer)")
      [ -n "$mem" ] || mem=$(echo "$res" | grep mode=memory || true)
      if [ -z "$ps" ]; then
        printf '%-36s | %8s | %8s | %8s | %8s | %s\n' "$cfg" failed - - - -
        csv_ms transfer "$cfg: ElasticPS" "" "" 0 "$l"
        continue
      fi
      printf '%-36s | %8.1f | %8.1f | %8.1f | %8.1f | %s\n' "$cfg" "$push" "$pull" "$ps" "$raw" "$(ratio "$raw" "$ps")"
      csv_ms transfer "$cfg: raw ZeroMQ" "$raw" 1.00 15 "$l"
      csv_ms transfer "$cfg: ElasticPS" "$ps" "$(ratio "$raw" "$ps")" 15 "$l"
      [ "$1" != 1 ] || [ "$alloc" != reuse ] || best_raw=$raw
    done
  done
  printf '%-36s | %8s | %8s | %8s | %8s | %s\n' "ps-lite 1/1 (figures of issue 6)" 170 370 540 - -
  echo "goal: raw / PS >= 0.7 in 4 MiB frames. ps-lite's push carries keys too; its figures are from the same host."
  if [ -n "$mem" ]; then
    awk -v w="$(field warm_ms "$mem")" -v f="$(field fresh_ms "$mem")" -v b="$(field bytes "$mem")" 'BEGIN {
      printf "memory on this host: memcpy of %.0f MB takes %.1f ms into warm pages, %.1f ms into fresh ones\n",
        b / 1e6, w, f
      printf "(%.1f us per 4 KiB page fault). With glibc'"'"'s default allocator every 4 MiB ZeroMQ receive buffer\n",
        (f - w) * 1e3 / (b / 4096)
      print "and every per-step std::vector of that size can land on fresh pages; \"malloc reuse\" keeps freed pages"
      print "in the process." }'
  fi
}

section_wire() {
  need_bin ps_transfer
  echo "== wire: 10 M floats pushed and pulled back per step, 1 shard / 1 client, as fp32, bf16 and fp16"
  echo "   (--wire_dtype: the worker rounds and encodes, the shard decodes, reduces, optimizes in fp32 and encodes"
  echo "   each version once), against raw ZeroMQ moving the fp32 bytes (40 MB each way) in the same run; on"
  echo "   loopback and on a 10 Gbit/s link (tc tbf on the loopback of a private network namespace)."
  echo "   Medians of 15 steps (host load $(load1), $(nproc) cores)"
  printf '%-10s | %-5s | %8s | %8s | %8s | %8s | %8s | %s\n' link wire "push ms" "pull ms" "PS ms" "raw ms" "raw / PS" \
    "fp32 PS / PS"
  local alloc=default ns="" link dtype run_prefix l res ps raw fp32_ps
  if [ "$(id -u)" = 0 ] && command -v tc > /dev/null && ip netns add "eps-wire-$$" 2> /dev/null; then
    ns=eps-wire-$$
    if ! { ip netns exec "$ns" ip link set lo up &&
           ip netns exec "$ns" tc qdisc add dev lo root tbf rate 10gbit burst 4mb latency 100ms; }; then
      ip netns del "$ns"; ns=""
    fi
  fi
  for link in loopback 10gbit; do
    run_prefix=""
    if [ "$link" = 10gbit ]; then
      if [ -z "$ns" ]; then
        echo "10gbit rows skipped: they need root, iproute2 and network namespaces"
        continue
      fi
      run_prefix="ip netns exec $ns"
    fi
    fp32_ps=""
    for dtype in fp32 bf16 fp16; do
      l=$(load1)
      res=$(ps_transfer "wire_${link}_$dtype" --mode=transfer --wire_dtype="$dtype" --rounds=3 --iters=5 |
        grep mode=transfer || true)
      ps=$(field ps_ms "$res")
      raw=$(field raw_ms "$res")
      if [ -z "$ps" ]; then
        printf '%-10s | %-5s | %8s |\n' "$link" "$dtype" failed
        csv_ms wire "$link / $dtype: ElasticPS" "" "" 0 "$l"
        continue
      fi
      [ "$dtype" != fp32 ] || fp32_ps=$ps
      printf '%-10s | %-5s | %8.1f | %8.1f | %8.1f | %8.1f | %8s | %s\n' "$link" "$dtype" "$(field push_ms "$res")" \
        "$(field pull_ms "$res")" "$ps" "$raw" "$(ratio "$raw" "$ps")" "$(ratio "$fp32_ps" "$ps")"
      csv_ms wire "$link / $dtype: raw ZeroMQ fp32" "$raw" 1.00 15 "$l"
      csv_ms wire "$link / $dtype: ElasticPS" "$ps" "$(ratio "$raw" "$ps")" 15 "$l"
    done
  done
  [ -z "$ns" ] || ip netns del "$ns"
  echo "On loopback this host moves bytes at memory speed, so the conversions cost about what they save; on a"
  echo "link slower than memory the halved bytes show."
}

section_ps_share() {
  need_bin ps_transfer
  echo "== ps_share: one worker hosting V = 8 VWs, 1 shard; compute = a 10 ms busy loop per VW (80 ms per step)."
  echo "   Per step, as worker/worker.cc does: pull w(t) and copy it into the model, run the 8 VWs (each: compute,"
  echo "   copy its gradient into a flat buffer, add it into the block's tree), push the block [0,8) (one push per"
  echo "   shard), wait for the replies; the shard reduces, applies SGD and serves w(t+1). PS ms = step - compute:"
  echo "   the parameter server's share, its copies on the worker included. Medians of 5 steps (host load $(load1))"
  printf '%-30s | %8s | %8s | %8s | %8s | %8s | %8s | %s\n' config "step ms" compute pull copies "tree" push "PS share"
  local alloc elems l res step comp cfg
  for alloc in default reuse; do
    for elems in 1000000 10000000; do
      cfg="$((elems / 1000000)) M params / malloc $alloc"
      l=$(load1)
      res=$(ps_transfer "ps_share_${elems}_$alloc" --mode=share --elems="$elems" --vws_per_client=8 --compute_ms=10 \
        --warmup=1 --iters=5 | grep mode=share || true)
      step=$(field step_ms "$res")
      comp=$(field compute_ms "$res")
      if [ -z "$step" ]; then
        printf '%-30s | %8s |\n' "$cfg" failed
        csv_ms ps_share "$cfg" "" "" 0 "$l"
        continue
      fi
      printf '%-30s | %8.1f | %8.1f | %8.1f | %8.1f | %8.1f | %8.1f | %s\n' "$cfg" "$step" "$comp" \
        "$(field pull_ms "$res")" "$(field worker_ms "$res")" "$(field tree_ms "$res")" "$(field push_ms "$res")" \
        "$(awk -v s="$step" -v c="$comp" 'BEGIN { printf "%.0f %%", 100 * (s - c) / s }')"
      # ratio: compute / step, the fraction of the step spent computing (1.00 = a free PS)
      csv_ms ps_share "$cfg" "$step" "$(ratio "$comp" "$step")" 5 "$l"
    done
  done
  echo "copies = the worker's flat gradient copies and tree adds (tree: the adds alone); push = sending the block"
  echo "and waiting for the shard's reply (its reduction and SGD included). csv ratio = compute / step."
}

section_ddp() {
  local py=/usr/bin/python3
  echo "== ddp: cnn (examples/fashion_mnist_cnn.flags: AdamW, cosine), V = 8 x 16 (global batch 128), $steps steps,"
  echo "   2 processes at 1 intra-op thread each, OMP_WAIT_POLICY=passive (host load $(load1), $(nproc) cores)."
  echo "   DDP: gloo, ranks started by scripts/ddp_baseline.py; 'accumulate' = 4 microbatches of 16 per rank with"
  echo "   no_sync gradient accumulation (ElasticPS's semantics: mean of 8 microbatch gradients); 'batch' = one"
  echo "   batch of 64 per rank (DDP's usual form). All timed after 5 warm-up steps (result.json's steady_samples_per_s)."
  local row_w=36 l base secs sps line
  printf "%-${row_w}s | %10s | %s\n" config samples/s "ratio vs DDP (accumulate)"
  local job_flags=(--steps="$steps" --test_limit=-1)
  [ "$steps" -gt 200 ] || job_flags+=(--warmup_steps=$((steps / 2)))
  ddp_run() {  # ddp_run NAME MODE: prints "SAMPLES_PER_S SECONDS" ("0 0" if it failed)
    local log=$out/runs/$1.log
    if "$py" "$root/scripts/ddp_baseline.py" --ranks 2 --steps "$steps" --mode "$2" > "$log" 2>&1 &&
       line=$(grep '^ddp ' "$log"); then
      echo "$line" | sed -E 's/.*samples_per_s=([0-9.]+).*seconds=([0-9.]+).*/\1 \2/'
    else
      echo "bench.sh: ddp_baseline.py --mode $2 failed:" >&2; tail -n 5 "$log" >&2
      echo "0 0"
    fi
  }
  l=$(load1); read -r base secs < <(ddp_run ddp_accumulate accumulate)
  row ddp "DDP 2 ranks x 4 x 16 (accumulate)" "$base" "$base" "$secs" "$l"
  l=$(load1); read -r sps secs < <(ddp_run ddp_batch batch)
  row ddp "DDP 2 ranks x 1 x 64 (batch)" "$sps" "$base" "$secs" "$l"
  l=$(load1); read -r sps secs < <(job ddp_elasticps 2 "$root/examples/fashion_mnist_cnn.flags" "${job_flags[@]}")
  row ddp "ElasticPS 1 shard 2 workers x 4 VWs" "$sps" "$base" "$secs" "$l"
  echo "goal: ElasticPS >= 1.2x DDP (accumulate)."
}

section_scaling() {
  local flags=$root/examples/fashion_mnist_mlp.flags
  echo "== scaling: mlp (784-128-10, 101,770 params), 1 sample per VW, --train_limit=2048, 1 worker at 1 thread;"
  echo "   ms/step = the median interval between completed steps (coordinator log); plain loop = build/bin/baseline"
  echo "   over the same V microbatches (no parameter server; total time / steps); each figure the best of 2"
  echo "   interleaved passes (host load $(load1), $(nproc) cores)"
  printf '%-22s | %6s | %9s | %9s | %12s | %13s | %s\n' config steps "ms/step" "ms per VW" "plain ms/step" \
    "vs plain loop" "vs first row"
  local V n l sps secs bsps bsecs first="" shards pass cfg
  local -A job_ms=() plain_ms=() load=()
  local common=(--test_limit=-1 --batch_per_vw=1 --train_limit=2048)
  local plain=(--model=mlp --batch_per_vw=1 --train_limit=2048 --optimizer=sgd --lr=0.05 --momentum=0.9 --threads=1)
  # median_step_ms NAME: the median interval between consecutive "step N complete" lines of the
  # job's coordinator log (--v=1), in ms: steady-state steps, robust to a burst of host noise.
  median_step_ms() {
    grep -E '\] step [0-9]+ complete$' "$out/runs/$1/logs/coordinator.log" 2>/dev/null |
      awk '{ split($2, a, ":"); t = a[1] * 3600 + a[2] * 60 + a[3]; if (n++ && t > p) print (t - p) * 1000; p = t }' |
      sort -g | awk '{ d[++k] = $1 }
        END { if (k) printf "%.3f", k % 2 ? d[(k + 1) / 2] : (d[k / 2] + d[k / 2 + 1]) / 2 }'
  }
  scaling_steps() { n=$((4096 / $1)); [ $n -le 200 ] || n=200; [ $n -ge 20 ] || n=20; }
  # keep_min ARRAY KEY MS: ARRAY[KEY] = min(ARRAY[KEY], MS); an empty MS (failed) leaves it alone.
  keep_min() {
    local -n arr=$1
    local ms=$3
    [ -n "$ms" ] || return 0
    if [ -z "${arr[$2]:-}" ] || awk -v a="$ms" -v b="${arr[$2]}" 'BEGIN { exit !(a < b) }'; then arr[$2]=$ms; fi
  }
  scaling_row() {  # scaling_row CONFIG STEPS V MS PLAIN_MS LOAD
    if [ -z "$4" ]; then
      printf '%-22s | %6s | %9s |\n' "$1" "$2" failed
      csv_ms scaling "$1" "" "" "$2" "$6"
      return
    fi
    [ -n "$first" ] || first=$4
    printf '%-22s | %6s | %9.2f | %9.3f | %12s | %13s | %s\n' "$1" "$2" "$4" \
      "$(awk -v m="$4" -v v="$3" 'BEGIN { print m / v }')" "${5:--}" "$(ratio "$4" "$5")" "$(ratio "$4" "$first")"
    csv_ms scaling "$1" "$4" "$(ratio "$4" "$5")" "$2" "$6"
  }
  for pass in 1 2; do
    for V in 1 4 16 64 256 1024; do
      scaling_steps $V
      [ $pass = 2 ] || load[v$V]=$(load1)
      read -r sps secs < <(job "scaling_v$V" 1 "$flags" "${common[@]}" --virtual_workers=$V --steps=$n --v=1)
      [ "$sps" = 0 ] || keep_min job_ms "v$V" "$(median_step_ms "scaling_v$V")"
      read -r bsps bsecs < <(baseline "scaling_plain_v$V" "${plain[@]}" --microbatches=$V --steps=$n)
      keep_min plain_ms "v$V" "$(awk -v s="$bsecs" -v n=$n 'BEGIN { if (s > 0) printf "%.3f", 1000 * s / n }')"
    done
    for shards in 1 2 4; do
      [ $pass = 2 ] || load[s$shards]=$(load1)
      read -r sps secs < <(job_on "$shards" "scaling_s$shards" 1 "$flags" "${common[@]}" --virtual_workers=16 \
        --steps=200 --v=1)
      [ "$sps" = 0 ] || keep_min job_ms "s$shards" "$(median_step_ms "scaling_s$shards")"
    done
  done
  for V in 1 4 16 64 256 1024; do
    scaling_steps $V
    scaling_row "V=$V / 1 shard" $n $V "${job_ms[v$V]:-}" "${plain_ms[v$V]:-}" "${load[v$V]}"
  done
  first=""
  for shards in 1 2 4; do
    cfg="V=16 / $shards shards"
    [ "$shards" != 1 ] || cfg="V=16 / 1 shard (again)"
    scaling_row "$cfg" 200 16 "${job_ms[s$shards]:-}" "${plain_ms[v16]:-}" "${load[s$shards]}"
  done
  echo "vs first row: growth against V=1 (upper part) and against 1 shard (lower part); csv ratio = vs plain loop."
}

# Heterogeneous workers: 3 workers slowed 1x, 2x, 4x (the --slowdown testing aid idles (F - 1) x
# each VW's compute), the speed-aware planner against the equal split and against the ideal.
section_hetero() {
  local flags=$root/examples/fashion_mnist_mlp.flags slowdowns=1,2,4
  local common=(--steps="$steps" --batch_per_vw=512 --train_limit=20000 --test_limit=-1)
  echo "== hetero: mlp, V = 8 x 512 samples, $steps steps, --train_limit=20000, 1 shard, 3 workers slowed 1x, 2x, 4x"
  echo "   (local.sh --slowdowns $slowdowns). ideal = the sum of the workers' speeds, (1/t1 + 1/(2 t1) + 1/(4 t1)) / V"
  echo "   steps/s, t1 = seconds per VW of one 1x worker alone (train_seconds / steps / V of a 1-worker run of the"
  echo "   same job, parameter server included) (host load $(load1), $(nproc) cores)"
  # Each worker computes at its own speed only with a core of its own: with 2 or more cores
  # the 1x worker gets core 0 to itself, the slowed workers (idle most of the time) and the
  # coordinator and shard share core 1 (local.sh --worker-cpus, --server-cpus).
  local pin=0
  [ "$(nproc)" -lt 2 ] || pin=1
  if [ $pin = 1 ]; then
    echo "   pinned: the 1x worker alone on CPU 0; the 2x and 4x workers, the coordinator and the shard on CPU 1"
  fi
  # hetero_job NAME WORKERS SLOWDOWNS WORKER_CPUS [extra coordinator flags]: prints
  # "STEPS_PER_S SECONDS V PARAMS_SHA256" from the run's result.json ("0 0 0 -" if it failed).
  hetero_job() {
    local name=$1 workers=$2 slow=$3 cpus=$4; shift 4
    local dir=$out/runs/$name pins=()
    [ $pin = 0 ] || pins=(--worker-cpus "$cpus" --server-cpus 1)
    rm -rf "$dir"
    if "$root/launcher/local.sh" --job "$flags" --servers 1 --workers "$workers" --slowdowns "$slow" "${pins[@]}" \
        --run-dir "$dir" -- "${common[@]}" "$@" > "$dir.log" 2>&1; then
      python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%.2f %.3f %d %s" % (r["steps"] / r["train_seconds"], r["train_seconds"], r["virtual_workers"],
                          r["params_sha256"]))' "$dir/result.json"
    else
      echo "bench.sh: job $name failed (log: $dir.log):" >&2; tail -n 5 "$dir.log" >&2
      echo "0 0 0 -"
    fi
  }
  local l_alone l_equal l_speed alone secs_alone equal secs_equal speed secs_speed sha_alone sha_equal sha_speed
  local v v_equal v_speed
  l_alone=$(load1)
  read -r alone secs_alone v sha_alone < <(hetero_job hetero_alone 1 1 0)
  l_equal=$(load1)
  read -r equal secs_equal v_equal sha_equal < <(hetero_job hetero_equal 3 "$slowdowns" 0:1:1 --planner=equal)
  l_speed=$(load1)
  read -r speed secs_speed v_speed sha_speed < <(hetero_job hetero_speed 3 "$slowdowns" 0:1:1 --planner=speed)
  [ "$v" != 0 ] || v=$v_equal
  [ "$v" != 0 ] || v=$v_speed
  local ideal=0 t1_ms="-"
  if [ "$alone" != 0 ]; then
    t1_ms=$(awk -v s="$alone" -v v="$v" 'BEGIN { printf "%.3f", 1000 / (s * v) }')
    ideal=$(awk -v s="$alone" -v f="$slowdowns" 'BEGIN {
      n = split(f, a, ","); for (i = 1; i <= n; i++) sum += 1 / a[i]; printf "%.2f", s * sum }')
  fi
  # hetero_row CONFIG STEPS_PER_S SECONDS LOAD1: a table row, and a csv row with samples/s
  # (steps/s x V x 512), ratio = vs equal; a STEPS_PER_S of 0 marks a failed run.
  local row_w=28
  hetero_row() {
    if [ "$2" = 0 ]; then
      failed=1
      printf "%-${row_w}s | %8s | %8s | %s\n" "$1" failed - -
      echo "$run_id,$git_rev,hetero,$1,,,$steps,,$4" >> "$csv"
      return
    fi
    printf "%-${row_w}s | %8s | %8s | %s\n" "$1" "$2" "$(ratio "$2" "$equal")" "$(ratio "$2" "$ideal")"
    echo "$run_id,$git_rev,hetero,$1,$(awk -v s="$2" -v v="$v" 'BEGIN { printf "%.1f", s * v * 512 }'),$(ratio "$2" "$equal"),$steps,$3,$4" >> "$csv"
  }
  printf "%-${row_w}s | %8s | %8s | %s\n" config steps/s "vs equal" "vs ideal"
  hetero_row "1 worker at 1x alone" "$alone" "$secs_alone" "$l_alone"
  hetero_row "ideal (1x + 2x + 4x)" "$ideal" "" "$l_alone"
  hetero_row "3 workers --planner=equal" "$equal" "$secs_equal" "$l_equal"
  hetero_row "3 workers --planner=speed" "$speed" "$secs_speed" "$l_speed"
  echo "t1 = $t1_ms ms per VW at 1x. csv: samples_per_s = steps/s x V x 512, ratio = vs equal (the ideal row:"
  echo "predicted, no seconds)."
  awk -v s="$speed" -v e="$equal" -v i="$ideal" '
    function verdict(name, x, goal) {
      if (x == "") printf "  %-28s not measured\n", name
      else printf "  %-28s %5.2fx: %s\n", name, x, (x >= goal ? "met" : "not met")
    }
    BEGIN {
      print "goals: planner=speed >= 1.3x equal and >= 0.85x ideal"
      verdict("planner=speed vs equal", s > 0 && e > 0 ? s / e : "", 1.3)
      verdict("planner=speed vs ideal", s > 0 && i > 0 ? s / i : "", 0.85)
    }'
  # The speed run's final assignment, its workers named by slowdown (worker<i>.log is the i-th
  # slowdown's and says which id it registered as).
  local dir=$out/runs/hetero_speed
  python3 - "$dir" "$slowdowns" "$t1_ms" "$speed" <<'PY' || true
import os, re, sys
d, slow, t1, speed = sys.argv[1], sys.argv[2].split(","), sys.argv[3], float(sys.argv[4])
try:
    log = open(os.path.join(d, "logs", "coordinator.log"), errors="replace").readlines()
except OSError:
    log = []
lines = [l for l in log if "] assignment epoch " in l]
measured = [l for l in log if "] re-planning VWs by measured speed (seconds per VW: " in l]
if not lines:
    print("final assignment (speed run): none found in its coordinator log")
    sys.exit(0)
last = lines[-1].split("] ", 1)[1].strip()
print(f"final assignment (speed run): {last}  ({len(lines)} epochs, {len(lines) - 1} re-plans or changes)")
names, counts = {}, {}
for i, f in enumerate(slow):
    try:
        m = re.search(r"registered as worker (\d+) ", open(os.path.join(d, "logs", f"worker{i}.log"), errors="replace").read())
    except OSError:
        m = None
    if m:
        names[m.group(1)] = f + "x"
for w, a, b in re.findall(r"w(\d+):\[(\d+),(\d+)\)", last):
    counts[w] = int(b) - int(a)
by_speed = sorted(names.items(), key=lambda x: float(x[1][:-1]))
if names:
    print("  VWs by worker: " + ", ".join(f"w{w} ({f}) {counts.get(w, 0)}" for w, f in by_speed))
if names and measured:
    ms = dict(re.findall(r"\bw(\d+)=([0-9.?]+)", measured[-1].split("seconds per VW: ", 1)[1].split(")", 1)[0]))
    print("  seconds per VW as the planner last saw them: " +
          ", ".join(f"w{w} ({f}) {ms.get(w, '?')} ms" for w, f in by_speed) + f"; t1 alone {t1} ms")
    # The ideal at the speeds the workers had in this run (contention included): V VWs shared
    # in proportion to speed with no step overhead, i.e. sum(1/t_i) / V steps/s.
    t = [float(x) for x in ms.values() if x not in ("?", "")]
    if t and all(x > 0 for x in t) and speed > 0:
        v = sum(counts.values()) or 8
        ideal_run = sum(1000.0 / x for x in t) / v
        print(f"  ideal at these measured speeds: {ideal_run:.2f} steps/s; planner=speed ran {speed:.2f} "
              f"({speed / ideal_run:.2f}x: what the step protocol and the integer VW split leave)")
PY
  echo "params_sha256: equal $sha_equal"
  echo "               speed $sha_speed"
  echo "               alone $sha_alone"
  if [ "$sha_equal" = - ] || [ "$sha_speed" = - ]; then
    echo "digest check: not made (a run failed)"
  elif [ "$sha_equal" != "$sha_speed" ] || { [ "$sha_alone" != - ] && [ "$sha_alone" != "$sha_speed" ]; }; then
    echo "bench.sh: hetero: the runs ended on different params_sha256: placement changed the bits" >&2
    echo "digest check: MISMATCH"
    failed=1
  else
    echo "digest check: equal and speed identical$([ "$sha_alone" = - ] || echo ", and the same as the 1-worker run")"
  fi
  if [ "$(nproc)" -lt 5 ]; then
    echo "note: $(nproc) cores for 5 processes (3 workers, the shard, the coordinator): the workers' compute competes"
    echo "for CPU and runs slower than t1 (measured with no other worker), and --slowdown idles in proportion to that"
    echo "slower compute. The ideal assumes every worker keeps its lone speed: on this host it is out of reach, and"
    echo "both ratios are figures of this host's contention as much as of the planner."
  fi
}

# Durable state: checkpoint writes and recovery against raw RocksDB (build/bin/durable_bench),
# then the step-time cost of checkpointing the mlp job every K steps.
section_durable() {
  need_bin durable_bench
  local flags=$root/examples/fashion_mnist_mlp.flags
  echo "== durable: checkpoints (storage/state_store.h) against raw RocksDB, and their cost per training step"
  echo "   (host load $(load1), $(nproc) cores). GB/s = 1e9 bytes/s of model bytes; medians of 3 rounds, store and raw"
  echo "   alternating. write: the WriteCheckpoint call (one synced batch: blobs + manifest) vs building and writing"
  echo "   one synced WriteBatch of the same 4 MiB values under keys of the same size (RocksDB defaults without"
  echo "   compression), each round into a fresh directory after a warm-up round; 'reserved': that batch sized up"
  echo "   front. recover: each round in a fresh process (a restarted shard), files in the page cache (written just"
  echo "   before: warm); 800 MB = values + momentum slot of 100 M fp32 parameters (ShardState::Snapshot's blobs);"
  echo "   raw = DB::Open and one iterator copying every value into one buffer."
  local row_w=52 l scratch=$out/runs/durable_scratch log=$out/runs/durable_bench.log res line
  # drow CONFIG SECONDS RATE RATIO: a table row ("" SECONDS: failed).
  drow() {
    if [ -z "$2" ]; then
      printf "%-${row_w}s | %9s | %16s | %s\n" "$1" failed - -
    else
      printf "%-${row_w}s | %9.3f | %16s | %s\n" "$1" "$2" "$3" "$4"
    fi
  }
  # drow_bytes CONFIG SECONDS BYTES RAW_SECONDS LOAD1: a row of GB/s (ratio: raw seconds / these) and its csv row.
  drow_bytes() {
    local gbps
    gbps=$(awk -v b="$3" -v s="$2" 'BEGIN { if (s > 0) printf "%.3f GB/s", b / s / 1e9 }')
    drow "$1" "$2" "$gbps" "$(ratio "$4" "$2")"
    csv_ms durable "$1" "$(awk -v s="$2" 'BEGIN { if (s != "") printf "%.1f", s * 1000 }')" "$(ratio "$4" "$2")" 3 "$5"
  }
  printf "%-${row_w}s | %9s | %16s | %s\n" config seconds rate "vs raw RocksDB / vs no checkpoints"
  rm -rf "$scratch"
  l=$(load1)
  if ! "$bin/durable_bench" --dir="$scratch" --write_elems=10000000,100000000 --recover_elems=100000000 --reps=3 \
      > "$log" 2>&1; then
    echo "bench.sh: durable_bench failed (log: $log):" >&2; tail -n 5 "$log" >&2
    failed=1
  fi
  rm -rf "$scratch"
  res=$(grep '^result ' "$log" || true)
  local elems bytes st raw rs
  for elems in 10000000 100000000; do
    line=$(echo "$res" | grep "kind=write elems=$elems " || true)
    bytes=$(field bytes "$line"); st=$(field store_s "$line"); raw=$(field raw_s "$line")
    local cfg="write $((elems / 1000000)) M fp32 ($((elems * 4 / 1000000)) MB)"
    drow_bytes "$cfg: raw RocksDB" "$raw" "$bytes" "$raw" "$l"
    drow_bytes "$cfg: raw RocksDB reserved" "$(field reserved_s "$line")" "$bytes" "$raw" "$l"
    drow_bytes "$cfg: StateStore" "$st" "$bytes" "$raw" "$l"
  done
  line=$(echo "$res" | grep "kind=recover cache=warm " || true)
  bytes=$(field bytes "$line"); st=$(field read_s "$line"); rs=$(field restore_s "$line"); raw=$(field raw_s "$line")
  local cfg="recover 100 M ($((${bytes:-0} / 1000000)) MB)"
  drow_bytes "$cfg: raw RocksDB" "$raw" "$bytes" "$raw" "$l"
  drow_bytes "$cfg: open + LatestCheckpoint" "$st" "$bytes" "$raw" "$l"
  drow_bytes "$cfg: + ShardState::Restore" "$rs" "$bytes" "$raw" "$l"

  # durable_job NAME K: the mlp job on 1 shard and 1 worker, checkpointing every K steps (0: never);
  # prints "STEPS_PER_S SECONDS PARAMS_SHA256 CHECKPOINTS" ("0 0 - 0" if it failed).
  durable_job() {
    local dir=$out/runs/$1 k=$2 n
    rm -rf "$dir"
    if "$root/launcher/local.sh" --job "$flags" --servers 1 --workers 1 --checkpoint-every "$k" --run-dir "$dir" -- \
        --steps="$steps" --test_limit=-1 > "$dir.log" 2>&1; then
      n=$(grep -c ' is durable$' "$dir/logs/shard0.log" || true)
      python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%.2f %.3f %s %s" % (r["steps"] / r["train_seconds"], r["train_seconds"], r["params_sha256"], sys.argv[2]))' \
        "$dir/result.json" "${n:-0}"
    else
      echo "bench.sh: job $1 failed (log: $dir.log):" >&2; tail -n 5 "$dir.log" >&2
      echo "0 0 - 0"
    fi
    rm -rf "$dir/store"  # the checkpoints themselves are not kept
  }
  local k round sps secs sha n
  local -A runs=() loads=() shas=() written=()
  for round in 1 2 3; do
    for k in 0 1 10 100; do
      [ "$round" != 1 ] || loads[$k]=$(load1)
      read -r sps secs sha n < <(durable_job "durable_k${k}_r$round" "$k")
      runs[$k]+="$sps $secs|"
      written[$k]+="$n "
      [ "$sha" = - ] || shas[$sha]=1
    done
  done
  # median_run K: "STEPS_PER_S SECONDS" of K's median run by steps/s ("0 0" if any run failed).
  median_run() {
    echo "${runs[$1]}" | tr '|' '\n' | awk 'NF { if ($1 == 0) bad = 1; n++; r[n] = $0 }
      END { if (bad || n == 0) { print "0 0"; exit }
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) { split(r[i], a, " "); split(r[j], b, " ")
              if (b[1] < a[1]) { t = r[i]; r[i] = r[j]; r[j] = t } }
            print r[int((n + 1) / 2)] }'
  }
  local base
  read -r base _ < <(median_run 0)
  for k in 0 1 10 100; do
    local cfg="mlp 1 shard 1 worker: no checkpoints"
    [ "$k" = 0 ] || cfg="mlp 1 shard 1 worker: checkpoint every $k"
    read -r sps secs < <(median_run "$k")
    if [ "$sps" = 0 ]; then
      drow "$cfg" "" "" ""
      echo "$run_id,$git_rev,durable,$cfg,,,$steps,,${loads[$k]}" >> "$csv"
      failed=1
      continue
    fi
    drow "$cfg" "$secs" "$sps steps/s" "$(ratio "$sps" "$base")"
    # samples_per_s: steps/s x V x batch_per_vw of examples/fashion_mnist_mlp.flags (8 x 32)
    echo "$run_id,$git_rev,durable,$cfg,$(awk -v s="$sps" 'BEGIN { printf "%.1f", s * 256 }'),$(ratio "$sps" "$base"),$steps,$secs,${loads[$k]}" >> "$csv"
  done
  echo "$res" | grep -E 'kind=(memory|snapshot)' | awk '
    /kind=memory/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); m[kv[1]] = kv[2] }
      printf "this host: memcpy into fresh pages %.3f GB/s, into warm pages %.2f GB/s (%.0f MB): every recovery\n",
        m["fresh_gbps"], m["warm_gbps"], m["bytes"] / 1e6
      print "lands its bytes on fresh pages of a new process, so that first figure bounds it." }
    /kind=snapshot/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); m[kv[1]] = kv[2] }
      printf "ShardState::Snapshot of the 100 M shard (copies the momentum slot, on the event loop): %.1f ms\n", m["ms"] }'
  echo "checkpoints written per run (shard log, 'is durable'), K = 1 10 100: ${written[1]}/ ${written[10]}/ ${written[100]}"
  echo "mlp: $steps steps, examples/fashion_mnist_mlp.flags with --test_limit=-1; a checkpoint = 101,770 values +"
  echo "momentum = 814 KB, written by the shard's writer thread (at most one waiting). seconds = train_seconds of the"
  echo "median run. csv: byte rows put seconds, the ratio vs raw and 3 (rounds) as steps; mlp rows steps/s x 256 as"
  echo "samples/s."
  if [ "${#shas[@]}" = 1 ]; then
    echo "digest check: every mlp run ended on the same params_sha256"
  elif [ "${#shas[@]}" -gt 1 ]; then
    echo "bench.sh: durable: the mlp runs ended on different params_sha256: checkpointing changed the bits" >&2
    echo "digest check: MISMATCH (${!shas[*]})"
    failed=1
  fi
  local warm
  warm=$(echo "$res" | grep 'kind=recover cache=warm' || true)
  awk -v rs="$(field restore_gbps "$warm")" -v rd="$(field read_gbps "$warm")" -v raw="$(field raw_gbps "$warm")" \
      -v k1="$(ratio "$(median_run 1 | cut -d' ' -f1)" "$base")" \
      -v k10="$(ratio "$(median_run 10 | cut -d' ' -f1)" "$base")" \
      -v k100="$(ratio "$(median_run 100 | cut -d' ' -f1)" "$base")" '
    function verdict(name, x, goal) {
      if (x == "" || x == "-") printf "  %-40s not measured\n", name
      else printf "  %-40s %5.2fx: %s\n", name, x, (x >= goal ? "met" : "not met")
    }
    BEGIN {
      print "goals: recovery close to RocksDB read speed (issue 4 measured 3.8 GB/s); checkpoints cost <= 5 % of steps/s"
      if (raw > 0 && rs > 0)
        printf "  recover (warm): %.3f GB/s read, %.3f GB/s with Restore, raw RocksDB %.3f GB/s here: %.2fx / %.2fx\n",
          rd, rs, raw, rd / raw, rs / raw
      else print "  recover: not measured"
      verdict("steps/s, checkpoint every 1 vs none", k1, 0.95)
      verdict("steps/s, checkpoint every 10 vs none", k10, 0.95)
      verdict("steps/s, checkpoint every 100 vs none", k100, 0.95)
    }'
}

# plot: build/bench/bench.png from the csv (skipped with a note when matplotlib is missing).
plot() {
  if /usr/bin/python3 -c 'import matplotlib' 2> /dev/null; then
    /usr/bin/python3 "$root/scripts/plot_bench.py" --csv "$csv" --out "$out/bench.png" ||
      echo "bench.sh: plotting failed (the tables and csv stand)" >&2
  else
    echo "bench.sh: python3-matplotlib is missing: no plot (scripts/setup.sh installs it)" >&2
  fi
}

for s in "${all_sections[@]}"; do
  [ -z "$only" ] || [ "$only" = "$s" ] || continue
  case "$s" in
    vw) section_vw ;;
    elastic) section_elastic ;;
    transfer) section_transfer ;;
    wire) section_wire ;;
    ps_share) section_ps_share ;;
    ddp) section_ddp ;;
    scaling) section_scaling ;;
    hetero) section_hetero ;;
    durable) section_durable ;;
  esac
done
echo "results appended to $csv"
plot
exit $failed
