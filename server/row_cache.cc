#include "server/row_cache.h"

#include <cassert>
#include <new>

namespace eps {

namespace {

size_t Stride(size_t floats) {
  const size_t bytes = sizeof(RowCache::Fields) + floats * sizeof(float);
  return (bytes + alignof(RowCache::Fields) - 1) / alignof(RowCache::Fields) *
         alignof(RowCache::Fields);
}

}  // namespace

RowCache::RowCache(size_t floats) : stride_(Stride(floats)) { assert(floats >= 1); }

size_t RowCache::OverheadBytes() {
  // The index's slot (id and slot number, padded) and control byte at its maximum load of 7/8,
  // the map doubling once it is reached: up to twice that between two growths; the queue's
  // entry.
  const size_t index = 2 * (sizeof(std::pair<const uint64_t, Slot>) + 1) * 8 / 7;
  return sizeof(Fields) + index + sizeof(Entry);
}

void RowCache::FindAll(const uint64_t* ids, size_t n, Slot* out) const {
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < n && i < kAhead; ++i) index_.prefetch(ids[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index_.prefetch(ids[i + kAhead]);
    out[i] = Find(ids[i]);
  }
}

RowCache::Slot RowCache::Insert(uint64_t id) {
  Slot slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    if (slots_ % kChunkSlots == 0) chunks_.push_back(NewChunk());
    slot = slots_++;
  }
  Fields& f = fields(slot);
  const uint32_t generation = f.generation + 1;
  f = Fields{};
  f.id = id;
  f.live = true;
  f.generation = generation;
  index_.emplace(id, slot);
  Enqueue(slot);
  return slot;
}

std::byte* RowCache::NewChunk() {
  const size_t bytes = kChunkSlots * stride_;
  std::byte* chunk;
  if (heap_chunks_.size() < kHeapChunks) {
    heap_chunks_.push_back(std::make_unique<std::byte[]>(bytes));
    chunk = heap_chunks_.back().get();
  } else {
    if (blocks_.empty() || blocks_.back()->size() - block_used_ < bytes) {
      std::unique_ptr<HugeBlock> block = HugeBlock::Map(bytes);
      if (block == nullptr) throw std::bad_alloc();  // as the heap would
      blocks_.push_back(std::move(block));
      block_used_ = 0;
    }
    chunk = blocks_.back()->data() + block_used_;
    block_used_ += bytes;
  }
  for (size_t i = 0; i < kChunkSlots; ++i) new (chunk + i * stride_) Fields();
  return chunk;
}

void RowCache::Enqueue(Slot slot) {
  fields(slot).queued = true;
  queue_.push_back(Entry{slot, fields(slot).generation});
}

void RowCache::Erase(Slot slot) {
  Fields& f = fields(slot);
  index_.erase(f.id);
  f.live = false;
  free_.push_back(slot);
  if (!f.queued) return;
  // Its entry stays until it reaches the front, unless the stale ones outnumber the rows.
  if (++stale_ <= index_.size()) return;
  std::deque<Entry> live;
  for (const Entry& e : queue_) {
    const Fields& g = fields(e.slot);
    if (g.live && g.generation == e.generation) live.push_back(e);
  }
  queue_.swap(live);
  stale_ = 0;
}

void RowCache::Clear() {
  index_.clear();
  chunks_.clear();
  heap_chunks_.clear();
  blocks_.clear();
  block_used_ = 0;
  slots_ = 0;
  free_.clear();
  queue_.clear();
  stale_ = 0;
}

RowCache::Slot RowCache::Victim() {
  assert(!empty());
  for (;;) {
    const Entry e = queue_.front();
    queue_.pop_front();
    Fields& f = fields(e.slot);
    if (!f.live || f.generation != e.generation) {
      --stale_;
      continue;
    }
    if (f.used) {
      f.used = false;
      queue_.push_back(e);
      continue;
    }
    f.queued = false;
    return e.slot;
  }
}

}  // namespace eps
