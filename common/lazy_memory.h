// Address space for a table larger than memory: pages that cost nothing until
// written, and that can be given back at once.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"

namespace eps {

// `bytes` of zeroed address space (an anonymous private mapping reserved
// without swap accounting): a page takes memory only once written, and Drop()
// gives every written page back (each reads zeros again). A worker's sparse
// table looked up by its batches' rows lives in one: of its 2^32 rows only the
// pages of rows a pull wrote are memory (docs/design.md, "Sparse tables").
// Not thread-safe; data() stays valid for the object's lifetime.
class LazyMemory {
 public:
  // ResourceExhausted when the address space cannot be reserved.
  [[nodiscard]] static StatusOr<std::unique_ptr<LazyMemory>> Reserve(size_t bytes);
  ~LazyMemory();
  LazyMemory(const LazyMemory&) = delete;
  LazyMemory& operator=(const LazyMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

  // Every page back to the host: the whole range reads zeros. Internal if the
  // kernel refuses (it does not for a mapping of ours).
  [[nodiscard]] Status Drop();
  // Bytes of the range that are memory now (mincore), for tests and reports.
  size_t ResidentBytes() const;

 private:
  LazyMemory(void* data, size_t size) : data_(data), size_(size) {}
  void* const data_;
  const size_t size_;
};

}  // namespace eps
