// The only file of the project that includes libtorch headers.
#include "worker/model_runner.h"

#include <torch/torch.h>

#include <mutex>
#include <utility>

namespace eps {
namespace {

constexpr int64_t kClasses = 10;
constexpr int64_t kSide = 28;

// The models of ModelOptions::model, with named layers so tensor names read
// "conv1.weight"; an empty holder for an unknown name.
torch::nn::Sequential BuildModel(const std::string& name) {
  namespace nn = torch::nn;
  if (name == "mlp") {
    return nn::Sequential({{"flatten", nn::Flatten()},
                           {"fc1", nn::Linear(kSide * kSide, 128)},
                           {"relu1", nn::ReLU()},
                           {"fc2", nn::Linear(128, kClasses)}});
  }
  if (name == "cnn") {
    return nn::Sequential({{"conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2))},
                           {"relu1", nn::ReLU()},
                           {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                           {"conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2))},
                           {"relu2", nn::ReLU()},
                           {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                           {"flatten", nn::Flatten()},
                           {"fc1", nn::Linear(32 * 7 * 7, 256)},
                           {"relu3", nn::ReLU()},
                           {"dropout", nn::Dropout(nn::DropoutOptions(0.25))},
                           {"fc2", nn::Linear(256, kClasses)}});
  }
  if (name == "cnn_bn") {
    return nn::Sequential({{"conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2))},
                           {"bn1", nn::BatchNorm2d(16)},
                           {"relu1", nn::ReLU()},
                           {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                           {"conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2))},
                           {"bn2", nn::BatchNorm2d(32)},
                           {"relu2", nn::ReLU()},
                           {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                           {"flatten", nn::Flatten()},
                           {"fc1", nn::Linear(32 * 7 * 7, 256)},
                           {"relu3", nn::ReLU()},
                           {"fc2", nn::Linear(256, kClasses)}});
  }
  return nn::Sequential(nullptr);
}

// The Dataset's shape must match what the models take, and its vectors its size.
Status CheckDataset(const Dataset& data) {
  if (data.rows != kSide || data.cols != kSide) {
    return InvalidArgument("the models take 28x28 images, the data set holds " + std::to_string(data.rows) +
                           "x" + std::to_string(data.cols));
  }
  if (data.size < 0 || data.images.size() != static_cast<size_t>(data.size) * kSide * kSide ||
      data.labels.size() != static_cast<size_t>(data.size)) {
    return InvalidArgument("inconsistent data set: size " + std::to_string(data.size) + " with " +
                           std::to_string(data.images.size()) + " pixels and " +
                           std::to_string(data.labels.size()) + " labels");
  }
  return OkStatus();
}

Status CheckLabel(const Dataset& data, int64_t i) {
  const int64_t label = data.labels[static_cast<size_t>(i)];
  if (label < 0 || label >= kClasses) {
    return InvalidArgument("sample " + std::to_string(i) + " has label " + std::to_string(label) +
                           ", outside [0, 10)");
  }
  return OkStatus();
}

// Views of the data set's images [size, 1, rows, cols] and labels [size]; no copy.
// libtorch only reads through them.
torch::Tensor ImagesView(const Dataset& data) {
  return torch::from_blob(const_cast<float*>(data.images.data()), {data.size, 1, data.rows, data.cols},
                          torch::kFloat32);
}
torch::Tensor LabelsView(const Dataset& data) {
  return torch::from_blob(const_cast<int64_t*>(data.labels.data()), {data.size}, torch::kInt64);
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
    EPS_RETURN_IF_ERROR(CheckDataset(data));
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
    EPS_RETURN_IF_ERROR(CheckDataset(data));
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
  if (options.model != "mlp" && options.model != "cnn" && options.model != "cnn_bn") {
    return InvalidArgument("unknown model '" + options.model + "' (expected mlp, cnn or cnn_bn)");
  }
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
    auto runner = std::make_unique<TorchModelRunner>(BuildModel(options.model));
    EPS_RETURN_IF_ERROR(runner->Init());
    return std::unique_ptr<ModelRunner>(std::move(runner));
  } catch (const std::exception& e) {
    return FromTorch("ModelRunner::Create", e);
  }
}

}  // namespace eps
