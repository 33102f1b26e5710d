// RowCoalescer (common/coalesce.h) against the definition: each id's rows
// summed in the order given, one float addition at a time.
#include "common/coalesce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

namespace eps {
namespace {

struct Coalesced {
  std::vector<int64_t> ids;
  std::vector<float> values;
};

Coalesced CoalesceAll(RowCoalescer& c, const std::vector<int64_t>& ids,
                      const std::vector<float>& values, size_t dim) {
  Coalesced out;
  const size_t n = c.Prepare(ids.data(), ids.size());
  out.ids.resize(n);
  out.values.resize(n * dim);
  c.Write(values.data(), dim, out.ids.data(), out.values.data());
  return out;
}

TEST(RowCoalescer, SumsEachIdsRowsInTheOrderGivenIdsAscending) {
  std::mt19937_64 rng(7);
  RowCoalescer c;  // reused, as a worker reuses it step after step
  // Ids of a few bits (one radix digit), of 2^20 rows, of 63-bit keys (six digits), and of both
  // signs (a sort of the raw bits would put the negative ones last).
  for (const int64_t scale : {int64_t{1}, int64_t{10007}, int64_t{95084447056597}, int64_t{-3}})
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{6272}}) {
      const size_t dim = 5;
      std::vector<int64_t> ids(n);
      std::vector<float> values(n * dim);
      for (int64_t& id : ids) id = (static_cast<int64_t>(rng() % 97) - 40) * scale;  // many repeats
      // Values of wide range, so that another order of additions gives other bits.
      for (float& v : values)
        v = std::ldexp(static_cast<float>(rng() % 2001) - 1000.0f,
                       static_cast<int>(rng() % 40) - 20);
      std::map<int64_t, std::vector<float>> want;
      for (size_t k = 0; k < n; ++k) {
        auto [it, first] =
            want.try_emplace(ids[k], values.begin() + k * dim, values.begin() + (k + 1) * dim);
        if (!first)
          for (size_t j = 0; j < dim; ++j) it->second[j] += values[k * dim + j];
      }
      const Coalesced got = CoalesceAll(c, ids, values, dim);
      ASSERT_EQ(got.ids.size(), want.size()) << n;
      size_t r = 0;
      for (const auto& [id, row] : want) {
        EXPECT_EQ(got.ids[r], id);
        EXPECT_EQ(std::memcmp(got.values.data() + r * dim, row.data(), dim * sizeof(float)), 0)
            << id;
        ++r;
      }
    }
}

TEST(RowCoalescer, TheOrderOfARowsDuplicatesDecidesItsBits) {
  // 1e8 + 1 - 1e8 is not 1e8 - 1e8 + 1 in float: the order given is kept.
  RowCoalescer c;
  const Coalesced a = CoalesceAll(c, {4, 2, 4, 4}, {1e8f, 3, 1, -1e8f}, 1);
  EXPECT_EQ(a.ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a.values, (std::vector<float>{3, 0}));  // (1e8 + 1) rounds to 1e8
  const Coalesced b = CoalesceAll(c, {4, 2, 4, 4}, {1e8f, 3, -1e8f, 1}, 1);
  EXPECT_EQ(b.values, (std::vector<float>{3, 1}));
}

// A batch's ids (repeats, a power law), ids over 48 bits' span, and none: std::sort and
// std::unique's answer.
TEST(SortDistinct, SortsAndDropsRepeatsAtAnySpan) {
  std::mt19937_64 rng(5);
  for (const uint64_t span : {uint64_t{1} << 20, uint64_t{1} << 48, ~uint64_t{0}}) {
    std::vector<uint64_t> ids(6272);
    for (uint64_t& id : ids) id = (rng() % 4096) * (rng() % 7 == 0 ? 1 : 2654435761u) % span;
    std::vector<uint64_t> want = ids;
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    SortDistinct(&ids);
    EXPECT_EQ(ids, want) << "span " << span;
  }
  std::vector<uint64_t> none;
  SortDistinct(&none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace eps
