#include "common/sparse_tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "common/tree.h"
#include "tests/sparse_steps.h"

namespace eps {
namespace {

// The definition a SparseTreeReducer must meet: per row, the dense TreeReducer over every VW,
// a VW that did not touch the row giving a row of +0.0.
SparseRows DenseReference(const std::vector<VwGrad>& vws, size_t dim, WireDType rounding) {
  const uint32_t num_vws = static_cast<uint32_t>(vws.size());
  std::set<uint64_t> ids;
  for (const VwGrad& g : vws) ids.insert(g.ids.begin(), g.ids.end());
  SparseRows out;
  for (uint64_t id : ids) {
    TreeReducer row(Block{0, TreeWidth(num_vws)}, num_vws, dim, rounding);
    for (uint32_t v = 0; v < num_vws; ++v) {
      std::vector<float> value(dim, 0.0f);
      for (size_t i = 0; i < vws[v].ids.size(); ++i) {
        if (vws[v].ids[i] == id) {
          value.assign(vws[v].values.begin() + i * dim, vws[v].values.begin() + (i + 1) * dim);
        }
      }
      EXPECT_TRUE(row.Add(Block{v, 1}, std::move(value)).ok());
    }
    const std::vector<float> sum = row.TakeResult();
    out.ids.push_back(id);
    out.values.insert(out.values.end(), sum.begin(), sum.end());
  }
  return out;
}

// Reduces `vws` the way a job does: each block's partial as a worker forms it, the blocks in a
// random order at the root.
SparseRows ReduceInBlocks(std::mt19937_64& rng, const std::vector<VwGrad>& vws, size_t dim,
                          WireDType rounding) {
  const uint32_t num_vws = static_cast<uint32_t>(vws.size());
  SparseTreeReducer root(Block{0, TreeWidth(num_vws)}, num_vws, dim, rounding);
  for (const Block& b : RandomBlocks(rng, num_vws)) {
    SparseTreeReducer worker(b, num_vws, dim, rounding);
    for (uint32_t v = b.lo; v < std::min(b.hi(), num_vws); ++v) {
      EXPECT_TRUE(worker
                      .Add(Block{v, 1}, vws[v].ids.data(), vws[v].ids.size(), vws[v].values.data(),
                           vws[v].values.size())
                      .ok());
    }
    const SparseRows part = worker.TakeResult().value();
    EXPECT_TRUE(
        root.Add(b, part.ids.data(), part.ids.size(), part.values.data(), part.values.size()).ok());
  }
  return root.TakeResult().value();
}

TEST(SparseTreeReduce, EveryRowHasTheBitsOfTheDenseTreeWithZeroRowsInEveryWireDType) {
  std::mt19937_64 rng(7);
  for (WireDType rounding : {WireDType::kFP32, WireDType::kBF16, WireDType::kFP16}) {
    for (uint32_t num_vws : {1u, 2u, 5u, 8u, 11u, 32u}) {
      for (int trial = 0; trial < 10; ++trial) {
        const size_t dim = 1 + rng() % 4;
        const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, 12);
        const SparseRows want = DenseReference(vws, dim, rounding);
        const SparseRows got = ReduceInBlocks(rng, vws, dim, rounding);
        ASSERT_EQ(got.ids, want.ids);
        ASSERT_TRUE(SameBits(got.values, want.values))
            << WireDTypeName(rounding) << " V=" << num_vws << " trial " << trial;
      }
    }
  }
}

TEST(SparseTreeReduce, AnySplitOfVwsIntoBlocksGivesTheSameBits) {
  std::mt19937_64 rng(1);
  for (uint32_t num_vws : {1u, 3u, 6u, 8u, 13u}) {
    for (int trial = 0; trial < 20; ++trial) {
      const size_t dim = 3;
      const std::vector<VwGrad> vws = RandomStep(rng, num_vws, dim, 10);
      const Block root{0, TreeWidth(num_vws)};
      SparseTreeReducer leaves(root, num_vws, dim);
      for (uint32_t v = 0; v < num_vws; ++v) {
        ASSERT_TRUE(leaves
                        .Add(Block{v, 1}, vws[v].ids.data(), vws[v].ids.size(),
                             vws[v].values.data(), vws[v].values.size())
                        .ok());
      }
      const SparseRows want = leaves.TakeResult().value();
      const SparseRows got = ReduceInBlocks(rng, vws, dim, WireDType::kFP32);
      ASSERT_EQ(got.ids, want.ids);
      ASSERT_TRUE(SameBits(got.values, want.values)) << "V=" << num_vws << " trial " << trial;
    }
  }
}

TEST(SparseTreeReduce, RowsAreTheDenseTreeWithZerosForVwsThatDidNotTouchThem) {
  // V = 2: VW 0 pushes -0.0 for row 5, VW 1 does not touch it. The dense tree adds VW 1's
  // zero row: -0.0 + 0.0 = +0.0.
  SparseTreeReducer r(Block{0, 2}, 2, 1);
  const uint64_t id = 5;
  const float minus_zero = -0.0f;
  ASSERT_TRUE(r.Add(Block{0, 1}, &id, 1, &minus_zero, 1).ok());
  ASSERT_TRUE(r.Add(Block{1, 1}, nullptr, 0, nullptr, 0).ok());
  const SparseRows got = r.TakeResult().value();
  ASSERT_EQ(got.ids, std::vector<uint64_t>{5});
  EXPECT_FALSE(std::signbit(got.values[0]));
}

TEST(SparseTreeReduce, AnAbsentRightSubtreeAddsNothing) {
  // V = 3: leaf 2's parent [2,4) has no right child, so VW 2's -0.0 climbs unchanged to [2,4),
  // then meets [0,2), which holds no row 5: (+0.0) + (-0.0) = +0.0 on the left's side.
  SparseTreeReducer r(Block{0, 4}, 3, 1);
  const uint64_t id = 5;
  const float minus_zero = -0.0f;
  ASSERT_TRUE(r.Add(Block{2, 1}, &id, 1, &minus_zero, 1).ok());
  ASSERT_FALSE(r.complete());
  ASSERT_TRUE(r.Add(Block{0, 2}, nullptr, 0, nullptr, 0).ok());
  const SparseRows got = r.TakeResult().value();
  ASSERT_EQ(got.ids, std::vector<uint64_t>{5});
  EXPECT_FALSE(std::signbit(got.values[0]));
  // Rooted at [2,4), the same VW's row is its own value: nothing was added to it.
  SparseTreeReducer block(Block{2, 2}, 3, 1);
  ASSERT_TRUE(block.Add(Block{2, 1}, &id, 1, &minus_zero, 1).ok());
  EXPECT_TRUE(std::signbit(block.TakeResult().value().values[0]));
}

TEST(SparseTreeReduce, BadPushesAreRefusedWholeAndAnIncompleteStepHasNoResult) {
  SparseTreeReducer r(Block{0, 4}, 4, 2);
  const std::vector<uint64_t> ids{3, 1};
  const std::vector<float> values(4, 1.0f);
  EXPECT_EQ(r.Add(Block{0, 1}, ids.data(), 2, values.data(), 4).code(),
            StatusCode::kInvalidArgument);  // not ascending
  EXPECT_EQ(r.Add(Block{0, 1}, ids.data(), 1, values.data(), 3).code(),
            StatusCode::kInvalidArgument);  // not whole rows
  EXPECT_EQ(r.Add(Block{1, 2}, ids.data(), 1, values.data(), 2).code(),
            StatusCode::kInvalidArgument);  // not a tree node
  ASSERT_TRUE(r.Add(Block{0, 2}, ids.data() + 1, 1, values.data(), 2).ok());
  EXPECT_EQ(r.Add(Block{1, 1}, ids.data() + 1, 1, values.data(), 2).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(r.TakeResult().status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(r.Add(Block{2, 2}, nullptr, 0, nullptr, 0).ok());
  const SparseRows got = r.TakeResult().value();
  EXPECT_EQ(got.ids, std::vector<uint64_t>{1});
  EXPECT_EQ(got.values, (std::vector<float>{1.0f, 1.0f}));
}

}  // namespace
}  // namespace eps
