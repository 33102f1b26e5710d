// Small file helpers shared by the binaries: the job token and files that other
// processes poll for (addresses, results), which must never be seen half-written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/status.h"

namespace eps {

// Writes `text` to `path` through a temporary file and rename().
Status WriteFileAtomically(const std::string& path, const std::string& text);

// A file written in a stream, seen whole or not at all: it is written to
// `path`.tmp and renamed over `path` by Commit; a writer dropped before Commit
// removes the temporary file. Bytes already written may be overwritten in
// place (WriteAt: a header whose fields are known only at the end). Move-only.
class FileWriter {
 public:
  // Unavailable when `path`.tmp cannot be made.
  static StatusOr<FileWriter> Create(const std::string& path);
  FileWriter(FileWriter&& other) noexcept;
  FileWriter& operator=(FileWriter&& other) noexcept;  // drops what this one wrote
  ~FileWriter();

  Status Append(const void* data, size_t size);
  // Overwrites [offset, offset + size), which must lie within what was appended.
  Status WriteAt(uint64_t offset, const void* data, size_t size);
  uint64_t size() const { return size_; }
  // Flushes the file and renames it to `path`.
  Status Commit();

 private:
  FileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  Status Failed(const std::string& what);
  void Drop();  // closes and removes the temporary file
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t size_ = 0;
};

// The whole of `path`: NotFound when it cannot be opened, Internal when a read fails.
StatusOr<std::string> ReadFileToString(const std::string& path);

// Reads a job token: the first line of the file, which must not be empty.
// An empty path means "no token" and gives "".
StatusOr<std::string> ReadTokenFile(const std::string& path);

// A folder of its own (mkdtemp: `base`/`prefix`.XXXXXX), removed with
// everything in it when the object goes. Move-only.
class TempFolder {
 public:
  // Internal when the folder cannot be made.
  static StatusOr<TempFolder> Create(const std::string& base, const std::string& prefix);
  TempFolder(TempFolder&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempFolder& operator=(TempFolder&&) = delete;
  ~TempFolder();
  const std::string& path() const { return path_; }

 private:
  explicit TempFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace eps
