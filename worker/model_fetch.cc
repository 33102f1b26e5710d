#include "worker/model_fetch.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "common/digest.h"
#include "worker/wait.h"

namespace eps {
namespace {

std::string Errno() { return std::strerror(errno); }

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

bool IsSha256Hex(const std::string& sha256) {
  return sha256.size() == 64 && std::all_of(sha256.begin(), sha256.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// ---- ModelCache ---------------------------------------------------------------

StatusOr<std::unique_ptr<ModelCache>> ModelCache::Open(const std::string& dir, uint64_t max_bytes) {
  if (dir.empty()) return FailedPrecondition("the model cache needs a directory");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return FailedPrecondition("the model cache directory " + dir +
                              " cannot be created: " + ec.message());
  }
  // A probe: the directory may exist and still refuse new files.
  std::string probe = dir + "/.probe.XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) {
    return FailedPrecondition("the model cache directory " + dir +
                              " cannot be written: " + Errno());
  }
  close(fd);
  unlink(probe.c_str());
  return std::unique_ptr<ModelCache>(new ModelCache(dir, max_bytes));
}

StatusOr<ModelCache::Found> ModelCache::Read(const std::string& sha256, uint64_t size,
                                             std::string* bytes) const {
  if (!IsSha256Hex(sha256)) return InvalidArgument("'" + sha256 + "' is no SHA-256 (hex)");
  const std::string path = PathOf(sha256);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Found::kMiss;
    LOG(WARNING) << "the model cache's " << path << " cannot be read (" << Errno()
                 << "): fetching the file instead";
    return Found::kMiss;
  }
  struct stat st {};
  bool whole = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == size;
  if (whole) {
    try {
      bytes->resize(static_cast<size_t>(size));
    } catch (const std::bad_alloc&) {
      close(fd);
      return ResourceExhausted("no memory for the " + std::to_string(size) + " bytes of " + path);
    }
    Sha256 hash;
    uint64_t at = 0;
    while (at < size) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(size - at, 16 << 20));
      const ssize_t n = pread(fd, bytes->data() + at, want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      hash.Update(bytes->data() + at, static_cast<size_t>(n));
      at += static_cast<uint64_t>(n);
    }
    whole = at == size && hash.HexDigest() == sha256;
  }
  if (whole) (void)futimens(fd, nullptr);  // used now (refused for another user's entry)
  close(fd);
  if (whole) return Found::kHit;
  bytes->clear();
  LOG(WARNING) << "the model cache's " << path
               << " is damaged (its size or SHA-256 is not the file's): removed, fetching it again";
  unlink(path.c_str());
  return Found::kCorrupt;
}

ModelCache::Trimmed ModelCache::Trim(const std::string& keep) const {
  namespace fs = std::filesystem;
  constexpr auto kDeadWriter = std::chrono::hours(1);
  struct Entry {
    fs::file_time_type used;
    uint64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  Trimmed trimmed;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec, size_ec, time_ec;
    if (!it->is_regular_file(type_ec)) continue;
    const uint64_t size = it->file_size(size_ec);
    const fs::file_time_type used = it->last_write_time(time_ec);
    if (size_ec || time_ec) continue;  // removed meanwhile
    const std::string name = it->path().filename().string();
    // A writer's temporary file is ".<sha256>.XXXXXX" (NewEntry); its lock ".<sha256>.lock".
    const bool temporary =
        name.size() == 72 && name[0] == '.' && IsSha256Hex(name.substr(1, 64)) && name[65] == '.';
    std::error_code rm_ec;
    if (temporary && now - used > kDeadWriter && fs::remove(it->path(), rm_ec)) {
      ++trimmed.entries;
      trimmed.bytes += size;
    }
    if (!IsSha256Hex(name)) continue;
    total += size;
    if (name != keep) entries.push_back({used, size, it->path()});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (max_bytes_ == 0 || total <= max_bytes_) break;
    total -= e.size;
    std::error_code rm_ec;
    if (!fs::remove(e.path, rm_ec)) continue;  // another worker of the host took it first
    ++trimmed.entries;
    trimmed.bytes += e.size;
  }
  return trimmed;
}

ModelCache::Writer::~Writer() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(tmp_.c_str());
  }
}

Status ModelCache::Writer::Append(const void* data, size_t size) {
  if (fd_ < 0) return FailedPrecondition("the entry " + path_ + " is closed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Internal("cannot write " + tmp_ + ": " + Errno());
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status ModelCache::Writer::Commit() {
  if (fd_ < 0) return FailedPrecondition("the entry " + path_ + " is closed");
  if (fsync(fd_) != 0) return Internal("cannot fsync " + tmp_ + ": " + Errno());
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) {
    unlink(tmp_.c_str());
    return Internal("cannot close " + tmp_ + ": " + Errno());
  }
  if (rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = Errno();
    unlink(tmp_.c_str());
    return Internal("cannot rename " + tmp_ + " to " + path_ + ": " + why);
  }
  // The rename itself survives a crash once the directory is on disk.
  const int dir = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)fsync(dir);
    close(dir);
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<ModelCache::Writer>> ModelCache::NewEntry(
    const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) return InvalidArgument("'" + sha256 + "' is no SHA-256 (hex)");
  std::string tmp = dir_ + "/." + sha256 + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return Internal("cannot create a file in " + dir_ + ": " + Errno());
  fchmod(fd, 0644);  // mkstemp's 0600 would hide the entry from the host's other users
  return std::unique_ptr<Writer>(new Writer(fd, tmp, PathOf(sha256), dir_));
}

ModelCache::FetchLock::~FetchLock() { close(fd_); }  // releases the flock

StatusOr<std::unique_ptr<ModelCache::FetchLock>> ModelCache::LockForFetch(
    const std::string& sha256, std::chrono::milliseconds timeout,
    const std::atomic<bool>& stop) const {
  if (!IsSha256Hex(sha256)) return InvalidArgument("'" + sha256 + "' is no SHA-256 (hex)");
  const std::string path = dir_ + "/." + sha256 + ".lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot open " + path + ": " + Errno());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool said = false;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const std::string why = Errno();
      close(fd);
      return Internal("cannot lock " + path + ": " + why);
    }
    if (stop.load()) {
      close(fd);
      return Aborted("stopped by a signal");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      close(fd);
      return DeadlineExceeded("another worker of this host has been fetching " + sha256 + " into " +
                              dir_ + " for " + std::to_string(timeout.count()) + " ms");
    }
    if (!said) {
      LOG(INFO) << "another worker of this host fetches " << sha256.substr(0, 12) << " into "
                << dir_ << ": waiting for it";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // flock has no timed wait
  }
  return std::unique_ptr<FetchLock>(new FetchLock(fd));
}

// ---- fetching -----------------------------------------------------------------

StatusOr<FetchedFile> FetchModelFile(Channel* coordinator, const std::string& what,
                                     const std::string& sha256, uint64_t size,
                                     const ModelCache* cache, const FetchOptions& options,
                                     const std::atomic<bool>& stop) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name =
      "the " + what + " file (" + sha256.substr(0, 12) + ", " + std::to_string(size) + " bytes)";
  if (!IsSha256Hex(sha256)) return InvalidArgument(name + ": '" + sha256 + "' is no SHA-256");
  if (options.chunk_bytes == 0 || options.max_in_flight < 1)
    return InvalidArgument("fetching " + name + ": chunks of 0 bytes or nothing in flight");
  FetchedFile out;
  ModelFileReport& report = out.report;
  report.what = what;
  report.sha256 = sha256;
  report.size = size;
  report.cache = "off";

  std::unique_ptr<ModelCache::FetchLock> lock;  // held until the entry is written
  std::unique_ptr<ModelCache::Writer> writer;
  if (cache != nullptr) {
    EPS_ASSIGN_OR_RETURN(ModelCache::Found found, cache->Read(sha256, size, &out.bytes));
    if (found == ModelCache::Found::kHit) {
      report.cache = "hit";
      report.ms = MsSince(start);
      return out;
    }
    report.cache = found == ModelCache::Found::kCorrupt ? "corrupt" : "miss";
    // One fetch per host: whoever holds the lock fetches; the others then find the entry.
    StatusOr<std::unique_ptr<ModelCache::FetchLock>> locked =
        cache->LockForFetch(sha256, options.cache_lock_timeout, stop);
    if (locked.ok()) {
      lock = std::move(locked).value();
      EPS_ASSIGN_OR_RETURN(ModelCache::Found now, cache->Read(sha256, size, &out.bytes));
      if (now == ModelCache::Found::kHit) {  // another worker fetched it meanwhile
        report.cache = "hit";
        report.ms = MsSince(start);
        return out;
      }
    } else if (locked.status().code() == StatusCode::kAborted) {
      return locked.status();
    } else {
      LOG(WARNING) << locked.status().ToString() << ": fetching it all the same";
    }
    StatusOr<std::unique_ptr<ModelCache::Writer>> entry = cache->NewEntry(sha256);
    if (entry.ok()) {
      writer = std::move(entry).value();
    } else {
      report.warning = "not kept in the model cache: " + entry.status().message();
    }
  }

  try {
    out.bytes.reserve(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("no memory for " + name);
  }
  Sha256 hash;
  struct Asked {
    uint64_t offset, length;
  };
  std::deque<Asked> in_flight;
  uint64_t next = 0;
  while (report.fetched_bytes < size) {
    while (next < size && in_flight.size() < static_cast<size_t>(options.max_in_flight)) {
      const uint64_t length = std::min(options.chunk_bytes, size - next);
      EPS_RETURN_IF_ERROR(
          coordinator->Send(Envelope{options.token, FetchModel{sha256, next, length}})
              .WithContext("fetching " + name));
      in_flight.push_back({next, length});
      next += length;
    }
    StatusOr<Channel::Incoming> in = ReceiveOrStop(coordinator, options.reply_timeout, stop);
    if (!in.ok()) return in.status().WithContext("fetching " + name);
    if (!in->envelope.ok()) return in->envelope.status().WithContext("fetching " + name);
    const Body& body = in->envelope->body;
    if (const auto* err = std::get_if<ErrorReply>(&body))
      return err->ToStatus().WithContext("the coordinator refused to send " + name);
    const auto* reply = std::get_if<FetchModelReply>(&body);
    if (reply == nullptr) {
      return ProtocolError(std::string("fetching ") + name + ": the coordinator answered with " +
                           BodyName(body));
    }
    const Asked asked = in_flight.front();
    if (reply->sha256 != sha256 || reply->offset != asked.offset || reply->size != asked.length ||
        reply->file_size != size) {
      return DataLoss("fetching " + name + ": asked bytes [" + std::to_string(asked.offset) +
                      ", +" + std::to_string(asked.length) + "), the reply holds " +
                      std::to_string(reply->size) + " bytes at " + std::to_string(reply->offset) +
                      " of a file of " + std::to_string(reply->file_size) + " bytes, SHA-256 " +
                      reply->sha256.substr(0, 12));
    }
    in_flight.pop_front();
    hash.Update(reply->data, reply->size);
    out.bytes.append(static_cast<const char*>(reply->data), reply->size);
    if (writer != nullptr) {
      Status written = writer->Append(reply->data, reply->size);
      if (!written.ok()) {
        report.warning = "not kept in the model cache: " + written.message();
        writer.reset();
      }
    }
    report.fetched_bytes += reply->size;
    ++report.chunks;
  }
  const std::string got = hash.HexDigest();
  if (got != sha256) {
    return DataLoss("the " + std::to_string(size) + " bytes of " + name +
                    " fetched from the coordinator have SHA-256 " + got +
                    ": the coordinator's file changed while it served it, or was damaged");
  }
  if (writer != nullptr) {
    Status committed = writer->Commit();
    if (!committed.ok()) {
      report.warning = "not kept in the model cache: " + committed.message();
    } else if (const ModelCache::Trimmed trimmed = cache->Trim(sha256); trimmed.entries > 0) {
      LOG(INFO) << "the model cache " << cache->dir() << " let go of " << trimmed.entries
                << " files (" << trimmed.bytes << " bytes) used least recently";
    }
  }
  if (!report.warning.empty()) LOG(WARNING) << name << ": " << report.warning;
  report.ms = MsSince(start);
  return out;
}

Status CheckPinned(const std::string& bytes, const std::string& sha256, const std::string& what,
                   const std::string& pin) {
  if (sha256.empty() && bytes.empty()) return OkStatus();
  Sha256 sha;
  sha.Update(bytes.data(), bytes.size());
  const std::string got = sha.HexDigest();
  if (got == sha256) return OkStatus();
  return InvalidArgument("the " + what + " the coordinator sent (" + std::to_string(bytes.size()) +
                         " bytes) has SHA-256 " + got + ", the job's " + pin + " is '" + sha256 +
                         "'");
}

}  // namespace eps
