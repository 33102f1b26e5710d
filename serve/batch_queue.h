// The dynamic batching queue of `elasticps serve` (docs/serving.md): HTTP
// threads push parsed requests, the one inference thread takes them in
// batches of up to `max_batch` instances, waiting at most `max_delay` after
// the oldest request arrived for more to come. Bounded: a push beyond
// `max_queue` waiting requests is refused (the server answers 503). After
// Close, pushes are refused and Take hands out what is queued without waiting,
// then nothing: the drain on SIGTERM.
//
// A request is never split: a batch is whole requests in arrival order, as
// many as fit in max_batch instances, and at least one (a request of more
// instances than max_batch runs alone). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "serve/request.h"

namespace eps {

struct BatchQueueOptions {
  int64_t max_batch = 32;                     // instances per batch (>= 1)
  std::chrono::microseconds max_delay{2000};  // the oldest request's longest wait for more
  size_t max_queue = 64;                      // requests waiting (>= 1)
};

// What the inference thread answers a request with: its rows of a batch's
// outputs (`first`, the request's `count` instances on), or why not.
struct RequestResult {
  Status status;
  std::shared_ptr<const BatchOutputs> outputs;
  int64_t first = 0;
  int64_t batch_size = 0;  // instances in the batch it ran in
  uint64_t model_version = 0;
};

// One request waiting for its batch. The HTTP thread that pushed it waits on
// `result`'s future; the inference thread sets it exactly once.
struct PendingRequest {
  Instances instances;
  Clock::time_point arrived;
  std::promise<RequestResult> result;
};

class BatchQueue {
 public:
  explicit BatchQueue(const BatchQueueOptions& options);

  // Queues `request`. ResourceExhausted when max_queue requests wait,
  // Unavailable after Close.
  [[nodiscard]] Status Push(std::shared_ptr<PendingRequest> request);

  // Blocks until a batch is ready (TakeIfReady, with steady_clock's time) and
  // returns it; empty once the queue is closed and drained.
  std::vector<std::shared_ptr<PendingRequest>> Take();

  // The batch ready at `now`: when max_batch instances wait, when the oldest
  // request has waited max_delay, or after Close; else empty, and `*wake`
  // (if set) the time it will be ready unless more requests come first (the
  // oldest's arrival + max_delay; unspecified when none waits). Never blocks:
  // for tests with a fake clock, and for Take.
  std::vector<std::shared_ptr<PendingRequest>> TakeIfReady(Clock::time_point now,
                                                           Clock::time_point* wake = nullptr);

  // Refuses pushes from now on; Take hands out the rest at once. Idempotent.
  void Close();

  size_t depth() const;              // requests waiting
  int64_t queued_instances() const;  // their instances

 private:
  std::vector<std::shared_ptr<PendingRequest>> TakeLocked(Clock::time_point now,
                                                          Clock::time_point* wake);

  const BatchQueueOptions options_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<PendingRequest>> queue_;  // guarded by mu_
  int64_t instances_ = 0;                              // guarded by mu_
  bool closed_ = false;                                // guarded by mu_
};

}  // namespace eps
