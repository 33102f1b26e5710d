// A job's export as a ServedModel (serve/served_model.h): the model
// `elasticps predict` runs (OpenExportedModel, models/exported_model.h), on
// the CPU, in eval mode. The API and its TU are libtorch-free; the library
// links libtorch (eps_serve_torch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "serve/served_model.h"

namespace eps {

struct TorchModelOptions {
  std::string path;  // model.script.pt, or a built-in model's model.safetensors / model.pt
  std::string arch;  // the built-in model a model.pt holds (as predict's --arch)
  // A TorchScript job's model.safetensors: the module that runs it
  // (ExportedModelOptions::script; "": the job's own).
  std::string script;
  // The job's vocabulary for a text model; "" : the vocab.json beside `path`
  // when there is one.
  std::string vocab;
  int threads = 1;  // libtorch intra-op threads (the job's --threads: bits depend on it)
  // One instance's shape; empty: {1, 28, 28} (the built-in image models, and
  // a TorchScript module's default), or {seq_len} token ids with a vocabulary.
  std::vector<int64_t> input_shape;
  // A TorchScript module's instances: "float32" (also ""), or "int64" ids (>= 0).
  std::string input_dtype;
  bool raw = false;  // the model's outputs, not a classifier's classes and probabilities
};

// Reads and opens the export, hashes its bytes, and runs one instance of zeros
// through it, so that a model that does not take the input shape is refused
// before it serves. InvalidArgument / NotFound naming the flag.
[[nodiscard]] StatusOr<std::shared_ptr<const LoadedModel>> LoadTorchModel(
    const TorchModelOptions& options);

}  // namespace eps
