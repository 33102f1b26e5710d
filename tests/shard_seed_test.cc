// Sparse tables seeded by --init_from (docs/models.md, "Transfer learning";
// server/sparse_table.h Seed, server/shard_state.h): the initial values carry
// the rows of a table that are not their initializer's, which the shard stores
// at version 0. They are read and stepped as the table's, named by a pull since
// -1 (and not by one since 0, which a worker holding the file's rows makes),
// kept by the checkpoint of step 0 and by rollbacks, and dropped when the job
// starts over.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/shard_state.h"
#include "server/table_checkpoint.h"
#include "tests/sparse_steps.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using Values = std::vector<float>;
using Ids = std::vector<uint64_t>;

constexpr float kLr = 0.5f;
constexpr size_t kDim = 2;
constexpr uint64_t kSeed = 7;

// ---- the table ----

SparseTableOptions SgdTable(const std::string& path = "") {
  SparseTableOptions o;
  o.table_id = 0;
  o.dim = kDim;
  o.num_vws = 1;
  o.seed = kSeed;
  o.path = path;
  return o;
}

std::unique_ptr<SparseTable> Open(const SparseTableOptions& o) {
  auto t = SparseTable::Open(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

Values Read(SparseTable& t, const Ids& ids) {
  Values out(ids.size() * kDim);
  Status st = t.Read(ids.data(), ids.size(), out.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

Values Initial(uint64_t row) {
  Values v(kDim);
  InitialRow(RowInitializer{}, kSeed, 0, row, v.data(), kDim);
  return v;
}

TEST(SeededTable, SeededRowsAreStoredAtVersionZeroAndStepFromTheirWeights) {
  auto t = Open(SgdTable());
  const Ids ids{3, 8};
  const Values w{1, 2, 3, 4};
  ASSERT_TRUE(t->Seed(ids.data(), 2, w.data(), 4).ok());
  EXPECT_TRUE(SameBits(Read(*t, ids), w));
  EXPECT_TRUE(SameBits(Read(*t, {5}), Initial(5)));  // not seeded: the initializer's
  // Version 0's rows: not changed since 0, but stored (since -1).
  EXPECT_TRUE(t->ChangedSince(Step(0))->empty());
  EXPECT_EQ(*t->ChangedSince(Step(-1)), ids);
  // A step starts from the seeded weights: plain SGD, p - lr * g.
  const Ids touched{8};
  const Values g{2, 2};
  ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, touched.data(), 1, g.data(), 2).ok());
  // Seeding is for version 0 before any push.
  EXPECT_EQ(t->Seed(ids.data(), 2, w.data(), 4).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t->ApplyStep(kLr).ok());
  EXPECT_TRUE(SameBits(Read(*t, {3, 8}), (Values{1, 2, 3 - kLr * 2, 4 - kLr * 2})));
  EXPECT_EQ(*t->ChangedSince(Step(0)), touched);
  EXPECT_EQ(*t->ChangedSince(Step(-1)), ids);
  EXPECT_EQ(t->Seed(ids.data(), 2, w.data(), 4).code(), StatusCode::kFailedPrecondition);
}

TEST(SeededTable, BadSeedsAreRefused) {
  auto t = Open(SgdTable());
  const Ids unsorted{8, 3};
  const Values w{1, 2, 3, 4};
  EXPECT_EQ(t->Seed(unsorted.data(), 2, w.data(), 4).code(), StatusCode::kInvalidArgument);
  const Ids ids{3, 8};
  EXPECT_EQ(t->Seed(ids.data(), 2, w.data(), 3).code(), StatusCode::kInvalidArgument);
  // A memory-only table whose budget holds one row.
  SparseTableOptions small = SgdTable();
  small.memory_bytes = 1;
  auto t2 = SparseTable::Open(small);
  ASSERT_FALSE(t2.ok());  // smaller than one row: refused at Open
  small.memory_bytes = (*Open(SgdTable())).RowBytes();
  auto one = Open(small);
  const Status st = one->Seed(ids.data(), 2, w.data(), 4);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("--shard_memory_mb"), std::string::npos) << st.ToString();
}

TEST(SeededTable, TheCheckpointOfStepZeroHoldsTheSeededRowsSpilledOrNot) {
  TempDir dir;
  SparseTableOptions o = SgdTable(dir.path() + "/t");
  o.memory_bytes = 2 * Open(SgdTable())->RowBytes();  // 2 rows in memory, the others spilled
  Ids ids;
  Values w;
  for (uint64_t r = 0; r < 10; ++r) {
    ids.push_back(r * 3);
    w.push_back(static_cast<float>(r));
    w.push_back(-static_cast<float>(r));
  }
  {
    auto t = Open(o);
    ASSERT_TRUE(t->Seed(ids.data(), ids.size(), w.data(), w.size()).ok());
    EXPECT_GT(t->stats().spilled_rows, 0u);
    ASSERT_TRUE(t->Checkpoint().ok());  // of step 0
    EXPECT_EQ(t->Checkpoints(), (std::vector<Step>{Step(0)}));
    const Ids touched{3};
    const Values g{1, 1};
    ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, touched.data(), 1, g.data(), 2).ok());
    ASSERT_TRUE(t->ApplyStep(kLr).ok());
    ASSERT_TRUE(t->Checkpoint().ok());
  }
  // Reopened (at step 1), then rolled back to 0: the seeded rows each time.
  auto t = Open(o);
  EXPECT_EQ(t->version(), Step(1));
  EXPECT_TRUE(SameBits(Read(*t, {0, 27}), (Values{0, -0.0f, 9, -9})));
  ASSERT_TRUE(t->RollbackTo(Step(0)).ok());
  EXPECT_TRUE(SameBits(Read(*t, ids), w));
  Values scanned;
  auto checkpoint = TableCheckpoint::Open(o, Step(0));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  ASSERT_TRUE((*checkpoint)
                  ->Scan(0, UINT64_MAX,
                         [&](uint64_t, const float* row) {
                           scanned.insert(scanned.end(), row, row + kDim);
                         })
                  .ok());
  EXPECT_TRUE(SameBits(scanned, w));
  // -1: before the job's initial values, nothing stored at all.
  ASSERT_TRUE(t->RollbackTo(Step(-1)).ok());
  EXPECT_TRUE(t->Checkpoints().empty());
  EXPECT_TRUE(SameBits(Read(*t, {27}), Initial(27)));
}

// ---- the shard ----

// "emb.weight" [16, 2] is a sparse table, "head.weight" [4] a dense chunk (chunk 0), then the loss
// (chunk 1); two shards: shard 0 holds the even rows and the head (the loss is shard 1's).
ShardConfig Config() {
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {16, kDim}};
  emb.sparse = true;
  JobSpec s;
  s.job_id = "seed-test";
  s.model = "mlp";
  s.virtual_workers = 1;
  s.batch_per_vw = 1;
  s.steps = 10;
  s.seed = kSeed;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = kLr;
  s.chunk_elems = 4;
  s.num_shards = 2;
  return ShardConfig{
      s, {emb, {"head.weight", TensorKind::kParameter, DType::kFloat32, {4}}, LossTensor()}};
}

SparseRowBytes Rows(const Ids& ids, const Values& values) {
  auto i = std::make_shared<Ids>(ids);
  auto v = std::make_shared<Values>(values);
  SparseRowBytes r;
  r.rows = static_cast<uint32_t>(ids.size());
  r.ids = {ChunkId(0), i->data(), i->size() * sizeof(uint64_t), i};
  r.values = {ChunkId(0), v->data(), v->size() * sizeof(float), v};
  return r;
}

const Values kHead{0.5f, -1, 2, -4};

Push MakePush(int64_t step, std::vector<ChunkBytes> chunks, std::vector<SparseRowBytes> rows) {
  Push p;
  p.step = Step(step);
  p.block = Block{0, 1};
  p.chunks = std::move(chunks);
  p.sparse = std::move(rows);
  return p;
}

// The push owns its values (the shard reads them after this returns).
Push ChunkPush(int64_t step) {
  auto head = std::make_shared<Values>(step < 0 ? kHead : Values{1, 1, 1, 1});
  return MakePush(step, {{ChunkId(0), head->data(), head->size() * sizeof(float), head}}, {});
}

StatusOr<std::pair<Ids, Values>> PullRows(ShardState& state, int64_t version, int64_t since) {
  Pull p;
  p.version = Step(version);
  p.sparse = {SparseRead{0, Step(since)}};
  EPS_ASSIGN_OR_RETURN(PullReply reply, state.Answer(p));
  const SparseRowBytes& r = reply.sparse.at(0);
  std::pair<Ids, Values> out{Ids(r.rows), Values(r.values.size / sizeof(float))};
  if (r.rows > 0) {
    std::memcpy(out.first.data(), r.ids.data, r.ids.size);
    std::memcpy(out.second.data(), r.values.data, r.values.size);
  }
  return out;
}

TEST(ShardSeed, TheInitialValuesSeedRowsAndOnlyAPushWithoutRowsCompletesThem) {
  ShardState state(ShardId(0));
  ASSERT_TRUE(state.Configure(Config()).ok());
  // A row of shard 1 is refused whole, as in a step's push.
  auto bad = state.HandlePush(MakePush(-1, {}, {Rows({2, 3}, {1, 1, 2, 2})}));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  const Values seeded{10, 11, 12, 13};
  auto page = state.HandlePush(MakePush(-1, {}, {Rows({2, 6}, seeded)}));
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_FALSE(page->completed.has_value());
  EXPECT_EQ(page->reply.accepted, 1u);
  // Rows and the chunks in one push: not the last push either.
  auto mixed = state.HandlePush(MakePush(-1, ChunkPush(-1).chunks, {Rows({}, {})}));
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_FALSE(mixed->completed.has_value());
  auto last = state.HandlePush(ChunkPush(-1));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->completed.has_value());
  EXPECT_EQ(state.version(), Step(0));
  // A late page of another worker's initial values: a duplicate, nothing changes.
  auto late = state.HandlePush(MakePush(-1, {}, {Rows({2}, {0, 0})}));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->reply.duplicates, 1u);

  // A worker holding version 0 (the file's rows) pulls nothing; one from scratch every seeded row.
  EXPECT_TRUE(PullRows(state, 0, 0)->first.empty());
  auto all = PullRows(state, 0, -1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->first, (Ids{2, 6}));
  EXPECT_TRUE(SameBits(all->second, seeded));
  EXPECT_EQ(PullRows(state, 0, -2).status().code(), StatusCode::kInvalidArgument);

  // Row 6 trains from its seeded weights.
  Push step = ChunkPush(0);
  step.sparse = {Rows({6}, {2, 2})};
  auto stepped = state.HandlePush(step);
  ASSERT_TRUE(stepped.ok() && stepped->completed.has_value());
  auto changed = PullRows(state, 1, 0);
  EXPECT_EQ(changed->first, (Ids{6}));
  EXPECT_TRUE(SameBits(changed->second, (Values{12 - kLr * 2, 13 - kLr * 2})));
  EXPECT_EQ(PullRows(state, 1, -1)->first, (Ids{2, 6}));
  // The optimizer digest covers the stored rows: the seeded ones too.
  auto digest = state.OptimizerDigest();
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->items(), 3u);  // head.weight's chunk, rows 2 and 6
}

TEST(ShardSeed, SeededRowsSurviveARollbackAndGoWhenTheJobStartsOver) {
  TempDir dir;
  StoreOptions so;
  so.path = dir.path() + "/store";
  so.job_id = "seed-test";
  so.owner = "shard/0";
  so.create_if_missing = true;
  auto store = StateStore::Open(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ShardState state(ShardId(0), nullptr, ShardTablesOptions{dir.path() + "/tables", 3});
  ASSERT_TRUE(state.Configure(Config()).ok());
  const Values seeded{10, 11, 12, 13};
  ASSERT_TRUE(state.HandlePush(MakePush(-1, {}, {Rows({2, 6}, seeded)})).ok());
  ASSERT_TRUE(state.HandlePush(ChunkPush(-1)).ok());
  // The checkpoint of step 0 (the shard takes one when the initial values complete).
  auto checkpoint = [&] {
    ASSERT_TRUE(state.CheckpointTables().ok());
    auto snapshot = state.Snapshot();
    ASSERT_TRUE(snapshot.ok());
    ASSERT_TRUE(
        (*store)->WriteCheckpoint(snapshot->version, snapshot->blobs, snapshot->metadata).ok());
  };
  checkpoint();
  Push step = ChunkPush(0);
  step.sparse = {Rows({6}, {2, 2})};
  ASSERT_TRUE(state.HandlePush(step).ok());
  ASSERT_EQ(state.version(), Step(1));
  Status st = state.RollbackTo(**store, Step(0));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto back = PullRows(state, 0, -1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->first, (Ids{2, 6}));
  EXPECT_TRUE(SameBits(back->second, seeded));
  // The job starts over: no row stored until the initial values seed them again.
  ASSERT_TRUE(state.Clear().ok());
  ASSERT_TRUE(state.HandlePush(ChunkPush(-1)).ok());
  EXPECT_TRUE(PullRows(state, 0, -1)->first.empty());
}

}  // namespace
}  // namespace eps
