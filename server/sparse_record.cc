#include "server/sparse_record.h"

#include <cstdio>
#include <cstring>

namespace eps {
namespace {

constexpr size_t kHeader = 16;
constexpr uint32_t kInitialized = 1;

}  // namespace

size_t RowRecordBytes(size_t floats) { return kHeader + floats * sizeof(float); }

std::string EncodeRow(const RowRecord& row) {
  std::string r(RowRecordBytes(row.data.size()), '\0');
  const uint32_t flags = row.initialized ? kInitialized : 0;
  std::memcpy(&r[0], &row.version, 8);
  std::memcpy(&r[8], &flags, 4);
  std::memcpy(&r[kHeader], row.data.data(), row.data.size() * sizeof(float));
  return r;
}

bool DecodeRow(std::string_view r, size_t floats, RowRecord* row) {
  if (r.size() != RowRecordBytes(floats)) return false;
  uint32_t flags = 0, pad = 0;
  std::memcpy(&row->version, &r[0], 8);
  std::memcpy(&flags, &r[8], 4);
  std::memcpy(&pad, &r[12], 4);
  if ((flags & ~kInitialized) != 0 || pad != 0 || row->version < 0) return false;
  row->initialized = (flags & kInitialized) != 0;
  row->data.resize(floats);
  std::memcpy(row->data.data(), &r[kHeader], floats * sizeof(float));
  return true;
}

SparseStoreOptions StoreOptionsOf(const SparseTableOptions& o) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "dim=%zu slots=%d optimizer=%d init=%d %.17g %.17g %.17g %.17g seed=%llu", o.dim,
                SparseOptimizerSlots(o.optimizer), static_cast<int>(o.optimizer.kind),
                static_cast<int>(o.init.kind), o.init.mean, o.init.stddev, o.init.low, o.init.high,
                static_cast<unsigned long long>(o.seed));
  SparseStoreOptions so;
  so.path = o.path;
  so.table_id = o.table_id;
  so.identity = buf;
  so.keep_checkpoints = o.keep_checkpoints;
  return so;
}

}  // namespace eps
