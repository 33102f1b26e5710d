#include "common/shm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace eps {
namespace {

TEST(Shm, AShardWritesIntoTheWorkersRegionThroughItsName) {
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  ShmMappings maps;
  auto mapped = maps.Map((*region)->ref());
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_NE(*mapped, (*region)->data());  // a mapping of its own, of the same memory
  std::memcpy(*mapped + ShmRegion::kHeaderBytes, "weights", 8);
  EXPECT_STREQ(reinterpret_cast<const char*>((*region)->data() + ShmRegion::kHeaderBytes),
               "weights");
  // The same name maps to the same place; the shard keeps one mapping per region.
  auto again = maps.Map((*region)->ref());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *mapped);
  EXPECT_EQ(maps.mapped(), 1u);
}

TEST(Shm, AWrongTokenOrSizeOrProcessIsRefused) {
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  ASSERT_TRUE(region.ok());
  const ShmRegionRef good = (*region)->ref();
  ShmRegionRef wrong_token = good;
  wrong_token.token ^= 1;
  ShmRegionRef too_big = good;
  too_big.size += 4096;
  ShmRegionRef no_such_fd = good;
  no_such_fd.fd = 1000000;
  ShmRegionRef no_such_pid = good;
  no_such_pid.pid = 0x7ffffffe;
  ShmRegionRef tiny = good;
  tiny.size = 8;
  ShmMappings maps;
  for (const ShmRegionRef& bad : {wrong_token, too_big, no_such_fd, no_such_pid, tiny}) {
    auto m = maps.Map(bad);
    EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition) << bad.fd << " " << bad.size;
  }
  EXPECT_EQ(maps.mapped(), 0u);
  EXPECT_TRUE(maps.Map(good).ok());
}

TEST(Shm, AFileThatIsNotASealedMemfdIsRefusedEvenWithTheToken) {
  // Another process's ordinary file could be shrunk under the shard's mapping
  // (SIGBUS): only memfds sealed against shrinking are mapped.
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + 4096);
  ASSERT_TRUE(region.ok());
  const int fd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>((*region)->ref().size)), 0);
  ASSERT_EQ(pwrite(fd, (*region)->data(), ShmRegion::kHeaderBytes, 0),
            ssize_t{ShmRegion::kHeaderBytes});
  ShmRegionRef unsealed = (*region)->ref();
  unsealed.fd = fd;
  ShmMappings maps;
  EXPECT_EQ(maps.Map(unsealed).status().code(), StatusCode::kFailedPrecondition);
  close(fd);
}

TEST(Shm, TheOldestMappingGoesBeyondCapacity) {
  ShmMappings maps(2);
  auto a = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  auto b = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  auto c = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(maps.Map((*a)->ref()).ok());
  ASSERT_TRUE(maps.Map((*b)->ref()).ok());
  ASSERT_TRUE(maps.Map((*a)->ref()).ok());  // a is now the most recent
  ASSERT_TRUE(maps.Map((*c)->ref()).ok());  // b goes
  EXPECT_EQ(maps.mapped(), 2u);
  // b maps again (its region still exists): nothing was refused.
  EXPECT_TRUE(maps.Map((*b)->ref()).ok());
}

TEST(Shm, AMappingUnusedForTheIdleTimeIsUnmapped) {
  ShmMappings maps(8, std::chrono::seconds(10));
  auto a = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  auto b = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  auto c = ShmRegion::Create(ShmRegion::kHeaderBytes + 64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto t0 = ShmMappings::Clock::now();
  ASSERT_TRUE(maps.Map((*a)->ref(), t0).ok());
  ASSERT_TRUE(maps.Map((*b)->ref(), t0 + std::chrono::seconds(5)).ok());
  ASSERT_TRUE(maps.Map((*c)->ref(), t0 + std::chrono::seconds(12)).ok());  // a idled 12 s: unmapped
  EXPECT_EQ(maps.mapped(), 2u);
  ASSERT_TRUE(maps.Map((*b)->ref(), t0 + std::chrono::seconds(14)).ok());  // in use: kept
  EXPECT_EQ(maps.mapped(), 2u);
  ASSERT_TRUE(maps.Map((*b)->ref(), t0 + std::chrono::seconds(40)).ok());  // c idled 28 s
  EXPECT_EQ(maps.mapped(), 1u);
  // a maps again (its region still exists): an idle mapping is not a refused one.
  EXPECT_TRUE(maps.Map((*a)->ref(), t0 + std::chrono::seconds(41)).ok());
  EXPECT_EQ(maps.mapped(), 2u);
}

}  // namespace
}  // namespace eps
