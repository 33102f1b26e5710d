// Tests for TaskThread (common/task_thread.h): order, errors, waiting, shutdown.
#include "common/task_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace eps {
namespace {

std::unique_ptr<TaskThread> StartOrDie() {
  auto t = TaskThread::Start("test-tasks");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

TEST(TaskThreadTest, RunsTasksInPostingOrderOffTheCallersThread) {
  auto t = StartOrDie();
  std::vector<int> order;  // written by the task thread only, read after Wait
  std::vector<std::thread::id> ran_on;
  for (int i = 0; i < 100; ++i) {
    t->Post([&order, &ran_on, i] {
      order.push_back(i);
      ran_on.push_back(std::this_thread::get_id());
      return OkStatus();
    });
  }
  ASSERT_TRUE(t->Wait().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : ran_on) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(TaskThreadTest, WaitBlocksUntilTheRunningTaskEnds) {
  auto t = StartOrDie();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> done{false};
  t->Post([released, &done] {
    released.wait();
    done = true;
    return OkStatus();
  });
  auto waiter = std::async(std::launch::async, [&t] { return t->Wait(); });
  // The task cannot end before it is released, so neither can Wait.
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  release.set_value();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waiter.get().ok());
  EXPECT_TRUE(done);
}

TEST(TaskThreadTest, WaitReportsTheFirstErrorOnceAndSkipsTheTasksAfterIt) {
  auto t = StartOrDie();
  std::vector<int> ran;
  t->Post([&ran] {
    ran.push_back(1);
    return OkStatus();
  });
  t->Post([&ran] {
    ran.push_back(2);
    return InvalidArgument("first");
  });
  t->Post([&ran] {
    ran.push_back(3);
    return Internal("second");
  });
  Status st = t->Wait();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "first");
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  // Reported once: the next round runs normally.
  t->Post([&ran] {
    ran.push_back(4);
    return OkStatus();
  });
  EXPECT_TRUE(t->Wait().ok());
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 4}));
}

TEST(TaskThreadTest, DestructorRunsWhatWasPostedBeforeJoining) {
  std::atomic<int> ran{0};
  {
    auto t = StartOrDie();
    for (int i = 0; i < 10; ++i) {
      t->Post([&ran] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++ran;
        return OkStatus();
      });
    }
  }
  EXPECT_EQ(ran, 10);
}

}  // namespace
}  // namespace eps
