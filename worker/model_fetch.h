// How a worker gets the job's model files (the TorchScript model, the
// --init_from file; docs/design.md, "How the model reaches the workers"): from
// its host's cache, keyed by SHA-256, or from the coordinator in FetchModel
// chunks, a bounded number in flight, each reply checked against its request
// and the whole against the SHA-256; what was fetched goes into the cache, so
// that a re-attach or a second worker on the host transfers nothing. No
// message holds a whole file, and sizes and offsets are 64-bit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "schema/channel.h"
#include "worker/step_times.h"  // ModelFileReport

namespace eps {

// True when `sha256` is 64 lower-case hex digits (a file name the cache may use).
bool IsSha256Hex(const std::string& sha256);

// A directory of model files, each named by its SHA-256 (hex). Entries are
// written atomically (a temporary file in the directory, fsync, rename, fsync
// of the directory): a reader sees a whole file or none, whatever crashes, and
// several workers of a host may share it (the last rename wins; the entries are
// the same bytes). An entry is checked against its hash whenever it is read; a
// damaged one is removed. The entries are kept to a bound, the least recently
// used removed first (Trim). Thread-compatible; several processes may use one
// directory at once.
class ModelCache {
 public:
  // Creates `dir` (and its parents) when missing and checks that a file can be
  // written there. FailedPrecondition, naming the directory and the reason,
  // when it cannot. `max_bytes`: the entries' total that Trim keeps to (0: no
  // bound).
  static StatusOr<std::unique_ptr<ModelCache>> Open(const std::string& dir, uint64_t max_bytes = 0);

  const std::string& dir() const { return dir_; }
  std::string PathOf(const std::string& sha256) const { return dir_ + "/" + sha256; }

  enum class Found { kHit, kMiss, kCorrupt };
  // The entry `sha256` of `size` bytes, into *bytes when it is whole: kHit.
  // kMiss when there is none; kCorrupt when its size or SHA-256 differs (the
  // entry is removed). InvalidArgument for a hash that is no SHA-256 hex. A
  // hit is a use: the entry's modification time becomes now.
  [[nodiscard]] StatusOr<Found> Read(const std::string& sha256, uint64_t size,
                                     std::string* bytes) const;

  // What Trim removed.
  struct Trimmed {
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };
  // Removes the least recently used entries (the oldest modification time
  // first) until the entries total at most max_bytes, never the entry `keep`
  // (one larger than the bound stays alone); and the temporary files of
  // writers silent for an hour (a fetch that crashed). An entry another
  // process removed meanwhile is no error, and a worker reading an entry as
  // it is removed keeps its open file.
  Trimmed Trim(const std::string& keep) const;

  // An entry being written, in order. Destroyed before Commit(): its
  // temporary file is removed.
  class Writer {
   public:
    ~Writer();
    [[nodiscard]] Status Append(const void* data, size_t size);
    // fsync, rename to PathOf(sha256), fsync of the directory.
    [[nodiscard]] Status Commit();

   private:
    friend class ModelCache;
    Writer(int fd, std::string tmp, std::string path, std::string dir)
        : fd_(fd), tmp_(std::move(tmp)), path_(std::move(path)), dir_(std::move(dir)) {}
    int fd_;
    const std::string tmp_, path_, dir_;
  };
  // Internal when the temporary file cannot be created.
  [[nodiscard]] StatusOr<std::unique_ptr<Writer>> NewEntry(const std::string& sha256) const;

  // The right to fetch the entry `sha256` for the host: an exclusive lock
  // (flock) on a lock file next to it, held until destroyed (or the process
  // ends). Other workers of the host wait for it and then find the entry.
  class FetchLock {
   public:
    ~FetchLock();

   private:
    friend class ModelCache;
    explicit FetchLock(int fd) : fd_(fd) {}
    const int fd_;
  };
  // Waits up to `timeout` (looking at `stop` every 100 ms). DeadlineExceeded
  // when another holder keeps it longer; Aborted once `stop` is set; Internal
  // when the lock file cannot be opened.
  [[nodiscard]] StatusOr<std::unique_ptr<FetchLock>> LockForFetch(
      const std::string& sha256, std::chrono::milliseconds timeout,
      const std::atomic<bool>& stop) const;

 private:
  ModelCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  const std::string dir_;
  const uint64_t max_bytes_;
};

struct FetchOptions {
  uint64_t chunk_bytes = 4 << 20;  // each request's length: the registration reply's limit
  int max_in_flight = 4;           // requests sent and not answered yet
  std::chrono::milliseconds reply_timeout{60000};  // longest wait for one reply
  std::string token;                               // the job's, on every request
  // Longest wait for another worker of the host that fetches the same file
  // into the cache; then this one fetches it too.
  std::chrono::milliseconds cache_lock_timeout{600000};
};

// A model file, and where it came from.
struct FetchedFile {
  std::string bytes;
  ModelFileReport report;
};

// The file `sha256` of `size` bytes: from `cache` when it holds it whole (no
// request sent), else fetched from the coordinator over `coordinator` (a
// DEALER with no other request outstanding) and then written to `cache`,
// which is then trimmed to its bound.
// Workers of one host that miss the same entry at once fetch it once: one
// holds the cache's fetch lock, the others wait for it and read the entry
// (report.cache "hit"). A
// cache that cannot be written is not an error: the bytes are used all the
// same and report.warning says why they were not kept. `cache` may be null
// (no cache). `what` names the file in messages and the report ("model",
// "init_from"). Errors: the coordinator's ErrorReply as its Status; DataLoss
// when a reply is not the one asked for (another file, offset or size) or the
// bytes do not hash to `sha256`; DeadlineExceeded when a reply does not come
// within reply_timeout; Aborted once `stop` is set.
[[nodiscard]] StatusOr<FetchedFile> FetchModelFile(Channel* coordinator, const std::string& what,
                                                   const std::string& sha256, uint64_t size,
                                                   const ModelCache* cache,
                                                   const FetchOptions& options,
                                                   const std::atomic<bool>& stop);

// OK when `bytes` (a file the coordinator sent inline) are the file `sha256`
// pins (both empty: none); InvalidArgument naming `what` and the spec's field
// `pin` otherwise.
[[nodiscard]] Status CheckPinned(const std::string& bytes, const std::string& sha256,
                                 const std::string& what, const std::string& pin);

}  // namespace eps
