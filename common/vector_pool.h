// Buffers that keep their pages from one step to the next.
//
// A shard builds every chunk's next version in a new buffer and lets the version before last
// go: megabytes a chunk, every step. Freed to the allocator, such buffers come back as fresh
// pages (glibc trims or maps them anew), and on the hosts measured a page fault costs 10-15 us
// per 4 KiB: at 100 M parameters the faults cost more than the bytes' transfer. A VectorPool
// keeps released buffers, by size, up to a byte budget, and hands them out again: the same
// pages, no faults, no zeroing.
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/memory.h"

namespace eps {

template <class T>
class VectorPool : public std::enable_shared_from_this<VectorPool<T>> {
 public:
  // A pool keeping at most `max_bytes` of released buffers.
  static std::shared_ptr<VectorPool> Create(size_t max_bytes) {
    return std::shared_ptr<VectorPool>(new VectorPool(max_bytes));
  }

  // A buffer of `n` elements: a released one of that size (its contents unspecified), else a
  // new one (zeroed, its pages advised huge: common/memory.h).
  std::vector<T> Take(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        std::vector<T> v = std::move(it->second.back());
        it->second.pop_back();
        held_ -= n * sizeof(T);
        ++reused_;
        return v;
      }
      ++created_;
    }
    return HugeVector<T>(n);
  }

  // Takes `v` back for a later Take of its size, or frees it when the pool would hold more than
  // its budget.
  void Give(std::vector<T> v) {
    const size_t bytes = v.size() * sizeof(T);
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + bytes > max_bytes_) return;  // freed as `v` goes out of scope
    held_ += bytes;
    free_[v.size()].push_back(std::move(v));
  }

  // `v`, shared: when its last owner lets go (on any thread: ZeroMQ's I/O thread once a reply
  // is sent, a checkpoint writer), it comes back to this pool if the pool still exists.
  std::shared_ptr<std::vector<T>> Share(std::vector<T> v) {
    std::weak_ptr<VectorPool> pool = this->shared_from_this();
    return std::shared_ptr<std::vector<T>>(new std::vector<T>(std::move(v)),
                                           [pool](std::vector<T>* p) {
                                             if (auto alive = pool.lock())
                                               alive->Give(std::move(*p));
                                             delete p;
                                           });
  }

  // A new budget; buffers held beyond it are freed.
  void set_max_bytes(size_t max_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    max_bytes_ = max_bytes;
    for (auto it = free_.begin(); it != free_.end() && held_ > max_bytes_;) {
      while (!it->second.empty() && held_ > max_bytes_) {
        held_ -= it->second.back().size() * sizeof(T);
        it->second.pop_back();
      }
      it = it->second.empty() ? free_.erase(it) : std::next(it);
    }
  }

  // Bytes of released buffers held now.
  size_t held_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  // Takes served by a released buffer, and by a new one.
  size_t reused() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reused_;
  }
  size_t created() const {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }

 private:
  explicit VectorPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  mutable std::mutex mu_;
  size_t max_bytes_;
  std::unordered_map<size_t, std::vector<std::vector<T>>> free_;  // by element count
  size_t held_ = 0, reused_ = 0, created_ = 0;
};

}  // namespace eps
