#include "data/model_input.h"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "common/layout.h"
#include "data/criteo.h"

namespace eps {

bool IsBuiltinModel(const std::string& model) {
  return model == "mlp" || model == "cnn" || model == "cnn_bn" || model == "resnet" ||
         TakesIds(model);
}

namespace {

// The ZooSizes members by flag name, but num_classes (not a flag).
std::vector<std::pair<const char*, uint32_t ZooSizes::*>> SizeFields() {
  return {{"model_dim", &ZooSizes::dim},     {"model_layers", &ZooSizes::layers},
          {"model_heads", &ZooSizes::heads}, {"model_depth", &ZooSizes::depth},
          {"seq_len", &ZooSizes::seq_len},   {"vocab_size", &ZooSizes::vocab_size}};
}

}  // namespace

std::map<std::string, std::string> ZooSizesMetadata(const ZooSizes& sizes) {
  std::map<std::string, std::string> out;
  for (const auto& [name, field] : SizeFields()) out[name] = std::to_string(sizes.*field);
  return out;
}

StatusOr<ZooSizes> ZooSizesFromMetadata(const std::map<std::string, std::string>& metadata) {
  ZooSizes sizes;
  for (const auto& [name, field] : SizeFields()) {
    auto it = metadata.find(name);
    if (it == metadata.end()) continue;
    const std::string& v = it->second;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    // vocab_size 0: a table of unbounded keys (dlrm's with --hash_buckets=0).
    const bool zero_ok = field == &ZooSizes::vocab_size;
    if (v.empty() || v[0] == '-' || *end != '\0' || errno != 0 || (n == 0 && !zero_ok) ||
        n > UINT32_MAX) {
      return InvalidArgument(std::string("the metadata's ") + name + " '" + v +
                             "' is not a positive 32-bit number");
    }
    sizes.*field = static_cast<uint32_t>(n);
  }
  return sizes;
}

Status CheckZooSizes(const std::string& model, const ZooSizes& sizes) {
  if (model == "resnet" && (sizes.depth < 8 || sizes.depth > 1202 || (sizes.depth - 2) % 6 != 0)) {
    return InvalidArgument("--model_depth=" + std::to_string(sizes.depth) +
                           ": a resnet has 6n+2 layers (8, 14, 20, 32, 44, 56, ..., 1202)");
  }
  return OkStatus();
}

bool IsTextModel(const std::string& model) {
  return model == "text_transformer" || model == "text_hashed";
}

bool TakesIds(const std::string& model) { return IsTextModel(model) || model == "dlrm"; }

bool HashesItsIds(const std::string& model) { return model == "dlrm" || model == "text_hashed"; }

Status CheckTextModelInput(const Dataset& data, const ZooSizes& sizes) {
  if (data.feature_dtype != DataType::kInt64 || data.sample_shape.size() != 1 ||
      data.sample_shape[0] != static_cast<int64_t>(sizes.seq_len)) {
    return InvalidArgument("the text models take int64 token ids of [seq_len=" +
                           std::to_string(sizes.seq_len) +
                           "] (--data_format=tsv or jsonl), the data set's samples are " +
                           std::string(DataTypeName(data.feature_dtype)) + " of rank " +
                           std::to_string(data.sample_shape.size()));
  }
  if (data.label_dtype != DataType::kInt64 || !data.label_shape.empty())
    return InvalidArgument("the text models take one integer class per sample");
  if (data.num_classes > static_cast<int64_t>(sizes.num_classes)) {
    return InvalidArgument("the text model has " + std::to_string(sizes.num_classes) +
                           " classes, the data set has " + std::to_string(data.num_classes));
  }
  if (data.size < 0 || (data.size > 0 && (data.features == nullptr || data.labels == nullptr)))
    return InvalidArgument("inconsistent data set");
  const auto* ids = static_cast<const int64_t*>(data.features);
  // A table of unbounded keys (vocab_size 0: text_hashed's keys) takes every int64 id but the
  // largest.
  const int64_t rows =
      sizes.vocab_size == 0 ? kUnboundedRows : static_cast<int64_t>(sizes.vocab_size);
  for (int64_t i = 0; i < data.size * data.SampleElems(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return InvalidArgument(
          "token id " + std::to_string(ids[i]) + " of sample " +
          std::to_string(i / data.SampleElems()) + " is outside [0, " +
          "--vocab_size (or --hash_buckets)=" + std::to_string(sizes.vocab_size) + ")");
    }
  }
  return OkStatus();
}

Status CheckCriteoModelInput(const Dataset& data, const ZooSizes& sizes) {
  if (data.feature_dtype != DataType::kInt64 || data.sample_shape.size() != 1 ||
      data.sample_shape[0] != kCriteoFeatures) {
    return InvalidArgument("dlrm takes Criteo samples, int64 of [" +
                           std::to_string(kCriteoFeatures) +
                           "] (--data_format=criteo), the data set's are " +
                           std::string(DataTypeName(data.feature_dtype)) + " of rank " +
                           std::to_string(data.sample_shape.size()));
  }
  if (data.label_dtype != DataType::kInt64 || !data.label_shape.empty() || data.num_classes > 2)
    return InvalidArgument("dlrm takes one class per sample, 0 or 1");
  if (data.size < 0 || (data.size > 0 && (data.features == nullptr || data.labels == nullptr)))
    return InvalidArgument("inconsistent data set");
  const auto* x = static_cast<const int64_t*>(data.features);
  // A table of unbounded keys (vocab_size 0) takes every int64 id but the largest.
  const int64_t rows =
      sizes.vocab_size == 0 ? kUnboundedRows : static_cast<int64_t>(sizes.vocab_size);
  for (int64_t s = 0; s < data.size; ++s) {
    for (int c = kCriteoIntegers; c < kCriteoFeatures; ++c) {
      const int64_t row = x[s * kCriteoFeatures + c];
      if (row < 0 || row >= rows) {
        return InvalidArgument("category row " + std::to_string(row) + " of sample " +
                               std::to_string(s) + " is outside [0, " + std::to_string(rows) +
                               ") (--hash_buckets=" + std::to_string(sizes.vocab_size) + ")");
      }
    }
  }
  return OkStatus();
}

Status CheckModelInputFor(const std::string& model, const ZooSizes& sizes, const Dataset& data) {
  if (IsTextModel(model)) return CheckTextModelInput(data, sizes);
  return model == "dlrm" ? CheckCriteoModelInput(data, sizes) : CheckModelInput(data);
}

Status CheckModelInput(const Dataset& data) {
  const std::vector<int64_t>& shape = data.sample_shape;
  const bool images = (shape.size() == 3 && shape[0] == 1 && shape[1] == kImageSide &&
                       shape[2] == kImageSide) ||
                      (shape.size() == 2 && shape[0] == kImageSide && shape[1] == kImageSide) ||
                      (shape.size() == 1 && shape[0] == kImageSide * kImageSide);  // CSV pixels
  auto dims = [&shape] {
    std::string s;
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
    return s.empty() ? std::string("scalar") : s;
  };
  if (!images) {
    return InvalidArgument("the built-in models (mlp, cnn, cnn_bn) take 28x28 samples (1x28x28, "
                           "28x28, or 784 values as in a CSV row), the data set's are " + dims());
  }
  if (data.feature_dtype != DataType::kFloat32) {
    return InvalidArgument(std::string("the built-in models take float32 samples, the data "
                                       "set's are ") + DataTypeName(data.feature_dtype));
  }
  if (data.label_dtype != DataType::kInt64 || !data.label_shape.empty()) {
    return InvalidArgument("the built-in models take one integer class per sample, the data "
                           "set's labels are " + std::string(DataTypeName(data.label_dtype)) +
                           (data.label_shape.empty() ? "" : " arrays"));
  }
  if (data.num_classes > kNumClasses) {
    return InvalidArgument("the built-in models have 10 classes, the data set's labels go up to " +
                           std::to_string(data.num_classes - 1));
  }
  if (data.size < 0 || (data.size > 0 && (data.features == nullptr || data.labels == nullptr))) {
    return InvalidArgument("inconsistent data set: size " + std::to_string(data.size) +
                           " without its features or labels");
  }
  return OkStatus();
}

}  // namespace eps
