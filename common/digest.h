// SHA-256 over byte ranges, hex-encoded (libcrypto underneath). Not thread-safe
// per instance.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace eps {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  std::string HexDigest();  // finishes the hash

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace eps
