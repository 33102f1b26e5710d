// How a worker cuts its pulls of a version into groups (common/pull_groups.h, PullGroupsOf).
#include "common/pull_groups.h"

#include <gtest/gtest.h>

#include <set>

#include "common/layout.h"

namespace eps {
namespace {

Layout LayoutOf(int64_t parameters, uint32_t shards, int64_t chunk_elems) {
  std::vector<TensorSpec> tensors = {
      {"w", TensorKind::kParameter, DType::kFloat32, {parameters}},
      {"running_mean", TensorKind::kBuffer, DType::kFloat32, {16}},
  };
  auto layout = MakeLayout(std::move(tensors), shards, chunk_elems);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

// Every pulled chunk of shard s once: parameters last chunk first, then the buffers in a group of
// their own.
void ExpectEveryChunkOnce(const Layout& layout,
                          const std::vector<std::vector<std::vector<ChunkId>>>& groups) {
  for (uint32_t s = 0; s < layout.num_shards; ++s) {
    std::set<uint32_t> seen;
    uint32_t previous = ~0u;
    for (const auto& group : groups[s]) {
      for (ChunkId c : group) {
        EXPECT_TRUE(seen.insert(c.value()).second);
        EXPECT_EQ(layout.chunks[c.value()].shard.value(), s);
        if (layout.tensors[layout.chunks[c.value()].tensor].kind == TensorKind::kParameter) {
          EXPECT_LT(c.value(), previous);  // backward order
          previous = c.value();
        }
      }
    }
    size_t pulled = 0;
    for (const Chunk& c : layout.chunks) {
      pulled += c.shard.value() == s && layout.tensors[c.tensor].kind != TensorKind::kLoss;
    }
    EXPECT_EQ(seen.size(), pulled);
  }
}

TEST(PullGroups, ASmallModelIsPulledInGroupsOfTheEagerPushesSize) {
  // 4 MiB of parameters on one shard in 64 KiB chunks: groups of 256 KiB, then the buffers.
  const Layout layout = LayoutOf(1 << 20, 1, 16 << 10);
  const auto groups = PullGroupsOf(layout, WireDType::kFP32, {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].size(), 16u + 1u);
  EXPECT_EQ(groups[0].front().size(), 4u);
  ExpectEveryChunkOnce(layout, groups);
}

// A shard holds at most 64 waiting pulls of a peer and refuses the next: a 108 M-parameter
// model in 256 KiB groups was 1,700 pulls, every prefetch was refused, and the worker dropped
// its run ahead every step (and pulled the whole model again on a new connection).
TEST(PullGroups, ALargeModelIsPulledInAtMostMaxPullGroupsPerShard) {
  for (uint32_t shards : {1u, 2u, 3u}) {
    const Layout layout = LayoutOf(int64_t{108} << 20, shards, 1 << 20);
    for (WireDType wire : {WireDType::kFP32, WireDType::kBF16}) {
      const auto groups = PullGroupsOf(layout, wire, {});
      ASSERT_EQ(groups.size(), shards);
      for (const auto& of_shard : groups) {
        EXPECT_LE(of_shard.size(), kMaxPullGroups);
        EXPECT_GE(of_shard.size(), kMaxPullGroups / 2 / shards);  // still cut, for the overlap
      }
      ExpectEveryChunkOnce(layout, groups);
    }
  }
}

TEST(PullGroups, FrozenTensorsAreNotPulled) {
  const Layout layout = LayoutOf(1 << 20, 2, 16 << 10);
  const auto groups = PullGroupsOf(layout, WireDType::kFP32, {1, 0});  // "w" frozen
  for (const auto& of_shard : groups) {
    for (const auto& group : of_shard) {
      for (ChunkId c : group) {
        EXPECT_EQ(layout.tensors[layout.chunks[c.value()].tensor].kind, TensorKind::kBuffer);
      }
    }
  }
}

}  // namespace
}  // namespace eps
