#!/usr/bin/env bash
# The demo: installs what is missing, builds, and trains the Fashion-MNIST CNN
# (examples/fashion_mnist_cnn.flags) on a local cluster: 1 coordinator, 2 server
# shards, 2 worker processes sharing V = 8 virtual workers. While it trains, a
# third worker attaches and one of the first two is SIGKILLed. At the end it
# prints the test accuracy and checks that accuracy and params_sha256 equal
# those of the undisturbed run (made first, or reused from an earlier demo on
# this machine with the same job and binaries), and draws the elastic run's
# training curves over the undisturbed run's into DIR/demo/curves.png.
#
#   scripts/demo.sh [--run-dir DIR] [--fresh-reference]     (default DIR: runs/)
#
# It builds only the binaries it runs (scripts/test.sh builds the tests): the
# coordinator, shard and worker local.sh and attach.sh start, export_model
# (local.sh writes model.pt with it), and elasticps and eps_predict, the
# command line the README goes on with (status, evaluate, predict).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=$root/runs fresh=0
while [ $# -gt 0 ]; do
  case "$1" in
    --run-dir) runs=$2; shift 2 ;;
    --fresh-reference) fresh=1; shift ;;
    *) echo "demo.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh" --targets "coordinator shard worker export_model elasticps eps_predict"
job=$root/examples/fashion_mnist_cnn.flags
mkdir -p "$runs"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# The undisturbed reference, keyed by the job file and the binaries.
key=$(cat "$job" "$root"/build/bin/{coordinator,shard,worker} | sha256sum | cut -c1-16)
ref=$runs/reference-$key
if [ $fresh = 1 ] || [ ! -s "$ref/result.json" ]; then
  echo "== undisturbed reference run: 2 shards, 2 workers, V = 8 (run dir $ref)"
  "$root/launcher/local.sh" --job "$job" --servers 2 --workers 2 --run-dir "$ref"
else
  echo "== reusing the undisturbed reference of this machine: $ref"
fi

demo=$runs/demo
echo "== elastic run: 2 shards, 2 workers; a third attaches, one is SIGKILLed (run dir $demo)"
"$root/launcher/local.sh" --job "$job" --servers 2 --workers 2 --run-dir "$demo" &
job_pid=$!
attached=""
trap '[ -n "$attached" ] && kill "$attached" 2>/dev/null; kill "$job_pid" 2>/dev/null; wait 2>/dev/null' EXIT

steps=$(( $(field "$ref/result.json" steps) ))
wait_for_step() {  # bounded: until the coordinator's progress events report step >= $1 (or the job ends)
  python3 "$root/scripts/events.py" wait "$demo" progress --min-step "$1" --timeout 600 --pid "$job_pid"
}
if wait_for_step $((steps / 5)); then
  echo "== attaching a third worker (launcher/attach.sh) at step ~$((steps / 5))"
  "$root/launcher/attach.sh" --coordinator "$(cat "$demo/coordinator.addr")" --token-file "$demo/token" \
    --log "$demo/logs/attached.log" &
  attached=$!
fi
if wait_for_step $((steps / 2)); then
  victim=$(cat "$demo/pids/worker0.pid")
  echo "== SIGKILL worker0 (pid $victim) at step ~$((steps / 2))"
  kill -KILL "$victim" 2>/dev/null || true
fi
wait "$job_pid"
trap - EXIT
[ -n "$attached" ] && wait "$attached" 2>/dev/null || true

verdict=0
python3 - "$ref/result.json" "$demo/result.json" <<'PY' || verdict=$?
import json, sys
ref, got = (json.load(open(p)) for p in sys.argv[1:3])
print(f"== done: {got['steps']} steps in {got['train_seconds']:.0f} s with {got['workers_seen']} workers over the run")
print(f"   test accuracy {got['test_accuracy']:.4f} (target 0.91), undisturbed run {ref['test_accuracy']:.4f}")
print(f"   params_sha256 {got['params_sha256']}")
print(f"   undisturbed   {ref['params_sha256']}")
same = got["params_sha256"] == ref["params_sha256"] and got["test_accuracy"] == ref["test_accuracy"]
print("   identical to the undisturbed run: " + ("yes, bit for bit" if same else "NO"))
sys.exit(0 if same and got["test_accuracy"] >= 0.91 else 1)
PY

# Debian's python3 (scripts/plot_run.py needs its matplotlib).
if /usr/bin/python3 "$root/scripts/plot_run.py" "$ref" "$demo" --label undisturbed --label elastic \
    --out "$demo/curves.png" > /dev/null; then
  echo "== training curves, the elastic run over the undisturbed one: $demo/curves.png"
else
  echo "demo.sh: no training curves (scripts/plot_run.py failed)" >&2
  verdict=1
fi
exit $verdict
