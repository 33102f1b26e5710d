#include "storage/sparse_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace eps {
namespace {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("sparse_store_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::unique_ptr<SparseRowStore> Open(const std::string& path, int keep = 2,
                                     const std::string& identity = "dim=1") {
  SparseStoreOptions o;
  o.path = path;
  o.table_id = 4;
  o.identity = identity;
  o.keep_checkpoints = keep;
  auto s = SparseRowStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s.value());
}

using Records = std::vector<std::pair<uint64_t, std::string>>;

// The newest checkpointed record of each id ("" for none).
std::vector<std::string> Newest(SparseRowStore* s, const std::vector<uint64_t>& ids) {
  std::vector<std::optional<std::string>> out;
  EXPECT_TRUE(s->ReadCheckpointed(ids, &out).ok());
  std::vector<std::string> r;
  for (const auto& v : out) r.push_back(v.value_or(""));
  return r;
}

TEST(SparseRowStore, SpilledRecordsAreDroppedWhenTheStoreOpens) {
  TempDir dir;
  {
    auto s = Open(dir.path());
    ASSERT_TRUE(s->WriteSpill({{1, "a"}, {2, "b"}}, {}).ok());
    std::vector<std::optional<std::string>> out;
    ASSERT_TRUE(s->ReadSpilled({1, 2, 3}, &out).ok());
    EXPECT_EQ(out[0], std::optional<std::string>("a"));
    EXPECT_EQ(out[2], std::nullopt);
    ASSERT_TRUE(s->WriteSpill({}, {1}).ok());
    ASSERT_TRUE(s->ReadSpilled({1}, &out).ok());
    EXPECT_EQ(out[0], std::nullopt);
  }
  auto s = Open(dir.path());
  EXPECT_EQ(s->CountRecords()->spilled, 0u);
}

// Table files in the store's directory: what a process opening it reads without replaying the log.
int TableFiles(const std::string& path) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(path))
    n += e.path().extension() == ".sst";
  return n;
}

// A checkpoint larger than the memtable (16 MiB) is in a table file once the write returns: a
// restarted shard or export_model's read-only open reads it without replaying it from the log
// into memory. A small one stays in the memtable.
TEST(SparseRowStore, ACheckpointLargerThanTheMemtableIsInATableFileWhenWritten) {
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_TRUE(s->WriteCheckpoint(Step(1), {{1, "small"}}, {}).ok());
  EXPECT_EQ(TableFiles(dir.path()), 0);
  Records big;
  for (uint64_t id = 0; id < 20; ++id) big.push_back({id, std::string(1 << 20, 'x')});
  ASSERT_TRUE(s->WriteCheckpoint(Step(2), big, {}).ok());
  EXPECT_GE(TableFiles(dir.path()), 1);
  EXPECT_EQ(Newest(s.get(), {1, 19}),
            (std::vector<std::string>{std::string(1 << 20, 'x'), std::string(1 << 20, 'x')}));
}

TEST(SparseRowStore, ACheckpointMovesTheSpilledRowsItWritesInOneBatch) {
  TempDir dir;
  auto s = Open(dir.path());
  ASSERT_TRUE(s->WriteSpill({{7, "spilled"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(3), {{5, "cached"}, {7, "spilled"}}, {7}).ok());
  EXPECT_EQ(s->CountRecords()->spilled, 0u);
  EXPECT_EQ(Newest(s.get(), {5, 6, 7}), std::vector<std::string>({"cached", "", "spilled"}));
  EXPECT_EQ(s->WriteCheckpoint(Step(2), {}, {}).code(), StatusCode::kFailedPrecondition);
}

// The rows a checkpoint of `step` holds from `from_row` on, ascending.
std::vector<uint64_t> RowsAt(SparseRowStore* s, Step step, uint64_t from_row = 0) {
  std::vector<uint64_t> rows;
  EXPECT_TRUE(s->ScanCheckpoint(
                   step,
                   [&](uint64_t row, std::string_view) {
                     rows.push_back(row);
                     return OkStatus();
                   },
                   from_row)
                  .ok());
  return rows;
}

// A scan from a row seeks to it (the pages of an export's final pull), with each row's
// newest record at the step and a row's older records behind the seek.
TEST(SparseRowStore, AScanFromARowStartsThere) {
  TempDir dir;
  auto s = Open(dir.path(), /*keep=*/3);
  ASSERT_TRUE(s->WriteCheckpoint(Step(1), {{1, "1@1"}, {4, "4@1"}, {9, "9@1"}}, {}).ok());
  ASSERT_TRUE(
      s->WriteCheckpoint(Step(2), {{4, "4@2"}, {7, "7@2"}, {uint64_t{1} << 40, "big"}}, {}).ok());
  EXPECT_EQ(RowsAt(s.get(), Step(2), 4), (std::vector<uint64_t>{4, 7, 9, uint64_t{1} << 40}));
  EXPECT_EQ(RowsAt(s.get(), Step(2), 5), (std::vector<uint64_t>{7, 9, uint64_t{1} << 40}));
  EXPECT_EQ(RowsAt(s.get(), Step(1), 2), (std::vector<uint64_t>{4, 9}));
  EXPECT_TRUE(RowsAt(s.get(), Step(2), (uint64_t{1} << 40) + 1).empty());
  std::vector<std::string> records;
  ASSERT_TRUE(s->ScanCheckpointed(
                   [&](uint64_t, std::string_view r) {
                     records.emplace_back(r);
                     return OkStatus();
                   },
                   4)
                  .ok());
  EXPECT_EQ(records, (std::vector<std::string>{"4@2", "7@2", "9@1", "big"}));
}

// A move of shard state at step 3 (docs/design.md, "Elastic shards"): checkpoint 3
// amended with a row that came and a tombstone for one that left.
TEST(SparseRowStore, AnAmendedCheckpointHoldsTheRowsThatCameAndNotThoseThatLeft) {
  TempDir dir;
  auto s = Open(dir.path(), /*keep=*/3);
  ASSERT_TRUE(s->WriteCheckpoint(Step(1), {{1, "1@1"}, {2, "2@1"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(3), {{1, "1@3"}}, {}).ok());
  ASSERT_TRUE(s->WriteSpill({{5, "5 spilled"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(3), {{2, ""}, {5, "5@3"}, {9, "9@3"}}, {5}).ok());
  EXPECT_EQ(s->Checkpoints(), (std::vector<Step>{Step(1), Step(3)}));
  EXPECT_EQ(s->CountRecords()->spilled, 0u);
  EXPECT_EQ(Newest(s.get(), {1, 2, 5, 9}), (std::vector<std::string>{"1@3", "", "5@3", "9@3"}));
  EXPECT_EQ(RowsAt(s.get(), Step(3)), (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(RowsAt(s.get(), Step(1)), (std::vector<uint64_t>{1, 2}));  // before the move
  s.reset();
  s = Open(dir.path(), 3);
  EXPECT_EQ(RowsAt(s.get(), Step(3)), (std::vector<uint64_t>{1, 5, 9}));
  ASSERT_TRUE(s->WriteCheckpoint(Step(4), {{1, "1@4"}}, {}).ok());
  EXPECT_EQ(RowsAt(s.get(), Step(4)), (std::vector<uint64_t>{1, 5, 9}));
  // Retention keeps a tombstone as the newest record of its row, and drops what is older.
  ASSERT_TRUE(s->WriteCheckpoint(Step(5), {}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(6), {}, {}).ok());
  EXPECT_EQ(s->Checkpoints(), (std::vector<Step>{Step(4), Step(5), Step(6)}));
  EXPECT_EQ(RowsAt(s.get(), Step(4)), (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(Newest(s.get(), {2}), std::vector<std::string>{""});
}

TEST(SparseRowStore, RetentionKeepsOnlyTheRecordsHeldCheckpointsRead) {
  TempDir dir;
  auto s = Open(dir.path(), /*keep=*/2);
  ASSERT_TRUE(s->WriteCheckpoint(Step(1), {{1, "1@1"}, {2, "2@1"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(2), {{1, "1@2"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(3), {{1, "1@3"}, {3, "3@3"}}, {}).ok());
  EXPECT_EQ(s->Checkpoints(), std::vector<Step>({Step(2), Step(3)}));
  // 1@1 is read by no held checkpoint (1@2 is row 1's at 2); 2@1 is row 2's at 2 and 3.
  EXPECT_EQ(s->CountRecords()->checkpointed, 4u);
  EXPECT_EQ(Newest(s.get(), {1, 2, 3}), std::vector<std::string>({"1@3", "2@1", "3@3"}));
  ASSERT_TRUE(s->RollbackTo(Step(2)).ok());
  EXPECT_EQ(s->Checkpoints(), std::vector<Step>({Step(2)}));
  EXPECT_EQ(s->CountRecords()->checkpointed, 2u);
  EXPECT_EQ(Newest(s.get(), {1, 2, 3}), std::vector<std::string>({"1@2", "2@1", ""}));
  EXPECT_EQ(s->RollbackTo(Step(1)).code(), StatusCode::kNotFound);
  // Reopened, the store holds the same.
  s.reset();
  s = Open(dir.path(), 2);
  EXPECT_EQ(s->Checkpoints(), std::vector<Step>({Step(2)}));
  EXPECT_EQ(Newest(s.get(), {1, 2}), std::vector<std::string>({"1@2", "2@1"}));
  ASSERT_TRUE(s->RollbackTo(Step(0)).ok());
  EXPECT_TRUE(s->Checkpoints().empty());
  EXPECT_EQ(s->CountRecords()->checkpointed, 0u);
}

TEST(SparseRowStore, RetainFromKeepsOlderCheckpointsReadable) {
  TempDir dir;
  auto s = Open(dir.path(), /*keep=*/1);
  s->RetainFrom(Step(1));
  ASSERT_TRUE(s->WriteCheckpoint(Step(1), {{1, "1@1"}, {2, "2@1"}}, {}).ok());
  ASSERT_TRUE(s->WriteCheckpoint(Step(2), {{1, "1@2"}}, {}).ok());
  EXPECT_EQ(s->Checkpoints(), std::vector<Step>({Step(1), Step(2)}));
  ASSERT_TRUE(s->RollbackTo(Step(1)).ok());
  EXPECT_EQ(Newest(s.get(), {1, 2}), std::vector<std::string>({"1@1", "2@1"}));
  // Keep 1, retaining nothing older: writing 2 again drops 1 and row 1's record there.
  s->RetainFrom(Step(5));
  ASSERT_TRUE(s->WriteCheckpoint(Step(2), {{1, "1@2"}}, {}).ok());
  EXPECT_EQ(s->Checkpoints(), std::vector<Step>({Step(2)}));
  EXPECT_EQ(s->CountRecords()->checkpointed, 2u);
  EXPECT_EQ(Newest(s.get(), {1, 2}), std::vector<std::string>({"1@2", "2@1"}));
}

// Every (row, record) checkpoint `step` of `s` holds, in row order.
Records At(const SparseRowStore& s, Step step, StatusCode want = StatusCode::kOk) {
  Records out;
  Status st = s.ScanCheckpoint(step, [&](uint64_t row, std::string_view record) {
    out.emplace_back(row, std::string(record));
    return OkStatus();
  });
  EXPECT_EQ(st.code(), want) << st.ToString();
  return out;
}

TEST(SparseRowStore, ReadOnlyBesideTheWriterScansAnyHeldCheckpointAndChangesNothing) {
  TempDir dir;
  auto writer = Open(dir.path(), /*keep=*/3);
  ASSERT_TRUE(writer->WriteCheckpoint(Step(1), {{1, "1@1"}, {2, "2@1"}}, {}).ok());
  ASSERT_TRUE(writer->WriteCheckpoint(Step(2), {{1, "1@2"}, {5, "5@2"}}, {}).ok());
  ASSERT_TRUE(writer->WriteSpill({{9, "spilled"}}, {}).ok());
  SparseStoreOptions o;
  o.path = dir.path();
  o.table_id = 4;
  o.identity = "dim=1";
  o.read_only = true;
  auto reader = SparseRowStore::Open(o);  // the writer still holds the database
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->Checkpoints(), std::vector<Step>({Step(1), Step(2)}));
  EXPECT_EQ(At(**reader, Step(1)), Records({{1, "1@1"}, {2, "2@1"}}));
  EXPECT_EQ(At(**reader, Step(2)), Records({{1, "1@2"}, {2, "2@1"}, {5, "5@2"}}));
  EXPECT_EQ(At(**reader, Step(0)), Records());  // the empty table
  At(**reader, Step(3), StatusCode::kNotFound);
  // Nothing was dropped: the writer's spilled record is still there.
  std::vector<std::optional<std::string>> spilled;
  ASSERT_TRUE(writer->ReadSpilled({9}, &spilled).ok());
  EXPECT_EQ(spilled[0], std::optional<std::string>("spilled"));
  // Another identity, or no store at all, is refused.
  o.identity = "dim=2";
  EXPECT_EQ(SparseRowStore::Open(o).status().code(), StatusCode::kFailedPrecondition);
  o.path = dir.path() + "/none";
  EXPECT_EQ(SparseRowStore::Open(o).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(o.path));
}

TEST(SparseRowStore, AStoreOfAnotherTableIsFailedPrecondition) {
  TempDir dir;
  { auto s = Open(dir.path()); }
  SparseStoreOptions o;
  o.path = dir.path();
  o.table_id = 4;
  o.identity = "dim=2";
  EXPECT_EQ(SparseRowStore::Open(o).status().code(), StatusCode::kFailedPrecondition);
  o.identity = "dim=1";
  o.table_id = 5;
  EXPECT_EQ(SparseRowStore::Open(o).status().code(), StatusCode::kFailedPrecondition);
  o.table_id = 4;
  o.keep_checkpoints = 0;
  EXPECT_EQ(SparseRowStore::Open(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
