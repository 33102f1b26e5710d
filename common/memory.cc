#include "common/memory.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>

namespace eps {

void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);  // never trimmed (glibc: -1 disables trimming)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_ARENA_MAX, 1);
}

void AdviseHugePages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  // Advice only: a kernel without THP refuses it, and the memory works as before.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace eps
