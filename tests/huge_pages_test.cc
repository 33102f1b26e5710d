#include "common/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace eps {
namespace {

// The kernel's transparent huge page mode, as its bracketed word says ("never" when unknown).
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos ? "never" : line.substr(open + 1, close - open - 1);
}

// Whether the kernel may back the mapping holding `p` with huge pages (smaps' THPeligible).
bool Eligible(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t lo, hi;
    char dash;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return line.find('1') != std::string::npos;
    }
  }
  return false;
}

TEST(HugePages, ABlockIsWholeAlignedHugePagesOfZeros) {
  for (size_t bytes : {size_t{1}, kHugePageBytes, 3 * kHugePageBytes / 2}) {
    auto block = HugeBlock::Map(bytes);
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block->data()) % kHugePageBytes, 0u);
    EXPECT_EQ(block->size() % kHugePageBytes, 0u);
    EXPECT_GE(block->size(), bytes);
    EXPECT_LT(block->size(), bytes + kHugePageBytes);
    for (size_t i = 0; i < block->size(); i += 4096) EXPECT_EQ(block->data()[i], std::byte{0});
    block->data()[block->size() - 1] = std::byte{7};  // all of it is writable
    // Advised: with the kernel's huge pages on (always, or madvise as Debian's default), the
    // mapping may take them.
    if (ThpMode() != "never") EXPECT_TRUE(Eligible(block->data())) << ThpMode();
  }
}

TEST(HugePages, ASizeNoMappingCanHoldIsNull) {
  // Rounded up to whole pages (and one more to align), these sizes would wrap around to small.
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - kHugePageBytes, SIZE_MAX / 2 + 1})
    EXPECT_EQ(HugeBlock::Map(bytes), nullptr) << bytes;
}

}  // namespace
}  // namespace eps
