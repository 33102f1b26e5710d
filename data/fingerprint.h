// Fingerprints of data files: cheap enough to take at every worker's start,
// strong enough to tell two different files apart in practice.
//
// A file's fingerprint is SHA-256 over its size and a fixed sample of its
// bytes: the first and the last MiB (every header there is), and 64 blocks of
// 4 KiB evenly spaced in between; a file of at most 2.25 MiB is hashed whole.
// It reads at most 2.25 MiB per file, whatever its size. It catches another
// file, a truncated or extended one, a changed header (shape, dtype, column
// names), and changes inside the sampled blocks; it misses a change of the same
// size that falls wholly between the sampled blocks of a file over 2.25 MiB
// (e.g. one edited pixel). docs/data.md says so.
//
// A data set's fingerprint lists its files, one line each:
//   "<role> size=<bytes> sha256=<64 hex digits> <path>"
// (role: "train_data", "train_labels", "test_data", "test_labels"). The path is
// there for messages; comparisons ignore it (hosts may mount the data
// elsewhere). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace eps {

// How ErrorReply messages refusing a worker's data begin: the worker tells
// this refusal from others by it (and exits 5, docs/operations.md).
inline constexpr char kDataMismatch[] = "data mismatch: ";

// The sampled SHA-256 of one file (above), hex. NotFound if it cannot be read.
[[nodiscard]] StatusOr<std::string> FileSha256Sample(const std::string& path, int64_t* size);

// One line of a data set's fingerprint for `path` in `role`.
[[nodiscard]] StatusOr<std::string> FingerprintFile(const std::string& role,
                                                    const std::string& path);

// OK if `worker`'s fingerprint lists the same files (roles, sizes, digests) as
// `job`'s; otherwise FailedPrecondition starting with kDataMismatch that names
// the first file that differs, both sizes and digests. A fingerprint that is
// not in the format above differs from every other.
[[nodiscard]] Status CompareFingerprints(const std::string& job, const std::string& worker);

}  // namespace eps
