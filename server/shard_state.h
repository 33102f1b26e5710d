// The state of one parameter-server shard, without any I/O: its slice of every
// tensor at the current and the previous version, the optimizer state, and the
// barrier of the step in progress. The Shard service (shard.h) feeds it decoded
// messages; tests drive it directly.
//
// Step t on this shard completes when, for every parameter and loss chunk it
// owns, the pushed blocks cover all V leaves of the canonical tree, and every
// buffer chunk came with the block holding VW 0. The chunks of parameters the
// job's --freeze selects take no push: they are never reduced nor stepped, and
// every version holds their initial values. Each parameter chunk is stepped
// (the optimizer applied to sum/V) as soon as its own blocks are complete, while
// the others may still be on their way, and can be pulled at once as a chunk of
// version t+1 (its bits can only be these); once the step completes the shard
// serves all of version t+1, keeping version t readable until the next step completes (a VW
// recomputed after a crash must read exactly w(t)). The barrier is only ever
// reset by a completed step or a whole new state (Restore), so a chunk stepped
// early never steps twice.
//
// With a compressed gradient wire dtype (common/wire.h) pushed gradient and loss
// chunks arrive in it and the tree rounds every node to it; with a compressed
// weight wire dtype each published parameter version is also encoded once in
// it, for the pulls that ask for it (fp32 pulls, the coordinator's and the
// exporter's, still get the fp32 master values).
//
// Published versions are immutable (shared, copy-on-write), so pull replies can
// hand their bytes to ZeroMQ without copying, and a snapshot for a checkpoint
// shares them instead of copying them (docs/design.md, "Durable state"). It does no
// I/O of its own: RollbackTo reads through the StateStore it is given. Not
// thread-safe: the shard's event loop owns it; a snapshot, once taken, is
// independent of it and may go to another thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/layout.h"
#include "common/parallel_for.h"
#include "common/shm.h"
#include "common/tree.h"
#include "schema/messages.h"
#include "server/optimizer.h"
#include "server/sparse_table.h"
#include "storage/state_store.h"

namespace eps {

// The durable part of a shard's state at one version, in the form
// StateStore::WriteCheckpoint takes: the metadata names the shard and holds the
// job config (spec and tensors); blob "value/<chunk>" is every owned chunk's
// value (parameters and buffers; the loss has none), "slot0/<chunk>" and
// "slot1/<chunk>" the optimizer slots of parameter chunks once the optimizer
// has run. Values and slots are shared with the state, not copied: values never
// change, and a step writes new slots instead of overwriting the ones a snapshot
// still holds (copy-on-write, without the copy: ApplyOptimizer's SlotsBefore).
// Taking one costs no pass over the state, and it stays valid and unchanged
// however the state moves on.
struct ShardSnapshot {
  Step version{-1};
  std::string metadata;
  std::vector<BlobRef> blobs;
};

// Where a shard keeps its sparse tables (server/sparse_table.h).
struct ShardTablesOptions {
  // Table t's RocksDB directory is `dir`/table-<t> (its spill tier and its
  // checkpoints, taken with the shard's). Empty: memory only, no checkpoints.
  std::string dir;
  int keep_checkpoints = 2;  // the StateStore's: both hold the checkpoints a rollback may pick
};

// The options a shard of `spec` opens sparse table `table` (an index into
// layout.sparse) with: its width, the job's seed and optimizer in its row-wise
// form, a `memory_bytes` share of --shard_memory_mb, its directory under
// tables.dir. What export_model reads a shard's table checkpoints with.
SparseTableOptions ShardTableOptions(const JobSpec& spec, const OptimizerOptions& optimizer,
                                     const Layout& layout, size_t table,
                                     const ShardTablesOptions& tables);

// Sparse tables (docs/design.md, "Sparse tables"): the shard holds, of each
// table of the layout, the rows Layout::ShardOfRow gives it, in a SparseTable opened
// once the layout is known. A block's push names each table's touched rows of
// this shard (every table, also with none); the step completes once the
// dense chunks' barrier and every table's are, and the tables are stepped
// with it (lazy: only the touched rows). A pull of sparse rows (Pull::sparse)
// names no chunk: it asks, per table, for the rows changed since a version the
// worker holds (since -1: every stored row, the seeded ones too), at the
// current version or the previous one (the rows the last
// step changed are kept at their old values for that), and waits for the step
// in progress. The tables checkpoint with the state (CheckpointTables, before
// the state's Snapshot of the same version) and follow its Restore, RollbackTo
// and Clear to the same version.
class ShardState {
 public:
  // `parallel` (null: the caller's thread alone) cuts the optimizer's elements over
  // threads; it must outlive the state.
  explicit ShardState(ShardId shard, ParallelFor* parallel = nullptr,
                      ShardTablesOptions tables = {})
      : shard_(shard), parallel_(parallel), tables_options_(std::move(tables)) {}

  // Accepts the job spec (validating the optimizer), and the tensor list once a
  // worker has reported it. A second config must agree with the first.
  Status Configure(const ShardConfig& config);
  bool has_layout() const { return layout_.has_value(); }
  const Layout& layout() const { return *layout_; }  // has_layout() first
  ShardId shard() const { return shard_; }
  // Current version: -1 until the initial values arrived.
  Step version() const { return version_; }
  // The job's timeline as the coordinator last named it (ShardConfig, Rollback;
  // docs/design.md, "Timelines"); it only grows. 0: not named yet.
  void EnterTimeline(uint64_t timeline) { timeline_ = std::max(timeline_, timeline); }
  uint64_t timeline() const { return timeline_; }

  struct PushOutcome {
    PushReply reply;
    std::optional<StepDone>
        completed;  // set when this push completed a step (or the initial values)
    bool finalized =
        false;  // it made a chunk of the step in progress final (pullable as version + 1)
  };
  // Validates the whole push before it touches any state. Pushes for a step
  // already applied are dropped and counted as duplicates, as are blocks that
  // overlap leaves already counted. The initial values (step -1) may carry
  // rows of the tables that --init_from seeds (SparseTable::Seed): a worker
  // sends them first, in pushes of their own, and then its chunks; only an
  // initial push without rows completes version 0.
  StatusOr<PushOutcome> HandlePush(const Push& push);

  // Serves the current and the previous version, and of the step in
  // progress (version + 1) the chunks already final: parameter chunks stepped,
  // buffer chunks pushed with VW 0's block. A pull is answered whole or not at
  // all. Unavailable: the version, or one of the chunks, is not there yet (the
  // caller may wait: every push may make more chunks final); FailedPrecondition:
  // it is gone; InvalidArgument: a chunk is not ours.
  StatusOr<PullReply> HandlePull(const Pull& pull) const;
  // A pull of sparse rows (Pull::sparse not empty), as HandlePull: the rows
  // are of the current version or the previous one; Unavailable for the next.
  // The rows of the step that made the current version, asked for by a worker
  // holding the one before (the common pull), are lent: their bytes point into
  // the state without an owner, valid until the next push; the reply must be
  // sent or copied into a worker's region before (the channel copies a frame
  // without an owner as it sends it).
  StatusOr<PullReply> HandleSparsePull(const Pull& pull);
  // Either of the two, as the pull asks, with the optimizer digest when it asks
  // (FailedPrecondition for another version than the current one). Aborted for
  // a pull of an earlier timeline than the shard's, and for a version past the
  // step in progress (past 0 before the initial values), which no pull of the
  // present timeline can ask for: the pull is of a future that a rollback or
  // this shard's restart abandoned, and its worker must give its plan back now
  // rather than wait out --pull_wait_ms.
  StatusOr<PullReply> Answer(const Pull& pull);
  // A pull that waits for the step in progress (Answer said Unavailable): the rows its sparse
  // reads name (a lookup's, or a held table's warm rows) come into their tables' memory now
  // (SparseTable::Warm), so that the store's reads overlap the workers' compute instead of
  // following the step. Nothing for other pulls; an error is left for the answer to report.
  void WarmSparse(const Pull& pull);

  // The digest of the optimizer state at the current version: one item per
  // parameter chunk this shard steps (its tensor, offset and size, whether the
  // optimizer has run, its slots' bytes) and one per stored row of every sparse
  // table (its table and id, its weights and slots), summed with SetDigest, so
  // that the shards' digests add up to one that does not depend on which shard
  // holds what (result.json's optimizer_digest). O(the state). Unavailable
  // while a step in progress has stepped chunks early; FailedPrecondition
  // before version 0; a table's store errors.
  StatusOr<SetDigest> OptimizerDigest();

  uint64_t duplicates() const { return duplicates_; }
  // The learning rate step `step` applies (0 before the job spec, and for step -1: the initial
  // values).
  double LearningRateOf(Step step) const;
  const std::vector<ChunkId>& chunks() const { return mine_; }

  // ---- durable state ----

  // The current version's snapshot: shares the values, copies the optimizer
  // slots (O(optimizer state) time). FailedPrecondition before version 0.
  // Take it between steps, after the push that completed one and before the
  // next step's first push (whose chunks may step the slots early).
  StatusOr<ShardSnapshot> Snapshot() const;
  // Checkpoints every sparse table at the current version (in its own store,
  // synced): call it before Snapshot() of the same version, so that a
  // durable state checkpoint always finds its tables' one. OK without tables.
  Status CheckpointTables();
  // The coordinator's retention floor (StateStore::RetainFrom) for the tables too.
  void RetainTablesFrom(Step step);
  // The tables' statistics, by table (empty without tables).
  std::vector<SparseTable::Stats> TableStats() const;

  // Replaces the whole state with a checkpoint's: job config, values,
  // optimizer state and version (the checkpoint's step). The barrier restarts
  // empty and no previous version is kept. All or nothing: on error nothing
  // changes. FailedPrecondition: the checkpoint is another shard's, or of
  // another job spec or model than the one this state already serves;
  // DataLoss: it is malformed (missing, extra or wrongly sized blobs, bad
  // metadata).
  // The checkpoint is taken by value: each blob's bytes are released as soon
  // as they are copied, so (with KeepFreedMemory) the next copy lands on
  // pages already faulted in; pass it with std::move where it is not needed.
  Status Restore(Checkpoint checkpoint);
  // A new state holding `checkpoint`, validated against this one, which is left
  // as it is; its sparse tables are not opened (Restore opens them once it takes
  // the state). What export_model reads a checkpoint's chunks with.
  StatusOr<std::unique_ptr<ShardState>> Load(Checkpoint&& checkpoint) const;

  // ---- moves between shards (docs/design.md, "Elastic shards") ----

  // The current version of `chunks`, all this shard's, with their optimizer
  // state, as the blobs a checkpoint holds them in (shared with the state, not
  // copied): what a shard that gains them adopts. InvalidArgument: a chunk is
  // not this shard's; FailedPrecondition before the initial values.
  StatusOr<std::vector<BlobRef>> ExportChunks(const std::vector<ChunkId>& chunks) const;
  // The stored rows of every sparse table in row `partitions` (this shard's, of
  // the current version; SparseTable::ExportRows), one blob per table named
  // "rows/<table>/<first partition>". InvalidArgument: a partition is not this
  // shard's; FailedPrecondition before the initial values; store errors.
  StatusOr<std::vector<BlobRef>> ExportPartitions(const std::vector<uint32_t>& partitions);
  // Takes `map`, newer than the layout's: the chunks it gives this shard and the
  // current map does not come from `gained` (ExportChunks' blobs, of version
  // `version`), the ones it gives another shard are dropped. Call it between
  // steps, at `version` (a shard that held nothing yet starts serving it). All
  // or nothing: DataLoss when `gained` lacks a blob, has one too many or of the
  // wrong size; FailedPrecondition for an older map or another version. The
  // sparse tables' rows of the partitions it gives another shard leave them,
  // those of the partitions it gives this shard come from `gained`'s
  // "rows/<table>/..." blobs (ExportPartitions'; SparseTable::Move).
  Status AdoptMap(const ShardMap& map, Step version, std::vector<Blob> gained);

  // Drops every version and the optimizer state, keeping the job config: the
  // shard waits for the initial values again (a job that starts over). The
  // sparse tables become empty (their store's codes on error).
  Status Clear();

  // Restores the store's checkpoint of `step` and deletes the store's
  // checkpoints newer than it: the job has abandoned that future, and a
  // restart must come back to `step`. InvalidArgument: the store holds no
  // checkpoint of `step`. All or nothing, as Restore (the store is changed
  // only once the checkpoint has been read and validated). A state loaded
  // from the checkpoint of `step` (Restore, RollbackTo) that has stepped no
  // chunk since holds its bits already: then only the step in progress goes,
  // and nothing is read (a restarted shard restores its newest checkpoint and
  // is then rolled back to it).
  Status RollbackTo(StateStore& store, Step step);

 private:
  using Value = std::shared_ptr<const std::vector<float>>;  // raw storage, 4-byte units
  using WireValue =
      std::shared_ptr<const std::vector<uint16_t>>;  // a parameter value in the weight wire dtype
  struct ChunkSlot {
    Value current, previous;
    WireValue current_wire, previous_wire;  // parameter chunks, with a compressed weight wire dtype
    // The optimizer's state (parameter chunks). Its slots are shared with the snapshots
    // that hold them: StepChunk steps them in place when it holds them alone, and into
    // new ones otherwise.
    std::shared_ptr<std::vector<float>> optimizer_slots[2];  // null: not used (yet)
    bool optimizer_initialized = false;
    std::unique_ptr<TreeReducer> reducer;  // parameter and loss chunks
    Value next;           // parameter chunks: the step's new value, once its sum was complete
    WireValue next_wire;  // the same in the weight wire dtype, if compressed
    Value vw0_buffer;     // buffer chunks: VW 0's value of this step
    bool counted_for_buffer = false;
  };

  class BlobSet;
  // A value holding a copy of `bytes` bytes at `data`, in a buffer of floats_.
  Value CopyOf(const void* data, size_t bytes) const;
  // Sizes the pools for mine_: one version of its chunks, the buffers a step lets go.
  void SizePools();
  // Appends chunk `id`'s current value and optimizer slots (none for the loss).
  void AppendChunkBlobs(ChunkId id, std::vector<BlobRef>* out) const;
  // Reads chunk `id` (ours or not) from `blobs` into `slot`: its value, and its
  // optimizer slots when `initialized`.
  Status LoadChunk(ChunkId id, BlobSet& blobs, bool initialized, ChunkSlot* slot) const;
  void TakeFrom(ShardState&& other);
  // Opens the layout's tables if not yet, and brings them to version_ (the
  // empty table before the initial values). DataLoss: a table holds no
  // checkpoint of version_.
  Status SyncTables();
  Status ValidateSparse(const Push& push) const;
  // `rows` row ids of table t (uint64, host order) strictly ascending, within the table, this
  // shard's: InvalidArgument naming the first that is not.
  Status CheckRowIds(const TensorSpec& t, const void* ids, uint32_t rows) const;
  // The row ids a sparse read names (a lookup's, or warm rows), checked as CheckRowIds does.
  StatusOr<std::vector<uint64_t>> ReadIds(const SparseRead& read) const;
  // Steps the tables (the step's barrier is complete), keeping the old and new
  // values of the rows it changes in step_rows_ (as the tables hand them over).
  Status StepTables();
  Status ValidatePush(const Push& push) const;
  // Bytes chunk `id` has in a push for `step` (-1: the initial values, always fp32).
  size_t PushBytesOf(ChunkId id, Step step) const;
  // Chunk `id`'s value in the weight wire dtype, for the pulls that ask for it
  // (null: a buffer, or the weights travel in fp32).
  WireValue EncodeForPulls(ChunkId id, const std::vector<float>& value) const;
  // Makes `value` (and `wire`, its encoding) chunk `id`'s current version, the
  // current one its previous; without `wire`, encodes it.
  void Publish(ChunkId id, Value value, WireValue wire);
  void Publish(ChunkId id, Value value);
  StatusOr<PushOutcome> HandleInit(const Push& push);
  void ResetBarrier();
  bool BarrierComplete() const;
  // Applies the optimizer to a parameter chunk whose sum is complete: `sum`
  // (its n floats), or else its reducer's result; the value is `next` (pulls
  // of version + 1 may take it) until the whole step is.
  void StepChunk(ChunkId id, const float* sum = nullptr);
  // Where a pushed chunk `c` of `block` is the whole sum of a chunk, fp32 and
  // aligned, so that its step can read it where it lies (one worker held the
  // tree's every VW): its floats; null otherwise.
  const float* WholeSum(const Block& block, const ChunkBytes& c, const TreeReducer& reducer) const;
  StepDone ApplyStep();
  size_t BytesOf(ChunkId id) const { return layout_->ChunkBytes(layout_->chunks[id.value()]); }
  TensorKind KindOf(ChunkId id) const {
    return layout_->tensors[layout_->chunks[id.value()].tensor].kind;
  }
  bool Frozen(ChunkId id) const { return frozen_[id.value()] != 0; }

  const ShardId shard_;
  ParallelFor* const parallel_;
  const ShardTablesOptions tables_options_;
  std::optional<JobSpec> spec_;
  std::optional<Layout> layout_;
  OptimizerOptions optimizer_;
  std::vector<ChunkId> mine_;
  std::vector<char> frozen_;      // by chunk: of a parameter --freeze selects (common/transfer.h)
  std::vector<ChunkSlot> slots_;  // by chunk id; only ours are filled
  // The buffers of chunk values, trees' nodes and optimizer slots (floats_), and of values in
  // a compressed weight wire dtype (halves_), kept from a step to the next (common/vector_pool.h).
  std::shared_ptr<VectorPool<float>> floats_ = VectorPool<float>::Create(0);
  std::shared_ptr<VectorPool<uint16_t>> halves_ = VectorPool<uint16_t>::Create(0);
  Step version_{-1};
  uint64_t timeline_ = 0;
  uint64_t duplicates_ = 0;
  bool open_tables_ = true;  // false in a state Load makes: the tables stay the loader's
  // The checkpoint step the state was loaded from, until a chunk is stepped or the state
  // cleared (-1 then): RollbackTo that step need not read it again.
  Step loaded_{-1};
  // By table (Layout::sparse): opened by SyncTables; never moved by TakeFrom.
  std::vector<std::unique_ptr<SparseTable>> tables_;
  // By table: the rows the step that made version_ changed, at the previous version's weights
  // and at version_'s (empty when version_ came otherwise: SyncTables and AdoptMap clear it). A
  // pull of version_ since the one before reads the rows from here instead of looking each up
  // in its table again.
  std::vector<SparseTable::StepRows> step_rows_;
  // The step before last's rows, no longer served: their buffers take the next step's rows
  // (a fresh buffer a step cost an allocation and its zero fill, a tenth of a small step).
  std::vector<SparseTable::StepRows> spare_rows_;
};

// Moves `reply`'s bytes into the shared-memory region `pull` names (at the
// offsets it gives per chunk; sparse rows from its shm_rows_at on,
// schema/shm_rows.h), when the pull names one, `maps` can map it, and
// everything fits in it after the header; then the reply carries only where
// they are. Otherwise the reply stays inline, and the status says why.
Status MoveIntoShm(const Pull& pull, ShmMappings* maps, PullReply* reply);

// Makes the chunks `push` has in shared memory chunks of the push, and points
// its sparse rows there at their bytes, read in place from the region mapped
// by `maps` (valid until its next Map). Unimplemented: `maps` cannot map the
// region (the worker then pushes inline); InvalidArgument: a chunk or rows lie
// outside the region or in its header. The push is not used on error.
Status ResolveShm(ShmMappings* maps, Push* push);

}  // namespace eps
