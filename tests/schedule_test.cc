// Learning-rate schedules, option validation and name parsing of server/optimizer.h, plus the
// libtorch-free properties of ApplyOptimizer (chunking invariance, state handling). Runs under
// ASan + UBSan; tests/optimizer_test.cc checks the arithmetic against libtorch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/parallel_for.h"
#include "server/optimizer.h"

namespace eps {
namespace {

OptimizerOptions Cosine(double lr, double min_lr, int64_t warmup, int64_t total) {
  OptimizerOptions o;
  o.lr = lr;
  o.schedule = ScheduleKind::kCosine;
  o.min_lr = min_lr;
  o.warmup_steps = warmup;
  o.total_steps = total;
  return o;
}

TEST(LearningRate, ConstantIsLrAtEveryStep) {
  OptimizerOptions o;
  o.lr = 0.125;
  ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
  for (int64_t t : {0, 1, 7, 1000000}) EXPECT_EQ(LearningRate(o, t), 0.125) << t;
}

TEST(LearningRate, StepDecaysByGammaAtEachBoundary) {
  OptimizerOptions o;
  o.lr = 0.5;
  o.schedule = ScheduleKind::kStep;
  o.step_size = 3;
  o.gamma = 0.5;
  ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
  EXPECT_EQ(LearningRate(o, 0), 0.5);
  EXPECT_EQ(LearningRate(o, 2), 0.5);  // last step before the first boundary
  EXPECT_EQ(LearningRate(o, 3), 0.25);
  EXPECT_EQ(LearningRate(o, 5), 0.25);
  EXPECT_EQ(LearningRate(o, 6), 0.125);
  EXPECT_EQ(LearningRate(o, 30), 0.5 * std::pow(0.5, 10));
  o.gamma = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(o, 7), 0.5 * 0.1 * 0.1);
}

TEST(LearningRate, CosineWarmsUpLinearlyThenDecaysToMinLr) {
  const OptimizerOptions o = Cosine(0.1, 0.001, 4, 20);
  ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
  EXPECT_DOUBLE_EQ(LearningRate(o, 0), 0.1 / 4);  // first warmup step: lr / warmup
  EXPECT_DOUBLE_EQ(LearningRate(o, 1), 0.1 * 2 / 4);
  EXPECT_EQ(LearningRate(o, 3), 0.1);                                  // end of warmup: exactly lr
  EXPECT_EQ(LearningRate(o, 4), 0.1);                                  // cosine starts at lr
  EXPECT_DOUBLE_EQ(LearningRate(o, 12), 0.001 + 0.5 * (0.1 - 0.001));  // half way
  EXPECT_EQ(LearningRate(o, 20), 0.001);  // total_steps: exactly min_lr
  EXPECT_EQ(LearningRate(o, 21), 0.001);
  EXPECT_EQ(LearningRate(o, 1000), 0.001);
  for (int64_t t = 0; t + 1 < 4; ++t) EXPECT_LT(LearningRate(o, t), LearningRate(o, t + 1)) << t;
  for (int64_t t = 4; t < 20; ++t) {
    EXPECT_GT(LearningRate(o, t), LearningRate(o, t + 1)) << t;
    EXPECT_LE(LearningRate(o, t), 0.1) << t;
    EXPECT_GE(LearningRate(o, t + 1), 0.001) << t;
  }
}

TEST(LearningRate, CosineWithoutWarmupStartsAtLr) {
  const OptimizerOptions o = Cosine(0.3, 0, 0, 10);
  ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
  EXPECT_EQ(LearningRate(o, 0), 0.3);
  EXPECT_LT(LearningRate(o, 1), 0.3);
  EXPECT_EQ(LearningRate(o, 10), 0.0);
}

// Expects `o` to be rejected with InvalidArgument whose message names `field`.
void ExpectRejected(const OptimizerOptions& o, const std::string& field) {
  const Status s = ValidateOptimizerOptions(o);
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.ToString();
}

TEST(ValidateOptimizerOptions, AcceptsDefaultsAndTypicalConfigs) {
  OptimizerOptions o;
  EXPECT_TRUE(ValidateOptimizerOptions(o).ok());
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 5e-4;
  EXPECT_TRUE(ValidateOptimizerOptions(o).ok());
  OptimizerOptions a = Cosine(1e-3, 1e-5, 100, 1000);
  a.kind = OptimizerKind::kAdamW;
  a.weight_decay = 0.01;
  EXPECT_TRUE(ValidateOptimizerOptions(a).ok());
}

TEST(ValidateOptimizerOptions, RejectsEachBadOptionNamingIt) {
  const double nan = std::nan("");
  auto sgd = [](auto edit) {
    OptimizerOptions o;
    edit(o);
    return o;
  };
  auto adam = [](auto edit) {
    OptimizerOptions o;
    o.kind = OptimizerKind::kAdam;
    o.lr = 1e-3;
    edit(o);
    return o;
  };
  ExpectRejected(sgd([](OptimizerOptions& o) { o.lr = 0; }), "lr");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.lr = -0.1; }), "lr");
  ExpectRejected(sgd([&](OptimizerOptions& o) { o.lr = nan; }), "lr");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.lr = INFINITY; }), "lr");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.momentum = -0.5; }), "momentum");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.dampening = 1.5; }), "dampening");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.weight_decay = -1; }), "weight_decay");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.nesterov = true; }), "nesterov");  // no momentum
  ExpectRejected(sgd([](OptimizerOptions& o) {
                   o.nesterov = true;
                   o.momentum = 0.9;
                   o.dampening = 0.1;
                 }),
                 "nesterov");
  ExpectRejected(adam([](OptimizerOptions& o) { o.beta1 = 1.0; }), "beta1");
  ExpectRejected(adam([](OptimizerOptions& o) { o.beta1 = -0.1; }), "beta1");
  ExpectRejected(adam([](OptimizerOptions& o) { o.beta2 = 1.0; }), "beta2");
  ExpectRejected(adam([&](OptimizerOptions& o) { o.beta2 = nan; }), "beta2");
  ExpectRejected(adam([](OptimizerOptions& o) { o.eps = 0; }), "eps");
  ExpectRejected(adam([](OptimizerOptions& o) { o.momentum = 0.9; }), "momentum");
  ExpectRejected(adam([](OptimizerOptions& o) { o.weight_decay = -0.01; }), "weight_decay");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.kind = static_cast<OptimizerKind>(42); }), "kind");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.schedule = ScheduleKind::kStep; }), "step_size");
  ExpectRejected(sgd([](OptimizerOptions& o) {
                   o.schedule = ScheduleKind::kStep;
                   o.step_size = 10;
                   o.gamma = 0;
                 }),
                 "gamma");
  ExpectRejected(Cosine(0.1, 0, 10, 10), "total_steps");
  ExpectRejected(Cosine(0.1, 0, 0, 0), "total_steps");
  ExpectRejected(Cosine(0.1, 0, -1, 10), "warmup_steps");
  ExpectRejected(Cosine(0.1, 0.2, 0, 10), "min_lr");
  ExpectRejected(Cosine(0.1, -0.01, 0, 10), "min_lr");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.warmup_steps = 5; }), "warmup_steps");
  ExpectRejected(sgd([](OptimizerOptions& o) { o.schedule = static_cast<ScheduleKind>(9); }),
                 "schedule");
}

TEST(OptimizerNames, ParseRoundTripsAndRejectsUnknownNames) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW,
                          OptimizerKind::kAdagrad}) {
    StatusOr<OptimizerKind> parsed = ParseOptimizerKind(OptimizerKindName(k));
    ASSERT_TRUE(parsed.ok()) << OptimizerKindName(k);
    EXPECT_EQ(*parsed, k);
  }
  for (ScheduleKind k : {ScheduleKind::kConstant, ScheduleKind::kStep, ScheduleKind::kCosine}) {
    StatusOr<ScheduleKind> parsed = ParseScheduleKind(ScheduleKindName(k));
    ASSERT_TRUE(parsed.ok()) << ScheduleKindName(k);
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_STREQ(OptimizerKindName(OptimizerKind::kAdamW), "adamw");
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kCosine), "cosine");
  for (const char* bad : {"", "SGD", "rmsprop", "adam "}) {
    StatusOr<OptimizerKind> k = ParseOptimizerKind(bad);
    ASSERT_FALSE(k.ok()) << bad;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  }
  StatusOr<ScheduleKind> s = ParseScheduleKind("linear");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("linear"), std::string::npos);
  EXPECT_STREQ(OptimizerKindName(static_cast<OptimizerKind>(42)), "unknown");
}

// Deterministic values of mixed sign and magnitude, with some exact zeros.
std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    v[i] = i % 97 == 0 ? 0.0f : static_cast<float>((u - 0.5) * std::exp(8 * (u - 0.5)));
  }
  return v;
}

TEST(ApplyOptimizer, ChunkedUpdateGivesSameBitsAsWholeUpdate) {
  const size_t n = 1031;
  std::vector<OptimizerOptions> configs(4);
  configs[1].momentum = 0.9;
  configs[1].nesterov = true;
  configs[1].weight_decay = 1e-3;
  configs[2].kind = OptimizerKind::kAdam;
  configs[2].weight_decay = 1e-2;
  configs[3] = Cosine(1e-3, 1e-5, 2, 6);
  configs[3].kind = OptimizerKind::kAdamW;
  configs[3].weight_decay = 0.05;
  for (const OptimizerOptions& o : configs) {
    ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
    std::vector<float> whole = Values(n, 1);
    std::vector<float> parts = whole;
    OptimizerState whole_state;
    const size_t cuts[] = {0, 1, 17, 500, n};
    std::vector<OptimizerState> part_states(4);
    for (int64_t t = 0; t < 6; ++t) {
      const std::vector<float> grad = Values(n, 100 + static_cast<uint32_t>(t));
      ApplyOptimizer(o, t, whole.data(), grad.data(), n, &whole_state);
      for (size_t c = 0; c < 4; ++c) {
        ApplyOptimizer(o, t, parts.data() + cuts[c], grad.data() + cuts[c], cuts[c + 1] - cuts[c],
                       &part_states[c]);
      }
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), parts.data(), n * sizeof(float)))
        << OptimizerKindName(o.kind);
    EXPECT_NE(whole, Values(n, 1)) << "the optimizer did not move the parameters";
  }
}

// What a shard does: the tree's sum stepped out of place, divided inside the loop, written over
// the sum itself or into a third buffer (a sum read where it was pushed); the bits of dividing
// first and stepping a copy of the parameters in place. V = 1 divides by nothing.
TEST(ApplyOptimizer, OutOfPlaceWithADivisorGivesTheBitsOfDividingFirstAndSteppingInPlace) {
  const size_t n = 1003;
  std::vector<OptimizerOptions> configs(5);
  configs[1].momentum = 0.9;
  configs[1].nesterov = true;
  configs[1].weight_decay = 0.01;
  configs[2].kind = OptimizerKind::kAdam;
  configs[2].weight_decay = 0.01;
  configs[3].kind = OptimizerKind::kAdamW;
  configs[3].weight_decay = 0.05;
  configs[4].kind = OptimizerKind::kAdagrad;
  configs[4].weight_decay = 0.01;
  for (const float divisor : {7.0f, 1.0f})
    for (const OptimizerOptions& o : configs) {
      ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
      std::vector<float> in_place = Values(n, 1), current = in_place, elsewhere = in_place;
      OptimizerState in_place_state, shard_state, elsewhere_state;
      for (int64_t t = 0; t < 4; ++t) {
        std::vector<float> sum = Values(n, 200 + static_cast<uint32_t>(t));
        std::vector<float> mean = sum;
        for (float& g : mean) g = g / divisor;
        ApplyOptimizer(o, t, in_place.data(), mean.data(), n, &in_place_state);
        std::vector<float> out(n);  // a third buffer: out overlaps neither input
        ApplyOptimizer(o, t, elsewhere.data(), sum.data(), divisor, out.data(), n,
                       &elsewhere_state);
        elsewhere = out;
        ApplyOptimizer(o, t, current.data(), sum.data(), divisor, sum.data(), n, &shard_state);
        current = sum;
        ASSERT_EQ(0, std::memcmp(in_place.data(), current.data(), n * sizeof(float)))
            << OptimizerKindName(o.kind) << " step " << t << " divisor " << divisor;
        ASSERT_EQ(0, std::memcmp(in_place.data(), elsewhere.data(), n * sizeof(float)))
            << OptimizerKindName(o.kind) << " step " << t << " divisor " << divisor;
      }
      EXPECT_EQ(in_place_state.slot0, shard_state.slot0);
      EXPECT_EQ(in_place_state.slot1, shard_state.slot1);
      EXPECT_EQ(in_place_state.slot0, elsewhere_state.slot0);
    }
}

// A shard whose checkpoint still holds the slots steps into new ones (SlotsBefore): the bits
// of copying the old slots in and stepping in place, for every optimizer, every `out` and cut
// over threads or not, and the old slots are only read.
TEST(ApplyOptimizer, SlotsReadFromElsewhereGiveTheBitsOfSteppingInPlace) {
  auto parallel = ParallelFor::Start(2);
  ASSERT_TRUE(parallel.ok());
  const size_t n = 2 * kParallelGrain + 13;  // two ranges and a tail
  std::vector<OptimizerOptions> configs(4);
  configs[0].momentum = 0.9;
  configs[0].nesterov = true;
  configs[0].weight_decay = 0.01;
  configs[1].kind = OptimizerKind::kAdam;
  configs[1].weight_decay = 0.01;
  configs[2].kind = OptimizerKind::kAdamW;
  configs[2].weight_decay = 0.05;
  configs[3].kind = OptimizerKind::kAdagrad;
  configs[3].weight_decay = 0.01;
  for (const OptimizerOptions& o : configs) {
    ASSERT_TRUE(ValidateOptimizerOptions(o).ok());
    for (ParallelFor* cut : {static_cast<ParallelFor*>(nullptr), parallel->get()}) {
      for (int out_kind = 0; out_kind < 3; ++out_kind) {  // over the params, the gradient, apart
        SCOPED_TRACE(std::string(OptimizerKindName(o.kind)) + ", out " + std::to_string(out_kind) +
                     (cut ? ", threads" : ""));
        std::vector<float> p1 = Values(n, 1), p2 = p1;
        OptimizerState s1, s2;
        for (int64_t t = 0; t < 3; ++t) {
          std::vector<float> g1 = Values(n, 300 + static_cast<uint32_t>(t)), g2 = g1;
          std::vector<float> o1(n), o2(n);
          float* out1 = out_kind == 0 ? p1.data() : out_kind == 1 ? g1.data() : o1.data();
          float* out2 = out_kind == 0 ? p2.data() : out_kind == 1 ? g2.data() : o2.data();
          ApplyOptimizer(o, t, p1.data(), g1.data(), 8.0f, out1, n, &s1, cut);
          if (t == 0) {
            ApplyOptimizer(o, t, p2.data(), g2.data(), 8.0f, out2, n, &s2, cut);
          } else {
            // The old slots stay where they are; the state gets new ones (not yet written:
            // NaN, so a slot read from them shows).
            const OptimizerState held = s2;
            s2.slot0.assign(held.slot0.size(), std::nanf(""));
            s2.slot1.assign(held.slot1.size(), std::nanf(""));
            SlotsBefore before;
            before.slot0 = held.slot0.empty() ? nullptr : held.slot0.data();
            before.slot1 = held.slot1.empty() ? nullptr : held.slot1.data();
            const OptimizerState unchanged = held;
            ApplyOptimizer(o, t, p2.data(), g2.data(), 8.0f, out2, n, &s2, cut, &before);
            ASSERT_EQ(held.slot0, unchanged.slot0);
            ASSERT_EQ(held.slot1, unchanged.slot1);
          }
          ASSERT_EQ(0, std::memcmp(out1, out2, n * sizeof(float))) << "step " << t;
          ASSERT_EQ(0, std::memcmp(s1.slot0.data(), s2.slot0.data(), n * sizeof(float)));
          ASSERT_EQ(s1.slot1.size(), s2.slot1.size());
          if (!s1.slot1.empty()) {  // no second slot (SGD): nothing to compare, and no pointer to
            ASSERT_EQ(0, std::memcmp(s1.slot1.data(), s2.slot1.data(), s1.slot1.size() * sizeof(float)));
          }
          std::memcpy(p1.data(), out1, n * sizeof(float));
          std::memcpy(p2.data(), out2, n * sizeof(float));
        }
      }
    }
  }
}

TEST(ApplyOptimizer, AllocatesOnlyTheSlotsItUses) {
  const size_t n = 10;
  std::vector<float> p(n, 1.0f), g(n, 0.5f);
  OptimizerOptions sgd;
  OptimizerState s0;
  ApplyOptimizer(sgd, 0, p.data(), g.data(), n, &s0);
  EXPECT_TRUE(s0.initialized);
  EXPECT_EQ(NumOptimizerSlots(sgd), 0);
  EXPECT_TRUE(s0.slot0.empty() && s0.slot1.empty());
  EXPECT_EQ(p[3], std::fma(0.5f, -0.01f, 1.0f));

  OptimizerOptions momentum;
  momentum.momentum = 0.9;
  OptimizerState s1;
  ApplyOptimizer(momentum, 0, p.data(), g.data(), n, &s1);
  EXPECT_EQ(NumOptimizerSlots(momentum), 1);
  ASSERT_EQ(s1.slot0.size(), n);
  EXPECT_EQ(s1.slot0[0], 0.5f);  // first step: the buffer is the gradient itself
  EXPECT_TRUE(s1.slot1.empty());

  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  OptimizerState s2;
  ApplyOptimizer(adam, 0, p.data(), g.data(), n, &s2);
  EXPECT_EQ(NumOptimizerSlots(adam), 2);
  ASSERT_EQ(s2.slot0.size(), n);
  ASSERT_EQ(s2.slot1.size(), n);
  EXPECT_EQ(s2.slot0[0], std::fma(0.5f, static_cast<float>(1 - 0.9), 0.0f));
}

TEST(ApplyOptimizer, AdamFirstStepMovesEachParameterByAboutLr) {
  // Bias correction makes Adam's first update lr * g / (|g| + eps'), i.e. about lr in size.
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 0.01;
  const size_t n = 64;
  std::vector<float> p(n, 0.0f);
  const std::vector<float> g = Values(n, 7);
  OptimizerState s;
  ApplyOptimizer(o, 0, p.data(), g.data(), n, &s);
  for (size_t i = 0; i < n; ++i) {
    if (g[i] == 0) {
      EXPECT_EQ(p[i], 0.0f);
    } else {
      EXPECT_NEAR(p[i], g[i] > 0 ? -0.01 : 0.01, 1e-4) << i;
    }
  }
}

}  // namespace
}  // namespace eps
