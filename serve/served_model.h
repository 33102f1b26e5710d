// The model `elasticps serve` serves, behind a libtorch-free interface: the
// HTTP layer and the batching queue never see a torch type, and tests serve
// a fake. serve/torch_model.h opens a job's export as one.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "serve/request.h"

namespace eps {

// One model that runs batches. Not thread-safe: the server's inference thread
// is its only caller once it serves (a model loading for a swap runs on the
// loading thread until it is handed over).
class ServedModel {
 public:
  virtual ~ServedModel() = default;
  // What one instance is; constant.
  virtual const ModelInput& input() const = 0;
  // One forward pass over every instance of `batch` (as `elasticps predict
  // --batch N` over those N samples: the same bits). InvalidArgument when the
  // instances do not fit the model (the server answers 400), another code for
  // a failure of the model (500).
  [[nodiscard]] virtual StatusOr<BatchOutputs> Predict(const Instances& batch) = 0;
  // The class names (a text model's vocabulary labels), or null.
  virtual const std::vector<std::string>* labels() const { return nullptr; }
};

// A loaded model and what identifies it. Immutable once made (the model
// itself is the inference thread's).
struct LoadedModel {
  std::shared_ptr<ServedModel> model;
  std::string file;                             // the export it was read from
  std::string sha256;                           // of that file's bytes
  std::map<std::string, std::string> metadata;  // the export's: job_id, steps, params_sha256, ...
};

}  // namespace eps
