#include "server/checkpoint_writer.h"

#include <glog/logging.h>
#include <unistd.h>

#include <utility>

namespace eps {

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || queued_.has_value(); });
    if (stop_) return;
    ShardSnapshot snapshot = std::move(*queued_);
    queued_.reset();
    busy_ = true;
    cv_.notify_all();  // room for the next one
    lock.unlock();
    const Step step = snapshot.version;
    const auto start = std::chrono::steady_clock::now();
    Status st = store_->WriteCheckpoint(step, snapshot.blobs, snapshot.metadata);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    snapshot = ShardSnapshot();  // let go of the values before reporting
    lock.lock();
    busy_ = false;
    results_.push_back({step, std::move(st), seconds});
    cv_.notify_all();
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) != sizeof one)
      PLOG(WARNING) << "could not wake the shard's loop";
  }
}

}  // namespace eps
