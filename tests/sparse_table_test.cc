#include "server/sparse_table.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/sparse_tree.h"
#include "server/sparse_record.h"
#include "server/sparse_row_step.h"
#include "storage/sparse_store.h"
#include "tests/sparse_reference.h"
#include "tests/sparse_steps.h"

namespace eps {
namespace {

namespace ref = sparse_reference;

// A fresh directory under the test temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("sparse_table_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

SparseTableOptions TableOptions(uint32_t num_vws, size_t dim) {
  SparseTableOptions o;
  o.table_id = 2;
  o.dim = dim;
  o.num_vws = num_vws;
  o.seed = 99;
  o.optimizer.kind = SparseOptimizerOptions::Kind::kAdam;
  return o;
}

std::unique_ptr<SparseTable> OpenTable(const SparseTableOptions& o) {
  auto t = SparseTable::Open(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t.value());
}

// Pushes one step given as per-VW gradients, cut into `blocks`, and applies it.
void RunStep(SparseTable* t, const std::vector<VwGrad>& vws, const std::vector<Block>& blocks,
             size_t dim, double lr) {
  const uint32_t num_vws = static_cast<uint32_t>(vws.size());
  for (const Block& b : blocks) {
    const SparseRows part = BlockPartial(vws, b, num_vws, dim);
    ASSERT_TRUE(t->Push(t->version(), b, part.ids.data(), part.ids.size(), part.values.data(),
                        part.values.size())
                    .ok());
  }
  ASSERT_TRUE(t->StepComplete());
  Status s = t->ApplyStep(lr);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::vector<float> ReadRows(SparseTable* t, const std::vector<uint64_t>& ids, size_t dim) {
  std::vector<float> out(ids.size() * dim);
  Status s = t->Read(ids.data(), ids.size(), out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::vector<uint64_t> AllIds(uint64_t rows) {
  std::vector<uint64_t> ids;
  for (uint64_t r = 0; r < rows; ++r) ids.push_back(r * 0x9E3779B97F4A7C15ull);
  return ids;
}

TEST(SparseTable, SameBitsForAnySplitOfVwsAndAnyPushOrder) {
  const uint32_t num_vws = 6;
  const size_t dim = 4;
  auto one_block = OpenTable(TableOptions(num_vws, dim));
  auto split = OpenTable(TableOptions(num_vws, dim));
  std::mt19937_64 rng(7);
  for (int step = 0; step < 12; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, 16);
    RunStep(one_block.get(), vws, AlignedBlocks(0, num_vws), dim, 0.01);
    RunStep(split.get(), vws, RandomBlocks(rng, num_vws), dim, 0.01);
  }
  EXPECT_EQ(one_block->version(), Step(12));
  EXPECT_TRUE(
      SameBits(ReadRows(one_block.get(), AllIds(16), dim), ReadRows(split.get(), AllIds(16), dim)));
}

TEST(SparseTable, UntouchedRowsAreNotStoredAndReadAsTheirInitializer) {
  TempDir dir;
  SparseTableOptions o = TableOptions(1, 3);
  o.path = dir.path();
  auto t = OpenTable(o);
  const std::vector<uint64_t> touched = {4, 9};
  const std::vector<float> grads(6, 0.5f);
  ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, touched.data(), 2, grads.data(), 6).ok());
  ASSERT_TRUE(t->ApplyStep(0.1).ok());
  // Reading untouched rows stores nothing and gives the initializer's values.
  std::vector<float> want(3);
  InitialRow(o.init, o.seed, o.table_id, 77, want.data(), 3);
  EXPECT_TRUE(SameBits(ReadRows(t.get(), {77}, 3), want));
  EXPECT_EQ(t->stats().cached_rows, 2u);
  ASSERT_TRUE(t->Checkpoint().ok());
  EXPECT_EQ(t->stats().last_checkpoint_rows, 2u);
  // A touched row moved away from its initial value.
  InitialRow(o.init, o.seed, o.table_id, 4, want.data(), 3);
  EXPECT_FALSE(SameBits(ReadRows(t.get(), {4}, 3), want));
}

// The rows of the VWs' gradients that `keep` selects.
std::vector<VwGrad> RowsOf(const std::vector<VwGrad>& vws, size_t dim, bool (*keep)(uint64_t)) {
  std::vector<VwGrad> out(vws.size());
  for (size_t v = 0; v < vws.size(); ++v) {
    for (size_t i = 0; i < vws[v].ids.size(); ++i) {
      if (!keep(vws[v].ids[i])) continue;
      out[v].ids.push_back(vws[v].ids[i]);
      out[v].values.insert(out[v].values.end(), vws[v].values.begin() + i * dim,
                           vws[v].values.begin() + (i + 1) * dim);
    }
  }
  return out;
}

// Every stored row: id -> (version, weights and slots).
std::map<uint64_t, std::pair<int64_t, std::vector<float>>> Stored(SparseTable* t, size_t floats) {
  std::map<uint64_t, std::pair<int64_t, std::vector<float>>> out;
  EXPECT_TRUE(t->ScanRows([&](uint64_t id, Step version, const float* f) {
                 out[id] = {version.value(), std::vector<float>(f, f + floats)};
               }).ok());
  return out;
}

bool Odd(uint64_t row) { return row % 2 == 1; }
bool Even(uint64_t row) { return row % 2 == 0; }

// A move of shard state (docs/design.md, "Elastic shards"): table `a` hands its odd rows
// to a table `b` that holds nothing; together they hold what one table that never moved
// holds, checkpoint and restore it, and go on stepping to the same bits.
TEST(SparseTable, RowsMovedToAnotherTableKeepTheirBitsAndBothGoOnAsOne) {
  TempDir dir_a, dir_b;
  const uint32_t num_vws = 4;
  const size_t dim = 4, floats = 3 * dim;  // Adam: weights and two moments
  const uint64_t rows = 60;
  const SparseTableOptions whole_o = TableOptions(num_vws, dim);
  auto whole = OpenTable(whole_o);
  SparseTableOptions a_o = whole_o, b_o = whole_o;
  a_o.path = dir_a.path();
  a_o.memory_bytes = 6 * whole->RowBytes();  // most rows spilled or checkpointed
  b_o.path = dir_b.path();
  auto a = OpenTable(a_o);
  auto b = OpenTable(b_o);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 10; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, rows);
    RunStep(whole.get(), vws, AlignedBlocks(0, num_vws), dim, 0.02);
    RunStep(a.get(), vws, AlignedBlocks(0, num_vws), dim, 0.02);
    if (step == 4 || step == 9) {
      ASSERT_TRUE(a->Checkpoint().ok());
    }
  }
  std::string records;
  ASSERT_TRUE(a->ExportRows(Odd, &records).ok());
  EXPECT_EQ(records.size() % (8 + a->RecordBytes()), 0u);
  EXPECT_EQ(b->Move(Step(9), Even, records).code(), StatusCode::kInvalidArgument);  // not at 9
  EXPECT_EQ(b->Move(Step(10), Odd, records).code(), StatusCode::kInvalidArgument);  // lost ones
  ASSERT_TRUE(b->Move(Step(10), Even, records).ok());
  ASSERT_TRUE(a->Move(Step(10), Odd, "").ok());
  EXPECT_EQ(b->version(), Step(10));

  const auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    auto want = Stored(whole.get(), floats);
    auto got = Stored(a.get(), floats);
    for (const auto& [id, row] : got) EXPECT_TRUE(Even(id)) << id;
    for (auto& [id, row] : Stored(b.get(), floats)) {
      EXPECT_TRUE(Odd(id)) << id;
      got[id] = row;
    }
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, row] : want) {
      ASSERT_EQ(got.count(id), 1u) << id;
      EXPECT_EQ(got[id].first, row.first) << id;
      EXPECT_TRUE(SameBits(got[id].second, row.second)) << id;
    }
  };
  check("moved");
  // What changed since version 8, from the rows' versions (b's log does not know them).
  std::vector<uint64_t> since, odd_since;
  ASSERT_TRUE(b->ChangedSince(Step(8)).ok());
  since = *whole->ChangedSince(Step(8));
  for (uint64_t id : since)
    if (Odd(id)) odd_since.push_back(id);
  EXPECT_EQ(*b->ChangedSince(Step(8)), odd_since);

  // Checkpointed (a amends its checkpoint of 10 with tombstones) and opened again.
  ASSERT_TRUE(a->Checkpoint().ok());
  ASSERT_TRUE(b->Checkpoint().ok());
  EXPECT_EQ(a->Checkpoints().back(), Step(10));
  a.reset();
  b.reset();
  a = OpenTable(a_o);
  b = OpenTable(b_o);
  check("restored");
  for (int step = 10; step < 16; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, rows);
    RunStep(whole.get(), vws, AlignedBlocks(0, num_vws), dim, 0.02);
    RunStep(a.get(), RowsOf(vws, dim, Even), AlignedBlocks(0, num_vws), dim, 0.02);
    RunStep(b.get(), RowsOf(vws, dim, Odd), AlignedBlocks(0, num_vws), dim, 0.02);
  }
  check("stepped on");
}

TEST(SparseTable, RowsSpilledToRocksDbGiveTheSameBitsAsATableInMemory) {
  TempDir dir;
  const uint32_t num_vws = 4;
  const size_t dim = 8;
  const uint64_t rows = 200;
  SparseTableOptions big = TableOptions(num_vws, dim);
  auto in_memory = OpenTable(big);
  SparseTableOptions small = big;
  small.path = dir.path();
  small.memory_bytes = 5 * in_memory->RowBytes();  // 5 rows of the ~200 touched
  auto spilling = OpenTable(small);
  std::mt19937_64 rng(11);
  for (int step = 0; step < 30; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, rows);
    RunStep(in_memory.get(), vws, AlignedBlocks(0, num_vws), dim, 0.02);
    RunStep(spilling.get(), vws, AlignedBlocks(0, num_vws), dim, 0.02);
    if (step == 17) {
      ASSERT_TRUE(spilling->Checkpoint().ok());  // checkpointed rows are read back too
    }
  }
  const SparseTable::Stats stats = spilling->stats();
  EXPECT_LE(stats.cached_rows, 5u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_GT(stats.spilled_rows, 0u);
  EXPECT_GT(stats.store_reads, 0u);
  EXPECT_TRUE(SameBits(ReadRows(in_memory.get(), AllIds(rows), dim),
                       ReadRows(spilling.get(), AllIds(rows), dim)));
  // Every stored row once, ascending, with the same weights, moments and version.
  const auto scan = [dim](SparseTable* t) {
    std::vector<uint64_t> ids;
    std::vector<float> floats;
    std::vector<int64_t> versions;
    EXPECT_TRUE(t->ScanRows([&](uint64_t id, Step version, const float* f) {
                   ids.push_back(id);
                   versions.push_back(version.value());
                   floats.insert(floats.end(), f, f + 3 * dim);
                 }).ok());
    return std::make_tuple(ids, floats, versions);
  };
  const auto [mem_ids, mem_floats, mem_versions] = scan(in_memory.get());
  const auto [ids, floats, versions] = scan(spilling.get());
  EXPECT_EQ(ids, mem_ids);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(ids.size(), in_memory->stats().cached_rows);  // the touched rows, no other
  EXPECT_TRUE(SameBits(floats, mem_floats));
  EXPECT_EQ(versions, mem_versions);
  EXPECT_EQ(spilling->ChangedSince(Step(0)).value(), ids);
  // In pages (an export's final pull), over cached, spilled and checkpointed rows alike: the
  // pages, each from the row after the last one's, make up the whole.
  for (size_t page : {size_t{1}, size_t{3}, size_t{7}}) {
    std::vector<uint64_t> paged;
    for (uint64_t from = 0;;) {
      StatusOr<std::vector<uint64_t>> got = spilling->ChangedSince(Step(-1), from, page);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_LE(got->size(), page);
      paged.insert(paged.end(), got->begin(), got->end());
      if (got->size() < page) break;
      from = got->back() + 1;
    }
    EXPECT_EQ(paged, ids) << page;
  }
  // ReadStored's pages: the same rows with their weights, and the cache as it was (no row read
  // into it, none evicted).
  const SparseTable::Stats before = spilling->stats();
  for (size_t page : {size_t{2}, size_t{5}, ids.size() + 1}) {
    std::vector<uint64_t> paged, got;
    std::vector<float> weights, w;
    for (uint64_t from = 0;;) {
      ASSERT_TRUE(spilling->ReadStored(from, page, &got, &w).ok());
      ASSERT_EQ(w.size(), got.size() * dim);
      paged.insert(paged.end(), got.begin(), got.end());
      weights.insert(weights.end(), w.begin(), w.end());
      if (got.size() < page) break;
      from = got.back() + 1;
    }
    EXPECT_EQ(paged, ids) << page;
    std::vector<float> want;
    for (size_t k = 0; k < ids.size(); ++k)
      want.insert(want.end(), &floats[k * 3 * dim], &floats[k * 3 * dim] + dim);
    EXPECT_TRUE(SameBits(weights, want)) << page;
  }
  const SparseTable::Stats after = spilling->stats();
  EXPECT_EQ(after.store_reads, before.store_reads);
  EXPECT_EQ(after.evictions, before.evictions);
  EXPECT_EQ(after.cached_rows, before.cached_rows);
  // Rows that come with a step (some never touched before) are in the next scan: its sorted ids
  // are made anew.
  const std::vector<VwGrad> more = RandomStep(rng, num_vws, dim, 2 * rows);
  RunStep(in_memory.get(), more, AlignedBlocks(0, num_vws), dim, 0.02);
  RunStep(spilling.get(), more, AlignedBlocks(0, num_vws), dim, 0.02);
  std::vector<uint64_t> now, mem;
  std::vector<float> w;
  ASSERT_TRUE(spilling->ReadStored(0, rows + 1, &now, &w).ok());
  ASSERT_TRUE(in_memory->ReadStored(0, rows + 1, &mem, &w).ok());
  EXPECT_EQ(now, mem);
  EXPECT_EQ(now.size(), in_memory->stats().cached_rows);  // every touched row, the new ones too
  EXPECT_GT(now.size(), ids.size());
}

// A table in memory, and the same table over a store with a cache of 4 rows (of 4 floats), which
// `spilling_options` opens again.
struct FourRowCache {
  static constexpr size_t kDim = 4;
  explicit FourRowCache(uint32_t num_vws) : spilling_options(TableOptions(num_vws, kDim)) {
    in_memory = OpenTable(spilling_options);
    spilling_options.path = dir.path();
    spilling_options.memory_bytes = 4 * in_memory->RowBytes();
    spilling = OpenTable(spilling_options);
  }
  TempDir dir;
  SparseTableOptions spilling_options;
  std::unique_ptr<SparseTable> in_memory, spilling;
};

// A row read back from the spill tier keeps its spilled record while it does not change: its
// eviction then writes nothing, and a changed one overwrites the record once. The cache's copy
// overrides the stale record in every read, scan and checkpoint.
TEST(SparseTable, RowsReadBackFromTheSpillTierAreWrittenAgainOnlyOnceChanged) {
  FourRowCache tables(1);
  const size_t dim = FourRowCache::kDim;
  const SparseTableOptions& o = tables.spilling_options;
  std::unique_ptr<SparseTable>& in_memory = tables.in_memory;
  std::unique_ptr<SparseTable>& spilling = tables.spilling;
  const std::vector<uint64_t> a = {1, 2, 3, 4}, b = {11, 12, 13, 14};
  const auto step = [&](const std::vector<uint64_t>& ids, float g) {
    VwGrad vw{ids, std::vector<float>(ids.size() * dim, g)};
    RunStep(in_memory.get(), {vw}, AlignedBlocks(0, 1), dim, 0.1);
    RunStep(spilling.get(), {vw}, AlignedBlocks(0, 1), dim, 0.1);
  };
  step(a, 1.0f);
  step(b, 2.0f);  // evicts a, changed: 4 writes
  EXPECT_EQ(spilling->stats().spill_writes, 4u);
  ReadRows(spilling.get(), a, dim);  // a back, b evicted changed: 4 more
  EXPECT_EQ(spilling->stats().spill_writes, 8u);
  EXPECT_EQ(spilling->stats().spilled_rows, 4u);  // b; a is back in memory
  ReadRows(spilling.get(), b, dim);  // b back, a evicted unchanged since read back: none
  EXPECT_EQ(spilling->stats().spill_writes, 8u);
  EXPECT_EQ(spilling->stats().spilled_rows, 4u);  // a
  step(a, -1.0f);  // a back and changed, b evicted unchanged since read back: none
  EXPECT_EQ(spilling->stats().spill_writes, 8u);
  EXPECT_EQ(spilling->stats().spilled_rows, 4u);  // b
  ReadRows(spilling.get(), b, dim);               // b back, a evicted changed: 4 more
  EXPECT_EQ(spilling->stats().spill_writes, 12u);
  EXPECT_EQ(spilling->stats().cached_rows, 4u);

  std::vector<uint64_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  const auto same = [&](SparseTable* t, const char* when) {
    EXPECT_TRUE(SameBits(ReadRows(in_memory.get(), all, dim), ReadRows(t, all, dim))) << when;
    std::vector<uint64_t> scanned;
    std::vector<float> floats, want;
    ASSERT_TRUE(t->ScanRows([&](uint64_t id, Step, const float* f) {
                   scanned.push_back(id);
                   floats.insert(floats.end(), f, f + 3 * dim);
                 }).ok());
    ASSERT_TRUE(in_memory
                    ->ScanRows([&](uint64_t, Step, const float* f) {
                      want.insert(want.end(), f, f + 3 * dim);
                    })
                    .ok());
    EXPECT_EQ(scanned, all) << when;  // each row once, ascending
    EXPECT_TRUE(SameBits(floats, want)) << when;
  };
  same(spilling.get(), "spilled");
  step(a, 0.5f);  // a changes while its stale record is in the spill tier
  ASSERT_TRUE(spilling->Checkpoint().ok());
  same(spilling.get(), "checkpointed");
  spilling.reset();
  same(OpenTable(o).get(), "reopened");  // the checkpoint holds the cache's copies
}

// Warm brings the stored rows asked for into memory, while a step's pushes come; the step then
// reads nothing from the store, and the bits are a cold table's.
TEST(SparseTable, WarmBringsStoredRowsIntoMemoryAheadOfTheStep) {
  FourRowCache tables(2);
  const size_t dim = FourRowCache::kDim;
  std::unique_ptr<SparseTable>& in_memory = tables.in_memory;
  std::unique_ptr<SparseTable>& warm = tables.spilling;
  const std::vector<uint64_t> a = {1, 2, 3, 4}, b = {11, 12, 13, 14};
  const auto step = [&](SparseTable* t, const std::vector<uint64_t>& ids, float g,
                        const std::vector<uint64_t>* warm_ids) {
    const std::vector<VwGrad> vws(2, VwGrad{ids, std::vector<float>(ids.size() * dim, g)});
    const SparseRows part = BlockPartial(vws, Block{0, 1}, 2, dim);
    ASSERT_TRUE(t->Push(t->version(), Block{0, 1}, part.ids.data(), part.ids.size(),
                        part.values.data(), part.values.size())
                    .ok());
    if (warm_ids != nullptr) {
      ASSERT_TRUE(t->Warm(warm_ids->data(), warm_ids->size()).ok());
    }
    const SparseRows rest = BlockPartial(vws, Block{1, 1}, 2, dim);
    ASSERT_TRUE(t->Push(t->version(), Block{1, 1}, rest.ids.data(), rest.ids.size(),
                        rest.values.data(), rest.values.size())
                    .ok());
    ASSERT_TRUE(t->ApplyStep(0.1).ok());
  };
  for (SparseTable* t : {in_memory.get(), warm.get()}) {
    step(t, a, 1.0f, nullptr);
    step(t, b, 2.0f, nullptr);  // a leaves memory
  }
  const uint64_t reads = warm->stats().store_reads;
  EXPECT_EQ(warm->stats().warm_reads, 0u);
  const std::vector<uint64_t> asked = {1, 2, 3, 4, 99};  // 99: never touched
  step(in_memory.get(), a, -1.0f, nullptr);
  step(warm.get(), a, -1.0f, &asked);  // warmed while the step's pushes come
  EXPECT_EQ(warm->stats().store_reads, reads + asked.size());  // all at Warm, none at the step
  EXPECT_EQ(warm->stats().warm_reads, asked.size());
  EXPECT_EQ(warm->stats().cached_rows, 4u);                    // 99 stays stored nowhere
  std::vector<uint64_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.push_back(99);
  EXPECT_TRUE(SameBits(ReadRows(in_memory.get(), all, dim), ReadRows(warm.get(), all, dim)));
}

TEST(SparseTable, ApplyStepHandsOverTheRowsItChangedAtTheirPreviousAndNewWeights) {
  TempDir dir;
  const uint32_t num_vws = 3;
  const size_t dim = 5;
  SparseTableOptions o = TableOptions(num_vws, dim);
  o.path = dir.path();
  o.memory_bytes = 4 * OpenTable(TableOptions(num_vws, dim))->RowBytes();  // most rows spilled
  auto t = OpenTable(o);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 20; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, 40);
    std::set<uint64_t> touched;
    for (const VwGrad& g : vws) touched.insert(g.ids.begin(), g.ids.end());
    const std::vector<uint64_t> ids(touched.begin(), touched.end());
    const std::vector<float> was = ReadRows(t.get(), ids, dim);  // cached, spilled or fresh
    for (const Block& b : AlignedBlocks(0, num_vws)) {
      const SparseRows part = BlockPartial(vws, b, num_vws, dim);
      ASSERT_TRUE(t->Push(t->version(), b, part.ids.data(), part.ids.size(), part.values.data(),
                          part.values.size())
                      .ok());
    }
    SparseTable::StepRows changed;
    ASSERT_TRUE(t->ApplyStep(0.05, &changed).ok());
    EXPECT_EQ(changed.ids, ids);
    EXPECT_TRUE(SameBits(changed.before, was));
    EXPECT_TRUE(SameBits(changed.after, ReadRows(t.get(), ids, dim)));
    if (!ids.empty()) {
      EXPECT_FALSE(SameBits(changed.after, was));
    }
  }
  EXPECT_GT(t->stats().evictions, 0u);
}

TEST(RowInitializer, IsAPureFunctionOfSeedTableAndRow) {
  RowInitializer init;
  std::vector<float> a(9), b(9), c(9), d(9);
  InitialRow(init, 1, 2, 3, a.data(), 9);
  InitialRow(init, 1, 2, 3, b.data(), 9);
  EXPECT_TRUE(SameBits(a, b));
  InitialRow(init, 1, 2, 4, c.data(), 9);
  InitialRow(init, 1, 3, 3, d.data(), 9);
  EXPECT_FALSE(SameBits(a, c));
  EXPECT_FALSE(SameBits(a, d));
  // A row's first elements do not depend on the width asked for.
  std::vector<float> wide(20);
  InitialRow(init, 1, 2, 3, wide.data(), 20);
  EXPECT_EQ(std::memcmp(a.data(), wide.data(), 9 * sizeof(float)), 0);
}

TEST(RowInitializer, GivesTheBitsOfTheReferenceWrittenInPython) {
  const size_t n = sizeof(ref::kGoldRows) / sizeof(ref::kGoldRows[0]);
  RowInitializer normal;
  RowInitializer uniform;
  uniform.kind = RowInitializer::Kind::kUniform;
  uniform.low = -0.05;
  uniform.high = 0.05;
  for (size_t i = 0; i < n; ++i) {
    std::vector<float> got(ref::kGoldDim),
        want(ref::kGoldNormal + i * ref::kGoldDim, ref::kGoldNormal + (i + 1) * ref::kGoldDim);
    InitialRow(normal, ref::kGoldSeed, ref::kGoldTable, ref::kGoldRows[i], got.data(),
               ref::kGoldDim);
    EXPECT_TRUE(SameBits(got, want)) << "normal row " << ref::kGoldRows[i];
    want.assign(ref::kGoldUniform + i * ref::kGoldDim, ref::kGoldUniform + (i + 1) * ref::kGoldDim);
    InitialRow(uniform, ref::kGoldSeed, ref::kGoldTable, ref::kGoldRows[i], got.data(),
               ref::kGoldDim);
    EXPECT_TRUE(SameBits(got, want)) << "uniform row " << ref::kGoldRows[i];
  }
}

TEST(RowInitializer, NormalRowsHaveMeanZeroAndVarianceOne) {
  RowInitializer init;
  std::vector<float> row(64);
  double sum = 0, sum_sq = 0;
  size_t n = 0;
  for (uint64_t r = 0; r < 4000; ++r) {
    InitialRow(init, 5, 0, r, row.data(), row.size());
    for (float x : row) {
      sum += x;
      sum_sq += double{x} * x;
      ++n;
    }
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);  // 256000 draws: standard error 0.002
  EXPECT_NEAR(var, 1.0, 0.01);
}

// Runs the reference scenario (V = 1, so the mean is the gradient itself) under `optimizer`.
std::vector<float> RunReference(const SparseOptimizerOptions& optimizer, const float* grads,
                                bool every_row) {
  SparseTableOptions o;
  o.table_id = ref::kTable;
  o.dim = ref::kDim;
  o.num_vws = 1;
  o.seed = ref::kSeed;
  o.optimizer = optimizer;
  auto t = OpenTable(o);
  const size_t num_ids = sizeof(ref::kIds) / sizeof(ref::kIds[0]);
  std::vector<uint64_t> all(ref::kIds, ref::kIds + num_ids);
  size_t dense_at = 0;
  for (size_t step = 0; step < ref::kSteps; ++step) {
    std::vector<uint64_t> ids;
    std::vector<float> values;
    if (every_row) {
      ids = all;
      values.assign(grads + dense_at, grads + dense_at + num_ids * ref::kDim);
      dense_at += num_ids * ref::kDim;
    } else {
      for (size_t k = ref::kTouchedBegin[step]; k < ref::kTouchedBegin[step + 1]; ++k) {
        ids.push_back(ref::kIds[ref::kTouched[k]]);
        values.insert(values.end(), grads + k * ref::kDim, grads + (k + 1) * ref::kDim);
      }
    }
    EXPECT_TRUE(
        t->Push(Step(step), Block{0, 1}, ids.data(), ids.size(), values.data(), values.size())
            .ok());
    EXPECT_TRUE(t->ApplyStep(ref::kLrs[step]).ok());
  }
  return ReadRows(t.get(), all, ref::kDim);
}

std::vector<float> Want(const float* values) {
  return std::vector<float>(values, values + sizeof(ref::kIds) / sizeof(ref::kIds[0]) * ref::kDim);
}

TEST(SparseOptimizer, AdamIsTorchSparseAdamBitForBit) {
  SparseOptimizerOptions o;
  o.kind = SparseOptimizerOptions::Kind::kAdam;
  EXPECT_TRUE(SameBits(RunReference(o, ref::kGrads, false), Want(ref::kSparseAdam)));
}

TEST(SparseOptimizer, AdagradIsTorchAdagradOnASparseGradientBitForBit) {
  SparseOptimizerOptions o;
  o.kind = SparseOptimizerOptions::Kind::kAdagrad;
  o.eps = 1e-10;
  o.initial_accumulator_value = 0.1;
  EXPECT_TRUE(SameBits(RunReference(o, ref::kGrads, false), Want(ref::kAdagrad)));
}

TEST(SparseOptimizer, SgdIsTorchSgdOnASparseGradientBitForBit) {
  SparseOptimizerOptions o;
  EXPECT_TRUE(SameBits(RunReference(o, ref::kGrads, false), Want(ref::kSgd)));
}

TEST(SparseOptimizer, MomentumOnRowsTouchedEveryStepIsTorchSgdBitForBit) {
  SparseOptimizerOptions o;
  o.momentum = 0.9;
  o.dampening = 0.1;
  o.weight_decay = 0.01;
  EXPECT_TRUE(SameBits(RunReference(o, ref::kDenseGrads, true), Want(ref::kMomentum)));
}

TEST(SparseOptimizer, AdamWDecaysOnlyTheTouchedRowsThenStepsAsSparseAdam) {
  SparseOptimizerOptions o;
  o.kind = SparseOptimizerOptions::Kind::kAdamW;
  o.weight_decay = 0.1;
  EXPECT_TRUE(SameBits(RunReference(o, ref::kGrads, false), Want(ref::kLazyAdamW)));
}

TEST(SparseOptimizer, LazyRowsKeepTheirMomentsWhenUntouched) {
  // Momentum: row 1 is touched at step 0 only; a dense optimizer would keep moving it.
  SparseTableOptions o = TableOptions(1, 1);
  o.optimizer = SparseOptimizerOptions();
  o.optimizer.momentum = 0.9;
  auto t = OpenTable(o);
  const uint64_t a = 1, b = 2;
  const float g = 1.0f;
  ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, &a, 1, &g, 1).ok());
  ASSERT_TRUE(t->ApplyStep(0.1).ok());
  const std::vector<float> after_first = ReadRows(t.get(), {a}, 1);
  ASSERT_TRUE(t->Push(Step(1), Block{0, 1}, &b, 1, &g, 1).ok());
  ASSERT_TRUE(t->ApplyStep(0.1).ok());
  EXPECT_TRUE(SameBits(ReadRows(t.get(), {a}, 1), after_first));
}

// A row is stepped element by element, so a wide row (the vector lanes of the
// optimizer's loops) gives each element the bits that element gets alone in a
// row of one (the scalar code). The torch references above have rows of 7.
TEST(SparseOptimizer, WideRowsStepEachElementAsARowOfOneDoes) {
  using K = SparseOptimizerOptions::Kind;
  std::vector<SparseOptimizerOptions> kinds(6);
  kinds[0].momentum = 0.9;
  kinds[0].weight_decay = 0.01;
  kinds[1].momentum = 0.9;
  kinds[1].nesterov = true;
  kinds[2].kind = K::kAdagrad;
  kinds[2].weight_decay = 0.01;
  kinds[2].initial_accumulator_value = 0.1;
  kinds[3].kind = K::kAdam;
  kinds[4].kind = K::kAdam;
  kinds[4].weight_decay = 0.01;
  kinds[5].kind = K::kAdamW;
  kinds[5].weight_decay = 0.1;
  constexpr size_t kDim = 37;  // lanes of 8 and 4 and a scalar tail
  for (const SparseOptimizerOptions& o : kinds) {
    const size_t width = 1 + SparseOptimizerSlots(o);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> wide(kDim * width, 0.0f);
    for (size_t i = 0; i < kDim; ++i) wide[i] = normal(rng);
    std::vector<std::vector<float>> narrow(kDim, std::vector<float>(width, 0.0f));
    for (size_t i = 0; i < kDim; ++i) narrow[i][0] = wide[i];
    for (int step = 0; step < 4; ++step) {
      std::vector<float> grad(kDim);
      for (float& g : grad) g = normal(rng);
      const float divisor = step % 2 == 0 ? 1.0f : 3.0f;
      const SparseRowStepper wide_stepper(o, kDim, 0.05, step + 1);
      const SparseRowStepper one(o, 1, 0.05, step + 1);
      wide_stepper.Step(wide.data(), grad.data(), divisor, step > 0);
      for (size_t i = 0; i < kDim; ++i) one.Step(narrow[i].data(), &grad[i], divisor, step > 0);
    }
    std::vector<float> gathered(kDim * width);
    for (size_t i = 0; i < kDim; ++i) {
      for (size_t s = 0; s < width; ++s) gathered[s * kDim + i] = narrow[i][s];
    }
    EXPECT_TRUE(SameBits(wide, gathered)) << "optimizer kind " << static_cast<int>(o.kind);
  }
}

TEST(SparseTable, ChangedSinceNamesTheRowsTheLoggedStepsChanged) {
  SparseTableOptions o = TableOptions(1, 1);
  o.changelog_versions = 2;
  auto t = OpenTable(o);
  const float g[2] = {1.0f, 1.0f};
  const std::vector<std::vector<uint64_t>> steps = {{1, 5}, {5, 9}, {2}};
  for (size_t s = 0; s < steps.size(); ++s) {
    ASSERT_TRUE(
        t->Push(Step(s), Block{0, 1}, steps[s].data(), steps[s].size(), g, steps[s].size()).ok());
    ASSERT_TRUE(t->ApplyStep(0.1).ok());
  }
  EXPECT_EQ(t->ChangedSince(Step(2)).value(), std::vector<uint64_t>({2}));
  EXPECT_EQ(t->ChangedSince(Step(1)).value(), std::vector<uint64_t>({2, 5, 9}));
  EXPECT_EQ(t->ChangedSince(Step(3)).value(), std::vector<uint64_t>());
  // Beyond the log: from the rows' own versions.
  EXPECT_EQ(t->ChangedSince(Step(0)).value(), std::vector<uint64_t>({1, 2, 5, 9}));
  // Pages, from the log and beyond it.
  EXPECT_EQ(t->ChangedSince(Step(1), 3, 1).value(), std::vector<uint64_t>({5}));
  EXPECT_EQ(t->ChangedSince(Step(1), 6, 5).value(), std::vector<uint64_t>({9}));
  EXPECT_EQ(t->ChangedSince(Step(0), 2, 2).value(), std::vector<uint64_t>({2, 5}));
  EXPECT_EQ(t->ChangedSince(Step(0), 10, 2).value(), std::vector<uint64_t>());
}

// ---- checkpoints ----

// Trains `table` for steps [from, to) of a fixed random sequence.
void Train(SparseTable* t, int from, int to, uint32_t num_vws, size_t dim, uint64_t rows) {
  for (int step = from; step < to; ++step) {
    std::mt19937_64 rng(1000 + step);
    RunStep(t, RandomStep(rng, num_vws, dim, rows), AlignedBlocks(0, num_vws), dim, 0.01);
  }
}

TEST(SparseTable, ReopeningAtACheckpointThenTrainingGivesTheBitsOfAnUninterruptedRun) {
  TempDir dir;
  const uint32_t num_vws = 3;
  const size_t dim = 5;
  const uint64_t rows = 60;
  auto straight = OpenTable(TableOptions(num_vws, dim));
  Train(straight.get(), 0, 20, num_vws, dim, rows);

  SparseTableOptions o = TableOptions(num_vws, dim);
  o.path = dir.path();
  o.memory_bytes = 10 * straight->RowBytes();
  {
    auto t = OpenTable(o);
    Train(t.get(), 0, 6, num_vws, dim, rows);
    ASSERT_TRUE(t->Checkpoint().ok());
    Train(t.get(), 6, 12, num_vws, dim, rows);
    ASSERT_TRUE(t->Checkpoint().ok());
    // Incremental: the second checkpoint holds only the rows steps 6..11 changed.
    EXPECT_EQ(t->stats().last_checkpoint_rows, t->ChangedSince(Step(6)).value().size());
    Train(t.get(), 12, 15, num_vws, dim, rows);  // lost: no checkpoint (some rows spilled)
    EXPECT_GT(t->stats().spilled_rows, 0u);
  }
  auto t = OpenTable(o);
  EXPECT_EQ(t->version(), Step(12));
  Train(t.get(), 12, 20, num_vws, dim, rows);
  EXPECT_TRUE(
      SameBits(ReadRows(t.get(), AllIds(rows), dim), ReadRows(straight.get(), AllIds(rows), dim)));
}

TEST(SparseTable, RollingBackToAnOlderCheckpointGivesItsBits) {
  TempDir dir;
  const uint32_t num_vws = 2;
  const size_t dim = 3;
  const uint64_t rows = 40;
  SparseTableOptions o = TableOptions(num_vws, dim);
  o.path = dir.path();
  o.memory_bytes = 8 * (dim * 3 * sizeof(float) + 200);
  o.keep_checkpoints = 1;
  auto t = OpenTable(o);
  t->RetainFrom(Step(4));
  Train(t.get(), 0, 4, num_vws, dim, rows);
  const std::vector<float> at4 = ReadRows(t.get(), AllIds(rows), dim);
  ASSERT_TRUE(t->Checkpoint().ok());
  for (int c = 8; c <= 16; c += 4) {
    Train(t.get(), c - 4, c, num_vws, dim, rows);
    ASSERT_TRUE(t->Checkpoint().ok());
  }
  EXPECT_EQ(t->Checkpoints(), std::vector<Step>({Step(4), Step(8), Step(12), Step(16)}));
  ASSERT_TRUE(t->RollbackTo(Step(4)).ok());
  EXPECT_EQ(t->version(), Step(4));
  EXPECT_TRUE(SameBits(ReadRows(t.get(), AllIds(rows), dim), at4));
  EXPECT_EQ(t->Checkpoints(), std::vector<Step>({Step(4)}));
  // Retention from 16 on with keep 1: the records only old checkpoints read go.
  Train(t.get(), 4, 8, num_vws, dim, rows);
  t->RetainFrom(Step(100));
  ASSERT_TRUE(t->Checkpoint().ok());
  EXPECT_EQ(t->Checkpoints(), std::vector<Step>({Step(8)}));
  auto again = OpenTable(TableOptions(num_vws, dim));
  Train(again.get(), 0, 8, num_vws, dim, rows);
  EXPECT_TRUE(
      SameBits(ReadRows(t.get(), AllIds(rows), dim), ReadRows(again.get(), AllIds(rows), dim)));
  // Step 0 is always there: the empty table.
  ASSERT_TRUE(t->RollbackTo(Step(0)).ok());
  auto fresh = OpenTable(TableOptions(num_vws, dim));
  EXPECT_TRUE(
      SameBits(ReadRows(t.get(), AllIds(rows), dim), ReadRows(fresh.get(), AllIds(rows), dim)));
  EXPECT_EQ(t->RollbackTo(Step(3)).code(), StatusCode::kNotFound);
}

// A SIGKILL at any moment: the child (this binary again, running the disabled test below)
// trains a spilling table and checkpoints every 3 steps, printing each checkpoint; the
// parent kills it after the third, wherever it is (training, spilling, checkpointing).
constexpr char kCrashDirEnv[] = "EPS_SPARSE_CRASH_DIR";
constexpr uint32_t kCrashVws = 3;
constexpr size_t kCrashDim = 4;
constexpr uint64_t kCrashRows = 300;

SparseTableOptions CrashOptions() {
  SparseTableOptions o = TableOptions(kCrashVws, kCrashDim);
  o.memory_bytes = 20 * (kCrashDim * 3 * sizeof(float) + 200);
  return o;
}

TEST(SparseTableCrashChild, DISABLED_TrainsAndCheckpointsUntilKilled) {
  const char* dir = std::getenv(kCrashDirEnv);
  ASSERT_NE(dir, nullptr);
  SparseTableOptions o = CrashOptions();
  o.path = dir;
  auto t = OpenTable(o);
  for (int step = 0; step < 3000; ++step) {  // bounded, should the parent die
    Train(t.get(), step, step + 1, kCrashVws, kCrashDim, kCrashRows);
    if ((step + 1) % 3 == 0) {
      ASSERT_TRUE(t->Checkpoint().ok());
      std::printf("checkpoint %d\n", step + 1);
      std::fflush(stdout);
    }
  }
}

TEST(SparseTable, ASigkilledTableReopensAtAWholeCheckpointWithItsBits) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    setenv(kCrashDirEnv, dir.path().c_str(), 1);
    const char* argv[] = {
        "sparse_table_test",
        "--gtest_filter=SparseTableCrashChild.DISABLED_TrainsAndCheckpointsUntilKilled",
        "--gtest_also_run_disabled_tests", nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(argv));
    _exit(127);
  }
  close(fds[1]);
  FILE* in = fdopen(fds[0], "r");
  int seen = 0;
  char line[256];
  while (seen < 3 && std::fgets(line, sizeof line, in) != nullptr) {
    if (std::strncmp(line, "checkpoint ", 11) == 0) ++seen;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  std::fclose(in);
  ASSERT_EQ(seen, 3) << "the child ended before its third checkpoint";

  SparseTableOptions o = CrashOptions();
  o.path = dir.path();
  auto t = OpenTable(o);
  const int64_t k = t->version().value();
  EXPECT_GE(k, 9);
  EXPECT_EQ(k % 3, 0);
  auto straight = OpenTable(TableOptions(kCrashVws, kCrashDim));  // all in memory
  Train(straight.get(), 0, static_cast<int>(k), kCrashVws, kCrashDim, kCrashRows);
  EXPECT_TRUE(SameBits(ReadRows(t.get(), AllIds(kCrashRows), kCrashDim),
                       ReadRows(straight.get(), AllIds(kCrashRows), kCrashDim)));
  Train(t.get(), static_cast<int>(k), static_cast<int>(k) + 5, kCrashVws, kCrashDim, kCrashRows);
  Train(straight.get(), static_cast<int>(k), static_cast<int>(k) + 5, kCrashVws, kCrashDim,
        kCrashRows);
  EXPECT_TRUE(SameBits(ReadRows(t.get(), AllIds(kCrashRows), kCrashDim),
                       ReadRows(straight.get(), AllIds(kCrashRows), kCrashDim)));
}

TEST(SparseTable, ADamagedRowRecordIsDataLossNotACrash) {
  TempDir dir;
  SparseTableOptions o = TableOptions(1, 2);
  o.path = dir.path();
  {
    auto store = SparseRowStore::Open(StoreOptionsOf(o));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->WriteCheckpoint(Step(5), {{1, "short"}}, {}).ok());
  }
  auto t = OpenTable(o);
  EXPECT_EQ(t->version(), Step(5));
  std::vector<float> out(2);
  const uint64_t bad = 1, untouched = 2;
  EXPECT_EQ(t->Read(&bad, 1, out.data()).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(t->Read(&untouched, 1, out.data()).ok());
  EXPECT_EQ(t->ScanRows([](uint64_t, Step, const float*) {}).code(), StatusCode::kDataLoss);
  const float g[2] = {1.0f, 1.0f};
  ASSERT_TRUE(t->Push(Step(5), Block{0, 1}, &bad, 1, g, 2).ok());
  EXPECT_EQ(t->ApplyStep(0.1).code(), StatusCode::kDataLoss);
  EXPECT_EQ(t->version(), Step(5));
}

// ---- bad input ----

TEST(SparseTable, UnsortedOrRepeatedIdsAreInvalidArgumentAndChangeNothing) {
  auto t = OpenTable(TableOptions(2, 2));
  const std::vector<float> g(6, 1.0f);
  const std::vector<uint64_t> unsorted = {3, 1, 7}, repeated = {1, 3, 3};
  EXPECT_EQ(t->Push(Step(0), Block{0, 1}, unsorted.data(), 3, g.data(), 6).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Push(Step(0), Block{0, 1}, repeated.data(), 3, g.data(), 6).code(),
            StatusCode::kInvalidArgument);
  // VW 0 is still missing: the refused pushes did not count.
  const std::vector<uint64_t> ok = {1, 3, 7};
  ASSERT_TRUE(t->Push(Step(0), Block{1, 1}, ok.data(), 3, g.data(), 6).ok());
  EXPECT_FALSE(t->StepComplete());
  EXPECT_EQ(t->ApplyStep(0.1).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, ok.data(), 3, g.data(), 6).ok());
  EXPECT_TRUE(t->ApplyStep(0.1).ok());
}

TEST(SparseTable, BadPushesAmongGoodOnesAreRefusedAndChangeNoBit) {
  const uint32_t num_vws = 6;
  const size_t dim = 3;
  auto clean = OpenTable(TableOptions(num_vws, dim));
  auto noisy = OpenTable(TableOptions(num_vws, dim));
  std::mt19937_64 rng(21);
  int refused = 0;
  for (int step = 0; step < 25; ++step) {
    const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, 12);
    const std::vector<Block> blocks = RandomBlocks(rng, num_vws);
    RunStep(clean.get(), vws, blocks, dim, 0.01);
    std::vector<Block> pushed;
    for (const Block& b : blocks) {
      SparseRows part = BlockPartial(vws, b, num_vws, dim);
      // A bad variant of this push first.
      std::vector<uint64_t> ids = part.ids;
      std::vector<float> values = part.values;
      Block block = b;
      Step at = noisy->version();
      const int kind = static_cast<int>(rng() % 7);
      switch (kind) {
        case 0:  // unsorted
          if (ids.size() < 2) ids = {4, 5};
          std::swap(ids[0], ids[1]);
          values.assign(ids.size() * dim, 1.0f);
          break;
        case 1:  // repeated
          if (ids.empty()) ids.push_back(1);
          ids.push_back(ids.back());
          values.assign(ids.size() * dim, 1.0f);
          break;
        case 2:  // a value short or long
          if (values.empty() || rng() % 2) {
            values.push_back(1.0f);
          } else {
            values.pop_back();
          }
          break;
        case 3:  // not a node of the tree
          block = Block{1, 2};
          break;
        case 4:  // beyond V
          block = Block{8, 1};
          break;
        case 5:  // a step not the current one
          at = Step(at.value() + (rng() % 2 ? 1 : -1));
          break;
        case 6:  // a block already counted (none yet: this one for the next step)
          block = pushed.empty() ? Block{0, 8} : pushed.back();
          if (pushed.empty()) {
            ids = part.ids;
            values = part.values;
            block = b;
            at = Step(at.value() + 1);
          }
          break;
      }
      EXPECT_FALSE(
          noisy->Push(at, block, ids.data(), ids.size(), values.data(), values.size()).ok())
          << "bad push of kind " << kind;
      ++refused;
      ASSERT_TRUE(noisy
                      ->Push(noisy->version(), b, part.ids.data(), part.ids.size(),
                             part.values.data(), part.values.size())
                      .ok());
      pushed.push_back(b);
    }
    ASSERT_TRUE(noisy->ApplyStep(0.01).ok());
  }
  EXPECT_GT(refused, 50);
  EXPECT_TRUE(
      SameBits(ReadRows(clean.get(), AllIds(12), dim), ReadRows(noisy.get(), AllIds(12), dim)));
}

TEST(SparseTable, AWrongRowWidthIsInvalidArgument) {
  auto t = OpenTable(TableOptions(1, 4));
  const std::vector<uint64_t> ids = {1, 2};
  const std::vector<float> g(7, 1.0f);
  EXPECT_EQ(t->Push(Step(0), Block{0, 1}, ids.data(), 2, g.data(), 7).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Push(Step(0), Block{0, 1}, ids.data(), 2, g.data(), 9).code(),
            StatusCode::kInvalidArgument);
}

TEST(SparseTable, BadBlocksAndStepsAreRefused) {
  auto t = OpenTable(TableOptions(3, 1));
  const uint64_t id = 1;
  const float g = 1.0f;
  EXPECT_EQ(t->Push(Step(0), Block{1, 2}, &id, 1, &g, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Push(Step(0), Block{3, 1}, &id, 1, &g, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Push(Step(1), Block{0, 1}, &id, 1, &g, 1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t->Push(Step(0), Block{0, 2}, &id, 1, &g, 1).ok());
  EXPECT_EQ(t->Push(Step(0), Block{1, 1}, &id, 1, &g, 1).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(t->Push(Step(0), Block{2, 1}, &id, 1, &g, 1).ok());
  ASSERT_TRUE(t->ApplyStep(0.1).ok());
  EXPECT_EQ(t->Push(Step(0), Block{2, 1}, &id, 1, &g, 1).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(t->ApplyStep(std::nan("")).code(), StatusCode::kInvalidArgument);
}

TEST(SparseTable, AMemoryBudgetSmallerThanOneRowIsInvalidArgument) {
  SparseTableOptions o = TableOptions(1, 1000);
  o.memory_bytes = 1000;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.dim = 0;
  o.memory_bytes = 1 << 20;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.dim = 4;
  o.num_vws = 0;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.num_vws = 1;
  o.optimizer.beta1 = 1.0;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(SparseTable, AMemoryOnlyTableRefusesAStepThatOverflowsItsBudget) {
  SparseTableOptions o = TableOptions(1, 2);
  auto probe = OpenTable(o);
  o.memory_bytes = 2 * probe->RowBytes();
  auto t = OpenTable(o);
  const std::vector<uint64_t> ids = {1, 2, 3};
  const std::vector<float> g(6, 1.0f);
  ASSERT_TRUE(t->Push(Step(0), Block{0, 1}, ids.data(), 3, g.data(), 6).ok());
  EXPECT_EQ(t->ApplyStep(0.1).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(t->version(), Step(0));
  EXPECT_EQ(t->stats().cached_rows, 0u);
  EXPECT_EQ(t->Checkpoint().code(), StatusCode::kFailedPrecondition);
}

TEST(SparseTable, AStoreOfAnotherTableShapeIsFailedPrecondition) {
  TempDir dir;
  SparseTableOptions o = TableOptions(1, 4);
  o.path = dir.path();
  { auto t = OpenTable(o); }
  o.dim = 5;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kFailedPrecondition);
  o.dim = 4;
  o.seed = 1;
  EXPECT_EQ(SparseTable::Open(o).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace eps
