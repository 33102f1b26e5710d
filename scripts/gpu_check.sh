#!/usr/bin/env bash
# The GPU check of ElasticPS, for a bare GPU machine (no network, no apt) that
# has a CUDA libtorch in its python3, CUDA (nvcc), a C++ compiler and CMake.
# The other build dependencies come as Debian packages in .gpu-debs/ (made
# beforehand, where apt works, by scripts/fetch_gpu_debs.sh), unpacked with
# dpkg -x into a prefix, never into /.
#
#   scripts/gpu_check.sh [--cpu-dry-run] [--skip-build] [--debs DIR] [--device cuda:N]
#                        [--no-checks] [--bench[=scale,cpu,hetero]]
#
# Steps: unpack the packages into a prefix and point their CMake and pkg-config
# files at it; configure and build into build-gpu/ against the machine's CUDA
# libtorch and that prefix; then run, each with a deadline:
#   model_runner_test on the GPU (EPS_TEST_DEVICE);
#   the mlp and cnn_bn digest checks across 1x8, 2x4 and 4x2 placements on the GPU
#     (several worker processes share it), through launcher/local.sh;
#   a CPU worker attached to a GPU job: refused, the job's digest unchanged;
#   samples/s of the cnn job on the GPU and on the CPU;
#   virtual-worker overhead on the GPU: 8 VWs in one worker against
#     build-gpu/bin/baseline's plain gradient accumulation over 8 microbatches;
#   peak GPU memory of a worker with 1 VW and with 8 VWs (nvidia-smi).
# Prints one table; with $OUT set, writes it to $OUT/gpu_check.txt, the whole
# output to $OUT/gpu_check.log and the logs of every run to $OUT/gpu_logs.tar.gz.
#
# --cpu-dry-run  prove the packaging and build steps here, without a GPU: the
#                same unpacking, against Debian's CPU libtorch, with every
#                library loaded from the prefix and CMake barred from /usr, into
#                build-gpu-dry/; then the same checks on the CPU (shorter).
# --skip-build   reuse the prefix and build dir of an earlier run (a rerun on a
#                machine still warm).
# --no-checks    build (or reuse) and run model_runner_test only, then --bench.
# --bench        after the checks, measure what a 2-core host cannot (rows marked
#                info; docs/benchmarks.md has the figures; --bench=LIST: those named):
#                  scale: the ps share on the GPU: a 37 M-parameter TorchScript MLP (AdamW,
#                    V = 8 x 16, 1 worker, 1 and 2 shards): ms per plan of compute,
#                    pull, copies, plan wait and push wait from the worker's report;
#                  cpu: the cnn job (V = 8 x 16) on 1, 2, 4 and 8 CPU workers,
#                    one core each: samples/s and the parameter server's share;
#                  hetero: the mlp job (V = 8 x 512) on 3 CPU workers slowed 1x, 2x,
#                    4x, a core each, --planner=speed and =equal against the ideal
#                    (the sum of the lone speeds); both must end on one digest.
# Exits 0 when every check passed.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
debs=$root/.gpu-debs
dry=0 skip_build=0 device=cuda:0 checks=1 bench=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-dry-run) dry=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --no-checks) checks=0; shift ;;
    --bench) bench=scale,cpu,hetero; shift ;;
    --bench=*) bench=${1#--bench=}; shift ;;
    --debs) debs=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ $dry = 1 ] && device=cpu
started=$SECONDS
out=${OUT:-}
work=${TMPDIR:-/tmp}/eps-gpu-check
prefix=$work/prefix
overlay=$work/lib
runs=$work/runs
build=$root/build-gpu
[ $dry = 1 ] && build=$root/build-gpu-dry
mkdir -p "$work" "$runs"
log=$work/gpu_check.log
[ $skip_build = 1 ] || : > "$log"
exec > >(tee -a "$log") 2>&1

say() { printf '[%4ds] %s\n' $((SECONDS - started)) "$*"; }
die() { say "FAILED: $*"; finish 1; }
rows=()
failed=0
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && failed=1; return 0; }
finish() {
  local rc=$1 table
  table=$( {
    echo "ElasticPS GPU check ($([ $dry = 1 ] && echo "CPU dry run" || echo "$device: ${device_kind:-?}"), $(date -u +%FT%TZ), $((SECONDS - started)) s)"
    printf '%-44s %-8s %s\n' check result detail
    printf '%s\n' "${rows[@]}"
  } )
  echo; echo "$table"
  if [ -n "$out" ]; then
    mkdir -p "$out"
    echo "$table" > "$out/gpu_check.txt"
    cp "$log" "$out/gpu_check.log"
    # Logs, outputs and results; not the exported models nor the stores.
    (cd "$work" && find runs ./*.log -type f \( -name '*.log' -o -name '*.out' -o -name '*.err' \
       -o -name result.json \) -print0 | tar -czf "$out/gpu_logs.tar.gz" --null -T - 2> /dev/null)
  fi
  exit "$rc"
}

# ---- the machine ---------------------------------------------------------------
py=python3
[ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
export PATH=/usr/local/cuda/bin:$PATH
if [ $dry = 0 ]; then
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' ||
    die "no torch in $py"
  torch_cmake=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)') || die "torch has no CMake files"
  # The CUDA libraries of a pip torch (nvidia-* wheels), should libtorch's RUNPATH miss them.
  cuda_libs=$("$py" - <<'EOF'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join(sorted(glob.glob(os.path.join(site, "nvidia", "**", "lib"), recursive=True))))
EOF
)
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}  # Hopper; spares torch's CMake a detection run
fi
generator=() keep_going=(-- -k)
command -v ninja > /dev/null && generator=(-G Ninja) keep_going=(-- -k 0)

# ---- the packages, in a prefix ---------------------------------------------------
if [ $skip_build = 0 ]; then
  [ -s "$debs/debs/PACKAGES" ] || die "no packages in $debs/debs: run scripts/fetch_gpu_debs.sh where apt works"
  rm -rf "$prefix" "$overlay"
  mkdir -p "$prefix" "$overlay"
  for f in "$debs"/debs/*.deb; do
    if command -v dpkg > /dev/null; then
      dpkg -x "$f" "$prefix" || die "dpkg -x $f"
    else  # ar + tar do what dpkg -x does
      member=$(ar t "$f" | grep '^data\.tar') || die "no data in $f"
      case "$member" in
        *.xz) ar p "$f" "$member" | tar -xJ -C "$prefix" ;;
        *.zst) ar p "$f" "$member" | zstd -dc | tar -x -C "$prefix" ;;
        *) ar p "$f" "$member" | tar -xz -C "$prefix" ;;
      esac || die "unpacking $f"
    fi
  done
  say "unpacked $(ls "$debs"/debs/*.deb | wc -l) packages into $prefix ($(du -sh "$prefix" | cut -f1))"
  # Debian's files name /usr and /lib absolutely (CMake configs, pkg-config files,
  # symbolic links): those that exist in the prefix are pointed at it.
  "$py" - "$prefix" <<'EOF' || die "rewriting the prefix's paths"
import os, re, sys
prefix = os.path.abspath(sys.argv[1])
links = files = 0
for d, dirs, names in os.walk(prefix):
    for n in dirs + names:
        p = os.path.join(d, n)
        if os.path.islink(p):
            t = os.readlink(p)
            if t.startswith("/") and not t.startswith(prefix + "/") and os.path.lexists(prefix + t):
                os.remove(p)
                os.symlink(prefix + t, p)
                links += 1
# An absolute path standing alone (after a quote, space, ;, (, = or :), not a ${VAR}/lib suffix.
path = re.compile(r'(?<![\w.}\-)$/])/(?:usr(?=[/"\s;)\']|$)|(?:usr/)?(?:lib|lib64|include|bin|share)\b)[\w.+/-]*', re.M)
def fix(m):
    p = m.group(0).rstrip("/")
    return prefix + m.group(0) if p and os.path.lexists(prefix + p) else m.group(0)
for d, _, names in os.walk(prefix):
    for n in names:
        p = os.path.join(d, n)
        if os.path.islink(p) or not (n.endswith(".cmake") or n.endswith(".pc")):
            continue
        with open(p, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        new = path.sub(fix, text)
        if new != text:
            with open(p, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(new)
            files += 1
print(f"pointed {links} links and {files} CMake / pkg-config files at {prefix}")
EOF
  # The libraries the machine lacks go on LD_LIBRARY_PATH through one folder of
  # links; those it has stay its own. A dry run loads all from the prefix.
  known=$(ldconfig -p 2>/dev/null | awk '{print $1}' | sort -u)
  n=0
  for f in "$prefix"/usr/lib/x86_64-linux-gnu/lib*.so* "$prefix"/lib/x86_64-linux-gnu/lib*.so*; do
    [ -e "$f" ] || continue
    base=$(basename "$f")
    if [ $dry = 1 ] || ! grep -qxF "$base" <<< "$known"; then
      ln -sf "$f" "$overlay/$base"
      n=$((n + 1))
    fi
  done
  say "$n libraries from the prefix on LD_LIBRARY_PATH"
fi
export LD_LIBRARY_PATH=$overlay${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- configure and build ---------------------------------------------------------
targets=(coordinator shard worker baseline model_runner_test)
if [ $skip_build = 0 ]; then
  cmake_args=(-S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_POLICY_VERSION_MINIMUM=3.5
              -DPython3_EXECUTABLE="$(command -v "$py")")
  if [ $dry = 1 ]; then
    # Debian's CPU libtorch from /usr, every other package from the prefix only.
    cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_IGNORE_PREFIX_PATH="/usr;/"
                 -DTorch_DIR=/usr/lib/x86_64-linux-gnu/cmake/Torch -DCaffe2_DIR=/usr/lib/x86_64-linux-gnu/cmake/Caffe2
                 -DTORCH_LIBRARY=/usr/lib/x86_64-linux-gnu/libtorch.so -Dc10_LIBRARY=/usr/lib/x86_64-linux-gnu/libc10.so
                 -DProtobuf_LIBRARY=/usr/lib/x86_64-linux-gnu/libprotobuf.so -DProtobuf_INCLUDE_DIR=/usr/include
                 -DELASTICPS_CUDA=OFF)  # (what Debian's libtorch finds in /usr for itself, named)
  else
    cmake_args+=(-DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" -DCUDAToolkit_ROOT=/usr/local/cuda -DELASTICPS_CUDA=ON)
    # PyTorch 2.14's headers refuse C++17 (#error ... C++20 or later): build as C++20 where they ask.
    if grep -qs "__cplusplus < 202002L" "$torch_cmake/../../include/ATen/ATen.h" \
         "$torch_cmake/../../include/torch/csrc/api/include/torch/all.h"; then
      cmake_args+=(-DCMAKE_CXX_STANDARD=20)
      say "this libtorch needs C++20"
    fi
  fi
  rm -rf "$build"
  say "configuring $build"
  cmake "${cmake_args[@]}" > "$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log"; die "configure"; }
  grep -E "ElasticPS worker|Caffe2: CUDA|Found CUDAToolkit" "$work/configure.log"
  # Every package but libtorch must come from the prefix.
  for pkg in CapnProto cppzmq gflags glog GTest RocksDB nlohmann_json; do
    dir=$(grep -E "^${pkg}_DIR:" "$build/CMakeCache.txt" | cut -d= -f2-)
    case "$dir" in "$prefix"/*) ;; *) die "$pkg found at '$dir', not in the prefix" ;; esac
  done
  say "building ${targets[*]}"
  t0=$SECONDS
  # keep going: every error of a first build against another libtorch in one run, not only the first.
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" "${keep_going[@]}" > "$work/build.log" 2>&1 ||
    { grep -E "error|Error" "$work/build.log" | head -n 60; cp "$work/build.log" "${out:-$work}/build.log" 2> /dev/null
      die "build"; }
  row "build (${targets[*]})" ok "$((SECONDS - t0)) s on $(nproc) cores"
else
  [ -x "$build/bin/worker" ] || die "--skip-build, but $build holds no build"
  row "build" reused "$build"
fi
bin=$build/bin
export EPS_BIN=$bin
if [ $dry = 1 ]; then  # the binaries load the prefix's libraries, not the system's
  ldd "$bin/worker" | grep -E "libzmq|libcapnp|librocksdb|libglog" | grep -qv "$overlay" &&
    die "the worker loads libraries from outside the prefix: $(ldd "$bin/worker" | grep -E 'libzmq|libcapnp')"
fi
device_kind=$("$bin/worker" --device="$device" --print_device_kind) || die "the worker refuses --device=$device"
say "device $device: $device_kind"

# ---- checks ----------------------------------------------------------------------
data=$debs/data
[ -s "$data/train-images-idx3-ubyte.gz" ] || data=/usr/share/datasets/fashion-mnist
mlp=$root/examples/fashion_mnist_mlp.flags
cnn=$root/examples/fashion_mnist_cnn.flags
json() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2" 2> /dev/null; }
samples_per_s() {  # RUN_DIR
  "$py" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print("%.0f" % (r["steps"] * r["virtual_workers"] * r["batch_per_vw"] / r["train_seconds"]))' "$1/result.json" 2> /dev/null
}
# job NAME WORKERS DEVICES SECONDS FLAGFILE [coordinator flags...]: one job to its end; 0 if it succeeded.
job() {
  local name=$1 workers=$2 devices=$3 limit=$4 flags=$5
  shift 5
  rm -rf "${runs:?}/$name"
  timeout "$limit" "$root/launcher/local.sh" --job "$flags" --servers 2 --workers "$workers" --devices "$devices" \
    --run-dir "$runs/$name" -- --data_dir="$data" "$@" > "$runs/$name.out" 2>&1
}
# GPU memory in use (MiB), sampled every 0.2 s while PID lives; prints the peak.
peak_memory() {
  local pid=$1 peak=0 m index=${device#cuda}
  index=${index#:}
  command -v nvidia-smi > /dev/null || { echo n/a; return; }
  while kill -0 "$pid" 2> /dev/null; do
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${index:-0}" 2> /dev/null | head -n 1)
    [[ "$m" =~ ^[0-9]+$ ]] && [ "$m" -gt "$peak" ] && peak=$m
    sleep 0.2
  done
  echo "$peak"
}
budget=300  # seconds for the checks (a device command runs at most 600 s, the build included)
over_budget() { [ $((SECONDS - checks_started)) -gt $budget ]; }
checks_started=$SECONDS

if EPS_TEST_DEVICE=$device timeout 120 "$bin/model_runner_test" > "$runs/model_runner_test.out" 2>&1; then
  row "model_runner_test on $device" PASS "$(grep -E '^\[  PASSED' "$runs/model_runner_test.out")"
else
  row "model_runner_test on $device" FAIL "$(grep -E '^\[  FAILED' "$runs/model_runner_test.out" | head -n 3 | tr '\n' ' ')"
fi

# The placements' digests, the refused CPU worker, throughput, VW overhead and memory.
if [ $checks = 1 ]; then
  steps_mlp=200 steps_bn=30
  [ $dry = 1 ] && steps_mlp=60
  declare -A digest
  for model in mlp cnn_bn; do
    for w in 1 2 4; do
      name=$model-${w}x$((8 / w))
      if over_budget; then row "$name digest" skipped "out of time"; continue; fi
      if [ $model = mlp ]; then
        job "$name" "$w" "$device" 150 "$mlp" --steps=$steps_mlp
      else
        job "$name" "$w" "$device" 150 "$mlp" --model=cnn_bn --virtual_workers=8 --batch_per_vw=16 --steps=$steps_bn \
          --train_limit=2048 --test_limit=500
      fi || { row "$name" FAIL "job failed: $(tail -n 2 "$runs/$name.out" | tr '\n' ' ')"; continue; }
      digest[$name]="$(json "$runs/$name/result.json" params_sha256) $(json "$runs/$name/result.json" buffers_sha256)"
    done
    ref=${digest[$model-1x8]:-}
    same=1 detail=""
    for w in 1 2 4; do
      d=${digest[$model-${w}x$((8 / w))]:-missing}
      detail+="${w}x$((8 / w)):${d:0:12} "
      [ "$d" = "$ref" ] && [ -n "$ref" ] || same=0
    done
    row "$model digest, 1x8 = 2x4 = 4x2 on $device" "$([ $same = 1 ] && echo PASS || echo FAIL)" "$detail"
  done

  if [ $dry = 0 ] && ! over_budget; then
    # The same mlp job on the CPU: another kind of device, so other bits (docs/design.md).
    if job mlp-cpu-1x8 1 cpu 120 "$mlp" --steps=$steps_mlp; then
      d=$(json "$runs/mlp-cpu-1x8/result.json" params_sha256)
      row "mlp digest on cpu (for reference)" info "${d:0:12} ($([ "$d" = "${digest[mlp-1x8]%% *}" ] && echo "same as" || echo "differs from") $device)"
    fi
    # A CPU worker attached to a GPU job is refused; the job goes on to the same digest.
    name=mixed
    rm -rf "${runs:?}/$name"
    # (--slowdowns: the GPU worker idles 4x its compute, so the job still runs when the CPU worker comes)
    timeout 150 "$root/launcher/local.sh" --job "$mlp" --servers 2 --workers 1 --devices "$device" --slowdowns 5 \
      --run-dir "$runs/$name" -- --data_dir="$data" --steps=$steps_mlp > "$runs/$name.out" 2>&1 &
    lp=$!
    for _ in $(seq 600); do grep -qE '^step [1-9]' "$runs/$name/logs/coordinator.log" 2> /dev/null && break; sleep 0.1; done
    attach_rc=0
    timeout 60 "$root/launcher/attach.sh" --coordinator "$(cat "$runs/$name/coordinator.addr" 2> /dev/null)" \
      --token-file "$runs/$name/token" --device cpu > "$runs/$name.attach.out" 2>&1 || attach_rc=$?
    wait "$lp"; job_rc=$?
    d=$(json "$runs/$name/result.json" params_sha256)
    if [ $attach_rc -ne 0 ] && grep -q "allow_mixed_devices" "$runs/$name.attach.out" && [ $job_rc = 0 ] &&
       [ "$d" = "${digest[mlp-1x8]%% *}" ]; then
      row "cpu worker joining a $device job" PASS "refused (exit $attach_rc), job digest unchanged"
    else
      row "cpu worker joining a $device job" FAIL "attach exit $attach_rc, job exit $job_rc, digest ${d:0:12}: $(grep -oE '(FAILED_PRECONDITION|INVALID_ARGUMENT).*' "$runs/$name.attach.out" | head -n 1)"
    fi
  fi

  # Throughput of the cnn job (V = 8 VWs of 16 samples, one worker) and the plain loop.
  steps_gpu=300 steps_cpu=40
  [ $dry = 1 ] && steps_gpu=40
  # (a short warmup: the cosine schedule needs more steps than warmup steps)
  cnn_flags=(--steps="$steps_gpu" --warmup_steps=10 --train_limit=8192 --test_limit=-1)
  if ! over_budget; then
    job cnn-gpu-v8 1 "$device" 240 "$cnn" "${cnn_flags[@]}" &
    jp=$!
    mem8=$( [ $dry = 0 ] && peak_memory $jp || echo n/a )
    wait $jp && gpu_sps=$(samples_per_s "$runs/cnn-gpu-v8") || gpu_sps=""
    cpu_sps=""
    if [ $dry = 0 ] && job cnn-cpu-v8 1 cpu 120 "$cnn" --steps=$steps_cpu --warmup_steps=10 --train_limit=8192 \
      --test_limit=-1; then
      cpu_sps=$(samples_per_s "$runs/cnn-cpu-v8")
    fi
    if [ -n "$gpu_sps" ]; then
      if [ $dry = 0 ] && [ -n "$cpu_sps" ]; then
        row "cnn job samples/s, $device vs cpu (1 thread)" info \
          "$gpu_sps vs $cpu_sps ($(awk -v g="$gpu_sps" -v c="$cpu_sps" 'BEGIN { printf "%.1fx", g / c }'))"
      else
        row "cnn job samples/s on $device" info "$gpu_sps"
      fi
    else
      row "cnn job on $device" FAIL "$(tail -n 2 "$runs/cnn-gpu-v8.out" | tr '\n' ' ')"
    fi
    base_sps=$(timeout 120 "$bin/baseline" --model=cnn --data_dir="$data" --train_limit=8192 --microbatches=8 \
      --batch_per_vw=16 --steps=$steps_gpu --device="$device" 2> "$runs/baseline.err" |
      python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["samples_per_s"])' 2> /dev/null || true)
    if [ -z "$base_sps" ]; then
      row "baseline on $device" FAIL "$(tail -n 2 "$runs/baseline.err" | tr '\n' ' ')"
    elif [ -n "$gpu_sps" ]; then
      row "VW overhead on $device (8 VWs vs 8 microbatches)" info \
        "job $gpu_sps vs baseline $base_sps samples/s: $(awk -v j="$gpu_sps" -v b="$base_sps" 'BEGIN { printf "%.0f%%", 100 * (1 - j / b) }') slower"
    fi
    if [ $dry = 0 ] && ! over_budget; then
      job cnn-gpu-v1 1 "$device" 120 "$cnn" --virtual_workers=1 --steps=100 --warmup_steps=10 --train_limit=8192 \
        --test_limit=-1 &
      jp=$!
      mem1=$(peak_memory $jp)
      wait $jp || mem1="$mem1 (job failed)"
      row "GPU memory in use, worker with 1 VW / 8 VWs" info "$mem1 / $mem8 MiB (whole GPU, peak)"
    fi
  fi
  say "checks took $((SECONDS - checks_started)) s"
fi

# ---- measurements (--bench) ---------------------------------------------------
# ms per train plan from a worker's report (logs/worker<i>.json): "compute pull copies plan_wait push_wait".
plan_ms() {
  "$py" -c 'import json, sys; t = json.load(open(sys.argv[1]))["ms_per_train_plan"]
print(" ".join("%.1f" % t[k] for k in ("compute", "pull", "copies", "plan_wait", "push_wait")))' "$1" 2> /dev/null
}
# The parameter server's share of a plan: 1 - compute / (all the plan's parts), from plan_ms's five figures.
ps_share() { awk '{ t = $1 + $2 + $3 + $4 + $5; if (t > 0) printf "%.0f%%", 100 * (1 - $1 / t); else print "-" }' <<< "$1"; }
benched() { [[ ",$bench," == *",$1,"* ]]; }
if [ -n "$bench" ] && [ $dry = 0 ]; then
  bench_started=$SECONDS
  # 1. The parameter server's share of a GPU step at 37 M parameters (the scale issue's MLP).
  scale=$work/scale
  mkdir -p "$scale"
  if ! benched scale; then
    :
  elif "$py" - "$scale" <<'EOF' > "$runs/scale_make.out" 2>&1
import sys, numpy as np, torch, torch.nn as nn
d = sys.argv[1]
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                    nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
print(sum(p.numel() for p in net.parameters()), "parameters")
torch.jit.script(net).save(f"{d}/mlp37m.pt")
rng = np.random.default_rng(0)
np.save(f"{d}/x.npy", rng.standard_normal((4096, 1024), dtype=np.float32))
np.save(f"{d}/y.npy", rng.integers(0, 10, 4096).astype(np.int64))
EOF
  then
    for shards in 1 2; do
      name=scale37m-s$shards
      rm -rf "${runs:?}/$name"
      if timeout 180 "$root/launcher/local.sh" --job "$mlp" --servers $shards --workers 1 --devices "$device" \
           --run-dir "$runs/$name" -- --model="$scale/mlp37m.pt" --train_data="$scale/x.npy" \
           --train_labels="$scale/y.npy" --test_limit=-1 --optimizer=adamw --momentum=0 --lr=0.0001 --virtual_workers=8 \
           --batch_per_vw=16 --steps=40 --warmup_steps=0 --lr_schedule=constant --lr_step_size=0 > "$runs/$name.out" 2>&1; then
        m=$(plan_ms "$runs/$name/logs/worker0.json")
        row "37M MLP on $device, $shards shard(s), ms/plan" info \
          "compute/pull/copies/plan wait/push wait = ${m// //}; PS share $(ps_share "$m"); $(samples_per_s "$runs/$name") samples/s"
      else
        row "37M MLP on $device, $shards shard(s)" FAIL "$(tail -n 2 "$runs/$name.out" | tr '\n' ' ')"
      fi
    done
  else
    row "37M MLP (making it)" FAIL "$(tail -n 2 "$runs/scale_make.out" | tr '\n' ' ')"
  fi
  # 2. CPU workers, a core each: the cnn job on 1, 2, 4, 8 workers; shards and coordinator on the cores above.
  cores=$(nproc)
  if [ "$cores" -ge 12 ]; then
    for w in 1 2 4 8; do
      benched cpu || break
      name=cpu-scaling-w$w
      cpus=$(seq -s: 0 $((w - 1)))
      rm -rf "${runs:?}/$name"
      if timeout 240 "$root/launcher/local.sh" --job "$cnn" --servers 2 --workers $w --devices cpu \
           --worker-cpus "$cpus" --server-cpus "8-$((cores - 1))" --run-dir "$runs/$name" -- --data_dir="$data" \
           --steps=60 --warmup_steps=10 --train_limit=8192 --test_limit=-1 > "$runs/$name.out" 2>&1; then
        m=$(plan_ms "$runs/$name/logs/worker0.json")
        row "cnn on $w CPU worker(s), a core each" info \
          "$(samples_per_s "$runs/$name") samples/s; worker0 ms/plan ${m// //}, PS share $(ps_share "$m"); $(json "$runs/$name/result.json" params_sha256 | cut -c1-12)"
      else
        row "cnn on $w CPU worker(s)" FAIL "$(tail -n 2 "$runs/$name.out" | tr '\n' ' ')"
      fi
    done
    # 3. Heterogeneous workers, a core each: the speed-aware planner against equal ranges and the ideal.
    hflags=(--steps=150 --batch_per_vw=512 --train_limit=8192 --test_limit=-1)
    declare -A rate hsha
    for cfg in "alone 1 1 0" "equal 3 1,2,4 0:1:2" "speed 3 1,2,4 0:1:2"; do
      benched hetero || break
      read -r kind w slow cpus <<< "$cfg"
      name=hetero-$kind
      rm -rf "${runs:?}/$name"
      planner=(); [ "$kind" != alone ] && planner=(--planner="$kind")
      if timeout 240 "$root/launcher/local.sh" --job "$mlp" --servers 1 --workers "$w" --devices cpu \
           --slowdowns "$slow" --worker-cpus "$cpus" --server-cpus 3-5 --run-dir "$runs/$name" -- \
           --data_dir="$data" "${hflags[@]}" "${planner[@]}" > "$runs/$name.out" 2>&1; then
        rate[$kind]=$("$py" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["steps"] / r["train_seconds"])' \
          "$runs/$name/result.json")
        hsha[$kind]=$(json "$runs/$name/result.json" params_sha256)
      else
        row "hetero $kind" FAIL "$(tail -n 2 "$runs/$name.out" | tr '\n' ' ')"
      fi
    done
    if [ -n "${rate[alone]:-}" ] && [ -n "${rate[speed]:-}" ] && [ -n "${rate[equal]:-}" ]; then
      same=$([ "${hsha[speed]}" = "${hsha[equal]}" ] && echo yes || echo NO)
      row "hetero 1x/2x/4x, steps/s vs ideal" "$([ $same = yes ] && echo info || echo FAIL)" \
        "$(awk -v a="${rate[alone]}" -v s="${rate[speed]}" -v e="${rate[equal]}" 'BEGIN { i = a * 1.75
          printf "alone %.2f, ideal %.2f, speed %.2f (%.2fx ideal), equal %.2f (%.2fx ideal)", a, i, s, s / i, e, e / i }'); same digest: $same"
    fi
  else
    row "CPU scaling and hetero" skipped "$cores cores: needs 12 or more"
  fi
  say "measurements took $((SECONDS - bench_started)) s"
fi
finish $failed
