#include "worker/wait.h"

#include <algorithm>
#include <string>

namespace eps {

using std::chrono::milliseconds;

StatusOr<size_t> AwaitAny(const std::vector<Channel*>& channels, milliseconds timeout,
                          const std::atomic<bool>& stop, const std::function<Status()>& check) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (stop.load()) return Stopped();
    if (check) EPS_RETURN_IF_ERROR(check());
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
    }
    StatusOr<size_t> ready = AwaitReadable(channels, std::min(left, kStopCheck));
    if (ready.ok()) return ready;
    // DeadlineExceeded: this slice is over; Aborted: a signal interrupted the poll.
    const StatusCode code = ready.status().code();
    if (code != StatusCode::kDeadlineExceeded && code != StatusCode::kAborted) {
      return ready.status();
    }
  }
}

StatusOr<Channel::Incoming> ReceiveOrStop(Channel* channel, milliseconds timeout,
                                          const std::atomic<bool>& stop,
                                          const std::function<Status()>& check) {
  EPS_RETURN_IF_ERROR(AwaitAny({channel}, timeout, stop, check).status());
  return channel->TryReceive();
}

}  // namespace eps
