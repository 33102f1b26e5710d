#include "server/row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace eps {
namespace {

// Fills a row's floats with a pattern of its id.
void Fill(RowCache* cache, RowCache::Slot slot, uint64_t id, size_t floats) {
  for (size_t i = 0; i < floats; ++i) cache->data(slot)[i] = static_cast<float>(id * 100 + i);
}

TEST(RowCache, RowsStayWhereTheyAreWhileOthersComeAndGo) {
  const size_t floats = 5;
  RowCache cache(floats);
  std::vector<RowCache::Slot> slots;
  std::vector<const float*> where;
  for (uint64_t id = 0; id < 40 * RowCache::kChunkSlots + 7; ++id) {  // heap and huge chunks
    slots.push_back(cache.Insert(id * 977));
    Fill(&cache, slots.back(), id, floats);
    cache.fields(slots.back()).version = static_cast<int64_t>(id);
    where.push_back(cache.data(slots.back()));
  }
  for (uint64_t id = 0; id < slots.size(); id += 2) cache.Erase(slots[id]);
  for (uint64_t id = 0; id < 100; ++id) Fill(&cache, cache.Insert(1'000'000 + id), id, floats);
  EXPECT_EQ(cache.size(), slots.size() - (slots.size() + 1) / 2 + 100);
  for (uint64_t id = 1; id < slots.size(); id += 2) {
    const RowCache::Slot slot = cache.Find(id * 977);
    ASSERT_EQ(slot, slots[id]);
    EXPECT_EQ(cache.data(slot), where[id]);  // not moved by the growth
    EXPECT_EQ(cache.fields(slot).id, id * 977);
    EXPECT_EQ(cache.fields(slot).version, static_cast<int64_t>(id));
    for (size_t i = 0; i < floats; ++i)
      EXPECT_EQ(cache.data(slot)[i], static_cast<float>(id * 100 + i));
  }
  EXPECT_EQ(cache.Find(0), RowCache::kNone);  // erased
  // Many at once, as one by one: fewer ids than it fetches ahead, and more.
  for (size_t n : {size_t{3}, slots.size()}) {
    std::vector<uint64_t> ids;
    for (uint64_t id = 0; id < n; ++id) ids.push_back(id * 977);
    std::vector<RowCache::Slot> found(n, 12345);
    cache.FindAll(ids.data(), n, found.data());
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(found[i], cache.Find(ids[i])) << i;
  }
  size_t visited = 0;
  cache.ForEach([&](RowCache::Slot s) { visited += cache.fields(s).live ? 1 : 0; });
  EXPECT_EQ(visited, cache.size());
}

// Rows are evicted in the order they were put, but for those used since they last came to the
// front, which go to the end; a row put into a slot erased earlier waits behind every other.
TEST(RowCache, RowsLeaveInTheOrderTheyCameButUsedOnesGetASecondChance) {
  RowCache cache(1);
  for (uint64_t id = 10; id < 16; ++id) cache.Insert(id);
  cache.fields(cache.Find(10)).used = true;
  cache.fields(cache.Find(12)).used = true;
  cache.Erase(cache.Find(15));
  std::vector<uint64_t> order;
  auto evict = [&] {
    const RowCache::Slot victim = cache.Victim();
    order.push_back(cache.fields(victim).id);
    cache.Erase(victim);
  };
  evict();           // 10 to the end (used), 11 goes
  cache.Insert(20);  // into 11's slot, behind 10
  cache.Insert(21);  // into 15's slot: its old place in the queue is not its own
  evict();           // 12 to the end, 13 goes
  evict();           // 14
  evict();           // 10, its chance spent
  evict();           // then 20, 21
  evict();
  EXPECT_EQ(order, (std::vector<uint64_t>{11, 13, 14, 10, 20, 21}));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.Find(12), RowCache::kNone);
  cache.Clear();
  EXPECT_TRUE(cache.empty());
  EXPECT_EQ(cache.Find(12), RowCache::kNone);
  const RowCache::Slot again = cache.Insert(12);
  EXPECT_FALSE(cache.fields(again).used);
  EXPECT_EQ(cache.Victim(), again);
}

// Rows erased in bulk (a move of shard state) leave stale queue entries behind, dropped once they
// outnumber the rows: the rows left still leave in the order they came.
TEST(RowCache, RowsErasedInBulkLeaveTheOthersInTheirOrder) {
  RowCache cache(2);
  for (int round = 0; round < 50; ++round) {
    for (uint64_t id = 0; id < 100; ++id) cache.Insert(round * 1000 + id);
    cache.ForEach([&](RowCache::Slot s) {
      if (cache.fields(s).id % 1000 >= 2) cache.Erase(s);
    });
  }
  ASSERT_EQ(cache.size(), 100u);  // ids 0 and 1 of each round
  std::vector<uint64_t> order;
  while (!cache.empty()) {
    const RowCache::Slot victim = cache.Victim();
    order.push_back(cache.fields(victim).id);
    cache.Erase(victim);
  }
  std::vector<uint64_t> expected;
  for (uint64_t round = 0; round < 50; ++round) {
    expected.push_back(round * 1000);
    expected.push_back(round * 1000 + 1);
  }
  EXPECT_EQ(order, expected);
}

}  // namespace
}  // namespace eps
