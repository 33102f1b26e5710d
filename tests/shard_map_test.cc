#include "common/shard_map.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "common/layout.h"

namespace eps {
namespace {

std::vector<ShardId> Ids(std::initializer_list<uint32_t> ids) {
  std::vector<ShardId> out;
  for (uint32_t i : ids) out.push_back(ShardId(i));
  return out;
}

uint64_t Sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), 0ull); }

std::map<ShardId, uint64_t> ChunkLoad(const ShardMap& m, const std::vector<uint64_t>& bytes) {
  std::map<ShardId, uint64_t> load;
  for (size_t c = 0; c < bytes.size(); ++c) load[m.chunk_owner[c]] += bytes[c];
  return load;
}

std::map<ShardId, uint32_t> PartitionCount(const ShardMap& m) {
  std::map<ShardId, uint32_t> n;
  for (ShardId s : m.partition_owner) ++n[s];
  return n;
}

// A model as users bring it: mostly full 4 MiB chunks, and the tails of the
// tensors, smaller.
std::vector<uint64_t> ModelChunks() {
  std::vector<uint64_t> bytes;
  for (int t = 0; t < 40; ++t) {
    for (int c = 0; c < 5; ++c) bytes.push_back(uint64_t{4} << 20);
    bytes.push_back(uint64_t(1000 + 37 * t) * 4);
  }
  return bytes;
}

TEST(ShardMap, TheFirstMapSpreadsChunksAsTheLayoutAlwaysDidAndRowsByTheirId) {
  const std::vector<uint64_t> bytes = {400, 100, 100, 100, 300};
  ShardMap m = InitialShardMap(bytes, 2);
  EXPECT_EQ(m.generation, 0u);
  EXPECT_EQ(m.chunk_owner, Ids({0, 1, 1, 1, 1}));
  for (uint64_t row : {0ull, 1ull, 7ull, 4096ull + 3, (1ull << 40) + 5}) {
    EXPECT_EQ(m.OwnerOfRow(row), ShardId(row % 2)) << row;
    EXPECT_EQ(InitialShardMap(bytes, 4).OwnerOfRow(row), ShardId(row % 4)) << row;
  }
  EXPECT_EQ(m.Shards(), Ids({0, 1}));
  EXPECT_EQ(m.IdBound(), 2u);
  EXPECT_TRUE(m.Validate(bytes.size()).ok());
}

TEST(ShardMap, OneShardAddedTakesAboutItsShareAndNoMore) {
  const std::vector<uint64_t> bytes = ModelChunks();
  for (uint32_t n = 1; n <= 8; ++n) {
    ShardMap from = InitialShardMap(bytes, n);
    std::vector<ShardId> shards;
    for (uint32_t s = 0; s <= n; ++s) shards.push_back(ShardId(s));
    StatusOr<ShardMap> to = Rebalance(from, bytes, shards);
    ASSERT_TRUE(to.ok()) << to.status().ToString();
    EXPECT_EQ(to->generation, 1u);
    const ShardMoves moves = MovesBetween(from, *to, bytes);
    // The bound: within 1.2x of the state over the new number of shards.
    EXPECT_LE(static_cast<double>(moves.chunk_bytes), 1.2 * Sum(bytes) / (n + 1)) << n;
    EXPECT_LE(moves.partitions.size(), kRowPartitions / (n + 1) + 1) << n;
    // Everything that moved went to the new shard.
    for (ChunkId c : moves.chunks) EXPECT_EQ(to->chunk_owner[c.value()], ShardId(n));
    for (uint32_t p : moves.partitions) EXPECT_EQ(to->partition_owner[p], ShardId(n));
    // And the result is balanced: no shard over its share by more than a chunk.
    for (auto [s, load] : ChunkLoad(*to, bytes)) {
      EXPECT_LE(load, Sum(bytes) / (n + 1) + (uint64_t{4} << 20)) << n << " shard " << s;
    }
    for (auto [s, count] : PartitionCount(*to)) {
      EXPECT_GE(count, kRowPartitions / (n + 1)) << n;
      EXPECT_LE(count, kRowPartitions / (n + 1) + 1) << n;
    }
  }
}

TEST(ShardMap, ARemovedShardsStateIsAllThatMoves) {
  const std::vector<uint64_t> bytes = ModelChunks();
  ShardMap from = InitialShardMap(bytes, 4);
  StatusOr<ShardMap> to = Rebalance(from, bytes, Ids({0, 2, 3}));
  ASSERT_TRUE(to.ok());
  const ShardMoves moves = MovesBetween(from, *to, bytes);
  uint64_t held = 0;
  for (size_t c = 0; c < bytes.size(); ++c) {
    if (from.chunk_owner[c] == ShardId(1)) held += bytes[c];
  }
  EXPECT_EQ(moves.chunk_bytes, held);
  EXPECT_EQ(moves.partitions.size(), kRowPartitions / 4);
  for (ChunkId c : moves.chunks) EXPECT_EQ(from.chunk_owner[c.value()], ShardId(1));
  EXPECT_EQ(to->Shards(), Ids({0, 2, 3}));
  EXPECT_EQ(to->IdBound(), 4u);  // a gap where shard 1 was
  EXPECT_TRUE(to->Validate(bytes.size()).ok());
}

TEST(ShardMap, TheSameArgumentsGiveTheSameMapAndAnUnchangedSetMovesNothing) {
  const std::vector<uint64_t> bytes = ModelChunks();
  ShardMap from = InitialShardMap(bytes, 3);
  StatusOr<ShardMap> a = Rebalance(from, bytes, Ids({3, 0, 1, 2}));
  StatusOr<ShardMap> b = Rebalance(from, bytes, Ids({0, 1, 2, 3}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  StatusOr<ShardMap> same = Rebalance(*a, bytes, Ids({0, 1, 2, 3}));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->generation, 2u);
  EXPECT_TRUE(MovesBetween(*a, *same, bytes).chunks.empty());
  EXPECT_TRUE(MovesBetween(*a, *same, bytes).partitions.empty());
}

TEST(ShardMap, GrowingAndShrinkingBackEndsBalancedWithinAChunk) {
  const std::vector<uint64_t> bytes = ModelChunks();
  ShardMap m = InitialShardMap(bytes, 2);
  for (auto shards : {Ids({0, 1, 2, 3}), Ids({0, 1, 3}), Ids({1, 3}), Ids({1, 3, 4, 5, 6})}) {
    StatusOr<ShardMap> next = Rebalance(m, bytes, shards);
    ASSERT_TRUE(next.ok());
    m = *next;
    EXPECT_EQ(m.Shards(), shards);
    for (auto [s, load] : ChunkLoad(m, bytes)) {
      EXPECT_LE(load, Sum(bytes) / shards.size() + (uint64_t{4} << 20)) << s;
    }
  }
}

TEST(ShardMap, BadMapsAndShardSetsAreRefused) {
  const std::vector<uint64_t> bytes = {10, 20};
  ShardMap m = InitialShardMap(bytes, 2);
  EXPECT_EQ(Rebalance(m, bytes, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Rebalance(m, bytes, Ids({0, 0})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Rebalance(m, bytes, Ids({kMaxShardId})).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Rebalance(m, {10}, Ids({0})).status().code(), StatusCode::kInvalidArgument);
  ShardMap orphan = m;
  orphan.chunk_owner[0] = ShardId(5);  // owns a chunk, no partition
  EXPECT_EQ(orphan.Validate(2).code(), StatusCode::kInvalidArgument);
  ShardMap short_map = m;
  short_map.partition_owner.pop_back();
  EXPECT_EQ(short_map.Validate(2).code(), StatusCode::kInvalidArgument);
}

TEST(ShardMap, ALayoutTakesAMapOfItsChunksOnly) {
  StatusOr<Layout> layout =
      MakeLayout({{"w", TensorKind::kParameter, DType::kFloat32, {10, 4}},
                  {"e", TensorKind::kParameter, DType::kFloat32, {100, 4}, true}},
                 2, 16);
  ASSERT_TRUE(layout.ok());
  StatusOr<ShardMap> three = Rebalance(layout->map, layout->ChunkSizes(), Ids({0, 1, 2}));
  ASSERT_TRUE(three.ok());
  ASSERT_TRUE(layout->SetShardMap(*three).ok());
  EXPECT_EQ(layout->num_shards, 3u);
  for (const Chunk& c : layout->chunks) EXPECT_EQ(c.shard, three->chunk_owner[c.id.value()]);
  for (uint64_t row = 0; row < 100; ++row)
    EXPECT_EQ(layout->ShardOfRow(row), three->OwnerOfRow(row));
  ShardMap wrong = *three;
  wrong.chunk_owner.push_back(ShardId(0));
  EXPECT_EQ(layout->SetShardMap(wrong).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
