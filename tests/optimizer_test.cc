// ApplyOptimizer against libtorch 1.13's own C++ optimizers (torch::optim::SGD / Adam / AdamW):
// same initial parameters, same gradients, same per-step learning rate; the parameters must be
// bitwise equal after every step.
//
// Bitwise equality holds where ATen dispatches its AVX2 or AVX512 kernels (any x86-64 CPU with
// FMA): they fuse add(a, b, alpha) and addcmul into one rounding, which server/optimizer.cc
// reproduces with std::fma. ATen's DEFAULT kernels (a CPU without FMA, or
// ATEN_CPU_CAPABILITY=default) round the product first instead; there the test can only bound
// the difference (see ExpectMatchesTorch).
#include "server/optimizer.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>
#include <string>
#include <vector>

namespace eps {
namespace {

// Whether torch's CPU add(a, b, alpha) rounds a + alpha * b once. With x = 1 + 2^-12,
// x * x = 1 + 2^-11 + 2^-24 is a tie that rounds to 1 + 2^-11, so the unfused sum is 0 while the
// fused one is 2^-24. 67 elements, so both the vector body and the scalar tail are probed.
bool TorchFusesMultiplyAdd() {
  const float x = 1.0f + std::ldexp(1.0f, -12);
  const float a = -(1.0f + std::ldexp(1.0f, -11));
  const torch::Tensor r = torch::full({67}, a).add(torch::full({67}, x), x);
  const float* d = r.data_ptr<float>();
  for (int i = 0; i < 67; ++i) {
    if (d[i] != std::ldexp(1.0f, -24)) return false;
  }
  return true;
}

std::unique_ptr<torch::optim::Optimizer> MakeTorchOptimizer(const OptimizerOptions& o,
                                                            const torch::Tensor& p) {
  std::vector<torch::Tensor> params{p};
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                             .momentum(o.momentum)
                                                             .dampening(o.dampening)
                                                             .nesterov(o.nesterov)
                                                             .weight_decay(o.weight_decay));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr)
                                                              .betas({o.beta1, o.beta2})
                                                              .eps(o.eps)
                                                              .weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr)
                                                               .betas({o.beta1, o.beta2})
                                                               .eps(o.eps)
                                                               .weight_decay(o.weight_decay));
    case OptimizerKind::kAdagrad:
      return std::make_unique<torch::optim::Adagrad>(
          params, torch::optim::AdagradOptions(o.lr).eps(o.eps).weight_decay(o.weight_decay));
  }
  return nullptr;
}

void SetTorchLr(const OptimizerOptions& o, double lr, torch::optim::Optimizer* opt) {
  for (torch::optim::OptimizerParamGroup& group : opt->param_groups()) {
    switch (o.kind) {
      case OptimizerKind::kSgd:
        static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
        break;
      case OptimizerKind::kAdam:
        static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
        break;
      case OptimizerKind::kAdamW:
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        break;
      case OptimizerKind::kAdagrad:
        static_cast<torch::optim::AdagradOptions&>(group.options()).lr(lr);
        break;
    }
  }
}

// Gradient of step t: normal values spread over several orders of magnitude, with some zeros
// of both signs; a different draw and scale each step.
torch::Tensor Gradient(int64_t n, int64_t t) {
  torch::manual_seed(1000 + t);
  const double scale = std::pow(3.0, static_cast<double>(t % 3) - 1);
  torch::Tensor g = torch::randn({n}) * torch::exp(2 * torch::randn({n})) * scale;
  g.index_put_({torch::indexing::Slice(0, 8)}, 0.0);
  g.index_put_({torch::indexing::Slice(8, 12)}, -0.0);
  return g;
}

// Runs `steps` steps of torch's optimizer and of ApplyOptimizer from the same parameters with
// the same gradients and learning rates, comparing after every step.
void ExpectMatchesTorch(const OptimizerOptions& o, int64_t n, int64_t steps) {
  ASSERT_TRUE(ValidateOptimizerOptions(o).ok()) << ValidateOptimizerOptions(o).ToString();
  torch::manual_seed(7);
  torch::Tensor p = torch::randn({n}).requires_grad_(true);
  std::vector<float> ours(p.data_ptr<float>(), p.data_ptr<float>() + n);
  const std::vector<float> initial = ours;
  std::unique_ptr<torch::optim::Optimizer> opt = MakeTorchOptimizer(o, p);
  OptimizerState state;
  const bool fused = TorchFusesMultiplyAdd();
  for (int64_t t = 0; t < steps; ++t) {
    const torch::Tensor g = Gradient(n, t);
    p.mutable_grad() = g.clone();
    SetTorchLr(o, LearningRate(o, t), opt.get());
    opt->step();
    ApplyOptimizer(o, t, ours.data(), g.data_ptr<float>(), static_cast<size_t>(n), &state);

    const float* theirs = p.data_ptr<float>();
    if (fused) {
      int64_t mismatches = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(&theirs[i], &ours[i], sizeof(float)) != 0 && mismatches++ == 0) first = i;
      }
      ASSERT_EQ(mismatches, 0) << "step " << t << ": first at " << first << ": torch "
                               << theirs[first] << " ours " << ours[first];
    } else {
      // ATen's non-FMA kernels round alpha * b before the add, so each fused multiply-add of
      // ours differs from theirs by up to half an ULP of the product, and the state carries that
      // into later steps. Near cancellation (p close to lr * g) that is many ULPs of the result,
      // so the bound is absolute, scaled by the parameter's size. Measured on these runs with
      // ATEN_CPU_CAPABILITY=default: at most 2.9e-6 (Nesterov, large lr * g), 1.2e-7 for Adam.
      // This mode only catches a grossly wrong formula (a missing term, a wrong coefficient);
      // the bitwise mode above is the real check.
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double scale = std::max(1.0, std::fabs(static_cast<double>(theirs[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(theirs[i]) - ours[i]) / scale);
      }
      ASSERT_LE(worst, 2e-5) << "step " << t;
      if (t + 1 == steps) std::cerr << "max scaled difference from torch: " << worst << "\n";
    }
  }
  EXPECT_NE(ours, initial) << "the optimizer did not move the parameters";
}

class OptimizerVsTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_threads_ = at::get_num_threads();
    if (!TorchFusesMultiplyAdd()) {
      std::cerr << "note: ATen runs its non-FMA CPU kernels here; comparing within a bound\n";
    }
  }
  void TearDown() override { at::set_num_threads(saved_threads_); }

  static constexpr int64_t kN = 10007;  // odd: exercises the vector kernels' scalar tails
  int saved_threads_ = 1;
};

TEST_F(OptimizerVsTorch, PlainSgdIsBitwiseEqual) {
  OptimizerOptions o;
  o.lr = 0.05;
  ExpectMatchesTorch(o, kN, 8);
}

TEST_F(OptimizerVsTorch, SgdWithWeightDecayAndStepScheduleIsBitwiseEqual) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 1e-3;
  o.schedule = ScheduleKind::kStep;
  o.step_size = 3;
  o.gamma = 0.3;
  ExpectMatchesTorch(o, kN, 8);
}

TEST_F(OptimizerVsTorch, MomentumWithCosineWarmupIsBitwiseEqual) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.schedule = ScheduleKind::kCosine;
  o.warmup_steps = 3;
  o.total_steps = 9;
  o.min_lr = 0.001;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, MomentumWithDampeningAndWeightDecayIsBitwiseEqual) {
  OptimizerOptions o;
  o.lr = 0.03;
  o.momentum = 0.8;
  o.dampening = 0.3;
  o.weight_decay = 5e-4;
  ExpectMatchesTorch(o, kN, 8);
}

TEST_F(OptimizerVsTorch, NesterovIsBitwiseEqual) {
  OptimizerOptions o;
  o.lr = 0.07;
  o.momentum = 0.95;
  o.nesterov = true;
  o.weight_decay = 1e-4;
  ExpectMatchesTorch(o, kN, 8);
}

TEST_F(OptimizerVsTorch, AdamIsBitwiseEqual) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 1e-3;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, AdamWithWeightDecayAndCosineIsBitwiseEqual) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 3e-3;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  o.eps = 1e-6;
  o.weight_decay = 0.01;
  o.schedule = ScheduleKind::kCosine;
  o.warmup_steps = 2;
  o.total_steps = 8;
  o.min_lr = 1e-5;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, AdagradIsBitwiseEqual) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.lr = 1e-2;
  o.eps = 1e-10;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, AdagradWithWeightDecayAndStepScheduleIsBitwiseEqual) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.lr = 5e-2;
  o.weight_decay = 0.02;
  o.schedule = ScheduleKind::kStep;
  o.step_size = 3;
  o.gamma = 0.5;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, AdamWWithWeightDecayIsBitwiseEqual) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 2e-3;
  o.weight_decay = 0.05;
  ExpectMatchesTorch(o, kN, 10);
}

TEST_F(OptimizerVsTorch, AdamWIsBitwiseEqualOnOneIntraOpThread) {
  at::set_num_threads(1);
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  o.schedule = ScheduleKind::kStep;
  o.step_size = 2;
  o.gamma = 0.5;
  ExpectMatchesTorch(o, kN, 6);
}

TEST_F(OptimizerVsTorch, NesterovIsBitwiseEqualOnOneIntraOpThread) {
  at::set_num_threads(1);
  OptimizerOptions o;
  o.lr = 0.02;
  o.momentum = 0.9;
  o.nesterov = true;
  ExpectMatchesTorch(o, kN, 6);
}

// Above ATen's grain size (32768) torch splits the kernels across threads, each with its own
// scalar tail; ApplyOptimizer's bits must not care.
TEST_F(OptimizerVsTorch, AdamIsBitwiseEqualWhenTorchSplitsAcrossThreads) {
  at::set_num_threads(2);
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 1e-3;
  o.weight_decay = 1e-4;
  ExpectMatchesTorch(o, 3 * 32768 + 5, 4);
}


// Cut over threads (a shard's --threads), every variant of `out` gives the bits of the
// caller's thread alone, parameters and optimizer state alike.
TEST(ApplyOptimizer, CutOverThreadsGivesTheSameBits) {
  auto parallel = ParallelFor::Start(3);
  ASSERT_TRUE(parallel.ok());
  OptimizerOptions sgd;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-4;
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  adam.weight_decay = 1e-2;
  OptimizerOptions adamw = adam;
  adamw.kind = OptimizerKind::kAdamW;
  const size_t n = 3 * kParallelGrain + 7;  // three ranges, uneven
  for (const OptimizerOptions& o : {sgd, adam, adamw}) {
    for (int out_kind = 0; out_kind < 3; ++out_kind) {  // over the params, the gradient, apart
      std::vector<float> p1(n), p2(n);
      for (size_t i = 0; i < n; ++i) p1[i] = p2[i] = std::sin(static_cast<float>(i));
      OptimizerState s1, s2;
      for (int64_t t = 0; t < 3; ++t) {
        const torch::Tensor g = Gradient(static_cast<int64_t>(n), t);
        std::vector<float> g1(g.data_ptr<float>(), g.data_ptr<float>() + n), g2 = g1;
        std::vector<float> o1(n), o2(n);
        float* out1 = out_kind == 0 ? p1.data() : out_kind == 1 ? g1.data() : o1.data();
        float* out2 = out_kind == 0 ? p2.data() : out_kind == 1 ? g2.data() : o2.data();
        ApplyOptimizer(o, t, p1.data(), g1.data(), 8.0f, out1, n, &s1);
        ApplyOptimizer(o, t, p2.data(), g2.data(), 8.0f, out2, n, &s2, parallel->get());
        ASSERT_EQ(std::memcmp(out1, out2, n * sizeof(float)), 0) << OptimizerKindName(o.kind);
        ASSERT_EQ(s1.slot0, s2.slot0);
        ASSERT_EQ(s1.slot1, s2.slot1);
        std::memcpy(p1.data(), out1, n * sizeof(float));
        std::memcpy(p2.data(), out2, n * sizeof(float));
      }
    }
  }
}

}  // namespace
}  // namespace eps
