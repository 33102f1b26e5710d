// The torch adapter; the models themselves are behind models/net.h (the zoo in
// models/models.cc, TorchScript modules in models/script_net.cc).
#include "models/model_runner.h"

#include <glog/logging.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <utility>

#include "common/coalesce.h"
#include "models/init_file.h"
#include "models/lookup_tables.h"
#include "models/models.h"
#include "models/net.h"
#include "models/torch_status.h"
#ifdef EPS_WITH_CUDA
#include "models/cuda_copies.h"
#endif

namespace eps {
namespace {

// Sample i's class against the built-in models' (a module's are checked
// against its output by the dry run).
Status CheckLabel(const Dataset& data, int64_t i) {
  const int64_t label = data.ClassOf(i);
  if (label < 0 || label >= kNumClasses) {
    return InvalidArgument("sample " + std::to_string(i) + " has label " + std::to_string(label) +
                           ", outside [0, 10)");
  }
  return OkStatus();
}

// The seed of the dry run's two steps (any fixed value: they are compared with each other).
constexpr uint64_t kDryRunSeed = 0x5eed;
// A sparse table held whole of at least this size lives on huge pages (common/huge_pages.h).
constexpr size_t kHugeTableBytes = size_t{8} << 20;

class TorchModelRunner final : public ModelRunner {
 public:
  TorchModelRunner(std::unique_ptr<Net> net, torch::Device device,
                   std::unique_ptr<LookupTables> lookups, const std::atomic<bool>* cancel)
      : net_(std::move(net)), device_(device), lookups_(std::move(lookups)), cancel_(cancel) {
    net_->SetCancel(cancel_);
  }

  // Call after the model was moved to the device.
  Status Init(const TensorSelection& freeze, bool sparse_tables, uint64_t lookup_bytes) {
    std::set<std::string> sparse_names;
    for (const auto& [name, sparse] : net_->EmbeddingWeights()) {
      if (sparse && sparse_tables && !on_gpu()) {
        sparse_names.insert(name);
      } else if (!sparse && !net_->builtin()) {  // a user's module: theirs to change
        LOG(INFO) << name << " is an embedding created with sparse=False: every row is pulled, "
                  << "pushed and stepped every step; with sparse=True it would be a sparse table "
                  << "(only the rows a step touches travel)";
      }
    }
    if (device_.is_cuda()) {
#ifdef EPS_WITH_CUDA
      copies_.emplace(device_.index());
#endif
    }
    for (const auto& [name, value] : net_->NamedParameters()) {
      if (value.scalar_type() != torch::kFloat32) {
        return InvalidArgument("parameter " + name + " is " +
                               std::string(c10::toString(value.scalar_type())) +
                               ": parameters must be float32");
      }
      TensorSpec spec{name, TensorKind::kParameter, DType::kFloat32, value.sizes().vec()};
      // Frozen (--freeze): autograd computes no gradient for it, nor for
      // whatever only it depends on; its GradData stays zeros.
      frozen_.push_back(freeze.Matches(name));
      if (frozen_.back()) value.requires_grad_(false);
      spec.sparse = !frozen_.back() && value.dim() == 2 && sparse_names.count(name) > 0;
      sparse_.push_back(spec.sparse);
      EPS_ASSIGN_OR_RETURN(const LookupTables::Kind kind, LookupKind(spec, value, lookup_bytes));
      const int64_t rows = value.dim() == 2 ? value.size(0) : 0;
      lookups_->Add(kind, rows, value);
      if (spec.sparse && kind == LookupTables::Kind::kHeld && value.nbytes() >= kHugeTableBytes)
        value.set_data(TableMemory::OnHugePages(value));  // its rows are random places in it
      EPS_RETURN_IF_ERROR(Add(std::move(spec), value));
      grads_.push_back(sparse_.back() ? torch::zeros({0, value.size(1)}) : HostZeros(value));
      sparse_ids_.push_back(torch::zeros({0}, torch::kInt64));
    }
    num_parameters_ = tensors_.size();
    reported_.assign(num_parameters_, false);
    warned_sparse_.assign(num_parameters_, false);
    if (!on_gpu()) {
      // Each parameter's gradient, as soon as backward has it (before it is stored as .grad).
      for (size_t i = 0; i < num_parameters_; ++i) {
        if (frozen_[i]) continue;
        tensors_[i].register_hook([this, i](const torch::Tensor& g) { OnGradient(i, g); });
      }
    }
    for (const auto& [name, value] : net_->NamedBuffers()) {
      DType dtype;
      if (value.scalar_type() == torch::kFloat32) {
        dtype = DType::kFloat32;
      } else if (value.scalar_type() == torch::kInt64) {
        dtype = DType::kInt64;
      } else {
        return InvalidArgument("buffer " + name + " is " +
                               std::string(c10::toString(value.scalar_type())) +
                               ": buffers must be float32 or int64");
      }
      EPS_RETURN_IF_ERROR(Add({name, TensorKind::kBuffer, dtype, value.sizes().vec()}, value));
    }
    net_->Train(true);
    return OkStatus();
  }

  const std::vector<TensorSpec>& Tensors() const override { return specs_; }

  // The matching tensors of options.init_file over the initial values.
  Status LoadInit(const ModelOptions& options) {
    EPS_ASSIGN_OR_RETURN(std::vector<ExportedTensor> file,
                         ParseInitFile(options.init_file, "--init_from"));
    std::vector<TensorSpec> specs;
    for (const ExportedTensor& t : file) specs.push_back(t.spec);
    const std::vector<InitDecision> decisions = MatchInit(specs_, specs, options.reinit);
    EPS_RETURN_IF_ERROR(CheckInitMatches(decisions, specs_, specs, options.init_allow_mismatch,
                                         "--init_from"));
    for (const InitDecision& d : decisions) {
      if (d.action != InitDecision::Action::kLoad) continue;
      // A sparse table too: the worker's parameter client seeds the shards with its rows.
      lookups_->MakeLazy(d.model_index, tensors_[d.model_index]);
      const std::string& bytes = file[d.file_index].bytes;
      EPS_RETURN_IF_ERROR(Write(d.model_index, 0, bytes.data(), bytes.size()));
    }
    init_report_ = ReportInit(decisions, specs_, specs);
    return OkStatus();
  }

  const void* Data(size_t i) const override { return host_[i].data_ptr(); }

  Status Write(size_t i, size_t byte_offset, const void* src, size_t bytes) override {
    if (lookups_->kind(i) == LookupTables::Kind::kCompact)
      return FailedPrecondition(specs_[i].name + " is looked up by rows: WriteTableRows");
    auto* host = static_cast<uint8_t*>(host_[i].data_ptr());
    if (!on_gpu()) {
      std::memcpy(host + byte_offset, src, bytes);  // the model's own storage
      return OkStatus();
    }
#ifdef EPS_WITH_CUDA
    try {
      if (copies_->UploadOverlaps(i, byte_offset, byte_offset + bytes)) copies_->Drain();
      std::memcpy(host + byte_offset, src, bytes);
      const int64_t elem = static_cast<int64_t>(host_[i].element_size());
      const int64_t first = static_cast<int64_t>(byte_offset) / elem,
                    n = static_cast<int64_t>(bytes) / elem;
      torch::NoGradGuard no_grad;
      c10::cuda::CUDAStreamGuard on_side(copies_->side);
      tensors_[i]
          .view({-1})
          .narrow(0, first, n)
          .copy_(host_[i].view({-1}).narrow(0, first, n),
                 /*non_blocking=*/true);
      copies_->uploads.push_back({i, byte_offset, byte_offset + bytes});
      return OkStatus();
    } catch (const std::exception& e) {
      return FromTorch("Write", e);
    }
#else
    return Internal("a GPU runner in a build without CUDA");
#endif
  }

  StatusOr<float> TrainStep(const Dataset& data, const std::vector<int64_t>& indices,
                            uint64_t rng_seed, const GradReady& ready) override {
    if (indices.empty()) return InvalidArgument("a microbatch needs at least one sample");
    EPS_RETURN_IF_ERROR(CheckSamples(data, indices, /*labels=*/net_->builtin()));
    try {
      for (size_t i = 0; i < num_parameters_; ++i) tensors_[i].mutable_grad().reset();
      torch::manual_seed(rng_seed);  // the CPU generator and every CUDA device's
      const torch::Tensor idx = IndexTensor(indices);
      StatusOr<torch::Tensor> x = BindTables(net_->Input(FeatureRows(data, idx)).to(device_));
      const torch::Tensor y = LabelRows(data, idx).to(device_);
      if (!x.ok()) {
        DiscardGradients();
        return x.status();
      }
      if (on_gpu()) ComputeAfterUploads();
      torch::Tensor loss = net_->Loss(net_->Forward(*x), y);
      if (loss.dim() != 0) {
        DiscardGradients();
        return InvalidArgument("the model's loss is of shape " + ShapeOf(loss) + ", not a scalar");
      }
      struct Reporting {  // OnGradient reports to `ready` only inside this scope
        TorchModelRunner& runner;
        ~Reporting() { runner.ready_ = nullptr; }
      } reporting{*this};
      ready_ = ready ? &ready : nullptr;
      std::fill(reported_.begin(), reported_.end(), false);
      loss.backward();
      float value;
      if (on_gpu()) {
        value = CopyResultsToHost(loss);
      } else {
        for (size_t i = 0; i < num_parameters_; ++i) {
          if (frozen_[i]) continue;  // zeros from the start
          if (reported_[i] && grads_[i].defined())
            continue;  // the hook's contiguous copy of a strided gradient
          const torch::Tensor& g = tensors_[i].grad();
          if (sparse_[i]) {
            SetSparse(i, g);
          } else {
            grads_[i] = g.defined() ? DenseGradient(i, g) : torch::zeros_like(tensors_[i]);
          }
        }
        value = loss.item<float>();
      }
      // Parameters backward gave no gradient to (and every one on a GPU), but the frozen; last
      // layers first, as backward finishes them (their pushes, and the shards' steps, go first).
      for (size_t i = num_parameters_; i-- > 0;) {
        if (ready_ != nullptr && !reported_[i] && !frozen_[i]) (*ready_)(i);
      }
      return value;
    } catch (const StepCancelled&) {
      DiscardGradients();
      return Aborted("the step was cancelled (ModelOptions::cancel)");
    } catch (const std::exception& e) {
      // Gradients of a failed step are meaningless: do not expose stale ones.
      DiscardGradients();
      return FromTorch("TrainStep", e);
    }
  }

  const float* GradData(size_t i) const override { return grads_[i].data_ptr<float>(); }

  SparseGradient SparseGrad(size_t i) const override {
    if (i >= sparse_.size() || !sparse_[i]) return {};
    return {sparse_ids_[i].data_ptr<int64_t>(), grads_[i].data_ptr<float>(),
            static_cast<size_t>(sparse_ids_[i].numel())};
  }

  bool Lookup(size_t i) const override { return lookups_->lookup(i); }
  bool NamesHeldTableRows() const override { return net_->HasTableIds(); }

  StatusOr<std::vector<std::vector<uint64_t>>> TableRows(const Dataset& data,
                                                         const std::vector<int64_t>& indices,
                                                         bool held_too) override {
    std::vector<std::vector<uint64_t>> rows;
    EPS_RETURN_IF_ERROR(CheckSamples(data, indices, /*labels=*/false));
    try {
      EPS_RETURN_IF_ERROR(lookups_->RowsOf(
          *net_, specs_, net_->Input(FeatureRows(data, IndexTensor(indices))), held_too, &rows));
    } catch (const std::exception& e) {
      return FromTorch("TableRows", e);
    }
    return rows;
  }

  Status WriteTableRows(size_t i, const uint64_t* ids, const float* values, size_t n) override {
    return lookups_->Write(i, tensors_[i], ids, values, n);
  }

  Status DropTableRows(size_t i) override { return lookups_->Drop(i, tensors_[i]); }

  size_t TableHeldBytes(size_t i) const override { return lookups_->HeldBytes(i); }

  StatusOr<std::string> DryRun(const Dataset& data) override {
    EPS_RETURN_IF_ERROR(net_->CheckData(data));
    if (data.size < 1) return InvalidArgument("the training set is empty");
    const int64_t n = std::min<int64_t>(2, data.size);
    dry_run_ = true;  // before any pull: lookup tables' rows read zeros
    struct EndDryRun {
      bool& on;
      ~EndDryRun() { on = false; }
    } end_dry_run{dry_run_};
    std::vector<torch::Tensor> saved;
    try {
      torch::NoGradGuard no_grad;
      // A lookup table's rows are only ever written by pulls, and a step does not write them.
      for (size_t i = 0; i < host_.size(); ++i)
        saved.push_back(lookups_->lookup(i) ? torch::Tensor() : host_[i].clone());
    } catch (const std::exception& e) {
      return FromTorch("DryRun", e);
    }
    // Whatever happens below, parameters and buffers (BatchNorm statistics)
    // end as they were, and no gradient of the dry run is left.
    struct Restore {
      TorchModelRunner& runner;
      const std::vector<torch::Tensor>& saved;
      ~Restore() { runner.RestoreValues(saved); }
    } restore{*this, saved};
    EPS_RETURN_IF_ERROR(CheckShapes(data, n));
    std::vector<int64_t> indices(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) indices[static_cast<size_t>(i)] = i;
    float loss[2];
    std::vector<torch::Tensor> grads[2], ids[2];
    for (int run = 0; run < 2; ++run) {
      StatusOr<float> l = TrainStep(data, indices, kDryRunSeed, nullptr);
      if (!l.ok()) return l.status().WithContext("the dry run's training step");
      loss[run] = *l;
      try {
        // Held, not cloned, on the CPU (TrainStep makes new gradient tensors): a clone of each
        // run's was two model sizes more at the worker's start (8 GB for a 1 B-parameter model).
        for (size_t i = 0; i < num_parameters_; ++i) {
          grads[run].push_back(on_gpu() ? grads_[i].clone() : grads_[i]);
          ids[run].push_back(sparse_ids_[i].clone());
        }
      } catch (const std::exception& e) {
        return FromTorch("DryRun", e);
      }
      RestoreValues(saved);
    }
    bool same = std::memcmp(&loss[0], &loss[1], sizeof(float)) == 0;
    std::string differs = same ? "" : "the loss";
    try {
      for (size_t i = 0; same && i < num_parameters_; ++i) {
        if (!torch::equal(grads[0][i], grads[1][i]) ||
            (sparse_[i] && !torch::equal(ids[0][i], ids[1][i]))) {
          same = false;
          differs = "the gradient of " + specs_[i].name;
        }
      }
    } catch (const std::exception& e) {
      return FromTorch("DryRun", e);
    }
    if (same) return std::string();
    return "nondeterministic module: two dry-run steps with the same seed, weights and samples "
           "gave different bits (" +
           differs +
           "): the job's parameters will depend on placement and on joins (docs/models.md, "
           "\"Determinism\")";
  }

  // On the CPU TrainStep never writes into a gradient tensor (backward makes
  // new ones after zero_grad(set_to_none)), so sharing them is enough.
  StatusOr<Gradients> TakeGradients() override {
    try {
      auto held = std::make_shared<std::vector<torch::Tensor>>(grads_);
      held->insert(held->end(), sparse_ids_.begin(), sparse_ids_.end());
      if (on_gpu()) {
        for (torch::Tensor& g : grads_)
          g = torch::empty(g.sizes(), g.options().pinned_memory(true));
      }
      Gradients out{{}, held};
      for (size_t i = 0; i < num_parameters_; ++i) {
        out.data.push_back((*held)[i].data_ptr<float>());
        if (!sparse_[i]) continue;
        out.sparse.resize(i + 1);
        const torch::Tensor& ids = (*held)[num_parameters_ + i];
        out.sparse[i] = {ids.data_ptr<int64_t>(), (*held)[i].data_ptr<float>(),
                         static_cast<size_t>(ids.numel())};
      }
      return out;
    } catch (const std::exception& e) {
      return FromTorch("TakeGradients", e);
    }
  }

  StatusOr<EvalStats> Evaluate(const Dataset& data, int64_t lo, int64_t hi,
                               int64_t batch) override {
    EvalStats stats;
    EPS_RETURN_IF_ERROR(ForwardEval(
        data, lo, hi, batch, "Evaluate", [&](int64_t first, int64_t n, const torch::Tensor& x) {
          const torch::Tensor logits = net_->Forward(x);
          const torch::Tensor y = LabelRange(data, first, n).to(device_);
          if (y.is_floating_point()) {
            // A regression: the squared error per sample (its mean over the label's elements).
            stats.loss_sum +=
                (torch::nn::functional::mse_loss(
                     logits, y, torch::nn::functional::MSELossFuncOptions().reduction(torch::kSum)) /
                 static_cast<double>(std::max<int64_t>(1, y.numel() / n)))
                    .item<double>();
          } else {
            stats.loss_sum += torch::nn::functional::cross_entropy(
                                  logits, y,
                                  torch::nn::functional::CrossEntropyFuncOptions().reduction(
                                      torch::kSum))
                                  .item<double>();
            stats.correct += logits.argmax(1).eq(y).sum().item<int64_t>();
          }
          stats.count += n;
          return OkStatus();
        }));
    return stats;
  }

  StatusOr<Outputs> Predict(const Dataset& data, int64_t lo, int64_t hi,
                            int64_t batch) override {
    Outputs out;
    EPS_RETURN_IF_ERROR(ForwardEval(
        data, lo, hi, batch, "Predict", [&](int64_t, int64_t n, const torch::Tensor& x) {
          torch::Tensor y;
          try {
            y = net_->Forward(x);
          } catch (const std::exception& e) {
            return InvalidArgument("the model's forward fails on a batch of the data, of shape " +
                                   ShapeOf(x) + ": " + WhatOf(e));
          }
          if (y.dim() < 1 || y.size(0) != n || y.scalar_type() != torch::kFloat32) {
            return InvalidArgument("the model's output on a batch of shape " + ShapeOf(x) + " is " +
                                   ShapeOf(y) + " of " + std::string(c10::toString(y.scalar_type())) +
                                   ": expected float32 with one row per sample");
          }
          if (out.shape.empty()) {
            out.shape.assign(y.sizes().begin(), y.sizes().end());
            out.shape[0] = 0;
          } else if (!std::equal(out.shape.begin() + 1, out.shape.end(), y.sizes().begin() + 1,
                                 y.sizes().end())) {
            return InvalidArgument("the model's output changes shape between batches: " +
                                   ShapeOf(y));
          }
          out.shape[0] += n;
          const torch::Tensor host = y.to(torch::kCPU).contiguous();
          out.values.insert(out.values.end(), host.data_ptr<float>(),
                            host.data_ptr<float>() + host.numel());
          return OkStatus();
        }));
    if (out.shape.empty()) out.shape = {0};
    return out;
  }

 private:
  bool on_gpu() const { return device_.is_cuda(); }

  // The data set against the net, and `indices` within it (with `labels`, their classes against
  // the built-in models' too): InvalidArgument naming what does not fit.
  Status CheckSamples(const Dataset& data, const std::vector<int64_t>& indices, bool labels) {
    EPS_RETURN_IF_ERROR(net_->CheckData(data));
    for (int64_t i : indices) {
      if (i < 0 || i >= data.size) {
        return InvalidArgument("sample index " + std::to_string(i) + " outside [0, " +
                               std::to_string(data.size) + ")");
      }
      if (labels) EPS_RETURN_IF_ERROR(CheckLabel(data, i));
    }
    return OkStatus();
  }

  // `indices` as an int64 tensor over their memory (valid while they are).
  static torch::Tensor IndexTensor(const std::vector<int64_t>& indices) {
    return torch::from_blob(const_cast<int64_t*>(indices.data()),
                            {static_cast<int64_t>(indices.size())}, torch::kInt64);
  }

  // Evaluate's and Predict's pass: checks the data and the range [lo, hi),
  // then, in eval mode without gradients (train mode restored after), calls
  // each(first, n, x) with the model's input for samples [first, first + n),
  // `batch` at a time, until one returns an error. c10::Error -> Status.
  template <typename Each>
  Status ForwardEval(const Dataset& data, int64_t lo, int64_t hi, int64_t batch,
                     const char* what, Each&& each) {
    EPS_RETURN_IF_ERROR(net_->CheckData(data));
    if (lo < 0 || lo > hi || hi > data.size || batch <= 0) {
      return InvalidArgument(std::string(what) + " range [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + ") in batches of " + std::to_string(batch) +
                             " does not fit a data set of " + std::to_string(data.size));
    }
    if (net_->builtin()) {
      for (int64_t i = lo; i < hi; ++i) EPS_RETURN_IF_ERROR(CheckLabel(data, i));
    }
    try {
      struct RestoreTrainMode {
        Net& net;
        ~RestoreTrainMode() { net.Train(true); }
      } restore{*net_};
      torch::NoGradGuard no_grad;
      net_->Train(false);
      if (on_gpu()) ComputeAfterUploads();
      for (int64_t first = lo; first < hi; first += batch) {
        const int64_t n = std::min(batch, hi - first);
        EPS_ASSIGN_OR_RETURN(const torch::Tensor x,
                             BindTables(net_->Input(FeatureRange(data, first, n)).to(device_)));
        EPS_RETURN_IF_ERROR(each(first, n, x));
      }
      if (on_gpu()) DrainCopies();
    } catch (const std::exception& e) {
      return FromTorch(what, e);
    }
    return OkStatus();
  }

  // The dry run's checks of one forward pass and loss on the first n samples;
  // InvalidArgument naming what does not fit.
  Status CheckShapes(const Dataset& data, int64_t n) {
    try {
      torch::NoGradGuard no_grad;
      if (on_gpu()) ComputeAfterUploads();
      EPS_ASSIGN_OR_RETURN(const torch::Tensor x,
                           BindTables(net_->Input(FeatureRange(data, 0, n)).to(device_)));
      const torch::Tensor y = LabelRange(data, 0, n).to(device_);
      torch::Tensor out;
      try {
        out = net_->Forward(x);
      } catch (const std::exception& e) {
        return InvalidArgument("the model's forward fails on a batch of the data, of shape " +
                               ShapeOf(x) + ": " + WhatOf(e));
      }
      if (y.is_floating_point()) {
        if (out.sizes() != y.sizes()) {
          return InvalidArgument("the model's output is of shape " + ShapeOf(out) +
                                 ", its float labels' " + ShapeOf(y) +
                                 ": a regression's output must have the labels' shape");
        }
      } else {
        if (out.dim() != 2 || out.size(0) != n) {
          return InvalidArgument("the model's output on a batch of shape " + ShapeOf(x) +
                                 " is of shape " + ShapeOf(out) +
                                 ": a classifier's must be [batch, classes]");
        }
        // num_classes: 1 + the data's largest label (none is negative).
        if (data.num_classes > out.size(1)) {
          return InvalidArgument("labels out of range: the data's labels span [0, " +
                                 std::to_string(data.num_classes - 1) +
                                 "], the model's output has " + std::to_string(out.size(1)) +
                                 " classes (labels must be in [0, classes))");
        }
      }
      torch::Tensor loss;
      try {
        loss = net_->Loss(out, y);
      } catch (const std::exception& e) {
        return InvalidArgument("the model's loss fails on its output of shape " + ShapeOf(out) +
                               " and labels of shape " + ShapeOf(y) + ": " + WhatOf(e));
      }
      if (loss.dim() != 0) {
        return InvalidArgument("the model's loss(output, target) is of shape " + ShapeOf(loss) +
                               ", not a scalar");
      }
      return OkStatus();
    } catch (const std::exception& e) {
      return FromTorch("DryRun", e);
    }
  }

  // Puts back the values of every tensor (as host copies) and drops the gradients.
  void RestoreValues(const std::vector<torch::Tensor>& saved) {
    try {
      torch::NoGradGuard no_grad;
      if (on_gpu()) DrainCopies();
      for (size_t i = 0; i < tensors_.size() && i < saved.size(); ++i) {
        if (!saved[i].defined()) continue;
        tensors_[i].copy_(saved[i]);
        if (on_gpu()) host_[i].copy_(saved[i]);
      }
    } catch (const std::exception& e) {
      LOG(ERROR) << "the dry run could not restore the model: " << WhatOf(e);
    }
    DiscardGradients();
  }

  // The hook on parameter i (CPU only): `g` is its final gradient. Holds no
  // reference to `g` once it returns, so autograd stores it as .grad without a
  // copy, and TrainStep then takes that .grad (the same memory) as grads_[i];
  // the contiguous copy of a strided `g` stays grads_[i] itself. Either way
  // GradData(i) keeps the memory the hook was given, also in TakeGradients.
  void OnGradient(size_t i, const torch::Tensor& g) {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) throw StepCancelled();
    if (ready_ == nullptr) return;
    if (sparse_[i]) {
      SetSparse(i, g);
      (*ready_)(i);
      reported_[i] = true;
      return;
    }
    grads_[i] = DenseGradient(i, g);
    (*ready_)(i);
    reported_[i] = true;
    if (grads_[i].is_same(g)) grads_[i] = torch::Tensor();
  }

  // Parameter i's gradient `g` as the dense, contiguous tensor the pushes read. A sparse one
  // of a table that is not a sparse table (--sparse_optimizer=exact, or on a GPU) is made
  // dense, summed in the order its indices hold (the same for the same step on any worker):
  // it trains as a dense tensor (said once per tensor).
  torch::Tensor DenseGradient(size_t i, const torch::Tensor& g) {
    if (!g.is_sparse()) return g.contiguous();
    if (!warned_sparse_[i]) {
      warned_sparse_[i] = true;
      LOG(INFO) << specs_[i].name << " has a sparse gradient (sparse=True) but trains as a "
                << "dense tensor (--sparse_optimizer=exact, or on a GPU): every row pulled, "
                << "pushed and stepped";
    }
    return g.to_dense().contiguous();
  }

  // A sparse table's gradient `g` (undefined: no row touched) as the rows it
  // touched: coalesced (ids ascending and distinct, each row's contributions
  // summed in the order backward gave them, the same for the same step
  // anywhere). A dense `g` (the table used other than by its embedding)
  // touches every row.
  void SetSparse(size_t i, const torch::Tensor& g) {
    const int64_t dim = tensors_[i].size(1);
    if (!g.defined()) {
      sparse_ids_[i] = torch::zeros({0}, torch::kInt64);
      grads_[i] = torch::zeros({0, dim});
    } else if (!g.is_sparse()) {
      sparse_ids_[i] = torch::arange(tensors_[i].size(0), torch::kInt64);
      grads_[i] = g.to(torch::kCPU).contiguous();
    } else if (g.is_coalesced()) {
      const torch::Tensor c = g.to(torch::kCPU);
      sparse_ids_[i] = c.indices().select(0, 0).contiguous();
      grads_[i] = c.values().reshape({-1, dim}).contiguous();
    } else {  // coalesced in a total order (common/coalesce.h)
      const torch::Tensor ids = g._indices().select(0, 0).to(torch::kCPU).contiguous();
      const torch::Tensor values = g._values().to(torch::kCPU).reshape({-1, dim}).contiguous();
      const auto n = static_cast<int64_t>(coalescer_.Prepare(ids.data_ptr<int64_t>(), ids.numel()));
      sparse_ids_[i] = torch::empty({n}, torch::kInt64);
      grads_[i] = torch::empty({n, dim});
      coalescer_.Write(values.data_ptr<float>(), static_cast<size_t>(dim),
                       sparse_ids_[i].data_ptr<int64_t>(), grads_[i].data_ptr<float>());
    }
    lookups_->GradientIds(i, specs_[i].name, sparse_ids_[i]);  // a lookup table's rows
  }

  // The batch `x` as forward takes it: the lookup tables bound to its rows
  // (LookupTables::Bind; rows not pulled read zeros in the dry run only).
  StatusOr<torch::Tensor> BindTables(const torch::Tensor& x) {
    return lookups_->Bind(*net_, specs_, x, tensors_, /*zero_missing=*/dry_run_);
  }

  // How parameter `spec` (the module's `value`) is looked up: by the batches' rows when it
  // is a sparse table of more than `lookup_bytes` (0: none) whose rows a batch reads the net
  // can say, or of unbounded keys (0 rows); compact where the net rewrites its ids.
  StatusOr<LookupTables::Kind> LookupKind(const TensorSpec& spec, const torch::Tensor& value,
                                          uint64_t lookup_bytes) const {
    const bool unbounded = value.dim() == 2 && value.size(0) == 0;
    if (unbounded && (!spec.sparse || !net_->RewritesTableIds())) {
      return InvalidArgument(
          "table " + spec.name + " has unbounded keys (0 rows): it trains " +
          "only as a sparse table (not frozen, on the CPU, not with " +
          "--sparse_optimizer=exact) of a model that rewrites its ids (the zoo's)");
    }
    const bool lookup = unbounded || (spec.sparse && lookup_bytes > 0 && net_->HasTableIds() &&
                                      static_cast<uint64_t>(value.nbytes()) > lookup_bytes);
    if (!lookup) return LookupTables::Kind::kHeld;
    LOG(INFO) << spec.name << " (" << value.nbytes() / (1 << 20)
              << " MiB) is looked up by the batches' rows, not held whole";
    return net_->RewritesTableIds() ? LookupTables::Kind::kCompact : LookupTables::Kind::kLazy;
  }

  // Host memory of `t`'s shape and dtype, zeroed: pinned when `t` lives on a GPU.
  torch::Tensor HostZeros(const torch::Tensor& t) const {
    return torch::zeros(t.sizes(),
                        torch::TensorOptions().dtype(t.scalar_type()).pinned_memory(on_gpu()));
  }

  Status Add(TensorSpec spec, const torch::Tensor& t) {
    if (!t.is_contiguous()) return Internal("tensor " + spec.name + " is not contiguous");
    specs_.push_back(std::move(spec));
    tensors_.push_back(t);
    if (on_gpu()) {
      torch::NoGradGuard no_grad;  // a copy of the values, not a node of the graph
      torch::Tensor mirror = HostZeros(t);
      mirror.copy_(t);  // blocking: the mirror holds the initial values from the start
      host_.push_back(std::move(mirror));
    } else {
      host_.push_back(t);  // the model's own storage
    }
    return OkStatus();
  }

  void DiscardGradients() {
    try {
      if (on_gpu()) DrainCopies();
      for (size_t i = 0; i < num_parameters_; ++i) {
        if (sparse_[i]) {
          SetSparse(i, torch::Tensor());
        } else if (on_gpu()) {
          grads_[i].zero_();
        } else {
          grads_[i] = torch::zeros_like(tensors_[i]);
        }
      }
    } catch (const std::exception&) {
      // Nothing better to do: the step already failed.
    }
  }

#ifdef EPS_WITH_CUDA
  void ComputeAfterUploads() { copies_->ComputeAfterUploads(); }
  void DrainCopies() { copies_->Drain(); }

  // After backward on the compute stream: gradients, the loss and the buffers
  // (BatchNorm statistics) go to pinned host memory on the side stream, which
  // this waits for. The device gradients stay referenced until the copies end.
  float CopyResultsToHost(const torch::Tensor& loss) {
    copies_->computed.record(copies_->compute);
    copies_->computed.block(copies_->side);
    {
      c10::cuda::CUDAStreamGuard on_side(copies_->side);
      for (size_t i = 0; i < num_parameters_; ++i) {
        const torch::Tensor& g = tensors_[i].grad();
        if (g.defined()) {
          grads_[i].copy_(g.is_sparse() ? DenseGradient(i, g) : g, /*non_blocking=*/true);
        } else {
          grads_[i].zero_();
        }
      }
      for (size_t i = num_parameters_; i < tensors_.size(); ++i)
        host_[i].copy_(tensors_[i], /*non_blocking=*/true);
      if (!loss_host_.defined())
        loss_host_ = torch::empty({}, torch::TensorOptions().pinned_memory(true));
      loss_host_.copy_(loss.detach(), /*non_blocking=*/true);
    }
    DrainCopies();
    return loss_host_.item<float>();
  }
#else
  void ComputeAfterUploads() {}
  void DrainCopies() {}
  float CopyResultsToHost(const torch::Tensor& loss) { return loss.item<float>(); }
#endif

  std::unique_ptr<Net> net_;
  const torch::Device device_;
  std::vector<TensorSpec> specs_;
  std::vector<torch::Tensor> tensors_;  // the model's, on its device, same order as specs_
  std::vector<torch::Tensor>
      host_;  // tensors_ on the host: the same tensors on the CPU, pinned mirrors on a GPU
  std::vector<torch::Tensor>
      grads_;  // one per parameter, contiguous, on the host (pinned on a GPU)
  size_t num_parameters_ = 0;
  std::vector<char> frozen_;  // by parameter: ModelOptions::freeze selects it
  const GradReady* ready_ = nullptr;  // set during TrainStep's backward
  std::vector<bool> reported_;        // by parameter: given to ready_ in this TrainStep
  std::vector<bool> warned_sparse_;
  std::vector<char> sparse_;                // by parameter: a sparse table
  std::vector<torch::Tensor> sparse_ids_;   // by parameter: a sparse table's touched rows
  RowCoalescer coalescer_;                  // SetSparse's, reused
  const std::unique_ptr<LookupTables> lookups_;    // the sparse tables looked up by rows
  bool dry_run_ = false;                           // in DryRun
  const std::atomic<bool>* const cancel_;          // ModelOptions::cancel
#ifdef EPS_WITH_CUDA
  std::optional<CudaCopies> copies_;  // on a GPU only
  torch::Tensor loss_host_;           // pinned
#endif
};

}  // namespace

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelOptions& options) {
  if (options.threads < 1) return InvalidArgument("threads must be at least 1");
  EPS_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(options.device));
  try {
    SetCpuThreads(options.threads);
    EPS_RETURN_IF_ERROR(PrepareDevice(device));
    auto lookups = std::make_unique<LookupTables>(std::make_unique<TableMemory>());
    std::unique_ptr<Net> net;
    if (!options.script.empty()) {
      EPS_ASSIGN_OR_RETURN(net, LoadScriptNet(options.script));  // its weights are the file's
    } else {
      // Initialized on the CPU from the CPU generator: the same weights on every device. The
      // sparse tables (not frozen, on the CPU) draw nothing: their rows are InitialRow's.
      torch::manual_seed(options.init_seed);
      TableWeight table;
      if (options.sparse_tables && !device.is_cuda()) {
        table = [&](const std::string& name, int64_t rows, int64_t dim) {
          if (options.freeze.Matches(name)) return torch::Tensor();
          return rows == 0 ? torch::zeros({0, dim}) : lookups->memory().New(rows, dim);
        };
      }
      EPS_ASSIGN_OR_RETURN(torch::nn::Sequential model,
                           MakeModel(options.model, options.sizes, table));
      net = SequentialNet(std::move(model), options.model, options.sizes);
    }
    net->To(device);
    auto runner = std::make_unique<TorchModelRunner>(std::move(net), device, std::move(lookups),
                                                     options.cancel);
    EPS_RETURN_IF_ERROR(
        runner->Init(options.freeze, options.sparse_tables, options.lookup_table_bytes));
    if (!options.init_file.empty()) EPS_RETURN_IF_ERROR(runner->LoadInit(options));
    return std::unique_ptr<ModelRunner>(std::move(runner));
  } catch (const std::exception& e) {
    return FromTorch("ModelRunner::Create", e);
  }
}

}  // namespace eps
