// An export's table files read back by id (models/exported_table.h): the rows
// ExportModel stored come from the files, every other row is its initial one,
// and metadata or files that disagree are refused with a status naming them.
#include "models/exported_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/row_init.h"
#include "models/model_export.h"

namespace eps {
namespace {

class ExportedTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eps-exported-table-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Exports a model of table `emb.weight` (`rows` x 2; 0: unbounded keys) whose stored rows are
  // `stored`, and a dense head, with every table left to a table file; its metadata's table_files.
  std::string Export(int64_t rows, const StoredRows& stored) {
    TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {rows, 2}};
    emb.sparse = true;
    const TensorSpec head{"head", TensorKind::kParameter, DType::kFloat32, {3}};
    auto layout = MakeLayout({emb, head}, 1, 1 << 20);
    EXPECT_TRUE(layout.ok()) << layout.status().ToString();
    const std::vector<float> head_values{1, 2, 3};
    ModelChunks chunks{{0, ChunkBytes{ChunkId(0), head_values.data(), 12, nullptr}}};
    ModelTables tables;
    tables[0] = stored;
    HeldModel held(*layout, chunks, tables);
    const ExportFile file{path(), Step(3), "job", "m", {}};
    auto written = ExportModel(*layout, &held, TableExport{kSeed, 0}, &file);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
    std::map<std::string, std::string> meta;
    EXPECT_TRUE(ReadSafetensors(path(), &meta).ok());
    return meta["table_files"];
  }
  std::string path() const { return dir_ + "/model.safetensors"; }

  static constexpr uint64_t kSeed = 9;
  std::string dir_;
};

std::vector<float> Initial(uint64_t row) {
  std::vector<float> out(2);
  InitialRow(RowInitializer{}, 9, 0, row, out.data(), 2);
  return out;
}

TEST_F(ExportedTableTest, ReadsStoredRowsFromTheFileAndTheOthersAsTheirInitialRows) {
  const std::string files = Export(1000, StoredRows{{4, 7, 998}, {4, 4, 7, 7, 9, 9}});
  auto tables = ExportedTable::OpenAll(path(), files);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  ASSERT_EQ(tables->size(), 1u);
  const ExportedTable& t = tables->at("emb.weight");
  EXPECT_EQ(t.rows(), 1000);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.stored(), 3u);
  // In any order, stored or not, repeated.
  const std::vector<uint64_t> ids = {998, 5, 4, 0, 998};
  std::vector<float> got(ids.size() * 2);
  ASSERT_TRUE(t.Read(ids.data(), ids.size(), got.data()).ok());
  const std::vector<float> i5 = Initial(5), i0 = Initial(0);
  EXPECT_EQ(got, (std::vector<float>{9, 9, i5[0], i5[1], 4, 4, i0[0], i0[1], 9, 9}));
  EXPECT_NE(i5, i0);
  const uint64_t beyond = 1000;
  Status st = t.Read(&beyond, 1, got.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

TEST_F(ExportedTableTest, ATableOfUnboundedKeysReadsAnyIdButTheLargest) {
  const uint64_t big = (uint64_t{1} << 62) + 5;
  const std::string files = Export(0, StoredRows{{3, big}, {1, 1, 2, 2}});
  auto tables = ExportedTable::OpenAll(path(), files);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  const ExportedTable& t = tables->at("emb.weight");
  EXPECT_EQ(t.rows(), 0);
  const std::vector<uint64_t> ids = {big, big + 1};
  std::vector<float> got(4);
  ASSERT_TRUE(t.Read(ids.data(), 2, got.data()).ok());
  const std::vector<float> next = Initial(big + 1);
  EXPECT_EQ(got, (std::vector<float>{2, 2, next[0], next[1]}));
  const uint64_t largest = uint64_t{INT64_MAX};
  EXPECT_EQ(t.Read(&largest, 1, got.data()).code(), StatusCode::kInvalidArgument);
}

TEST_F(ExportedTableTest, RefusesMetadataAndFilesThatDisagree) {
  const std::string files = Export(1000, StoredRows{{4, 7}, {4, 4, 7, 7}});
  const nlohmann::json good = nlohmann::json::parse(files);
  auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = good;
    j["emb.weight"][key] = value;
    return ExportedTable::OpenAll(path(), j.dump()).status();
  };
  EXPECT_EQ(with("stored", 3).code(), StatusCode::kInvalidArgument);  // the files hold 2
  EXPECT_EQ(with("dim", 3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("initializer", "uniform(-1, 1)").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("seed", "-1").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("ids", "../../etc/passwd").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("ids", "/etc/passwd").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(with("ids", good["emb.weight"]["values"]).code(),
            StatusCode::kInvalidArgument);  // float32, not ids
  EXPECT_EQ(with("values", "model.tables/none.npy").code(), StatusCode::kNotFound);
  EXPECT_EQ(ExportedTable::OpenAll(path(), "not json").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ExportedTable::OpenAll(path(), good.dump()).ok());
  // A file cut short after the export.
  const std::string rows = dir_ + "/" + good["emb.weight"]["values"].get<std::string>();
  std::filesystem::resize_file(rows, std::filesystem::file_size(rows) - 4);
  Status st = ExportedTable::OpenAll(path(), good.dump()).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find(rows), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace eps
