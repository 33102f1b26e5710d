// RocksDB and errno failures as eps::Status, and what else the stores of
// storage/ (state_store.cc, sparse_store.cc) share. Internal to storage/: no
// other folder includes RocksDB.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/status.h>

#include <string>

#include "common/status.h"

namespace eps {

// A RocksDB status as a Status naming the store and what was being done:
// corruption is DataLoss, a full disk ResourceExhausted, an unusable directory
// FailedPrecondition, a store held by another process Unavailable.
Status FromRocks(const rocksdb::Status& s, const std::string& path, const std::string& what);

// An errno from the file system as a Status, with the same codes as FromRocks.
Status FromErrno(int err, const std::string& path, const std::string& what);

// After a checkpoint's write (durable in the log): when it filled the memtable
// half or more, flushes it into a table file at once (the memtables' size as
// RocksDB counts it may fall short of what they hold: a batch of 20 MiB into
// an ordered memtable counted 16.4 MB, under its 16 MiB). RocksDB would flush it only
// at the next write, so a process that opened the store in between (a
// restarted shard, export_model's read-only open) would first replay all of it
// from the log into memory (at 1.3 GB: tens of seconds). A failed flush loses
// nothing (the log holds it): a warning naming `what`, and RocksDB flushes later.
void FlushIfOverfull(rocksdb::DB* db, const std::string& path, const std::string& what);

}  // namespace eps
