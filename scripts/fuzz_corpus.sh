#!/usr/bin/env bash
# Rewrites the fuzz targets' seed corpus (fuzz/corpus/) from real messages, with
# fuzz/write_corpus.cc built in build-fuzz/ (scripts/test.sh configures it).
# Inputs added by hand (fuzz/corpus/*/crash-* and timeout-*: regressions) are kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmake --build "$root/build-fuzz" --target write_corpus
for t in decode shard job_state; do
  find "$root/fuzz/corpus/$t" -maxdepth 1 -type f ! -name 'crash-*' ! -name 'timeout-*' -delete 2>/dev/null || true
done
"$root/build-fuzz/bin/write_corpus" "$root/fuzz/corpus"
du -sh "$root/fuzz/corpus"
