// The KServe / TensorFlow Serving V1 REST bodies of `elasticps serve`
// (docs/serving.md): a predict request's instances, parsed and checked
// against what the model takes, and the JSON the server answers with.
// Torch-free: the HTTP threads parse and format, the inference thread only
// runs the model. Pure functions; the types are thread-compatible values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/text.h"

namespace eps {

// What one instance of the served model is.
struct ModelInput {
  // One instance's shape: {1, 28, 28} for the built-in image models, {seq_len}
  // for a text model's token ids.
  std::vector<int64_t> sample_shape;
  DataType dtype = DataType::kFloat32;  // kFloat32 features, or kInt64 token ids
  // Text models: a string instance is tokenized with it (Vocabulary::Encode),
  // and its labels name the classes. Null for the others.
  std::shared_ptr<const Vocabulary> vocab;
  int64_t max_id = 0;  // kInt64: every token id is below it (0: not checked)
  int64_t min_id = 0;  // kInt64: and at least it (dlrm's integers take any sign)
  // dlrm: a string instance is a Criteo sample's 39 tab-separated fields
  // without its label, its categories hashed into these rows (0: 63-bit keys)
  // as the job hashed them (ParseCriteoFeatures, data/criteo.h). Unset for the
  // others.
  std::optional<uint64_t> criteo_buckets;

  int64_t SampleElems() const;
  std::string ShapeText() const;  // "[1, 28, 28]"
};

// The instances of a request, or of a batch of requests: `count` samples,
// row-major, in `floats` (kFloat32) or `ids` (kInt64).
struct Instances {
  int64_t count = 0;
  std::vector<float> floats;
  std::vector<int64_t> ids;
  void Append(const Instances& other);
};

// Parses a predict request body, {"instances": [...]}, each instance a sample
// as the model takes it: for float input a (nested) list of numbers whose
// shape is `sample_shape`, that shape without its leading 1s, or flat (its
// element count); for token ids a list of sample_shape's ints or, with a
// vocabulary, a string (for dlrm, a Criteo sample's fields). InvalidArgument with the reason
// (malformed JSON, no "instances" list, none or more than `max_instances`, an instance of another
// shape or type, naming it by index); the request is then refused whole.
[[nodiscard]] StatusOr<Instances> ParsePredictRequest(std::string_view body,
                                                      const ModelInput& input,
                                                      int64_t max_instances);

// A batch's outputs: `rows` samples, each of `row_shape` (the model's output
// shape less its first dimension) in `values`; for a classifier (an output of
// [rows, C]) also each row's softmax in `probabilities` (empty otherwise).
struct BatchOutputs {
  int64_t rows = 0;
  std::vector<int64_t> row_shape;
  std::vector<float> values;
  std::vector<float> probabilities;
  int64_t RowElems() const;
};

// {"predictions": [...]} for rows [first, first + count) of `outputs`: a
// classifier's {"class": arg-max, "label": (when `labels` names the
// classes), "probabilities": [...]} each, else each row's outputs as a
// (nested) list. Floats are written with 9 significant digits (%.9g), which
// read back as the same float32 bits; a value that is not finite as null.
std::string FormatPredictions(const BatchOutputs& outputs, int64_t first, int64_t count,
                              const std::vector<std::string>* labels);

// {"error": "<message>"}, the message escaped as JSON.
std::string ErrorBody(const std::string& message);

}  // namespace eps
