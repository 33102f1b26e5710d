// An injectable monotonic clock, so timeouts (heartbeats, deadlines) can be
// tested without sleeping. Implementations are thread-safe.
#pragma once

#include <chrono>

namespace eps {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;
  virtual ~Clock() = default;
  virtual time_point Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
};

// Seconds since the epoch on the wall clock: the "t" of the JSON lines processes write
// (events.jsonl, the scheduler's and the server's events).
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Seconds on the steady clock since `start`: the durations reports and metrics give.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A clock that moves only when told to. Not thread-safe: tests drive it from one thread.
class FakeClock final : public Clock {
 public:
  time_point Now() const override { return now_; }
  void Advance(duration d) { now_ += d; }

 private:
  time_point now_{};
};

}  // namespace eps
