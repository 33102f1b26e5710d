// Distinct types for the ids that travel between processes, so a worker id can
// never be passed where a shard id is expected. Value types, thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>

namespace eps {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  friend constexpr bool operator==(StrongId a, StrongId b) { return a.v_ == b.v_; }
  friend constexpr bool operator!=(StrongId a, StrongId b) { return a.v_ != b.v_; }
  friend constexpr bool operator<(StrongId a, StrongId b) { return a.v_ < b.v_; }
  friend constexpr bool operator<=(StrongId a, StrongId b) { return a.v_ <= b.v_; }
  friend constexpr bool operator>(StrongId a, StrongId b) { return a.v_ > b.v_; }
  friend constexpr bool operator>=(StrongId a, StrongId b) { return a.v_ >= b.v_; }
  friend std::ostream& operator<<(std::ostream& os, StrongId id) { return os << id.v_; }

 private:
  Rep v_{};
};

using WorkerId = StrongId<struct WorkerIdTag, uint32_t>;
using ShardId = StrongId<struct ShardIdTag, uint32_t>;
using VirtualWorkerId = StrongId<struct VirtualWorkerIdTag, uint32_t>;
using ChunkId = StrongId<struct ChunkIdTag, uint32_t>;
// A training step; version t of the parameters is the state before step t.
using Step = StrongId<struct StepTag, int64_t>;
// The assignment epoch: bumped by the coordinator whenever the VW assignment changes.
using Epoch = StrongId<struct EpochTag, uint64_t>;

}  // namespace eps

template <typename Tag, typename Rep>
struct std::hash<eps::StrongId<Tag, Rep>> {
  size_t operator()(eps::StrongId<Tag, Rep> id) const { return std::hash<Rep>()(id.value()); }
};
