// A built-in model of the zoo as a Net, and the default loss (models/net.h).
#include "models/net.h"

#include "data/model_input.h"
#include "models/models.h"

namespace eps {
namespace {

NamedTensors Collect(const torch::OrderedDict<std::string, torch::Tensor>& dict) {
  NamedTensors out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value());
  return out;
}

class BuiltinNet final : public Net {
 public:
  BuiltinNet(torch::nn::Sequential model, std::string name, const ZooSizes& sizes)
      : model_(std::move(model)), name_(std::move(name)), sizes_(sizes) {}
  NamedTensors NamedParameters() override { return Collect(model_->named_parameters()); }
  NamedTensors NamedBuffers() override { return Collect(model_->named_buffers()); }
  std::vector<std::pair<std::string, bool>> EmbeddingWeights() override {
    std::vector<std::pair<std::string, bool>> out;
    for (const auto& item : model_->named_modules("", /*include_self=*/false)) {
      const std::string weight = item.key() + ".weight";
      if (const auto* e = item.value()->as<torch::nn::Embedding>()) {
        out.emplace_back(weight, e->options.sparse());
      } else if (const auto* bag = item.value()->as<torch::nn::EmbeddingBag>()) {
        out.emplace_back(weight, bag->options.sparse());
      }
    }
    return out;
  }
  bool HasTableIds() const override { return true; }
  std::vector<std::pair<std::string, torch::Tensor>> TableIds(const torch::Tensor& x) override {
    return ZooTableIds(name_, x);
  }
  bool RewritesTableIds() const override { return true; }
  torch::Tensor WithTableIds(const torch::Tensor& x, const NamedTensors& ids) override {
    return ZooWithTableIds(name_, x, ids);
  }
  // The text models' and dlrm's checks read every id of the data set: once per data set,
  // not once per step.
  Status CheckData(const Dataset& data) const override {
    const Checked seen(data);
    if (seen == checked_[0] || seen == checked_[1]) return OkStatus();
    EPS_RETURN_IF_ERROR(CheckModelInputFor(name_, sizes_, data));
    checked_[1] = checked_[0];
    checked_[0] = seen;
    return OkStatus();
  }
  bool builtin() const override { return true; }
  torch::Tensor Input(const torch::Tensor& features) const override {
    return TakesIds(name_) ? features : AsImages(features);  // ids as they are
  }
  // Sequential::forward's chain, with the cancel flag looked at before each module.
  torch::Tensor Forward(const torch::Tensor& x) override {
    if (cancel_ == nullptr) return model_->forward(x);
    torch::nn::AnyValue value(x);
    for (auto& module : *model_) {
      if (cancel_->load(std::memory_order_relaxed)) throw StepCancelled();
      value = module.any_forward(std::move(value));
    }
    return value.get<torch::Tensor>();
  }
  void SetCancel(const std::atomic<bool>* cancel) override { cancel_ = cancel; }
  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return DefaultLoss(output, target);
  }
  void Train(bool on) override { model_->train(on); }
  void To(const torch::Device& device) override { model_->to(device); }

 private:
  torch::nn::Sequential model_;
  const std::atomic<bool>* cancel_ = nullptr;  // SetCancel
  const std::string name_;
  const ZooSizes sizes_;
  struct Checked {  // a data set as CheckModelInputFor sees it, but its bytes
    const void* features = nullptr;
    const void* labels = nullptr;
    int64_t size = -1, num_classes = 0;
    DataType feature_dtype{}, label_dtype{};
    std::vector<int64_t> sample_shape{}, label_shape{};
    explicit Checked(const Dataset& d)
        : features(d.features),
          labels(d.labels),
          size(d.size),
          num_classes(d.num_classes),
          feature_dtype(d.feature_dtype),
          label_dtype(d.label_dtype),
          sample_shape(d.sample_shape),
          label_shape(d.label_shape) {}
    Checked() = default;
    bool operator==(const Checked& o) const {
      return features == o.features && labels == o.labels && size == o.size &&
             num_classes == o.num_classes && feature_dtype == o.feature_dtype &&
             label_dtype == o.label_dtype && sample_shape == o.sample_shape &&
             label_shape == o.label_shape;
    }
  };
  mutable Checked checked_[2];  // the last two data sets CheckData passed (training, test)
};

}  // namespace

torch::Tensor DefaultLoss(const torch::Tensor& output, const torch::Tensor& target) {
  if (target.is_floating_point()) return torch::nn::functional::mse_loss(output, target);
  return torch::nn::functional::cross_entropy(output, target);
}

std::unique_ptr<Net> SequentialNet(torch::nn::Sequential model, const std::string& name,
                                   const ZooSizes& sizes) {
  return std::make_unique<BuiltinNet>(std::move(model), name, sizes);
}

}  // namespace eps
