// SHA-256 over byte ranges, hex-encoded (libcrypto underneath), and SetDigest,
// the digest of a set of items that parties hash apart and add up. Not
// thread-safe per instance.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace eps {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  std::array<uint8_t, 32> Digest();  // finishes the hash
  std::string HexDigest();           // finishes the hash

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Lower-case hex of `n` bytes.
std::string Hex(const uint8_t* data, size_t n);

// The digest of a multiset of items whatever the order they come in and however
// they are split between the parties that hash them: the sum modulo 2^256 of
// every item's SHA-256 read as a big-endian integer (a multiset hash). Each
// shard sums the items it holds; whoever adds the shards' sums (Merge) gets the
// digest of the whole, the same for every placement of the items. Two
// different sets collide only if the sums of their hashes meet, which needs
// far more items than a job holds to happen by chance.
class SetDigest {
 public:
  static constexpr size_t kBytes = 32;

  // Adds the item whose bytes are the concatenation of `parts`.
  void AddItem(std::initializer_list<std::string_view> parts);
  void Merge(const SetDigest& other);
  // The 32 bytes of the sum, and back (InvalidArgument for another length).
  std::string Bytes() const;
  static StatusOr<SetDigest> FromBytes(std::string_view bytes);
  std::string HexDigest() const { return Hex(sum_.data(), sum_.size()); }
  uint64_t items() const { return items_; }

 private:
  void Add(const std::array<uint8_t, 32>& x);

  std::array<uint8_t, 32> sum_{};  // big-endian
  uint64_t items_ = 0;
};

}  // namespace eps
