// A block partial on its way to the shards: the reducing thread sums the
// gradients of an aligned block of VWs along the canonical tree and pushes the
// result, tensor by tensor, while the block's last VW still runs backward.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/layout.h"
#include "common/shm.h"
#include "common/sparse_tree.h"
#include "common/status.h"
#include "common/tree.h"
#include "common/vector_pool.h"
#include "common/wire.h"
#include "models/model_runner.h"
#include "worker/param_client.h"

namespace eps {

// Where each tensor's gradient sits in a VW's flat gradient vector: the
// parameters in layout order, then the loss (one element). Buffers and frozen
// parameters (--freeze: `frozen` by tensor, common/transfer.h FrozenTensors)
// have none: they are never reduced nor pushed. Nor do the sparse tables:
// their touched rows are reduced apart (BlockPusher).
struct FlatGradientLayout {
  FlatGradientLayout(const Layout& layout, std::vector<char> frozen, uint32_t virtual_workers);
  std::vector<size_t> offset;  // by tensor
  std::vector<char> frozen;    // by tensor
  // Tensor i's chunks are ids [first_chunk[i], first_chunk[i + 1]) (MakeLayout cuts in tensor
  // order).
  std::vector<uint32_t> first_chunk;
  size_t size = 0;             // elements in all
  // The trees' nodes, kept from a block to the next (a reused one needs no zeroing pass, nor
  // fresh pages): a block holds at most one a level of its tree, given back when it is done.
  std::shared_ptr<VectorPool<float>> pool;
};

// Copies of the buffer tensors (BatchNorm statistics), by tensor index (null: not a buffer).
using BufferCopies = std::vector<std::shared_ptr<std::vector<uint8_t>>>;

// One aligned block of one train plan, from its first VW's gradients to the
// pushes of its partial. The partial's value fills in chunk by chunk as the
// block's last VW's backward finishes each tensor (TreeFinisher), and the
// chunks finished so far leave as soon as they are worth a push of their own
// (kEagerPushBytes): sending and the shards' optimizer overlap the rest of
// backward (the first layers, the costliest, come last), and a large tensor's
// first chunks are stepped while the reducing thread finishes its last ones. The partial lives
// in a shared-memory region when some shard reads pushes from there (the
// push names where each chunk is), else on the heap (the bytes travel in the
// message).
//
// A sparse table's rows (TensorSpec::sparse) go their own way: each VW's
// touched rows into a SparseTreeReducer of the block, and the block's rows,
// split by Layout::ShardOfRow, with the block's last push to each shard (one entry a
// table, also with no row, so that the shard counts the block), in the region after
// the partial when they fit there.
//
// Threads: constructed and set_eager() on the main thread; everything else
// runs on the reducing thread, in the order of the tasks the main thread
// posts: AddVW for each VW but the last, then StartLastVW, TensorReady per
// parameter as backward finishes it, and Finish. The tasks hold the object
// (shared_ptr), so the main thread goes on to the next block meanwhile.
class BlockPusher {
 public:
  // What every block of a job shares. Pointers outlive the pushers.
  struct Job {
    const Layout* layout;
    const FlatGradientLayout* flat;
    uint32_t virtual_workers;
    WireDType grad_wire;
    ParameterClient* client;
  };

  // The bytes of a push region for a partial of `flat_size` elements: the
  // fp32 sum, then (when compressed) its encoding in the gradient wire dtype,
  // then, with `rows`, room for the block's sparse rows (schema/shm_rows.h).
  static size_t RegionBytes(size_t flat_size, WireDType grad_wire, bool rows);

  // On the main thread: takes a push region from the client when a shard reads them.
  BlockPusher(const Job& job, Epoch epoch, Step step, const Block& block);

  // Push from backward (TensorReady) only once the plan is confirmed: a plan
  // run ahead of the coordinator's answer pushes nothing before it.
  void set_eager(bool eager) { eager_ = eager; }

  // VW v's gradients (a VW before the block's last) into the tree.
  [[nodiscard]] Status AddVW(uint32_t v, const ModelRunner::Gradients& grads, float loss);
  // The tree's last node is the block's last VW, `last`: what follows adds it tensor by tensor.
  [[nodiscard]] Status StartLastVW(uint32_t last);
  // Parameter i of the last VW is final in `grad`: its part of the partial
  // is finished chunk by chunk, each pushed once the ready ones are worth it.
  [[nodiscard]] Status TensorReady(size_t i, const float* grad);
  // The last VW's loss completes the partial: every chunk not pushed yet is,
  // with VW 0's buffers when the block holds VW 0 (`vw0_buffers` not empty),
  // and the block's sparse rows with the last VW's (`last`'s SparseGradients).
  [[nodiscard]] Status Finish(float loss, const BufferCopies& vw0_buffers,
                              const ModelRunner::Gradients& last);

 private:
  // VW v's touched rows of every sparse table into the block's reducers.
  Status AddRows(uint32_t v, const ModelRunner::Gradients& grads);
  // By shard: the block's rows of every table, once the block is complete.
  StatusOr<std::vector<std::vector<SparseRowBytes>>> TakeRows();
  Status PushReady(const BufferCopies& vw0_buffers,
                   std::vector<std::vector<SparseRowBytes>> rows = {});

  // Constant after construction.
  const Job job_;
  const Epoch epoch_;
  const Step step_;
  const Block block_;

  bool eager_ = true;  // set on the main thread before the last VW's tasks are posted
  // The reducing thread's, from here on.
  TreeReducer reducer_;
  std::optional<TreeFinisher> finisher_;  // the tree's last node: the last VW
  uint32_t last_ = 0;                     // the block's last VW
  std::vector<SparseTreeReducer> rows_;   // by sparse table (Layout::sparse)
  std::shared_ptr<ShmRegion> region_;     // holding sum_ and encoded_, or null (on the heap)
  std::shared_ptr<float[]> sum_;          // the partial in flat layout, fp32
  std::shared_ptr<uint16_t[]> encoded_;   // the same in the gradient wire dtype, if compressed
  std::vector<char> shm_to_;  // by shard: push from region_ (the message names the bytes)
  std::vector<uint32_t> unsent_;  // the chunks whose part of the partial is final, not sent
  size_t unsent_bytes_ = 0;       // theirs
};

}  // namespace eps
