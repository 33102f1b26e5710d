// A job's exported model, opened for inference: what `elasticps predict`
// (tools/predict_main.cc) and `elasticps serve` (serve/) run. One function
// turns an export file into a ModelRunner, so that both compute the same
// forward on the same weights; one more gives a classifier's probabilities as
// predict writes them (libtorch's softmax, the same bits).
//
// The export is a model.script.pt (a TorchScript module with its weights), or
// the model.safetensors / model.pt (a state dict) of a built-in model, whose
// name `arch` gives or, for safetensors, the file's __metadata__ "model", or
// the model.safetensors of a TorchScript job, whose weights (and table files)
// the job's module runs: `script`'s, else the module file the metadata names,
// which must still have the SHA-256 the job recorded ("model_sha256"). A job
// whose table left as a table file has no model.script.pt: this is how it
// runs. The API is libtorch-free; the library (eps_exported_model) links
// libtorch.
// Thread-compatible functions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/text.h"
#include "models/model_runner.h"

namespace eps {

struct ExportedModelOptions {
  std::string path;  // the export file (--model)
  std::string
      arch;  // the built-in model a model.pt / model.safetensors holds ("": safetensors' own)
  int threads = 1;  // libtorch intra-op threads (a job's --threads: bits depend on it)
  // A TorchScript job's model.safetensors: the module file whose code runs
  // its weights (--script; "": the job's own, as its metadata names it).
  // Checked by its tensors' names and shapes, not by its bytes.
  std::string script;
  // Text models: the job's vocabulary, which gives the classes and the sample
  // length (null for the others).
  const Vocabulary* vocab = nullptr;
};

// The model of `options.path` in a ModelRunner, its weights loaded.
// InvalidArgument naming --model, --arch or --script (a file of none of the
// kinds, a state dict without --arch, tensors that differ from the model's, a
// job's module file that changed since the job); NotFound for a missing file.
[[nodiscard]] StatusOr<std::unique_ptr<ModelRunner>> OpenExportedModel(
    const ExportedModelOptions& options);

// Row-wise softmax of `n` rows of `width` float32 logits, as libtorch computes
// it (torch::softmax over dim 1): the probabilities `elasticps predict` writes.
std::vector<float> SoftmaxRows(const float* logits, int64_t n, int64_t width);

}  // namespace eps
