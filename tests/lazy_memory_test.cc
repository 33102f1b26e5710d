#include "common/lazy_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace eps {
namespace {

TEST(LazyMemory, ATerabyteReservedTakesOnlyThePagesWritten) {
  constexpr size_t kTiB = size_t{1} << 40;
  auto memory = LazyMemory::Reserve(kTiB);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  auto* bytes = static_cast<uint8_t*>((*memory)->data());
  EXPECT_EQ((*memory)->size(), kTiB);
  EXPECT_EQ(bytes[kTiB / 2], 0);  // reads zeros, costs nothing
  std::memset(bytes + kTiB / 3, 7, 3 * 4096);
  bytes[kTiB - 1] = 9;
  const size_t resident = (*memory)->ResidentBytes();
  EXPECT_GE(resident, 4 * 4096u);
  EXPECT_LE(resident, 8 * 4096u);
  EXPECT_EQ(bytes[kTiB / 3 + 5], 7);
  EXPECT_EQ(bytes[kTiB - 1], 9);
}

TEST(LazyMemory, DropGivesThePagesBackAndTheyReadZerosAgain) {
  auto memory = LazyMemory::Reserve(size_t{64} << 20);
  ASSERT_TRUE(memory.ok());
  auto* floats = static_cast<float*>((*memory)->data());
  for (size_t i = 0; i < (size_t{16} << 20); i += 1024) floats[i] = 1.5f;
  EXPECT_GE((*memory)->ResidentBytes(), size_t{60} << 20);
  ASSERT_TRUE((*memory)->Drop().ok());
  EXPECT_EQ((*memory)->ResidentBytes(), 0u);
  EXPECT_EQ(floats[1024], 0.0f);
  floats[1024] = 2.5f;  // usable again
  EXPECT_EQ(floats[1024], 2.5f);
}

TEST(LazyMemory, AnImpossibleReservationIsResourceExhausted) {
  auto memory = LazyMemory::Reserve(~size_t{0} - 4096);
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace eps
