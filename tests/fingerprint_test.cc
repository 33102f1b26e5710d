#include "data/fingerprint.h"

#include <gtest/gtest.h>

#include "data/job_data.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using namespace testing_data;

std::string Fp(const std::string& role, const std::string& path) {
  StatusOr<std::string> fp = FingerprintFile(role, path);
  EXPECT_TRUE(fp.ok()) << fp.status().ToString();
  return fp.ok() ? *fp : "";
}

TEST(Fingerprint, TellsFilesApartButNotTheirPaths) {
  TempDir dir;
  const std::string a = dir.File("a.npy"), b = dir.File("b.npy"), c = dir.File("c.npy");
  std::string big(5 << 20, 'x');  // sampled, not hashed whole
  WriteBytes(a, big);
  WriteBytes(b, big);
  EXPECT_TRUE(CompareFingerprints(Fp("train_data", a), Fp("train_data", b)).ok());
  big[10] = 'y';  // in the first MiB
  WriteBytes(c, big);
  Status st = CompareFingerprints(Fp("train_data", a), Fp("train_data", c));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind(kDataMismatch, 0), 0u) << st.ToString();
  EXPECT_NE(st.message().find("train_data " + c), std::string::npos) << st.ToString();
  big[10] = 'x';
  big.resize(big.size() - 1);  // another size
  WriteBytes(c, big);
  EXPECT_FALSE(CompareFingerprints(Fp("train_data", a), Fp("train_data", c)).ok());
  // A role the job does not have, or lacks.
  EXPECT_FALSE(CompareFingerprints(Fp("train_data", a), Fp("test_data", a)).ok());
  EXPECT_FALSE(
      CompareFingerprints(Fp("train_data", a), Fp("train_data", a) + "\n" + Fp("test_data", a))
          .ok());
  EXPECT_FALSE(CompareFingerprints(Fp("train_data", a), "garbage").ok());
}

TEST(Fingerprint, HashesASmallFileWhole) {
  TempDir dir;
  const std::string a = dir.File("a.csv"), b = dir.File("b.csv");
  std::string text(2 << 20, '1');
  WriteBytes(a, text);
  text[1 << 20] = '2';  // the middle of a file that is hashed whole
  WriteBytes(b, text);
  EXPECT_FALSE(CompareFingerprints(Fp("train_data", a), Fp("train_data", b)).ok());
  EXPECT_EQ(FingerprintFile("train_data", dir.File("none")).status().code(), StatusCode::kNotFound);
}

TEST(JobData, OpensTheFormatTheExtensionOrFlagSays) {
  TempDir dir;
  const std::string csv = dir.File("t.csv"), table = dir.File("t.table");
  WriteBytes(csv, "x,label\n1,0\n2,1\n");
  WriteBytes(table, "x,label\n1,0\n2,1\n");
  JobSpec spec;
  spec.train_data = csv;
  spec.test_data = table;
  auto data = OpenJobData(spec);
  EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);  // .table says nothing
  EXPECT_NE(data.status().message().find("--data_format"), std::string::npos);
  spec.data_format = "csv";
  data = OpenJobData(spec);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->train.size, 2);
  EXPECT_EQ(data->test.size, 2);
  EXPECT_EQ(*FingerprintJobData(spec), data->fingerprint);
  EXPECT_NE(data->fingerprint.find("test_data size=16"), std::string::npos) << data->fingerprint;
  spec.test_limit = -1;  // no evaluation: no test set
  data = OpenJobData(spec);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->test.size, 0);
  spec.train_labels = csv;
  EXPECT_NE(OpenJobData(spec).status().message().find("--train_labels"), std::string::npos);
  spec.data_format = "parquet";
  EXPECT_NE(OpenJobData(spec).status().message().find("--data_format 'parquet'"),
            std::string::npos);
}

TEST(JobData, OpensIdxFilesByExplicitPathsAsTheDefaultDoes) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (access((dir + "t10k-images-idx3-ubyte.gz").c_str(), R_OK) != 0)
    GTEST_SKIP() << "no Fashion-MNIST here";
  JobSpec spec;
  spec.data_dir = dir;
  spec.train_data = dir + "t10k-images-idx3-ubyte.gz";  // .gz: IDX
  spec.train_labels = dir + "t10k-labels-idx1-ubyte.gz";
  spec.train_limit = 100;
  spec.test_limit = -1;
  auto data = OpenJobData(spec);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->train.size, 100);
  EXPECT_EQ(data->train.sample_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(data->train.num_classes, 10);
  EXPECT_NE(data->fingerprint.find("train_labels size="), std::string::npos);
}

TEST(JobData, DefaultsToFashionMnistInDataDir) {
  JobSpec spec;
  spec.data_dir = "/data";
  const JobDataFiles files = DataFilesOf(spec);
  EXPECT_EQ(files.train.features, "/data/train-images-idx3-ubyte.gz");
  EXPECT_EQ(files.train.format, "idx");
  ASSERT_TRUE(files.test.has_value());
  EXPECT_EQ(files.test->labels, "/data/t10k-labels-idx1-ubyte.gz");
}

}  // namespace
}  // namespace eps
