#include "common/row_store.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace eps {
namespace {

TEST(RowStore, HoldsRowsByAnyIdAndOverwritesARowPutAgain) {
  RowStore store(3);
  const uint64_t big = (uint64_t{1} << 63) - 2;  // ids need not index memory
  const float a[3] = {1, 2, 3}, b[3] = {-1, 0.5f, 7}, c[3] = {9, 9, 9};
  store.Put(big, a);
  store.Put(5, b);
  EXPECT_EQ(store.rows(), 2u);
  ASSERT_NE(store.Find(big), nullptr);
  EXPECT_EQ(std::vector<float>(store.Find(big), store.Find(big) + 3), std::vector<float>(a, a + 3));
  EXPECT_EQ(std::vector<float>(store.Find(5), store.Find(5) + 3), std::vector<float>(b, b + 3));
  EXPECT_EQ(store.Find(6), nullptr);
  store.Put(5, c);  // a newer version of the row
  EXPECT_EQ(store.rows(), 2u);
  EXPECT_EQ(store.Find(5)[2], 9.0f);
  EXPECT_EQ(store.Find(big)[0], 1.0f);
  EXPECT_GE(store.bytes(), 2 * 3 * sizeof(float));
}

TEST(RowStore, ClearDropsEveryRowAndItsMemory) {
  RowStore store(16);
  std::vector<float> row(16, 0.25f);
  for (uint64_t id = 0; id < 1000; ++id) store.Put(id * 7919, row.data());
  EXPECT_EQ(store.rows(), 1000u);
  EXPECT_GE(store.bytes(), 1000 * 16 * sizeof(float));
  store.Clear();
  EXPECT_EQ(store.rows(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.Find(7919), nullptr);
  store.Put(3, row.data());  // usable again
  EXPECT_EQ(store.Find(3)[15], 0.25f);
}

}  // namespace
}  // namespace eps
