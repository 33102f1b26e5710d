// Tests for the torch adapter. They run on the CPU, or on the device named by
// EPS_TEST_DEVICE (e.g. cuda:0: scripts/gpu_check.sh runs them so on a GPU).
#include "models/model_runner.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>
#include <zmq.hpp>

#include "models/net.h"

namespace eps {
namespace {

std::string TestDevice() {
  const char* d = std::getenv("EPS_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

// A small synthetic 28x28 data set whose pixels depend on the sample and label.
Dataset SyntheticData(int64_t n, std::vector<int64_t> shape = {1, 28, 28}) {
  std::vector<float> images(static_cast<size_t>(n * 28 * 28));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<size_t>(i)] = i % 10;
    for (int64_t p = 0; p < 28 * 28; ++p) {
      const auto v = static_cast<uint8_t>((i * 37 + p * (i % 10 + 1)) % 256);
      images[static_cast<size_t>(i * 784 + p)] = NormalizePixel(v);
    }
  }
  StatusOr<Dataset> d = MakeDataset(std::move(shape), std::move(images), std::move(labels));
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : Dataset{};
}

std::unique_ptr<ModelRunner> MustCreate(const std::string& model, uint64_t seed = 1) {
  StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create({model, seed, 1, TestDevice()});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

size_t Bytes(const TensorSpec& t) { return static_cast<size_t>(t.numel()) * DTypeSize(t.dtype); }

// Every parameter and buffer, as bytes.
std::vector<std::vector<uint8_t>> TensorBytes(ModelRunner& r) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < r.Tensors().size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(r.Data(i));
    out.emplace_back(p, p + Bytes(r.Tensors()[i]));
  }
  return out;
}

void RestoreTensorBytes(ModelRunner& r, const std::vector<std::vector<uint8_t>>& bytes) {
  for (size_t i = 0; i < bytes.size(); ++i)
    ASSERT_TRUE(r.Write(i, 0, bytes[i].data(), bytes[i].size()).ok());
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

// OpenBLAS (pthread build, Debian's libopenblas0-pthread) keeps its own pool,
// one thread per core unless told otherwise; its thread count changes the
// bits of a step. A runner computes with exactly the job's count.
TEST(ModelRunner, TheBlasPoolRunsTheJobsThreadCount) {
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (get == nullptr) GTEST_SKIP() << "the BLAS behind libtorch is not OpenBLAS";
  for (int threads : {2, 1}) {
    auto r = ModelRunner::Create({"mlp", 0, threads});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(get(), threads);
  }
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

// int64 samples of `width` ids (over `ids`, not copied) with two classes.
Dataset IdSamples(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                  int64_t width) {
  Dataset data;
  data.size = static_cast<int64_t>(labels.size());
  data.sample_shape = {width};
  data.feature_dtype = DataType::kInt64;
  data.features = ids.data();
  data.labels = labels.data();
  data.num_classes = 2;
  return data;
}

// text_transformer's token embedding is a sparse table whose gradient is the
// rows the step's ids touched (padding's row 0 too), the position embedding a
// dense tensor; with sparse tables off (--sparse_optimizer=exact) both are dense.
TEST(ModelRunner, TheTextTransformersTokenEmbeddingIsASparseTableUnlessExact) {
  std::vector<int64_t> ids = {2, 7, 5, 0, 2, 5, 9, 9};  // two samples of 4: <cls> first, 0 <pad>
  std::vector<int64_t> labels = {0, 1};
  const Dataset data = IdSamples(ids, labels, 4);
  for (bool tables : {true, false}) {
    ModelOptions o{"text_transformer", 1, 1, "cpu"};  // a table on a GPU trains dense
    o.sizes = {8, 1, 2, 20, 4, 20, 2};  // dim, layers, heads, depth, seq, rows, classes
    o.sparse_tables = tables;
    StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::vector<TensorSpec>& t = (*r)->Tensors();
    ASSERT_EQ(t[0].name, "text.tok.weight");
    ASSERT_EQ(t[1].name, "text.pos.weight");
    EXPECT_EQ(t[0].sparse, tables);
    EXPECT_FALSE(t[1].sparse);
    for (size_t i = 2; i < t.size(); ++i) EXPECT_FALSE(t[i].sparse) << t[i].name;
    ASSERT_TRUE((*r)->TrainStep(data, {0, 1}, 3).ok());
    const SparseGradient g = (*r)->SparseGrad(0);
    const std::vector<int64_t> rows =
        tables ? std::vector<int64_t>{0, 2, 5, 7, 9} : std::vector<int64_t>{};
    EXPECT_EQ(std::vector<int64_t>(g.ids, g.ids + g.rows), rows);
  }
}

// A table of 2^26 rows (2 GiB) looked up by the batches' rows: the model holds the rows
// written, names the rows a batch reads (row 0, the padding, always), and computes the bits
// of the same model holding the table with the same rows in it, with padding in the batch
// and without (a compact table's ids are rewritten as ranks: id 0 must stay 0).
TEST(ModelRunner, ALookupTableHoldsTheRowsWrittenAndComputesTheHeldTablesBits) {
  std::vector<int64_t> ids = {2, 7, 5, 0, 2, 5, 9, 1 << 25};  // two samples of 4
  std::vector<int64_t> labels = {0, 1};
  const Dataset data = IdSamples(ids, labels, 4);
  const uint32_t rows = 1 << 26;
  std::unique_ptr<ModelRunner> runners[2];
  for (int lookup : {0, 1}) {
    ModelOptions o{"text_transformer", 1, 1, "cpu"};
    o.sizes = {8, 1, 2, 20, 4, rows, 2};  // dim, layers, heads, depth, seq, rows, classes
    o.lookup_table_bytes = lookup ? 1 << 20 : 0;
    StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    runners[lookup] = std::move(r).value();
    EXPECT_EQ(runners[lookup]->Lookup(0), lookup == 1);
    EXPECT_FALSE(runners[lookup]->Lookup(1));  // the position embedding: dense
  }
  ModelRunner& held = *runners[0];
  ModelRunner& looked = *runners[1];
  auto read = looked.TableRows(data, {0, 1}, /*held_too=*/false);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const std::vector<uint64_t> want = {0, 2, 5, 7, 9, 1 << 25};
  EXPECT_EQ((*read)[0], want);
  EXPECT_TRUE((*read)[1].empty());
  // A table held whole names its rows only when they are asked for too (a worker's warm rows).
  auto held_rows = held.TableRows(data, {0, 1}, /*held_too=*/false);
  ASSERT_TRUE(held_rows.ok());
  EXPECT_TRUE((*held_rows)[0].empty());
  held_rows = held.TableRows(data, {0, 1}, /*held_too=*/true);
  ASSERT_TRUE(held_rows.ok()) << held_rows.status().ToString();
  EXPECT_EQ((*held_rows)[0], want);
  EXPECT_TRUE((*held_rows)[1].empty());  // the position embedding: dense
  auto one = looked.TableRows(data, {1}, /*held_too=*/false);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0], (std::vector<uint64_t>{0, 2, 5, 9, 1 << 25}));
  // The same rows into both, and the same dense values (the seed's: no table drew any).
  for (uint64_t r : want) {
    const float row[8] = {0.5f * r, -1, 2, 0.25f, 1e-3f * r, 3, -2, 1};
    ASSERT_TRUE(held.Write(0, r * sizeof row, row, sizeof row).ok());
    ASSERT_TRUE(looked.WriteTableRows(0, &r, row, 1).ok());
  }
  EXPECT_EQ(looked.Write(0, 0, ids.data(), 4).code(), StatusCode::kFailedPrecondition);
  EXPECT_GE(looked.TableHeldBytes(0), want.size() * 8 * sizeof(float));
  EXPECT_LT(looked.TableHeldBytes(0), size_t{1} << 20);
  for (size_t i = 1; i < held.Tensors().size(); ++i) {
    const size_t n = Bytes(held.Tensors()[i]);
    EXPECT_EQ(std::memcmp(held.Data(i), looked.Data(i), n), 0) << held.Tensors()[i].name;
  }
  for (const std::vector<int64_t>& batch : {std::vector<int64_t>{0, 1}, {1}}) {
    auto a = held.TrainStep(data, batch, 5);
    auto b = looked.TrainStep(data, batch, 5);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    EXPECT_EQ(std::memcmp(&*a, &*b, sizeof(float)), 0);
    const SparseGradient ga = held.SparseGrad(0), gb = looked.SparseGrad(0);
    ASSERT_EQ(ga.rows, batch.size() == 2 ? want.size() : 4u);
    ASSERT_EQ(gb.rows, ga.rows);
    EXPECT_EQ(std::memcmp(ga.ids, gb.ids, ga.rows * sizeof(int64_t)), 0);
    EXPECT_EQ(std::memcmp(ga.values, gb.values, ga.rows * 8 * sizeof(float)), 0);
    for (size_t i = 1; i < held.NumParameters(); ++i) {
      EXPECT_EQ(std::memcmp(held.GradData(i), looked.GradData(i), Bytes(held.Tensors()[i])), 0)
          << held.Tensors()[i].name;
    }
  }
  // The rows go back: a batch can no longer be computed until they are written again.
  ASSERT_TRUE(looked.DropTableRows(0).ok());
  EXPECT_EQ(looked.TableHeldBytes(0), 0u);
  EXPECT_EQ(looked.TrainStep(data, {1}, 5).status().code(), StatusCode::kFailedPrecondition);
}

// A dlrm built with a table of 0 rows has unbounded keys: any id below 2^63 - 1 is a row,
// looked up whatever the budget, and its gradient names the ids themselves.
TEST(ModelRunner, ATableOfUnboundedKeysTakesAnyId) {
  std::vector<int64_t> samples(2 * 39, 1);
  const int64_t huge = (int64_t{1} << 62) + 12345;
  for (int64_t c = 0; c < 26; ++c) {
    samples[13 + c] = huge + c % 2;
    samples[39 + 13 + c] = c == 0 ? 0 : 7;
  }
  std::vector<int64_t> labels = {0, 1};
  const Dataset data = IdSamples(samples, labels, 39);
  ModelOptions o{"dlrm", 1, 1, "cpu"};
  o.sizes.dim = 4;
  o.sizes.vocab_size = 0;  // unbounded
  StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t emb = 0;
  while ((*r)->Tensors()[emb].name != "dlrm.emb.weight") ++emb;
  EXPECT_EQ((*r)->Tensors()[emb].shape, (std::vector<int64_t>{0, 4}));
  ASSERT_TRUE((*r)->Lookup(emb));
  auto rows = (*r)->TableRows(data, {0, 1}, false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const std::vector<uint64_t> want = {0, 7, uint64_t(huge), uint64_t(huge) + 1};
  EXPECT_EQ((*rows)[emb], want);
  for (uint64_t id : want) {
    const float row[4] = {1, -1, 0.5f, float(id % 5)};
    ASSERT_TRUE((*r)->WriteTableRows(emb, &id, row, 1).ok());
  }
  ASSERT_TRUE((*r)->TrainStep(data, {0, 1}, 1).ok());
  const SparseGradient g = (*r)->SparseGrad(emb);
  ASSERT_EQ(g.rows, want.size());
  for (size_t k = 0; k < g.rows; ++k) EXPECT_EQ(uint64_t(g.ids[k]), want[k]);
  samples[13] = -1;  // not a row
  EXPECT_EQ((*r)->TableRows(data, {0}, false).status().code(), StatusCode::kInvalidArgument);
}

// dlrm's table rows of a batch are its 26 categories, distinct and ascending; an id
// outside the table is the data's error, not a crash.
TEST(ModelRunner, DlrmLooksUpTheCategoriesOfItsBatch) {
  std::vector<int64_t> samples(2 * 39, 1);
  for (int64_t c = 0; c < 26; ++c) {
    samples[13 + c] = (c * 7) % 20;      // sample 0: 20 distinct rows
    samples[39 + 13 + c] = 100 + c % 3;  // sample 1: 100, 101, 102
  }
  std::vector<int64_t> labels = {0, 1};
  const Dataset data = IdSamples(samples, labels, 39);
  ModelOptions o{"dlrm", 1, 1, "cpu"};
  o.sizes.dim = 4;
  o.sizes.vocab_size = 1 << 20;
  o.lookup_table_bytes = 1 << 10;
  StatusOr<std::unique_ptr<ModelRunner>> r = ModelRunner::Create(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t emb = 0;
  while ((*r)->Tensors()[emb].name != "dlrm.emb.weight") ++emb;
  ASSERT_TRUE((*r)->Lookup(emb));
  auto rows = (*r)->TableRows(data, {1, 0}, false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::vector<uint64_t> want;
  for (uint64_t v = 0; v < 20; ++v) want.push_back(v);
  for (uint64_t v : {100, 101, 102}) want.push_back(v);
  EXPECT_EQ((*rows)[emb], want);
  // A batch reads only rows written (pulled) first.
  EXPECT_EQ((*r)->TrainStep(data, {0, 1}, 1).status().code(), StatusCode::kFailedPrecondition);
  const std::vector<float> values(want.size() * 4, 0.5f);
  ASSERT_TRUE((*r)->WriteTableRows(emb, want.data(), values.data(), want.size()).ok());
  ASSERT_TRUE((*r)->TrainStep(data, {0, 1}, 1).ok());
  const SparseGradient g = (*r)->SparseGrad(emb);
  EXPECT_EQ(g.rows, want.size());
  samples[13] = int64_t{1} << 20;  // beyond the table
  EXPECT_EQ((*r)->TableRows(data, {0}, false).status().code(), StatusCode::kInvalidArgument);
}

// A worker asked to leave stops a VW's backward at its next gradient: Aborted, no gradient
// reported or kept; cleared, the next step computes the bits of a runner never cancelled.
TEST(ModelRunner, ACancelledStepStopsItsBackwardAndTheNextOneIsWhole) {
  Dataset data = SyntheticData(4);
  std::atomic<bool> cancel{true};
  ModelOptions o{"cnn", 1, 1, "cpu"};
  o.cancel = &cancel;
  auto r = ModelRunner::Create(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  size_t reported = 0;
  auto step = (*r)->TrainStep(data, {0, 1}, 7, [&](size_t) { ++reported; });
  EXPECT_EQ(step.status().code(), StatusCode::kAborted);
  EXPECT_EQ(reported, 0u);
  EXPECT_TRUE(AllZero(GradBytes(**r)));
  cancel = false;
  ASSERT_TRUE((*r)->TrainStep(data, {0, 1}, 7).ok());
  auto fresh = MustCreate("cnn");
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->TrainStep(data, {0, 1}, 7).ok());
  EXPECT_EQ(GradBytes(**r), GradBytes(*fresh));
}

// A built-in model's forward looks at the flag before each of its layers: one set while a layer
// runs (as a leave signal would) stops the forward before the next layer, not at its end.
TEST(ModelRunner, ABuiltinForwardStopsAtTheNextLayerOnceCancelled) {
  std::atomic<bool> cancel{false};
  bool signal = false;  // a signal comes during the first layer
  int first = 0, second = 0;
  torch::nn::Sequential layers(torch::nn::Functional([&](torch::Tensor x) {
                                 ++first;
                                 if (signal) cancel = true;
                                 return x;
                               }),
                               torch::nn::Functional([&](torch::Tensor x) {
                                 ++second;
                                 return x;
                               }));
  std::unique_ptr<Net> net = SequentialNet(layers);
  const torch::Tensor x = torch::ones({2, 3});
  signal = true;
  EXPECT_TRUE(net->Forward(x).equal(x));  // no flag given: the whole chain
  EXPECT_EQ(second, 1);
  net->SetCancel(&cancel);
  cancel = false;
  EXPECT_THROW(net->Forward(x), StepCancelled);
  EXPECT_EQ(first, 2);
  EXPECT_EQ(second, 1);  // not run after the flag was set
  signal = cancel = false;
  EXPECT_TRUE(net->Forward(x).equal(x));  // cleared: whole again
  EXPECT_EQ(second, 2);
}

TEST(ModelRunner, TheResnetIsTheCifarResnetOfItsDepth) {
  ModelOptions o{"resnet", 1, 1, TestDevice()};
  auto r20 = ModelRunner::Create(o);
  ASSERT_TRUE(r20.ok()) << r20.status().ToString();
  int64_t params = 0;
  for (size_t i = 0; i < (*r20)->NumParameters(); ++i) params += (*r20)->Tensors()[i].numel();
  // conv1 144 + bn1 32; stage1 3 x 4672; stage2 14528 (with its 1x1 shortcut) + 2 x 18560;
  // stage3 57728 + 2 x 73984; fc 650.
  EXPECT_EQ(params, 272186);
  const std::vector<TensorSpec>& t = (*r20)->Tensors();
  EXPECT_EQ(t.front().name, "conv1.weight");
  EXPECT_EQ(t[(*r20)->NumParameters() - 1].name, "fc.bias");
  bool shortcut = false;
  for (const TensorSpec& s : t) shortcut |= s.name == "stage2.0.shortcut.0.weight";
  EXPECT_TRUE(shortcut);
  EXPECT_FALSE((*r20)->Tensors().empty());

  o.sizes.depth = 8;
  auto r8 = ModelRunner::Create(o);
  ASSERT_TRUE(r8.ok()) << r8.status().ToString();
  EXPECT_LT((*r8)->NumParameters(), (*r20)->NumParameters());
  o.sizes.depth = 21;
  const Status bad = ModelRunner::Create(o).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--model_depth=21"), std::string::npos) << bad.message();
}

TEST(ModelRunner, InitializesIdenticallyFromTheSameSeed) {
  for (const char* model : {"mlp", "cnn", "cnn_bn", "resnet"}) {
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

// The per-parameter callback sees each final gradient once, from inside
// backward on the CPU (the last layer's before the first's), with the bits
// GradData gives after the step; a step without the callback gives the same.
TEST(ModelRunner, ReportsEveryParametersFinalGradientOnceLastLayersFirst) {
  const Dataset data = SyntheticData(16);
  const std::vector<int64_t> indices = {3, 1, 4, 1, 5, 9, 2, 6};
  for (const char* model : {"mlp", "cnn", "cnn_bn"}) {
    SCOPED_TRACE(model);
    auto r = MustCreate(model);
    ASSERT_NE(r, nullptr);
    std::vector<size_t> order;
    std::vector<std::vector<uint8_t>> seen(r->NumParameters());
    StatusOr<float> loss = r->TrainStep(data, indices, 99, [&](size_t i) {
      order.push_back(i);
      const auto* p = reinterpret_cast<const uint8_t*>(r->GradData(i));
      seen[i].assign(p, p + Bytes(r->Tensors()[i]));
    });
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    const auto grads = GradBytes(*r);
    EXPECT_EQ(seen, grads);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.size(), r->NumParameters());
    for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i) << "each parameter once";
    EXPECT_GE(order.front(), r->NumParameters() - 2) << "a parameter of the last layer comes first";
    EXPECT_LE(order.back(), 1u) << "a parameter of the first layer comes last";
    StatusOr<float> again = r->TrainStep(data, indices, 99);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(std::memcmp(&*loss, &*again, sizeof(float)), 0);
    EXPECT_EQ(GradBytes(*r), grads);
  }
}

// Taken gradients hold the step's bits and keep them through the next steps
// (another thread reads them while the next VW computes).
TEST(ModelRunner, TakenGradientsKeepTheirStepsBitsThroughLaterSteps) {
  const Dataset data = SyntheticData(16);
  for (const char* model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    auto r = MustCreate(model);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(r->TrainStep(data, {3, 1, 4, 1}, 7).ok());
    const auto first = GradBytes(*r);
    StatusOr<ModelRunner::Gradients> taken = r->TakeGradients();
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    ASSERT_EQ(taken->data.size(), r->NumParameters());
    ASSERT_TRUE(r->TrainStep(data, {5, 9, 2, 6}, 8).ok());
    const auto second = GradBytes(*r);
    ASSERT_NE(second, first) << "other samples, other gradients";
    ASSERT_TRUE(r->TrainStep(data, {0, 2}, 9).ok());
    for (size_t i = 0; i < r->NumParameters(); ++i) {
      const auto* p = reinterpret_cast<const uint8_t*>(taken->data[i]);
      EXPECT_EQ(std::vector<uint8_t>(p, p + Bytes(r->Tensors()[i])), first[i]) << "parameter " << i;
    }
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
      EXPECT_EQ(after[i], before[i])
          << "parameter " << r->Tensors()[i].name << " changed in TrainStep";
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

TEST(ModelRunner, WritesChangeTheModel) {
  const Dataset data = SyntheticData(4);
  auto r = MustCreate("mlp");
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->TrainStep(data, {0, 1}, 0).ok());
  const auto grads = GradBytes(*r);
  const auto* w = static_cast<const float*>(r->Data(0));
  std::vector<float> half(w, w + r->Tensors()[0].numel());
  for (float& x : half) x *= 0.5f;
  ASSERT_TRUE(r->Write(0, 0, half.data(), half.size() * sizeof(float)).ok());
  EXPECT_EQ(std::memcmp(r->Data(0), half.data(), half.size() * sizeof(float)), 0);
  ASSERT_TRUE(r->TrainStep(data, {0, 1}, 0).ok());
  EXPECT_NE(GradBytes(*r), grads);
}

TEST(ModelRunner, ChunkWritesReachTheModelAsOneWholeWriteDoes) {
  // The worker writes pulled chunks one by one (on a GPU each starts its own upload).
  const Dataset data = SyntheticData(8);
  auto whole = MustCreate("cnn_bn", 1), chunked = MustCreate("cnn_bn", 1);
  auto other = MustCreate("cnn_bn", 2);
  ASSERT_TRUE(whole && chunked && other);
  const auto target = TensorBytes(*other);
  ASSERT_NE(TensorBytes(*chunked), target);
  RestoreTensorBytes(*whole, target);
  for (size_t i = 0; i < target.size(); ++i) {
    const size_t elem = DTypeSize(chunked->Tensors()[i].dtype);
    const size_t chunk = 3 * elem;  // chunks end inside the tensor and at its end
    for (size_t at = 0; at < target[i].size(); at += chunk) {
      const size_t n = std::min(chunk, target[i].size() - at);
      ASSERT_TRUE(chunked->Write(i, at, target[i].data() + at, n).ok());
    }
    // A second write of the first chunk, while the first may still be on its way up.
    ASSERT_TRUE(chunked->Write(i, 0, target[i].data(), std::min(chunk, target[i].size())).ok());
  }
  EXPECT_EQ(TensorBytes(*chunked), target);
  for (uint64_t key : {5u, 6u}) {
    StatusOr<float> a = whole->TrainStep(data, {0, 3, 5}, key);
    StatusOr<float> b = chunked->TrainStep(data, {0, 3, 5}, key);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(std::memcmp(&*a, &*b, sizeof(float)), 0);
    EXPECT_EQ(GradBytes(*whole), GradBytes(*chunked));
    EXPECT_EQ(TensorBytes(*whole), TensorBytes(*chunked)) << "BatchNorm statistics after the step";
  }
}

TEST(Device, DeviceNamesAreCheckedAndCpuIsItsOwnKind) {
  StatusOr<std::string> cpu = DeviceKind("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(*cpu, "cpu");
  for (const char* bad :
       {"", "gpu", "CPU", "cuda:", "cuda:x", "cuda0", "cuda:-1", "cuda:123", "cuda:0 "}) {
    EXPECT_EQ(DeviceKind(bad).status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_EQ(ModelRunner::Create({"mlp", 0, 1, bad}).status().code(), StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(Device, ACudaDeviceIsRefusedClearlyByABuildWithoutCuda) {
  if (BuildHasCuda()) {
    // A CUDA build refuses a GPU that is not there instead.
    EXPECT_EQ(DeviceKind("cuda:99").status().code(), StatusCode::kFailedPrecondition);
    return;
  }
  for (const char* gpu : {"cuda", "cuda:0", "cuda:3"}) {
    const Status kind = DeviceKind(gpu).status();
    EXPECT_EQ(kind.code(), StatusCode::kInvalidArgument) << gpu;
    EXPECT_NE(kind.message().find("this build has no CUDA"), std::string::npos) << kind.message();
    const Status runner = ModelRunner::Create({"mlp", 0, 1, gpu}).status();
    EXPECT_EQ(runner.code(), StatusCode::kInvalidArgument) << gpu;
    EXPECT_NE(runner.message().find("this build has no CUDA"), std::string::npos)
        << runner.message();
  }
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

TEST(ModelRunner, PredictsTheOutputsWhoseArgMaxTheEvaluationCounts) {
  const Dataset data = SyntheticData(23);
  auto r = MustCreate("cnn_bn");
  ASSERT_NE(r, nullptr);
  const auto before = TensorBytes(*r);
  StatusOr<ModelRunner::Outputs> out = r->Predict(data, 3, 23, 8);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->shape, (std::vector<int64_t>{20, 10}));
  ASSERT_EQ(out->values.size(), 200u);
  int64_t correct = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const float* row = out->values.data() + i * 10;
    correct += std::max_element(row, row + 10) - row == data.ClassOf(3 + i) ? 1 : 0;
  }
  StatusOr<EvalStats> s = r->Evaluate(data, 3, 23, 8);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(correct, s->correct);
  EXPECT_EQ(TensorBytes(*r), before);
  // Batches do not change a sample's output here: one batch of 20 gives the same argmax.
  StatusOr<ModelRunner::Outputs> whole = r->Predict(data, 3, 23, 20);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->shape, out->shape);
  EXPECT_EQ(r->Predict(data, 0, 24, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->Predict(data, 0, 4, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelRunner, RejectsBadMicrobatchesWithAStatus) {
  Dataset data = SyntheticData(4);
  auto r = MustCreate("mlp");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->TrainStep(data, {}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->TrainStep(data, {0, 4}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->TrainStep(data, {-1}, 0).status().code(), StatusCode::kInvalidArgument);
  std::vector<int64_t> labels = {0, 1, 10, 3};
  StatusOr<Dataset> eleven = MakeDataset({1, 28, 28}, std::vector<float>(4 * 784), labels);
  ASSERT_TRUE(eleven.ok());
  EXPECT_EQ(r->TrainStep(*eleven, {1}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r->TrainStep(data, {1}, 0).ok());
  Dataset missing = data;
  missing.features = nullptr;
  EXPECT_EQ(r->TrainStep(missing, {1}, 0).status().code(), StatusCode::kInvalidArgument);
  Dataset small = SyntheticData(2);
  small.sample_shape = {1, 14, 56};
  EXPECT_EQ(r->TrainStep(small, {0}, 0).status().code(), StatusCode::kInvalidArgument);
  Dataset ints = data;
  ints.feature_dtype = DataType::kInt64;
  EXPECT_EQ(r->TrainStep(ints, {0}, 0).status().code(), StatusCode::kInvalidArgument);
  Dataset targets = data;
  targets.label_dtype = DataType::kFloat32;
  EXPECT_EQ(r->TrainStep(targets, {0}, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelRunner, TrainsTheSameOn28x28As1x28x28Samples) {
  auto a = MustCreate("cnn");
  auto b = MustCreate("cnn");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto la = a->TrainStep(SyntheticData(4), {0, 1, 2, 3}, 5);
  auto lb = b->TrainStep(SyntheticData(4, {28, 28}), {0, 1, 2, 3}, 5);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(*la, *lb);
}

// ---- TorchScript models (docs/models.md) -------------------------------------
// The modules are written in Python (tests/integration/script_models.py) and
// scripted by Debian's python3-torch once per test run.

std::string ReadAll(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

class ScriptModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char dir[] = "/tmp/eps-script-XXXXXX";
    if (mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    const std::string cmd = std::string(EPS_TORCH_PYTHON) + " " + EPS_SCRIPT_MODELS_PY + " " +
                            dir_ +
                            " net net_loss five_classes nonscalar_loss bad_shape "
                            "nondeterministic state_dict sparse_tokens lazy_tokens compact_tokens "
                            "keyed_tokens misplaced_tokens > " +
                            dir_ + "/python.log 2>&1";
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) (void)std::system(("rm -rf " + dir_).c_str());
  }
  void SetUp() override {
    if (!made_) GTEST_SKIP() << "no python3-torch to script the test's modules (" << dir_ << ")";
  }
  static std::string Script(const std::string& name) { return ReadAll(dir_ + "/" + name + ".pt"); }
  static StatusOr<std::unique_ptr<ModelRunner>> Load(const std::string& name,
                                                     uint64_t lookup_table_bytes = 0) {
    ModelOptions o;
    o.model = name + ".pt";
    o.script = Script(name);
    o.device = TestDevice();
    o.lookup_table_bytes = lookup_table_bytes;
    return ModelRunner::Create(o);
  }
  static std::unique_ptr<ModelRunner> MustLoad(const std::string& name,
                                               uint64_t lookup_table_bytes = 0) {
    auto r = Load(name, lookup_table_bytes);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  static std::string dir_;
  static bool made_;
};
std::string ScriptModel::dir_;
bool ScriptModel::made_ = false;

TEST_F(ScriptModel, ListsTheModulesNamedParametersThenBuffersInItsOrder) {
  auto r = MustLoad("net");
  ASSERT_NE(r, nullptr);
  std::vector<std::string> names;
  for (const TensorSpec& t : r->Tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias",
                                             "conv2.weight", "conv2.bias", "fc.weight", "fc.bias",
                                             "bn1.running_mean", "bn1.running_var",
                                             "bn1.num_batches_tracked"}));
  EXPECT_EQ(r->NumParameters(), 8u);
  EXPECT_EQ(r->Tensors().back().dtype, DType::kInt64);
  EXPECT_EQ(r->Tensors()[0].shape, (std::vector<int64_t>{8, 1, 3, 3}));
}

TEST_F(ScriptModel, TakesItsWeightsFromTheFileNotFromTheSeed) {
  ModelOptions a, b;
  a.script = b.script = Script("net");
  a.init_seed = 1;
  b.init_seed = 2;
  auto ra = ModelRunner::Create(a), rb = ModelRunner::Create(b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(TensorBytes(**ra), TensorBytes(**rb));
}

// The consistency contract for a user's module: a step is a pure function of
// (weights, buffers, samples, seed), also after many calls (the JIT must not
// re-optimize the graph, which could change the bits a late joiner computes).
TEST_F(ScriptModel, TheThirtiethCallGivesTheFirstCallsBits) {
  const Dataset data = SyntheticData(16);
  const std::vector<int64_t> indices = {3, 1, 4, 1, 5, 9, 2, 6};
  auto r = MustLoad("net");
  ASSERT_NE(r, nullptr);
  // Loading the module turned the re-optimization off: on this model the bits
  // below would hold on the CPU even with it on (it would change them with
  // fusion on a GPU), so the switch itself is checked too.
  EXPECT_TRUE(JitGraphOptimizationIsOff());
  const auto initial = TensorBytes(*r);
  StatusOr<float> first = r->TrainStep(data, indices, 99);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const auto grads = GradBytes(*r);
  const auto buffers = TensorBytes(*r);
  EXPECT_FALSE(AllZero(grads));
  EXPECT_NE(buffers, initial) << "BatchNorm statistics did not move";
  for (int call = 2; call <= 30; ++call) {
    RestoreTensorBytes(*r, initial);
    StatusOr<float> again = r->TrainStep(data, indices, 99);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(std::memcmp(&*first, &*again, sizeof(float)), 0) << "call " << call;
    ASSERT_EQ(GradBytes(*r), grads) << "call " << call;
    ASSERT_EQ(TensorBytes(*r), buffers) << "call " << call;
  }
  // Dropout draws from the step's seed.
  RestoreTensorBytes(*r, initial);
  StatusOr<float> other = r->TrainStep(data, indices, 100);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *first);
}

TEST_F(ScriptModel, UsesTheModulesOwnLossWhenItHasOne) {
  const Dataset data = SyntheticData(8);
  auto plain = MustLoad("net"), smoothed = MustLoad("net_loss");
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(smoothed, nullptr);
  ASSERT_EQ(TensorBytes(*plain), TensorBytes(*smoothed));  // the same weights (seed 0 in Python)
  StatusOr<float> a = plain->TrainStep(data, {0, 1, 2, 3}, 5);
  StatusOr<float> b = smoothed->TrainStep(data, {0, 1, 2, 3}, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b) << "loss(output, target) with label smoothing was not called";
}

TEST_F(ScriptModel, DryRunPassesAndLeavesParametersAndBuffersUntouched) {
  const Dataset data = SyntheticData(8);
  auto r = MustLoad("net");
  ASSERT_NE(r, nullptr);
  const auto before = TensorBytes(*r);
  StatusOr<std::string> warning = r->DryRun(data);
  ASSERT_TRUE(warning.ok()) << warning.status().ToString();
  EXPECT_EQ(*warning, "");
  EXPECT_EQ(TensorBytes(*r), before);
  EXPECT_TRUE(AllZero(GradBytes(*r)));
}

TEST_F(ScriptModel, DryRunNamesWhatDoesNotFit) {
  const Dataset data = SyntheticData(8);
  const std::pair<const char*, const char*> cases[] = {
      {"bad_shape", "forward fails"},
      {"nonscalar_loss", "not a scalar"},
      {"five_classes", "labels out of range"},
  };
  for (const auto& [name, cause] : cases) {
    auto r = MustLoad(name);
    ASSERT_NE(r, nullptr) << name;
    StatusOr<std::string> got = r->DryRun(data);
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(got.status().message().find(cause), std::string::npos)
        << name << ": " << got.status().ToString();
  }
}

TEST_F(ScriptModel, DryRunWarnsOfANondeterministicModule) {
  auto r = MustLoad("nondeterministic");
  ASSERT_NE(r, nullptr);
  StatusOr<std::string> got = r->DryRun(SyntheticData(8));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->rfind("nondeterministic module", 0), 0u) << *got;
}

// A module's table looked up by rows: compactly where the module rewrites its ids
// (with_table_ids), in lazy memory where it only names them (table_ids); both compute the bits
// of the module holding the table with the same rows. A with_table_ids that puts the ids into
// the wrong samples is refused, not trained on.
TEST_F(ScriptModel, ATableLookedUpCompactlyOrLazilyComputesTheHeldTablesBits) {
  if (TestDevice() != "cpu") GTEST_SKIP() << "sparse tables live on the CPU";
  std::vector<int64_t> ids(2 * 12);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = 3 + static_cast<int64_t>(k * 7 % 40);
  ids[5] = ids[6];  // a row twice in a sample
  std::vector<int64_t> labels = {1, 0};
  const Dataset data = IdSamples(ids, labels, 12);
  auto held = MustLoad("sparse_tokens");
  auto lazy = MustLoad("lazy_tokens", 1);
  auto compact = MustLoad("compact_tokens", 1);
  auto misplaced = MustLoad("misplaced_tokens", 1);
  ASSERT_TRUE(held && lazy && compact && misplaced);
  ASSERT_EQ(held->Tensors()[0].name, "emb.weight");
  EXPECT_FALSE(held->Lookup(0));
  ModelRunner* looked[] = {lazy.get(), compact.get(), misplaced.get()};
  for (ModelRunner* m : looked) {
    ASSERT_TRUE(m->Lookup(0));
    auto rows = m->TableRows(data, {0, 1}, false);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    for (uint64_t r : (*rows)[0]) {
      const float row[8] = {0.5f * r, -1, 2, 0.25f, 1e-3f * r, 3, -2, 1};
      ASSERT_TRUE(m->WriteTableRows(0, &r, row, 1).ok());
      if (m == lazy.get()) {
        ASSERT_TRUE(held->Write(0, r * sizeof row, row, sizeof row).ok());
      }
    }
  }
  auto base = held->TrainStep(data, {0, 1}, 3);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  const SparseGradient g = held->SparseGrad(0);
  for (ModelRunner* m : {lazy.get(), compact.get()}) {
    auto loss = m->TrainStep(data, {0, 1}, 3);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    EXPECT_EQ(std::memcmp(&*loss, &*base, sizeof(float)), 0);
    const SparseGradient got = m->SparseGrad(0);
    ASSERT_EQ(got.rows, g.rows);
    EXPECT_EQ(std::memcmp(got.ids, g.ids, g.rows * sizeof(int64_t)), 0);
    EXPECT_EQ(std::memcmp(got.values, g.values, g.rows * 8 * sizeof(float)), 0);
    for (size_t i = 1; i < held->NumParameters(); ++i)
      EXPECT_EQ(std::memcmp(m->GradData(i), held->GradData(i), Bytes(held->Tensors()[i])), 0);
  }
  EXPECT_EQ(misplaced->TrainStep(data, {0, 1}, 3).status().code(), StatusCode::kInvalidArgument);
}

// A module's table of 0 rows has unbounded keys: looked up whatever the budget, any int64 id
// but the largest a row, its gradient naming the keys.
TEST_F(ScriptModel, AModulesTableOfZeroRowsTakesAnyKey) {
  if (TestDevice() != "cpu") GTEST_SKIP() << "sparse tables live on the CPU";
  std::vector<int64_t> ids(12, (int64_t{1} << 62) + 9);
  ids[3] = 17;
  ids[7] = std::numeric_limits<int64_t>::max() - 1;
  std::vector<int64_t> labels = {1};
  const Dataset data = IdSamples(ids, labels, 12);
  auto keyed = MustLoad("keyed_tokens");
  ASSERT_NE(keyed, nullptr);
  EXPECT_EQ(keyed->Tensors()[0].shape, (std::vector<int64_t>{0, 8}));
  ASSERT_TRUE(keyed->Lookup(0));
  auto rows = keyed->TableRows(data, {0}, false);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const std::vector<uint64_t> want = {0, 17, (uint64_t{1} << 62) + 9,
                                      uint64_t(std::numeric_limits<int64_t>::max() - 1)};
  EXPECT_EQ((*rows)[0], want);
  const std::vector<float> values(want.size() * 8, 0.125f);
  ASSERT_TRUE(keyed->WriteTableRows(0, want.data(), values.data(), want.size()).ok());
  ASSERT_TRUE(keyed->TrainStep(data, {0}, 1).ok());
  const SparseGradient g = keyed->SparseGrad(0);
  ASSERT_EQ(g.rows, 3u);  // row 0 is held, not read
  for (size_t k = 0; k < g.rows; ++k) EXPECT_EQ(uint64_t(g.ids[k]), want[k + 1]);
  ids[7] = std::numeric_limits<int64_t>::max();  // the one int64 that is no row
  EXPECT_EQ(keyed->TableRows(IdSamples(ids, labels, 12), {0}, false).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ScriptModel, RefusesBytesThatAreNoTorchScriptModule) {
  ModelOptions o;
  o.script = "not a zip at all";
  EXPECT_EQ(ModelRunner::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.script = Script("state_dict");  // torch.save of a state dict
  ASSERT_FALSE(o.script.empty());
  EXPECT_EQ(ModelRunner::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ScriptModel, EvaluatesWithoutChangingTheModel) {
  const Dataset data = SyntheticData(20);
  auto r = MustLoad("net");
  ASSERT_NE(r, nullptr);
  const auto before = TensorBytes(*r);
  StatusOr<EvalStats> a = r->Evaluate(data, 0, 20, 7);
  StatusOr<EvalStats> b = r->Evaluate(data, 0, 20, 20);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ(a->count, 20);
  EXPECT_EQ(a->correct, b->correct);
  EXPECT_EQ(TensorBytes(*r), before);
}

}  // namespace
}  // namespace eps
