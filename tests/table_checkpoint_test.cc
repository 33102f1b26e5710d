// A sparse table's checkpoint read from its store a page at a time
// (server/table_checkpoint.h): pages that go on from the row after the last
// one give the whole checkpoint once, in order, with the weights the table
// serves at that version; an unheld step, another table's store, a missing
// store and a damaged record are clear errors.
#include "server/table_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "server/sparse_record.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

constexpr size_t kDim = 3;

SparseTableOptions Options(const std::string& path) {
  SparseTableOptions o;
  o.table_id = 1;
  o.dim = kDim;
  o.num_vws = 1;
  o.seed = 5;
  o.path = path;
  o.optimizer.kind = SparseOptimizerOptions::Kind::kAdam;  // slots in every record
  return o;
}

struct Scanned {
  std::vector<uint64_t> ids;
  std::vector<float> weights;
};

// Every row of `checkpoint`, in pages of `page` rows.
Scanned ScanAll(const TableCheckpoint& checkpoint, uint64_t page, int* pages) {
  Scanned out;
  uint64_t from = 0;
  *pages = 0;
  while (true) {
    auto n = checkpoint.Scan(from, page, [&](uint64_t row, const float* w) {
      out.ids.push_back(row);
      out.weights.insert(out.weights.end(), w, w + kDim);
    });
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok()) return out;
    ++*pages;
    EXPECT_LE(*n, page);
    if (*n < page) return out;
    from = out.ids.back() + 1;
  }
}

TEST(TableCheckpoint, PagesFromTheRowAfterTheLastGiveEveryRowOnceInOrderAsTheTableServedThem) {
  TempDir dir;
  const SparseTableOptions o = Options(dir.path());
  auto table = SparseTable::Open(o);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  // Step 0 touches 40 rows, step 1 20 of them and 10 more: 50 stored rows at step 2.
  std::vector<uint64_t> step0, step1;
  for (uint64_t i = 0; i < 40; ++i) step0.push_back(i * 37 + 3);
  for (uint64_t i = 0; i < 30; ++i) step1.push_back(i < 20 ? step0[2 * i] : 5000 + i);
  std::sort(step1.begin(), step1.end());
  for (const auto& [step, ids] : {std::pair{0, &step0}, std::pair{1, &step1}}) {
    std::vector<float> grads(ids->size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    ASSERT_TRUE(
        (*table)
            ->Push(Step(step), Block{0, 1}, ids->data(), ids->size(), grads.data(), grads.size())
            .ok());
    ASSERT_TRUE((*table)->ApplyStep(0.1).ok());
    ASSERT_TRUE((*table)->Checkpoint().ok());
  }
  std::vector<uint64_t> stored = step0;
  stored.insert(stored.end(), step1.begin() + 20, step1.end());
  std::sort(stored.begin(), stored.end());
  std::vector<float> served(stored.size() * kDim);
  ASSERT_TRUE((*table)->Read(stored.data(), stored.size(), served.data()).ok());

  auto checkpoint = TableCheckpoint::Open(o, Step(2));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  for (uint64_t page : {uint64_t{1}, uint64_t{7}, uint64_t{50}, uint64_t{64}}) {
    SCOPED_TRACE("pages of " + std::to_string(page));
    int pages = 0;
    const Scanned got = ScanAll(**checkpoint, page, &pages);
    EXPECT_EQ(got.ids, stored);
    EXPECT_EQ(got.weights, served);
    EXPECT_EQ(pages, static_cast<int>(stored.size() / page + 1));
  }
  // The checkpoint of step 1 holds step 0's rows as step 0 left them.
  auto older = TableCheckpoint::Open(o, Step(1));
  ASSERT_TRUE(older.ok());
  int pages = 0;
  const Scanned before = ScanAll(**older, 16, &pages);
  EXPECT_EQ(before.ids, step0);
  EXPECT_NE(before.weights, std::vector<float>(served.begin(), served.begin() + 40 * kDim));
}

TEST(TableCheckpoint, AnUnheldStepAnotherTablesStoreNoStoreAndADamagedRecordAreClearErrors) {
  TempDir dir;
  const SparseTableOptions o = Options(dir.path());
  {
    auto store = SparseRowStore::Open(StoreOptionsOf(o));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    RowRecord good;
    good.data.assign(kDim * 3, 1.5f);
    ASSERT_TRUE((*store)->WriteCheckpoint(Step(4), {{1, EncodeRow(good)}, {9, "short"}}, {}).ok());
  }
  auto held = TableCheckpoint::Open(o, Step(4));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::vector<uint64_t> rows;
  auto fn = [&](uint64_t row, const float*) { rows.push_back(row); };
  EXPECT_EQ(*(*held)->Scan(0, 1, fn), 1u);  // a page that ends before the damage
  EXPECT_EQ((*held)->Scan(0, 10, fn).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(rows, (std::vector<uint64_t>{1, 1}));

  auto unheld = TableCheckpoint::Open(o, Step(3));
  ASSERT_TRUE(unheld.ok());
  EXPECT_EQ((*unheld)->Scan(0, 10, fn).status().code(), StatusCode::kNotFound);

  SparseTableOptions other = o;
  other.dim = kDim + 1;
  EXPECT_EQ(TableCheckpoint::Open(other, Step(4)).status().code(), StatusCode::kFailedPrecondition);
  other = o;
  other.path = dir.path() + "/none";
  EXPECT_EQ(TableCheckpoint::Open(other, Step(4)).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace eps
