// Internal to data/: the DataSources the readers return, and the file stamps
// that tell whether a file changed after the open.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace eps {

// What a file was at the open: identity, size, modification time.
struct FileStamp {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int fd = -1;  // when the file stays open (mapped): fstat it too
};

// Stamps `path` (stat); NotFound / InvalidArgument (not a regular file).
[[nodiscard]] StatusOr<FileStamp> StampFile(const std::string& path, int fd = -1);
// OK if `path` (and the open fd) still match; FailedPrecondition naming the file.
[[nodiscard]] Status CheckStamp(const FileStamp& stamp);

// A file mapped read-only and shared, with MADV_RANDOM; closed and unmapped
// on destruction.
class MappedFile {
 public:
  // NotFound, InvalidArgument (not a regular file, empty), Internal (mmap).
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const FileStamp& stamp() const { return stamp_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  FileStamp stamp_;
};

// Owns whatever holds the bytes (`hold`: vectors, mappings) and checks the stamps.
class StampedSource final : public DataSource {
 public:
  StampedSource(std::vector<FileStamp> stamps, std::shared_ptr<const void> hold)
      : stamps_(std::move(stamps)), hold_(std::move(hold)) {}
  Status CheckUnchanged() const override;

 private:
  const std::vector<FileStamp> stamps_;
  const std::shared_ptr<const void> hold_;
};

// Scans int64 labels: InvalidArgument (naming `path` and the sample) for a
// negative one; else the number of classes (1 + the largest).
[[nodiscard]] StatusOr<int64_t> CountClasses(const int64_t* labels, int64_t n,
                                             const std::string& path);

}  // namespace eps
