// A sparse gradient's rows coalesced: what backward gives a sparse table
// (one row per id it read, ids repeated, in the order it read them) as the
// rows a step touched, ids ascending and distinct, each id's rows summed in
// the order given, one float addition at a time (the first row copied, then
// out += next). The order is a total one, (id, position), so the bits depend
// on no sort's implementation and stay the same when the ids are relabeled
// in their order (a compact table's ranks, models/lookup_tables.h).
// libtorch's Tensor::coalesce(), which the worker called on every VW's
// gradient before, sorts with an unstable std::sort (the duplicates' order
// is then its algorithm's, which another build of libtorch need not share)
// through TensorIterator, and adds each duplicate with a BLAS call: 0.36 ms
// for a batch of 128 x 49 ids against 0.065 ms here, a radix sort of the
// ids (docs/benchmarks.md, "sparse"). Torch-free. Not thread-safe: one per
// caller, reused step after step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace eps {

// Sorts `ids` ascending and drops the repeats: a batch's distinct rows. The
// radix sort RowCoalescer uses (0.3 ms of std::sort for 128 x 49 ids, a
// tenth of it here).
void SortDistinct(std::vector<uint64_t>* ids);

class RowCoalescer {
 public:
  // Orders the `n` ids (n < 2^32: a batch's), and returns how many distinct
  // ones there are.
  size_t Prepare(const int64_t* ids, size_t n);
  // The coalesced rows of the prepared ids whose rows are `values` (n x dim
  // floats): Prepare's count of ids ascending into `out_ids`, their summed
  // rows into `out_values` (count x dim floats).
  void Write(const float* values, size_t dim, int64_t* out_ids, float* out_values) const;

 private:
  std::vector<std::pair<uint64_t, uint32_t>> order_;  // (id's key, position), sorted
  std::vector<std::pair<uint64_t, uint32_t>> scratch_;
  std::vector<uint32_t> counts_;
};

}  // namespace eps
