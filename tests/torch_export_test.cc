// Tests for the exports Python loads (models/torch_export.h). That Python's
// torch.load and torch.jit.load read them is tests/integration/test_script_model.py's.
#include "models/torch_export.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace eps {
namespace {

ExportedTensor Floats(const std::string& name, std::vector<int64_t> shape,
                      const std::vector<float>& v) {
  ExportedTensor t;
  t.spec = {name, TensorKind::kParameter, DType::kFloat32, std::move(shape)};
  t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

// A temporary folder, removed with what the test wrote into it.
class TempDir {
 public:
  TempDir() {
    char dir[] = "/tmp/eps-torch-export-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    path_ = dir;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

TEST(TorchExport, TheStateDictHoldsEveryTensorByNameInOrder) {
  ExportedTensor steps;
  steps.spec = {"bn.num_batches_tracked", TensorKind::kBuffer, DType::kInt64, {}};
  const int64_t seven = 7;
  steps.bytes.assign(reinterpret_cast<const char*>(&seven), sizeof seven);
  const std::vector<ExportedTensor> tensors = {Floats("fc.weight", {2, 3}, {1, 2, 3, 4, 5, 6}),
                                               Floats("fc.bias", {2}, {-1, 0.5f}), steps};
  const TempDir dir;
  const std::string path = dir.File("model.pt");
  ASSERT_TRUE(WriteStateDictPt(path, tensors).ok());
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const c10::IValue loaded = torch::jit::pickle_load(bytes);
  ASSERT_TRUE(loaded.isGenericDict());
  const auto dict = loaded.toGenericDict();
  ASSERT_EQ(dict.size(), 3u);
  std::vector<std::string> names;
  for (const auto& e : dict) names.push_back(e.key().toStringRef());
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias", "bn.num_batches_tracked"}));
  const torch::Tensor w = dict.at("fc.weight").toTensor();
  EXPECT_EQ(w.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(w.data_ptr<float>(), tensors[0].bytes.data(), 24), 0);
  EXPECT_EQ(dict.at("bn.num_batches_tracked").toTensor().item<int64_t>(), 7);
}

TEST(TorchExport, TheScriptedExportCarriesTheTrainedWeights) {
  torch::jit::Module m("m");
  m.register_parameter("w", torch::zeros({2}), false);
  m.register_buffer("b", torch::zeros({1}, torch::kInt64));
  std::ostringstream saved;
  m.save(saved);
  ExportedTensor b;
  b.spec = {"b", TensorKind::kBuffer, DType::kInt64, {1}};
  const int64_t three = 3;
  b.bytes.assign(reinterpret_cast<const char*>(&three), sizeof three);
  const TempDir dir;
  const std::string path = dir.File("model.script.pt");
  ASSERT_TRUE(WriteScriptedModel(path, saved.str(), {Floats("w", {2}, {1.5f, -2}), b}).ok());
  torch::jit::Module got = torch::jit::load(path);
  EXPECT_TRUE(got.attr("w").toTensor().equal(torch::tensor({1.5f, -2.0f})));
  EXPECT_EQ(got.attr("b").toTensor().item<int64_t>(), 3);
  // A trained model that does not match the module, and bytes that are no module.
  EXPECT_EQ(WriteScriptedModel(path, saved.str(), {Floats("w", {2}, {1, 2})}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteScriptedModel(path, saved.str(), {Floats("w", {3}, {1, 2, 3}), b}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteScriptedModel(path, "garbage", {}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
