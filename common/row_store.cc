#include "common/row_store.h"

#include <cstring>

namespace eps {

void RowStore::Put(uint64_t id, const float* row) {
  const auto [it, added] = slot_.try_emplace(id, slot_.size());
  if (added) values_.resize(values_.size() + dim_);
  std::memcpy(values_.data() + it->second * dim_, row, dim_ * sizeof(float));
}

const float* RowStore::Find(uint64_t id) const {
  const auto it = slot_.find(id);
  return it == slot_.end() ? nullptr : values_.data() + it->second * dim_;
}

void RowStore::Clear() {
  absl::flat_hash_map<uint64_t, size_t>().swap(slot_);
  std::vector<float>().swap(values_);
}

}  // namespace eps
