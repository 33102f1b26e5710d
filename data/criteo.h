// Criteo-format click logs (the Criteo 1 TB / Kaggle Display Advertising
// layout): one sample per line, 40 tab-separated fields: the label (0 or 1),
// 13 integer features, 26 categorical features as hexadecimal values (8 digits
// in Criteo's files); any feature may be empty (missing). libtorch-free,
// thread-safe (no shared state). docs/data.md ("Criteo") describes the format.
//
// A sample becomes 39 int64 features: the 13 integers as they are (missing: 0)
// and the 26 categories hashed into [1, buckets) with their column, so that
// the same value in two columns takes two rows of one shared table (missing:
// 0). A model takes the integers as its dense input and the ids as rows of a
// sparse=True embedding of `buckets` rows (examples/criteo/). Buckets 0: the
// categories keep 63-bit keys, [1, 2^63 - 1), rows of a table of unbounded
// keys (the built-in dlrm's with --hash_buckets=0, models/dlrm.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "data/dataset.h"

namespace eps {

constexpr int kCriteoIntegers = 13;
constexpr int kCriteoCategories = 26;
constexpr int kCriteoFeatures = kCriteoIntegers + kCriteoCategories;

// The row of category `value` of categorical column `column` (0..25) in a
// table of `buckets` rows (>= 2, or 0: 2^63 - 1): 1 + SplitMix64(value ^
// (column + 1) * 0x9E3779B97F4A7C15) % (buckets - 1). Row 0 is the missing
// value's.
int64_t CriteoCategoryRow(int column, uint64_t value, uint64_t buckets);

// A sample's 39 features from `line`, its 39 tab-separated fields without
// the label (13 integers, 26 categories), as ReadCriteoDataset makes them:
// what `elasticps serve` takes as a dlrm instance. InvalidArgument naming the
// field (1-based) that is wrong, or the count of fields.
[[nodiscard]] Status ParseCriteoFeatures(std::string_view line, uint64_t buckets, int64_t* out);

// Reads a Criteo-format file (LF or CRLF endings, empty lines skipped), the
// first `limit` samples if limit > 0: int64 features of shape {39}, int64
// classes 0/1 (num_classes 2).
//   NotFound         the file does not exist.
//   InvalidArgument  buckets 1, an empty file, a line with another number of
//                    fields than 40, a label other than 0 or 1, an integer
//                    feature that is not a decimal int64, a category that is
//                    not 1 to 16 hexadecimal digits; each naming file and line
//                    (and the column, 1-based as in the file).
[[nodiscard]] StatusOr<Dataset> ReadCriteoDataset(const std::string& path, uint64_t buckets,
                                                  int64_t limit);

}  // namespace eps
