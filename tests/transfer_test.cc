#include "common/transfer.h"

#include <gtest/gtest.h>

namespace eps {
namespace {

TensorSpec T(const std::string& name, std::vector<int64_t> shape, DType d = DType::kFloat32) {
  TensorSpec t;
  t.name = name;
  t.dtype = d;
  t.shape = std::move(shape);
  return t;
}

using A = InitDecision::Action;

TEST(TensorSelection, SearchesEcmaScriptRegex) {
  auto s = TensorSelection::Compile("^conv", "--freeze");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->Matches("conv1.weight"));
  EXPECT_FALSE(s->Matches("fc.conv"));
  auto any = TensorSelection::Compile("bias", "--freeze");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->Matches("fc2.bias"));
}

TEST(TensorSelection, EmptyPatternSelectsNothing) {
  auto s = TensorSelection::Compile("", "--reinit");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
  EXPECT_FALSE(s->Matches("anything"));
}

TEST(TensorSelection, BadRegexNamesTheFlag) {
  auto s = TensorSelection::Compile("conv(", "--freeze");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--freeze"), std::string::npos);
}

TEST(MatchInit, LoadsSameNameShapeAndDTypeOnly) {
  const std::vector<TensorSpec> model = {T("conv1.weight", {8, 1, 3, 3}), T("fc1.weight", {10, 8}),
                                         T("fc2.weight", {5, 10}), T("steps", {1}, DType::kInt64),
                                         T("new.weight", {3})};
  const std::vector<TensorSpec> file = {T("fc2.weight", {10, 10}), T("conv1.weight", {8, 1, 3, 3}),
                                        T("fc1.weight", {10, 8}), T("steps", {1})};
  auto d = MatchInit(model, file, TensorSelection());
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].action, A::kLoad);
  EXPECT_EQ(d[0].file_index, 1u);
  EXPECT_EQ(d[1].action, A::kLoad);
  EXPECT_EQ(d[1].file_index, 2u);
  EXPECT_EQ(d[2].action, A::kShape);
  EXPECT_EQ(d[3].action, A::kDType);
  EXPECT_EQ(d[4].action, A::kMissing);
  EXPECT_EQ(LoadedCount(d), 2u);
}

TEST(MatchInit, ReinitKeepsMatchingTensorsFresh) {
  const std::vector<TensorSpec> model = {T("conv1.weight", {4}), T("fc2.weight", {2}),
                                         T("fc2.bias", {1})};
  auto reinit = TensorSelection::Compile("^fc2\\.", "--reinit");
  ASSERT_TRUE(reinit.ok());
  auto d = MatchInit(model, model, *reinit);
  EXPECT_EQ(d[0].action, A::kLoad);
  EXPECT_EQ(d[1].action, A::kReinit);
  EXPECT_EQ(d[2].action, A::kReinit);
  EXPECT_EQ(LoadedCount(d), 1u);
  EXPECT_STREQ(InitActionName(d[1].action), "reinit");
}

TEST(MatchInit, AnotherArchitectureLoadsNothing) {
  auto d = MatchInit({T("a", {1}), T("b", {2})}, {T("x", {1}), T("b", {3})}, TensorSelection());
  EXPECT_EQ(LoadedCount(d), 0u);
}

TEST(InitReport, NamesWhatLoadedWhatStartedAfreshWhatWasSkippedAndWhyAndWhatWentUnused) {
  const std::vector<TensorSpec> model = {T("conv.weight", {4}), T("fc.weight", {2}),
                                         T("fc.bias", {3}), T("extra", {1})};
  const std::vector<TensorSpec> file = {T("conv.weight", {4}), T("fc.weight", {2}),
                                        T("fc.bias", {2}), T("old_head", {9})};
  auto reinit = TensorSelection::Compile("^fc\\.weight$", "--reinit");
  ASSERT_TRUE(reinit.ok());
  const InitReport r = ReportInit(MatchInit(model, file, *reinit), model, file);
  EXPECT_EQ(r.loaded, std::vector<std::string>{"conv.weight"});
  EXPECT_EQ(r.reinit, std::vector<std::string>{"fc.weight"});
  const std::vector<std::pair<std::string, std::string>> skipped = {{"fc.bias", "shape"},
                                                                    {"extra", "missing"}};
  EXPECT_EQ(r.skipped, skipped);
  // fc.bias is of another shape: not taken, so unused as old_head is.
  EXPECT_EQ(r.unused, (std::vector<std::string>{"fc.bias", "old_head"}));
}

TEST(CheckInitMatches, NothingLoadedIsAnErrorNamingTheFileUnlessAllowed) {
  const std::vector<TensorSpec> model = {T("a", {1})}, file = {T("x", {1})};
  const auto d = MatchInit(model, file, TensorSelection());
  const Status st = CheckInitMatches(d, model, file, /*allow_mismatch=*/false, "--init_from m.pt");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--init_from m.pt"), std::string::npos);
  EXPECT_TRUE(CheckInitMatches(d, model, file, /*allow_mismatch=*/true, "f").ok());
  EXPECT_TRUE(CheckInitMatches(MatchInit(model, model, TensorSelection()), model, model, false, "f")
                  .ok());
}

TEST(FrozenTensors, OnlyParametersTheSelectionNames) {
  std::vector<TensorSpec> tensors = {T("conv.weight", {4}), T("fc.weight", {2}),
                                     T("conv.running_mean", {4}), LossTensor()};
  tensors[2].kind = TensorKind::kBuffer;
  auto freeze = TensorSelection::Compile("^conv|loss", "--freeze");
  ASSERT_TRUE(freeze.ok());
  EXPECT_EQ(FrozenTensors(tensors, *freeze), (std::vector<char>{1, 0, 0, 0}));
  EXPECT_EQ(FrozenTensors(tensors, TensorSelection()), (std::vector<char>{0, 0, 0, 0}));
}

TEST(CheckFreeze, APatternSelectingNoParameterIsAnErrorNamingTheFlagAndTheParameters) {
  std::vector<TensorSpec> tensors = {T("conv.weight", {4}), T("fc.weight", {2}),
                                     T("bn.running_mean", {4})};
  tensors[2].kind = TensorKind::kBuffer;
  EXPECT_TRUE(CheckFreeze("", tensors).ok());
  EXPECT_TRUE(CheckFreeze("^conv", tensors).ok());
  const Status typo = CheckFreeze("^cnov", tensors);
  EXPECT_EQ(typo.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typo.message().find("--freeze"), std::string::npos);
  EXPECT_NE(typo.message().find("conv.weight"), std::string::npos);
  EXPECT_EQ(CheckFreeze("running", tensors).code(), StatusCode::kInvalidArgument);  // a buffer
  EXPECT_EQ(CheckFreeze("(", tensors).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
