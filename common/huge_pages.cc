#include "common/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace eps {

std::unique_ptr<HugeBlock> HugeBlock::Map(size_t bytes) {
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) return nullptr;  // the roundings below would wrap
  const size_t size =
      (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // One huge page more than needed, then the unaligned ends given back.
  void* p = mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + size + kHugePageBytes;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  auto* data = reinterpret_cast<std::byte*>(aligned);
  (void)madvise(data, size, MADV_HUGEPAGE);  // an advice: EINVAL where THP is off changes nothing
  return std::unique_ptr<HugeBlock>(new HugeBlock(data, size));
}

HugeBlock::~HugeBlock() { munmap(data_, size_); }

}  // namespace eps
