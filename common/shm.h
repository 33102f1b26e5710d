// Shared memory between a worker and a shard on the same host: the bytes of a
// pull reply or of a push go through a region the worker owns instead of
// through the socket (on loopback a 1.6 MB message costs about 1.2 ms of
// kernel copies and TCP processing, a memcpy about 0.1 ms), while the messages
// themselves still travel over ZeroMQ.
//
// The worker creates a region (a memfd, sealed so that it can never shrink:
// a peer that maps it can never fault on it) and names it in its pulls and
// pushes by process id, descriptor number and a random token, which the
// region's header holds. A shard opens /proc/<pid>/fd/<fd>, and writes into it only
// if it is a sealed memfd of at least the named size whose header holds the
// token: a worker on another host, or in another pid namespace, names
// nothing the shard can open, or a file without that token, and gets its
// reply inline as before. A worker names regions in pushes to a shard only
// after that shard has answered one of its pulls through shared memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <tuple>

#include "common/status.h"

namespace eps {

// `bytes` rounded up to a cache line: where the next thing starts in a shared-memory region.
inline uint64_t Aligned(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

// What a pull or a push names: a region of `size` bytes, descriptor `fd` of process `pid`.
struct ShmRegionRef {
  uint32_t pid = 0;
  int32_t fd = -1;
  uint64_t token = 0;
  uint64_t size = 0;
  bool operator==(const ShmRegionRef& o) const {
    return pid == o.pid && fd == o.fd && token == o.token && size == o.size;
  }
  // Whether `bytes` bytes at `offset` lie inside the region, after its header.
  bool Holds(uint64_t offset, uint64_t bytes) const;
};

// The worker's side: a sealed memfd of `size` bytes mapped read-write, its
// first kHeaderBytes holding a magic number and the token.
class ShmRegion {
 public:
  static constexpr size_t kHeaderBytes = 64;  // chunks start at or after this offset
  // `size` includes the header.
  static StatusOr<std::unique_ptr<ShmRegion>> Create(size_t size);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  const ShmRegionRef& ref() const { return ref_; }
  const uint8_t* data() const { return data_; }
  uint8_t* data() { return data_; }

 private:
  ShmRegion(ShmRegionRef ref, uint8_t* data) : ref_(ref), data_(data) {}
  ShmRegionRef ref_;
  uint8_t* data_;
};

// The shard's side: the regions it has mapped, the most recently used first,
// at most `capacity` of them (the oldest is unmapped), and the names it could
// not map (not retried). A mapping not used for `idle` is unmapped at the next
// Map: the memory of a worker that died, or that renewed its regions with its
// sockets, is not kept alive here for long. Not thread-safe.
class ShmMappings {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ShmMappings(size_t capacity = 32, Clock::duration idle = std::chrono::seconds(30))
      : capacity_(capacity), idle_(idle) {}
  ~ShmMappings();
  ShmMappings(const ShmMappings&) = delete;
  ShmMappings& operator=(const ShmMappings&) = delete;

  // The start of the named region, mapped read-write. FailedPrecondition when
  // it cannot be opened, is not a sealed memfd, is smaller than named or
  // does not hold the token (the caller answers inline).
  // Valid until the next Map.
  StatusOr<uint8_t*> Map(const ShmRegionRef& ref, Clock::time_point now = Clock::now());
  size_t mapped() const { return maps_.size(); }

 private:
  struct Mapping {
    ShmRegionRef ref;
    uint8_t* data;
    Clock::time_point used;
  };
  StatusOr<uint8_t*> Open(const ShmRegionRef& ref) const;
  // Unmaps the least recently used mapping.
  void Unmap();
  size_t capacity_;
  Clock::duration idle_;
  std::list<Mapping> maps_;          // most recently used first
  std::list<ShmRegionRef> refused_;  // at most `capacity_`, newest first
};

}  // namespace eps
