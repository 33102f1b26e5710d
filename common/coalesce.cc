#include "common/coalesce.h"

#include <algorithm>
#include <cstring>

namespace eps {
namespace {

constexpr int kDigitBits = 11;
constexpr uint64_t kSign = uint64_t{1} << 63;  // flipped: unsigned order is the ids' signed order

}  // namespace

size_t RowCoalescer::Prepare(const int64_t* ids, size_t n) {
  order_.resize(n);
  scratch_.resize(n);
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t key = static_cast<uint64_t>(ids[k]) ^ kSign;
    order_[k] = {key, static_cast<uint32_t>(k)};
    lo = std::min(lo, key);
    hi = std::max(hi, key);
  }
  // A least-significant-digit radix sort of the keys less the smallest, as many digits as their
  // span needs: stable, so each id's rows keep the order given.
  const uint64_t span = n == 0 ? 0 : hi - lo;
  for (int shift = 0; shift < 64 && (span >> shift) != 0; shift += kDigitBits) {
    counts_.assign(size_t{1} << kDigitBits, 0);
    const uint64_t mask = (uint64_t{1} << kDigitBits) - 1;
    for (const auto& [key, at] : order_) ++counts_[((key - lo) >> shift) & mask];
    uint32_t start = 0;
    for (uint32_t& c : counts_) start += std::exchange(c, start);
    for (const auto& e : order_) scratch_[counts_[((e.first - lo) >> shift) & mask]++] = e;
    order_.swap(scratch_);
  }
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
