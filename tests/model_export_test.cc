// The safetensors reader (models/model_export.h) against files ExportModel
// writes and against hostile headers: every malformed one is a DataLoss naming
// the file, never a read outside its bytes.
#include "models/model_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/row_init.h"
#include "tests/table_rows.h"

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

TEST_F(SafetensorsReader, ReadsWhatExportModelWritesWithItsMetadata) {
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
  HeldModel held(*layout, chunks);
  const ExportFile file{path, Step(5), "job", "mlp", {{"extra", "x"}}};
  auto written = ExportModel(*layout, &held, {}, &file);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->params_sha256, digests->params_sha256);
  EXPECT_EQ(written->buffers_sha256, digests->buffers_sha256);
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
  EXPECT_EQ(meta["extra"], "x");
  EXPECT_EQ(meta["params_sha256"], digests->params_sha256);  // filled in at the end
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A chunk missing: no file, and none half-written.
  ModelChunks missing = chunks;
  missing.erase(layout->chunks[0].id.value());
  HeldModel short_of_one(*layout, missing);
  const ExportFile other{dir_ + "/other.safetensors", Step(5), "job", "mlp", {}};
  EXPECT_EQ(ExportModel(*layout, &short_of_one, {}, &other).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(other.path));
  EXPECT_FALSE(std::filesystem::exists(other.path + ".tmp"));
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
  ASSERT_TRUE(AddTableRows(*sparse, {pulled}, &tables).ok());
  ASSERT_TRUE(SortTableRows(*sparse, &tables).ok());
  const TableExport e{9};
  ModelChunks with_table{{0, ChunkBytes{ChunkId(0), head_values.data(), 12, nullptr}}};
  auto tensors = ModelTensors(*sparse, with_table, tables, e);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ(tensors->size(), 2u);
  ASSERT_EQ((*tensors)[0].bytes.size(), 32u);
  std::vector<float> table(8);
  std::memcpy(table.data(), (*tensors)[0].bytes.data(), 32);
  std::vector<float> initial(2);
  InitialRow(RowInitializer{}, 9, 0, 2, initial.data(), 2);
  EXPECT_EQ(std::memcmp(&table[4], initial.data(), 8), 0);
  EXPECT_EQ(table[2], 10);
  EXPECT_EQ(table[7], 31);

  ModelChunks all_dense{{0, ChunkBytes{ChunkId(0), table.data(), 32, nullptr}},
                        {1, ChunkBytes{ChunkId(1), head_values.data(), 12, nullptr}}};
  auto a = DigestModel(*sparse, with_table, tables, e);
  auto b = DigestModel(*dense, all_dense);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params_sha256, b->params_sha256);
  // No stored row: the initial rows alone, another digest.
  auto initial_only = DigestModel(*sparse, with_table, {}, e);
  ASSERT_TRUE(initial_only.ok());
  EXPECT_NE(initial_only->params_sha256, a->params_sha256);
}

// A table larger than TableExport::dense_bytes leaves the safetensors file for a table file of
// its stored rows (.npy), and params_sha256 hashes those rows: the shards' parts in any order.
TEST_F(SafetensorsReader, ATableTooLargeToLayOutGoesToATableFileOfItsStoredRows) {
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {1000, 2}};
  emb.sparse = true;
  const TensorSpec head{"head", TensorKind::kParameter, DType::kFloat32, {3}};
  auto layout = MakeLayout({emb, head}, 2, 1 << 20);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> head_values{1, 2, 3};
  ModelChunks chunks{{0, ChunkBytes{ChunkId(0), head_values.data(), 12, nullptr}}};
  auto part = [](std::vector<uint64_t> ids, std::vector<float> values) {
    auto i = std::make_shared<std::vector<uint64_t>>(std::move(ids));
    auto v = std::make_shared<std::vector<float>>(std::move(values));
    SparseRowBytes r;
    r.rows = static_cast<uint32_t>(i->size());
    r.ids = {ChunkId(0), i->data(), i->size() * sizeof(uint64_t), i};
    r.values = {ChunkId(0), v->data(), v->size() * sizeof(float), v};
    return r;
  };
  const TableExport small{9, 4000};  // the table is 8,000 bytes
  ModelTables one, other;            // the same rows, from the shards in two orders
  ASSERT_TRUE(AddTableRows(*layout, {part({4, 998}, {4, 4, 9, 9})}, &one).ok());
  ASSERT_TRUE(AddTableRows(*layout, {part({7}, {7, 7})}, &one).ok());
  ASSERT_TRUE(AddTableRows(*layout, {part({7}, {7, 7})}, &other).ok());
  ASSERT_TRUE(AddTableRows(*layout, {part({4, 998}, {4, 4, 9, 9})}, &other).ok());
  ASSERT_TRUE(SortTableRows(*layout, &one).ok());
  ASSERT_TRUE(SortTableRows(*layout, &other).ok());
  EXPECT_EQ(one[0].ids, (std::vector<uint64_t>{4, 7, 998}));
  auto a = DigestModel(*layout, chunks, one, small);
  auto b = DigestModel(*layout, chunks, other, small);
  auto whole = DigestModel(*layout, chunks, one, TableExport{9});
  ASSERT_TRUE(a.ok() && b.ok() && whole.ok());
  EXPECT_EQ(a->params_sha256, b->params_sha256);
  EXPECT_NE(a->params_sha256, whole->params_sha256);  // the rows, not the dense tensor

  const std::string path = dir_ + "/model.safetensors";
  HeldModel held(*layout, chunks, one);
  const ExportFile file{path, Step(3), "job", "m", {}};
  auto written = ExportModel(*layout, &held, small, &file);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->params_sha256, a->params_sha256);
  std::map<std::string, std::string> meta;
  auto got = ReadSafetensors(path, &meta);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].spec.name, "head");
  const auto files = nlohmann::json::parse(meta["table_files"]);
  const auto& t = files["emb.weight"];
  EXPECT_EQ(t["rows"], 1000);
  EXPECT_EQ(t["stored"], 3);
  EXPECT_EQ(t["seed"], "9");
  std::ifstream ids(dir_ + "/" + t["ids"].get<std::string>(), std::ios::binary);
  std::string npy((std::istreambuf_iterator<char>(ids)), std::istreambuf_iterator<char>());
  ASSERT_GE(npy.size(), 10u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header = 10 + (static_cast<uint8_t>(npy[8]) | static_cast<uint8_t>(npy[9]) << 8);
  EXPECT_EQ(header % 64, 0u);
  EXPECT_NE(npy.find("'shape': (3,)"), std::string::npos);
  ASSERT_EQ(npy.size(), header + 24);
  uint64_t last;
  std::memcpy(&last, npy.data() + header + 16, 8);
  EXPECT_EQ(last, 998u);
  std::ifstream rows(dir_ + "/" + t["values"].get<std::string>(), std::ios::binary);
  std::string values((std::istreambuf_iterator<char>(rows)), std::istreambuf_iterator<char>());
  EXPECT_NE(values.find("'shape': (3,2)"), std::string::npos);
  float first;
  std::memcpy(&first, values.data() + header, 4);
  EXPECT_EQ(first, 4.0f);
  EXPECT_EQ(values.size(), header + 24);  // the header as wide as the ids file's
  EXPECT_EQ(meta["params_sha256"], a->params_sha256);
  // Rows from a source that gives them twice or out of order are refused while streaming.
  ModelTables twice, backwards;
  twice[0] = StoredRows{{4, 4}, {1, 1, 2, 2}};
  backwards[0] = StoredRows{{7, 4}, {1, 1, 2, 2}};
  for (const ModelTables* bad : {&twice, &backwards}) {
    HeldModel model(*layout, chunks, *bad);
    EXPECT_EQ(ExportModel(*layout, &model, small).status().code(), StatusCode::kDataLoss);
  }
}

// A table of unbounded keys (0 rows) always leaves as a table file, whatever its stored rows
// take, rows 0 in its metadata; its ids may be any below 2^63 - 1.
TEST_F(SafetensorsReader, ATableOfUnboundedKeysGoesToATableFile) {
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {0, 2}};
  emb.sparse = true;
  const TensorSpec head{"head", TensorKind::kParameter, DType::kFloat32, {3}};
  auto layout = MakeLayout({emb, head}, 1, 1 << 20);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const std::vector<float> head_values{1, 2, 3};
  ModelChunks chunks{{0, ChunkBytes{ChunkId(0), head_values.data(), 12, nullptr}}};
  const uint64_t big = (uint64_t{1} << 62) + 5;
  ModelTables tables;
  tables[0] = StoredRows{{3, big}, {1, 1, 2, 2}};
  const std::string path = dir_ + "/model.safetensors";
  HeldModel held(*layout, chunks, tables);
  const ExportFile file{path, Step(3), "job", "m", {}};
  auto written = ExportModel(*layout, &held, TableExport{9}, &file);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  std::map<std::string, std::string> meta;
  auto got = ReadSafetensors(path, &meta);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 1u);  // the head only
  const auto files = nlohmann::json::parse(meta["table_files"]);
  const auto& t = files["emb.weight"];
  EXPECT_EQ(t["rows"], 0);
  EXPECT_EQ(t["stored"], 2);
  // The largest int64 is no row of it.
  tables[0] = StoredRows{{uint64_t(std::numeric_limits<int64_t>::max())}, {1, 1}};
  HeldModel beyond(*layout, chunks, tables);
  EXPECT_EQ(ExportModel(*layout, &beyond, TableExport{9}).status().code(), StatusCode::kDataLoss);
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
