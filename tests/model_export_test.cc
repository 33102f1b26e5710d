// The safetensors reader (models/model_export.h) against files WriteSafetensors
// writes and against hostile headers: every malformed one is a DataLoss naming
// the file, never a read outside its bytes.
#include "models/model_export.h"

#include "common/row_init.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

namespace eps {
namespace {

class SafetensorsReader : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eps-safetensors-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // A file of the 8-byte length, `header` and `data`; `length` overrides the
  // header's own length when set.
  std::string Write(const std::string& header, const std::string& data = "",
                    int64_t length = -1) {
    const std::string path = dir_ + "/m" + std::to_string(files_++) + ".safetensors";
    const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << out << header << data;
    return path;
  }

  // The reader's error for a file: DataLoss naming the file.
  std::string Refused(const std::string& path) {
    auto got = ReadSafetensors(path, nullptr);
    EXPECT_FALSE(got.ok()) << path;
    if (got.ok()) return "";
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status().ToString();
    return got.status().message();
  }

  std::string dir_;
  int files_ = 0;
};

TEST_F(SafetensorsReader, ReadsWhatWriteSafetensorsWritesWithItsMetadata) {
  auto layout = MakeLayout({{"w", TensorKind::kParameter, DType::kFloat32, {2, 3}},
                            {"n", TensorKind::kBuffer, DType::kInt64, {}}},
                           1, 1 << 20);
  ASSERT_TRUE(layout.ok());
  ModelChunks chunks;
  std::vector<std::string> bytes;
  for (const Chunk& c : layout->chunks) {
    bytes.emplace_back(layout->ChunkBytes(c), static_cast<char>('a' + c.tensor));
  }
  for (size_t i = 0; i < layout->chunks.size(); ++i) {
    const Chunk& c = layout->chunks[i];
    ChunkBytes b;
    b.chunk = c.id;
    b.data = bytes[i].data();
    b.size = bytes[i].size();
    chunks[c.id.value()] = b;
  }
  auto digests = DigestModel(*layout, chunks);
  ASSERT_TRUE(digests.ok());
  const std::string path = dir_ + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, *layout, chunks, {}, Step(5), "job", "mlp", *digests).ok());
  std::map<std::string, std::string> meta;
  auto got = ReadSafetensors(path, &meta);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].spec.name, "w");
  EXPECT_EQ((*got)[0].spec.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*got)[0].bytes, std::string(24, 'a'));
  EXPECT_EQ((*got)[1].spec.dtype, DType::kInt64);
  EXPECT_EQ(meta["model"], "mlp");
  EXPECT_EQ(meta["steps"], "5");
}

// A sparse table is exported and digested whole, in its place among the
// tensors: as the same tensor trained dense with the same values would be.
TEST_F(SafetensorsReader, ASparseTableIsExportedAndDigestedAsTheDenseTensorItStandsFor) {
  TensorSpec emb{"emb", TensorKind::kParameter, DType::kFloat32, {4, 2}};
  const TensorSpec head{"head", TensorKind::kParameter, DType::kFloat32, {3}};
  auto dense = MakeLayout({emb, head}, 1, 1 << 20);
  emb.sparse = true;
  auto sparse = MakeLayout({emb, head}, 1, 1 << 20);
  ASSERT_TRUE(dense.ok() && sparse.ok());
  ASSERT_EQ(sparse->chunks.size(), 1u);  // the head's only
  const std::vector<float> head_values{1, 2, 3};
  // Rows 1 and 3 changed; 0 and 2 hold their initial rows (seed 9, table 0).
  const std::vector<uint64_t> ids{1, 3};
  const std::vector<float> rows{10, 11, 30, 31};
  SparseRowBytes pulled;
  pulled.table = 0;
  pulled.rows = 2;
  pulled.ids = {ChunkId(0), ids.data(), ids.size() * sizeof(uint64_t), nullptr};
  pulled.values = {ChunkId(0), rows.data(), rows.size() * sizeof(float), nullptr};
  ModelTables tables;
  ASSERT_TRUE(AddTableRows(*sparse, 9, {pulled}, &tables).ok());
  ASSERT_EQ(tables.count(0), 1u);
  const std::vector<float>& table = tables[0];
  std::vector<float> initial(2);
  InitialRow(RowInitializer{}, 9, 0, 2, initial.data(), 2);
  EXPECT_EQ(std::memcmp(&table[4], initial.data(), 8), 0);
  EXPECT_EQ(table[2], 10);
  EXPECT_EQ(table[7], 31);

  ModelChunks with_table{{0, ChunkBytes{ChunkId(0), head_values.data(), 12, nullptr}}};
  ModelChunks all_dense{{0, ChunkBytes{ChunkId(0), table.data(), 32, nullptr}},
                        {1, ChunkBytes{ChunkId(1), head_values.data(), 12, nullptr}}};
  auto a = DigestModel(*sparse, with_table, tables);
  auto b = DigestModel(*dense, all_dense);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params_sha256, b->params_sha256);
  EXPECT_EQ(DigestModel(*sparse, with_table).status().code(), StatusCode::kDataLoss);
  auto tensors = ModelTensors(*sparse, with_table, tables);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].bytes.size(), 32u);
  EXPECT_EQ(std::memcmp((*tensors)[0].bytes.data(), table.data(), 32), 0);
}

TEST_F(SafetensorsReader, RefusesHeaderLengthsPastTheFileOrOverTheFormatsLimit) {
  Refused(Write("{}", "", int64_t(1) << 40));
  Refused(Write("{}", "", int64_t(-2) & 0x7fffffffffffffff));
  Refused(Write("{}", "", 3));  // runs past: 2 header bytes only
  const std::string path = dir_ + "/short.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  Refused(path);
  EXPECT_EQ(ReadSafetensors(dir_ + "/missing.safetensors", nullptr).status().code(),
            StatusCode::kNotFound);
}

TEST_F(SafetensorsReader, RefusesHeadersThatAreNoObjectOfWellFormedTensors) {
  Refused(Write("[1, 2]"));
  Refused(Write("{\"w\": "));
  Refused(Write("{\"__metadata__\": [1]}"));
  Refused(Write("{\"__metadata__\": {\"model\": 3}}"));
  Refused(Write("{\"w\": 5}"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, -4]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 8]}}", "abcd"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "abcd"));
}

TEST_F(SafetensorsReader, RefusesShapesWhoseSizeOverflows) {
  // 2^62 * 2^2 elements of 4 bytes wrap around to 0 bytes in 64 bits.
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], "
                "\"data_offsets\": [0, 0]}}"));
  Refused(Write("{\"w\": {\"dtype\": \"F32\", \"shape\": [1073741824, 1073741824, 16], "
                "\"data_offsets\": [0, 0]}}"));
  Refused(Write("{\"w\": {\"dtype\": \"I64\", \"shape\": [2305843009213693952], "
                "\"data_offsets\": [0, 0]}}"));
}

TEST_F(SafetensorsReader, TakesEmptyTensorsAndScalars) {
  auto got = ReadSafetensors(
      Write("{\"e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, "
            "\"s\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]}}",
            std::string(8, '\0')),
      nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
}

}  // namespace
}  // namespace eps
