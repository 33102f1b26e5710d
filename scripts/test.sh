#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest:
# unit tests, multi-process integration tests, the libtorch-free
# components' unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
# and, where clang-14 and libFuzzer are installed (setup.sh installs them), each
# fuzz target of fuzz/ for a bounded time.
#
#   scripts/test.sh [extra ctest arguments, e.g. -R Digest]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --sanitize
export OMP_WAIT_POLICY=passive
fuzzer=$(clang++-14 --rtlib=compiler-rt -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
if command -v clang++-14 > /dev/null && [ -f "$fuzzer" ]; then
  echo "== fuzz build (clang-14, libFuzzer + ASan + UBSan): each target for a bounded time"
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DELASTICPS_WITH_TORCH=OFF -DELASTICPS_FUZZ=ON > "$root/build-fuzz.configure.log" 2>&1 ||
    { cat "$root/build-fuzz.configure.log" >&2; exit 1; }
  cmake --build "$root/build-fuzz" -j "$(nproc)" --target fuzzers
  (cd "$root/build-fuzz" && ctest --output-on-failure -L fuzz -j 2)
else
  echo "== fuzz build skipped: clang-14 or libfuzzer-14-dev is not installed"
fi
echo "== sanitizer build (ASan + UBSan): libtorch-free unit tests"
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 2 "$@")
echo "== release build: every test"
cd "$root/build" && ctest --output-on-failure -j 2 --timeout 900 "$@"
