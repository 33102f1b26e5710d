#include "worker/slowdown.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Slowdown, OffDoesNotIdle) {
  const Slowdown off(1.0, /*on_cpu=*/false);
  EXPECT_EQ(off.Start(), Slowdown::Duration::zero());
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  off.After(off.Start(), stop);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(50));
}

TEST(Slowdown, IdlesTheFactorLessOneTimesTheCompute) {
  const Slowdown twice(3.0, /*on_cpu=*/false);  // the wall clock: a sleep counts as compute
  std::atomic<bool> stop{false};
  const Slowdown::Duration start = twice.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto t0 = Clock::now();
  twice.After(start, stop);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(60));  // 2 x at least 30 ms
}

TEST(Slowdown, TheStopFlagEndsTheIdling) {
  const Slowdown slow(1000.0, /*on_cpu=*/false);
  std::atomic<bool> stop{true};
  const Slowdown::Duration start = slow.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // 20 s of idling without the flag
  const auto t0 = Clock::now();
  slow.After(start, stop);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(Slowdown, OnTheCpuAnIdleThreadHasNoComputeToMultiply) {
  const Slowdown slow(1000.0, /*on_cpu=*/true);
  std::atomic<bool> stop{false};
  const Slowdown::Duration start = slow.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // wall time, not CPU time
  const auto t0 = Clock::now();
  slow.After(start, stop);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));  // 50 ms of wall time would be 50 s
}

}  // namespace
}  // namespace eps
