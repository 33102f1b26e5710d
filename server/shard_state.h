// The state of one parameter-server shard, without any I/O: its slice of every
// tensor at the current and the previous version, the optimizer state, and the
// barrier of the step in progress. The Shard service (shard.h) feeds it decoded
// messages; tests drive it directly.
//
// Step t on this shard completes when, for every parameter and loss chunk it
// owns, the pushed blocks cover all V leaves of the canonical tree, and every
// buffer chunk came with the block holding VW 0. It then applies the optimizer to
// sum/V and serves version t+1, keeping version t readable until the next step
// completes (a VW recomputed after a crash must read exactly w(t)).
//
// Published versions are immutable (shared, copy-on-write), so pull replies can
// hand their bytes to ZeroMQ without copying. Not thread-safe: the shard's event
// loop owns it.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "common/layout.h"
#include "common/tree.h"
#include "schema/messages.h"
#include "server/optimizer.h"

namespace eps {

// Turns the job spec's optimizer section into options, validating them.
StatusOr<OptimizerOptions> OptimizerOptionsFromSpec(const OptimizerSpec& spec, int64_t total_steps);

class ShardState {
 public:
  explicit ShardState(ShardId shard) : shard_(shard) {}

  // Accepts the job spec (validating the optimizer), and the tensor list once a
  // worker has reported it. A second config must agree with the first.
  Status Configure(const ShardConfig& config);
  bool has_layout() const { return layout_.has_value(); }
  // Current version: -1 until the initial values arrived.
  Step version() const { return version_; }

  struct PushOutcome {
    PushReply reply;
    std::optional<StepDone> completed;  // set when this push completed a step (or the initial values)
  };
  // Validates the whole push before it touches any state. Pushes for a step
  // already applied are dropped and counted as duplicates, as are blocks that
  // overlap leaves already counted.
  StatusOr<PushOutcome> HandlePush(const Push& push);

  // Unavailable: the version is not there yet (the caller may wait);
  // FailedPrecondition: it is gone; InvalidArgument: a chunk is not ours.
  StatusOr<PullReply> HandlePull(const Pull& pull) const;

  uint64_t duplicates() const { return duplicates_; }
  const std::vector<ChunkId>& chunks() const { return mine_; }

 private:
  using Value = std::shared_ptr<const std::vector<float>>;  // raw storage, 4-byte units
  struct ChunkSlot {
    Value current, previous;
    OptimizerState optimizer;
    std::unique_ptr<TreeReducer> reducer;  // parameter and loss chunks
    Value vw0_buffer;                      // buffer chunks: VW 0's value of this step
    bool counted_for_buffer = false;
  };

  Status ValidatePush(const Push& push) const;
  StatusOr<PushOutcome> HandleInit(const Push& push);
  void ResetBarrier();
  bool BarrierComplete() const;
  StepDone ApplyStep();
  size_t BytesOf(ChunkId id) const { return layout_->ChunkBytes(layout_->chunks[id.value()]); }
  TensorKind KindOf(ChunkId id) const { return layout_->tensors[layout_->chunks[id.value()].tensor].kind; }

  const ShardId shard_;
  std::optional<JobSpec> spec_;
  std::optional<Layout> layout_;
  OptimizerOptions optimizer_;
  std::vector<ChunkId> mine_;
  std::vector<ChunkSlot> slots_;  // by chunk id; only ours are filled
  Step version_{-1};
  uint64_t duplicates_ = 0;
};

}  // namespace eps
