#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest:
# unit tests, multi-process integration tests, and the libtorch-free
# components' unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   scripts/test.sh [extra ctest arguments, e.g. -R Digest]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --sanitize
export OMP_WAIT_POLICY=passive
echo "== sanitizer build (ASan + UBSan): libtorch-free unit tests"
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 2 "$@")
echo "== release build: every test"
cd "$root/build" && ctest --output-on-failure -j 2 --timeout 900 "$@"
