#include "worker/sampler.h"

#include <algorithm>

namespace eps {
namespace {

// Domain key of epoch permutations: above 2^32, so never a VW id.
constexpr uint64_t kPermutationDomain = 0x5045524d55544531ULL;  // "PERMUTE1"
constexpr size_t kCacheSize = 3;

// SplitMix64's output function applied to z + golden gamma: a bijection of 64-bit
// words with good avalanche.
uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** 1.0, state filled from a SplitMix64 stream of the key (the
// seeding its authors recommend; the state is never all zeros).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t key) {
    uint64_t x = key;
    for (uint64_t& w : s_) {
      w = Mix64(x);
      x += 0x9e3779b97f4a7c15ULL;
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, range), range > 0: Lemire, "Fast random integer generation in
  // an interval" (2019), multiply-shift with rejection of the biased low part.
  uint64_t Below(uint64_t range) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * range;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < range) {
      const uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * range;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t s_[4];
};

// floor(a / b) and the matching non-negative remainder, b > 0.
std::pair<__int128, int64_t> FloorDivMod(__int128 a, int64_t b) {
  __int128 q = a / b;
  __int128 r = a % b;
  if (r < 0) {
    r += b;
    q -= 1;
  }
  return {q, static_cast<int64_t>(r)};
}

}  // namespace

uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b) {
  return Mix64(Mix64(Mix64(seed) ^ a) ^ b);
}

std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n) {
  if (n <= 0) return {};
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  Xoshiro256 rng(StreamSeed(seed, kPermutationDomain, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

Sampler::Sampler(uint64_t seed, int64_t dataset_size, uint32_t num_vws, uint32_t batch_per_vw)
    : seed_(seed), dataset_size_(dataset_size), num_vws_(num_vws), batch_per_vw_(batch_per_vw) {}

const std::vector<int64_t>& Sampler::Permutation(int64_t epoch) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->first == epoch) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().second;
    }
  }
  if (cache_.size() >= kCacheSize) cache_.pop_back();
  cache_.emplace_front(epoch, EpochPermutation(seed_, epoch, dataset_size_));
  return cache_.front().second;
}

void Sampler::Indices(VirtualWorkerId vw, Step step, std::vector<int64_t>* out) {
  out->clear();
  if (dataset_size_ <= 0) return;
  out->reserve(batch_per_vw_);
  // |step| < 2^63, V and b < 2^32: the stream position fits in 128 bits.
  const __int128 first = (static_cast<__int128>(step.value()) * num_vws_ + vw.value()) *
                         static_cast<__int128>(batch_per_vw_);
  auto [epoch, offset] = FloorDivMod(first, dataset_size_);
  int64_t remaining = batch_per_vw_;
  while (remaining > 0) {
    const std::vector<int64_t>& perm = Permutation(static_cast<int64_t>(epoch));
    const int64_t take = std::min(remaining, dataset_size_ - offset);
    out->insert(out->end(), perm.begin() + offset, perm.begin() + offset + take);
    remaining -= take;
    offset = 0;
    ++epoch;
  }
}

int64_t Sampler::EpochOf(Step step) const {
  if (dataset_size_ <= 0) return 0;
  const __int128 first =
      static_cast<__int128>(step.value()) * num_vws_ * static_cast<__int128>(batch_per_vw_);
  return static_cast<int64_t>(FloorDivMod(first, dataset_size_).first);
}

}  // namespace eps
