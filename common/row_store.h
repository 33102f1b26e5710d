// The rows of a sparse table a worker holds, keyed by their 64-bit row ids:
// what a worker that looks a table up by its batches' rows keeps of it when
// the table's ids cannot index memory (a table of unbounded keys), or should
// not (a page fault per row). docs/design.md, "Sparse tables".
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace eps {

// Rows of `dim` floats by id. Put overwrites a row held. Not thread-safe; a
// pointer Find returns is valid until the next Put or Clear.
class RowStore {
 public:
  explicit RowStore(size_t dim) : dim_(dim) {}

  size_t dim() const { return dim_; }
  size_t rows() const { return slot_.size(); }
  // The memory the rows take (their floats; the index's nodes besides).
  size_t bytes() const { return values_.capacity() * sizeof(float); }

  void Put(uint64_t id, const float* row);
  // The row's floats, or nullptr when it is not held.
  const float* Find(uint64_t id) const;
  // Every row dropped and its memory given back.
  void Clear();

 private:
  const size_t dim_;
  absl::flat_hash_map<uint64_t, size_t> slot_;  // id -> its row in values_
  std::vector<float> values_;                   // rows() x dim_ floats
};

}  // namespace eps
