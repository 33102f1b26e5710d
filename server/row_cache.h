// The rows of a sparse table held in memory (server/sparse_table.h's cache): each row in a
// slot of a slab, its floats and its fields side by side, found by id through a flat hash map of
// slot numbers (absl::flat_hash_map: one probe of a dense array, where std::unordered_map took a
// bucket, a node and the row's own vector, three cache misses a lookup), and chosen for eviction
// by second chance, in order of insertion.
//
// Slots. A slot holds a row's fields, then its floats: a lookup that found the id finds both in
// one place. The slab grows by chunks of kChunkSlots slots and never moves a slot: the floats
// and fields of a slot stay where they are until the slot is erased, whatever is inserted
// meanwhile. An erased slot is reused by the next insert.
//
// Eviction. The rows wait in a queue in the order they were put (a deque of slot numbers: no
// node a row to chase, as std::list had). Victim() gives the first row in it whose `used` flag
// is clear; a used row it meets goes to the queue's end with the flag cleared (a second chance:
// a row a step touched since it last came to the front stays). A step touches a row by setting
// a flag in the slot it has in hand anyway; only rows reaching the front move.
//
// The ids' order never matters to the table's results: the table sorts what it writes or scans.
// Not thread-safe (the table's one owner uses it).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/huge_pages.h"
#include "server/sparse_record.h"

namespace eps {

class RowCache {
 public:
  using Slot = uint32_t;
  static constexpr Slot kNone = UINT32_MAX;
  static constexpr size_t kChunkSlots = 256;

  // A cached row's fields besides its floats: its record's header, and the cache's.
  struct Fields : RowHeader {
    uint64_t id = 0;
    bool live = false;   // the slot holds a row
    bool dirty = false;  // changed since the last checkpoint
    bool fresh = false;  // just made by the initializer: stored nowhere
    // The spill tier holds this row's record as it is (read back from there and not changed
    // since): its eviction writes nothing.
    bool spill_current = false;
    bool used = false;        // touched since it last reached the queue's front: a second chance
    bool queued = false;      // its entry is in the queue
    uint32_t generation = 0;  // of the slot: its queue entries of former rows are stale
  };

  // Rows of `floats` floats each (>= 1).
  explicit RowCache(size_t floats);

  size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }
  // Bytes the cache spends on a row besides its floats (its fields, its share of the index at
  // the map's lowest load), for budgets.
  static size_t OverheadBytes();

  // The slot of row `id`, or kNone.
  Slot Find(uint64_t id) const {
    const auto it = index_.find(id);
    return it == index_.end() ? kNone : it->second;
  }
  // The slots of rows ids[0, n) into out[0, n) (kNone: not cached), the index's lines for the
  // ids a few places ahead fetched meanwhile: a step's rows are random places in a large index,
  // each lookup a cache miss when done one after another.
  void FindAll(const uint64_t* ids, size_t n, Slot* out) const;
  // Puts row `id` (not cached) into a slot: its floats unset, its fields default but `live`
  // and `id`. Moves no other slot.
  Slot Insert(uint64_t id);
  void Erase(Slot slot);
  void Clear();

  Fields& fields(Slot slot) { return *reinterpret_cast<Fields*>(At(slot)); }
  const Fields& fields(Slot slot) const { return *reinterpret_cast<const Fields*>(At(slot)); }
  float* data(Slot slot) { return reinterpret_cast<float*>(At(slot) + sizeof(Fields)); }
  const float* data(Slot slot) const {
    return reinterpret_cast<const float*>(At(slot) + sizeof(Fields));
  }

  // Asks the CPU to fetch the slot's fields and floats for writing (kNone: nothing).
  void Prefetch(Slot slot) const {
    if (slot == kNone) return;
    const std::byte* at = At(slot);
    for (size_t line = 0; line < stride_; line += 64) __builtin_prefetch(at + line, 1);
  }

  // The row to evict next (the cache is not empty), as the header says; the caller erases it.
  Slot Victim();

  // Calls fn(slot) for every cached row, in slot order.
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (Slot s = 0; s < slots_; ++s) {
      if (fields(s).live) fn(s);
    }
  }
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (Slot s = 0; s < slots_; ++s) {
      if (fields(s).live) fn(s);
    }
  }

 private:
  struct Entry {
    Slot slot;
    uint32_t generation;
  };
  void Enqueue(Slot slot);

  std::byte* At(Slot slot) const {
    return chunks_[slot / kChunkSlots] + (slot % kChunkSlots) * stride_;
  }
  // Memory for kChunkSlots more slots, its Fields constructed.
  std::byte* NewChunk();

  const size_t stride_;  // a slot's bytes: its Fields, then its floats
  absl::flat_hash_map<uint64_t, Slot> index_;
  std::vector<std::byte*> chunks_;  // kChunkSlots slots each
  // Where the chunks are carved from: the first kHeapChunks each from the heap (a small table
  // stays small), the others from huge-page blocks (common/huge_pages.h): a step's rows are
  // random places in them.
  static constexpr size_t kHeapChunks = 16;
  std::vector<std::unique_ptr<std::byte[]>> heap_chunks_;
  std::vector<std::unique_ptr<HugeBlock>> blocks_;
  size_t block_used_ = 0;    // bytes of blocks_.back() carved into chunks
  Slot slots_ = 0;           // slots ever handed out: [0, slots_) are live or free
  std::vector<Slot> free_;   // erased slots, the last erased taken first
  std::deque<Entry> queue_;  // the rows in the order they were put or given a second chance
  size_t stale_ = 0;         // entries in queue_ of erased rows
};

}  // namespace eps
