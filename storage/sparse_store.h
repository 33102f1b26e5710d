// SparseRowStore: the stored tier of one sparse table (server/sparse_table.h).
// The table's in-memory cache sits above it; this class only stores records:
// opaque byte strings, one per row, each holding the row's weights and
// optimizer moments together (a record is never split).
//
// Its checkpoints are its own RocksDB database in its own directory (a shard
// gives it a folder beside its StateStore), not a part of the StateStore's:
// they want their own memtable and bloom filters, and must not slow the
// StateStore's synced checkpoints or change its format. Keys carry the table
// id, so that the tables of one shard can later share one database (one batch
// for all their checkpoints).
//
// Two kinds of records:
//  * Spilled rows: the record of a row the cache evicted while it had changed
//    since the last checkpoint (the table's cache may hold a newer copy of a row
//    it read back, which overrides it). Scratch, in a spill file of the same
//    directory (storage/spill_file.h), not in the database: Open and RollbackTo
//    drop them all, and a checkpoint moves them into checkpoint records.
//  * Checkpoint records: the record of a row as of checkpoint step s, keyed by
//    (row, s). A checkpoint at step k writes the records of the rows changed
//    since the previous checkpoint (incremental) and a manifest (k and the ids
//    it wrote) in ONE synced WriteBatch, then drops the spilled records it
//    moved: a crash leaves the whole checkpoint or none of it. A row's state
//    at checkpoint k is its newest record at a step <= k; a row with no such
//    record was never touched (its initializer's value). An empty record is a
//    tombstone: the row left this store at that step (a move of shard state
//    gave its partition to another shard), and reads as no record.
//
// Retention mirrors StateStore: the newest `keep_checkpoints` and every one from
// RetainFrom's step survive; the others are dropped with the records no
// surviving checkpoint reads. RollbackTo(k) deletes every checkpoint after k.
//
// Not thread-safe: the table's owner (the shard's thread that steps it) calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace eps {

struct SparseStoreOptions {
  std::string path;       // the database's directory, created if missing
  uint32_t table_id = 0;  // the table whose rows this store holds
  // What the table's records mean (width, optimizer slots, initializer, seed):
  // written at creation and compared at every Open, so that a store is never read
  // with another meaning. Opaque here, at most 4096 bytes.
  std::string identity;
  int keep_checkpoints = 2;  // >= 1
  // Opens an existing store with RocksDB's read-only mode, beside the shard that
  // may still write it (an export): nothing is dropped or written (writes fail),
  // and a checkpoint the writer took after the open is not seen. NotFound when
  // there is no store at `path`.
  bool read_only = false;
};

class SparseRowStore {
 public:
  // Opens or creates the store, drops every spilled record (what a crash left
  // of the cache), and finds its checkpoints. FailedPrecondition: the store was
  // created with another identity or table; InvalidArgument: bad options;
  // otherwise the codes of storage/rocks_status.h.
  static StatusOr<std::unique_ptr<SparseRowStore>> Open(const SparseStoreOptions& options);

  virtual ~SparseRowStore() = default;

  virtual const std::string& path() const = 0;

  // ---- spilled rows ----

  // Deletes `deletes`, then writes `puts` (spilled records). A failure (a full
  // disk: ResourceExhausted) may leave the puts before the failing one written.
  virtual Status WriteSpill(const std::vector<std::pair<uint64_t, std::string>>& puts,
                            const std::vector<uint64_t>& deletes) = 0;
  // The spilled records of `ids` (nullopt: none).
  virtual Status ReadSpilled(const std::vector<uint64_t>& ids,
                             std::vector<std::optional<std::string>>* out) const = 0;

  // ---- checkpoints ----

  // The records of the newest held checkpoint for `ids` (ascending; nullopt: the
  // row is in no checkpoint). What a row not in the cache nor spilled holds.
  virtual Status ReadCheckpointed(const std::vector<uint64_t>& ids,
                                  std::vector<std::optional<std::string>>* out) const = 0;

  // Writes checkpoint `step` (greater than every held one): `rows` are the
  // records of the rows changed since the previous checkpoint (ids unique; an
  // empty record is a tombstone), `moved` the spilled rows among them, whose
  // spilled records are dropped once the checkpoint is written: one synced
  // batch, with retention applied.
  // `step` equal to the newest held checkpoint amends it: `rows` replace or
  // join its records (a move of shard state at that step). FailedPrecondition:
  // `step` is older than the newest held checkpoint.
  virtual Status WriteCheckpoint(Step step,
                                 const std::vector<std::pair<uint64_t, std::string>>& rows,
                                 const std::vector<uint64_t>& moved) = 0;

  // Steps of the held checkpoints, ascending.
  virtual std::vector<Step> Checkpoints() const = 0;

  // Keeps checkpoints of `step` and newer beyond the newest keep_checkpoints,
  // from the next write on; Step(-1) keeps every checkpoint.
  virtual void RetainFrom(Step step) = 0;

  // Deletes every checkpoint newer than `step` and its records (one synced
  // batch), then every spilled record: the store then holds checkpoint `step`
  // as its newest. NotFound: `step` is not held (step 0 always is: the table
  // before its first step, where no row is stored unless a checkpoint of step 0
  // holds rows seeded then). Step(-1) deletes every record.
  virtual Status RollbackTo(Step step) = 0;

  // Calls fn(row, record) for every row from `from_row` on that the newest held
  // checkpoint holds, in ascending row order, until fn returns an error
  // (returned). O(records from `from_row` on): a seek, then the records in order.
  virtual Status ScanCheckpointed(
      const std::function<Status(uint64_t row, std::string_view record)>& fn,
      uint64_t from_row = 0) const = 0;
  // The same for held checkpoint `step` (each row's newest record at a step <=
  // `step`); NotFound when `step` is not held (step 0 always is: no row, or the
  // seeded rows a checkpoint of step 0 holds).
  virtual Status ScanCheckpoint(
      Step step, const std::function<Status(uint64_t row, std::string_view record)>& fn,
      uint64_t from_row = 0) const = 0;

  // Records stored, for tests and statistics (a scan: O(records)).
  struct Counts {
    uint64_t spilled = 0;
    uint64_t checkpointed = 0;  // checkpoint records, every version
  };
  virtual StatusOr<Counts> CountRecords() const = 0;
};

}  // namespace eps
