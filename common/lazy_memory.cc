#include "common/lazy_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace eps {

StatusOr<std::unique_ptr<LazyMemory>> LazyMemory::Reserve(size_t bytes) {
  const size_t size = bytes == 0 ? 1 : bytes;  // mmap refuses 0; data() stays a valid pointer
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot reserve " + std::to_string(bytes) +
                             " bytes of address space: " + std::strerror(errno));
  }
  return std::unique_ptr<LazyMemory>(new LazyMemory(p, size));
}

LazyMemory::~LazyMemory() { munmap(data_, size_); }

Status LazyMemory::Drop() {
  if (madvise(data_, size_, MADV_DONTNEED) != 0)
    return Internal(std::string("madvise(MADV_DONTNEED): ") + std::strerror(errno));
  return OkStatus();
}

size_t LazyMemory::ResidentBytes() const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = (size_ + page - 1) / page;
  size_t resident = 0;
  constexpr size_t kPagesAQuery = size_t{1} << 20;  // 1 MiB of vector a query
  std::vector<unsigned char> in(std::min(pages, kPagesAQuery));
  for (size_t first = 0; first < pages; first += in.size()) {
    const size_t n = std::min(in.size(), pages - first);
    if (mincore(static_cast<char*>(data_) + first * page, n * page, in.data()) != 0) return 0;
    for (size_t i = 0; i < n; ++i) resident += in[i] & 1;
  }
  return resident * page;
}

}  // namespace eps
