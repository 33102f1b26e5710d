// Tests for the chunk map (common/layout.h): every element in exactly one chunk,
// dense ids in model order, balanced shards, same map on every process, and
// refusal of tensor lists no job can train.
#include "common/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace eps {
namespace {

TensorSpec Param(std::string name, std::vector<int64_t> shape) {
  return {std::move(name), TensorKind::kParameter, DType::kFloat32, std::move(shape)};
}
TensorSpec Buffer(std::string name, std::vector<int64_t> shape, DType dtype = DType::kFloat32) {
  return {std::move(name), TensorKind::kBuffer, dtype, std::move(shape)};
}

std::vector<TensorSpec> SmallModel() {
  return {Param("conv.weight", {8, 3, 3, 3}),  // 216
          Param("conv.bias", {8}),
          Param("fc.weight", {10, 37}),  // 370
          Param("fc.bias", {10}),
          Buffer("bn.running_mean", {8}),
          Buffer("bn.num_batches_tracked", {}, DType::kInt64),
          LossTensor()};
}

// Checks that the chunks tile every tensor exactly once, in order, with dense ids.
void ExpectExactCover(const Layout& layout, int64_t chunk_elems) {
  size_t expected_chunks = 0;
  for (const TensorSpec& t : layout.tensors)
    expected_chunks += (t.numel() + chunk_elems - 1) / chunk_elems;
  ASSERT_EQ(layout.chunks.size(), expected_chunks);
  uint32_t tensor = 0;
  int64_t next = 0;  // next element of `tensor` to be covered
  for (size_t i = 0; i < layout.chunks.size(); ++i) {
    const Chunk& c = layout.chunks[i];
    EXPECT_EQ(c.id, ChunkId(static_cast<uint32_t>(i)));
    if (c.tensor != tensor) {
      EXPECT_EQ(next, layout.tensors[tensor].numel())
          << "tensor " << tensor << " not fully covered";
      EXPECT_EQ(c.tensor, tensor + 1) << "chunks out of model order at " << i;
      tensor = c.tensor;
      next = 0;
    }
    ASSERT_LT(c.tensor, layout.tensors.size());
    EXPECT_EQ(c.offset, next) << "gap or overlap at chunk " << i;
    EXPECT_GT(c.numel, 0);
    EXPECT_LE(c.numel, chunk_elems);
    EXPECT_LT(c.shard.value(), layout.num_shards);
    EXPECT_EQ(layout.ChunkBytes(c),
              static_cast<size_t>(c.numel) * DTypeSize(layout.tensors[c.tensor].dtype));
    next = c.offset + c.numel;
  }
  EXPECT_EQ(tensor + 1, layout.tensors.size());
  EXPECT_EQ(next, layout.tensors.back().numel());
}

TEST(Layout, ChunksCoverEveryElementExactlyOnceWithDenseIdsInOrder) {
  for (int64_t chunk_elems : {1, 7, 8, 100, 216, 1000}) {
    for (uint32_t shards : {1u, 2u, 3u, 5u}) {
      SCOPED_TRACE("chunk_elems=" + std::to_string(chunk_elems) +
                   " shards=" + std::to_string(shards));
      auto layout = MakeLayout(SmallModel(), shards, chunk_elems);
      ASSERT_TRUE(layout.ok()) << layout.status().ToString();
      EXPECT_EQ(layout->num_shards, shards);
      EXPECT_EQ(layout->tensors, SmallModel());
      ExpectExactCover(*layout, chunk_elems);
      // Every chunk belongs to exactly one shard's list.
      std::vector<int> seen(layout->chunks.size(), 0);
      for (uint32_t s = 0; s < shards; ++s) {
        for (ChunkId id : layout->ChunksOf(ShardId(s))) {
          ASSERT_LT(id.value(), seen.size());
          EXPECT_EQ(layout->chunks[id.value()].shard, ShardId(s));
          ++seen[id.value()];
        }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
  }
}

TEST(Layout, TensorIsCutIntoFullChunksAndOneRemainder) {
  auto layout = MakeLayout({Param("w", {5, 5})}, 2, 10);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->chunks.size(), 3u);
  EXPECT_EQ(layout->chunks[0].offset, 0);
  EXPECT_EQ(layout->chunks[0].numel, 10);
  EXPECT_EQ(layout->chunks[1].offset, 10);
  EXPECT_EQ(layout->chunks[1].numel, 10);
  EXPECT_EQ(layout->chunks[2].offset, 20);
  EXPECT_EQ(layout->chunks[2].numel, 5);
  // Fewest bytes first, lowest shard id on ties.
  EXPECT_EQ(layout->chunks[0].shard, ShardId(0));
  EXPECT_EQ(layout->chunks[1].shard, ShardId(1));
  EXPECT_EQ(layout->chunks[2].shard, ShardId(0));
}

TEST(Layout, ShardsHoldBytesWithinOneChunkOfEachOther) {
  for (uint32_t shards : {2u, 3u, 7u}) {
    for (int64_t numel : {10, 25, 64}) {
      std::vector<TensorSpec> tensors;
      for (int i = 0; i < 100; ++i) tensors.push_back(Param("t" + std::to_string(i), {numel}));
      auto layout = MakeLayout(tensors, shards, 10);
      ASSERT_TRUE(layout.ok());
      std::vector<size_t> bytes(shards, 0);
      size_t biggest_chunk = 0;
      for (const Chunk& c : layout->chunks) {
        bytes[c.shard.value()] += layout->ChunkBytes(c);
        biggest_chunk = std::max(biggest_chunk, layout->ChunkBytes(c));
      }
      const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
      EXPECT_GT(*lo, 0u);
      EXPECT_LE(*hi - *lo, biggest_chunk) << "shards=" << shards << " numel=" << numel;
    }
  }
}

TEST(Layout, SameInputsGiveSameChunkMap) {
  auto a = MakeLayout(SmallModel(), 3, 50);
  auto b = MakeLayout(SmallModel(), 3, 50);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->chunks.size(), b->chunks.size());
  for (size_t i = 0; i < a->chunks.size(); ++i) {
    EXPECT_EQ(a->chunks[i].id, b->chunks[i].id);
    EXPECT_EQ(a->chunks[i].tensor, b->chunks[i].tensor);
    EXPECT_EQ(a->chunks[i].offset, b->chunks[i].offset);
    EXPECT_EQ(a->chunks[i].numel, b->chunks[i].numel);
    EXPECT_EQ(a->chunks[i].shard, b->chunks[i].shard);
  }
}

TEST(Layout, CountsParametersAndSizesInt64Buffers) {
  auto layout = MakeLayout(SmallModel(), 1, 1 << 20);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->NumParameters(), 216 + 8 + 370 + 10);
  const Chunk& steps = layout->chunks[5];
  EXPECT_EQ(layout->tensors[steps.tensor].name, "bn.num_batches_tracked");
  EXPECT_EQ(steps.numel, 1);
  EXPECT_EQ(layout->ChunkBytes(steps), 8u);
  EXPECT_EQ(LossTensor().kind, TensorKind::kLoss);
  EXPECT_EQ(LossTensor().numel(), 1);
}

TEST(Layout, RejectsListsNoJobCanTrain) {
  auto expect_invalid = [](std::vector<TensorSpec> tensors, uint32_t shards, int64_t chunk_elems,
                           const char* why) {
    auto layout = MakeLayout(std::move(tensors), shards, chunk_elems);
    ASSERT_FALSE(layout.ok()) << why;
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument) << why;
  };
  expect_invalid(SmallModel(), 0, 10, "zero shards");
  expect_invalid(SmallModel(), 2, 0, "zero chunk_elems");
  expect_invalid(SmallModel(), 2, -4, "negative chunk_elems");
  expect_invalid({}, 2, 10, "no tensors");
  expect_invalid({Param("w", {3}), Param("w", {4})}, 2, 10, "duplicate names");
  expect_invalid({Param("w", {3}), Buffer("w", {4})}, 2, 10, "duplicate names across kinds");
  expect_invalid({Param("", {3})}, 2, 10, "empty name");
  expect_invalid({Param("w", {3, 0})}, 2, 10, "zero dim");
  expect_invalid({Param("w", {-2, 3})}, 2, 10, "negative dim");
  expect_invalid({Param("w", {int64_t{1} << 32, int64_t{1} << 32})}, 2, 10, "overflowing shape");
  expect_invalid({Param("w", {1, 1, 1, 1, 1, 1, 1, 1, 1})}, 2, 10, "nine dims");
  expect_invalid({TensorSpec{"w", TensorKind::kParameter, DType::kInt64, {3}}}, 2, 10,
                 "int64 parameter");
  expect_invalid(
      {Param("w", {3}), LossTensor(), TensorSpec{"loss2", TensorKind::kLoss, DType::kFloat32, {1}}},
      2, 10, "two loss tensors");
  expect_invalid({TensorSpec{"loss", TensorKind::kLoss, DType::kFloat32, {2}}}, 2, 10,
                 "loss of two elements");
  expect_invalid({TensorSpec{"loss", TensorKind::kLoss, DType::kInt64, {1}}}, 2, 10, "int64 loss");
  // A worker reporting huge shapes (fuzz/corpus/job_state/crash-huge-model): 2^38 chunks.
  expect_invalid({Param("w", {int64_t{1} << 40})}, 1, 4, "more than kMaxChunks chunks");
  expect_invalid({Param("w", {int64_t{kMaxChunks}}), Param("v", {1})}, 1, 1, "kMaxChunks + 1 chunks");
  EXPECT_TRUE(MakeLayout({Param("w", {int64_t{kMaxChunks} - 1}), Param("v", {1})}, 1, 1).ok());

  // The same lists, repaired, are accepted: the rejections above are about what they name.
  EXPECT_TRUE(MakeLayout({Param("w", {3}), Param("v", {4})}, 2, 10).ok());
  EXPECT_TRUE(
      MakeLayout({Param("w", {3}), Buffer("steps", {1}, DType::kInt64), LossTensor()}, 1, 1).ok());
  EXPECT_TRUE(MakeLayout({Param("w", {1, 1, 1, 1, 1, 1, 1, 1})}, 1, 1).ok());
}

// A sparse table of 0 rows has unbounded keys: no chunks, no parameters counted, ids below
// 2^63 - 1; 0 rows are a table's only (a dense tensor, or a table of 0 columns, is refused).
TEST(Layout, ASparseTableOfZeroRowsHasUnboundedKeys) {
  TensorSpec table = Param("emb", {0, 16});
  table.sparse = true;
  auto layout = MakeLayout({Param("w", {3}), table}, 2, 10);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->sparse, std::vector<uint32_t>{1});
  EXPECT_EQ(layout->chunks.size(), 1u);
  EXPECT_EQ(layout->NumParameters(), 3);
  const TensorSpec& t = layout->tensors[1];
  EXPECT_TRUE(t.unbounded());
  EXPECT_EQ(t.RowBound(), uint64_t(std::numeric_limits<int64_t>::max()));
  TensorSpec bounded = Param("emb", {1000, 16});
  bounded.sparse = true;
  EXPECT_FALSE(bounded.unbounded());
  EXPECT_EQ(bounded.RowBound(), 1000u);
  EXPECT_FALSE(MakeLayout({Param("emb", {0, 16})}, 1, 10).ok());  // not sparse
  TensorSpec flat = Param("emb", {16, 0});
  flat.sparse = true;
  EXPECT_FALSE(MakeLayout({flat}, 1, 10).ok());
}

}  // namespace
}  // namespace eps
