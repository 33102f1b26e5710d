// The network behind a ModelRunner (models/model_runner.h): a small interface
// over the two kinds of model a job can name, so the runner's logic (gradient
// hooks, buffers, GPU mirrors, the dry run) is written once.
//   SequentialNet  a built-in model of the zoo (models/models.h).
//   LoadScriptNet  a TorchScript module a user saved from Python
//                  (models/script_net.cc, docs/models.md).
//
// Internal to models/'s libtorch translation units (it includes torch). Not
// thread-safe; the runner owns its Net.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/model_input.h"

namespace eps {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class Net {
 public:
  virtual ~Net() = default;
  // The module's own tensors (not copies), in its order: writing into one
  // changes the model.
  virtual NamedTensors NamedParameters() = 0;
  virtual NamedTensors NamedBuffers() = 0;
  // The weights of the module's nn.Embedding / nn.EmbeddingBag modules, by
  // their names as NamedParameters gives them, each with whether the module
  // was created with sparse=True (its gradient then names the rows a step
  // touched).
  virtual std::vector<std::pair<std::string, bool>> EmbeddingWeights() { return {}; }
  // The rows of each sparse=True embedding weight (by its name as
  // NamedParameters gives it) that forward reads for the batch `x` (Input's),
  // as int64 tensors of any shape, where the net can say: the zoo's models
  // (ZooTableIds, models/models.h), and a TorchScript module that defines
  // table_ids(x) -> Dict[str, Tensor]. A net that cannot (HasTableIds false)
  // has its tables held whole by the worker.
  virtual bool HasTableIds() const { return false; }
  virtual std::vector<std::pair<std::string, torch::Tensor>> TableIds(const torch::Tensor& x) {
    (void)x;
    return {};
  }
  // `x` with the ids TableIds(x) gives of the tables `ids` names replaced by those (the same
  // shapes), where the net can: the zoo's models (ZooWithTableIds, models/models.h), and a
  // TorchScript module that defines table_ids and with_table_ids(x, ids: Dict[str, Tensor]) ->
  // Tensor. The worker then looks a table up into a compact weight (models/lookup_tables.h).
  virtual bool RewritesTableIds() const { return false; }
  virtual torch::Tensor WithTableIds(const torch::Tensor& x, const NamedTensors& ids) {
    (void)ids;
    return x;
  }
  // What the data set's samples must be for this net: the built-in models'
  // images (CheckModelInput, data/model_input.h), anything for a module the
  // dry run has checked against them. InvalidArgument saying what differs.
  virtual Status CheckData(const Dataset& data) const = 0;
  // A built-in model of the zoo (10 classes), not a user's module.
  virtual bool builtin() const = 0;
  // A batch of samples as forward takes it: the built-in models see images
  // [b, 1, 28, 28]; a module gets the rows as the file holds them ([b, ...]
  // of the sample shape, in the file's dtype).
  virtual torch::Tensor Input(const torch::Tensor& features) const = 0;
  virtual torch::Tensor Forward(const torch::Tensor& x) = 0;
  // Once `*cancel` is true (null: never), Forward throws StepCancelled between two of the
  // model's layers where it can (the built-in models: between the modules of their Sequential;
  // a TorchScript module runs its forward to the end), so that a worker asked to leave gives its
  // core back within a layer (ModelOptions::cancel).
  virtual void SetCancel(const std::atomic<bool>* cancel) { (void)cancel; }
  // The training loss of `output` against `target`: what the module defines
  // (a TorchScript module's loss(output, target) method), else DefaultLoss.
  // May be of any shape: the runner checks that it is a scalar.
  virtual torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) = 0;
  virtual void Train(bool on) = 0;
  virtual void To(const torch::Device& device) = 0;
};

// Thrown by a Net's Forward or the runner's gradient hooks when the cancel flag is set.
struct StepCancelled : std::exception {
  const char* what() const noexcept override { return "the step was cancelled"; }
};

// Cross-entropy averaged over the batch for int64 targets (classes), mean
// squared error for floating-point targets.
torch::Tensor DefaultLoss(const torch::Tensor& output, const torch::Tensor& target);

// `name` and `sizes` (MakeModel's) say what input it takes (CheckModelInputFor).
std::unique_ptr<Net> SequentialNet(torch::nn::Sequential model, const std::string& name = "mlp",
                                   const ZooSizes& sizes = {});

// Loads a TorchScript archive (torch.jit.save's bytes) on the CPU. Before
// that, turns the JIT's graph optimization and fusers off for the whole
// process (DisableJitOptimization). InvalidArgument for bytes libtorch cannot
// load, a module without forward, a loss method that does not take
// (output, target).
[[nodiscard]] StatusOr<std::unique_ptr<Net>> LoadScriptNet(const std::string& bytes);

// Turns off, process-wide, what would make a TorchScript module compute
// differently on a later call than on the first: the profiling executor's
// re-optimization after a few runs (autodiff subgraphs, fusion) and the
// TensorExpr / legacy fusers. A late joiner then computes the same bits as a
// worker that has run the module a thousand times. Idempotent.
void DisableJitOptimization();

// Whether DisableJitOptimization is in effect (for tests).
bool JitOptimizationDisabled();

}  // namespace eps
