#include "worker/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace eps {
namespace {

bool IsPermutation(std::vector<int64_t> p, int64_t n) {
  if (static_cast<int64_t>(p.size()) != n) return false;
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < n; ++i) {
    if (p[static_cast<size_t>(i)] != i) return false;
  }
  return true;
}

// The stream the contract defines, built independently of Sampler::Indices.
std::vector<int64_t> ReferenceStream(uint64_t seed, int64_t n, int64_t length) {
  std::vector<int64_t> stream;
  for (int64_t e = 0; static_cast<int64_t>(stream.size()) < length; ++e) {
    const std::vector<int64_t> perm = EpochPermutation(seed, e, n);
    stream.insert(stream.end(), perm.begin(), perm.end());
  }
  stream.resize(static_cast<size_t>(length));
  return stream;
}

TEST(EpochPermutation, IsAPermutationOfTheDataSet) {
  for (int64_t n : {1, 2, 3, 10, 97, 1000}) {
    for (int64_t e : {0, 1, 7})
      EXPECT_TRUE(IsPermutation(EpochPermutation(42, e, n), n)) << n << " " << e;
  }
  EXPECT_TRUE(EpochPermutation(42, 0, 0).empty());
}

TEST(EpochPermutation, DiffersBetweenSeedsAndEpochsAndRepeatsForTheSameKey) {
  const std::vector<int64_t> a = EpochPermutation(1, 0, 1000);
  EXPECT_EQ(a, EpochPermutation(1, 0, 1000));
  EXPECT_NE(a, EpochPermutation(2, 0, 1000));
  EXPECT_NE(a, EpochPermutation(1, 1, 1000));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
}

TEST(EpochPermutation, PutsEveryElementEverywhereAboutEquallyOften) {
  // A biased shuffle (e.g. modulo reduction, or swapping with any position)
  // shows up as uneven position counts over many epochs.
  constexpr int64_t kN = 5;
  constexpr int kEpochs = 20000;
  int64_t counts[kN][kN] = {};
  for (int e = 0; e < kEpochs; ++e) {
    const std::vector<int64_t> p = EpochPermutation(9, e, kN);
    for (int64_t pos = 0; pos < kN; ++pos) ++counts[p[static_cast<size_t>(pos)]][pos];
  }
  for (int64_t v = 0; v < kN; ++v) {
    for (int64_t pos = 0; pos < kN; ++pos) {
      EXPECT_NEAR(counts[v][pos], kEpochs / kN, 250) << "value " << v << " at position " << pos;
    }
  }
}

TEST(StreamSeed, IsSensitiveToArgumentOrder) {
  EXPECT_NE(StreamSeed(7, 1, 2), StreamSeed(7, 2, 1));
  EXPECT_NE(StreamSeed(1, 2, 7), StreamSeed(2, 1, 7));
  EXPECT_NE(StreamSeed(1, 7, 2), StreamSeed(2, 7, 1));
  EXPECT_NE(StreamSeed(0, 0, 1), StreamSeed(0, 1, 0));
}

TEST(StreamSeed, GivesDistinctKeysForEveryVwAndStep) {
  std::set<uint64_t> keys;
  for (uint64_t v = 0; v < 64; ++v) {
    for (uint64_t t = 0; t < 256; ++t) keys.insert(StreamSeed(123, v, t));
  }
  EXPECT_EQ(keys.size(), 64u * 256u);
}

TEST(StreamSeed, KeepsItsPinnedValues) {
  // Changing these breaks reproducibility of every job ever run: do not update
  // them unless that is the intent.
  EXPECT_EQ(StreamSeed(0, 0, 0), uint64_t{0x238275bc38fcbe91ULL});
  EXPECT_EQ(StreamSeed(42, 3, 1000), uint64_t{0x7d65dc5f620c3da2ULL});
  const std::vector<int64_t> p = EpochPermutation(42, 5, 10);
  EXPECT_EQ(p, (std::vector<int64_t>{0, 4, 8, 3, 9, 2, 1, 7, 5, 6}));
}

// Runs every VW of steps [0, steps) and returns the concatenation of their
// batches in (step, VW) order.
std::vector<int64_t> RunSteps(Sampler& s, int64_t steps) {
  std::vector<int64_t> all, batch;
  for (int64_t t = 0; t < steps; ++t) {
    for (uint32_t v = 0; v < s.num_vws(); ++v) {
      s.Indices(VirtualWorkerId(v), Step(t), &batch);
      EXPECT_EQ(batch.size(), s.batch_per_vw());
      all.insert(all.end(), batch.begin(), batch.end());
    }
  }
  return all;
}

TEST(Sampler, TakesEverySampleOncePerEpochWhenTheBatchesDivideTheDataSet) {
  constexpr int64_t kN = 120;  // V*b = 4*5 = 20 divides 120: 6 steps per epoch
  Sampler s(/*seed=*/11, kN, /*num_vws=*/4, /*batch_per_vw=*/5);
  const std::vector<int64_t> all = RunSteps(s, 18);
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(all.begin() + e * kN, all.begin() + (e + 1) * kN);
    EXPECT_TRUE(IsPermutation(epoch, kN)) << "epoch " << e;
    EXPECT_EQ(epoch, EpochPermutation(11, e, kN));
  }
  EXPECT_EQ(s.EpochOf(Step(5)), 0);
  EXPECT_EQ(s.EpochOf(Step(6)), 1);
  EXPECT_EQ(s.EpochOf(Step(17)), 2);
}

TEST(Sampler, StraddlesEpochsWhenTheBatchesDoNotDivideTheDataSet) {
  constexpr int64_t kN = 97;  // prime: batches of V*b = 3*7 = 21 straddle every boundary
  Sampler s(/*seed=*/5, kN, /*num_vws=*/3, /*batch_per_vw=*/7);
  const int64_t steps = 20;
  const std::vector<int64_t> all = RunSteps(s, steps);
  EXPECT_EQ(all, ReferenceStream(5, kN, steps * 21));
  for (int e = 0; (e + 1) * kN <= static_cast<int64_t>(all.size()); ++e) {
    std::vector<int64_t> epoch(all.begin() + e * kN, all.begin() + (e + 1) * kN);
    EXPECT_TRUE(IsPermutation(epoch, kN)) << "epoch " << e;
  }
  // Step 4 starts at sample 84 (epoch 0), step 5 at 105 (epoch 1).
  EXPECT_EQ(s.EpochOf(Step(4)), 0);
  EXPECT_EQ(s.EpochOf(Step(5)), 1);
}

TEST(Sampler, SpansSeveralEpochsWhenOneBatchIsLargerThanTheDataSet) {
  constexpr int64_t kN = 4;
  Sampler s(/*seed=*/3, kN, /*num_vws=*/2, /*batch_per_vw=*/10);
  EXPECT_EQ(RunSteps(s, 3), ReferenceStream(3, kN, 3 * 2 * 10));
}

TEST(Sampler, GivesAVwTheSameSamplesWhereverAndInWhateverOrderItRuns) {
  constexpr int64_t kN = 1000;
  Sampler forward(77, kN, 8, 16);
  Sampler backward(77, kN, 8, 16);
  std::vector<std::vector<int64_t>> a(8 * 40), b(8 * 40);
  for (int64_t t = 0; t < 40; ++t) {
    for (uint32_t v = 0; v < 8; ++v) forward.Indices(VirtualWorkerId(v), Step(t), &a[t * 8 + v]);
  }
  for (int64_t t = 39; t >= 0; --t) {
    for (uint32_t v = 8; v-- > 0;) backward.Indices(VirtualWorkerId(v), Step(t), &b[t * 8 + v]);
  }
  EXPECT_EQ(a, b);
  // A fresh sampler asked for a single late (VW, step) agrees too.
  Sampler lone(77, kN, 8, 16);
  std::vector<int64_t> one;
  lone.Indices(VirtualWorkerId(5), Step(33), &one);
  EXPECT_EQ(one, a[33 * 8 + 5]);
}

TEST(Sampler, DifferentSeedsGiveDifferentBatches) {
  Sampler a(1, 500, 2, 32), b(2, 500, 2, 32);
  std::vector<int64_t> x, y;
  a.Indices(VirtualWorkerId(0), Step(0), &x);
  b.Indices(VirtualWorkerId(0), Step(0), &y);
  EXPECT_NE(x, y);
}

TEST(Sampler, HandlesStepsUpToABillionWithoutOverflow) {
  constexpr int64_t kN = 60000;
  constexpr int64_t kStep = 1000000000;
  Sampler s(9, kN, /*num_vws=*/1024, /*batch_per_vw=*/4096);
  // First sample of VW 1023 at step 1e9: ((1e9 * 1024 + 1023) * 4096), about 4.2e15.
  const int64_t first = (kStep * 1024 + 1023) * 4096;
  std::vector<int64_t> batch;
  s.Indices(VirtualWorkerId(1023), Step(kStep), &batch);
  ASSERT_EQ(batch.size(), 4096u);
  const std::vector<int64_t> perm = EpochPermutation(9, first / kN, kN);
  EXPECT_EQ(batch[0], perm[static_cast<size_t>(first % kN)]);
  EXPECT_EQ(s.EpochOf(Step(kStep)), kStep * 1024 * 4096 / kN);
  for (int64_t i : batch) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, kN);
  }
}

}  // namespace
}  // namespace eps
