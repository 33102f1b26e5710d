#!/usr/bin/env bash
# Starts a whole ElasticPS job on this host: the coordinator, S shards and W
# workers, on free loopback ports.
#
#   launcher/local.sh --job FILE --servers S --workers W --run-dir DIR [--slowdowns F0,F1,...]
#                     [--devices D | D0,D1,...] [--checkpoint-every K] [--shard-threads N] [--supervise]
#                     [--worker-cpus C0:C1:...] [--server-cpus CPUS] [--compute-cpus C0:C1:...]
#                     [--metrics] [--metrics-host HOST] [--secure] [-- extra coordinator flags]
#   launcher/local.sh --resume --run-dir DIR
#
# --checkpoint-every K  each shard keeps its state in RocksDB under DIR/store/shard<N>
#                       and writes a checkpoint every K steps.
# --shard-threads N     each shard cuts its optimizer over N threads (shard --threads; default 1):
#                       the cores a shard may use. Timing only, never bits.
# --supervise           restart a shard that dies abnormally, with backoff (0.2 s doubling
#                       to 5 s), on the same endpoint, as a process manager would; with
#                       --checkpoint-every it restores its newest checkpoint and the job
#                       rolls back to the newest step every shard holds, then replays.
#                       The coordinator is supervised too: restarted on its store
#                       (DIR/store/coordinator) it binds its former endpoint and resumes.
#                       Only deaths by a signal (a crash, SIGKILL) are restarted.
# --resume              continue a stopped job from its stores, with the arguments it
#                       was started with (DIR/launch.args); a fresh start wipes DIR/store.
# --workers 0           start no worker: the job waits for workers to attach (attach.sh),
#                       e.g. from an inter-job scheduler's pool (pool_scheduler).
# --metrics     every process (coordinator, shards, workers) serves Prometheus metrics at
#               http://HOST:PORT/metrics (--metrics_port=0: a free port each); the coordinator
#               keeps DIR/prometheus_targets.json, a file_sd list of every live process's
#               address (docs/operations.md, Prometheus and Grafana).
# --metrics-host HOST  the address the metrics servers bind (default 127.0.0.1; 0.0.0.0 for
#               a Prometheus on another host); implies --metrics.
# --secure      encrypt and authenticate every connection with ZeroMQ CURVE (docs/security.md):
#               DIR/keys/ gets a key pair per client (workerN, status) and one for the
#               job's servers (server: the coordinator and the shards), DIR/allowed_keys/
#               the clients' public keys; removing a .pub there revokes that key. The
#               secret keys (mode 0600) are the job's secret; `elasticps status --run-dir
#               DIR` and `attach.sh --secure-dir DIR` use them.
# --no-limits   the servers' sockets unbounded (--socket_hwm=0, the shards' --max_message_mb=0),
#               as before the limits (docs/security.md); for benchmarks of their cost.
# --slowdowns gives worker i the testing aid --slowdown=Fi (a stand-in for slower
# hardware: timing only, never bits).
# --devices     worker i computes on Di (cpu or cuda:N; default cpu); one value
#               serves every worker, and several workers may share one GPU.
#               cuda needs a build against a CUDA libtorch (README, GPU workers).
# --worker-cpus pins worker i to the CPUs Ci (taskset -c syntax, e.g. 0 or 2-3; workers
#               separated by ':'), --server-cpus the coordinator and the shards: one core
#               per worker on a shared host, as a benchmark of speeds needs (timing only).
# --compute-cpus gives worker i --compute_cpus=Ci: its compute thread on the CPUs Ci, its
#               other threads (ZeroMQ I/O, reduction, heartbeats) on the rest of the CPUs it
#               may use; the shards and the coordinator follow the threads that wake them.
#               Worth it on hosts whose scheduler queues woken threads on the waker's core
#               (VMs without cache topology): timing only, never bits.
# Logs go to DIR/logs/<process>.log, each worker's report (docs/events.md) to
# DIR/logs/worker<i>.json, pid files to DIR/pids/, the coordinator's address to
# DIR/coordinator.addr, the job's token to DIR/token (mode 0600), the
# coordinator's events to DIR/events.jsonl (docs/events.md; a resumed or
# restarted job appends to it) and the result to DIR/result.json, the model to
# DIR/model.safetensors, DIR/model.pt (torch.load) and, for a TorchScript model,
# DIR/model.script.pt (torch.jit.load; docs/models.md). Ctrl-C (or
# SIGTERM) stops every process. Exits 0 only if the job succeeded, 2 if the job is
# invalid (the coordinator refused its flags, files or model).
set -euo pipefail

usage() { sed -n '2,61p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${EPS_BIN:-$here/build/bin}
job="" servers=1 workers=1 run_dir="" slowdowns="" devices="" checkpoint_every=0 shard_threads=1 supervise=0 resume=0 extra=()
worker_cpus="" server_cpus="" compute_cpus="" metrics=0 metrics_host="" secure=0
coordinator_limits=() shard_limits=()
while [ $# -gt 0 ]; do
  case "$1" in
    --job) job=$2; shift 2 ;;
    --servers) servers=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --run-dir) run_dir=$2; shift 2 ;;
    --slowdowns) slowdowns=$2; shift 2 ;;
    --devices) devices=$2; shift 2 ;;
    --worker-cpus) worker_cpus=$2; shift 2 ;;
    --server-cpus) server_cpus=$2; shift 2 ;;
    --compute-cpus) compute_cpus=$2; shift 2 ;;
    --checkpoint-every) checkpoint_every=$2; shift 2 ;;
    --shard-threads) shard_threads=$2; shift 2 ;;
    --supervise) supervise=1; shift ;;
    --metrics) metrics=1; shift ;;
    --metrics-host) metrics=1; metrics_host=$2; shift 2 ;;
    --secure) secure=1; shift ;;
    --no-limits) coordinator_limits=(--socket_hwm=0); shard_limits=(--socket_hwm=0 --max_message_mb=0); shift ;;
    --resume) resume=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "local.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ $resume = 1 ]; then
  [ -n "$run_dir" ] && [ -s "$run_dir/launch.args" ] ||
    { echo "local.sh: --resume needs the --run-dir of a job started by local.sh" >&2; exit 2; }
  mapfile -d '' -t saved < "$run_dir/launch.args"
  exec "$0" "${saved[@]}" --resumed-run
fi
resumed=0
n_extra=${#extra[@]}
if [ "$n_extra" -gt 0 ] && [ "${extra[$((n_extra - 1))]}" = "--resumed-run" ]; then
  unset "extra[$((n_extra - 1))]"
  resumed=1
fi
[ -n "$job" ] && [ -n "$run_dir" ] || { echo "local.sh: --job and --run-dir are required" >&2; usage; }
[ -f "$job" ] || { echo "local.sh: job file '$job' not found" >&2; exit 2; }
[[ "$servers" =~ ^[1-9][0-9]*$ ]] || { echo "local.sh: --servers must be a positive integer" >&2; exit 2; }
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "local.sh: --workers must be a number (0: workers attach later)" >&2; exit 2; }
[[ "$checkpoint_every" =~ ^[0-9]+$ ]] || { echo "local.sh: --checkpoint-every must be a number of steps" >&2; exit 2; }
[[ "$shard_threads" =~ ^[1-9][0-9]*$ ]] || { echo "local.sh: --shard-threads must be a number of threads >= 1" >&2; exit 2; }
[[ "$worker_cpus" =~ ^[0-9,:-]*$ ]] || { echo "local.sh: --worker-cpus: CPU lists separated by ':'" >&2; exit 2; }
[[ "$server_cpus" =~ ^[0-9,-]*$ ]] || { echo "local.sh: --server-cpus: a CPU list (e.g. 1 or 2-3)" >&2; exit 2; }
[[ "$compute_cpus" =~ ^[0-9,:-]*$ ]] || { echo "local.sh: --compute-cpus: CPU lists separated by ':'" >&2; exit 2; }
[[ "$metrics_host" =~ ^[A-Za-z0-9.:_-]*$ ]] || { echo "local.sh: --metrics-host: a host name or address" >&2; exit 2; }
# The metrics flags every process gets: a free port each, on the metrics host.
metrics_flags=()
if [ $metrics = 1 ]; then
  metrics_flags=(--metrics_port=0)
  [ -z "$metrics_host" ] || metrics_flags+=(--metrics_host="$metrics_host")
fi
# pinned CPUS: the taskset prefix that runs a command on CPUS (nothing for none).
pinned() { [ -z "$1" ] || printf '%s\0' taskset -c "$1"; }
mapfile -d '' -t server_pin < <(pinned "$server_cpus")
IFS=: read -r -a worker_cpu_list <<< "$worker_cpus"
IFS=: read -r -a compute_cpu_list <<< "$compute_cpus"
IFS=, read -r -a device_list <<< "$devices"
for d in "${device_list[@]}"; do
  [[ "$d" =~ ^(cpu|cuda(:[0-9]+)?)$ ]] || { echo "local.sh: --devices: '$d' is not cpu or cuda:N" >&2; exit 2; }
done
if [ ${#device_list[@]} -gt 1 ] && [ ${#device_list[@]} -ne "$workers" ]; then
  echo "local.sh: --devices names ${#device_list[@]} devices for $workers workers (give one, or one per worker)" >&2
  exit 2
fi
for b in coordinator shard worker $([ $secure = 0 ] || echo elasticps); do
  [ -x "$bin/$b" ] || { echo "local.sh: $bin/$b is missing: run scripts/setup.sh" >&2; exit 2; }
done

# A device this build cannot compute on fails here, not as a job waiting for workers that died.
for d in $(printf '%s\n' "${device_list[@]}" | sort -u); do
  [ "$d" = cpu ] && continue
  "$bin/worker" --device="$d" --print_device_kind > /dev/null 2> "${TMPDIR:-/tmp}/eps-device-check.$$" || {
    echo "local.sh: --devices: $(grep -o 'device .*' "${TMPDIR:-/tmp}/eps-device-check.$$" | head -n 1)" >&2
    rm -f "${TMPDIR:-/tmp}/eps-device-check.$$"
    exit 2
  }
  rm -f "${TMPDIR:-/tmp}/eps-device-check.$$"
done
mkdir -p "$run_dir/logs" "$run_dir/pids"
run_dir=$(cd "$run_dir" && pwd)
job=$(cd "$(dirname "$job")" && pwd)/$(basename "$job")
if [ $resumed = 0 ]; then
  rm -rf "$run_dir/store" "$run_dir/events.jsonl"  # a fresh job
  launch=(--job "$job" --servers "$servers" --workers "$workers" --run-dir "$run_dir" --slowdowns "$slowdowns"
          --devices "$devices" --checkpoint-every "$checkpoint_every" --shard-threads "$shard_threads" --worker-cpus "$worker_cpus"
          --server-cpus "$server_cpus" --compute-cpus "$compute_cpus")
  [ $supervise = 1 ] && launch+=(--supervise)
  [ $metrics = 1 ] && launch+=(--metrics)
  [ -n "$metrics_host" ] && launch+=(--metrics-host "$metrics_host")
  [ $secure = 1 ] && launch+=(--secure)
  printf '%s\0' "${launch[@]}" -- "${extra[@]}" > "$run_dir/launch.args"
else
  echo "resuming the job in $run_dir from its stores"
fi
rm -f "$run_dir"/*.addr "$run_dir/result.json" "$run_dir"/pids/*.pid "$run_dir"/logs/worker*.json "$run_dir/.stopping"
if [ ! -s "$run_dir/token" ]; then
  (umask 077; od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > "$run_dir/token")
fi
chmod 600 "$run_dir/token"

# --secure: a key pair per process that is missing one (a resumed job keeps its keys).
server_curve=()
worker_curve() { :; }  # worker_curve W: worker W's CURVE flags, NUL-separated (none without --secure)
if [ $secure = 1 ]; then
  mkdir -p "$run_dir/keys" "$run_dir/allowed_keys"
  chmod 700 "$run_dir/keys"
  keygen() {  # keygen NAME [allowed]: DIR/keys/NAME.{key,pub}; with allowed, its .pub in allowed_keys/
    [ -s "$run_dir/keys/$1.key" ] || "$bin/elasticps" keygen --out "$run_dir/keys" --name "$1" > /dev/null
    [ -z "${2:-}" ] || cp "$run_dir/keys/$1.pub" "$run_dir/allowed_keys/$1.pub"
  }
  keygen server
  keygen status allowed
  for ((w = 0; w < workers; w++)); do keygen "worker$w" allowed; done
  server_curve=(--curve_secret_key="$run_dir/keys/server.key" --allowed_keys="$run_dir/allowed_keys")
  worker_curve() { printf '%s\0' --curve_secret_key="$run_dir/keys/worker$1.key" --curve_server_key="$run_dir/keys/server.pub"; }
fi

# Several libtorch processes share this host: no OpenMP spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

pids=()
cleanup() {
  trap - EXIT INT TERM
  touch "$run_dir/.stopping"  # supervisors restart nothing from now on
  for f in "$run_dir"/pids/*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Bounded wait for a graceful exit, then force.
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo "local.sh: interrupted, stopping the job" >&2; exit 130' INT TERM

start() {  # start NAME CMD...: runs in the background, logs and records the pid
  local name=$1; shift
  "$@" > "$run_dir/logs/$name.log" 2>&1 &
  pids+=($!)
  echo $! > "$run_dir/pids/$name.pid"
}

# supervise NAME CMD...: runs CMD, restarting it with backoff while it dies by a signal;
# restarts bind the endpoint the first run got, so peers reconnect by themselves.
supervise() {
  local name=$1; shift
  local backoff=0.2 rc child
  trap 'kill -TERM $child 2>/dev/null; exit 0' TERM
  while true; do
    local bind=()
    [ -s "$run_dir/$name.addr" ] && bind=(--bind="$(cat "$run_dir/$name.addr")")
    "$@" "${bind[@]}" >> "$run_dir/logs/$name.log" 2>&1 &
    child=$!
    echo $child > "$run_dir/pids/$name.pid"
    rc=0; wait $child || rc=$?
    # Only a death by a signal is a crash; an exit status is the process's own verdict.
    { [ $rc -lt 128 ] || [ -f "$run_dir/.stopping" ]; } && return $rc
    echo "local.sh: $name exited with status $rc; restarting it in ${backoff}s" | tee -a "$run_dir/logs/$name.log" >&2
    sleep "$backoff"
    backoff=$(awk -v b="$backoff" 'BEGIN { b *= 2; print (b > 5 ? 5 : b) }')
  done
}

coordinator=("${server_pin[@]}" "$bin/coordinator" --flagfile="$job" --shards="$servers" --workers="$((workers > 0 ? workers : 1))" --run_dir="$run_dir"
  --addr_file="$run_dir/coordinator.addr" --token_file="$run_dir/token" --store="$run_dir/store/coordinator"
  "${server_curve[@]}" "${metrics_flags[@]}" "${coordinator_limits[@]}" "${extra[@]}")
if [ $supervise = 1 ]; then
  supervise coordinator "${coordinator[@]}" &
  pids+=($!)
else
  start coordinator "${coordinator[@]}"
fi
coord_pid=${pids[0]}

# Wait (bounded) for the coordinator to serve, or to fail on a bad job.
for _ in $(seq 300); do
  [ -s "$run_dir/coordinator.addr" ] && break
  kill -0 "$coord_pid" 2>/dev/null || break
  sleep 0.05
done
if [ ! -s "$run_dir/coordinator.addr" ]; then
  echo "local.sh: the coordinator did not start:" >&2
  tail -n 20 "$run_dir/logs/coordinator.log" >&2
  # Its exit code 2 (a bad job: flag, file, model) is ours too.
  rc=0
  kill -0 "$coord_pid" 2>/dev/null || wait "$coord_pid" || rc=$?
  [ "$rc" = 2 ] && exit 2
  exit 1
fi
addr=$(cat "$run_dir/coordinator.addr")
echo "coordinator at $addr, run dir $run_dir"
[ $metrics = 0 ] || echo "prometheus targets (file_sd) in $run_dir/prometheus_targets.json"

for ((s = 0; s < servers; s++)); do
  shard=("${server_pin[@]}" "$bin/shard" --coordinator="$addr" --shard_id=$s --token_file="$run_dir/token" --addr_file="$run_dir/shard$s.addr"
    --report_file="$run_dir/logs/shard$s.json" "${server_curve[@]}" "${metrics_flags[@]}" "${shard_limits[@]}" --threads="$shard_threads")
  if [ "$checkpoint_every" -gt 0 ]; then
    shard+=(--store="$run_dir/store/shard$s" --checkpoint_every="$checkpoint_every")
  else
    rm -rf "$run_dir/sparse/shard$s" && mkdir -p "$run_dir/sparse/shard$s"
    shard+=(--sparse_dir="$run_dir/sparse/shard$s")  # sparse tables' rows beyond --shard_memory_mb
  fi
  if [ $supervise = 1 ]; then
    supervise "shard$s" "${shard[@]}" &
    pids+=($!)
  else
    start "shard$s" "${shard[@]}"
  fi
done
IFS=, read -r -a slow <<< "$slowdowns"
worker_pids=()
for ((w = 0; w < workers; w++)); do
  device=cpu
  if [ ${#device_list[@]} -eq 1 ]; then device=${device_list[0]}; elif [ ${#device_list[@]} -gt 1 ]; then device=${device_list[$w]}; fi
  mapfile -d '' -t pin < <(pinned "${worker_cpu_list[$w]:-}")
  compute=()
  [ -n "${compute_cpu_list[$w]:-}" ] && compute=(--compute_cpus="${compute_cpu_list[$w]}")
  mapfile -d '' -t curve < <(worker_curve "$w")
  start "worker$w" "${pin[@]}" "$bin/worker" --coordinator="$addr" --token_file="$run_dir/token" \
    --slowdown="${slow[$w]:-1}" --device="$device" --report_file="$run_dir/logs/worker$w.json" "${compute[@]}" "${metrics_flags[@]}" \
    "${curve[@]}"
  worker_pids+=($!)
done

# Show the coordinator's progress lines while the job runs.
tail -n +1 -f "$run_dir/logs/coordinator.log" --pid="$coord_pid" 2>/dev/null | grep --line-buffered -E '^(step|eval|result)' &
tailer=$!
# Until the coordinator exits. If every worker this started fails before any worker of the job
# was ready (a crash in its start-up checks, a refusal), the job could only wait for workers
# that may never attach: it ends with their reasons instead. (Once workers were ready, losing
# them all is an elastic job's pause: attached workers finish it.)
running=("${worker_pids[@]}") failed_workers=()
while [ ${#running[@]} -gt 0 ] && kill -0 "$coord_pid" 2>/dev/null; do
  still=()
  for pid in "${running[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then still+=("$pid"); continue; fi
    status=0
    wait "$pid" || status=$?
    [ $status -ne 0 ] && failed_workers+=("pid $pid: exit $status")
  done
  running=("${still[@]}")
  if [ ${#failed_workers[@]} -eq ${#worker_pids[@]} ] &&
     ! grep -q '"event":"worker_ready"' "$run_dir/events.jsonl" 2>/dev/null; then
    echo "local.sh: every worker failed before the job started (${failed_workers[*]}):" >&2
    grep -hE '^[EF][0-9]{4}|^terminate called|^  what\(\)' "$run_dir"/logs/worker*.log | tail -n 6 | cut -c1-400 >&2 || true
    exit 1
  fi
  sleep 0.2  # process supervision, bounded by the coordinator's life
done
rc=0
wait "$coord_pid" || rc=$?
wait "$tailer" 2>/dev/null || true
if [ $rc -ne 0 ]; then
  echo "local.sh: the job failed (coordinator exit $rc):" >&2
  grep -hE '^[EF][0-9]{4}' "$run_dir"/logs/*.log | tail -n 10 >&2 || true
  exit 1
fi
[ -s "$run_dir/result.json" ] || { echo "local.sh: no result.json" >&2; exit 1; }
# The exports Python loads (docs/models.md), from the model.safetensors the coordinator wrote.
if [ -x "$bin/export_model" ] && [ -s "$run_dir/model.safetensors" ]; then
  "$bin/export_model" --safetensors="$run_dir/model.safetensors" --stores="$run_dir/store" \
    --pt_out="$run_dir/model.pt" --script_out="$run_dir/model.script.pt" > "$run_dir/logs/export.log" 2>&1 ||
    { echo "local.sh: export_model failed:" >&2; tail -n 5 "$run_dir/logs/export.log" >&2; exit 1; }
fi
exit 0
