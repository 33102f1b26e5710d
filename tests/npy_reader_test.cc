#include <gtest/gtest.h>

#include <random>

#include "data/dataset.h"
#include "data/npy.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using namespace testing_data;

const std::vector<int64_t> kClasses = {2, 0, 1};

// Writes features `f` and labels {2, 0, 1} as '<i8' and reads them.
StatusOr<Dataset> ReadPair(TempDir& dir, const std::string& features, const std::string& labels,
                           int64_t limit = 0) {
  const std::string fp = dir.File("x.npy"), lp = dir.File("y.npy");
  WriteBytes(fp, features);
  WriteBytes(lp, labels);
  return ReadNpyDataset(fp, lp, limit);
}

std::string Labels() { return Npy(Dict("<i8", "(3,)"), Raw(kClasses)); }

TEST(NpyReader, ReadsFloat32FeaturesOfAnySampleShapeInPlace) {
  TempDir dir;
  std::vector<float> x(3 * 2 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) - 3;
  auto ds = ReadPair(dir, Npy(Dict("<f4", "(3, 2, 4)"), Raw(x)), Labels());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->size, 3);
  EXPECT_EQ(ds->sample_shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(ds->feature_dtype, DataType::kFloat32);
  EXPECT_EQ(ds->label_dtype, DataType::kInt64);
  EXPECT_TRUE(ds->label_shape.empty());
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(std::memcmp(ds->features, x.data(), x.size() * 4), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ds->features) % 64, 0u);  // the mapping, not a copy
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ds->ClassOf(i), kClasses[i]);
  EXPECT_TRUE(ds->CheckUnchanged().ok());
}

TEST(NpyReader, ReadsUint8AndInt64FeaturesAndEveryFormatVersion) {
  TempDir dir;
  std::vector<uint8_t> u = {0, 255, 7, 8, 9, 10};
  for (int major : {1, 2, 3}) {
    auto ds = ReadPair(dir, Npy(Dict("|u1", "(3, 2)"), Raw(u), major), Labels());
    ASSERT_TRUE(ds.ok()) << major << ": " << ds.status().ToString();
    EXPECT_EQ(ds->feature_dtype, DataType::kUInt8);
    EXPECT_EQ(std::memcmp(ds->features, u.data(), u.size()), 0);
  }
  std::vector<int64_t> w = {-5, 1LL << 40, 3};
  auto ds = ReadPair(dir, Npy(Dict("<i8", "(3,)"), Raw(w)), Labels());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->feature_dtype, DataType::kInt64);
  EXPECT_TRUE(ds->sample_shape.empty());
  EXPECT_EQ(static_cast<const int64_t*>(ds->features)[1], 1LL << 40);
}

TEST(NpyReader, WidensUint8LabelsAndKeepsFloat32Targets) {
  TempDir dir;
  const std::string x = Npy(Dict("<f4", "(3, 1)"), Raw(std::vector<float>{1, 2, 3}));
  auto u = ReadPair(dir, x, Npy(Dict("|u1", "(3,)"), Raw(std::vector<uint8_t>{9, 4, 200})));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->label_dtype, DataType::kInt64);
  EXPECT_EQ(u->ClassOf(2), 200);
  EXPECT_EQ(u->num_classes, 201);
  std::vector<float> t = {0.25f, -1.5f, 3e7f, 1, 2, 3};
  auto f = ReadPair(dir, x, Npy(Dict("<f4", "(3, 2)"), Raw(t)));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->label_dtype, DataType::kFloat32);
  EXPECT_EQ(f->label_shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(static_cast<const float*>(f->labels)[1], -1.5f);
}

TEST(NpyReader, KeepsTheFirstLimitSamples) {
  TempDir dir;
  auto ds = ReadPair(dir, Npy(Dict("<f4", "(3,)"), Raw(std::vector<float>{1, 2, 3})), Labels(), 2);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->size, 2);
  EXPECT_EQ(ds->num_classes, 3);  // of the kept labels {2, 0}
}

// The error's code and a piece of its message.
void ExpectError(const StatusOr<Dataset>& ds, StatusCode code, const std::string& part) {
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), code) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(part), std::string::npos) << ds.status().ToString();
}

TEST(NpyReader, RefusesEveryMalformedFileWithAStatusNamingIt) {
  TempDir dir;
  const std::string f3 = Raw(std::vector<float>{1, 2, 3});
  const std::string ok = Npy(Dict("<f4", "(3,)"), f3);
  const auto E = StatusCode::kInvalidArgument;
  ExpectError(ReadPair(dir, Npy(Dict("<f8", "(3,)"), Raw(std::vector<double>{1, 2, 3})), Labels()),
              E, "'<f8' is not supported");
  ExpectError(ReadPair(dir, Npy(Dict(">f4", "(3,)"), f3), Labels()), E, "big-endian");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "(3,)", "True"), f3), Labels()), E, "fortran_order");
  ExpectError(ReadPair(dir, ok.substr(0, ok.size() - 2), Labels()), StatusCode::kDataLoss,
              "truncated");
  ExpectError(ReadPair(dir, ok + "xxxx", Labels()), E, "shape and size disagree");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "(2,)"), f3), Labels()), E, "shape and size disagree");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "(4,)"), f3 + Raw(std::vector<float>{4})), Labels()),
              E, "mismatched counts");
  ExpectError(ReadPair(dir, "", Labels()), E, "empty file");
  ExpectError(ReadPair(dir, "hello world, not numpy", Labels()), E, "not an NPY file");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "()"), Raw(std::vector<float>{1})), Labels()), E,
              "scalar");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "(0, 3)"), ""), Labels()), E, "no samples");
  ExpectError(ReadPair(dir, Npy("{'descr': '<f4', 'shape': (3,)}", f3), Labels()), E,
              "no 'fortran_order'");
  ExpectError(ReadPair(dir, Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), "
                                "'extra': 1}", f3), Labels()),
              E, "unknown header field 'extra'");
  ExpectError(ReadPair(dir, ok, Npy(Dict("<i4", "(3,)"), Raw(std::vector<int32_t>{1, 2, 3}))), E,
              "not supported for labels");
  ExpectError(ReadPair(dir, ok, Npy(Dict("<i8", "(3,)"), Raw(std::vector<int64_t>{1, -2, 3}))), E,
              "negative label");
  ExpectError(ReadPair(dir, Npy(Dict("<f4", "(99999999999, 99999999999, 99999)"), f3), Labels()),
              E, "absurdly large");
  std::string version9 = ok;
  version9[6] = 9;
  ExpectError(ReadPair(dir, version9, Labels()), E, "version 9");
  ExpectError(ReadNpyDataset("/nonexistent/x.npy", "/nonexistent/y.npy", 0),
              StatusCode::kNotFound, "/nonexistent/x.npy");
  // Every message names the file.
  auto named = ReadPair(dir, Npy(Dict("<f8", "(3,)"), f3 + f3), Labels());
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("x.npy"), std::string::npos);
}

TEST(NpyReader, NeverCrashesOnRandomBytesOrCorruptedHeaders) {
  TempDir dir;
  std::mt19937 rng(17);
  const std::string ok = Npy(Dict("<f4", "(3, 2)"), Raw(std::vector<float>(6, 1.f)));
  for (int round = 0; round < 400; ++round) {
    std::string bytes = ok;
    if (round % 2 == 0) {
      for (int k = 0; k < 4; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    } else {
      bytes.resize(rng() % (ok.size() + 8));
      for (char& c : bytes) c = static_cast<char>(rng());
      if (round % 4 == 1 && bytes.size() > 8) bytes.replace(0, 8, ok.substr(0, 8));
    }
    auto ds = ReadPair(dir, bytes, Labels());
    if (ds.ok()) {
      EXPECT_EQ(ds->size, 3);  // a flip inside the data, or harmless whitespace
    }
  }
}

TEST(NpyReader, NoticesAFileChangedAfterTheOpen) {
  TempDir dir;
  const std::string fp = dir.File("x.npy"), lp = dir.File("y.npy");
  WriteBytes(fp, Npy(Dict("<f4", "(3,)"), Raw(std::vector<float>{1, 2, 3})));
  WriteBytes(lp, Labels());
  auto ds = ReadNpyDataset(fp, lp, 0);
  ASSERT_TRUE(ds.ok());
  ASSERT_TRUE(ds->CheckUnchanged().ok());
  ASSERT_EQ(truncate(fp.c_str(), 64), 0);  // cut in place: a read of the data would SIGBUS
  Status st = ds->CheckUnchanged();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(fp), std::string::npos) << st.ToString();
  // Replaced by rename (another inode, same contents).
  const std::string other = dir.File("y2.npy");
  WriteBytes(other, Labels());
  auto labels_ds = ReadNpyDataset(lp, lp, 0);  // the labels as features, too
  ASSERT_TRUE(labels_ds.ok()) << labels_ds.status().ToString();
  ASSERT_EQ(std::rename(other.c_str(), lp.c_str()), 0);
  st = labels_ds->CheckUnchanged();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("replaced"), std::string::npos) << st.ToString();
}

// One array as its header says, of any dtype named: what an export's table files are read through.
TEST(MapNpyArray, MapsAnArrayOfTheDtypeAskedForAndRefusesTheRest) {
  TempDir dir;
  const std::string p = dir.File("ids.npy");
  const std::vector<int64_t> ids = {3, 7, int64_t{1} << 40};
  WriteBytes(p, Npy(Dict("<u8", "(3,)"), Raw(ids)));
  auto a = MapNpyArray(p, "<u8", 8);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(std::memcmp(a->data, ids.data(), 24), 0);
  // No rows at all is an array too (a table file of a table no step touched).
  const std::string empty = dir.File("rows.npy");
  WriteBytes(empty, Npy(Dict("<f4", "(0, 4)"), ""));
  auto e = MapNpyArray(empty, "<f4", 4);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 4}));

  EXPECT_EQ(MapNpyArray(p, "<f4", 4).status().code(), StatusCode::kInvalidArgument);  // the dtype
  EXPECT_EQ(MapNpyArray(dir.File("none.npy"), "<u8", 8).status().code(), StatusCode::kNotFound);
  WriteBytes(p, Npy(Dict("<u8", "(4,)"), Raw(ids)));
  Status st = MapNpyArray(p, "<u8", 8).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(p), std::string::npos) << st.ToString();
  WriteBytes(p, Npy(Dict("<u8", "(2,)"), Raw(ids)));
  EXPECT_EQ(MapNpyArray(p, "<u8", 8).status().code(), StatusCode::kInvalidArgument);
  WriteBytes(p, "not an npy file at all");
  EXPECT_EQ(MapNpyArray(p, "<u8", 8).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
