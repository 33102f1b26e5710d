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
  Status CheckData(const Dataset& data) const override {
    return CheckModelInputFor(name_, sizes_, data);
  }
  bool builtin() const override { return true; }
  torch::Tensor Input(const torch::Tensor& features) const override {
    return TakesIds(name_) ? features : AsImages(features);  // ids as they are
  }
  torch::Tensor Forward(const torch::Tensor& x) override { return model_->forward(x); }
  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return DefaultLoss(output, target);
  }
  void Train(bool on) override { model_->train(on); }
  void To(const torch::Device& device) override { model_->to(device); }

 private:
  torch::nn::Sequential model_;
  const std::string name_;
  const ZooSizes sizes_;
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
