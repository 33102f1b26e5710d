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

// The parent of two sparse nodes: their ids merged, each row left + right with a zero row for
// the side that lacks it (the dense tree's bits), then rounded to the wire dtype as every node is.
static SparseRows CombineRows(const SparseRows& left, const SparseRows& right, size_t dim,
                              WireDType rounding) {
  const size_t nl = left.ids.size(), nr = right.ids.size();
  size_t rows = 0;  // of the merged ids: the values are sized once and written in place
  for (size_t l = 0, r = 0; l < nl || r < nr; ++rows) {
    const bool take_l = r == nr || (l < nl && left.ids[l] <= right.ids[r]);
    const bool take_r = l == nl || (r < nr && right.ids[r] <= left.ids[l]);
    l += take_l;
    r += take_r;
  }
  SparseRows out;
  out.ids.resize(rows);
  out.values.resize(rows * dim);
  const std::vector<float> zero(dim, 0.0f);
  float* o = out.values.data();
  for (size_t l = 0, r = 0, i = 0; i < rows; ++i, o += dim) {
    const bool take_l = r == nr || (l < nl && left.ids[l] <= right.ids[r]);
    const bool take_r = l == nl || (r < nr && right.ids[r] <= left.ids[l]);
    const float* a = take_l ? left.values.data() + l * dim : zero.data();
    const float* b = take_r ? right.values.data() + r * dim : zero.data();
    out.ids[i] = take_l ? left.ids[l] : right.ids[r];
    l += take_l;
    r += take_r;
    for (size_t j = 0; j < dim; ++j) o[j] = a[j] + b[j];  // + 0 too: -0 becomes 0, as dense
  }
  RoundToWire(rounding, out.values.data(), out.values.size());
  return out;
}

Status SparseTreeReducer::Add(const Block& b, const uint64_t* ids, size_t num_ids,
                              const float* values, size_t num_values) {
  EPS_RETURN_IF_ERROR(ValidateSparseRows(ids, num_ids, num_values, dim_));
  // The zero-width reducer checks the block (a node under root, no overlap) and counts it.
  EPS_RETURN_IF_ERROR(coverage_->Add(b, std::vector<float>()));
  SparseRows node{std::vector<uint64_t>(ids, ids + num_ids),
                  std::vector<float>(values, values + num_values)};
  RoundToWire(rounding_, node.values.data(), node.values.size());  // a leaf's first rounding
  ClimbInsert(&nodes_, root_, num_leaves_, b, std::move(node),
              [this](SparseRows left, SparseRows right) {
                return CombineRows(left, right, dim_, rounding_);
              });
  return OkStatus();
}

StatusOr<SparseRows> SparseTreeReducer::TakeResult() {
  if (!complete()) {
    return FailedPrecondition("sparse rows of " + root_.ToString() + " are not complete");
  }
  // Every present leaf is counted: the climbs merged every node into the root's.
  if (nodes_.size() != 1) return Internal("sparse tree reducer: the root's node is missing");
  SparseRows out = std::move(nodes_.begin()->second.second);
  Clear();
  return out;
}

void SparseTreeReducer::Clear() {
  nodes_.clear();
  coverage_.emplace(root_, num_leaves_, 0, rounding_);
}

}  // namespace eps
