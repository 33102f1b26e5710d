// In-memory image classification data sets and the IDX reader that loads them.
//
// A Dataset is a plain value: the worker reads it once at start-up and every
// virtual worker it hosts reads microbatches from it by sample index (see
// worker/sampler.h). No libtorch here: the torch adapter (worker/model_runner.h)
// wraps the vectors without copying them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

// An in-memory image classification data set: images as normalized float32,
// row-major [size, rows, cols], and one class label per image.
// Thread-compatible value type; concurrent readers of a const Dataset are safe.
struct Dataset {
  int64_t size = 0;
  int64_t rows = 0, cols = 0;
  std::vector<float> images;    // size * rows * cols values
  std::vector<int64_t> labels;  // size values
};

// The normalization every pixel p (0..255) gets: (p/255 - mean)/std with the
// Fashion-MNIST mean and standard deviation.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;
inline float NormalizePixel(uint8_t p) {
  return (static_cast<float>(p) / 255.0f - kPixelMean) / kPixelStd;
}

// Reads an IDX image file (magic 0x00000803, [n, rows, cols] unsigned bytes) and
// an IDX label file (magic 0x00000801, [n] unsigned bytes), each gzip-compressed
// or plain, and keeps the first `limit` samples if limit > 0 (all of them
// otherwise). Pixels become NormalizePixel(p).
//
// Errors (never a crash, whatever the files hold):
//   NotFound         a file does not exist or cannot be opened.
//   InvalidArgument  wrong magic (not an IDX file of that kind), absurd
//                    dimensions, image and label counts that differ.
//   DataLoss         a file ends before its header says it should, or its gzip
//                    stream is corrupt.
[[nodiscard]] StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                               const std::string& labels_path, int64_t limit);

}  // namespace eps
