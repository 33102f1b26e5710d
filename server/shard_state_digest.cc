// ShardState's answer to a pull (server/shard_state.h): the timeline and version
// fences, then the chunks or rows, and the optimizer digest when it is asked for.
#include <array>
#include <iterator>
#include <string_view>
#include <vector>

#include "server/shard_state.h"

namespace eps {

StatusOr<PullReply> ShardState::Answer(const Pull& pull) {
  if (pull.timeline != 0 && pull.timeline < timeline_) {
    return Aborted("a pull of timeline " + std::to_string(pull.timeline) +
                   ": the job rolled back, and is on timeline " + std::to_string(timeline_));
  }
  const int64_t next = layout_ && version_.value() >= 0 ? version_.value() + 1 : 0;
  if (pull.version.value() > next) {
    return Aborted("version " + std::to_string(pull.version.value()) +
                   " is of an abandoned timeline: the shard serves " +
                   std::to_string(version_.value()));
  }
  StatusOr<PullReply> reply = pull.sparse.empty() ? HandlePull(pull) : HandleSparsePull(pull);
  if (!reply.ok() || !pull.optimizer_digest) return reply;
  if (pull.version != version_) {
    return FailedPrecondition("the optimizer digest is of the current version (" +
                              std::to_string(version_.value()) + "), not of " +
                              std::to_string(pull.version.value()));
  }
  EPS_ASSIGN_OR_RETURN(SetDigest digest, OptimizerDigest());
  reply->optimizer_digest = digest.Bytes();
  return reply;
}

StatusOr<SetDigest> ShardState::OptimizerDigest() {
  if (!layout_ || version_.value() < 0) return FailedPrecondition("the shard holds no state yet");
  auto bytes = [](const auto& v) {
    return std::string_view(reinterpret_cast<const char*>(std::data(v)),
                            std::size(v) * sizeof(*std::data(v)));
  };
  SetDigest digest;
  for (ChunkId id : mine_) {
    if (KindOf(id) != TensorKind::kParameter || Frozen(id)) continue;
    const ChunkSlot& s = slots_[id.value()];
    if (s.next) return Unavailable("a step in progress has stepped chunks already");
    const Chunk& c = layout_->chunks[id.value()];
    const std::array<int64_t, 4> head = {c.tensor, c.offset, c.numel, s.optimizer_initialized};
    const std::vector<float> none;
    auto slot = [&](int k) -> const std::vector<float>& {
      return s.optimizer_slots[k] ? *s.optimizer_slots[k] : none;
    };
    digest.AddItem({"chunk", bytes(head), bytes(slot(0)), bytes(slot(1))});
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const SparseTableOptions o = ShardTableOptions(*spec_, optimizer_, *layout_, t, tables_options_);
    const size_t floats = o.dim * (1 + SparseOptimizerSlots(o.optimizer));
    EPS_RETURN_IF_ERROR(tables_[t]->ScanRows([&](uint64_t row, Step, const float* f) {
      const std::array<uint64_t, 2> head = {t, row};
      digest.AddItem({"row", bytes(head),
                      std::string_view(reinterpret_cast<const char*>(f), floats * sizeof(float))});
    }));
  }
  return digest;
}

}  // namespace eps
