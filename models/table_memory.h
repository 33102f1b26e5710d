// The memory of a worker's sparse tables (models/model_runner.h): each table
// in address space of its own (common/lazy_memory.h), so that a table the
// worker looks up by its batches' rows costs the pages of the rows pulled into
// it, not its size (docs/design.md, "Sparse tables").
//
// Internal to models/'s libtorch translation units (it includes torch).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/lazy_memory.h"
#include "common/status.h"

namespace eps {

// Makes the tables and gives their pages back. Not thread-safe; the tensors it
// makes keep their memory alive on their own (it may go first).
class TableMemory {
 public:
  // A zeroed float32 tensor [rows, dim] over memory reserved, not taken.
  // Throws std::bad_alloc when the address space cannot be reserved (the
  // runner's callers turn it into ResourceExhausted).
  torch::Tensor New(int64_t rows, int64_t dim);
  // A copy of `t` (float32, on the CPU) on huge pages (common/huge_pages.h), for a table held
  // whole whose rows a step reads and writes at random places. Throws std::bad_alloc when the
  // memory cannot be mapped.
  static torch::Tensor OnHugePages(const torch::Tensor& t);
  // Every page of `t` (a tensor New made) back to the host: its rows read
  // zeros until written again. InvalidArgument for a tensor New did not make.
  [[nodiscard]] Status Drop(const torch::Tensor& t);
  // Bytes of `t` that are memory now (0 for a tensor New did not make).
  size_t ResidentBytes(const torch::Tensor& t) const;

 private:
  LazyMemory* Find(const torch::Tensor& t) const;
  std::vector<std::shared_ptr<LazyMemory>> made_;
};

// The distinct values of `ids` (int64, any shape), ascending: the rows of a
// table of `rows` rows that a batch reads. InvalidArgument naming `table` for
// an id outside [0, rows) (the embedding would refuse it too) or ids that are
// not int64.
[[nodiscard]] StatusOr<std::vector<uint64_t>> DistinctRows(const torch::Tensor& ids, int64_t rows,
                                                           const std::string& table);

}  // namespace eps
