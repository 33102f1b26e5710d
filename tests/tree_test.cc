// Tests for the canonical pairwise reduction tree (common/tree.h): a range of
// VWs cut into aligned blocks, pre-summed per block and reduced on the shard in
// any order, must give the bits of the reference tree written here from the
// definition in docs/design.md ("The consistency contract", rule 5).
#include "common/tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace eps {
namespace {

using Leaves = std::vector<std::vector<float>>;

// Deterministic helpers on top of mt19937_64 (whose output the standard fixes);
// the standard distributions and std::shuffle are implementation-defined.
uint64_t Below(std::mt19937_64& rng, uint64_t n) { return rng() % n; }

template <class T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(rng, i)]);
}

// Floats of wildly different magnitudes and both signs, so that the order of
// additions shows in the bits.
Leaves RandomLeaves(uint32_t v, size_t n, std::mt19937_64& rng) {
  Leaves leaves(v, std::vector<float>(n));
  for (auto& leaf : leaves) {
    for (float& x : leaf) {
      const double mantissa =
          1.0 + static_cast<double>(rng() >> 11) / 9007199254740992.0;  // [1, 2)
      const int exponent = static_cast<int>(Below(rng, 49)) - 24;       // [-24, 24]
      x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, exponent));
    }
  }
  return leaves;
}

// The reference: the value of node [lo, lo+size) of the balanced tree over
// TreeWidth(V) leaves; an absent right subtree leaves the left value unchanged;
// otherwise node = left + right, in that order.
// With a compressed wire dtype every node, leaves included, is rounded to it
// once formed (wire.h).
std::vector<float> ReferenceNode(const Leaves& leaves, uint32_t lo, uint32_t size,
                                 WireDType rounding = WireDType::kFP32) {
  const uint32_t v = static_cast<uint32_t>(leaves.size());
  if (size == 1) {
    std::vector<float> leaf = leaves[lo];
    RoundToWire(rounding, leaf.data(), leaf.size());
    return leaf;
  }
  std::vector<float> left = ReferenceNode(leaves, lo, size / 2, rounding);
  if (lo + size / 2 >= v) return left;
  const std::vector<float> right = ReferenceNode(leaves, lo + size / 2, size / 2, rounding);
  for (size_t i = 0; i < left.size(); ++i) left[i] = left[i] + right[i];
  RoundToWire(rounding, left.data(), left.size());
  return left;
}

std::vector<float> Reference(const Leaves& leaves, WireDType rounding = WireDType::kFP32) {
  return ReferenceNode(leaves, 0, TreeWidth(static_cast<uint32_t>(leaves.size())), rounding);
}

std::vector<float> SequentialSum(const Leaves& leaves) {
  std::vector<float> acc = leaves[0];
  for (size_t v = 1; v < leaves.size(); ++v) {
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + leaves[v][i];
  }
  return acc;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A random split of [0, v) into contiguous non-empty ranges.
std::vector<std::pair<uint32_t, uint32_t>> RandomSplit(uint32_t v, std::mt19937_64& rng) {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint32_t lo = 0;
  while (lo < v) {
    const uint32_t hi = lo + 1 + static_cast<uint32_t>(Below(rng, v - lo));
    ranges.push_back({lo, hi});
    lo = hi;
  }
  return ranges;
}

std::vector<Block> Blocks(std::initializer_list<std::pair<uint32_t, uint32_t>> lo_hi) {
  std::vector<Block> out;
  for (auto [lo, hi] : lo_hi) out.push_back(Block{lo, hi - lo});
  return out;
}

std::string Describe(const std::vector<Block>& blocks) {
  std::string s;
  for (const Block& b : blocks) s += b.ToString();
  return s;
}

constexpr size_t kElems = 64;

TEST(TreeReduce, ReferenceDiffersFromSequentialSumSoOrderIsObservable) {
  std::mt19937_64 rng(7);
  for (uint32_t v : {4u, 5u, 6u, 7u, 8u, 13u, 16u, 33u}) {
    const Leaves leaves = RandomLeaves(v, kElems, rng);
    EXPECT_FALSE(SameBits(Reference(leaves), SequentialSum(leaves))) << "V=" << v;
  }
}

// Every split of [0, V) into worker ranges, each pre-summed per aligned block
// in any leaf order, then reduced on the shard in any order, gives the
// reference bits; with a compressed wire dtype too (each pushed partial is then
// exactly representable in it, so it travels without further loss).
class TreeReduceSplits : public ::testing::TestWithParam<WireDType> {};

TEST_P(TreeReduceSplits, PartialBlocksGiveSameBitsAsLeavesForEverySplitAndOrder) {
  const WireDType rounding = GetParam();
  std::mt19937_64 rng(42);
  for (uint32_t v : {1u, 2u, 3u, 5u, 6u, 7u, 8u, 13u, 16u, 33u}) {
    const Leaves leaves = RandomLeaves(v, kElems, rng);
    const std::vector<float> expected = Reference(leaves, rounding);
    if (rounding != WireDType::kFP32 && v > 1) {
      EXPECT_FALSE(SameBits(expected, Reference(leaves)))
          << "rounding must show in the bits, V=" << v;
    }
    for (int trial = 0; trial < 40; ++trial) {
      SCOPED_TRACE("V=" + std::to_string(v) + " trial " + std::to_string(trial));
      std::vector<std::pair<Block, std::vector<uint8_t>>> partials;  // as pushed, in the wire dtype
      for (auto [lo, hi] : RandomSplit(v, rng)) {
        for (const Block& block : AlignedBlocks(lo, hi)) {
          TreeReducer worker(block, v, kElems, rounding);
          std::vector<uint32_t> order;
          for (uint32_t leaf = block.lo; leaf < std::min(block.hi(), v); ++leaf)
            order.push_back(leaf);
          if (trial % 2 == 1) Shuffle(order, rng);
          for (size_t k = 0; k < order.size(); ++k) {
            EXPECT_FALSE(worker.complete());
            if (k % 2 == 0) {
              ASSERT_TRUE(worker.Add(Block{order[k], 1}, leaves[order[k]]).ok());
            } else {
              ASSERT_TRUE(worker.Add(Block{order[k], 1}, leaves[order[k]].data(), kElems).ok());
            }
          }
          ASSERT_TRUE(worker.complete()) << block.ToString();
          std::vector<float> partial = worker.TakeResult();
          ASSERT_TRUE(SameBits(partial, ReferenceNode(leaves, block.lo, block.size, rounding)))
              << block.ToString();
          std::vector<uint8_t> wire(kElems *
                                    WireDTypeSize(rounding));  // the wire carries it exactly
          EncodeWire(rounding, partial.data(), kElems, wire.data());
          partials.push_back({block, std::move(wire)});
        }
      }
      Shuffle(partials, rng);
      TreeReducer shard(Block{0, TreeWidth(v)}, v, kElems, rounding);
      for (auto& [block, wire] : partials) {
        EXPECT_FALSE(shard.complete());
        if (trial % 2 == 0) {
          ASSERT_TRUE(shard.AddWire(block, wire.data(), kElems).ok()) << block.ToString();
        } else {  // decoded first: rounding them again changes nothing
          std::vector<float> value(kElems);
          DecodeWire(rounding, wire.data(), kElems, value.data());
          ASSERT_TRUE(shard.Add(block, std::move(value)).ok()) << block.ToString();
        }
      }
      ASSERT_TRUE(shard.complete());
      EXPECT_EQ(shard.counted(), v);
      EXPECT_TRUE(shard.Missing().empty());
      EXPECT_TRUE(SameBits(shard.TakeResult(), expected));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WireDTypes, TreeReduceSplits,
                         ::testing::Values(WireDType::kFP32, WireDType::kBF16, WireDType::kFP16),
                         [](const auto& info) { return std::string(WireDTypeName(info.param)); });

// A block's last leaf given range by range in any order (as backward hands a
// VW's gradients over, parameter by parameter) gives the bits of the whole leaf
// added, for every block of every split, with every wire dtype.
TEST_P(TreeReduceSplits, FinishingRangeByRangeGivesTheBitsOfAddingTheLastLeafWhole) {
  const WireDType rounding = GetParam();
  std::mt19937_64 rng(11);
  for (uint32_t v : {1u, 2u, 3u, 5u, 8u, 13u, 33u}) {
    const Leaves leaves = RandomLeaves(v, kElems, rng);
    for (int trial = 0; trial < 10; ++trial) {
      for (auto [lo, hi] : RandomSplit(v, rng)) {
        for (const Block& block : AlignedBlocks(lo, hi)) {
          SCOPED_TRACE("V=" + std::to_string(v) + " block " + block.ToString());
          const uint32_t last = std::min(block.hi(), v) - 1;
          TreeReducer worker(block, v, kElems, rounding);
          for (uint32_t leaf = block.lo; leaf < last; ++leaf)
            ASSERT_TRUE(worker.Add(Block{leaf, 1}, leaves[leaf]).ok());
          auto finisher = worker.Finish(Block{last, 1});
          ASSERT_TRUE(finisher.ok()) << finisher.status().ToString();
          // Element ranges of random lengths, finished in random order; odd trials in place.
          std::vector<std::pair<uint32_t, uint32_t>> ranges = RandomSplit(kElems, rng);
          Shuffle(ranges, rng);
          std::vector<float> root(kElems, std::nanf(""));
          std::vector<float> value = leaves[last];
          for (auto [first, end] : ranges) {
            float* out = trial % 2 == 1 ? value.data() + first : root.data() + first;
            finisher->Add(first, end - first, value.data() + first, out);
            if (trial % 2 == 1)
              std::memcpy(root.data() + first, out, (end - first) * sizeof(float));
          }
          EXPECT_TRUE(SameBits(root, ReferenceNode(leaves, block.lo, block.size, rounding)));
          EXPECT_FALSE(worker.complete());  // the reducer is empty again
          EXPECT_EQ(worker.counted(), 0u);
        }
      }
    }
  }
}

// A VW's gradients come tensor by tensor: leaves given in pieces (random splits, in random
// order) give the reference bits in any order of the leaves; a right child whose left sibling
// is held goes into it where its pieces lie, so leaves in order take a buffer for the left
// children only.
TEST_P(TreeReduceSplits, LeavesGivenInPiecesGiveTheReferenceBitsAndRightChildrenTakeNoBuffer) {
  const WireDType rounding = GetParam();
  std::mt19937_64 rng(17);
  constexpr size_t kLong = 5000;  // beyond one slice of the in-place addition
  for (uint32_t v : {1u, 2u, 3u, 5u, 8u, 13u}) {
    const Leaves leaves = RandomLeaves(v, kLong, rng);
    for (int trial = 0; trial < 8; ++trial) {
      SCOPED_TRACE("V=" + std::to_string(v) + " trial " + std::to_string(trial));
      std::vector<uint32_t> order(v);
      for (uint32_t i = 0; i < v; ++i) order[i] = i;
      if (trial > 0) Shuffle(order, rng);
      auto pool = VectorPool<float>::Create(size_t{1} << 30);
      TreeReducer reducer(Block{0, TreeWidth(v)}, v, kLong, rounding, pool);
      for (uint32_t leaf : order) {
        std::vector<TreePiece> pieces;
        for (auto [first, end] : RandomSplit(static_cast<uint32_t>(kLong), rng))
          pieces.push_back({first, leaves[leaf].data() + first, size_t{end} - first});
        Shuffle(pieces, rng);
        ASSERT_TRUE(reducer.Add(Block{leaf, 1}, std::move(pieces)).ok());
      }
      ASSERT_TRUE(reducer.complete());
      EXPECT_TRUE(SameBits(reducer.TakeResult(), Reference(leaves, rounding)));
      if (trial == 0) {
        EXPECT_EQ(pool->created() + pool->reused(), (v + 1) / 2);
      }
    }
  }
}

TEST(TreeReduce, PiecesThatLeaveAGapOrOverlapOrMissElementsAreInvalidAndChangeNothing) {
  const std::vector<float> value(8, 1.0f);
  TreeReducer reducer(Block{0, 2}, 2, 8);
  ASSERT_TRUE(reducer.Add(Block{0, 1}, value).ok());
  const float* d = value.data();
  for (const auto& pieces : std::vector<std::vector<TreePiece>>{
           {{0, d, 3}, {4, d, 4}},             // element 3 missing
           {{0, d, 5}, {4, d, 4}},             // element 4 twice
           {{0, d, 4}},                        // too few
           {{0, d, 4}, {4, d, 4}, {8, d, 1}},  // too many
       }) {
    EXPECT_EQ(reducer.Add(Block{1, 1}, pieces).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(reducer.counted(), 1u);
  }
  ASSERT_TRUE(reducer.Add(Block{1, 1}, {{4, d, 4}, {0, d, 4}}).ok());
  EXPECT_TRUE(SameBits(reducer.TakeResult(), std::vector<float>(8, 2.0f)));
}

TEST(TreeReduce, AFinisherGivesTheSiblingsBuffersBackToTheReducersPoolWhenItGoes) {
  std::mt19937_64 rng(9);
  const Leaves leaves = RandomLeaves(8, kElems, rng);
  auto pool = VectorPool<float>::Create(size_t{1} << 20);
  TreeReducer reducer(Block{0, 8}, 8, kElems, WireDType::kFP32, pool);
  for (uint32_t leaf = 0; leaf < 7; ++leaf)
    ASSERT_TRUE(reducer.Add(Block{leaf, 1}, leaves[leaf]).ok());
  const size_t merged_away = pool->held_bytes();  // the right children the merges let go
  {
    auto finisher = reducer.Finish(Block{7, 1});
    ASSERT_TRUE(finisher.ok());
    EXPECT_EQ(pool->held_bytes(), merged_away);  // the siblings [0,4), [4,6) and 6 are its
  }
  EXPECT_EQ(pool->held_bytes(), merged_away + 3 * kElems * sizeof(float));
}

TEST(TreeReduce, FinishRefusesABlockThatIsNotAllTheRootMisses) {
  std::mt19937_64 rng(5);
  const Leaves leaves = RandomLeaves(8, kElems, rng);
  TreeReducer reducer(Block{0, 8}, 8, kElems);
  for (uint32_t leaf = 0; leaf < 6; ++leaf)
    ASSERT_TRUE(reducer.Add(Block{leaf, 1}, leaves[leaf]).ok());
  EXPECT_EQ(reducer.Finish(Block{7, 1}).status().code(),
            StatusCode::kFailedPrecondition);  // 6 is missing too
  EXPECT_EQ(reducer.Finish(Block{5, 1}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(reducer.Finish(Block{3, 2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reducer.counted(), 6u);  // refusals change nothing
  auto finisher = reducer.Finish(Block{6, 2});
  ASSERT_TRUE(finisher.ok());
  std::vector<float> right = leaves[6];
  for (size_t i = 0; i < kElems; ++i) right[i] = right[i] + leaves[7][i];
  std::vector<float> root(kElems);
  finisher->Add(0, kElems, right.data(), root.data());
  EXPECT_TRUE(SameBits(root, Reference(leaves)));
}

TEST(TreeReduce, LeavesPushedOneByOneInAnyOrderGiveReferenceBits) {
  std::mt19937_64 rng(3);
  for (uint32_t v : {3u, 6u, 13u, 33u}) {
    const Leaves leaves = RandomLeaves(v, kElems, rng);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint32_t> order(v);
      for (uint32_t i = 0; i < v; ++i) order[i] = i;
      Shuffle(order, rng);
      TreeReducer shard(Block{0, TreeWidth(v)}, v, kElems);
      for (uint32_t leaf : order) ASSERT_TRUE(shard.Add(Block{leaf, 1}, leaves[leaf]).ok());
      ASSERT_TRUE(shard.complete());
      EXPECT_TRUE(SameBits(shard.TakeResult(), Reference(leaves))) << "V=" << v;
    }
  }
}

TEST(TreeReduce, OverlappingBlockIsRefusedAndChangesNothing) {
  const uint32_t v = 13;
  std::mt19937_64 rng(11);
  const Leaves leaves = RandomLeaves(v, kElems, rng);
  TreeReducer shard(Block{0, 16}, v, kElems);
  ASSERT_TRUE(shard.Add(Block{4, 2}, ReferenceNode(leaves, 4, 2)).ok());
  ASSERT_TRUE(shard.Add(Block{8, 1}, leaves[8]).ok());
  const uint32_t counted = shard.counted();
  const std::string missing = Describe(shard.Missing());
  EXPECT_EQ(counted, 3u);

  // A node above, a leaf inside, and the same block again: all refused whole.
  std::vector<float> garbage(kElems, 1e30f);
  for (Block b : {Block{4, 4}, Block{0, 8}, Block{5, 1}, Block{4, 2}, Block{8, 1}, Block{8, 4},
                  Block{0, 16}}) {
    const Status s = shard.Add(b, garbage);
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << b.ToString() << ": " << s.ToString();
    EXPECT_EQ(shard.counted(), counted);
    EXPECT_EQ(Describe(shard.Missing()), missing);
    EXPECT_FALSE(shard.complete());
  }
  // The rest still completes to the reference bits: the refused values left no trace.
  for (Block b : shard.Missing())
    ASSERT_TRUE(shard.Add(b, ReferenceNode(leaves, b.lo, b.size)).ok());
  ASSERT_TRUE(shard.complete());
  EXPECT_TRUE(SameBits(shard.TakeResult(), Reference(leaves)));
}

TEST(TreeReduce, DuplicateLeafIsRefused) {
  TreeReducer shard(Block{0, 8}, 5, 3);
  ASSERT_TRUE(shard.Add(Block{3, 1}, std::vector<float>{1, 2, 3}).ok());
  EXPECT_EQ(shard.Add(Block{3, 1}, std::vector<float>{1, 2, 3}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(shard.counted(), 1u);
  // A leaf whose absent siblings made it climb is still a duplicate.
  ASSERT_TRUE(shard.Add(Block{4, 1}, std::vector<float>{4, 5, 6}).ok());
  EXPECT_EQ(shard.Add(Block{4, 1}, std::vector<float>{4, 5, 6}).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(shard.counted(), 2u);
}

TEST(TreeReduce, BlocksThatAreNotTreeNodesUnderRootAreInvalid) {
  const uint32_t v = 5;  // tree width 8
  TreeReducer shard(Block{0, 8}, v, 2);
  const std::vector<float> value(2, 1.0f);
  for (Block b : {Block{1, 2},   // not aligned
                  Block{2, 3},   // not a power of two
                  Block{0, 0},   // empty
                  Block{5, 1},   // absent leaf
                  Block{6, 2},   // absent subtree
                  Block{8, 1},   // beyond the tree
                  Block{0, 16},  // wider than the tree
                  Block{16, 16}}) {
    EXPECT_EQ(shard.Add(b, value).code(), StatusCode::kInvalidArgument) << b.ToString();
  }
  TreeReducer worker(Block{4, 4}, v, 2);
  EXPECT_EQ(worker.Add(Block{0, 1}, value).code(), StatusCode::kInvalidArgument);  // outside root
  EXPECT_EQ(worker.Add(Block{0, 8}, value).code(), StatusCode::kInvalidArgument);  // contains root
  EXPECT_EQ(shard.counted(), 0u);
  EXPECT_EQ(worker.counted(), 0u);
  EXPECT_TRUE(worker.Add(Block{4, 1}, value).ok());
}

TEST(TreeReduce, WrongElementCountIsInvalid) {
  TreeReducer shard(Block{0, 4}, 4, 3);
  EXPECT_EQ(shard.Add(Block{0, 1}, std::vector<float>{1, 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.Add(Block{0, 1}, std::vector<float>{1, 2, 3, 4}).code(),
            StatusCode::kInvalidArgument);
  const float four[4] = {1, 2, 3, 4};
  EXPECT_EQ(shard.Add(Block{1, 1}, four, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.counted(), 0u);
  EXPECT_EQ(Describe(shard.Missing()), "[0,4)");
  EXPECT_TRUE(shard.Add(Block{0, 1}, four, 3).ok());
}

TEST(TreeReduce, MissingListsExactlyTheUncountedLeavesAsAlignedBlocks) {
  TreeReducer shard(Block{0, 16}, 13, 1);
  EXPECT_EQ(Describe(shard.Missing()), "[0,8)[8,12)[12,13)");
  ASSERT_TRUE(shard.Add(Block{2, 1}, std::vector<float>{1}).ok());
  ASSERT_TRUE(shard.Add(Block{8, 4}, std::vector<float>{1}).ok());
  EXPECT_EQ(Describe(shard.Missing()), "[0,2)[3,4)[4,8)[12,13)");
  ASSERT_TRUE(shard.Add(Block{12, 1}, std::vector<float>{1}).ok());  // climbs over absent leaves
  EXPECT_EQ(Describe(shard.Missing()), "[0,2)[3,4)[4,8)");

  TreeReducer worker(Block{4, 4}, 5, 1);
  EXPECT_EQ(Describe(worker.Missing()), "[4,5)");

  // Random subsets: Missing() is the aligned cut of the gaps, and pushing it completes.
  std::mt19937_64 rng(5);
  for (uint32_t v : {1u, 3u, 7u, 13u, 33u}) {
    for (int trial = 0; trial < 50; ++trial) {
      TreeReducer r(Block{0, TreeWidth(v)}, v, 1);
      std::vector<bool> have(v, false);
      for (uint32_t leaf = 0; leaf < v; ++leaf) {
        if (Below(rng, 2) == 0) {
          have[leaf] = true;
          ASSERT_TRUE(r.Add(Block{leaf, 1}, std::vector<float>{1}).ok());
        }
      }
      std::vector<Block> expected;
      for (uint32_t lo = 0; lo < v;) {
        if (have[lo]) {
          ++lo;
          continue;
        }
        uint32_t hi = lo;
        while (hi < v && !have[hi]) ++hi;
        for (Block b : AlignedBlocks(lo, hi)) expected.push_back(b);
        lo = hi;
      }
      const std::vector<Block> missing = r.Missing();
      EXPECT_EQ(Describe(missing), Describe(expected));
      for (Block b : missing) {
        EXPECT_FALSE(r.complete());
        const float present = static_cast<float>(std::min(b.hi(), v) - b.lo);
        ASSERT_TRUE(r.Add(b, std::vector<float>{present}).ok()) << b.ToString();
      }
      EXPECT_TRUE(r.complete());
      EXPECT_TRUE(r.Missing().empty());
      EXPECT_EQ(r.TakeResult(), std::vector<float>{static_cast<float>(v)});
    }
  }
}

TEST(TreeReduce, CompleteOnlyWhenAllPresentLeavesAreCounted) {
  TreeReducer shard(Block{0, 8}, 6, 1);
  const std::vector<float> one{1};
  for (uint32_t leaf : {5u, 0u, 3u, 1u, 4u}) {
    ASSERT_TRUE(shard.Add(Block{leaf, 1}, one).ok());
    EXPECT_FALSE(shard.complete()) << "after leaf " << leaf;
  }
  ASSERT_TRUE(shard.Add(Block{2, 1}, one).ok());
  EXPECT_TRUE(shard.complete());
  EXPECT_EQ(shard.counted(), 6u);
  EXPECT_EQ(shard.TakeResult(), std::vector<float>{6});

  // A block whose only present leaf is its first: one leaf completes it.
  TreeReducer worker(Block{4, 4}, 5, 1);
  EXPECT_FALSE(worker.complete());
  ASSERT_TRUE(worker.Add(Block{4, 1}, std::vector<float>{7}).ok());
  EXPECT_TRUE(worker.complete());
  EXPECT_EQ(worker.TakeResult(), std::vector<float>{7});
}

TEST(TreeShape, TreeWidthIsNextPowerOfTwo) {
  EXPECT_EQ(TreeWidth(1), 1u);
  EXPECT_EQ(TreeWidth(2), 2u);
  EXPECT_EQ(TreeWidth(3), 4u);
  EXPECT_EQ(TreeWidth(5), 8u);
  EXPECT_EQ(TreeWidth(8), 8u);
  EXPECT_EQ(TreeWidth(9), 16u);
  EXPECT_EQ(TreeWidth(33), 64u);
}

TEST(TreeShape, IsTreeNodeAcceptsOnlyAlignedNodesWithAPresentLeaf) {
  EXPECT_TRUE(IsTreeNode(Block{0, 8}, 5));
  EXPECT_TRUE(IsTreeNode(Block{4, 4}, 5));
  EXPECT_TRUE(IsTreeNode(Block{4, 1}, 5));
  EXPECT_FALSE(IsTreeNode(Block{5, 1}, 5));
  EXPECT_FALSE(IsTreeNode(Block{6, 2}, 5));
  EXPECT_FALSE(IsTreeNode(Block{0, 16}, 5));
  EXPECT_FALSE(IsTreeNode(Block{2, 4}, 5));
  EXPECT_FALSE(IsTreeNode(Block{0, 3}, 5));
  EXPECT_FALSE(IsTreeNode(Block{0, 0}, 5));
  EXPECT_FALSE(IsTreeNode(Block{0, 1}, 0));
  EXPECT_TRUE(IsTreeNode(Block{0, 1}, 1));
}

TEST(TreeShape, AlignedBlocksCutsHandCasesIntoFewestBlocks) {
  EXPECT_EQ(Describe(AlignedBlocks(3, 11)), Describe(Blocks({{3, 4}, {4, 8}, {8, 10}, {10, 11}})));
  EXPECT_EQ(Describe(AlignedBlocks(0, 13)), Describe(Blocks({{0, 8}, {8, 12}, {12, 13}})));
  EXPECT_EQ(Describe(AlignedBlocks(1, 16)), Describe(Blocks({{1, 2}, {2, 4}, {4, 8}, {8, 16}})));
  EXPECT_EQ(Describe(AlignedBlocks(6, 10)), Describe(Blocks({{6, 8}, {8, 10}})));
  EXPECT_EQ(Describe(AlignedBlocks(0, 16)), "[0,16)");
  EXPECT_EQ(Describe(AlignedBlocks(5, 6)), "[5,6)");
  EXPECT_TRUE(AlignedBlocks(4, 4).empty());
}

TEST(TreeShape, AlignedBlocksCoverEveryRangeExactlyWithFewestAlignedBlocks) {
  constexpr uint32_t kMax = 70;
  // fewest[lo][hi]: minimum number of aligned power-of-two blocks tiling [lo, hi).
  std::vector<std::vector<uint32_t>> fewest(kMax + 1, std::vector<uint32_t>(kMax + 1, 0));
  for (uint32_t lo = kMax + 1; lo-- > 0;) {
    for (uint32_t hi = lo + 1; hi <= kMax; ++hi) {
      uint32_t best = UINT32_MAX;
      for (uint32_t size = 1; lo + size <= hi; size <<= 1) {
        if (lo % size == 0) best = std::min(best, 1 + fewest[lo + size][hi]);
      }
      fewest[lo][hi] = best;
    }
  }
  for (uint32_t lo = 0; lo <= kMax; ++lo) {
    for (uint32_t hi = lo; hi <= kMax; ++hi) {
      const std::vector<Block> blocks = AlignedBlocks(lo, hi);
      uint32_t cursor = lo;
      for (const Block& b : blocks) {
        EXPECT_EQ(b.lo, cursor) << "[" << lo << "," << hi << ")";
        EXPECT_TRUE(b.size != 0 && (b.size & (b.size - 1)) == 0) << b.ToString();
        EXPECT_EQ(b.lo % b.size, 0u) << b.ToString();
        cursor = b.hi();
      }
      EXPECT_EQ(cursor, hi);
      EXPECT_EQ(blocks.size(), fewest[lo][hi])
          << "[" << lo << "," << hi << ") -> " << Describe(blocks);
    }
  }
}

TEST(TreeShape, AddRightIntoAddsRightToAccumulator) {
  std::vector<float> acc{1.0f, 1e8f, -3.0f};
  const std::vector<float> right{2.0f, 1.0f, 3.0f};
  AddRightInto(acc.data(), right.data(), acc.size());
  EXPECT_EQ(acc, (std::vector<float>{3.0f, 1e8f + 1.0f, 0.0f}));
  EXPECT_EQ(right, (std::vector<float>{2.0f, 1.0f, 3.0f}));
}

}  // namespace
}  // namespace eps
