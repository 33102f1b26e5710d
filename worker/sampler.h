// Which samples a virtual worker trains on at a step, and the random keys it uses.
//
// The consistency contract (docs/design.md): with V virtual workers and per-VW batch
// b, VW v at step t takes samples [(t*V + v)*b, (t*V + v + 1)*b) of the stream
// formed by concatenating per-epoch permutations of the data set. The
// permutation of epoch e is a Fisher-Yates shuffle driven by a generator seeded
// from (seed, e). Everything here is a pure function of its arguments, written
// in this project with fixed integer arithmetic (no std::shuffle, no
// std::uniform_int_distribution, whose results differ between standard
// libraries), so every worker on every machine computes the same bits.
//
// Generators: SplitMix64 (Steele, Lea, Flood 2014) mixes keys; xoshiro256**
// (Blackman, Vigna 2018) seeded through SplitMix64 drives the shuffle; bounded
// integers use Lemire's multiply-shift with rejection, which is unbiased.
#pragma once

#include <cstdint>
#include <list>
#include <utility>
#include <vector>

#include "common/ids.h"

namespace eps {

// Deterministic 64-bit key of (seed, a, b), order-sensitive in every argument
// (StreamSeed(s, 1, 2) != StreamSeed(s, 2, 1)). A VW seeds every random
// generator of its step with StreamSeed(seed, vw, step). Values of `a` at or
// above 2^32 are reserved for keys of this file (they never collide with a VW id).
uint64_t StreamSeed(uint64_t seed, uint64_t a, uint64_t b);

// The permutation of [0, n) for epoch `epoch` of a job with seed `seed`
// (empty when n <= 0).
std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n);

// Maps (VW, step) to data set indices under the contract above; keeps the few
// epoch permutations in use (a step touches one or two epochs) in a small cache.
// Callers validate the job spec (dataset_size, num_vws, batch_per_vw all > 0)
// and the ids they get from the network (vw < num_vws, step >= 0) first; other
// values never crash but give meaningless indices (none for dataset_size <= 0).
// Not thread-safe: one per thread that samples.
class Sampler {
 public:
  Sampler(uint64_t seed, int64_t dataset_size, uint32_t num_vws, uint32_t batch_per_vw);

  // Replaces *out with the batch_per_vw indices of VW `vw` at step `step`, in
  // stream order.
  void Indices(VirtualWorkerId vw, Step step, std::vector<int64_t>* out);

  // The epoch of the step's first sample (that of VW 0).
  int64_t EpochOf(Step step) const;

  int64_t dataset_size() const { return dataset_size_; }
  uint32_t num_vws() const { return num_vws_; }
  uint32_t batch_per_vw() const { return batch_per_vw_; }

 private:
  const std::vector<int64_t>& Permutation(int64_t epoch);

  const uint64_t seed_;
  const int64_t dataset_size_;
  const uint32_t num_vws_;
  const uint32_t batch_per_vw_;
  // Most recently used first; at most kCacheSize entries.
  std::list<std::pair<int64_t, std::vector<int64_t>>> cache_;
};

}  // namespace eps
