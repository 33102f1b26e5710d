// A small tmpfs mounted in a test's temporary directory: a disk that fills up on demand.
// Unmounted when the object goes. Mounting needs root; where it fails the test skips.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/temp_dir.h"

namespace eps {

class SmallDisk {
 public:
  // Mounts a tmpfs of `size` (mount's spelling: "3m") at `dir`/small.
  SmallDisk(const TempDir& dir, const std::string& size) : path_(dir.Sub("small")) {
    std::filesystem::create_directories(path_);
    if (mount("tmpfs", path_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallDisk() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }  // why it is not mounted
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace eps
