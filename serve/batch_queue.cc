#include "serve/batch_queue.h"

#include <utility>

namespace eps {

BatchQueue::BatchQueue(const BatchQueueOptions& options) : options_(options) {}

Status BatchQueue::Push(std::shared_ptr<PendingRequest> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Unavailable("the server is draining: it takes no new requests");
    if (queue_.size() >= options_.max_queue) {
      return ResourceExhausted("the queue is full (" + std::to_string(options_.max_queue) +
                               " requests wait, --max_queue)");
    }
    instances_ += request->instances.count;
    queue_.push_back(std::move(request));
  }
  changed_.notify_all();
  return OkStatus();
}

std::vector<std::shared_ptr<PendingRequest>> BatchQueue::TakeLocked(Clock::time_point now,
                                                                    Clock::time_point* wake) {
  std::vector<std::shared_ptr<PendingRequest>> batch;
  if (queue_.empty()) return batch;
  const Clock::time_point ready_at = queue_.front()->arrived + options_.max_delay;
  if (!closed_ && instances_ < options_.max_batch && now < ready_at) {
    if (wake != nullptr) *wake = ready_at;
    return batch;
  }
  int64_t taken = 0;
  while (!queue_.empty() &&
         (batch.empty() || taken + queue_.front()->instances.count <= options_.max_batch)) {
    taken += queue_.front()->instances.count;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  instances_ -= taken;
  return batch;
}

std::vector<std::shared_ptr<PendingRequest>> BatchQueue::TakeIfReady(Clock::time_point now,
                                                                     Clock::time_point* wake) {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeLocked(now, wake);
}

std::vector<std::shared_ptr<PendingRequest>> BatchQueue::Take() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Clock::time_point wake{};
    auto batch = TakeLocked(std::chrono::steady_clock::now(), &wake);
    if (!batch.empty()) return batch;
    if (closed_) return batch;  // closed and drained
    if (queue_.empty()) {
      changed_.wait(lock);  // a push or Close wakes it
    } else {
      changed_.wait_until(lock, wake);
    }
  }
}

void BatchQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

size_t BatchQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

int64_t BatchQueue::queued_instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instances_;
}

}  // namespace eps
