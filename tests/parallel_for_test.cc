#include "common/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace eps {
namespace {

TEST(ParallelFor, CutsCoverEveryElementOnceInAtMostThreadsRanges) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{100}, size_t{1000003}}) {
    for (int threads : {1, 2, 3, 8}) {
      const std::vector<size_t> cuts = ParallelFor::Cuts(n, 10, threads);
      ASSERT_GE(cuts.size(), 2u);
      EXPECT_LE(cuts.size() - 1, static_cast<size_t>(threads));
      EXPECT_EQ(cuts.front(), 0u);
      EXPECT_EQ(cuts.back(), n);
      for (size_t i = 1; i < cuts.size(); ++i) {
        EXPECT_LE(cuts[i - 1], cuts[i]);
        if (cuts.size() > 2) {
          EXPECT_GE(cuts[i] - cuts[i - 1], 10u);  // the grain, but a lone range
        }
      }
    }
  }
}

TEST(ParallelFor, RunsEachElementExactlyOnceRunAfterRun) {
  auto p = ParallelFor::Start(4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->threads(), 4);
  for (size_t n : {size_t{3}, size_t{4000}, size_t{1}, size_t{99999}, size_t{0}, size_t{64}}) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> calls{0};
    (*p)->Run(n, 16, [&](size_t lo, size_t hi) {
      ++calls;
      for (size_t i = lo; i < hi; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " element " << i;
    EXPECT_EQ(static_cast<size_t>(calls.load()), n == 0 ? 0 : ParallelFor::Cuts(n, 16, 4).size() - 1);
  }
}

TEST(ParallelFor, UsesTheHelperThreads) {
  auto p = ParallelFor::Start(2);
  ASSERT_TRUE(p.ok());
  std::atomic<int> off_caller{0};
  const auto caller = std::this_thread::get_id();
  (*p)->Run(1000, 1, [&](size_t, size_t) {
    if (std::this_thread::get_id() != caller) ++off_caller;
  });
  EXPECT_EQ(off_caller.load(), 1);
}

TEST(ParallelFor, RefusesFewerThanOneThread) {
  EXPECT_EQ(ParallelFor::Start(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
