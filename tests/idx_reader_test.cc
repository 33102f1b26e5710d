#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "tests/data_files.h"

namespace eps {
namespace {

using testing_data::TempDir;

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> ImageFile(uint32_t n, uint32_t rows, uint32_t cols,
                               const std::vector<uint8_t>& pixels, uint32_t magic = 0x00000803) {
  std::vector<uint8_t> out;
  PutU32(&out, magic);
  PutU32(&out, n);
  PutU32(&out, rows);
  PutU32(&out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> LabelFile(uint32_t n, const std::vector<uint8_t>& labels,
                               uint32_t magic = 0x00000801) {
  std::vector<uint8_t> out;
  PutU32(&out, magic);
  PutU32(&out, n);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// 3 images of 2x3 pixels covering 0 and 255, labels 0..2.
const std::vector<uint8_t> kPixels = {0,  255, 1,  2,   3,   4,   //
                                      10, 20,  30, 40,  50,  60,  //
                                      70, 80,  90, 100, 200, 128};
const std::vector<uint8_t> kLabels = {7, 0, 9};

void ExpectMatches(const Dataset& ds, int64_t n) {
  EXPECT_EQ(ds.size, n);
  EXPECT_EQ(ds.sample_shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ds.feature_dtype, DataType::kFloat32);
  EXPECT_EQ(ds.label_dtype, DataType::kInt64);
  EXPECT_TRUE(ds.label_shape.empty());
  ASSERT_EQ(ds.SampleElems(), 6);
  const auto* images = static_cast<const float*>(ds.features);
  for (int64_t i = 0; i < n * 6; ++i) {
    EXPECT_EQ(images[i], (static_cast<float>(kPixels[i]) / 255.0f - 0.2860f) / 0.3530f) << i;
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(ds.ClassOf(i), kLabels[i]);
  EXPECT_EQ(ds.num_classes, n == 3 ? 10 : 8);
  EXPECT_TRUE(ds.CheckUnchanged().ok());
}

TEST(IdxReader, ReadsGzipFilesWithExactNormalizedPixelsAndLabels) {
  TempDir dir;
  const std::string images = dir.File("images.gz"), labels = dir.File("labels.gz");
  WriteGz(images, ImageFile(3, 2, 3, kPixels));
  WriteGz(labels, LabelFile(3, kLabels));
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectMatches(*ds, 3);
  EXPECT_FLOAT_EQ(static_cast<const float*>(ds->features)[0], -0.2860f / 0.3530f);
  EXPECT_FLOAT_EQ(static_cast<const float*>(ds->features)[1], (1.0f - 0.2860f) / 0.3530f);
}

TEST(IdxReader, ReadsPlainFiles) {
  TempDir dir;
  const std::string images = dir.File("images"), labels = dir.File("labels");
  WritePlain(images, ImageFile(3, 2, 3, kPixels));
  WritePlain(labels, LabelFile(3, kLabels));
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, -1);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectMatches(*ds, 3);
}

TEST(IdxReader, KeepsOnlyTheFirstLimitSamples) {
  TempDir dir;
  const std::string images = dir.File("images.gz"), labels = dir.File("labels");
  WriteGz(images, ImageFile(3, 2, 3, kPixels));
  WritePlain(labels, LabelFile(3, kLabels));
  StatusOr<Dataset> two = ReadIdxDataset(images, labels, 2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ExpectMatches(*two, 2);
  StatusOr<Dataset> all = ReadIdxDataset(images, labels, 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ExpectMatches(*all, 3);
}

TEST(IdxReader, ReportsAMissingFileAsNotFound) {
  TempDir dir;
  const std::string images = dir.File("images"), labels = dir.File("labels");
  WritePlain(labels, LabelFile(3, kLabels));
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find(images), std::string::npos) << ds.status().ToString();

  WritePlain(images, ImageFile(3, 2, 3, kPixels));
  ds = ReadIdxDataset(images, dir.File("nope"), 0);
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
}

TEST(IdxReader, RejectsBadMagic) {
  TempDir dir;
  const std::string images = dir.File("images"), labels = dir.File("labels");
  WritePlain(images, ImageFile(3, 2, 3, kPixels, /*magic=*/0x00000801));
  WritePlain(labels, LabelFile(3, kLabels));
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("magic"), std::string::npos) << ds.status().ToString();

  WritePlain(images, ImageFile(3, 2, 3, kPixels));
  WritePlain(labels, LabelFile(3, kLabels, /*magic=*/0x12345678));
  ds = ReadIdxDataset(images, labels, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("magic"), std::string::npos) << ds.status().ToString();
}

TEST(IdxReader, ReportsTruncatedImagesAsDataLoss) {
  TempDir dir;
  const std::string images = dir.File("images"), gz = dir.File("images.gz"),
                    labels = dir.File("labels");
  std::vector<uint8_t> bytes = ImageFile(3, 2, 3, kPixels);
  bytes.resize(bytes.size() - 5);
  WritePlain(images, bytes);
  WriteGz(gz, bytes);
  WritePlain(labels, LabelFile(3, kLabels));
  for (const std::string& path : {images, gz}) {
    StatusOr<Dataset> ds = ReadIdxDataset(path, labels, 0);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status().ToString();
  }
  // Only the samples kept need to be there.
  EXPECT_TRUE(ReadIdxDataset(images, labels, 2).ok());
  // A header cut short is truncated too.
  WritePlain(images, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 6));
  EXPECT_EQ(ReadIdxDataset(images, labels, 0).status().code(), StatusCode::kDataLoss);
}

TEST(IdxReader, ReportsACorruptGzipStreamAsDataLoss) {
  TempDir dir;
  const std::string images = dir.File("images.gz"), labels = dir.File("labels");
  WriteGz(images, ImageFile(3, 2, 3, kPixels));
  WritePlain(labels, LabelFile(3, kLabels));
  // Cut the compressed stream in half: a valid gzip header, then a deflate stream that stops early.
  FILE* f = std::fopen(images.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> gz(4096);
  gz.resize(std::fread(gz.data(), 1, gz.size(), f));
  std::fclose(f);
  gz.resize(gz.size() / 2);
  WritePlain(images, gz);
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss) << ds.status().ToString();
}

TEST(IdxReader, RejectsALabelCountThatDiffersFromTheImageCount) {
  TempDir dir;
  const std::string images = dir.File("images"), labels = dir.File("labels");
  WritePlain(images, ImageFile(3, 2, 3, kPixels));
  WritePlain(labels, LabelFile(2, {7, 0}));
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("mismatched counts"), std::string::npos)
      << ds.status().ToString();
}

TEST(IdxReader, RejectsAbsurdDimensionsWithoutAllocatingForThem) {
  TempDir dir;
  const std::string images = dir.File("images"), labels = dir.File("labels");
  WritePlain(labels, LabelFile(3, kLabels));
  for (auto [rows, cols] :
       {std::pair<uint32_t, uint32_t>{0, 3}, {2, 0}, {1u << 20, 3}, {0xffffffffu, 0xffffffffu}}) {
    WritePlain(images, ImageFile(3, rows, cols, kPixels));
    StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument) << ds.status().ToString();
  }
  // A header that claims 2^31 - 1 images of 28x28 but holds three: the pixel count
  // is refused before anything is read.
  WritePlain(images, ImageFile(0x7fffffff, 28, 28, kPixels));
  WritePlain(labels, LabelFile(0x7fffffff, kLabels));
  EXPECT_FALSE(ReadIdxDataset(images, labels, 0).ok());
  // With a limit under that, reading starts and finds the file short.
  EXPECT_EQ(ReadIdxDataset(images, labels, 1000).status().code(), StatusCode::kDataLoss);
}

TEST(IdxReader, ReadsTheFashionMnistTrainingSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images = dir + "train-images-idx3-ubyte.gz",
                    labels = dir + "train-labels-idx1-ubyte.gz";
  struct stat st;
  if (stat(images.c_str(), &st) != 0 || stat(labels.c_str(), &st) != 0)
    GTEST_SKIP() << "no Fashion-MNIST here";
  StatusOr<Dataset> ds = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->size, 60000);
  EXPECT_EQ(ds->sample_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(ds->num_classes, 10);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < ds->size; ++i) {
    const int64_t l = ds->ClassOf(i);
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++per_class[static_cast<size_t>(l)];
  }
  for (int64_t c : per_class) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
  double sum = 0;
  const auto* pixels = static_cast<const float*>(ds->features);
  for (int64_t i = 0; i < ds->size * 784; ++i) sum += pixels[i];
  EXPECT_NEAR(sum / static_cast<double>(ds->size * 784), 0.0,
              0.01);  // normalized by its own mean
}

}  // namespace
}  // namespace eps
