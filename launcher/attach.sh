#!/usr/bin/env bash
# Attaches one worker to a running ElasticPS job, from any host that reaches the
# coordinator. The worker registers, gets the job spec (model, data location,
# thread count) from the coordinator and is given VWs at the next step boundary.
#
#   launcher/attach.sh --coordinator tcp://HOST:PORT --token-file FILE [--device cpu] [--threads N]
#                      [--compute-cpus CPUS] [--slowdown F] [--log FILE] [--report-file FILE]
#                      [--model-cache-dir DIR]
#                      [--register-timeout S] [--metrics] [--metrics-host HOST]
#                      [--secure-dir RUN_DIR | --curve-secret-key FILE --curve-server-key FILE]
#   launcher/attach.sh --scheduler tcp://HOST:PORT [--token-file POOL_TOKEN] [...]
#   launcher/attach.sh --shard ID --coordinator tcp://HOST:PORT --token-file FILE [--store DIR]
#                      [--checkpoint-every K] [--bind-host ADDR] [--log FILE] [--metrics]
#                      [--secure-dir RUN_DIR]
#
# --shard ID    attach a parameter shard instead of a worker (ID: an id the job has not used,
#               below 1024): a spare, to which the next step boundary moves part of the state
#               (docs/operations.md, "Adding and removing shards"). --store DIR keeps its state
#               in RocksDB there, checkpointed every --checkpoint-every K steps (the job's
#               other shards' K); --bind-host ADDR: the address workers and the other shards
#               reach it at (default 127.0.0.1: this host only); --secure-dir RUN_DIR serves
#               with the job's server keys.
#
# --token-file  the job's token (local.sh writes it to RUN_DIR/token); with
#               --scheduler, the pool's token (optional).
# --scheduler   join the worker pool of an inter-job scheduler (pool_scheduler)
#               instead of one job: it names the job to train and moves the
#               worker between jobs (a graceful leave, then an attach).
# --device      cpu (default), or cuda:N in a build against a CUDA libtorch
#               (README, GPU workers); a build without CUDA refuses cuda at start.
#               A job takes one kind of device (cpu, or one GPU model) unless its
#               coordinator runs with --allow_mixed_devices.
# --threads N   cores the worker may use (default: the job's intra-op thread
#               count); fewer than the job's count is refused, more stay unused.
# --compute-cpus CPUS  the worker's compute thread(s) on CPUS (taskset -c syntax, e.g.
#               0 or 0-3), its other threads (ZeroMQ I/O, reduction, heartbeats) on
#               the rest of the CPUs it may use (timing only, never bits).
# --slowdown F  testing/demo aid standing in for slower hardware: the worker
#               idles (F - 1) x each VW's compute time (timing only, never bits).
# --log FILE    append the worker's log to FILE instead of the terminal.
# --report-file FILE  the worker writes its end-of-run report (JSON, docs/events.md) to FILE.
# --model-cache-dir DIR  the host's cache of model files by SHA-256 (worker --model_cache_dir;
#               default $TMPDIR/elasticps-model-cache-<uid>, 'none': no cache): a worker
#               attaching again, or a second one of the host, fetches no model byte.
# --model-cache-mb N  the cache's bound (worker --model_cache_mb, default 8192): past it the
#               files used least recently are removed.
# --register-timeout S  give up after S seconds (default 120) without an answer from the
#               coordinator (one that ended, a wrong address): the worker says so every
#               10 s meanwhile and then exits 3 (docs/operations.md lists the exit codes).
# --metrics     the worker serves Prometheus metrics at http://HOST:PORT/metrics on a free
#               port (--metrics_port=0) and reports that address when it registers: the
#               coordinator adds it to RUN_DIR/prometheus_targets.json while it lives.
# --metrics-host HOST  the address its metrics server binds (default 127.0.0.1; this host's
#               reachable address or 0.0.0.0 when Prometheus runs elsewhere); implies --metrics.
# --secure-dir RUN_DIR  join a job started with `local.sh --secure` (docs/security.md) from
#               a host that shares RUN_DIR: a fresh key pair RUN_DIR/keys/attach-HOST-N, its
#               public key enrolled in RUN_DIR/allowed_keys/ (remove it there to revoke it),
#               and the job's server key RUN_DIR/keys/server.pub.
# --curve-secret-key FILE  the worker's CURVE secret key (elasticps keygen; its .pub must be
#               among the job's allowed keys), with --curve-server-key FILE: the job's servers'
#               public key (with --scheduler: the scheduler's). A refused key: exit 4.
# Runs in the foreground: Ctrl-C or SIGTERM makes the worker leave the job
# gracefully and exit 0 (a second Ctrl-C kills it). EPS_BIN overrides the
# directory of the binaries (default build/bin).
set -euo pipefail

usage() { sed -n '2,58p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "attach.sh: $*" >&2; exit 2; }

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${EPS_BIN:-$here/build/bin}
coordinator="" scheduler="" token_file="" device=cpu threads=0 slowdown=1 log="" compute_cpus="" report_file="" model_cache_dir="" model_cache_mb=""
register_timeout=120 metrics=0 metrics_host="" secure_dir="" curve_secret_key="" curve_server_key=""
shard="" store="" checkpoint_every=0 bind_host=""
while [ $# -gt 0 ]; do
  case "$1" in
    --coordinator|--scheduler|--token-file|--device|--threads|--compute-cpus|--slowdown|--log|--report-file|--model-cache-dir|--model-cache-mb|--register-timeout|--metrics-host|--secure-dir|--curve-secret-key|--curve-server-key|--shard|--store|--checkpoint-every|--bind-host)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"
      case "$1" in
        --coordinator) coordinator=$2 ;;
        --scheduler) scheduler=$2 ;;
        --token-file) token_file=$2 ;;
        --device) device=$2 ;;
        --threads) threads=$2 ;;
        --compute-cpus) compute_cpus=$2 ;;
        --slowdown) slowdown=$2 ;;
        --log) log=$2 ;;
        --report-file) report_file=$2 ;;
        --model-cache-dir) model_cache_dir=$2 ;;
        --model-cache-mb) model_cache_mb=$2 ;;
        --register-timeout) register_timeout=$2 ;;
        --metrics-host) metrics=1; metrics_host=$2 ;;
        --secure-dir) secure_dir=$2 ;;
        --curve-secret-key) curve_secret_key=$2 ;;
        --curve-server-key) curve_server_key=$2 ;;
        --shard) shard=$2 ;;
        --store) store=$2 ;;
        --checkpoint-every) checkpoint_every=$2 ;;
        --bind-host) bind_host=$2 ;;
      esac
      shift 2 ;;
    --metrics) metrics=1; shift ;;
    -h|--help) usage ;;
    *) echo "attach.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$shard" ]; then
  [[ "$shard" =~ ^[0-9]+$ ]] && [ "$shard" -lt 1024 ] || die "--shard must be a shard id below 1024"
  [ -z "$scheduler" ] || die "a shard attaches to one job's --coordinator, not to a --scheduler"
  [[ "$checkpoint_every" =~ ^[0-9]+$ ]] || die "--checkpoint-every must be a number of steps >= 0"
  [ "$checkpoint_every" = 0 ] || [ -n "$store" ] || die "--checkpoint-every needs --store"
  [[ "$bind_host" =~ ^[A-Za-z0-9.:_-]*$ ]] || die "--bind-host must be an address or an interface name"
elif [ -n "$bind_host" ]; then
  die "--bind-host is for a shard (--shard ID): a worker binds nothing"
fi
if [ -n "$scheduler" ]; then
  [ -z "$coordinator" ] || die "give --coordinator (one job) or --scheduler (a pool), not both"
  [[ "$scheduler" =~ ^[a-z]+:// ]] || die "--scheduler '$scheduler' is not an endpoint like tcp://HOST:PORT"
  target=(--scheduler="$scheduler" --pool_token_file="$token_file")
else
  [ -n "$coordinator" ] || { echo "attach.sh: --coordinator (or --scheduler) is required" >&2; usage; }
  [ -n "$token_file" ] || { echo "attach.sh: --token-file is required" >&2; usage; }
  [[ "$coordinator" =~ ^[a-z]+:// ]] || die "--coordinator '$coordinator' is not an endpoint like tcp://HOST:PORT"
  target=(--coordinator="$coordinator" --token_file="$token_file")
fi
if [ -n "$token_file" ]; then
  [ -f "$token_file" ] && [ -r "$token_file" ] || die "cannot read the token file '$token_file'"
  [ -s "$token_file" ] || die "the token file '$token_file' is empty"
fi
[[ "$device" =~ ^(cpu|cuda(:[0-9]+)?)$ ]] || die "--device '$device' is not cpu or cuda:N"
[[ "$threads" =~ ^[0-9]+$ ]] || die "--threads must be a non-negative integer (0: the job's count)"
[[ "$slowdown" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--slowdown must be a number >= 1"
[[ "$compute_cpus" =~ ^[0-9,-]*$ ]] || die "--compute-cpus must be a CPU list like 0 or 0-3"
[[ "$register_timeout" =~ ^[1-9][0-9]*$ ]] || die "--register-timeout must be a whole number of seconds >= 1"
compute=()
[ -z "$compute_cpus" ] || compute=(--compute_cpus="$compute_cpus")
report=()
[ -z "$report_file" ] || report=(--report_file="$report_file")
cache=()
[ -z "$model_cache_dir" ] || cache=(--model_cache_dir="$model_cache_dir")
[[ "$model_cache_mb" =~ ^[0-9]*$ ]] || die "--model-cache-mb must be a whole number of MiB"
[ -z "$model_cache_mb" ] || cache+=(--model_cache_mb="$model_cache_mb")
[[ "$metrics_host" =~ ^[A-Za-z0-9.:_-]*$ ]] || die "--metrics-host must be a host name or address"
metrics_flags=()
if [ $metrics = 1 ]; then
  metrics_flags=(--metrics_port=0)
  [ -z "$metrics_host" ] || metrics_flags+=(--metrics_host="$metrics_host")
fi
[ -x "$bin/worker" ] || die "$bin/worker is missing: run scripts/setup.sh"
curve=()
if [ -n "$shard" ] && [ -n "$secure_dir" ]; then  # a server of the job: the job's server keys
  [ -s "$secure_dir/keys/server.key" ] && [ -d "$secure_dir/allowed_keys" ] ||
    die "'$secure_dir' is not the run dir of a job started with local.sh --secure"
  curve=(--curve_secret_key="$secure_dir/keys/server.key" --allowed_keys="$secure_dir/allowed_keys")
  secure_dir=""
fi
if [ -n "$secure_dir" ]; then
  [ -z "$curve_secret_key$curve_server_key" ] || die "give --secure-dir or --curve-secret-key/--curve-server-key, not both"
  [ -s "$secure_dir/keys/server.pub" ] && [ -d "$secure_dir/allowed_keys" ] ||
    die "'$secure_dir' is not the run dir of a job started with local.sh --secure"
  name=attach-$(hostname -s)-$$
  "$bin/elasticps" keygen --out "$secure_dir/keys" --name "$name" > /dev/null || die "keygen failed"
  cp "$secure_dir/keys/$name.pub" "$secure_dir/allowed_keys/$name.pub"
  curve_secret_key=$secure_dir/keys/$name.key curve_server_key=$secure_dir/keys/server.pub
fi
if [ -n "$curve_secret_key$curve_server_key" ]; then
  [ -n "$curve_secret_key" ] && [ -n "$curve_server_key" ] || die "--curve-secret-key and --curve-server-key go together"
  [ -r "$curve_secret_key" ] || die "cannot read the secret key '$curve_secret_key'"
  [ -r "$curve_server_key" ] || die "cannot read the server key '$curve_server_key'"
  curve=(--curve_secret_key="$curve_secret_key")
  if [ -n "$scheduler" ]; then curve+=(--pool_curve_server_key="$curve_server_key"); else curve+=(--curve_server_key="$curve_server_key"); fi
fi
if [ -n "$log" ]; then
  { : >> "$log"; } 2>/dev/null || die "cannot write the log file '$log'"
  exec >> "$log" 2>&1
fi

if [ -n "$shard" ]; then
  shard_flags=()
  [ -z "$store" ] || shard_flags=(--store="$store" --checkpoint_every="$checkpoint_every")
  [ -z "$bind_host" ] || shard_flags+=(--bind="tcp://$bind_host:0")
  # exec, as for a worker: signals reach the shard, and its exit code is this script's.
  exec "$bin/shard" "${target[@]}" --shard_id="$shard" "${shard_flags[@]}" "${metrics_flags[@]}" "${curve[@]}"
fi

# Other libtorch processes may share this host: no OpenMP spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# exec: the worker gets this process id, so Ctrl-C and SIGTERM reach it directly, and
# this script ends when the worker does, with its exit code.
exec "$bin/worker" "${target[@]}" --device="$device" --threads="$threads" --slowdown="$slowdown" \
  --register_timeout_s="$register_timeout" "${compute[@]}" "${report[@]}" "${cache[@]}" "${metrics_flags[@]}" "${curve[@]}"
