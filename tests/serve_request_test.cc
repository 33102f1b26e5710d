// ParsePredictRequest and FormatPredictions (serve/request.h): the V1 bodies
// of `elasticps serve`, and the bad input each refuses with a reason.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "data/criteo.h"
#include "serve/request.h"

namespace eps {
namespace {

ModelInput Image() {
  ModelInput in;
  in.sample_shape = {1, 2, 3};
  return in;
}

std::string Rows(const std::string& a, const std::string& b) {
  return "{\"instances\": [" + a + ", " + b + "]}";
}

TEST(ServeRequest, NestedShapesWithOrWithoutLeadingOnesAndFlatListsAreOneInstanceEach) {
  const std::string full = "[[[1, 2, 3], [4, 5, 6]]]";
  const std::string squeezed = "[[1, 2, 3], [4, 5, 6]]";
  const std::string flat = "[1, 2, 3, 4, 5, 6.5]";
  auto got = ParsePredictRequest("{\"instances\": [" + full + ", " + squeezed + ", " + flat + "]}",
                                 Image(), 10);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->count, 3);
  ASSERT_EQ(got->floats.size(), 18u);
  EXPECT_EQ(got->floats[6], 1.0f);
  EXPECT_EQ(got->floats[17], 6.5f);
  EXPECT_TRUE(got->ids.empty());
}

TEST(ServeRequest, AFloatReadsBackAsTheSameFloat32Bits) {
  const float x = 0.1f;  // 0.100000001490116...: a double that is a float exactly
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", static_cast<double>(x));
  ModelInput in;
  in.sample_shape = {1};
  auto got = ParsePredictRequest(std::string("{\"instances\": [[") + text + "]]}", in, 1);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::memcmp(&got->floats[0], &x, sizeof x), 0);
}

TEST(ServeRequest, MalformedOrMisshapenBodiesAreRefusedWithTheReason) {
  const std::string good = "[[1, 2, 3], [4, 5, 6]]";
  const struct {
    std::string body;
    std::string reason;
  } cases[] = {
      {"{\"instances\": [", "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{\"inputs\": []}", "\"inputs\""},
      {"{\"instance\": []}", "no \"instances\""},
      {"{\"instances\": 3}", "not a list"},
      {"{\"instances\": []}", "empty"},
      {Rows(good, "[[1, 2, 3]]"), "instance 1 is of shape [1, 3]"},
      {Rows(good, "[[1, 2, 3], [4, 5]]"), "instance 1 is a ragged list"},
      {Rows("[[1, 2, \"x\"], [4, 5, 6]]", good), "instance 0 holds string"},
      {Rows("[1, 2, 3, 4, 5, 1e300]", good), "no finite float32"},
      {Rows(good, "[1, 2, 3, 4, 5, 6, 7]"), "instance 1 is of shape [7]"},
      {"{\"instances\": [" + good + ", " + good + ", " + good + "]}", "more than the 2"},
      {"{\"instances\": " + std::string(40, '[') + std::string(40, ']') + "}", "deeper"},
  };
  for (const auto& c : cases) {
    auto got = ParsePredictRequest(c.body, Image(), 2);
    ASSERT_FALSE(got.ok()) << c.body;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(got.status().message().find(c.reason), std::string::npos)
        << c.body << ": " << got.status().message();
  }
}

TEST(ServeRequest, TextInstancesAreTokenizedWithTheVocabularyAndIdsAreChecked) {
  auto vocab = Vocabulary::Parse(
      R"({"tokenizer": "eps-words", "version": 1, "seq_len": 4,
          "words": ["<pad>", "<unk>", "<cls>", "free", "money"], "labels": ["ham", "spam"]})");
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  ModelInput in;
  in.sample_shape = {4};
  in.dtype = DataType::kInt64;
  in.vocab = std::make_shared<const Vocabulary>(std::move(vocab).value());
  in.max_id = 5;
  auto got = ParsePredictRequest(R"({"instances": ["free money", [2, 4, 0, 0]]})", in, 8);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<int64_t> want(8);
  in.vocab->Encode("free money", want.data());
  want[4] = 2, want[5] = 4, want[6] = 0, want[7] = 0;
  EXPECT_EQ(got->ids, want);
  EXPECT_EQ(ParsePredictRequest(R"({"instances": [[2, 5, 0, 0]]})", in, 8).status().code(),
            StatusCode::kInvalidArgument);  // 5 is beyond the vocabulary
  EXPECT_EQ(ParsePredictRequest(R"({"instances": [[2, 1.5, 0, 0]]})", in, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePredictRequest(R"({"instances": [[2, 3]]})", in, 8).status().code(),
            StatusCode::kInvalidArgument);
}

// dlrm's instances: a Criteo sample's 39 fields as text, hashed as the reader hashes them, or
// its 39 integers, negative ones included (Criteo's integer columns have them).
TEST(ServeRequest, CriteoInstancesAreASamplesFieldsOrItsIntegers) {
  ModelInput in;
  in.sample_shape = {kCriteoFeatures};
  in.dtype = DataType::kInt64;
  in.min_id = std::numeric_limits<int64_t>::min();
  in.criteo_buckets = 1000;
  std::string fields = "-3";
  for (int i = 1; i < kCriteoIntegers; ++i) fields += "\t";
  fields += "\tabc";
  for (int c = 1; c < kCriteoCategories; ++c) fields += "\t";
  std::vector<int64_t> want(kCriteoFeatures, 0);
  ASSERT_TRUE(ParseCriteoFeatures(fields, 1000, want.data()).ok());
  EXPECT_EQ(want[0], -3);
  EXPECT_EQ(want[kCriteoIntegers], CriteoCategoryRow(0, 0xabc, 1000));
  std::string list = "[-3";
  for (int i = 1; i < kCriteoFeatures; ++i) list += i == kCriteoIntegers ? ", 5" : ", 0";
  list += "]";
  auto quoted = [](std::string text) {  // as a JSON string: its tabs escaped
    for (size_t at = text.find('\t'); at != std::string::npos; at = text.find('\t', at))
      text.replace(at, 1, "\\t");
    return "\"" + text + "\"";
  };
  auto got = ParsePredictRequest(Rows(quoted(fields), list), in, 8);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->count, 2);
  EXPECT_EQ(std::vector<int64_t>(got->ids.begin(), got->ids.begin() + kCriteoFeatures), want);
  EXPECT_EQ(got->ids[kCriteoFeatures], -3);
  EXPECT_EQ(got->ids[kCriteoFeatures + kCriteoIntegers], 5);
  // Two fields, or a category that is not hex: refused, naming the instance.
  const Status st = ParsePredictRequest(R"({"instances": ["1\t2"]})", in, 8).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("instance 0"), std::string::npos) << st.ToString();
  std::string bad = fields;
  bad.replace(bad.find("abc"), 3, "xyz");
  EXPECT_EQ(ParsePredictRequest("{\"instances\": [" + quoted(bad) + "]}", in, 8).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ServeRequest, PredictionsGiveClassProbabilitiesAndLabelsOfTheRequestsRowsOnly) {
  BatchOutputs out;
  out.rows = 3;
  out.row_shape = {2};
  out.values = {0, 1, 5, 2, -1, 3};
  out.probabilities = {0.25f, 0.75f, 0.1f, 0.9f, 0.125f, 0.875f};
  const std::vector<std::string> labels = {"ham", "spam\""};
  EXPECT_EQ(
      FormatPredictions(out, 1, 2, &labels),
      "{\"predictions\": [{\"class\": 0, \"label\": \"ham\", \"probabilities\": [0.100000001, "
      "0.899999976]}, {\"class\": 1, \"label\": \"spam\\\"\", \"probabilities\": [0.125, "
      "0.875]}]}");
  out.probabilities.clear();  // raw outputs
  out.row_shape = {1, 2};
  EXPECT_EQ(FormatPredictions(out, 0, 1, nullptr), "{\"predictions\": [[[0, 1]]]}");
  EXPECT_EQ(ErrorBody("bad \"x\"\n"), "{\"error\": \"bad \\\"x\\\"\\n\"}");
}

}  // namespace
}  // namespace eps
