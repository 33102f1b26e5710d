// The torch adapter: hosts one libtorch model in a worker process and runs
// virtual-worker steps on it, one after another, on the CPU or on one CUDA GPU.
//
// This header is libtorch-free on purpose (libtorch dominates compile time):
// tensors are exposed as contiguous host memory described by TensorSpec, so the
// runtime copies chunks of parameters, buffers and gradients in and out without
// seeing a torch type. Only models/'s libtorch library (eps_torch_model:
// model_runner.cc, the model zoo models/models.h) and the binaries that link it
// (worker, eps_predict, baseline) include torch headers; every c10::Error
// thrown by libtorch is caught there and returned as a Status.
//
// Determinism: Create seeds the default CPU generator with init_seed before it
// builds the model (on the CPU, so every device starts from the same weights),
// and TrainStep reseeds the CPU and CUDA generators with the step's key before
// the forward pass, so parameters and gradients are a pure function of
// (options, weights, buffers, samples, key) at a fixed intra-op thread count on
// the CPU, or on one GPU model with deterministic kernels (PrepareDevice in
// models/models.h).
//
// On a CUDA device the model lives on the GPU and the host side holds pinned
// mirrors: Write copies each chunk into the mirror and starts its upload at
// once on a side stream, so a pull's chunks go up while the next ones arrive;
// TrainStep makes the compute wait for those uploads, and after backward
// copies the gradients (and the buffers a step changed) into pinned host
// memory on the side stream, which it waits for before returning. Device
// memory holds one model and one set of gradients whatever the number of VWs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu_kernels.h"
#include "common/layout.h"
#include "common/status.h"
#include "common/transfer.h"
#include "data/dataset.h"
#include "data/model_input.h"

namespace eps {

// The cuBLAS workspace setting deterministic GPU runs need; a process that may
// compute on a GPU sets CUBLAS_WORKSPACE_CONFIG to it in main(), before any
// cuBLAS call (library code reads no environment).
constexpr char kCublasWorkspaceConfig[] = ":4096:8";

// True when the worker was compiled against a CUDA libtorch (EPS_WITH_CUDA).
bool BuildHasCuda();

// The kind of device `device` ("cpu", "cuda" or "cuda:N") names, as workers
// report it to the coordinator: "cpu", or "cuda:<GPU name>" (bits are
// reproducible only within one kind). InvalidArgument for a malformed name and
// for any cuda device in a build without CUDA; FailedPrecondition when the GPU
// is not there.
[[nodiscard]] StatusOr<std::string> DeviceKind(const std::string& device);

// The CPU kernels in effect in this process (common/cpu_kernels.h): OpenBLAS's
// and oneDNN's as ReadBlasAndDnnKernels finds them, and ATen's CPU capability
// as libtorch's build summary states it ("?" when it does not).
CpuKernelsInEffect ReadCpuKernels();

// For main() of a program that computes on the CPU, before it computes: makes
// the process run the kernel set `name` (ApplyCpuKernels, which executes the
// program again with `argv` when the environment does not select the set yet)
// and returns what it then reports (CpuKernelsReport): the set's name, or what
// runs instead because this CPU cannot run the set. `apply` false (a testing
// aid) applies nothing, as on a CPU that cannot run the set. InvalidArgument
// for an unknown name, Internal when the program could not execute again.
[[nodiscard]] StatusOr<std::string> UseCpuKernels(const std::string& name,
                                                  const std::vector<std::string>& argv,
                                                  bool apply = true);

// True once this process loaded a TorchScript model: the JIT's graph
// optimization (profiling re-optimization, autodiff subgraphs) and its fusers
// are off process-wide, so a module computes the same bits on its thousandth
// call as on its first (a late joiner's first). For tests and reports.
bool JitGraphOptimizationIsOff();

struct ModelOptions {
  // "mlp" | "cnn" | "cnn_bn" (see MakeModel in models/models.h); every model
  // takes [b, 1, 28, 28] images and has 10 classes. Ignored when `script` is set.
  std::string model;
  uint64_t init_seed = 0;      // seeds parameter initialization
  int threads = 1;             // libtorch intra-op threads: part of the job spec, bits depend on it
  std::string device = "cpu";  // "cpu" or "cuda:N" (as DeviceKind takes it)
  // A TorchScript archive (torch.jit.save's bytes, docs/models.md): the model
  // is that module, with its own weights (init_seed plays no part). Its
  // parameters and buffers are its named ones in its order; its loss is its
  // loss(output, target) method, or else cross-entropy for int64 labels and
  // MSE for float ones. Loading it turns the JIT's graph optimization and
  // fusers off for the whole process (a late joiner computes the same bits).
  std::string script{};
  ZooSizes sizes{};  // the sized models' sizes (data/model_input.h); ignored with `script`
  // Parameters (by name) that are not trained (--freeze, common/transfer.h):
  // no gradient is computed for them (requires_grad off), GradData gives
  // zeros and TrainStep's GradReady is never called for them.
  TensorSelection freeze{};
  // Transfer learning (docs/models.md): an exported model (models/init_file.h)
  // whose tensors of the same name, shape and dtype replace the initial values
  // (MatchInit, common/transfer.h), but those `reinit` selects. Create fails
  // with InvalidArgument when none matches, unless `init_allow_mismatch`.
  std::string init_file{};
  TensorSelection reinit{};
  bool init_allow_mismatch = false;
  // The weights of a module's nn.Embedding / nn.EmbeddingBag created with
  // sparse=True (not frozen, on the CPU) are sparse tables (TensorSpec::sparse,
  // docs/design.md "Sparse tables"): their gradients are the rows a step
  // touched (SparseGradient). False (--sparse_optimizer=exact): their sparse
  // gradients are made dense and they train as dense tensors.
  bool sparse_tables = true;
  // Sparse tables of more bytes than this (0: none) are looked up by the
  // batches' rows, where the model can say which rows a batch reads (the
  // zoo's models; a TorchScript module with table_ids(x)): the model holds
  // only the rows written into it (Lookup, TableRows, WriteTableRows,
  // DropTableRows). A table of unbounded keys (the zoo's built with 0 rows) is
  // always looked up.
  uint64_t lookup_table_bytes = 0;
  // Set: a TrainStep that finds it true stops (Aborted, no gradient kept) at
  // the next layer of a built-in model's forward (Net::SetCancel; a TorchScript
  // module's forward runs to its end) or the next gradient of backward, so that
  // a worker asked to leave gives its cores back within a layer, not at the end
  // of the VW (docs/serving.md, "Lending"). A block's gradients pushed before
  // are the ones any worker computes: its successor's duplicates are dropped.
  const std::atomic<bool>* cancel = nullptr;
};

// A sparse table's gradient of one step: `rows` row ids, ascending and
// distinct, and their gradient rows (rows x the table's dim floats).
struct SparseGradient {
  const int64_t* ids = nullptr;
  const float* values = nullptr;
  size_t rows = 0;
};

// Results of an evaluation pass over a range of samples.
struct EvalStats {
  int64_t count = 0;    // samples evaluated
  int64_t correct = 0;  // samples whose arg-max class is the label
  double loss_sum = 0;  // sum of per-sample cross-entropy losses
};

// Hosts one libtorch model for a worker process and runs virtual-worker steps on
// it, one after another. Owns the model, its parameters, buffers and gradients;
// the pointers it hands out stay valid for its lifetime (GradData's until the
// next TrainStep). Not thread-safe, and one per process: the libtorch thread
// count, default generators and (on a GPU) deterministic settings it sets are
// process-wide.
class ModelRunner {
 public:
  // InvalidArgument for an unknown model, a script libtorch cannot load (or
  // whose parameters are not float32, buffers not float32 / int64), threads <
  // 1 or a device DeviceKind refuses; FailedPrecondition for a GPU that is not there; Internal if
  // libtorch fails.
  [[nodiscard]] static StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelOptions& options);
  virtual ~ModelRunner() = default;

  // Parameters in named_parameters() order (kind kParameter, float32), then
  // buffers in named_buffers() order (kind kBuffer; float32, or int64 for
  // BatchNorm's num_batches_tracked, whose shape is {} with one element).
  virtual const std::vector<TensorSpec>& Tensors() const = 0;
  // Leading entries of Tensors() that are parameters.
  size_t NumParameters() const {
    size_t n = 0;
    for (const TensorSpec& t : Tensors()) n += t.kind == TensorKind::kParameter ? 1 : 0;
    return n;
  }

  // The current value of tensor i (index into Tensors()) as contiguous host
  // memory, numel * DTypeSize bytes: on the CPU the model's own storage, on a
  // GPU its pinned mirror (buffers as the last TrainStep left them). Read only;
  // change it through Write. i < Tensors().size() (a bug otherwise).
  virtual const void* Data(size_t i) const = 0;

  // Writes `bytes` bytes from `src` into tensor i at `byte_offset` (a multiple
  // of the element size; the range inside the tensor: a bug otherwise). On a GPU
  // the copy up to the device starts at once and the next TrainStep or
  // Evaluate waits for it; `src` may be reused as soon as Write returns.
  // Internal if libtorch fails.
  [[nodiscard]] virtual Status Write(size_t i, size_t byte_offset, const void* src,
                                     size_t bytes) = 0;

  // Called by TrainStep once per parameter, with its index, as soon as its
  // gradient is final: GradData(i) gives it during the call, and the memory it
  // points to holds it until the next TrainStep (so another thread may read it
  // meanwhile). On the CPU from inside backward, in the order backward
  // produces them (the last layers first), so the caller can send them on
  // while the first layers' gradients are computed; on a GPU once all are on
  // the host. Must not throw.
  using GradReady = std::function<void(size_t param)>;

  // Runs one VW's microbatch in train mode: sets all gradients to none, reseeds
  // the default CPU and CUDA generators with rng_seed (dropout draws from
  // them), forward, the model's loss (ModelOptions::script; cross-entropy
  // averaged over the microbatch for the built-in ones), backward.
  // Returns the loss once gradients and buffers are readable on the host.
  // InvalidArgument for empty or out-of-range indices, images that are not
  // 28x28, labels outside [0, 10), an inconsistent Dataset.
  [[nodiscard]] StatusOr<float> TrainStep(const Dataset& data, const std::vector<int64_t>& indices,
                                          uint64_t rng_seed) {
    return TrainStep(data, indices, rng_seed, nullptr);
  }
  // As above, calling `ready` (if set) for every parameter on the way.
  [[nodiscard]] virtual StatusOr<float> TrainStep(const Dataset& data,
                                                  const std::vector<int64_t>& indices,
                                                  uint64_t rng_seed, const GradReady& ready) = 0;

  // Checks the model against the data before a job accepts it, on the first
  // two training samples: the forward pass runs on the data's shape; its output
  // is [b, C] with C above every label (int64 labels) or has the labels' shape
  // (float labels); the loss is a scalar; and two training steps with the same
  // seed give the same loss and gradients bit for bit. InvalidArgument naming
  // the cause when something does not fit. When the two steps differ, returns
  // a warning that starts "nondeterministic module" (empty: none). Leaves
  // parameters and buffers as they were, and no gradient.
  [[nodiscard]] virtual StatusOr<std::string> DryRun(const Dataset& data) {
    (void)data;
    return std::string();
  }

  // Gradient of parameter i (i < NumParameters()) after the last TrainStep:
  // contiguous float32, numel elements; zeros for a parameter that got no
  // gradient, and before the first TrainStep. Not for a sparse table's.
  virtual const float* GradData(size_t i) const = 0;
  // A sparse table's gradient (Tensors()[i].sparse) after the last TrainStep,
  // valid until the next one: the rows it touched (none before the first).
  virtual SparseGradient SparseGrad(size_t i) const {
    (void)i;
    return {};
  }

  // The gradients of the last TrainStep, handed over: `data[i]` holds
  // GradData(i)'s values, and the runner never writes that memory again, so
  // another thread may read it while the next TrainStep runs. `owner` keeps it
  // alive. On the CPU these are backward's own tensors (no copy); on a GPU the
  // pinned host copies, the runner taking fresh ones for the next step (so
  // there GradData is unspecified until the next TrainStep).
  struct Gradients {
    std::vector<const float*> data;
    std::shared_ptr<const void> owner;
    // By parameter: a sparse table's rows (SparseGrad), nothing for the
    // others; may be shorter than `data` (no sparse table beyond).
    std::vector<SparseGradient> sparse{};
  };
  [[nodiscard]] virtual StatusOr<Gradients> TakeGradients() = 0;

  // Evaluates samples [lo, hi) in eval mode without gradients, `batch` at a time,
  // and restores train mode after. Does not change parameters or buffers.
  // InvalidArgument unless 0 <= lo <= hi <= data.size and batch > 0.
  [[nodiscard]] virtual StatusOr<EvalStats> Evaluate(const Dataset& data, int64_t lo, int64_t hi,
                                                     int64_t batch) = 0;

  // The model's outputs on samples [lo, hi) (forward only: eval mode, no
  // gradients, `batch` at a time, as Evaluate computes them), float32
  // row-major: `shape` is [hi - lo, ...] (a classifier's [n, classes]).
  // Restores train mode after; changes no parameter or buffer. The labels
  // play no part beyond Evaluate's checks of the data (CheckData).
  // InvalidArgument as Evaluate, and for a forward that fails on the data or
  // an output that is not float32 with one row per sample.
  struct Outputs {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  [[nodiscard]] virtual StatusOr<Outputs> Predict(const Dataset& data, int64_t lo, int64_t hi,
                                                  int64_t batch) {
    (void)data, (void)lo, (void)hi, (void)batch;
    return Unimplemented("this model runner does not predict");
  }

  // Whether sparse table i is looked up by the batches' rows
  // (ModelOptions::lookup_table_bytes, or a table of unbounded keys: a spec
  // of 0 rows): it holds only the rows written into it (WriteTableRows), and a
  // step reads only the rows TableRows names for its samples, which the caller
  // must have written first. Such a table's Data() is not its values: write
  // rows, read gradients (models/lookup_tables.h).
  virtual bool Lookup(size_t i) const {
    (void)i;
    return false;
  }
  // By parameter: the rows of each lookup table that training on samples
  // `indices` of `data` (or predicting them) reads, ascending and distinct;
  // empty for every other tensor. With `held_too`, also those of the sparse
  // tables held whole, where the model names a batch's ids (Net::HasTableIds:
  // the zoo's models, a module with table_ids): what a worker tells the shards
  // its next plan touches, for them to read ahead (SparseTable::Warm).
  // InvalidArgument for indices out of range, ids outside a table, a module
  // whose table_ids(x) leaves a lookup table out.
  // Whether TableRows names the rows of the sparse tables held whole (held_too).
  virtual bool NamesHeldTableRows() const { return false; }
  [[nodiscard]] virtual StatusOr<std::vector<std::vector<uint64_t>>> TableRows(
      const Dataset& data, const std::vector<int64_t>& indices, bool held_too) {
    (void)data, (void)indices, (void)held_too;
    return std::vector<std::vector<uint64_t>>{};
  }
  // Rows pulled for lookup table i: `n` ids and n x dim floats (a lookup table's Write
  // writes nothing where the table is compact: models/lookup_tables.h).
  [[nodiscard]] virtual Status WriteTableRows(size_t i, const uint64_t* ids, const float* values,
                                              size_t n) {
    (void)i, (void)ids, (void)values, (void)n;
    return FailedPrecondition("this model runner looks no table up by rows");
  }
  // Gives the memory of lookup table i's rows back to the host: every row
  // must be written again before a batch reads it.
  [[nodiscard]] virtual Status DropTableRows(size_t i) {
    (void)i;
    return OkStatus();
  }
  // The memory the rows written to lookup table i since it was last dropped
  // take (the budget a worker keeps them within).
  virtual size_t TableHeldBytes(size_t i) const {
    (void)i;
    return 0;
  }

  // What ModelOptions::init_file did (empty without one).
  const InitReport& init_report() const { return init_report_; }

 protected:
  InitReport init_report_;
};

}  // namespace eps
