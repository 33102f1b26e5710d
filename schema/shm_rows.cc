#include "schema/shm_rows.h"

#include <algorithm>
#include <cstring>

namespace eps {

bool PlaceRows(uint8_t* base, const ShmRegionRef& ref, uint64_t* at,
               std::vector<SparseRowBytes>* rows) {
  // Where each goes, before anything is copied: all or none.
  std::vector<uint64_t> offsets;
  offsets.reserve(2 * rows->size());
  uint64_t end = std::max<uint64_t>(*at, ShmRegion::kHeaderBytes);
  for (const SparseRowBytes& r : *rows) {
    for (const ChunkBytes* part : {&r.ids, &r.values}) {
      const uint64_t offset = Aligned(end);
      if (offset < end || !ref.Holds(offset, part->size)) return false;
      offsets.push_back(offset);
      end = offset + part->size;
    }
  }
  for (size_t i = 0; i < rows->size(); ++i) {
    SparseRowBytes& r = (*rows)[i];
    r.ids_offset = offsets[2 * i];
    r.values_offset = offsets[2 * i + 1];
    for (auto [part, offset] : {std::pair{&r.ids, r.ids_offset}, {&r.values, r.values_offset}}) {
      if (part->size > 0) std::memcpy(base + offset, part->data, part->size);
      part->data = base + offset;
      part->owner.reset();
    }
    r.in_shm = true;
  }
  *at = end;
  return true;
}

Status PointRows(const uint8_t* base, const ShmRegionRef& ref, uint64_t from,
                 std::vector<SparseRowBytes>* rows) {
  for (SparseRowBytes& r : *rows) {
    if (!r.in_shm) continue;
    if (r.ids_offset < from || r.values_offset < from || !ref.Holds(r.ids_offset, r.ids.size) ||
        !ref.Holds(r.values_offset, r.values.size)) {
      return InvalidArgument("sparse rows of table " + std::to_string(r.table) +
                             " lie outside the shared-memory region's room for them");
    }
    r.ids.data = base + r.ids_offset;
    r.values.data = base + r.values_offset;
  }
  return OkStatus();
}

bool AnyInShm(const std::vector<SparseRowBytes>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const SparseRowBytes& r) { return r.in_shm; });
}

}  // namespace eps
