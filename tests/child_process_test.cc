#include "bench/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

TEST(ChildProcess, AChildThatExitsIsReapedAndItsStatusCounted) {
  std::vector<Child> children;
  children.push_back(*Spawn({"/bin/true"}, "true", "/dev/null"));
  children.push_back(*Spawn({"/bin/sh", "-c", "exit 3"}, "three", "/dev/null"));
  EXPECT_EQ(Reap(&children, Clock::now() + std::chrono::seconds(30)), 1);
  for (const Child& c : children) EXPECT_EQ(c.pid, -1);
}

TEST(ChildProcess, OneStillRunningAtTheDeadlineIsKilled) {
  std::vector<Child> children;
  children.push_back(*Spawn({"/bin/sleep", "600"}, "sleeper", "/dev/null"));
  const pid_t pid = children[0].pid;
  const auto t0 = Clock::now();
  EXPECT_EQ(Reap(&children, Clock::now() + std::chrono::milliseconds(100)), 1);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process any more
}

TEST(ChildProcess, ALogThatCannotBeOpenedIsAnError) {
  EXPECT_EQ(Spawn({"/bin/true"}, "true", "/nonexistent/dir/log").status().code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace eps
