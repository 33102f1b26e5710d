// Data sets from the files users have: a generic in-memory (or memory-mapped)
// table of samples, the readers of each format, and the opener that picks one.
//
// A Dataset is a small value: the worker opens its files once at start-up and
// every virtual worker it hosts reads microbatches from it by sample index
// (worker/sampler.h). Copies share the storage (`source`), which is never
// written after the open; concurrent readers of a Dataset are safe. No
// libtorch here: the torch views are models/models.h's FeatureRows/LabelRows.
// docs/data.md describes the formats, the errors and the fingerprint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

class Vocabulary;  // data/text.h

// Element types of features and labels.
enum class DataType { kFloat32, kUInt8, kInt64 };
size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);  // "float32", "uint8", "int64"

// What owns a data set's bytes (vectors, or a read-only mapping of its files)
// and remembers the files it came from. Thread-safe (const).
class DataSource {
 public:
  virtual ~DataSource() = default;
  // OK while every file the data set was read from is the one it was at the
  // open (same inode, size and modification time); FailedPrecondition naming
  // the file otherwise. A few stat calls: cheap enough once per plan.
  [[nodiscard]] virtual Status CheckUnchanged() const = 0;
};

struct Dataset {
  int64_t size = 0;                  // samples
  std::vector<int64_t> sample_shape;  // one sample's features: {1, 28, 28}, {n_features}, ...
  DataType feature_dtype = DataType::kFloat32;
  const void* features = nullptr;    // size * SampleElems() elements, row-major
  DataType label_dtype = DataType::kInt64;  // kInt64: classes; kFloat32: regression targets
  std::vector<int64_t> label_shape;   // one sample's label: {} for a class
  const void* labels = nullptr;      // size * LabelElems() elements
  int64_t num_classes = 0;           // kInt64 labels: 1 + the largest (none is negative)
  int64_t truncated = 0;             // text data (data/text.h): samples cut to seq_len
  // What identifies the files (data/fingerprint.h's encoding); "" for data
  // made in memory.
  std::string fingerprint;
  std::shared_ptr<const DataSource> source;  // owns `features` and `labels`

  int64_t SampleElems() const;  // product of sample_shape
  int64_t LabelElems() const;   // product of label_shape (1 for {})
  // The label of sample i as an integer class; valid for kInt64 labels only.
  int64_t ClassOf(int64_t i) const { return static_cast<const int64_t*>(labels)[i]; }
  // OK if the data set is unchanged on disk (DataSource::CheckUnchanged); OK without a source.
  [[nodiscard]] Status CheckUnchanged() const;
};

// A data set built from vectors (tests, programs that make their own data):
// features row-major [n, sample_shape...] as float32, one int64 class per
// sample. InvalidArgument if the sizes disagree or a label is negative.
[[nodiscard]] StatusOr<Dataset> MakeDataset(std::vector<int64_t> sample_shape,
                                            std::vector<float> features,
                                            std::vector<int64_t> labels);

// The normalization every IDX pixel p (0..255) gets: (p/255 - mean)/std with
// the Fashion-MNIST mean and standard deviation.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;
inline float NormalizePixel(uint8_t p) {
  return (static_cast<float>(p) / 255.0f - kPixelMean) / kPixelStd;
}

// Reads an IDX image file (magic 0x00000803, [n, rows, cols] unsigned bytes) and
// an IDX label file (magic 0x00000801, [n] unsigned bytes), each gzip-compressed
// or plain, and keeps the first `limit` samples if limit > 0 (all of them
// otherwise). Samples are float32 {1, rows, cols}, each pixel NormalizePixel(p);
// labels int64 classes.
//
// Errors (never a crash, whatever the files hold):
//   NotFound         a file does not exist or cannot be opened.
//   InvalidArgument  wrong magic (not an IDX file of that kind), absurd
//                    dimensions, image and label counts that differ.
//   DataLoss         a file ends before its header says it should, or its gzip
//                    stream is corrupt.
[[nodiscard]] StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                               const std::string& labels_path, int64_t limit);

// Reads two NPY files (numpy.save, format 1.0, 2.0 or 3.0, C order): features
// [n, ...] of '<f4', '|u1' or '<i8' and labels [n, ...] of '<i8' or '|u1'
// (int64 classes) or '<f4' (float32 targets). The files are mapped read-only
// and shared (MADV_RANDOM): a worker touches only the pages of the samples it
// reads. uint8 labels are widened into memory; int64 labels are scanned once
// (a negative one is refused). Keeps the first `limit` samples if limit > 0.
//   NotFound         a file does not exist.
//   InvalidArgument  not an NPY file, an unsupported or big-endian dtype,
//                    fortran_order, a malformed header, a shape whose bytes do
//                    not match the file's size, feature and label counts that
//                    differ, no samples, a negative label.
//   DataLoss         a file shorter than its header or its shape say.
[[nodiscard]] StatusOr<Dataset> ReadNpyDataset(const std::string& features_path,
                                               const std::string& labels_path, int64_t limit);

// Reads a CSV file with a header row of column names and numeric cells: the
// column named `label_column` holds the labels, every other column is a
// float32 feature (sample shape {n_features}). Integer-valued labels become
// int64 classes (a negative one is refused), any other float32 targets.
// Lines may end in CRLF; empty lines are skipped; cells may be quoted.
//   NotFound         the file does not exist.
//   InvalidArgument  an empty file, a header without the label column or
//                    without feature columns, a row with another number of
//                    cells than the header (line and counts named), a cell
//                    that is not a finite number (line, column and text named),
//                    no data rows.
[[nodiscard]] StatusOr<Dataset> ReadCsvDataset(const std::string& path,
                                               const std::string& label_column, int64_t limit);

// The files of one data set and how to read them.
struct DataFiles {
  std::string role;      // "train" or "test": names the files in messages and fingerprints
  std::string features;  // the features file (CSV: the whole table)
  std::string labels;    // the labels file (empty for CSV)
  // "idx", "npy", "csv", "tsv", "jsonl", "criteo" (data/criteo.h), or "" for
  // the features file's extension: .npy, .csv, .tsv, .jsonl, .gz or a name
  // ending in "-ubyte" (IDX).
  std::string format;
  std::string label_column = "label";  // CSV, TSV, JSONL
  std::string text_column = "text";    // TSV, JSONL
  // TSV, JSONL: the vocabulary that tokenizes the text (data/text.h); a text
  // data set cannot be opened without one.
  std::shared_ptr<const Vocabulary> vocab;
  int64_t limit = 0;                   // keep the first `limit` samples if > 0
  uint64_t hash_buckets = 0;           // criteo: the categories' table rows (--hash_buckets)
};

// The format `files` are read as ("idx", "npy", "csv", "tsv", "jsonl" or "criteo"); InvalidArgument
// for an unknown --data_format or an extension that does not say.
[[nodiscard]] StatusOr<std::string> DataFormatOf(const DataFiles& files);

// Reads the data set in its format and fingerprints its files
// (data/fingerprint.h). Errors: the reader's, with the role in front.
[[nodiscard]] StatusOr<Dataset> OpenDataset(const DataFiles& files);

}  // namespace eps
