#include "storage/rocks_status.h"

#include <glog/logging.h>

#include <cerrno>
#include <cstring>

namespace eps {
namespace {

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

// A RocksDB status as an eps::Status naming the store and what was being done.
Status FromRocks(const rocksdb::Status& s, const std::string& path, const std::string& what) {
  const std::string text = s.ToString();
  const std::string m = what + " (store " + path + "): " + text;
  if (s.IsCorruption()) return DataLoss(m);
  if (s.IsNoSpace() || Contains(text, "No space left")) return ResourceExhausted(m);
  if (s.IsNotFound() || s.IsPathNotFound()) return NotFound(m);
  if (Contains(text, "Permission denied") || Contains(text, "Read-only file system") ||
      Contains(text, "Not a directory") || Contains(text, "Operation not permitted")) {
    return FailedPrecondition(m);
  }
  if (Contains(text, "While lock file") || Contains(text, "lock hold by current process")) {
    return Unavailable(m + " (another process, or another StateStore, has it open)");
  }
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return Unavailable(m);
  if (s.IsInvalidArgument() && Contains(text, "does not exist")) return NotFound(m);
  if (s.IsInvalidArgument() || s.IsNotSupported()) return FailedPrecondition(m);
  return Internal(m);
}

Status FromErrno(int err, const std::string& path, const std::string& what) {
  const std::string m = what + " (store " + path + "): " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return ResourceExhausted(m);
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOTDIR:
    case EEXIST:
    case ENAMETOOLONG:
    case ELOOP:
      return FailedPrecondition(m);
    default:
      return Internal(m);
  }
}

void FlushIfOverfull(rocksdb::DB* db, const std::string& path, const std::string& what) {
  uint64_t memtables = 0;
  if (!db->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtables) ||
      memtables < db->GetOptions().write_buffer_size / 2)
    return;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  const rocksdb::Status fs = db->Flush(flush);
  if (!fs.ok()) {
    LOG(WARNING) << "store " << path << ": " << what
                 << " is durable in the log, but flushing it failed: " << fs.ToString();
  }
}

}  // namespace eps
