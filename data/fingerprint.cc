#include "data/fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "common/digest.h"

namespace eps {
namespace {

constexpr int64_t kEdge = int64_t{1} << 20;  // the first and the last MiB
constexpr int64_t kBlock = 4096;
constexpr int64_t kBlocks = 64;

// Hashes [offset, offset + n) of fd.
Status HashRange(int fd, const std::string& path, int64_t offset, int64_t n, Sha256* h,
                 std::vector<char>* buf) {
  buf->resize(static_cast<size_t>(std::min<int64_t>(n, kEdge)));
  while (n > 0) {
    const ssize_t got = pread(fd, buf->data(), std::min<size_t>(buf->size(), n), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return DataLoss(path + ": cannot read at byte " + std::to_string(offset) + ": " +
                      (got < 0 ? std::strerror(errno) : "the file ended"));
    }
    h->Update(buf->data(), static_cast<size_t>(got));
    offset += got;
    n -= got;
  }
  return OkStatus();
}

struct Entry {
  std::string size, sha256, path;
};

// role -> entry; false if a line is malformed.
bool ParseFingerprint(const std::string& text, std::map<std::string, Entry>* out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string role, size, sha;
    if (!(fields >> role >> size >> sha)) return false;
    if (size.rfind("size=", 0) != 0 || sha.rfind("sha256=", 0) != 0) return false;
    std::string path;
    std::getline(fields, path);
    if (!path.empty() && path[0] == ' ') path.erase(0, 1);
    (*out)[role] = Entry{size.substr(5), sha.substr(7), path};
  }
  return true;
}

}  // namespace

StatusOr<std::string> FileSha256Sample(const std::string& path, int64_t* size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return NotFound(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  const int64_t n = st.st_size;
  *size = n;
  Sha256 h;
  h.Update(&n, sizeof(n));
  std::vector<char> buf;
  if (n <= 2 * kEdge + kBlocks * kBlock) {
    EPS_RETURN_IF_ERROR(HashRange(fd, path, 0, n, &h, &buf));
  } else {
    EPS_RETURN_IF_ERROR(HashRange(fd, path, 0, kEdge, &h, &buf));
    const int64_t span = n - 2 * kEdge - kBlock;  // where a middle block may start, from kEdge
    for (int64_t i = 0; i < kBlocks; ++i) {
      EPS_RETURN_IF_ERROR(HashRange(fd, path, kEdge + span * i / (kBlocks - 1), kBlock, &h, &buf));
    }
    EPS_RETURN_IF_ERROR(HashRange(fd, path, n - kEdge, kEdge, &h, &buf));
  }
  return h.HexDigest();
}

StatusOr<std::string> FingerprintFile(const std::string& role, const std::string& path) {
  int64_t size = 0;
  EPS_ASSIGN_OR_RETURN(std::string sha, FileSha256Sample(path, &size));
  return role + " size=" + std::to_string(size) + " sha256=" + sha + " " + path;
}

Status CompareFingerprints(const std::string& job, const std::string& worker) {
  std::map<std::string, Entry> a, b;
  if (!ParseFingerprint(job, &a) || !ParseFingerprint(worker, &b)) {
    return FailedPrecondition(std::string(kDataMismatch) +
                              "a data fingerprint is malformed (this worker's: '" +
                              worker.substr(0, 200) + "')");
  }
  for (const auto& [role, want] : a) {
    auto it = b.find(role);
    if (it == b.end()) {
      return FailedPrecondition(std::string(kDataMismatch) + "the job reads " + role + " " +
                                want.path + ", this worker has no " + role);
    }
    const Entry& have = it->second;
    if (have.size != want.size || have.sha256 != want.sha256) {
      return FailedPrecondition(std::string(kDataMismatch) + role + " " + have.path +
                                " differs from the job's " + want.path + ": this worker's has " +
                                have.size + " bytes, sha256 (sampled) " + have.sha256.substr(0, 16) +
                                "..., the job's " + want.size + " bytes, " +
                                want.sha256.substr(0, 16) + "... (docs/data.md, \"Fingerprint\")");
    }
  }
  for (const auto& [role, have] : b) {
    if (a.count(role) == 0) {
      return FailedPrecondition(std::string(kDataMismatch) + "this worker reads " + role + " " +
                                have.path + ", the job has no " + role);
    }
  }
  return OkStatus();
}

}  // namespace eps
