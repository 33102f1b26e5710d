// Transparent huge pages (2 MiB) for the tables whose rows a step reads and writes at random
// places: a shard's cached rows (server/row_cache.h) and a worker's sparse table held whole
// (models/table_memory.h). On 4 KiB pages nearly every such row costs a TLB miss, a page walk
// that a virtual machine makes two-dimensional; a huge page holds some 5,000 rows of 424 bytes.
// Only an advice: where the kernel's transparent huge pages are off, or none is free, the memory
// is ordinary pages and everything works the same (only slower).
#pragma once

#include <cstddef>
#include <memory>

namespace eps {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Zeroed memory of `bytes` rounded up to whole huge pages, aligned to one, advised
// MADV_HUGEPAGE (an anonymous private mapping, given back when the block goes).
class HugeBlock {
 public:
  // Null when the mapping cannot be made.
  static std::unique_ptr<HugeBlock> Map(size_t bytes);
  ~HugeBlock();
  HugeBlock(const HugeBlock&) = delete;
  HugeBlock& operator=(const HugeBlock&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  HugeBlock(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* const data_;
  const size_t size_;
};

}  // namespace eps
