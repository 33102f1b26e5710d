#include "common/coalesce.h"

#include <algorithm>
#include <cstring>

namespace eps {
namespace {

constexpr int kDigitBits = 11;
constexpr uint64_t kSign = uint64_t{1} << 63;  // flipped: unsigned order is the ids' signed order

// Sorts `v` by key(element), a uint64: a least-significant-digit radix sort of
// the keys less the smallest, as many digits as their span needs. Stable.
// `scratch` and `counts` are the caller's, reused.
template <typename T, typename Key>
void RadixSort(std::vector<T>* v, std::vector<T>* scratch, std::vector<uint32_t>* counts, Key key) {
  if (v->empty()) return;
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (const T& e : *v) {
    lo = std::min(lo, key(e));
    hi = std::max(hi, key(e));
  }
  scratch->resize(v->size());
  const uint64_t span = hi - lo, mask = (uint64_t{1} << kDigitBits) - 1;
  for (int shift = 0; shift < 64 && (span >> shift) != 0; shift += kDigitBits) {
    counts->assign(size_t{1} << kDigitBits, 0);
    for (const T& e : *v) ++(*counts)[((key(e) - lo) >> shift) & mask];
    uint32_t start = 0;
    for (uint32_t& c : *counts) start += std::exchange(c, start);
    for (const T& e : *v) (*scratch)[(*counts)[((key(e) - lo) >> shift) & mask]++] = e;
    v->swap(*scratch);
  }
}

}  // namespace

void SortDistinct(std::vector<uint64_t>* ids) {
  std::vector<uint64_t> scratch;
  std::vector<uint32_t> counts;
  RadixSort(ids, &scratch, &counts, [](uint64_t id) { return id; });
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
}

size_t RowCoalescer::Prepare(const int64_t* ids, size_t n) {
  order_.resize(n);
  for (size_t k = 0; k < n; ++k)
    order_[k] = {static_cast<uint64_t>(ids[k]) ^ kSign, static_cast<uint32_t>(k)};
  // Stable: each id's rows keep the order given.
  RadixSort(&order_, &scratch_, &counts_, [](const auto& e) { return e.first; });
  size_t distinct = 0;
  for (size_t k = 0; k < n; ++k) distinct += k == 0 || order_[k].first != order_[k - 1].first;
  return distinct;
}

void RowCoalescer::Write(const float* values, size_t dim, int64_t* out_ids,
                         float* out_values) const {
  float* row = nullptr;
  for (size_t k = 0; k < order_.size(); ++k) {
    const float* src = values + static_cast<size_t>(order_[k].second) * dim;
    if (k == 0 || order_[k].first != order_[k - 1].first) {
      row = row == nullptr ? out_values : row + dim;
      *out_ids++ = static_cast<int64_t>(order_[k].first ^ kSign);
      std::memcpy(row, src, dim * sizeof(float));
    } else {
      for (size_t j = 0; j < dim; ++j) row[j] += src[j];
    }
  }
}

}  // namespace eps
