// What a VW's compute reads beyond the weights a pull writes: the buffers
// (BatchNorm statistics) each VW of a step starts from, and the rows of the
// tables the model looks up by its batches' rows.
#pragma once

#include <cstdint>
#include <vector>

#include "common/layout.h"
#include "common/status.h"
#include "data/dataset.h"
#include "models/model_runner.h"
#include "worker/block_pusher.h"
#include "worker/param_client.h"
#include "worker/sampler.h"

namespace eps {

// Copies of the model's buffer tensors, and their values written back.
BufferCopies SnapshotBuffers(const Layout& layout, const ModelRunner& model);
[[nodiscard]] Status RestoreBuffers(ModelRunner* model, const BufferCopies& saved);

// The rows of the model's lookup tables (by sparse table, ParameterClient::WantRows) that
// samples `indices` of `data` read; empty lists without a lookup table. With `held_too`, those
// of the tables held whole too, where the model names them (ModelRunner::TableRows).
[[nodiscard]] StatusOr<TableRows> RowsRead(ModelRunner& model, const Layout& layout,
                                           const Dataset& data, const std::vector<int64_t>& indices,
                                           bool held_too);
// The same for samples [lo, hi) (an evaluation's).
[[nodiscard]] StatusOr<TableRows> RangeRowsRead(ModelRunner& model, const Layout& layout,
                                                const Dataset& data, int64_t lo, int64_t hi);
// The same for train plans: VWs [lo, hi) at `step` (their samples from
// `sampler`). The last two plans' rows are kept: a worker asks for the next
// step's rows while it trains a step (a prefetch's guess, most often the plan
// that comes), and it can work them out ahead, while the shards step, so that
// the next step's start finds them (Of of a plan already kept costs a copy).
class PlanRows {
 public:
  [[nodiscard]] StatusOr<TableRows> Of(ModelRunner& model, const Layout& layout, Sampler& sampler,
                                       const Dataset& data, uint32_t lo, uint32_t hi, Step step,
                                       bool held_too);

 private:
  struct Kept {
    uint32_t lo = 0, hi = 0;
    Step step{-1};
    bool held_too = false;
    TableRows rows;
  };
  Kept kept_[2];  // kept_[0] the most recent
};

}  // namespace eps
