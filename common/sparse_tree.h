// The canonical pairwise tree (tree.h) over rows of a sparse table: each VW's
// gradient names only the rows it touched, and a VW that did not touch a row
// contributes +0.0 to it (what the dense gradient of that row would hold).
//
// A row's value is the one TreeReducer gives over its whole subtree with the
// VWs that did not push the row filled in by zero blocks: the same bits
// whatever the split of VWs into blocks, whatever the order the blocks arrive
// in, and the same bits as the dense tree over an embedding table whose
// untouched rows are zero. (Zeros are not a no-op: -0.0f + 0.0f is +0.0f, so a
// row pushed by one block and absent from the others is still combined.)
//
// The nodes in flight are sparse: combining two nodes merges their ascending
// ids once, adding a zero row where one side lacks a row (a node without a row
// is that row's zero block, however its leaves were grouped). The cost is
// linear in the rows pushed, with at most one node a tree level in flight.
//
// Workers pre-sum a block of their VWs with a SparseTreeReducer rooted at the
// block; a shard's sparse table (server/sparse_table.h) reduces the pushed
// blocks with one rooted at the whole tree. Not thread-safe; a value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "common/tree.h"

namespace eps {

// Rows of `dim` floats named by strictly ascending 64-bit row ids:
// values[i * dim, (i + 1) * dim) is row ids[i].
struct SparseRows {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};

// InvalidArgument unless ids are strictly ascending (sorted, no duplicates) and
// there are ids.size() * dim values.
Status ValidateSparseRows(const uint64_t* ids, size_t num_ids, size_t num_values, size_t dim);

class SparseTreeReducer {
 public:
  // Reduces the subtree rooted at `root` of the canonical tree over
  // `num_leaves` VWs, rows of `dim` floats (dim >= 1).
  SparseTreeReducer(Block root, uint32_t num_leaves, size_t dim,
                    WireDType rounding = WireDType::kFP32);

  // Adds node `b`'s rows. The whole push is validated before anything changes:
  // InvalidArgument for ids not strictly ascending, a wrong number of values or
  // a block that is not a tree node under root; AlreadyExists when `b` overlaps
  // leaves already counted.
  Status Add(const Block& b, const uint64_t* ids, size_t num_ids, const float* values,
             size_t num_values);

  bool complete() const { return coverage_->complete(); }
  // Present leaves under root not yet counted, as aligned blocks.
  std::vector<Block> Missing() const { return coverage_->Missing(); }
  // The root's rows, ascending by id; only when complete() (FailedPrecondition
  // otherwise). Leaves the reducer empty, ready for the next step.
  StatusOr<SparseRows> TakeResult();
  // Forgets every contribution.
  void Clear();

  const Block& root() const { return root_; }
  size_t dim() const { return dim_; }

 private:
  const Block root_;
  const uint32_t num_leaves_;
  const size_t dim_;
  const WireDType rounding_;
  std::optional<TreeReducer> coverage_;  // zero-width: which leaves were counted, and the checks
  TreeNodes<SparseRows> nodes_;          // the nodes in flight, as TreeReducer's
};

}  // namespace eps
