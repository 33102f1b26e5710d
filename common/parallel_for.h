// Elementwise work cut over a fixed set of threads: a shard's optimizer and its
// copies, over the cores the shard is given (`shard --threads`).
//
// The cut is a pure function of (n, grain, threads), and every use here is
// elementwise (each element is computed by one thread with the same
// operations whatever the cut), so results never depend on the thread count:
// the consistency contract (docs/design.md) holds with any --threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace eps {

// The caller plus threads - 1 helper threads (started with the stop signals
// blocked, common/threads.h), which sleep between runs. One thread at a time
// calls Run (the owner's: a shard's event loop); the destructor joins the
// helpers.
class ParallelFor {
 public:
  using Range = std::function<void(size_t lo, size_t hi)>;

  // threads >= 1. InvalidArgument for fewer; Internal if a helper cannot start.
  [[nodiscard]] static StatusOr<std::unique_ptr<ParallelFor>> Start(int threads);
  ~ParallelFor();
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(lo, hi) over contiguous ranges that cover [0, n), at most
  // threads() of them and none shorter than `grain` elements (but a lone
  // range); the caller runs the first one. Returns once every range has run.
  // fn must not throw.
  void Run(size_t n, size_t grain, const Range& fn);

  // The ranges Run cuts [0, n) into: [cuts[i], cuts[i + 1]).
  static std::vector<size_t> Cuts(size_t n, size_t grain, int threads);

 private:
  explicit ParallelFor(int helpers) : helpers_(helpers) {}
  void Helper(size_t index);

  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // Guarded by mu_: the run in progress (its generation, ranges and function),
  // how many of its helper ranges are still running, and the stop flag.
  uint64_t generation_ = 0;
  std::vector<size_t> cuts_;
  const Range* fn_ = nullptr;
  size_t running_ = 0;
  bool stop_ = false;
};

}  // namespace eps
