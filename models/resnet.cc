#include "models/resnet.h"

#include <string>
#include <vector>

namespace eps {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", Conv(in, out, 3, stride));
    bn1_ = register_module("bn1", nn::BatchNorm2d(out));
    conv2_ = register_module("conv2", Conv(out, out, 3, 1));
    bn2_ = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut_ = register_module("shortcut",
                                  nn::Sequential(Conv(in, out, 1, stride), nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return torch::relu(y + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

// `blocks` BasicBlocks, the first from `in` channels with `stride`, named
// "0", "1", ... A module of its own: a Sequential cannot hold a Sequential.
class StageImpl : public nn::Module {
 public:
  StageImpl(int64_t in, int64_t out, int64_t stride, int64_t blocks) {
    for (int64_t i = 0; i < blocks; ++i) {
      blocks_.push_back(register_module(std::to_string(i),
                                        BasicBlock(i == 0 ? in : out, out, i == 0 ? stride : 1)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    for (BasicBlock& b : blocks_) x = b(x);
    return x;
  }

 private:
  std::vector<BasicBlock> blocks_;
};
TORCH_MODULE(Stage);

}  // namespace

StatusOr<nn::Sequential> MakeResnet(const ZooSizes& sizes) {
  EPS_RETURN_IF_ERROR(CheckZooSizes("resnet", sizes));
  const int64_t n = (sizes.depth - 2) / 6;
  nn::Sequential model({{"conv1", Conv(1, 16, 3, 1)},
                        {"bn1", nn::BatchNorm2d(16)},
                        {"relu", nn::ReLU()},
                        {"stage1", Stage(16, 16, 1, n)},
                        {"stage2", Stage(16, 32, 2, n)},
                        {"stage3", Stage(32, 64, 2, n)},
                        {"pool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1))},
                        {"flatten", nn::Flatten()},
                        {"fc", nn::Linear(64, kNumClasses)}});
  torch::NoGradGuard no_grad;
  for (auto& m : model->modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  return model;
}

}  // namespace eps
