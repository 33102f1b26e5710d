#include <gtest/gtest.h>

#include <random>

#include "data/dataset.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using namespace testing_data;

StatusOr<Dataset> ReadText(TempDir& dir, const std::string& text, const std::string& column = "label",
                           int64_t limit = 0) {
  const std::string p = dir.File("t.csv");
  WriteBytes(p, text);
  return ReadCsvDataset(p, column, limit);
}

TEST(CsvReader, ReadsFeatureColumnsAndIntegerLabelsAsClasses) {
  TempDir dir;
  auto ds = ReadText(dir, "a,label,b\n1.5,2,-3\n0,0,1e3\r\n\n  7 , 1 , \"8\"\n");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->size, 3);
  EXPECT_EQ(ds->sample_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(ds->feature_dtype, DataType::kFloat32);
  EXPECT_EQ(ds->label_dtype, DataType::kInt64);
  EXPECT_EQ(ds->num_classes, 3);
  const auto* x = static_cast<const float*>(ds->features);
  EXPECT_EQ(std::vector<float>(x, x + 6), (std::vector<float>{1.5f, -3, 0, 1000, 7, 8}));
  EXPECT_EQ(ds->ClassOf(0), 2);
  EXPECT_EQ(ds->ClassOf(2), 1);
}

TEST(CsvReader, ReadsOtherLabelsAsFloat32TargetsAndKeepsTheFirstLimitRows) {
  TempDir dir;
  auto ds = ReadText(dir, "y,x\n0.5,1\n2,2\n-1.25,3\n", "y");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->label_dtype, DataType::kFloat32);
  EXPECT_EQ(static_cast<const float*>(ds->labels)[2], -1.25f);
  auto two = ReadText(dir, "y,x\n0.5,1\n2,2\n-1.25,3\n", "y", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size, 2);
}

void ExpectError(const StatusOr<Dataset>& ds, const std::string& part) {
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(part), std::string::npos) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("t.csv"), std::string::npos) << ds.status().ToString();
}

TEST(CsvReader, RefusesEveryMalformedTableNamingLineColumnOrField) {
  TempDir dir;
  ExpectError(ReadText(dir, ""), "empty file");
  ExpectError(ReadText(dir, "\n\n"), "empty file");
  ExpectError(ReadText(dir, "a,b\n1,2\n"), "no label column 'label'");
  ExpectError(ReadText(dir, "label\n1\n"), "no feature column");
  ExpectError(ReadText(dir, "a,label\n"), "no data rows");
  ExpectError(ReadText(dir, "a,label\n1,2\n3\n"), "line 3 has 1 cells, the header has 2");
  ExpectError(ReadText(dir, "a,label\n1,2\n3,4,5\n"), "line 3 has 3 cells");
  ExpectError(ReadText(dir, "a,label\n1,2\nx1,4\n"), "line 3, column 1 ('a'): 'x1' is not a");
  ExpectError(ReadText(dir, "a,label\n1,cat\n"), "line 2, column 2 ('label'): 'cat'");
  ExpectError(ReadText(dir, "a,label\n,1\n"), "line 2, column 1");
  ExpectError(ReadText(dir, "a,label\nnan,1\n"), "not a finite number");
  ExpectError(ReadText(dir, "a,label\n1e39,1\n"), "not a finite number");
  ExpectError(ReadText(dir, "a,label\n1,-1\n"), "negative label");
  ExpectError(ReadText(dir, "label,a,label\n1,2,3\n"), "two columns");
  EXPECT_EQ(ReadCsvDataset("/nonexistent/t.csv", "label", 0).status().code(),
            StatusCode::kNotFound);
}

TEST(CsvReader, NeverCrashesOnRandomBytes) {
  TempDir dir;
  std::mt19937 rng(3);
  const std::string alphabet = "0123456789.,-e\n\r \"labx";
  for (int round = 0; round < 300; ++round) {
    std::string text = round % 2 ? "a,label\n" : "";
    const size_t n = rng() % 80;
    for (size_t i = 0; i < n; ++i)
      text += round % 3 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng());
    auto ds = ReadText(dir, text);
    if (ds.ok()) {
      EXPECT_GE(ds->size, 1);
    }
  }
}

}  // namespace
}  // namespace eps
