// Small file helpers shared by the binaries: the job token and files that other
// processes poll for (addresses, results), which must never be seen half-written.
#pragma once

#include <string>

#include "common/status.h"

namespace eps {

// Writes `text` to `path` through a temporary file and rename().
Status WriteFileAtomically(const std::string& path, const std::string& text);

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
