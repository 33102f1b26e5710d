#include "common/sparse_tree.h"

#include <algorithm>

namespace eps {

Status ValidateSparseRows(const uint64_t* ids, size_t num_ids, size_t num_values, size_t dim) {
  if (dim == 0) return InvalidArgument("sparse rows need a width of at least 1");
  if (num_ids > num_values / dim || num_ids * dim != num_values) {
    return InvalidArgument(std::to_string(num_ids) + " rows of width " + std::to_string(dim) +
                           " need " + std::to_string(num_ids * dim) + " values, got " +
                           std::to_string(num_values));
  }
  for (size_t i = 1; i < num_ids; ++i) {
    if (ids[i - 1] >= ids[i]) {
      return InvalidArgument("row ids must be strictly ascending: id " + std::to_string(ids[i]) +
                             " at " + std::to_string(i) + " follows " + std::to_string(ids[i - 1]));
    }
  }
  return OkStatus();
}

SparseTreeReducer::SparseTreeReducer(Block root, uint32_t num_leaves, size_t dim,
                                     WireDType rounding)
    : root_(root),
      num_leaves_(num_leaves),
      dim_(dim),
      rounding_(rounding),
      coverage_(std::in_place, root, num_leaves, 0, rounding) {}

Status SparseTreeReducer::Add(const Block& b, const uint64_t* ids, size_t num_ids,
                              const float* values, size_t num_values) {
  EPS_RETURN_IF_ERROR(ValidateSparseRows(ids, num_ids, num_values, dim_));
  // The zero-width reducer checks the block (a node under root, no overlap) and counts it.
  EPS_RETURN_IF_ERROR(coverage_->Add(b, std::vector<float>()));
  for (size_t i = 0; i < num_ids; ++i) {
    auto it = rows_.try_emplace(ids[i], root_, num_leaves_, dim_, rounding_).first;
    // Cannot fail: the coverage reducer accepted the same block over the same leaves.
    Status s = it->second.Add(b, values + i * dim_, dim_);
    if (!s.ok()) return Internal("sparse tree reducer: " + s.message());
  }
  return OkStatus();
}

StatusOr<SparseRows> SparseTreeReducer::TakeResult() {
  if (!complete()) {
    return FailedPrecondition("sparse rows of " + root_.ToString() + " are not complete");
  }
  SparseRows out;
  out.ids.reserve(rows_.size());
  for (const auto& [id, reducer] : rows_) out.ids.push_back(id);
  std::sort(out.ids.begin(), out.ids.end());
  out.values.resize(out.ids.size() * dim_);
  const std::vector<float> zeros(dim_, 0.0f);
  for (size_t i = 0; i < out.ids.size(); ++i) {
    TreeReducer& r = rows_.at(out.ids[i]);
    // The blocks that did not push the row push zeros; how the gap is cut into blocks does not
    // change the bits (a node of zeros is zero however its leaves were grouped).
    for (const Block& gap : r.Missing()) {
      Status s = r.Add(gap, zeros.data(), dim_);
      if (!s.ok()) return Internal("sparse tree reducer: " + s.message());
    }
    std::vector<float> row = r.TakeResult();
    std::copy(row.begin(), row.end(), out.values.begin() + i * dim_);
  }
  Clear();
  return out;
}

void SparseTreeReducer::Clear() {
  rows_.clear();
  coverage_.emplace(root_, num_leaves_, 0, rounding_);
}

}  // namespace eps
