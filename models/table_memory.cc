#include "models/table_memory.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "common/coalesce.h"
#include "common/huge_pages.h"

namespace eps {

torch::Tensor TableMemory::New(int64_t rows, int64_t dim) {
  const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(dim) * sizeof(float);
  StatusOr<std::unique_ptr<LazyMemory>> reserved = LazyMemory::Reserve(bytes);
  if (!reserved.ok()) throw std::bad_alloc();
  std::shared_ptr<LazyMemory> memory = std::move(*reserved);
  made_.push_back(memory);
  return torch::from_blob(
      memory->data(), {rows, dim}, [memory](void*) mutable { memory.reset(); },
      torch::TensorOptions().dtype(torch::kFloat32));
}

torch::Tensor TableMemory::OnHugePages(const torch::Tensor& t) {
  const torch::Tensor from = t.contiguous();
  std::shared_ptr<HugeBlock> block = HugeBlock::Map(from.nbytes());
  if (block == nullptr) throw std::bad_alloc();
  std::memcpy(block->data(), from.data_ptr(), from.nbytes());
  return torch::from_blob(
      block->data(), from.sizes(), [block](void*) mutable { block.reset(); },
      torch::TensorOptions().dtype(from.dtype()));
}

LazyMemory* TableMemory::Find(const torch::Tensor& t) const {
  for (const auto& m : made_) {
    if (m->data() == t.data_ptr()) return m.get();
  }
  return nullptr;
}

Status TableMemory::Drop(const torch::Tensor& t) {
  LazyMemory* m = Find(t);
  if (m == nullptr) return InvalidArgument("a table whose memory is not lazy");
  return m->Drop();
}

size_t TableMemory::ResidentBytes(const torch::Tensor& t) const {
  const LazyMemory* m = Find(t);
  return m == nullptr ? 0 : m->ResidentBytes();
}

StatusOr<std::vector<uint64_t>> DistinctRows(const torch::Tensor& ids, int64_t rows,
                                             const std::string& table) {
  if (ids.scalar_type() != torch::kInt64) {
    return InvalidArgument("the rows of table " + table + " are " +
                           std::string(c10::toString(ids.scalar_type())) + ", not int64");
  }
  const torch::Tensor flat = ids.reshape({-1}).to(torch::kCPU).contiguous();
  std::vector<uint64_t> out(static_cast<size_t>(flat.numel()));
  const int64_t* p = flat.data_ptr<int64_t>();
  for (size_t k = 0; k < out.size(); ++k) {
    if (p[k] < 0 || p[k] >= rows) {
      return InvalidArgument("row " + std::to_string(p[k]) + " of table " + table +
                             " is outside [0, " + std::to_string(rows) + ")");
    }
    out[k] = static_cast<uint64_t>(p[k]);
  }
  SortDistinct(&out);
  return out;
}

}  // namespace eps
