#!/usr/bin/env bash
# Starts an ElasticPS job over ssh on the hosts of a host file: the coordinator, the shards and
# the workers, each by its own ssh session, and collects what they write into the run dir.
#
#   launcher/ssh.sh --hostfile FILE --job FILE --run-dir DIR [--remote-root DIR]
#                   [--remote-run-dir DIR] [--ssh-config FILE] [-- extra coordinator flags]
#
# --hostfile FILE  one host a line: `HOST ROLE...`, ROLE among coordinator, shard[:N] and
#               worker[:N] (N processes, default 1); `#` starts a comment. One coordinator.
#               HOST is the ssh destination ([user@]address); the coordinator and the shards
#               bind that address (a name is resolved here), so it must be one the other
#               hosts reach. Shards and workers are numbered in the file's order.
#                   10.77.0.2 coordinator shard:1
#                   10.77.0.3 shard
#                   10.77.0.4 worker:2
# --job FILE    a gflags flag file of coordinator flags (examples/*.flags); it is copied to the
#               coordinator's host. The job's data must be at its --data_dir on every worker host.
# --run-dir DIR where everything ends up: the token (made here, mode 0600), logs/<process>.log,
#               logs/worker<i>.json, events.jsonl, metrics.csv, result.json, model.safetensors;
#               pids/<process>.pid ("HOST PID" of the remote process), ssh/ (the sessions' output).
# --remote-run-dir DIR  where the processes write on their hosts (default: the run dir's path).
#               A host that sees this very run dir (a shared file system, found out by a probe
#               file) writes into it directly; from the others the files are copied back over
#               ssh (tar) when the job ends, the stores (DIR/store) excepted.
# --remote-root DIR  the repository on the remote hosts: binaries in DIR/build/bin (default:
#               the binaries' path here, EPS_BIN or build/bin, on every host).
# --ssh-config FILE  passed to ssh as -F FILE (port, user, identity, known hosts). ssh runs with
#               BatchMode=yes: no password prompt, a host without a key login fails at once.
# Flags after `--` go to the coordinator and override the job file (e.g. -- --steps=50).
# Ctrl-C or SIGTERM stops every process it started (SIGTERM over ssh, SIGKILL after 5 s), then
# collects the files. Exits 0 only if the job succeeded and result.json came back; 2 for bad
# arguments or a host that cannot run the processes (ssh refused, binaries missing).
set -euo pipefail

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "ssh.sh: $*" >&2; exit 2; }

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${EPS_BIN:-$here/build/bin}
hostfile="" job="" run_dir="" remote_root="" remote_run_dir="" ssh_config="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile|--job|--run-dir|--remote-root|--remote-run-dir|--ssh-config)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"
      case "$1" in
        --hostfile) hostfile=$2 ;;
        --job) job=$2 ;;
        --run-dir) run_dir=$2 ;;
        --remote-root) remote_root=$2 ;;
        --remote-run-dir) remote_run_dir=$2 ;;
        --ssh-config) ssh_config=$2 ;;
      esac
      shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "ssh.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$hostfile" ] && [ -n "$job" ] && [ -n "$run_dir" ] || { echo "ssh.sh: --hostfile, --job and --run-dir are required" >&2; usage; }
[ -f "$hostfile" ] || die "host file '$hostfile' not found"
[ -f "$job" ] || die "job file '$job' not found"
[ -z "$ssh_config" ] || [ -f "$ssh_config" ] || die "ssh config '$ssh_config' not found"
rbin=$bin
[ -z "$remote_root" ] || rbin=$remote_root/build/bin
mkdir -p "$run_dir/logs" "$run_dir/pids" "$run_dir/ssh"
run_dir=$(cd "$run_dir" && pwd)
rdir=${remote_run_dir:-$run_dir}
case "$rbin$rdir" in *"'"*) die "remote paths may not hold a single quote" ;; esac
[[ "$rdir" = /* ]] && [[ "$rbin" = /* ]] || die "--remote-run-dir and --remote-root must be absolute paths"

# The host file: one coordinator, shards and workers in the file's order.
coordinator="" shard_hosts=() worker_hosts=() hosts=()
while read -r host roles || [ -n "$host" ]; do
  host=${host%%#*}
  [ -n "$host" ] || continue
  roles=${roles%%#*}
  [ -n "$roles" ] || die "$hostfile: host '$host' has no role"
  [[ "$host" =~ ^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+$ ]] || die "$hostfile: '$host' is not [user@]host"
  hosts+=("$host")
  for role in $roles; do
    n=1
    [[ "$role" == *:* ]] && n=${role#*:}
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "$hostfile: '$role': the count must be a positive integer"
    case "${role%%:*}" in
      coordinator) [ -z "$coordinator" ] || die "$hostfile: more than one coordinator"
                   [ "$n" = 1 ] || die "$hostfile: one coordinator"
                   coordinator=$host ;;
      shard) for ((k = 0; k < n; k++)); do shard_hosts+=("$host"); done ;;
      worker) for ((k = 0; k < n; k++)); do worker_hosts+=("$host"); done ;;
      *) die "$hostfile: unknown role '$role' (coordinator, shard[:N], worker[:N])" ;;
    esac
  done
done < "$hostfile"
[ -n "$coordinator" ] || die "$hostfile: no coordinator"
[ ${#shard_hosts[@]} -gt 0 ] || die "$hostfile: no shard"
mapfile -t hosts < <(printf '%s\n' "${hosts[@]}" | awk '!seen[$0]++')

ssh_cmd=(ssh -o BatchMode=yes -o ConnectTimeout=10)
[ -z "$ssh_config" ] || ssh_cmd+=(-F "$ssh_config")
# address HOST: the address HOST's processes bind (numeric, or HOST's name resolved here).
address() {
  local h=${1#*@} a
  if [[ "$h" =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then echo "$h"; return; fi
  a=$(getent ahostsv4 "$h" | awk '{ print $1; exit }')
  [ -n "$a" ] || die "cannot resolve '$h' to an address"
  echo "$a"
}
# q ARGS...: the arguments quoted for a POSIX shell.
q() { local a out=""; for a in "$@"; do out+=" '${a//\'/\'\\\'\'}'"; done; printf '%s' "$out"; }

# The token and a copy of the job; a probe file tells which hosts see this run dir.
if [ ! -s "$run_dir/token" ]; then
  (umask 077; od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > "$run_dir/token")
fi
chmod 600 "$run_dir/token"
cp "$job" "$run_dir/job.flags"
probe=$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')
echo "$probe" > "$run_dir/.probe"
rm -f "$run_dir/result.json" "$run_dir"/pids/*.pid "$run_dir"/ssh/* "$run_dir"/logs/worker*.json

declare -A shared=() probes=()
for h in "${hosts[@]}"; do
  "${ssh_cmd[@]}" -n "$h" "cat '$rdir/.probe' 2>/dev/null || echo none; for b in coordinator shard worker; do [ -x '$rbin'/\$b ] || echo \"missing '$rbin'/\$b\"; done" \
    > "$run_dir/ssh/probe.$h" 2>&1 &
  probes[$h]=$!
done
for h in "${hosts[@]}"; do
  wait "${probes[$h]}" || die "cannot run commands on '$h' over ssh: $(tail -n 3 "$run_dir/ssh/probe.$h")"
  out=$(cat "$run_dir/ssh/probe.$h")
  ! grep -q "^missing" <<< "$out" || die "on '$h': $(grep '^missing' <<< "$out" | head -n 1) (see --remote-root)"
  [ "$(head -n 1 <<< "$out")" != "$probe" ] || shared[$h]=1
done
for h in "${hosts[@]}"; do
  fresh=""
  [ "$h" = "$coordinator" ] && fresh="rm -rf '$rdir/store' '$rdir/events.jsonl' '$rdir/metrics.csv' '$rdir/result.json' '$rdir/model.safetensors';"
  if [ -n "${shared[$h]:-}" ]; then
    "${ssh_cmd[@]}" -n "$h" "$fresh rm -f '$rdir'/*.addr" || die "cannot prepare '$rdir' on '$h'"
  else
    tar -C "$run_dir" -cf - token job.flags |
      "${ssh_cmd[@]}" "$h" "mkdir -p '$rdir/logs' && $fresh rm -f '$rdir'/*.addr '$rdir'/logs/worker*.json && tar -C '$rdir' -xpf -" ||
      die "cannot copy the token and the job to '$h':'$rdir'"
  fi
done

names=() name_hosts=() ssh_pids=()
# remote NAME HOST ADDR_FILE CMD...: runs CMD on HOST in the background (its output in
# RDIR/logs/NAME.log there), through one ssh session whose exit status is the command's. The
# session prints the remote pid, then, when ADDR_FILE is given, the address the process wrote there.
remote() {
  local name=$1 host=$2 addr_file=$3; shift 3
  # (The command alone in the background: $! is its pid, not that of a subshell.)
  local script="mkdir -p '$rdir/logs' && cd '$rdir' || exit 1; export OMP_WAIT_POLICY=\${OMP_WAIT_POLICY:-passive};"
  script+=" $(q "$@") > '$rdir/logs/$name.log' 2>&1 < /dev/null & pid=\$!; echo \"pid \$pid\";"
  if [ -n "$addr_file" ]; then
    script+=" while [ ! -s '$addr_file' ] && kill -0 \$pid 2>/dev/null; do sleep 0.05; done;"
    script+=" [ -s '$addr_file' ] && echo \"addr \$(cat '$addr_file')\";"
  fi
  script+=" wait \$pid"
  "${ssh_cmd[@]}" -n "$host" "$script" > "$run_dir/ssh/$name.out" 2> "$run_dir/ssh/$name.err" &
  names+=("$name") name_hosts+=("$host") ssh_pids+=($!)
}
# remote_pid I: the remote pid of process I (empty until its session printed it); recorded in pids/.
remote_pid() {
  local p
  p=$(awk '$1 == "pid" { print $2; exit }' "$run_dir/ssh/${names[$1]}.out" 2>/dev/null)
  [ -z "$p" ] || echo "${name_hosts[$1]} $p" > "$run_dir/pids/${names[$1]}.pid"
  echo "$p"
}

stopped=0
# Stops every remote process still running: SIGTERM, SIGKILL after 5 s, one ssh per host at once.
stop_all() {
  [ $stopped = 0 ] || return 0
  stopped=1
  local i h p pids
  for _ in $(seq 50); do  # sessions just started print their pid soon
    local missing=0
    for i in "${!names[@]}"; do
      kill -0 "${ssh_pids[$i]}" 2>/dev/null && [ -z "$(remote_pid "$i")" ] && missing=1
    done
    [ $missing = 0 ] && break
    sleep 0.1
  done
  local killers=()
  for h in "${hosts[@]}"; do
    pids=""
    for i in "${!names[@]}"; do
      [ "${name_hosts[$i]}" = "$h" ] || continue
      p=$(remote_pid "$i")
      [ -z "$p" ] || pids+=" $p"
    done
    [ -n "$pids" ] || continue
    "${ssh_cmd[@]}" -n "$h" "kill -TERM$pids 2>/dev/null; for i in \$(seq 50); do a=0; for p in$pids; do kill -0 \$p 2>/dev/null && a=1; done; [ \$a = 1 ] || exit 0; sleep 0.1; done; kill -KILL$pids 2>/dev/null; true" \
      > "$run_dir/ssh/stop.$h" 2>&1 &
    killers+=($!)
  done
  for p in "${killers[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${ssh_pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
collected=0
# Copies the files of the hosts that do not share the run dir into it (the stores stay there).
collect() {
  [ $collected = 0 ] || return 0
  collected=1
  local h
  for h in "${hosts[@]}"; do
    [ -z "${shared[$h]:-}" ] || continue
    "${ssh_cmd[@]}" -n "$h" "cd '$rdir' && tar -cf - --exclude=./store --exclude=./token --exclude=./job.flags --exclude=./.probe ." |
      tar -C "$run_dir" -xf - || echo "ssh.sh: could not copy the files of '$h'" >&2
  done
}
cleanup() {
  trap - EXIT INT TERM
  stop_all
  collect
}
trap cleanup EXIT
trap 'echo "ssh.sh: interrupted, stopping the job" >&2; exit 130' INT TERM

remote coordinator "$coordinator" "$rdir/coordinator.addr" "$rbin/coordinator" --flagfile="$rdir/job.flags" \
  --shards="${#shard_hosts[@]}" --workers="$(( ${#worker_hosts[@]} > 0 ? ${#worker_hosts[@]} : 1 ))" \
  --run_dir="$rdir" --addr_file="$rdir/coordinator.addr" --token_file="$rdir/token" \
  --store="$rdir/store/coordinator" --bind="tcp://$(address "$coordinator"):0" "${extra[@]}"
coord_ssh=${ssh_pids[0]}
addr=""
for _ in $(seq 600); do
  addr=$(awk '$1 == "addr" { print $2; exit }' "$run_dir/ssh/coordinator.out")
  [ -n "$addr" ] && break
  kill -0 "$coord_ssh" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$addr" ]; then
  echo "ssh.sh: the coordinator did not start on $coordinator:" >&2
  cat "$run_dir/ssh/coordinator.err" >&2
  collect
  tail -n 20 "$run_dir/logs/coordinator.log" >&2 2>/dev/null || true
  exit 1
fi
echo "coordinator at $addr, run dir $run_dir"
for s in "${!shard_hosts[@]}"; do
  h=${shard_hosts[$s]}
  remote "shard$s" "$h" "" "$rbin/shard" --coordinator="$addr" --shard_id="$s" --token_file="$rdir/token" \
    --bind="tcp://$(address "$h"):0" --addr_file="$rdir/shard$s.addr"
done
for w in "${!worker_hosts[@]}"; do
  remote "worker$w" "${worker_hosts[$w]}" "" "$rbin/worker" --coordinator="$addr" --token_file="$rdir/token" \
    --report_file="$rdir/logs/worker$w.json"
done
for _ in $(seq 100); do  # pids/ names every remote process once its session told its pid
  missing=0
  for i in "${!names[@]}"; do [ -n "$(remote_pid "$i")" ] || missing=1; done
  [ $missing = 1 ] || break
  sleep 0.1
done
echo "${#shard_hosts[@]} shards, ${#worker_hosts[@]} workers started; watch it with: $bin/elasticps status --coordinator $addr --token-file $run_dir/token"

rc=0
wait "$coord_ssh" || rc=$?
if [ $rc = 255 ]; then  # the session broke (ssh's own status), not the coordinator: wait for it there
  p=$(remote_pid 0)
  [ -z "$p" ] || "${ssh_cmd[@]}" -n "$coordinator" "while kill -0 $p 2>/dev/null; do sleep 1; done" || true
fi
# The workers end by themselves once the coordinator said stop (and write their reports).
for i in "${!names[@]}"; do
  [[ "${names[$i]}" == worker* ]] || continue
  for _ in $(seq 150); do kill -0 "${ssh_pids[$i]}" 2>/dev/null || break; sleep 0.1; done
done
cleanup
if [ $rc -ne 0 ] && [ $rc -ne 255 ]; then
  echo "ssh.sh: the job failed (coordinator exit $rc):" >&2
  grep -hE '^[EF][0-9]{4}' "$run_dir"/logs/*.log 2>/dev/null | tail -n 10 >&2 || true
  exit 1
fi
[ -s "$run_dir/result.json" ] || { echo "ssh.sh: no result.json" >&2; exit 1; }
echo "result: $(cat "$run_dir/result.json")"
exit 0
