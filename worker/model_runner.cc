// The torch adapter; the models themselves are defined in worker/models.cc.
#include "worker/model_runner.h"

#include <torch/torch.h>

#include <mutex>
#include <utility>

#include "worker/models.h"

namespace eps {
namespace {

Status CheckLabel(const Dataset& data, int64_t i) {
  const int64_t label = data.labels[static_cast<size_t>(i)];
  if (label < 0 || label >= kNumClasses) {
    return InvalidArgument("sample " + std::to_string(i) + " has label " + std::to_string(label) +
                           ", outside [0, 10)");
  }
  return OkStatus();
}

Status FromTorch(const char* what, const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return Internal(std::string(what) + ": libtorch: " + c10->what_without_backtrace());
  }
  return Internal(std::string(what) + ": " + e.what());
}

class TorchModelRunner final : public ModelRunner {
 public:
  explicit TorchModelRunner(torch::nn::Sequential model) : model_(std::move(model)) {}

  Status Init() {
    for (const auto& p : model_->named_parameters()) {
      TensorSpec spec{p.key(), TensorKind::kParameter, DType::kFloat32, p.value().sizes().vec()};
      if (p.value().scalar_type() != torch::kFloat32)
        return Internal("parameter " + p.key() + " is not float32");
      EPS_RETURN_IF_ERROR(Add(std::move(spec), p.value()));
      grads_.push_back(torch::zeros_like(p.value()));
    }
    num_parameters_ = tensors_.size();
    for (const auto& b : model_->named_buffers()) {
      DType dtype;
      if (b.value().scalar_type() == torch::kFloat32) {
        dtype = DType::kFloat32;
      } else if (b.value().scalar_type() == torch::kInt64) {
        dtype = DType::kInt64;
      } else {
        return Internal("buffer " + b.key() + " has an unsupported dtype");
      }
      EPS_RETURN_IF_ERROR(Add({b.key(), TensorKind::kBuffer, dtype, b.value().sizes().vec()}, b.value()));
    }
    model_->train();
    return OkStatus();
  }

  const std::vector<TensorSpec>& Tensors() const override { return specs_; }

  void* MutableData(size_t i) override { return tensors_[i].data_ptr(); }

  StatusOr<float> TrainStep(const Dataset& data, const std::vector<int64_t>& indices,
                            uint64_t rng_seed) override {
    EPS_RETURN_IF_ERROR(CheckModelInput(data));
    if (indices.empty()) return InvalidArgument("a microbatch needs at least one sample");
    for (int64_t i : indices) {
      if (i < 0 || i >= data.size) {
        return InvalidArgument("sample index " + std::to_string(i) + " outside [0, " +
                               std::to_string(data.size) + ")");
      }
      EPS_RETURN_IF_ERROR(CheckLabel(data, i));
    }
    try {
      model_->zero_grad(/*set_to_none=*/true);
      torch::manual_seed(rng_seed);
      const torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                                 {static_cast<int64_t>(indices.size())}, torch::kInt64);
      const torch::Tensor x = ImagesView(data).index_select(0, idx);
      const torch::Tensor y = LabelsView(data).index_select(0, idx);
      torch::Tensor loss = torch::nn::functional::cross_entropy(model_->forward(x), y);
      loss.backward();
      for (size_t i = 0; i < num_parameters_; ++i) {
        const torch::Tensor& g = tensors_[i].grad();
        grads_[i] = g.defined() ? g.contiguous() : torch::zeros_like(tensors_[i]);
      }
      return loss.item<float>();
    } catch (const std::exception& e) {
      // Gradients of a failed step are meaningless: do not expose stale ones.
      for (size_t i = 0; i < num_parameters_; ++i) grads_[i] = torch::zeros_like(tensors_[i]);
      return FromTorch("TrainStep", e);
    }
  }

  const float* GradData(size_t i) const override { return grads_[i].data_ptr<float>(); }

  StatusOr<EvalStats> Evaluate(const Dataset& data, int64_t lo, int64_t hi, int64_t batch) override {
    EPS_RETURN_IF_ERROR(CheckModelInput(data));
    if (lo < 0 || lo > hi || hi > data.size || batch <= 0) {
      return InvalidArgument("evaluation range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             ") in batches of " + std::to_string(batch) + " does not fit a data set of " +
                             std::to_string(data.size));
    }
    for (int64_t i = lo; i < hi; ++i) EPS_RETURN_IF_ERROR(CheckLabel(data, i));
    EvalStats stats;
    try {
      struct RestoreTrainMode {
        torch::nn::Sequential& model;
        ~RestoreTrainMode() { model->train(); }
      } restore{model_};
      torch::NoGradGuard no_grad;
      model_->eval();
      const torch::Tensor images = ImagesView(data);
      const torch::Tensor labels = LabelsView(data);
      for (int64_t first = lo; first < hi; first += batch) {
        const int64_t n = std::min(batch, hi - first);
        const torch::Tensor logits = model_->forward(images.narrow(0, first, n));
        const torch::Tensor y = labels.narrow(0, first, n);
        stats.loss_sum +=
            torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
        stats.correct += logits.argmax(1).eq(y).sum().item<int64_t>();
        stats.count += n;
      }
    } catch (const std::exception& e) {
      return FromTorch("Evaluate", e);
    }
    return stats;
  }

 private:
  Status Add(TensorSpec spec, const torch::Tensor& t) {
    if (!t.is_contiguous()) return Internal("tensor " + spec.name + " is not contiguous");
    specs_.push_back(std::move(spec));
    tensors_.push_back(t);
    return OkStatus();
  }

  torch::nn::Sequential model_;
  std::vector<TensorSpec> specs_;
  std::vector<torch::Tensor> tensors_;  // share storage with the model's, same order as specs_
  std::vector<torch::Tensor> grads_;    // one per parameter, contiguous
  size_t num_parameters_ = 0;
};

}  // namespace

ModelRunner::~ModelRunner() = default;

size_t ModelRunner::NumParameters() const {
  size_t n = 0;
  for (const TensorSpec& t : Tensors()) n += t.kind == TensorKind::kParameter ? 1 : 0;
  return n;
}

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelOptions& options) {
  if (options.threads < 1) return InvalidArgument("threads must be at least 1");
  try {
    at::set_num_threads(options.threads);
    // Can be set once per process, before any inter-op work; later runners keep it.
    static std::once_flag interop_once;
    std::call_once(interop_once, [] {
      try {
        at::set_num_interop_threads(1);
      } catch (const c10::Error&) {
        // Already fixed by someone else in this process: nothing depends on it.
      }
    });
    torch::manual_seed(options.init_seed);
    EPS_ASSIGN_OR_RETURN(torch::nn::Sequential model, MakeModel(options.model));
    auto runner = std::make_unique<TorchModelRunner>(std::move(model));
    EPS_RETURN_IF_ERROR(runner->Init());
    return std::unique_ptr<ModelRunner>(std::move(runner));
  } catch (const std::exception& e) {
    return FromTorch("ModelRunner::Create", e);
  }
}

}  // namespace eps
