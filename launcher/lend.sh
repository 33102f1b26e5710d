#!/usr/bin/env bash
# Lends this node to an ElasticPS job while its own duty (serving) leaves it idle: a small agent
# that probes the node every few seconds (the operator's probe, or the load of an `elasticps
# serve` read from its /metrics), attaches a worker (launcher/attach.sh) once the node has been
# idle for N probes in a row, and makes the worker leave as soon as the probe says busy (M probes
# in a row, default 1: serving comes first).
#
#   launcher/lend.sh --coordinator tcp://HOST:PORT --token-file FILE
#                    (--probe CMD | --serve-metrics URL [--busy-in-flight N] [--busy-rate R]
#                    [--idle-rate R] [--rate-window S]) [--every S] [--idle-for N] [--busy-for M]
#                    [--probe-timeout S] [--leave-timeout S] [--worker-nice N] [--worker-idle] [--keep-warm]
#                    [--give-back-file F] [-- attach.sh flags]
#   launcher/lend.sh --scheduler tcp://HOST:PORT [--pool-token-file FILE] --probe CMD [...]
#
# --probe CMD        a bash command; exit 0: idle enough to lend, anything else (or no answer
#                    within --probe-timeout): busy. E.g. a load, queue or GPU-use threshold.
# --serve-metrics URL  instead of --probe: http://HOST:PORT/metrics of an `elasticps serve`
#                    (docs/serving.md). Busy: eps_serve_in_flight >= --busy-in-flight (default
#                    1), or more than --busy-rate predict requests/s (default 0: any) arrived
#                    over the last --rate-window seconds (default 1), or no answer. Idle: under
#                    the in-flight bound and at most --idle-rate requests/s (default 0, at most
#                    --busy-rate); in between, neither (the streaks restart). --every defaults
#                    to 0.2 here. Read by launcher/serve_probe.py (python3, standard library),
#                    which, while a worker is lent, waits on the server's wake-up (GET
#                    /v1/load) instead of sleeping: the node is given back when requests come
#                    (with --busy-for 1, the probe itself sends the worker its SIGTERM the
#                    moment the server answers busy: no hop through this script).
# --every S          seconds from a probe's start to the next's (default 5; fractions allowed).
# --idle-for N       idle probes in a row before a worker attaches (default 3): hysteresis.
# --busy-for M       busy probes in a row before the worker is asked to leave (default 1).
# --probe-timeout S  a probe running longer counts as busy (default 10).
# --leave-timeout S  a worker asked to leave (SIGTERM: it leaves at the next VW boundary) that
#                    has not exited after S seconds is killed (default 60); the job survives
#                    that too (the worker is declared dead and its step redone).
# --scheduler        lend the worker to an inter-job scheduler's pool instead of one job, with
#                    the pool's token (--pool-token-file).
# --worker-nice N    the worker runs at niceness N (default 0; 19: the server's threads preempt
#                    it at once when requests arrive on the same cores).
# --worker-idle      the worker runs in Linux's idle scheduling class (SCHED_IDLE, chrt --idle):
#                    it gets a core only when nothing else on it is runnable, below any
#                    niceness, so the server never waits for it between a request and the leave.
# --keep-warm        the worker is kept between lendings: busy sends it SIGUSR1 instead of
#                    SIGTERM (it leaves the job as then, and waits parked: no CPU, its memory
#                    kept), the next idle period SIGUSR2 (it joins again, its process, libraries
#                    and model cache warm). --leave-timeout does not apply to a parking worker.
# --give-back-file F  with --serve-metrics, the server's --give_back_file: while a worker is lent
#                    F holds "PID SIGNAL", and the server itself signals the worker when the
#                    first request arrives (no hop through the probe); whoever signals first
#                    (the server, the probe, this script) claims F by renaming it to F.taken,
#                    so the worker gets one signal. Only with the default bands (--busy-in-flight
#                    1, --busy-rate 0, --busy-for 1): any request gives the node back.
# -- FLAGS           passed to attach.sh for the worker: --device, --threads, --compute-cpus,
#                    --slowdown, --log, --report-file, --register-timeout, --metrics, ...
#
# A worker that exits on its own is noted, and re-attached only after the next idle period (N
# more idle probes): exit 1 (refused, a host backed off, a failure on this host) or 3 (no
# coordinator answered). Exit 0 means the job is over: the agent then exits 0 too. Exit 2 (bad
# flags) ends the agent with 2. Ctrl-C or SIGTERM stops the agent and makes its worker leave
# (exit 0). The worker runs in its own session, so a terminal's Ctrl-C reaches only the agent,
# which gives the worker one SIGTERM (the worker's second signal would kill it). Each decision
# is printed with the time. EPS_BIN overrides the directory of the binaries (build/bin).
set -euo pipefail

usage() { sed -n '2,58p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "lend.sh: $*" >&2; exit 2; }
# say MSG: a log line stamped to the millisecond, without forking date.
say() {
  local t=$EPOCHREALTIME
  local us=${t#*[.,]}
  printf '%(%F %T)T.%s lend.sh: %s\n' "${t%[.,]*}" "${us:0:3}" "$*"
}

here=$(cd "$(dirname "$0")" && pwd)
coordinator="" scheduler="" token_file="" pool_token_file="" probe="" every="" idle_for=3 busy_for=1
probe_timeout=10 leave_timeout=60 attach_flags=() worker_nice=0 worker_class=() keep_warm=0
serve_metrics="" busy_in_flight=1 busy_rate=0 idle_rate=0 rate_window=1 give_back_file=""
while [ $# -gt 0 ]; do
  case "$1" in
    --coordinator|--scheduler|--token-file|--pool-token-file|--probe|--every|--idle-for|--busy-for|--probe-timeout|\
    --leave-timeout|--serve-metrics|--busy-in-flight|--busy-rate|--idle-rate|--rate-window|--worker-nice|\
    --give-back-file)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"
      case "$1" in
        --coordinator) coordinator=$2 ;;
        --scheduler) scheduler=$2 ;;
        --token-file) token_file=$2 ;;
        --pool-token-file) pool_token_file=$2 ;;
        --probe) probe=$2 ;;
        --every) every=$2 ;;
        --idle-for) idle_for=$2 ;;
        --busy-for) busy_for=$2 ;;
        --probe-timeout) probe_timeout=$2 ;;
        --leave-timeout) leave_timeout=$2 ;;
        --serve-metrics) serve_metrics=$2 ;;
        --busy-in-flight) busy_in_flight=$2 ;;
        --busy-rate) busy_rate=$2 ;;
        --idle-rate) idle_rate=$2 ;;
        --rate-window) rate_window=$2 ;;
        --worker-nice) worker_nice=$2 ;;
        --give-back-file) give_back_file=$2 ;;
      esac
      shift 2 ;;
    --keep-warm) keep_warm=1; shift ;;
    --worker-idle) worker_class=(chrt --idle 0); shift ;;
    --) shift; attach_flags=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "lend.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$scheduler" ]; then
  [ -z "$coordinator" ] || die "give --coordinator (one job) or --scheduler (a pool), not both"
  [ -z "$token_file" ] || die "with --scheduler the token is the pool's: --pool-token-file"
  [ $keep_warm = 0 ] || die "--keep-warm lends to one job (--coordinator): a pool worker does not park"
  target=(--scheduler "$scheduler")
  [ -z "$pool_token_file" ] || target+=(--token-file "$pool_token_file")
  token_file=$pool_token_file
else
  [ -n "$coordinator" ] || { echo "lend.sh: --coordinator (or --scheduler) is required" >&2; usage; }
  [ -n "$token_file" ] || die "--token-file is required with --coordinator"
  [ -z "$pool_token_file" ] || die "--pool-token-file goes with --scheduler"
  target=(--coordinator "$coordinator" --token-file "$token_file")
fi
if [ -n "$serve_metrics" ]; then
  [ -z "$probe" ] || die "give --probe CMD or --serve-metrics URL, not both"
  [[ "$serve_metrics" =~ ^http://([^/:]+|\[[0-9a-fA-F:]+\]):([0-9]+)(/.*)?$ ]] ||
    die "--serve-metrics must be http://HOST:PORT/PATH (e.g. http://127.0.0.1:8500/metrics)"
  command -v python3 > /dev/null || die "--serve-metrics runs launcher/serve_probe.py: python3 is missing"
  every=${every:-0.2}
else
  [ -n "$probe" ] || die "--probe CMD is required (exit 0: idle enough to lend), or --serve-metrics URL"
  [ -z "$give_back_file" ] || die "--give-back-file goes with --serve-metrics (the server signals the worker)"
  every=${every:-5}
fi
if [ -n "$give_back_file" ]; then
  [ -d "$(dirname "$give_back_file")" ] && [ -w "$(dirname "$give_back_file")" ] ||
    die "--give-back-file: cannot write in the folder of '$give_back_file'"
  # The server gives the node back at its first request: the agent's bands must say the same.
  [ "$busy_in_flight" = 1 ] && [ "$busy_for" = 1 ] && awk -v r="$busy_rate" 'BEGIN { exit !(r == 0) }' ||
    die "--give-back-file gives the node back at the first request: it goes with --busy-in-flight 1, --busy-rate 0 and --busy-for 1 (the defaults)"
fi
if [ -n "$token_file" ]; then
  [ -r "$token_file" ] && [ -s "$token_file" ] || die "cannot read the token file '$token_file'"
fi
number='^([0-9]+(\.[0-9]*)?|\.[0-9]+)$'
[[ "$every" =~ $number ]] && awk -v x="$every" 'BEGIN { exit !(x > 0) }' || die "--every must be a number of seconds > 0"
[[ "$probe_timeout" =~ $number ]] && awk -v x="$probe_timeout" 'BEGIN { exit !(x > 0) }' ||
  die "--probe-timeout must be a number of seconds > 0"
[[ "$leave_timeout" =~ ^[1-9][0-9]*$ ]] || die "--leave-timeout must be a whole number of seconds >= 1"
[[ "$idle_for" =~ ^[1-9][0-9]*$ ]] || die "--idle-for must be a whole number >= 1"
[[ "$busy_for" =~ ^[1-9][0-9]*$ ]] || die "--busy-for must be a whole number >= 1"
[[ "$busy_in_flight" =~ ^[1-9][0-9]*$ ]] || die "--busy-in-flight must be a whole number >= 1"
[[ "$busy_rate" =~ $number ]] || die "--busy-rate must be a number of requests/s >= 0"
[[ "$idle_rate" =~ $number ]] && awk -v i="$idle_rate" -v b="$busy_rate" 'BEGIN { exit !(i <= b) }' ||
  die "--idle-rate must be a number of requests/s >= 0, at most --busy-rate"
[[ "$rate_window" =~ $number ]] && awk -v x="$rate_window" 'BEGIN { exit !(x > 0) }' ||
  die "--rate-window must be a number of seconds > 0"
[[ "$worker_nice" =~ ^-?[0-9]+$ ]] && [ "$worker_nice" -ge -20 ] && [ "$worker_nice" -le 19 ] ||
  die "--worker-nice must be a whole number from -20 to 19"
command -v setsid > /dev/null || die "setsid (util-linux) is missing"
[ ${#worker_class[@]} = 0 ] || chrt --idle 0 true 2> /dev/null ||
  die "--worker-idle: this host refuses the idle scheduling class (chrt --idle 0)"

every_us=$(awk -v x="$every" 'BEGIN { printf "%d", x * 1e6 }')
every_ms=$((every_us / 1000))

worker=""      # the worker's pid while one runs (attach.sh execs it: the same process)
leaving=0      # 1 once the worker was sent SIGTERM
parked=0       # 1 once it was sent SIGUSR1 (--keep-warm), until SIGUSR2
park_signal=$(kill -l USR1)  # the numbers, for the probe and the give-back file
leave_signal=$(kill -l TERM)
leave_deadline=0
idle=0 busy=0

# probe_serve: the server's load, from launcher/serve_probe.py (a co-process started below, which
# keeps the rate window and one keep-alive connection: a poll forks nothing); sets state and why.
probe_serve() {
  local f n ms sent="" ask="" limit=$probe_wait
  # A lent worker not yet asked to leave: the probe waits out the period on the server's wake-up
  # (GET /v1/load), answering the moment requests come; the loop's pause is then spent already.
  # When one busy answer is enough, it names the worker: the probe signals it itself.
  if [ -n "$worker" ] && [ $leaving = 0 ] && [ $parked = 0 ] && [ $busy = 0 ]; then
    ask="wait $every_ms"
    [ "$busy_for" = 1 ] && ask="$ask $worker"
    [ "$busy_for" = 1 ] && [ $keep_warm = 1 ] && ask="$ask $park_signal"
    limit=$probe_wait_lent
  fi
  if ! { echo "$ask" >&"${PROBE[1]}" && read -r -t "$limit" -u "${PROBE[0]}" state f n ms sent; } 2> /dev/null; then
    state=busy why="no answer from the probe (launcher/serve_probe.py)"
  elif [ "$sent" = signalled ]; then
    why="in flight $f: the probe signalled the worker"
    if [ $keep_warm = 1 ]; then
      parked=1
      say "busy (in flight $f): the probe asked worker $worker to park (SIGUSR1)"
    else
      asked_to_leave "busy (in flight $f): the probe asked worker $worker to leave (SIGTERM)"
    fi
  elif [ "$f" = -1 ]; then
    why="no answer from $serve_metrics"
  else
    why="in flight $f, $n arrived in $ms ms"
  fi
}

# probe: sets state (idle, busy or neither) and why, from the operator's probe or the server.
probe() {
  if [ -n "$serve_metrics" ]; then
    probe_serve
  elif timeout --kill-after=1 "$probe_timeout" bash -c "$probe" < /dev/null > /dev/null 2>&1; then
    state=idle why="probe exit 0"
  else
    state=busy why="probe failed"
  fi
}

# offer_give_back: a worker is lent (attached or resumed): the give-back file names it and the
# signal that gives the node back, for the server to send (--give-back-file).
offer_give_back() {
  [ -n "$give_back_file" ] || return 0
  rm -f "$give_back_file.taken"
  printf '%s %s\n' "$worker" "$([ $keep_warm = 1 ] && echo "$park_signal" || echo "$leave_signal")" \
    > "$give_back_file.tmp"
  mv -f "$give_back_file.tmp" "$give_back_file"
}

# claim_give_back: whether this script may signal the lent worker: no give-back file, or it
# claimed the file (else the server or the probe has signalled the worker already).
claim_give_back() {
  [ -n "$give_back_file" ] || return 0
  mv "$give_back_file" "$give_back_file.taken" 2>/dev/null
}

# park_worker REASON (--keep-warm): SIGUSR1, the leave that keeps the process.
park_worker() {
  if claim_give_back; then
    kill -USR1 "$worker" 2>/dev/null || true
    say "$1: asked worker $worker to park (SIGUSR1)"
  else
    say "$1: the server asked worker $worker to park (SIGUSR1)"
  fi
  parked=1
}

# stop_worker REASON: one SIGTERM (the graceful leave); the main loop waits for the exit.
stop_worker() {
  [ -n "$worker" ] && [ $leaving = 0 ] || return 0
  if claim_give_back; then
    kill -TERM "$worker" 2>/dev/null || true  # first: the log line below forks date
    asked_to_leave "$1: asked worker $worker to leave (SIGTERM)"
  else
    asked_to_leave "$1: the server asked worker $worker to leave (SIGTERM)"
  fi
}

# asked_to_leave LINE: the worker has had its SIGTERM (from here or from the probe).
asked_to_leave() {
  say "$1"
  leaving=1
  leave_deadline=$((SECONDS + leave_timeout))
}

# Ctrl-C / SIGTERM: the worker leaves (bounded by --leave-timeout), then the agent exits 0.
shutdown() {
  trap - INT TERM
  say "stopping"
  if [ -n "$worker" ]; then
    stop_worker "the agent stops"
    while kill -0 "$worker" 2>/dev/null && [ $SECONDS -lt $leave_deadline ]; do sleep 0.1; done
    if kill -0 "$worker" 2>/dev/null; then
      say "worker $worker did not leave within ${leave_timeout}s: killing it"
      kill -KILL "$worker" 2>/dev/null || true
    fi
    local rc=0
    wait "$worker" 2>/dev/null || rc=$?
    say "worker $worker exited with $rc"
  fi
  if [ -n "${PROBE_PID:-}" ]; then  # the probe ends with the agent (elsewhere: at its stdin's end)
    kill "$PROBE_PID" 2>/dev/null || true
    wait "$PROBE_PID" 2>/dev/null || true
  fi
  exit 0
}
# The trap only notes the signal; the loop stops within a pause's slice (a trap that did the work
# itself would run inside a `read -t`, whose timer can cut it short).
stopping=0
trap 'stopping=1' INT TERM

# reap: notes the exit of a worker that has ended; returns after deciding what that means.
reap() {
  [ -n "$worker" ] && ! kill -0 "$worker" 2>/dev/null || return 0
  local rc=0
  wait "$worker" 2>/dev/null || rc=$?
  if [ $leaving = 1 ] || [ $parked = 1 ]; then
    say "worker $worker left (exit $rc)"
  else
    case $rc in
      0) say "worker $worker exited 0: the job is over"; exit 0 ;;
      2) say "worker $worker exited 2: bad flags, or a device this build cannot compute on"; exit 2 ;;
      3) say "worker $worker exited 3: no coordinator answered; again after the next idle period" ;;
      *) say "worker $worker exited $rc (refused, backed off or failed here); again after the next idle period" ;;
    esac
    idle=0  # a fresh idle period before the next attach
  fi
  worker="" leaving=0 parked=0
  [ -z "$give_back_file" ] || rm -f "$give_back_file" "$give_back_file.taken"
}

if [ -n "$serve_metrics" ]; then
  # The probe's own HTTP waits are bounded by --probe-timeout (twice: a retry on a fresh connection).
  probe_wait=$(awk -v x="$probe_timeout" 'BEGIN { print 2 * x + 1 }')
  probe_wait_lent=$(awk -v a="$probe_wait" -v b="$every" 'BEGIN { print a + b }')  # with a wait
  coproc PROBE { exec python3 "$here/serve_probe.py" --url "$serve_metrics" --timeout "$probe_timeout" \
    --busy-in-flight "$busy_in_flight" --busy-rate "$busy_rate" --idle-rate "$idle_rate" \
    --rate-window "$rate_window" ${give_back_file:+--give-back-file "$give_back_file"}; }
fi
# pause US: waits US microseconds without forking a sleep (five times a second, that cost the node
# 1-2 % of a core): `read -t` on a pipe no one writes to, in slices of 0.2 s at most, so that a
# signal ends the wait within 0.2 s.
exec {pause_fd}<> <(:)
pause() {
  local left=$1 slice t
  while [ "$left" -gt 0 ] && [ $stopping = 0 ]; do
    slice=$((left < 200000 ? left : 200000))
    printf -v t '%d.%06d' $((slice / 1000000)) $((slice % 1000000))
    read -r -t "$t" -u "$pause_fd" _ || true
    left=$((left - slice))
  done
}
say "probing every ${every}s${serve_metrics:+ ($serve_metrics)}: lend after $idle_for idle probes, reclaim after $busy_for busy"
while true; do
  started=${EPOCHREALTIME/[.,]/}
  probe
  [ $stopping = 0 ] || shutdown
  case $state in
    idle) idle=$((idle + 1)) busy=0 ;;
    busy) busy=$((busy + 1)) idle=0 ;;
    *) idle=0 busy=0 ;;
  esac
  reap
  if [ -n "$worker" ] && [ $parked = 0 ]; then
    if [ $leaving = 0 ] && [ $busy -ge "$busy_for" ]; then
      if [ $keep_warm = 1 ]; then park_worker "busy ($busy probes; $why)"; else stop_worker "busy ($busy probes; $why)"; fi
    elif [ $leaving = 1 ] && [ $SECONDS -ge $leave_deadline ]; then
      say "worker $worker did not leave within ${leave_timeout}s: killing it"
      kill -KILL "$worker" 2>/dev/null || true
    fi
  elif [ $idle -ge "$idle_for" ] && [ $parked = 1 ]; then
    kill -USR2 "$worker" 2>/dev/null || true
    parked=0
    offer_give_back
    say "idle ($idle probes; $why): resumed worker $worker (SIGUSR2)"
  elif [ $idle -ge "$idle_for" ]; then
    # setsid: its own session (no terminal signals); not a group leader, it execs in place, as
    # chrt and nice do, so $! is attach.sh's pid, which execs the worker (the class and niceness
    # go with every exec and thread).
    setsid "${worker_class[@]}" nice -n "$worker_nice" "$here/attach.sh" "${target[@]}" "${attach_flags[@]}" \
      < /dev/null &
    worker=$!
    offer_give_back
    say "idle ($idle probes; $why): attached worker $worker"
  fi
  # From one probe's start to the next: the period less what this round took.
  pause $((started + every_us - ${EPOCHREALTIME/[.,]/}))
  [ $stopping = 0 ] || shutdown
done
