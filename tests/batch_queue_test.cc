// BatchQueue (serve/batch_queue.h): batches of whole requests up to
// max_batch instances, ready when full, when the oldest waited max_delay, or
// after Close; bounded; drained on Close. Time is a FakeClock's.
#include "serve/batch_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace eps {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<PendingRequest> Request(int64_t instances, Clock::time_point arrived) {
  auto r = std::make_shared<PendingRequest>();
  r->instances.count = instances;
  r->instances.floats.assign(static_cast<size_t>(instances), 1.0f);
  r->arrived = arrived;
  return r;
}

BatchQueueOptions Options(int64_t max_batch, int delay_ms, size_t max_queue) {
  BatchQueueOptions o;
  o.max_batch = max_batch;
  o.max_delay = milliseconds(delay_ms);
  o.max_queue = max_queue;
  return o;
}

TEST(BatchQueue, ABatchWaitsForTheOldestRequestsDelayUnlessItIsFull) {
  FakeClock clock;
  BatchQueue q(Options(4, 10, 16));
  ASSERT_TRUE(q.Push(Request(1, clock.Now())).ok());
  clock.Advance(milliseconds(3));
  ASSERT_TRUE(q.Push(Request(2, clock.Now())).ok());
  Clock::time_point wake{};
  EXPECT_TRUE(q.TakeIfReady(clock.Now(), &wake).empty());
  EXPECT_EQ(wake, clock.Now() + milliseconds(7));  // the oldest's arrival + 10 ms
  clock.Advance(milliseconds(6));
  EXPECT_TRUE(q.TakeIfReady(clock.Now()).empty());
  clock.Advance(milliseconds(1));
  auto batch = q.TakeIfReady(clock.Now());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->instances.count, 1);
  EXPECT_EQ(q.depth(), 0u);

  // Four instances fill the batch at once; the fifth request waits for the next.
  ASSERT_TRUE(q.Push(Request(3, clock.Now())).ok());
  ASSERT_TRUE(q.Push(Request(1, clock.Now())).ok());
  ASSERT_TRUE(q.Push(Request(2, clock.Now())).ok());
  batch = q.TakeIfReady(clock.Now());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->instances.count + batch[1]->instances.count, 4);
  EXPECT_EQ(q.queued_instances(), 2);
  EXPECT_TRUE(q.TakeIfReady(clock.Now()).empty());
}

TEST(BatchQueue, ARequestLargerThanMaxBatchRunsAloneAndIsNeverSplit) {
  FakeClock clock;
  BatchQueue q(Options(4, 10, 16));
  ASSERT_TRUE(q.Push(Request(9, clock.Now())).ok());
  ASSERT_TRUE(q.Push(Request(1, clock.Now())).ok());
  auto batch = q.TakeIfReady(clock.Now());
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->instances.count, 9);
  EXPECT_EQ(q.queued_instances(), 1);
}

TEST(BatchQueue, AFullQueueRefusesAndAClosedOneRefusesThenHandsOutTheRestAtOnce) {
  FakeClock clock;
  BatchQueue q(Options(100, 1000, 2));
  ASSERT_TRUE(q.Push(Request(1, clock.Now())).ok());
  ASSERT_TRUE(q.Push(Request(1, clock.Now())).ok());
  EXPECT_EQ(q.Push(Request(1, clock.Now())).code(), StatusCode::kResourceExhausted);
  q.Close();
  EXPECT_EQ(q.Push(Request(1, clock.Now())).code(), StatusCode::kUnavailable);
  // No delay after Close: the drain answers at once.
  EXPECT_EQ(q.TakeIfReady(clock.Now()).size(), 2u);
  EXPECT_TRUE(q.Take().empty());  // closed and drained: the inference thread ends
}

TEST(BatchQueue, TakeBlocksUntilAPushOrCloseWakesIt) {
  BatchQueue q(Options(1, 0, 4));
  auto taken = std::async(std::launch::async, [&q] { return q.Take().size(); });
  EXPECT_EQ(taken.wait_for(milliseconds(20)), std::future_status::timeout);
  ASSERT_TRUE(q.Push(Request(1, std::chrono::steady_clock::now())).ok());
  ASSERT_EQ(taken.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(taken.get(), 1u);
  auto ended = std::async(std::launch::async, [&q] { return q.Take().size(); });
  q.Close();
  ASSERT_EQ(ended.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(ended.get(), 0u);
}

}  // namespace
}  // namespace eps
