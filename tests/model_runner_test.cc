#include "worker/model_runner.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace eps {
namespace {

// A small synthetic 28x28 data set whose pixels depend on the sample and label.
Dataset SyntheticData(int64_t n) {
  Dataset d;
  d.size = n;
  d.rows = 28;
  d.cols = 28;
  d.images.resize(static_cast<size_t>(n * 28 * 28));
  d.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    d.labels[static_cast<size_t>(i)] = i % 10;
    for (int64_t p = 0; p < 28 * 28; ++p) {
      const auto v = static_cast<uint8_t>((i * 37 + p * (i % 10 + 1)) % 256);
      d.images[static_cast<size_t>(i * 784 + p)] = NormalizePixel(v);
    }
  }
  return d;
}

std::unique_ptr<ModelRunner> MustCreate(const std::string& model, uint64_t seed = 1) {
  StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create({model, seed, 1});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

size_t Bytes(const TensorSpec& t) { return static_cast<size_t>(t.numel()) * DTypeSize(t.dtype); }

// Every parameter and buffer, as bytes.
std::vector<std::vector<uint8_t>> TensorBytes(ModelRunner& r) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < r.Tensors().size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(r.MutableData(i));
    out.emplace_back(p, p + Bytes(r.Tensors()[i]));
  }
  return out;
}

void RestoreTensorBytes(ModelRunner& r, const std::vector<std::vector<uint8_t>>& bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) std::memcpy(r.MutableData(i), bytes[i].data(), bytes[i].size());
}

// Every gradient, as bytes.
std::vector<std::vector<uint8_t>> GradBytes(const ModelRunner& r) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < r.NumParameters(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(r.GradData(i));
    out.emplace_back(p, p + Bytes(r.Tensors()[i]));
  }
  return out;
}

bool AllZero(const std::vector<std::vector<uint8_t>>& bytes) {
  for (const auto& t : bytes) {
    for (uint8_t b : t) {
      if (b != 0) return false;
    }
  }
  return true;
}

TEST(ModelRunner, RejectsAnUnknownModelAndBadThreadCounts) {
  StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create({"resnet9000", 0, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("resnet9000"), std::string::npos);
  EXPECT_EQ(ModelRunner::Create({"mlp", 0, 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelRunner, ListsParametersThenBuffersOfTheCnn) {
  auto cnn = MustCreate("cnn");
  ASSERT_NE(cnn, nullptr);
  int64_t params = 0;
  for (const TensorSpec& t : cnn->Tensors()) {
    EXPECT_EQ(t.kind, TensorKind::kParameter) << t.name;  // no buffers in cnn
    EXPECT_EQ(t.dtype, DType::kFloat32);
    params += t.numel();
  }
  EXPECT_EQ(params, 417482);  // 416 + 12832 + 401664 + 2570
  EXPECT_EQ(cnn->Tensors().front().name, "conv1.weight");
  EXPECT_EQ(cnn->NumParameters(), 8u);

  auto bn = MustCreate("cnn_bn");
  ASSERT_NE(bn, nullptr);
  const std::vector<TensorSpec>& t = bn->Tensors();
  ASSERT_EQ(bn->NumParameters(), 12u);
  ASSERT_EQ(t.size(), 12u + 6u);
  for (size_t i = 12; i < t.size(); ++i) EXPECT_EQ(t[i].kind, TensorKind::kBuffer) << t[i].name;
  EXPECT_EQ(t[12].name, "bn1.running_mean");
  EXPECT_EQ(t[14].name, "bn1.num_batches_tracked");
  EXPECT_EQ(t[14].dtype, DType::kInt64);
  EXPECT_EQ(t[14].numel(), 1);
  EXPECT_TRUE(MakeLayout(t, 2, 4096).ok());
}

TEST(ModelRunner, InitializesIdenticallyFromTheSameSeed) {
  for (const char* model : {"mlp", "cnn", "cnn_bn"}) {
    auto a = MustCreate(model, 5), b = MustCreate(model, 5), c = MustCreate(model, 6);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(TensorBytes(*a), TensorBytes(*b)) << model;
    EXPECT_NE(TensorBytes(*a), TensorBytes(*c)) << model;
  }
}

TEST(ModelRunner, GivesBitwiseIdenticalGradientsWhenAStepRepeats) {
  const Dataset data = SyntheticData(16);
  const std::vector<int64_t> indices = {3, 1, 4, 1, 5, 9, 2, 6};
  for (const char* model : {"mlp", "cnn"}) {
    auto r = MustCreate(model);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(AllZero(GradBytes(*r))) << "gradients before the first step";
    StatusOr<float> loss1 = r->TrainStep(data, indices, 99);
    ASSERT_TRUE(loss1.ok()) << loss1.status().ToString();
    EXPECT_GT(*loss1, 0.0f);
    const auto grads1 = GradBytes(*r);
    EXPECT_FALSE(AllZero(grads1));
    // A different step in between must leave nothing behind.
    ASSERT_TRUE(r->TrainStep(data, {0, 2}, 5).ok());
    StatusOr<float> loss2 = r->TrainStep(data, indices, 99);
    ASSERT_TRUE(loss2.ok()) << loss2.status().ToString();
    EXPECT_EQ(std::memcmp(&*loss1, &*loss2, sizeof(float)), 0) << model;
    EXPECT_EQ(GradBytes(*r), grads1) << model << ": gradients accumulated or are not deterministic";
  }
}

TEST(ModelRunner, DrawsDropoutFromTheStepSeedInTheCnn) {
  const Dataset data = SyntheticData(8);
  const std::vector<int64_t> indices = {0, 1, 2, 3};
  auto r = MustCreate("cnn");
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->TrainStep(data, indices, 1).ok());
  const auto a = GradBytes(*r);
  ASSERT_TRUE(r->TrainStep(data, indices, 2).ok());
  EXPECT_NE(GradBytes(*r), a);
  // The mlp has no randomness: the seed does not matter.
  auto m = MustCreate("mlp");
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->TrainStep(data, indices, 1).ok());
  const auto b = GradBytes(*m);
  ASSERT_TRUE(m->TrainStep(data, indices, 2).ok());
  EXPECT_EQ(GradBytes(*m), b);
}

TEST(ModelRunner, RestoringBatchNormBuffersMakesTheNextStepRepeatExactly) {
  const Dataset data = SyntheticData(8);
  const std::vector<int64_t> indices = {0, 1, 2, 3};
  auto r = MustCreate("cnn_bn");
  ASSERT_NE(r, nullptr);
  const auto before = TensorBytes(*r);
  StatusOr<float> loss1 = r->TrainStep(data, indices, 7);
  ASSERT_TRUE(loss1.ok()) << loss1.status().ToString();
  const auto grads1 = GradBytes(*r);
  const auto after = TensorBytes(*r);
  const size_t np = r->NumParameters();
  for (size_t i = 0; i < after.size(); ++i) {
    if (i < np) {
      EXPECT_EQ(after[i], before[i]) << "parameter " << r->Tensors()[i].name << " changed in TrainStep";
    } else {
      EXPECT_NE(after[i], before[i]) << "buffer " << r->Tensors()[i].name << " did not change";
    }
  }
  RestoreTensorBytes(*r, before);
  StatusOr<float> loss2 = r->TrainStep(data, indices, 7);
  ASSERT_TRUE(loss2.ok());
  EXPECT_EQ(std::memcmp(&*loss1, &*loss2, sizeof(float)), 0);
  EXPECT_EQ(GradBytes(*r), grads1);
  EXPECT_EQ(TensorBytes(*r), after);
}

TEST(ModelRunner, WritesThroughMutableDataChangeTheModel) {
  const Dataset data = SyntheticData(4);
  auto r = MustCreate("mlp");
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->TrainStep(data, {0, 1}, 0).ok());
  const auto grads = GradBytes(*r);
  auto* w = static_cast<float*>(r->MutableData(0));
  for (int64_t i = 0; i < r->Tensors()[0].numel(); ++i) w[i] *= 0.5f;
  ASSERT_TRUE(r->TrainStep(data, {0, 1}, 0).ok());
  EXPECT_NE(GradBytes(*r), grads);
}

TEST(ModelRunner, EvaluatesARangeWithoutChangingTheModel) {
  const Dataset data = SyntheticData(23);
  auto r = MustCreate("cnn_bn");
  ASSERT_NE(r, nullptr);
  const auto before = TensorBytes(*r);
  StatusOr<EvalStats> s = r->Evaluate(data, 3, 23, 8);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->count, 20);
  EXPECT_GE(s->correct, 0);
  EXPECT_LE(s->correct, s->count);
  EXPECT_GT(s->loss_sum, 0.0);
  EXPECT_EQ(TensorBytes(*r), before);
  // Train mode is back: a step updates the BatchNorm statistics again.
  ASSERT_TRUE(r->TrainStep(data, {0, 1}, 0).ok());
  EXPECT_NE(TensorBytes(*r), before);

  StatusOr<EvalStats> empty = r->Evaluate(data, 5, 5, 8);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->count, 0);
  EXPECT_EQ(r->Evaluate(data, 0, 24, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->Evaluate(data, 4, 3, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->Evaluate(data, 0, 4, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelRunner, RejectsBadMicrobatchesWithAStatus) {
  Dataset data = SyntheticData(4);
  auto r = MustCreate("mlp");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->TrainStep(data, {}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->TrainStep(data, {0, 4}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->TrainStep(data, {-1}, 0).status().code(), StatusCode::kInvalidArgument);
  data.labels[2] = 10;
  EXPECT_EQ(r->TrainStep(data, {2}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r->TrainStep(data, {1}, 0).ok());
  data.images.pop_back();
  EXPECT_EQ(r->TrainStep(data, {1}, 0).status().code(), StatusCode::kInvalidArgument);
  Dataset small = SyntheticData(2);
  small.rows = 14;
  small.cols = 56;
  EXPECT_EQ(r->TrainStep(small, {0}, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
