// SpillFile: the spilled rows of one sparse table (storage/sparse_store.h): the records of
// changed rows its cache evicted, read back when a step needs the rows again. Scratch: nothing
// in it outlives the process, so it needs none of a database's order, log or compactions.
//
// Records are kept in slots of their own length (a table's records are all one length: one
// class of slots in practice), one file per length, mapped whole; a map in memory finds a
// row's slot (16 bytes a row, some 4 % of a 424-byte record) and a freed slot is the next one
// written. A write or read is a hash lookup and a copy; the kernel writes the mapped pages out
// and drops them when memory is short, as it does for any file, and reads them back on use.
//
// The files are created in the store's directory (the disk the user chose for the table) and
// unlinked at once: a crash leaves nothing to clean up. Space is reserved (fallocate) before a
// file grows, so that a full disk is a ResourceExhausted error and never a fault on a write.
//
// Not thread-safe: the store's owner calls it.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eps {

class SpillFile {
 public:
  // Its files go to directory `dir` (which must exist).
  explicit SpillFile(std::string dir);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // Removes `deletes`, then writes `puts` (a row written again replaces its record): a row
  // read back and evicted again in one batch keeps its new record. Records may be empty.
  // Errors (a full disk: ResourceExhausted) leave the rows written before the failing one.
  Status Write(const std::vector<std::pair<uint64_t, std::string>>& puts,
               const std::vector<uint64_t>& deletes);
  // The records of `ids` (nullopt: none).
  void Read(const std::vector<uint64_t>& ids, std::vector<std::optional<std::string>>* out) const;
  void Erase(const std::vector<uint64_t>& ids);
  void Clear();  // every record; the files keep their space for the next ones

  size_t size() const { return where_.size(); }  // rows held
  uint64_t file_bytes() const;                   // the files' reserved bytes

 private:
  struct Class;  // the slots of one record length
  Status Grow(Class& c);
  void Free(uint64_t where);

  const std::string dir_;
  std::vector<std::unique_ptr<Class>> classes_;
  // Row -> its class (top 16 bits) and slot (the rest).
  absl::flat_hash_map<uint64_t, uint64_t> where_;
};

}  // namespace eps
