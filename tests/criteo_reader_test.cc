#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "data/criteo.h"
#include "data/model_input.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using testing_data::TempDir;
using testing_data::WriteBytes;

// A Criteo line: label, 13 integer cells, 26 category cells.
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(kCriteoIntegers);
  cats.resize(kCriteoCategories);
  std::string out = label;
  for (const std::string& c : ints) out += "\t" + c;
  for (const std::string& c : cats) out += "\t" + c;
  return out + "\n";
}

TEST(CriteoReader, ReadsIntegersAsTheyAreAndHashesCategoriesWithTheirColumn) {
  TempDir dir;
  const std::string path = dir.File("day.txt");
  WriteBytes(path, Line("1", {"3", "", "-2"}, {"68fd1e64", "", "68fd1e64"}) + "\r\n" +
                       Line("0", {}, {}) + Line("0", {"7"}, {"ABC"}));
  auto ds = ReadCriteoDataset(path, 1000, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->size, 3);
  EXPECT_EQ(ds->sample_shape, std::vector<int64_t>{39});
  EXPECT_EQ(ds->feature_dtype, DataType::kInt64);
  EXPECT_EQ(ds->num_classes, 2);
  const auto* x = static_cast<const int64_t*>(ds->features);
  EXPECT_EQ(ds->ClassOf(0), 1);
  EXPECT_EQ(ds->ClassOf(1), 0);
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[1], 0);  // missing
  EXPECT_EQ(x[2], -2);
  const int64_t a = x[13], missing = x[14], a_in_column_3 = x[15];
  EXPECT_EQ(a, CriteoCategoryRow(0, 0x68fd1e64, 1000));
  EXPECT_EQ(missing, 0);
  EXPECT_NE(a, a_in_column_3);  // the same value in another column: another row
  for (int i = 0; i < 3 * kCriteoFeatures; ++i) {
    if (i % kCriteoFeatures >= kCriteoIntegers) {
      EXPECT_GE(x[i], 0);
      EXPECT_LT(x[i], 1000);
    }
  }
  EXPECT_EQ(x[2 * kCriteoFeatures + 13], CriteoCategoryRow(0, 0xabc, 1000));  // hex in either case
  // --limit keeps the first samples.
  EXPECT_EQ(ReadCriteoDataset(path, 1000, 2)->size, 2);
}

// One sample's fields without its label (a served dlrm's instance) give the features a file's
// line gives; a wrong field is named.
TEST(CriteoReader, ParsesOneSamplesFieldsAsTheFileReaderDoes) {
  TempDir dir;
  const std::string path = dir.File("day.txt");
  const std::string line = Line("1", {"3", "", "-2"}, {"68fd1e64", "", "ABC"});
  WriteBytes(path, line);
  for (const uint64_t buckets : {uint64_t{1000}, uint64_t{0}}) {
    auto ds = ReadCriteoDataset(path, buckets, 0);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    std::vector<int64_t> got(kCriteoFeatures, -7);
    const std::string fields = line.substr(2, line.size() - 3);  // less "1\t" and "\n"
    ASSERT_TRUE(ParseCriteoFeatures(fields, buckets, got.data()).ok());
    const auto* x = static_cast<const int64_t*>(ds->features);
    EXPECT_EQ(got, std::vector<int64_t>(x, x + kCriteoFeatures));
  }
  std::vector<int64_t> out(kCriteoFeatures);
  Status st = ParseCriteoFeatures("1\t2", 1000, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  const std::string bad = Line("1", {}, {"", "xyz"});
  st = ParseCriteoFeatures(bad.substr(2, bad.size() - 3), 1000, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("field 15"), std::string::npos) << st.ToString();
}

// Buckets 0: each category keeps a 63-bit key (ids far beyond 2^32), still by its column;
// dlrm's table of unbounded keys (0 rows) takes them.
TEST(CriteoReader, WithoutBucketsCategoriesKeep63BitKeys) {
  TempDir dir;
  const std::string path = dir.File("day.txt");
  std::vector<std::string> cats;
  for (int c = 0; c < kCriteoCategories; ++c) cats.push_back(c == 5 ? "" : "68fd1e64");
  WriteBytes(path, Line("1", {"3"}, cats) + Line("0", {}, {"68fd1e64"}));
  auto ds = ReadCriteoDataset(path, 0, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto* x = static_cast<const int64_t*>(ds->features);
  std::set<int64_t> keys;
  int beyond_32_bits = 0;
  for (int c = 0; c < kCriteoCategories; ++c) {
    const int64_t id = x[kCriteoIntegers + c];
    if (c == 5) {
      EXPECT_EQ(id, 0);  // missing
      continue;
    }
    EXPECT_EQ(id, CriteoCategoryRow(c, 0x68fd1e64, 0));
    EXPECT_GE(id, 1);
    EXPECT_LT(id, std::numeric_limits<int64_t>::max());
    keys.insert(id);
    beyond_32_bits += id >= (int64_t{1} << 32);
  }
  EXPECT_EQ(keys.size(), size_t{kCriteoCategories - 1});  // one value, 25 columns: 25 keys
  EXPECT_GE(beyond_32_bits, 20);
  EXPECT_EQ(x[kCriteoFeatures + kCriteoIntegers], x[kCriteoIntegers]);  // the same key again
  ZooSizes sizes;
  sizes.vocab_size = 0;
  EXPECT_TRUE(CheckModelInputFor("dlrm", sizes, *ds).ok());
  sizes.vocab_size = 1000;
  EXPECT_EQ(CheckModelInputFor("dlrm", sizes, *ds).code(), StatusCode::kInvalidArgument);
}

TEST(CriteoModelInput, DlrmTakesTheReadersSamplesWithRowsBelowItsTable) {
  TempDir dir;
  const std::string path = dir.File("day.txt");
  WriteBytes(path, Line("1", {"3"}, {"68fd1e64", "77"}) + Line("0", {}, {"abc"}));
  auto ds = ReadCriteoDataset(path, 1000, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ZooSizes sizes;
  sizes.vocab_size = 1000;
  EXPECT_TRUE(IsBuiltinModel("dlrm") && TakesIds("dlrm") && !IsTextModel("dlrm"));
  EXPECT_TRUE(CheckModelInputFor("dlrm", sizes, *ds).ok());
  // A table of fewer rows than the reader hashed into: refused, naming --hash_buckets.
  sizes.vocab_size = 10;
  const Status narrow = CheckModelInputFor("dlrm", sizes, *ds);
  EXPECT_EQ(narrow.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.message().find("--hash_buckets"), std::string::npos) << narrow.ToString();
  // Samples of another shape (here the first 38 features only) are not Criteo samples.
  sizes.vocab_size = 1000;
  Dataset other = *ds;
  other.sample_shape = {kCriteoFeatures - 1};
  EXPECT_EQ(CheckModelInputFor("dlrm", sizes, other).code(), StatusCode::kInvalidArgument);
}

TEST(CriteoReader, BadLinesAreInvalidArgumentNamingFileLineAndColumn) {
  TempDir dir;
  const std::string good = Line("0", {"1"}, {"a1"});
  struct Case {
    std::string line;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"0\t1\t2\n", "line 2 has 3 tab-separated fields"},
      {Line("2", {}, {}), "line 2, column 1"},
      {Line("0", {"1.5"}, {}), "line 2, column 2"},
      {Line("0", {"", "x"}, {}), "line 2, column 3"},
      {Line("0", {}, {"", "zz"}), "line 2, column 16"},
      {Line("0", {}, {"0123456789abcdef0"}), "line 2, column 15"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.File("bad" + std::to_string(&c - cases.data()));
    WriteBytes(path, good + c.line);
    auto ds = ReadCriteoDataset(path, 1000, 0);
    ASSERT_EQ(ds.status().code(), StatusCode::kInvalidArgument) << c.line;
    EXPECT_NE(ds.status().message().find(path + ": " + c.says), std::string::npos)
        << ds.status().message();
  }
  const std::string path = dir.File("good");
  WriteBytes(path, good);
  EXPECT_EQ(ReadCriteoDataset(path, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCriteoDataset(dir.File("none"), 1000, 0).status().code(), StatusCode::kNotFound);
  const std::string empty = dir.File("empty");
  WriteBytes(empty, "\n\n");
  EXPECT_EQ(ReadCriteoDataset(empty, 1000, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
