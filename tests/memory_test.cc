#include "common/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace eps {
namespace {

// The VmFlags of the mapping of this process that holds `p` (/proc/self/smaps), empty if none.
std::string FlagsOfMappingHolding(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') < line.find(':')) {
      inside = at >= lo && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HugeVector, IsZeroedAndItsPagesAreAdvisedHuge) {
  constexpr size_t kN = 8 << 20;  // 32 MiB of floats
  std::vector<float> v = HugeVector<float>(kN);
  ASSERT_EQ(v.size(), kN);
  for (size_t i = 0; i < kN; i += 4099) ASSERT_EQ(v[i], 0.0f);
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "this kernel has no transparent huge pages: the advice is refused";
  // The middle lies in a 2 MiB page inside the buffer: advised (flag "hg").
  const std::string flags = FlagsOfMappingHolding(v.data() + kN / 2);
  ASSERT_FALSE(flags.empty());
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

TEST(AdviseHugePages, LeavesRangesWithoutAWhole2MiBPageAlone) {
  std::vector<char> small(1 << 20);
  AdviseHugePages(small.data(), small.size());  // no 2 MiB page inside: nothing to do
  AdviseHugePages(nullptr, 0);
  const std::string flags = FlagsOfMappingHolding(small.data());
  EXPECT_EQ(flags.find(" hg"), std::string::npos) << flags;
}

}  // namespace
}  // namespace eps
