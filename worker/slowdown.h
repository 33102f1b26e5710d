// --slowdown: a testing and demo aid standing in for slower hardware.
#pragma once

#include <atomic>
#include <chrono>

namespace eps {

// After each VW's compute the worker idles (factor - 1) times that compute's
// time, measured on the CPU by the computing thread's CPU time (a core
// shared with other processes must not multiply the slowdown) and on a GPU by
// the wall clock (the thread mostly waits there). Changes timing, never bits.
// A factor of 1 (or less) is off. Used by one thread.
class Slowdown {
 public:
  using Duration = std::chrono::steady_clock::duration;
  Slowdown(double factor, bool on_cpu) : factor_(factor), on_cpu_(on_cpu) {}

  // Where the compute begins, on the clock the slowdown measures it by (zero when off).
  Duration Start() const;
  // Idles (factor - 1) x the compute begun at `start`, in slices of at most
  // kStopCheck (worker/wait.h) that watch `stop`.
  void After(Duration start, const std::atomic<bool>& stop) const;

 private:
  const double factor_;
  const bool on_cpu_;
};

}  // namespace eps
