// Random sparse steps for the tests of sparse tables and their reduction: each
// VW's touched rows and gradients, the block partials a worker would push, and
// random cuts of the VWs into blocks. Test data only: the bits need not be
// portable.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "common/sparse_tree.h"

namespace eps {

// Bitwise equality of float arrays (so that -0.0 and NaNs count).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// What one VW pushes in one step: its touched rows (ascending) and their gradients.
struct VwGrad {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};

// Random per-VW gradients over `rows` candidate ids (some VWs touch nothing; some values -0.0).
inline std::vector<VwGrad> RandomStep(std::mt19937_64& rng, uint32_t num_vws, size_t dim,
                                      uint64_t rows) {
  std::vector<VwGrad> out(num_vws);
  std::normal_distribution<float> normal;  // test data only: the bits need not be portable
  for (uint32_t v = 0; v < num_vws; ++v) {
    if (rng() % 5 == 0) continue;
    std::set<uint64_t> ids;
    const size_t n = rng() % 6;
    for (size_t i = 0; i < n; ++i) ids.insert((rng() % rows) * 0x9E3779B97F4A7C15ull);
    for (uint64_t id : ids) {
      out[v].ids.push_back(id);
      for (size_t j = 0; j < dim; ++j)
        out[v].values.push_back(rng() % 7 == 0 ? -0.0f : normal(rng));
    }
  }
  return out;
}

// The block partial a worker holding `b` would push: its VWs' rows reduced in the canonical tree.
inline SparseRows BlockPartial(const std::vector<VwGrad>& vws, const Block& b, uint32_t num_vws,
                               size_t dim) {
  SparseTreeReducer r(b, num_vws, dim);
  for (uint32_t v = b.lo; v < std::min(b.hi(), num_vws); ++v) {
    EXPECT_TRUE(r.Add(Block{v, 1}, vws[v].ids.data(), vws[v].ids.size(), vws[v].values.data(),
                      vws[v].values.size())
                    .ok());
  }
  return std::move(r.TakeResult().value());
}

// A random cut of [0, V) into contiguous ranges, each pushed as its aligned blocks.
inline std::vector<Block> RandomBlocks(std::mt19937_64& rng, uint32_t num_vws) {
  std::vector<Block> blocks;
  uint32_t lo = 0;
  while (lo < num_vws) {
    const uint32_t hi = lo + 1 + static_cast<uint32_t>(rng() % (num_vws - lo));
    for (const Block& b : AlignedBlocks(lo, hi)) blocks.push_back(b);
    lo = hi;
  }
  std::shuffle(blocks.begin(), blocks.end(), rng);  // push order: test data only
  return blocks;
}

}  // namespace eps
