#!/usr/bin/env bash
# Prepares what scripts/gpu_check.sh needs on a bare GPU machine (no network, no
# apt) besides what such a machine brings (a CUDA libtorch in its python3, CUDA,
# a C++ compiler, CMake): run it here, where apt works (Debian 12).
#
#   scripts/fetch_gpu_debs.sh [--out DIR]     (default DIR: .gpu-debs, which git ignores)
#
# DIR/debs/   the Debian packages ElasticPS builds against (ZeroMQ, cppzmq, Cap'n
#             Proto, RocksDB, gflags, glog, GoogleTest, OpenSSL, nlohmann-json, cpp-httplib,
#             libsodium (bench/'s CURVE cipher timing), zlib) and, found with apt-cache depends recursively, the libraries
#             they load, fetched with apt-get download. Left out: libtorch,
#             python and CUDA (the GPU machine's own), the C library and
#             compiler runtime every build machine has, and the development
#             packages behind libzmq's pkg-config file (krb5, libxml2, ICU...),
#             which only static linking needs (cppzmq finds libzmq without them).
# DIR/data/   the first 8192 training and 2000 test images of Fashion-MNIST
#             (IDX, gzip) from /usr/share/datasets/fashion-mnist: enough for
#             every job gpu_check.sh runs, at a fraction of the full set's size.
#
# Prints the folder's size: a device machine takes at most 64 MiB with the tree.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.gpu-debs
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_gpu_debs.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

roots=(libzmq3-dev cppzmq-dev capnproto libcapnp-dev librocksdb-dev libgflags-dev libgoogle-glog-dev libcpp-httplib-dev libabsl-dev
       libsodium-dev libunwind-dev libgtest-dev libssl-dev nlohmann-json3-dev zlib1g-dev)
exclude='^(libc6|libc6-dev|libc-dev-bin|libcrypt1|libcrypt-dev|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|linux-libc-dev'
exclude+='|rpcsvc-proto|libnsl2|libnsl-dev|libtirpc[0-9]*|libtirpc-.*|debconf|dpkg|perl-base|tar'
exclude+='|libtorch.*|python.*|cuda.*|nvidia.*'
exclude+='|libpgm-dev|libnorm-dev|libbsd-dev|libmd-dev|libkrb5-dev|krb5-multidev|comerr-dev'
exclude+='|libgssrpc4|libkadm5.*|libkdb5.*|libxml2|libxml2-dev|libicu.*|icu-devtools)$'

# The direct dependencies of one package: Depends and Pre-Depends, the first
# alternative of each "a | b" group, no virtual packages.
deps_of() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$1" |
    awk '/^ \|(Pre)?Depends:/ { if (!alt) print $2; alt = 1; next }
         /^  (Pre)?Depends:/ { if (!alt) print $2; alt = 0; next }' |
    grep -v '^<' || true
}

declare -A seen=()
queue=("${roots[@]}")
while [ ${#queue[@]} -gt 0 ]; do
  p=${queue[0]}
  queue=("${queue[@]:1}")
  p=${p%%:*}
  [ -n "${seen[$p]:-}" ] && continue
  [[ "$p" =~ $exclude ]] && continue
  seen[$p]=1
  while read -r d; do
    [ -n "$d" ] && [ -z "${seen[${d%%:*}]:-}" ] && queue+=("$d")
  done < <(deps_of "$p")
done
mapfile -t packages < <(printf '%s\n' "${!seen[@]}" | sort)

rm -rf "$out/debs"
mkdir -p "$out/debs" "$out/data"
echo "fetching ${#packages[@]} packages: ${packages[*]}"
(cd "$out/debs" && apt-get download -q "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
n=$(find "$out/debs" -name '*.deb' | wc -l)
[ "$n" -eq ${#packages[@]} ] || { echo "fetch_gpu_debs.sh: got $n of ${#packages[@]} packages" >&2; exit 1; }
printf '%s\n' "${packages[@]}" > "$out/debs/PACKAGES"

# A subset of Fashion-MNIST in the same IDX format (big-endian header, the count rewritten).
python3 - "$out/data" <<'EOF'
import gzip, os, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for prefix, n in (("train", 8192), ("t10k", 2000)):
    for kind, item in (("images-idx3-ubyte", 28 * 28), ("labels-idx1-ubyte", 1)):
        with gzip.open(os.path.join(src, f"{prefix}-{kind}.gz"), "rb") as f:
            blob = f.read()
        magic, count = struct.unpack(">II", blob[:8])
        header = 16 if kind.startswith("images") else 8
        assert count >= n, (prefix, kind, count)
        out = blob[:4] + struct.pack(">I", n) + blob[8:header] + blob[header:header + n * item]
        with gzip.open(os.path.join(dst, f"{prefix}-{kind}.gz"), "wb", compresslevel=9) as f:
            f.write(out)
EOF

size=$(du -sb "$out" | cut -f1)
echo "$out: $(du -sh "$out/debs" | cut -f1) of packages, $(du -sh "$out/data" | cut -f1) of data, $((size / 1024 / 1024)) MiB in all"
if [ "$size" -gt $((48 * 1024 * 1024)) ]; then
  echo "fetch_gpu_debs.sh: $out holds $((size / 1024 / 1024)) MiB: too much to travel with the tree (64 MiB in all)" >&2
  exit 1
fi
