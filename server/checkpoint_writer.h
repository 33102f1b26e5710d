// The shard's checkpoint writer: writes ShardSnapshots to its StateStore on a
// thread of its own, so that the shard's event loop only takes the snapshot.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/shard_state.h"
#include "storage/state_store.h"

namespace eps {

// Writes checkpoints on its own thread, in the order they were queued, and
// wakes the event loop through an eventfd after each. At most one snapshot
// waits while another is written: Enqueue waits (bounded) for room beyond
// that, so a disk slower than the checkpoint interval slows training instead
// of growing memory without bound. Thread-safe.
class CheckpointWriter {
 public:
  struct Result {
    Step step;
    Status status;
    double seconds = 0;  // the write's
  };

  CheckpointWriter(StateStore* store, int wake_fd)
      : store_(store), wake_fd_(wake_fd), thread_([this] { Loop(); }) {}

  // Finishes the checkpoint being written; drops one still waiting.
  ~CheckpointWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queued_.reset();
    }
    cv_.notify_all();
    thread_.join();
  }

  // Unavailable when no room came within `wait` (the snapshot is dropped).
  Status Enqueue(ShardSnapshot snapshot, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !queued_.has_value(); })) {
      return Unavailable("the checkpoint of step " + std::to_string(snapshot.version.value()) +
                         " found no room: the disk is slower than the checkpoint interval");
    }
    queued_ = std::move(snapshot);
    cv_.notify_all();
    return OkStatus();
  }

  // Waits until every queued checkpoint is written (or failed).
  Status Flush(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !queued_.has_value() && !busy_; })) {
      return Unavailable("checkpoints still being written after " + std::to_string(wait.count()) +
                         " ms");
    }
    return OkStatus();
  }

  std::vector<Result> TakeResults() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(results_, {});
  }

 private:
  void Loop();

  StateStore* const store_;
  const int wake_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<ShardSnapshot> queued_;  // guarded by mu_
  bool busy_ = false;                    // guarded by mu_
  bool stop_ = false;                    // guarded by mu_
  std::vector<Result> results_;          // guarded by mu_
  std::thread thread_;                   // last: starts once the rest exists
};

}  // namespace eps
