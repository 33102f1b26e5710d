// Waits of the worker's main thread: every one has a deadline and looks at the
// stop flag (set by a signal) at least every kStopCheck, so a worker asked to
// leave notices within about 10 ms whatever it waits for (a lent serving node
// is given back within a VW: docs/serving.md). Stateless helpers;
// call them from the thread that owns the channels.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "common/status.h"
#include "schema/channel.h"

namespace eps {

// Longest slice of any wait between two looks at the stop flag.
constexpr std::chrono::milliseconds kStopCheck(10);

// What a wait returns once the stop flag is set.
inline Status Stopped() { return Aborted("stopped by a signal"); }

// Waits up to `timeout` until one of `channels` has a message and returns the
// lowest such index: Stopped() once `*stop` is set, DeadlineExceeded when
// nothing came, and the error of `check` (called between slices, when set)
// once it returns one.
[[nodiscard]] StatusOr<size_t> AwaitAny(const std::vector<Channel*>& channels,
                                        std::chrono::milliseconds timeout,
                                        const std::atomic<bool>& stop,
                                        const std::function<Status()>& check = {});

// AwaitAny on one channel, then its message.
[[nodiscard]] StatusOr<Channel::Incoming> ReceiveOrStop(
    Channel* channel, std::chrono::milliseconds timeout, const std::atomic<bool>& stop,
    const std::function<Status()>& check = {});

}  // namespace eps
