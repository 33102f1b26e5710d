// OpenModelData (tools/model_data.h): the data set of `elasticps evaluate`
// and `predict`, through data/'s OpenDataset, with errors that name the flag.
#include "tools/model_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace eps {
namespace {

class ModelData : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eps-model-data-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }

  // An NPY 1.0 file of float32 [n, 2] holding 0, 1, 2, ...
  std::string Npy(const std::string& name, int n) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                         std::to_string(n) + ", 2), }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
    out += header;
    for (int i = 0; i < 2 * n; ++i) {
      const float v = static_cast<float>(i);
      out.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << out;
    return path;
  }

  std::string Csv(const std::string& text) {
    const std::string path = dir_ + "/data.csv";
    std::ofstream(path) << text;
    return path;
  }

  // The error's message, expecting `code` and `flag` in it.
  static void ExpectNames(const StatusOr<Dataset>& got, const std::string& flag) {
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find(flag), std::string::npos) << got.status().ToString();
  }

  std::string dir_;
};

TEST_F(ModelData, PredictReadsAnNpyDataSetWithoutLabelsAsClassZero) {
  ModelDataOptions o;
  o.data = Npy("x.npy", 5);
  o.labels_optional = true;
  auto got = OpenModelData(o);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size, 5);
  EXPECT_EQ(got->sample_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(got->label_dtype, DataType::kInt64);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(got->ClassOf(i), 0);
  EXPECT_EQ(static_cast<const float*>(got->features)[9], 9.0f);
  EXPECT_TRUE(got->CheckUnchanged().ok());
}

TEST_F(ModelData, EvaluateNeedsTheLabels) {
  ModelDataOptions o;
  o.data = Npy("x.npy", 5);
  ExpectNames(OpenModelData(o), "--labels");
}

TEST_F(ModelData, ReadsACsvsLabelColumnAndRefusesALabelsFileBesideIt) {
  ModelDataOptions o;
  o.data = Csv("a,b,label\n1,2,3\n4,5,0\n");
  auto got = OpenModelData(o);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ClassOf(0), 3);
  o.labels = Npy("y.npy", 2);
  ExpectNames(OpenModelData(o), "--labels");
  o.labels.clear();
  o.label_column = "nope";
  ExpectNames(OpenModelData(o), "--data");
}

TEST_F(ModelData, NamesTheFlagOfAMissingOrUnreadableFile) {
  ModelDataOptions o;
  ExpectNames(OpenModelData(o), "--data");
  o.data = dir_ + "/missing.npy";
  o.labels = Npy("y.npy", 2);
  auto missing = OpenModelData(o);
  ExpectNames(missing, "--data");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  o.data = dir_ + "/x.bin";
  ExpectNames(OpenModelData(o), "--data_format");
  o.format = "parquet";
  ExpectNames(OpenModelData(o), "--data_format");
}

}  // namespace
}  // namespace eps
