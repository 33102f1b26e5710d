// RocksDB and errno failures as eps::Status, shared by the stores of storage/
// (state_store.cc, sparse_store.cc). Internal to storage/: no other folder
// includes RocksDB.
#pragma once

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

}  // namespace eps
