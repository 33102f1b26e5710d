#include "common/memory.h"

#include <malloc.h>

namespace eps {

void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace eps
