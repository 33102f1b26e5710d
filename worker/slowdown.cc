#include "worker/slowdown.h"

#include <time.h>

#include <algorithm>
#include <thread>

#include "worker/wait.h"

namespace eps {
namespace {

// CPU time this thread has used.
Slowdown::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::duration_cast<Slowdown::Duration>(std::chrono::seconds(ts.tv_sec) +
                                                        std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace

Slowdown::Duration Slowdown::Start() const {
  if (factor_ <= 1.0) return Duration::zero();
  return on_cpu_ ? ThreadCpuTime() : std::chrono::steady_clock::now().time_since_epoch();
}

void Slowdown::After(Duration start, const std::atomic<bool>& stop) const {
  if (factor_ <= 1.0) return;
  const auto compute = Start() - start;
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<Duration>(compute * (factor_ - 1));
  while (!stop.load()) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= Duration::zero()) break;
    std::this_thread::sleep_for(std::min<Duration>(left, kStopCheck));
  }
}

}  // namespace eps
