#include "common/vector_pool.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/tree.h"

namespace eps {
namespace {

TEST(VectorPool, AReleasedBufferIsTakenAgainWithItsPages) {
  auto pool = VectorPool<float>::Create(1 << 20);
  std::vector<float> a = pool->Take(1000);
  EXPECT_EQ(a.size(), 1000u);
  const float* pages = a.data();
  pool->Give(std::move(a));
  EXPECT_EQ(pool->held_bytes(), 4000u);
  std::vector<float> b = pool->Take(1000);
  EXPECT_EQ(b.data(), pages);
  EXPECT_EQ(pool->held_bytes(), 0u);
  EXPECT_EQ(pool->reused(), 1u);
  EXPECT_EQ(pool->created(), 1u);
  // Another size is a new buffer.
  std::vector<float> c = pool->Take(999);
  EXPECT_NE(c.data(), pages);
  EXPECT_EQ(pool->created(), 2u);
}

TEST(VectorPool, HoldsNoMoreThanItsBudget) {
  auto pool = VectorPool<float>::Create(10 * sizeof(float));
  pool->Give(std::vector<float>(8));
  pool->Give(std::vector<float>(8));  // over the budget: freed
  EXPECT_EQ(pool->held_bytes(), 8 * sizeof(float));
  pool->set_max_bytes(4 * sizeof(float));  // the held buffer is over the new budget
  EXPECT_EQ(pool->held_bytes(), 0u);
}

TEST(VectorPool, ASharedBufferComesBackWhenItsLastOwnerLetsGoOnAnyThread) {
  auto pool = VectorPool<uint16_t>::Create(1 << 20);
  std::shared_ptr<std::vector<uint16_t>> shared = pool->Share(pool->Take(64));
  const uint16_t* pages = shared->data();
  std::shared_ptr<std::vector<uint16_t>> second = shared;
  shared.reset();
  EXPECT_EQ(pool->held_bytes(), 0u);  // still owned
  std::thread([held = std::move(second)]() mutable { held.reset(); }).join();
  EXPECT_EQ(pool->held_bytes(), 64 * sizeof(uint16_t));
  EXPECT_EQ(pool->Take(64).data(), pages);
}

TEST(VectorPool, ASharedBufferOutlivingItsPoolIsFreed) {
  auto pool = VectorPool<float>::Create(1 << 20);
  std::shared_ptr<std::vector<float>> shared = pool->Share(std::vector<float>(16, 1.0f));
  pool.reset();
  shared.reset();  // no pool to return to (ASan would see a use after free or a leak)
}

TEST(VectorPool, ATreeReducerReusesThePoolsBuffersAndGivesMergedNodesBack) {
  auto pool = VectorPool<float>::Create(1 << 20);
  const float one[4] = {1, 1, 1, 1}, two[4] = {2, 2, 2, 2};
  std::vector<float> sum;
  for (int step = 0; step < 3; ++step) {
    if (!sum.empty()) pool->Give(std::move(sum));  // the version before last, let go
    TreeReducer reducer(Block{0, 2}, 2, 4, WireDType::kFP32, pool);
    ASSERT_TRUE(reducer.AddWire(Block{0, 1}, one, 4).ok());
    ASSERT_TRUE(reducer.AddWire(Block{1, 1}, two, 4).ok());
    ASSERT_TRUE(reducer.complete());
    sum = reducer.TakeResult();
    EXPECT_EQ(sum, std::vector<float>(4, 3.0f));
  }
  // Step 0 made both leaves; each later step took its two leaves from the pool: the node merged
  // into its sibling and the step before's result.
  EXPECT_EQ(pool->created(), 2u);
  EXPECT_EQ(pool->reused(), 4u);
}

}  // namespace
}  // namespace eps
