// StateStore: the durable state of one ElasticPS process (a server shard or the
// coordinator), kept by RocksDB in one directory. Workers never use it.
//
// A store belongs to one job and one owner ("shard/3", "coordinator"): both are
// written into it when it is created, and Open refuses a directory created for
// another job or owner. It holds two kinds of data:
//
//  * Checkpoints. A checkpoint is a step, small caller-defined metadata and a
//    list of named blobs (parameter values, optimizer slots, buffers).
//    WriteCheckpoint puts all of it, and removes the checkpoints that fall out
//    of retention, in ONE synced RocksDB WriteBatch whose last entry is the
//    checkpoint's manifest. A crash therefore leaves either the whole
//    checkpoint or nothing of it, and readers only ever see checkpoints whose
//    manifest landed; blobs left without a manifest are removed by Open.
//    Reads check every blob against the manifest (names, count, sizes, and a
//    CRC over the manifest itself) on top of RocksDB's block and WAL checksums.
//  * Named strings (Put / Get / Delete), each write synced: what the
//    coordinator keeps (job spec, membership, step).
//
// Errors carry the store's path. Corruption found by RocksDB or by these checks
// is DataLoss; a full disk is ResourceExhausted; a directory that cannot be
// used (no permission, a read-only file system, a path through a regular file)
// is FailedPrecondition, as is a store of another job or owner; a store held
// open by another live process is Unavailable. Nothing read from disk is
// trusted: bad bytes give a Status, never an abort.
//
// Example:
//   StoreOptions o;
//   o.path = "/var/lib/eps/job7/shard0";
//   o.job_id = "job7";
//   o.owner = "shard/0";
//   EPS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, StateStore::Open(o));
//   EPS_RETURN_IF_ERROR(store->WriteCheckpoint(Step(100), blobs, metadata));
//   EPS_ASSIGN_OR_RETURN(Checkpoint newest, store->LatestCheckpoint());
//
// Thread-safe: any method may be called from any thread at the same time
// (writes are serialized inside; a read sees one consistent snapshot).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace eps {

struct StoreOptions {
  std::string path;  // the store's directory (created with its parents if missing and allowed)
  // The job the store belongs to. Required to create a store. Empty when opening
  // an existing one: accept the job it was created for (see StateStore::job_id()),
  // for a process that learns its job later and checks it then.
  std::string job_id;
  std::string owner;  // who writes it: "shard/<id>", "coordinator". Required, must match.
  bool create_if_missing = true;  // false: NotFound when there is no store at `path`
  int keep_checkpoints = 2;       // retention: the newest N checkpoints survive a write (N >= 1)
  // Open an existing store to read it while its owner may be running (no lock
  // taken; what was durable at open time is seen). Writes are FailedPrecondition.
  bool read_only = false;
};

// One named blob handed to WriteCheckpoint. The bytes are read only while
// WriteCheckpoint runs; `owner` may keep them alive when they are shared.
struct BlobRef {
  std::string name;  // unique within the checkpoint, 1..1024 bytes
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

// A blob read back from a checkpoint.
struct Blob {
  std::string name;
  std::string bytes;
};

// A complete checkpoint as read back: blobs in the order they were written.
struct Checkpoint {
  Step step{-1};
  std::string metadata;
  std::vector<Blob> blobs;
};

class StateStore {
 public:
  // Opens (or creates) the store at options.path. FailedPrecondition when it
  // belongs to another job or owner (the message names both), NotFound when it
  // is missing and create_if_missing is false, InvalidArgument for bad options;
  // otherwise the codes described above.
  static StatusOr<std::unique_ptr<StateStore>> Open(const StoreOptions& options);

  StateStore() = default;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;
  // Flushes the memtables (so a reopen reads SST files instead of replaying the
  // log) and closes the database.
  virtual ~StateStore() = default;

  virtual const std::string& path() const = 0;
  virtual const std::string& job_id() const = 0;  // as recorded in the store
  virtual const std::string& owner() const = 0;

  // ---- checkpoints ------------------------------------------------------------

  // Writes checkpoint `step` (>= 0) atomically and durably (one synced
  // WriteBatch, the manifest last), replacing a checkpoint of the same step,
  // and in the same batch deletes every checkpoint that falls out of retention:
  // older than the newest keep_checkpoints and older than RetainFrom's step.
  // InvalidArgument: a negative step, an empty, over-long or repeated blob
  // name. FailedPrecondition: `step` would fall out of retention at once.
  virtual Status WriteCheckpoint(Step step, const std::vector<BlobRef>& blobs,
                                 std::string_view metadata = {}) = 0;

  // Checkpoints of `step` and newer survive later writes even beyond the newest
  // keep_checkpoints: a shard keeps every step the job may still roll back to
  // (the newest one every shard holds durably) until all shards hold a newer
  // one. Step(-1): keep every checkpoint. Until called, only the newest
  // keep_checkpoints are kept. Takes effect at the next write.
  virtual void RetainFrom(Step step) = 0;

  // Steps of the complete checkpoints held, ascending.
  virtual StatusOr<std::vector<Step>> ListCheckpoints() const = 0;
  // The newest complete checkpoint; NotFound when there is none.
  virtual StatusOr<Checkpoint> LatestCheckpoint() const = 0;
  // Checkpoint `step`; NotFound when it is not held.
  virtual StatusOr<Checkpoint> ReadCheckpoint(Step step) const = 0;
  // Deletes every checkpoint newer than `step` (one synced batch): after a
  // rollback to `step`, the store holds nothing of the abandoned future.
  virtual Status DropCheckpointsAfter(Step step) = 0;

  // ---- named strings --------------------------------------------------------

  // Keys are 1..1024 bytes. Each write is synced before it returns.
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // Writes all pairs atomically (one synced batch).
  virtual Status PutAll(const std::vector<std::pair<std::string, std::string>>& entries) = 0;
  // NotFound when the key was never written (or was deleted).
  virtual StatusOr<std::string> Get(std::string_view key) const = 0;
  virtual Status Delete(std::string_view key) = 0;
};

}  // namespace eps
