// Tests for transfer learning in the torch adapter (models/model_runner.h,
// models/init_file.h; docs/models.md "Transfer learning"): --freeze turns the
// gradients of the parameters it selects off, --init_from loads the matching
// tensors of an exported model (safetensors, a state dict, a TorchScript
// module), --reinit keeps the fresh ones.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/init_file.h"
#include "models/model_runner.h"

namespace eps {
namespace {

Dataset Images(int64_t n) {
  std::vector<float> pixels(static_cast<size_t>(n * 784));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<size_t>(i)] = i % 10;
    for (int64_t p = 0; p < 784; ++p)
      pixels[static_cast<size_t>(i * 784 + p)] = static_cast<float>((i * 31 + p * 7) % 97) / 97.f;
  }
  auto d = MakeDataset({1, 28, 28}, std::move(pixels), std::move(labels));
  EXPECT_TRUE(d.ok());
  return d.ok() ? *d : Dataset{};
}

std::unique_ptr<ModelRunner> Create(ModelOptions o) {
  auto r = ModelRunner::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

ModelOptions Options(const std::string& model, uint64_t seed) {
  ModelOptions o;
  o.model = model;
  o.init_seed = seed;
  return o;
}

TensorSelection Select(const std::string& pattern) {
  auto s = TensorSelection::Compile(pattern, "--test");
  EXPECT_TRUE(s.ok());
  return s.ok() ? *s : TensorSelection();
}

std::string BytesOf(const ModelRunner& r, size_t i) {
  const TensorSpec& t = r.Tensors()[i];
  return std::string(static_cast<const char*>(r.Data(i)), t.numel() * DTypeSize(t.dtype));
}

std::string GradOf(const ModelRunner& r, size_t i) {
  return std::string(reinterpret_cast<const char*>(r.GradData(i)),
                     r.Tensors()[i].numel() * sizeof(float));
}

// `r`'s tensors as a safetensors file (what the coordinator exports).
std::string Safetensors(const ModelRunner& r) {
  nlohmann::json header;
  std::string data;
  for (size_t i = 0; i < r.Tensors().size(); ++i) {
    const TensorSpec& t = r.Tensors()[i];
    const std::string bytes = BytesOf(r, i);
    header[t.name] = {{"dtype", t.dtype == DType::kInt64 ? "I64" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  const std::string head = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((head.size() >> (8 * i)) & 0xff);
  return out + head + data;
}

// `r`'s tensors as torch.save(state_dict) writes them.
std::string StateDict(const ModelRunner& r) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (size_t i = 0; i < r.Tensors().size(); ++i) {
    const TensorSpec& t = r.Tensors()[i];
    const auto dtype = t.dtype == DType::kInt64 ? torch::kInt64 : torch::kFloat32;
    dict.insert(t.name,
                torch::from_blob(const_cast<void*>(r.Data(i)), t.shape, dtype).clone());
  }
  const std::vector<char> bytes = torch::jit::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

TEST(Freeze, FrozenParametersGetNoGradientNorReportAndTheOthersTheSameBits) {
  const Dataset data = Images(16);
  const std::vector<int64_t> batch = {0, 3, 5, 7, 9, 11, 13, 15};
  auto whole = Create(Options("cnn", 1));
  ModelOptions o = Options("cnn", 1);
  o.freeze = Select("^conv");
  auto frozen = Create(o);
  ASSERT_TRUE(whole && frozen);
  ASSERT_TRUE(whole->TrainStep(data, batch, 5).ok());
  std::vector<size_t> reported;
  auto loss = frozen->TrainStep(data, batch, 5, [&](size_t i) { reported.push_back(i); });
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const std::vector<TensorSpec>& t = frozen->Tensors();
  std::vector<size_t> trained;
  for (size_t i = 0; i < frozen->NumParameters(); ++i) {
    SCOPED_TRACE(t[i].name);
    if (t[i].name.rfind("conv", 0) == 0) {
      EXPECT_EQ(GradOf(*frozen, i), std::string(t[i].numel() * sizeof(float), '\0'));
    } else {
      trained.push_back(i);
      EXPECT_EQ(GradOf(*frozen, i), GradOf(*whole, i));  // the same forward, the same bits
      EXPECT_NE(GradOf(*frozen, i), std::string(t[i].numel() * sizeof(float), '\0'));
    }
  }
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, trained);
  EXPECT_EQ(trained.size(), 4u);  // fc1 and fc2, weight and bias
}

TEST(InitFrom, ASafetensorsFileOfTheSameModelGivesItsValuesButTheReinitOnes) {
  auto source = Create(Options("cnn", 1));
  auto fresh = Create(Options("cnn", 2));
  ModelOptions o = Options("cnn", 2);
  o.init_file = Safetensors(*source);
  o.reinit = Select("^fc2\\.");
  auto started = Create(o);
  ASSERT_TRUE(source && fresh && started);
  for (size_t i = 0; i < started->Tensors().size(); ++i) {
    const std::string& name = started->Tensors()[i].name;
    SCOPED_TRACE(name);
    const bool reinit = name.rfind("fc2.", 0) == 0;
    EXPECT_EQ(BytesOf(*started, i), BytesOf(reinit ? *fresh : *source, i));
    EXPECT_NE(BytesOf(*source, i), BytesOf(*fresh, i));  // the seeds do differ
  }
  const InitReport& r = started->init_report();
  EXPECT_EQ(r.loaded.size(), 6u);
  EXPECT_EQ(r.reinit, (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_TRUE(r.unused.empty());
}

TEST(InitFrom, AStateDictLoadsAsASafetensorsFileDoesAndBuffersToo) {
  auto source = Create(Options("cnn_bn", 1));
  ASSERT_TRUE(source);
  ASSERT_TRUE(source->TrainStep(Images(8), {0, 1, 2, 3}, 1).ok());  // BatchNorm statistics move
  ModelOptions o = Options("cnn_bn", 2);
  o.init_file = StateDict(*source);
  auto started = Create(o);
  ASSERT_TRUE(started);
  for (size_t i = 0; i < started->Tensors().size(); ++i)
    EXPECT_EQ(BytesOf(*started, i), BytesOf(*source, i)) << started->Tensors()[i].name;
  EXPECT_EQ(started->init_report().loaded.size(), started->Tensors().size());
}

TEST(InitFrom, ASmallerHeadIsSkippedByShapeAndReported) {
  // The cnn's fc2 is [10, 256]; a file from a 5-class version of it holds [5, 256].
  auto source = Create(Options("cnn", 1));
  ASSERT_TRUE(source);
  c10::Dict<std::string, torch::Tensor> dict;
  for (size_t i = 0; i < source->Tensors().size(); ++i) {
    const TensorSpec& t = source->Tensors()[i];
    torch::Tensor v = torch::from_blob(const_cast<void*>(source->Data(i)), t.shape).clone();
    if (t.name.rfind("fc2.", 0) == 0) v = v.narrow(0, 0, 5).clone();
    dict.insert(t.name, v);
  }
  const std::vector<char> pt = torch::jit::pickle_save(dict);
  ModelOptions o = Options("cnn", 2);
  o.init_file.assign(pt.begin(), pt.end());
  auto started = Create(o);
  ASSERT_TRUE(started);
  const InitReport& r = started->init_report();
  EXPECT_EQ(r.loaded.size(), 6u);
  const std::vector<std::pair<std::string, std::string>> skipped = {{"fc2.weight", "shape"},
                                                                    {"fc2.bias", "shape"}};
  EXPECT_EQ(r.skipped, skipped);
  EXPECT_EQ(r.unused, (std::vector<std::string>{"fc2.weight", "fc2.bias"}));
}

TEST(InitFrom, AnotherArchitectureIsRefusedUnlessAllowed) {
  auto mlp = Create(Options("mlp", 1));
  ASSERT_TRUE(mlp);
  ModelOptions o = Options("resnet", 2);
  o.sizes.depth = 8;
  o.init_file = Safetensors(*mlp);  // fc1.*, fc2.*: no name of the ResNet's
  auto refused = ModelRunner::Create(o);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--init_from"), std::string::npos);
  o.init_allow_mismatch = true;
  auto allowed = Create(o);
  ASSERT_TRUE(allowed);
  EXPECT_TRUE(allowed->init_report().loaded.empty());
  EXPECT_EQ(allowed->init_report().skipped.size(), allowed->Tensors().size());
}

TEST(InitFrom, BytesOfNoModelFileAreRefusedClearly) {
  for (const std::string& bad : {std::string("not a model"), std::string("PK\x03\x04garbage", 11),
                                std::string("\x05\0\0\0\0\0\0\0{\"a\":", 14)}) {
    ModelOptions o = Options("mlp", 1);
    o.init_file = bad;
    auto r = ModelRunner::Create(o);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
}

}  // namespace
}  // namespace eps
