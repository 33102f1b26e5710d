// Sparse tables on a shard (server/shard_state.h, docs/design.md "Sparse
// tables"): a block's push names the touched rows of each table, the step
// waits for every table's blocks as for the dense chunks, only the touched rows
// are stepped, pulls get the rows changed since the version a worker holds (of
// the previous version too), bad pushes change nothing, and a rollback brings
// the tables back with the state.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "schema/shm_rows.h"
#include "server/shard_state.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using Values = std::vector<float>;
using Ids = std::vector<uint64_t>;

constexpr uint32_t kVws = 2;
constexpr float kLr = 0.5f;
constexpr int64_t kRows = 16, kDim = 2;
constexpr uint64_t kSeed = 7;

// "emb.weight" [16, 2] is a sparse table (table 0), "head.weight" [4] a dense chunk, then the loss.
std::vector<TensorSpec> Tensors() {
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {kRows, kDim}};
  emb.sparse = true;
  return {emb, {"head.weight", TensorKind::kParameter, DType::kFloat32, {4}}, LossTensor()};
}

ShardConfig Config(uint32_t shards = 1) {
  JobSpec s;
  s.job_id = "sparse-test";
  s.model = "mlp";
  s.virtual_workers = kVws;
  s.batch_per_vw = 1;
  s.steps = 10;
  s.seed = kSeed;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = kLr;
  s.chunk_elems = 4;
  s.num_shards = shards;
  return ShardConfig{s, Tensors()};
}

ChunkBytes Bytes(uint32_t chunk, const Values& v) {
  return ChunkBytes{ChunkId(chunk), v.data(), v.size() * sizeof(float), nullptr};
}

// The rows own their bytes (the arguments may be temporaries).
SparseRowBytes Rows(const Ids& ids, const Values& values, uint32_t table = 0) {
  auto i = std::make_shared<Ids>(ids);
  auto v = std::make_shared<Values>(values);
  SparseRowBytes r;
  r.table = table;
  r.rows = static_cast<uint32_t>(ids.size());
  r.ids = {ChunkId(0), i->data(), i->size() * sizeof(uint64_t), i};
  r.values = {ChunkId(0), v->data(), v->size() * sizeof(float), v};
  return r;
}

Push MakePush(int64_t step, Block block, std::vector<ChunkBytes> chunks,
              std::vector<SparseRowBytes> sparse) {
  Push p;
  p.epoch = Epoch(1);
  p.step = Step(step);
  p.block = block;
  p.chunks = std::move(chunks);
  p.sparse = std::move(sparse);
  return p;
}

const Values kHead{0.5f, -1, 2, -4};
const Values kHeadGrad{1, 1, 1, 1}, kLoss{3};

// Chunk 0 is head.weight, chunk 1 the loss (the table has no chunk).
Push InitPush() { return MakePush(-1, Block{0, 1}, {Bytes(0, kHead)}, {}); }

ShardState Initialized(ShardTablesOptions tables = {}, uint32_t shards = 1) {
  ShardState state(ShardId(0), nullptr, std::move(tables));
  Status st = state.Configure(Config(shards));
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto init = state.HandlePush(InitPush());
  EXPECT_TRUE(init.ok() && init->completed.has_value());
  return state;
}

Values Initial(uint64_t row) {
  Values v(kDim);
  InitialRow(RowInitializer{}, kSeed, 0, row, v.data(), kDim);
  return v;
}

struct Pulled {
  Ids ids;
  Values values;
};

// The rows of the one table a pull `read` of `version` asked for.
StatusOr<Pulled> Answered(ShardState& state, int64_t version, const SparseRead& read) {
  Pull p;
  p.version = Step(version);
  p.sparse = {read};
  EPS_ASSIGN_OR_RETURN(PullReply reply, state.Answer(p));
  if (reply.sparse.size() != 1) return Internal("one table asked, another number answered");
  const SparseRowBytes& r = reply.sparse[0];
  Pulled out;
  out.ids.resize(r.rows);
  out.values.resize(r.values.size / sizeof(float));
  if (r.rows == 0) return out;  // no bytes to copy (and no pointers to copy them from)
  std::memcpy(out.ids.data(), r.ids.data, r.ids.size);
  std::memcpy(out.values.data(), r.values.data, r.values.size);
  return out;
}

StatusOr<Pulled> PullRows(ShardState& state, int64_t version, int64_t since) {
  return Answered(state, version, SparseRead{0, Step(since)});
}

// A lookup of rows `ids` (a worker that does not hold the table) at `version`.
StatusOr<Pulled> LookUp(ShardState& state, int64_t version, const Ids& ids) {
  auto held = std::make_shared<Ids>(ids);
  SparseRead read{0, Step(0)};
  read.lookup = true;
  read.rows = static_cast<uint32_t>(ids.size());
  read.ids = {ChunkId(0), held->data(), held->size() * sizeof(uint64_t), held};
  return Answered(state, version, read);
}

bool SameBits(const Values& a, const Values& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Plain SGD on one row: p - lr * (g / V), as the table computes it.
Values Stepped(const Values& p, const Values& g) {
  Values out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = p[i] - kLr * (g[i] / static_cast<float>(kVws));
  return out;
}

// Step t, whole: one block of every VW, the head's and the loss's chunks and the table's rows.
void WholeStep(ShardState& state, int64_t t, const Ids& ids, const Values& g) {
  auto out = state.HandlePush(
      MakePush(t, Block{0, kVws}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)}, {Rows(ids, g)}));
  ASSERT_TRUE(out.ok() && out->completed.has_value()) << out.status().ToString();
}

TEST(ShardSparse, OnlyTheTouchedRowsAreSteppedAndPulled) {
  ShardState state = Initialized();
  // VW 0 touched rows 3 and 9, VW 1 row 9 (two leaf pushes).
  auto a = state.HandlePush(MakePush(0, Block{0, 1}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)},
                                     {Rows({3, 9}, {1, 2, 3, 4})}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->completed.has_value());
  auto b = state.HandlePush(
      MakePush(0, Block{1, 1}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)}, {Rows({9}, {10, 20})}));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(b->completed.has_value());
  EXPECT_EQ(state.version(), Step(1));

  auto rows = PullRows(state, 1, 0);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->ids, (Ids{3, 9}));
  Values want = Stepped(Initial(3), {1, 2});
  const Values nine = Stepped(Initial(9), {3 + 10, 4 + 20});
  want.insert(want.end(), nine.begin(), nine.end());
  EXPECT_TRUE(SameBits(rows->values, want));
  // A worker holding version 1 has nothing to pull.
  rows = PullRows(state, 1, 1);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->ids.empty());
}

TEST(ShardSparse, ThePullOfTheCurrentVersionCarriesTheOptimizerDigestOfChunksAndRows) {
  ShardState state = Initialized();
  auto before = state.OptimizerDigest();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->items(), 1u);  // head.weight's chunk; no row is stored yet
  for (uint32_t vw = 0; vw < kVws; ++vw) {
    ASSERT_TRUE(state
                    .HandlePush(MakePush(0, Block{vw, 1}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)},
                                         {Rows({3, 9}, {1, 2, 3, 4})}))
                    .ok());
  }
  auto after = state.OptimizerDigest();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->items(), 3u);  // the chunk and rows 3 and 9
  EXPECT_NE(after->HexDigest(), before->HexDigest());
  Pull p;
  p.version = Step(1);
  p.optimizer_digest = true;
  auto reply = state.Answer(p);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->optimizer_digest, after->Bytes());
  p.version = Step(0);  // the previous version's moments are not kept
  EXPECT_EQ(state.Answer(p).status().code(), StatusCode::kFailedPrecondition);
  p.optimizer_digest = false;
  EXPECT_TRUE(state.Answer(p).ok());
}

TEST(ShardSparse, TheStepWaitsForEveryBlockOfTheTablesAsForTheChunks) {
  ShardState state = Initialized();
  // The dense chunks of both VWs come, but VW 1's rows (none touched) do not yet.
  ASSERT_TRUE(state
                  .HandlePush(MakePush(0, Block{0, 1}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)},
                                       {Rows({3}, {1, 1})}))
                  .ok());
  auto dense =
      state.HandlePush(MakePush(0, Block{1, 1}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)}, {}));
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(dense->completed.has_value());
  // A pull of the next version's rows waits (Unavailable) meanwhile.
  EXPECT_EQ(PullRows(state, 1, 0).status().code(), StatusCode::kUnavailable);
  auto rows = state.HandlePush(MakePush(0, Block{1, 1}, {}, {Rows({}, {})}));
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_TRUE(rows->completed.has_value());
  EXPECT_EQ(rows->reply.accepted, 1u);
  // The same block's rows again: a duplicate, nothing changes.
  auto again = state.HandlePush(MakePush(0, Block{1, 1}, {}, {Rows({}, {})}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reply.duplicates, 1u);
}

TEST(ShardSparse, ThePreviousVersionGivesTheRowsAtTheirOldValues) {
  ShardState state = Initialized();
  WholeStep(state, 0, {3}, {2, 2});
  WholeStep(state, 1, {3, 5}, {4, 4, 6, 6});
  auto previous = PullRows(state, 1, 0);  // the shard is at 2
  ASSERT_TRUE(previous.ok()) << previous.status().ToString();
  // Row 3 as step 0 left it; row 5, untouched before step 1, at its initial value.
  EXPECT_EQ(previous->ids, (Ids{3, 5}));
  Values want = Stepped(Initial(3), {2, 2});
  const Values five = Initial(5);
  want.insert(want.end(), five.begin(), five.end());
  EXPECT_TRUE(SameBits(previous->values, want));
  EXPECT_EQ(PullRows(state, 0, 0).status().code(), StatusCode::kFailedPrecondition);
}

// The rows the last step changed come from the step itself (ShardState's step_rows_): the
// same rows and bits as a lookup of them in the table, page by page (from_row, max_rows), and
// an older `since` still gets the changes of every step after it.
TEST(ShardSparse, ThePullOfTheLastStepsRowsPagesAsTheTableWould) {
  ShardState state = Initialized();
  WholeStep(state, 0, {2, 7}, {1, 1, 2, 2});
  WholeStep(state, 1, {3, 5, 9}, {4, 4, 6, 6, 8, 8});
  SparseRead page{0, Step(1)};
  page.from_row = 4;
  page.max_rows = 1;
  auto got = Answered(state, 2, page);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ids, (Ids{5}));
  auto looked = LookUp(state, 2, {5});
  ASSERT_TRUE(looked.ok()) << looked.status().ToString();
  EXPECT_TRUE(SameBits(got->values, looked->values));
  page.from_row = 6;
  page.max_rows = 0;  // no bound
  got = Answered(state, 2, page);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->ids, (Ids{9}));
  auto all = PullRows(state, 2, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ids, (Ids{2, 3, 5, 7, 9}));
  looked = LookUp(state, 2, {2, 3, 5, 7, 9});
  ASSERT_TRUE(looked.ok());
  EXPECT_TRUE(SameBits(all->values, looked->values));
}

TEST(ShardSparse, ALookupGivesEveryRowAskedForAtTheVersionAskedFor) {
  ShardState state = Initialized({}, /*shards=*/2);  // shard 0: the even rows
  auto step = [&](int64_t t, const Ids& ids, const Values& g) {
    auto out = state.HandlePush(MakePush(t, Block{0, kVws}, {Bytes(0, kHeadGrad)}, {Rows(ids, g)}));
    ASSERT_TRUE(out.ok() && out->completed.has_value()) << out.status().ToString();
  };
  step(0, {4}, {2, 2});
  step(1, {4, 6}, {4, 4, 6, 6});
  // Stored rows (4, 6) and an untouched one (2, at its initial value): exactly the rows asked.
  auto now = LookUp(state, 2, {2, 4, 6});
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->ids, (Ids{2, 4, 6}));
  const Values four1 = Stepped(Initial(4), {2, 2});
  Values want = Initial(2);
  for (const Values& v : {Stepped(four1, {4, 4}), Stepped(Initial(6), {6, 6})})
    want.insert(want.end(), v.begin(), v.end());
  EXPECT_TRUE(SameBits(now->values, want));
  // The previous version: the rows the last step changed at their old values.
  auto before = LookUp(state, 1, {4, 6});
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  want = four1;
  const Values six = Initial(6);
  want.insert(want.end(), six.begin(), six.end());
  EXPECT_TRUE(SameBits(before->values, want));
  // Nothing asked, nothing answered; the next version waits.
  auto none = LookUp(state, 2, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->ids.empty());
  EXPECT_EQ(LookUp(state, 3, {2}).status().code(), StatusCode::kUnavailable);
  // Rows the shard does not hold, or not in order, or beyond the table: refused, and it serves on.
  const std::vector<std::pair<Ids, std::string>> bad{
      {{3}, "shard 1"}, {{6, 4}, "ascending"}, {{4, 4}, "ascending"}, {{18}, "beyond"}};
  for (const auto& [ids, reason] : bad) {
    auto out = LookUp(state, 2, ids);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << reason;
    EXPECT_NE(out.status().message().find(reason), std::string::npos) << out.status().ToString();
  }
  EXPECT_TRUE(LookUp(state, 2, {4}).ok());
}

TEST(ShardSparse, BadSparsePushesAreRefusedWholeAndChangeNothing) {
  // Shard 0 holds the even rows and the head (the loss is shard 1's).
  ShardState state = Initialized({}, /*shards=*/2);
  const std::vector<ChunkBytes> dense{Bytes(0, kHeadGrad)};
  const Values two{1, 1}, four{1, 1, 1, 1};
  const std::vector<std::pair<std::string, Push>> bad{
      {"a row of shard 1", MakePush(0, Block{0, 1}, dense, {Rows({3}, two)})},
      {"a row beyond the table", MakePush(0, Block{0, 1}, dense, {Rows({18}, two)})},
      {"rows out of order", MakePush(0, Block{0, 1}, dense, {Rows({4, 2}, four)})},
      {"a repeated row", MakePush(0, Block{0, 1}, dense, {Rows({2, 2}, four)})},
      {"a row short", MakePush(0, Block{0, 1}, dense, {Rows({2, 4}, two)})},
      {"no such table", MakePush(0, Block{0, 1}, dense, {Rows({2}, two, /*table=*/1)})},
      {"a table twice", MakePush(0, Block{0, 1}, dense, {Rows({2}, two), Rows({4}, two)})},
      // The initial values' rows (--init_from's, tests/shard_seed_test.cc) are checked alike.
      {"a seeded row of shard 1", MakePush(-1, Block{0, 1}, {}, {Rows({3}, two)})},
  };
  const std::vector<std::string> reasons{"shard 1",     "beyond",         "ascending", "ascending",
                                         "do not hold", "does not exist", "twice",     "shard 1"};
  for (size_t k = 0; k < bad.size(); ++k) {
    auto out = state.HandlePush(bad[k].second);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << bad[k].first;
    // Refused for the rows, not for something else in the push.
    EXPECT_NE(out.status().message().find(reasons[k]), std::string::npos)
        << bad[k].first << ": " << out.status().ToString();
  }
  // Nothing was counted: the whole step still goes through once.
  auto good = state.HandlePush(MakePush(0, Block{0, kVws}, dense, {Rows({2}, two)}));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->completed.has_value());
  EXPECT_EQ(good->reply.accepted, 2u);
}

// The shard's StateStore in `path` (null after a failure the test reports).
std::unique_ptr<StateStore> OpenStore(const std::string& path) {
  StoreOptions so;
  so.path = path;
  so.job_id = "sparse-test";
  so.owner = "shard/0";
  so.create_if_missing = true;
  auto store = StateStore::Open(so);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// A checkpoint of the shard's version: the tables first, then the state.
void Checkpoint(ShardState& state, StateStore& store) {
  ASSERT_TRUE(state.CheckpointTables().ok());
  auto snapshot = state.Snapshot();
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(store.WriteCheckpoint(snapshot->version, snapshot->blobs, snapshot->metadata).ok());
}

TEST(ShardSparse, ARollbackBringsTheTablesBackWithTheState) {
  TempDir dir;
  std::unique_ptr<StateStore> store = OpenStore(dir.path() + "/store");
  ASSERT_NE(store, nullptr);
  ShardState state = Initialized(ShardTablesOptions{dir.path() + "/tables", 3});
  auto step = [&](int64_t t, const Ids& ids, const Values& g) { WholeStep(state, t, ids, g); };
  step(0, {3}, {2, 2});
  Checkpoint(state, *store);  // of step 1
  auto at1 = PullRows(state, 1, 0);
  ASSERT_TRUE(at1.ok());
  step(1, {3, 7}, {4, 4, 6, 6});
  ASSERT_EQ(state.version(), Step(2));

  Status st = state.RollbackTo(*store, Step(1));
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(state.version(), Step(1));
  auto back = PullRows(state, 1, 0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ids, at1->ids);
  EXPECT_TRUE(SameBits(back->values, at1->values));
  // And the step after it again gives the same bits as the first time.
  step(1, {3, 7}, {4, 4, 6, 6});
  auto again = PullRows(state, 2, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ids, (Ids{3, 7}));
}

// A pull waiting for the step in progress names the rows its worker's next VWs touch (those it
// looks up, or the warm rows of a table it holds): the shard brings those its store holds into
// memory at once, while the workers compute, rather than when the step or the pull needs them.
// The bits are the same.
TEST(ShardSparse, APullThatWaitsBringsTheRowsItNamesIntoMemory) {
  for (bool lookup : {true, false}) {
    SCOPED_TRACE(lookup ? "a lookup" : "a held table's warm rows");
    TempDir dir;
    std::unique_ptr<StateStore> store = OpenStore(dir.path() + "/store");
    ASSERT_NE(store, nullptr);
    ShardState state = Initialized(ShardTablesOptions{dir.path() + "/tables", 3});
    WholeStep(state, 0, {2, 4}, {2, 2, 4, 4});
    Checkpoint(state, *store);
    ASSERT_TRUE(state.RollbackTo(*store, Step(1)).ok());  // rows 2 and 4 only in the store now
    ASSERT_EQ(state.TableStats()[0].cached_rows, 0u);

    auto ids = std::make_shared<Ids>(Ids{2, 4, 6});
    Pull pull;
    pull.sparse = {SparseRead{0, Step(0)}};
    pull.sparse[0].lookup = lookup;
    pull.sparse[0].rows = 3;
    pull.sparse[0].ids = {ChunkId(0), ids->data(), ids->size() * sizeof(uint64_t), ids};
    const auto reads = [&] { return state.TableStats()[0].store_reads; };
    const uint64_t before = reads();
    pull.version = Step(3);  // not the step in progress: nothing
    state.WarmSparse(pull);
    EXPECT_EQ(reads(), before);
    Pull descending = pull;
    descending.version = Step(2);
    descending.sparse[0].rows = 2;
    auto bad = std::make_shared<Ids>(Ids{4, 2});
    descending.sparse[0].ids = {ChunkId(0), bad->data(), bad->size() * sizeof(uint64_t), bad};
    state.WarmSparse(descending);  // a malformed lookup: nothing (its answer refuses it)
    EXPECT_EQ(reads(), before);

    pull.version = Step(2);
    EXPECT_EQ(state.Answer(pull).status().code(), StatusCode::kUnavailable);
    state.WarmSparse(pull);
    EXPECT_EQ(reads(), before + 3);
    EXPECT_EQ(state.TableStats()[0].cached_rows, 2u);  // row 6, never touched, stays stored nowhere
    WholeStep(state, 1, {2, 4}, {1, 1, 1, 1});
    EXPECT_EQ(reads(), before + 3);  // the step found its rows in memory
    auto now = LookUp(state, 2, {2, 4});
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    Values want = Stepped(Stepped(Initial(2), {2, 2}), {1, 1});
    const Values four = Stepped(Stepped(Initial(4), {4, 4}), {1, 1});
    want.insert(want.end(), four.begin(), four.end());
    EXPECT_TRUE(SameBits(now->values, want));
  }
}

// A worker on the shard's host: its push's rows in its region (read there by the shard), the
// rows of its pull written into the region the pull names, from where the pull says on.
TEST(ShardSparse, RowsComeAndGoThroughAWorkersSharedMemoryAsInTheMessage) {
  ShardState inline_state = Initialized();
  ShardState shm_state = Initialized();
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  ShmRegion& r = **region;
  ShmMappings maps;
  const Ids ids{3, 9};
  const Values g{1, 2, 3, 4};
  WholeStep(inline_state, 0, ids, g);

  Push push = MakePush(0, Block{0, kVws}, {Bytes(0, kHeadGrad), Bytes(1, kLoss)}, {Rows(ids, g)});
  uint64_t at = 0;
  ASSERT_TRUE(PlaceRows(r.data(), r.ref(), &at, &push.sparse));
  // Rows in shared memory, but no region named, or rows outside it: refused.
  Push no_region = push;
  EXPECT_EQ(ResolveShm(&maps, &no_region).code(), StatusCode::kInvalidArgument);
  push.shm = r.ref();
  Push outside = push;
  outside.sparse[0].values_offset = r.ref().size - 4;
  EXPECT_EQ(ResolveShm(&maps, &outside).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ResolveShm(&maps, &push).ok());
  EXPECT_NE(push.sparse[0].values.data, r.data() + push.sparse[0].values_offset);  // its mapping
  auto stepped = shm_state.HandlePush(push);
  ASSERT_TRUE(stepped.ok() && stepped->completed.has_value()) << stepped.status().ToString();

  Pull pull;
  pull.version = Step(1);
  pull.sparse = {SparseRead{0, Step(0)}};
  pull.shm = r.ref();
  pull.shm_rows_at = 1024;
  std::memset(r.data(), 0, r.ref().size);  // the push was answered: the worker may write again
  auto reply = shm_state.Answer(pull);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(MoveIntoShm(pull, &maps, &*reply).ok());
  ASSERT_TRUE(AnyInShm(reply->sparse));
  EXPECT_GE(reply->sparse[0].ids_offset, 1024u);
  for (SparseRowBytes& rows : reply->sparse) rows.ids.data = rows.values.data = nullptr;
  ASSERT_TRUE(PointRows(r.data(), r.ref(), 1024, &reply->sparse).ok());
  auto want = PullRows(inline_state, 1, 0);
  ASSERT_TRUE(want.ok());
  const SparseRowBytes& got = reply->sparse[0];
  ASSERT_EQ(got.rows, 2u);
  EXPECT_EQ(std::memcmp(got.ids.data, want->ids.data(), got.ids.size), 0);
  EXPECT_TRUE(SameBits(Values(static_cast<const float*>(got.values.data),
                              static_cast<const float*>(got.values.data) + 2 * kDim),
                       want->values));

  // Rows that do not fit in the room the pull gives them come in the message.
  pull.shm_rows_at = r.ref().size - 64;
  reply = shm_state.Answer(pull);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(MoveIntoShm(pull, &maps, &*reply).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(AnyInShm(reply->sparse));
  EXPECT_EQ(std::memcmp(reply->sparse[0].ids.data, want->ids.data(), 2 * sizeof(uint64_t)), 0);
}

}  // namespace
}  // namespace eps
