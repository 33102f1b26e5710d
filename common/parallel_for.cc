#include "common/parallel_for.h"

#include <algorithm>
#include <string>

#include "common/threads.h"

namespace eps {

StatusOr<std::unique_ptr<ParallelFor>> ParallelFor::Start(int threads) {
  if (threads < 1) {
    return InvalidArgument("a ParallelFor needs at least 1 thread, got " +
                           std::to_string(threads));
  }
  std::unique_ptr<ParallelFor> p(new ParallelFor(0));
  p->helpers_.reserve(threads - 1);
  for (int i = 0; i + 1 < threads; ++i) {
    const size_t index = i + 1;  // range 0 is the caller's
    EPS_ASSIGN_OR_RETURN(std::thread t,
                         StartThreadWithoutStopSignals([raw = p.get(), index] { raw->Helper(index); }));
    p->helpers_.push_back(std::move(t));
  }
  return p;
}

ParallelFor::~ParallelFor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

std::vector<size_t> ParallelFor::Cuts(size_t n, size_t grain, int threads) {
  const size_t most = grain == 0 ? n : std::max<size_t>(1, n / grain);
  const size_t parts = std::max<size_t>(1, std::min<size_t>(threads, most));
  std::vector<size_t> cuts(parts + 1);
  for (size_t i = 0; i <= parts; ++i) cuts[i] = n / parts * i + std::min(i, n % parts);
  return cuts;
}

void ParallelFor::Run(size_t n, size_t grain, const Range& fn) {
  std::vector<size_t> cuts = Cuts(n, grain, threads());
  const size_t parts = cuts.size() - 1;
  if (parts == 1) {
    if (n > 0) fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cuts_ = std::move(cuts);
    fn_ = &fn;
    running_ = parts - 1;
    ++generation_;
  }
  wake_.notify_all();
  fn(cuts_[0], cuts_[1]);  // cuts_ does not change before every helper is done
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return running_ == 0; });
  fn_ = nullptr;
}

void ParallelFor::Helper(size_t index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index + 1 >= cuts_.size()) continue;  // a run cut into fewer ranges
    const size_t lo = cuts_[index], hi = cuts_[index + 1];
    const Range* fn = fn_;
    lock.unlock();
    (*fn)(lo, hi);
    lock.lock();
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace eps
