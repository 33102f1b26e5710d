// A sparse embedding table on a server shard (issue #36): rows of `dim` floats
// keyed by 64-bit row ids, of which a step touches a few. Only the touched rows
// are reduced and stepped; a table may be larger than memory.
//
// Storage. A row's state lives in exactly one place: the table's in-memory cache
// (bounded by memory_bytes, the least recently used rows evicted first, by a
// second-chance approximation) or its SparseRowStore (storage/sparse_store.h: RocksDB, a database
// of its own under the shard's store directory), as ONE record holding the row's weights, its
// optimizer moments and the version that last changed it (a cached row read back from the
// spill tier keeps its spilled record there, which the cache's copy overrides: its eviction
// then writes once, not twice). A row no step has
// touched is stored nowhere: its value is InitialRow(init, seed, table, row),
// unless Seed gave it other weights at version 0 (--init_from): a seeded row is
// stored, at version 0, with the moments of an untouched one.
// The newest checkpoint's record of a row that has not changed since is its
// value too (the cache drops such a row without writing it).
//
// Steps. Step t (the table's version() is t) takes pushes of VW blocks
// (common/tree.h) with each block's touched rows; once the pushes cover all V
// VWs, ApplyStep reduces each touched row in the canonical tree over VW ids
// (common/sparse_tree.h: a VW that did not touch a row adds +0.0; the same bits
// for any split of the VWs into blocks and any push order), divides by V as the
// dense path does, steps those rows with the lazy (row-wise) optimizer and moves
// to version t + 1. The rows a step did not touch keep their weights AND their
// moments: lazy is not the dense optimizer, and changes the result (with
// momentum, Adam or weight decay a dense step moves every row).
//
// Optimizers, per touched row, g = reduced sum / V, lr given to ApplyStep:
//  * kSgd: libtorch's SGD arithmetic (server/optimizer.h ApplySgdRow): plain,
//    momentum (a row's buffer starts as its first gradient), dampening,
//    Nesterov, L2 weight decay of the touched rows. Plain SGD equals
//    torch.optim.SGD on a sparse gradient.
//  * kAdagrad: torch.optim.Adagrad on a sparse gradient (lr_decay 0):
//    sum += g*g; p -= lr * g / (sqrt(sum) + eps); the accumulator starts at
//    initial_accumulator_value. weight_decay adds wd * p to g (torch refuses it
//    with sparse gradients).
//  * kAdam: torch.optim.SparseAdam, operation for operation: only the touched
//    rows' moments decay. Bias correction uses the table's step count t + 1 (t
//    the 0-based global step), as SparseAdam's per-table step does, not a
//    per-row count. weight_decay adds wd * p to g (L2 on touched rows).
//  * kAdamW: as kAdam after the decoupled decay p *= 1 - lr * wd of the touched
//    rows only (lazy decay).
//
// Reads. Read gives rows by id at the current version (untouched rows: their
// initializer's values, still stored nowhere; stored rows it reads come into the
// cache, since a pull of a batch's rows precedes their push). ChangedSince(v) names the
// rows changed after version v, from a log of the last changelog_versions steps or
// from the rows' last-changed versions. ScanRows visits every stored row in id order.
//
// Checkpoints. Checkpoint() writes the rows changed since the previous
// checkpoint (incremental) with the manifest in one synced batch; reopening a
// table, or RollbackTo(step), restores a held checkpoint's bits.
//
// The shard's tables (server/shard_state.h; docs/design.md, "Sparse tables").
// Not thread-safe: one owner (the shard's thread that steps
// it) calls every method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/row_init.h"
#include "common/sparse_tree.h"
#include "common/status.h"
#include "common/tree.h"

namespace eps {

struct SparseOptimizerOptions {
  enum class Kind { kSgd, kAdagrad, kAdam, kAdamW };
  Kind kind = Kind::kSgd;
  double momentum = 0, dampening = 0;    // kSgd
  bool nesterov = false;                 // kSgd
  double weight_decay = 0;               // see the header comment, per kind
  double beta1 = 0.9, beta2 = 0.999;     // kAdam, kAdamW
  double eps = 1e-8;                     // kAdam, kAdamW; kAdagrad (torch's default there: 1e-10)
  double initial_accumulator_value = 0;  // kAdagrad
};

// Optimizer slots (dim floats each) a row's record holds under `options`: 0, 1 or 2.
int SparseOptimizerSlots(const SparseOptimizerOptions& options);

struct SparseTableOptions {
  uint32_t table_id = 0;
  size_t dim = 0;        // row width, >= 1
  uint32_t num_vws = 0;  // V, >= 1
  uint64_t seed = 0;     // the job's seed
  RowInitializer init;
  SparseOptimizerOptions optimizer;
  // The cache's budget: RowBytes() per cached row (its record plus the cache's
  // bookkeeping). At least one row. On top of it: RocksDB's own memtables and
  // block cache; during ApplyStep, the step's touched rows and their reducers;
  // the ids of the spilled rows (changed since the last checkpoint) and of the
  // logged steps' rows.
  size_t memory_bytes = size_t{64} << 20;
  // The RocksDB directory (SparseRowStore) for the spill tier and the
  // checkpoints; empty: memory only (no checkpoints; a step that would
  // overflow the budget is refused with ResourceExhausted).
  std::string path;
  int keep_checkpoints = 2;
  // Steps whose changed rows ChangedSince can name.
  size_t changelog_versions = 16;
  WireDType grad_rounding = WireDType::kFP32;  // the reduction's wire dtype (common/tree.h)
};

class SparseTable {
 public:
  // Opens a table; with a path, at the store's newest checkpoint (version 0 when
  // it holds none). InvalidArgument: bad options (dim or V 0, a memory budget
  // smaller than one row, bad optimizer constants); FailedPrecondition: the
  // store holds another table; otherwise the store's codes.
  static StatusOr<std::unique_ptr<SparseTable>> Open(const SparseTableOptions& options);
  virtual ~SparseTable() = default;

  // The number of steps applied: rows are at version() and pushes are for step version().
  virtual Step version() const = 0;
  // Bytes one cached row counts against memory_bytes.
  virtual size_t RowBytes() const = 0;

  // ---- steps ----

  // A block's rows for step `step`: `ids` strictly ascending, values[i*dim,
  // (i+1)*dim) the block's gradient sum for ids[i] (rows it did not touch are
  // left out). Validated whole before anything changes: InvalidArgument for
  // unsorted or repeated ids, a wrong number of values, a block that is not a
  // node of the tree over V, or a step after the current one; AlreadyExists
  // (a duplicate, nothing changes) for a step already applied or a block
  // overlapping VWs already counted.
  virtual Status Push(Step step, const Block& block, const uint64_t* ids, size_t num_ids,
                      const float* values, size_t num_values) = 0;
  // Whether the pushes of the current step cover all V VWs.
  virtual bool StepComplete() const = 0;
  // The rows a step changed: ids strictly ascending; before[i*dim, (i+1)*dim)
  // the weights of ids[i] at the previous version, after[...] at the new one
  // (not the optimizer's slots).
  struct StepRows {
    std::vector<uint64_t> ids;
    std::vector<float> before, after;
  };
  // Reduces and steps the touched rows at learning rate `lr` (the schedule's
  // value for this step) and moves to version() + 1; `changed` (may be null)
  // receives the rows the step changed at both versions' weights, which the
  // table has in hand as it steps them (a pull of either version reads them).
  // FailedPrecondition: the step is not complete. On a store error nothing has
  // changed, unless the rows the step evicted could not be spilled: then the
  // table refuses every later call (FailedPrecondition) until RollbackTo.
  virtual Status ApplyStep(double lr, StepRows* changed) = 0;
  Status ApplyStep(double lr) { return ApplyStep(lr, nullptr); }

  // Rows that start from other weights than the initializer's (an --init_from
  // file's table; docs/models.md): at version 0, before any push, `ids`
  // strictly ascending, weights[i*dim, (i+1)*dim) the row ids[i] starts from.
  // Each becomes a stored row of version 0 (a later checkpoint of step 0 holds
  // it; ChangedSince(v >= 0) does not name it) whose optimizer slots are an
  // untouched row's; seeding a row again overwrites it. InvalidArgument: ids
  // not ascending, a wrong number of values; FailedPrecondition: the table is
  // past version 0 or has pushes; ResourceExhausted: a memory-only table whose
  // budget does not hold the rows; store errors as ApplyStep's.
  virtual Status Seed(const uint64_t* ids, size_t num_ids, const float* weights,
                      size_t num_values) = 0;

  // ---- reads ----

  // Rows `ids` (any order, repeats allowed) at version(), to out[i*dim, (i+1)*dim).
  // Store errors as ApplyStep's (the rows it brings in may evict others).
  virtual Status Read(const uint64_t* ids, size_t num_ids, float* out) = 0;
  // Brings the stored rows among `ids` (any order, repeats allowed) into the cache as Read does,
  // without reading them out: ahead of the pull or step that needs them, so that the store's
  // reads are done while the workers compute. Allowed while a step's pushes come (rows are at
  // version()). Store errors as Read's.
  virtual Status Warm(const uint64_t* ids, size_t num_ids) = 0;
  // The ids (ascending) of the rows changed by the steps after version `since`
  // (empty when since >= version()): from a log of the last changelog_versions
  // steps, or, for an older `since` (or one before the version the table was
  // opened or rolled back at), from every stored row's last-changed version
  // (ScanRows: O(stored rows)). Step(-1): every stored row, the seeded ones too.
  // A page of them: those from row `from_row` on, at most `max_rows` (beyond the
  // log: O(rows scanned), the checkpoint's records read from a seek to `from_row`).
  virtual StatusOr<std::vector<uint64_t>> ChangedSince(Step since, uint64_t from_row = 0,
                                                       size_t max_rows = SIZE_MAX) = 0;

  // A page of every stored row: those from row `from_row` on, at most
  // `max_rows`, ascending, into *ids, and their weights (dim floats each) into
  // *weights, read as ScanRows reads them (the cache is left as it was).
  // O(rows read) but for a sort of the cached and spilled ids, which holds
  // across pages while no row enters or leaves the cache.
  virtual Status ReadStored(uint64_t from_row, size_t max_rows, std::vector<uint64_t>* ids,
                            std::vector<float>* weights) = 0;

  // Calls fn(row, version, floats) for every stored row (every row a step has
  // touched; never an untouched one) in ascending row order: `version` last
  // changed it, `floats` holds its dim weights then its optimizer slots (dim
  // floats each, SparseOptimizerSlots of them), valid during the call. For
  // digests, exports and ChangedSince beyond the log. O(stored rows), reading
  // the store in order without filling the cache.
  virtual Status ScanRows(
      const std::function<void(uint64_t row, Step version, const float* floats)>& fn) = 0;

  // ---- moves of shard state (docs/design.md, "Elastic shards") ----

  // Bytes of one row's record in ExportRows' output, after its 8-byte id.
  virtual size_t RecordBytes() const = 0;
  // Appends every stored row `want` selects, in ascending row order, as its id
  // (8 bytes, host order) and its record: the version that last changed it,
  // whether the optimizer stepped it, its weights and optimizer slots, as the
  // table stores it. O(stored rows), as ScanRows.
  virtual Status ExportRows(const std::function<bool(uint64_t row)>& want, std::string* out) = 0;
  // The table after a move of shard state at version `version`: the rows
  // `lost` selects leave it (the next checkpoint writes that they are gone, so
  // a restore of it does not find them), and `records` (ExportRows' output of
  // other shards, concatenated in any order; no row `lost` selects) become
  // stored rows, changed since the last checkpoint. The table must be at
  // `version` between steps, or hold no row and no checkpoint at all (a shard
  // added: it moves to `version`). ChangedSince(v < version) then scans the
  // rows' versions. Validated whole before anything changes: InvalidArgument
  // for a malformed record, a repeated row or one `lost` selects;
  // FailedPrecondition for another version or pushes in progress;
  // ResourceExhausted as Seed's; store errors as ApplyStep's.
  virtual Status Move(Step version, const std::function<bool(uint64_t row)>& lost,
                      std::string_view records) = 0;

  // ---- checkpoints ----

  // Writes checkpoint version(): the rows changed since the last one, in one
  // synced batch (after a Move at the version of the newest checkpoint, that
  // checkpoint amended). FailedPrecondition: a memory-only table, or a step's
  // pushes are in progress (take it between steps).
  virtual Status Checkpoint() = 0;
  virtual std::vector<Step> Checkpoints() const = 0;
  // As SparseRowStore::RetainFrom.
  virtual void RetainFrom(Step step) = 0;
  // Replaces the state with checkpoint `step` (Step(0) not held: the empty
  // table) and deletes the newer ones; pushes in progress are dropped.
  // Step(-1): the empty table before the job's initial values, every
  // checkpoint deleted (step 0's seeded rows too). NotFound: not held.
  virtual Status RollbackTo(Step step) = 0;

  // ---- statistics ----
  struct Stats {
    uint64_t cached_rows = 0;           // rows in memory
    uint64_t spilled_rows = 0;          // changed rows evicted since the last checkpoint, not back
    uint64_t spill_writes = 0;          // rows written to the spill tier since Open
    uint64_t evictions = 0;             // since Open
    uint64_t store_reads = 0;           // rows looked up in the store since Open (found or not)
    uint64_t warm_reads = 0;            // of them, by Warm: ahead of the pull or step needing them
    uint64_t rows_stepped = 0;          // since Open
    uint64_t last_checkpoint_rows = 0;  // rows the newest Checkpoint() wrote
  };
  virtual Stats stats() const = 0;
};

}  // namespace eps
