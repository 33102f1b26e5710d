#include "storage/spill_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "storage/rocks_status.h"

namespace eps {
namespace {

constexpr int kSlotBits = 48;
constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
constexpr size_t kFirstFileBytes = size_t{1} << 20;

uint64_t Where(size_t cls, uint64_t slot) { return (uint64_t{cls} << kSlotBits) | slot; }
size_t ClassOf(uint64_t where) { return static_cast<size_t>(where >> kSlotBits); }
uint64_t SlotOf(uint64_t where) { return where & kSlotMask; }

}  // namespace

struct SpillFile::Class {
  explicit Class(size_t record_bytes)
      : bytes(record_bytes), slot_bytes(std::max<size_t>(1, bytes)) {}
  ~Class() {
    if (map != nullptr) munmap(map, map_bytes);
    if (fd >= 0) close(fd);
  }
  std::byte* at(uint64_t slot) const { return map + slot * slot_bytes; }

  const size_t bytes;       // the records' length
  const size_t slot_bytes;  // at least 1, so that every slot has a place
  int fd = -1;
  std::byte* map = nullptr;
  size_t map_bytes = 0;         // mapped, and reserved on disk
  uint64_t next = 0;            // the slots in use or freed lie below it
  std::vector<uint64_t> freed;  // written again first
};

SpillFile::SpillFile(std::string dir) : dir_(std::move(dir)) {}
SpillFile::~SpillFile() = default;

Status SpillFile::Grow(Class& c) {
  const std::string what = "growing the spill file of " + std::to_string(c.bytes) + "-byte rows";
  if (c.fd < 0) {
    std::string path = dir_ + "/spill-XXXXXX";
    c.fd = mkostemp(path.data(), O_CLOEXEC);
    if (c.fd < 0) return FromErrno(errno, dir_, what);
    unlink(path.c_str());  // scratch: gone with the process, whatever ends it
  }
  const size_t slots = c.map_bytes / c.slot_bytes;
  const size_t want = std::max(slots * 2, (kFirstFileBytes + c.slot_bytes - 1) / c.slot_bytes);
  if (want > kSlotMask || want > SIZE_MAX / c.slot_bytes) {
    return ResourceExhausted(what + ": too many rows (store " + dir_ + ")");
  }
  const size_t bytes = want * c.slot_bytes;
  // Reserved now, so that a full disk fails here and not as a SIGBUS on a write to the mapping.
  if (const int err = posix_fallocate(c.fd, static_cast<off_t>(c.map_bytes),
                                      static_cast<off_t>(bytes - c.map_bytes));
      err != 0) {
    return FromErrno(err, dir_, what);
  }
  void* m = c.map == nullptr ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd, 0)
                             : mremap(c.map, c.map_bytes, bytes, MREMAP_MAYMOVE);
  if (m == MAP_FAILED) return FromErrno(errno, dir_, what);
  (void)madvise(m, bytes, MADV_RANDOM);  // rows come back one by one: no read-ahead
  c.map = static_cast<std::byte*>(m);
  c.map_bytes = bytes;
  return OkStatus();
}

void SpillFile::Free(uint64_t where) { classes_[ClassOf(where)]->freed.push_back(SlotOf(where)); }

Status SpillFile::Write(const std::vector<std::pair<uint64_t, std::string>>& puts,
                        const std::vector<uint64_t>& deletes) {
  Erase(deletes);
  size_t cls = 0;  // the records of a table are one length: the last class found is the next
  for (const auto& [id, record] : puts) {
    if (cls >= classes_.size() || classes_[cls]->bytes != record.size()) {
      cls = 0;
      while (cls < classes_.size() && classes_[cls]->bytes != record.size()) ++cls;
      if (cls == classes_.size()) classes_.push_back(std::make_unique<Class>(record.size()));
    }
    Class& c = *classes_[cls];
    auto [it, added] = where_.try_emplace(id, 0);
    uint64_t slot = 0;
    if (!added && ClassOf(it->second) == cls) {
      slot = SlotOf(it->second);  // rewritten in place
    } else if (!c.freed.empty()) {
      slot = c.freed.back();
      c.freed.pop_back();
    } else {
      if ((c.next + 1) * c.slot_bytes > c.map_bytes) {
        if (Status st = Grow(c); !st.ok()) {
          if (added) where_.erase(it);  // the row keeps its old record, if it had one
          return st;
        }
      }
      slot = c.next++;
    }
    if (!added && ClassOf(it->second) != cls) Free(it->second);
    std::memcpy(c.at(slot), record.data(), record.size());
    it->second = Where(cls, slot);
  }
  return OkStatus();
}

void SpillFile::Read(const std::vector<uint64_t>& ids,
                     std::vector<std::optional<std::string>>* out) const {
  out->assign(ids.size(), std::nullopt);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = where_.find(ids[i]);
    if (it == where_.end()) continue;
    const Class& c = *classes_[ClassOf(it->second)];
    (*out)[i].emplace(reinterpret_cast<const char*>(c.at(SlotOf(it->second))), c.bytes);
  }
}

void SpillFile::Erase(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    const auto it = where_.find(id);
    if (it == where_.end()) continue;
    Free(it->second);
    where_.erase(it);
  }
}

void SpillFile::Clear() {
  where_.clear();
  for (const std::unique_ptr<Class>& c : classes_) {
    c->freed.clear();
    c->next = 0;
  }
}

uint64_t SpillFile::file_bytes() const {
  uint64_t n = 0;
  for (const std::unique_ptr<Class>& c : classes_) n += c->map_bytes;
  return n;
}

}  // namespace eps
