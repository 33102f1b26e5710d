#include "server/sparse_record.h"

#include <cstdio>
#include <cstring>

namespace eps {
namespace {

constexpr size_t kHeader = 16;
constexpr uint32_t kInitialized = 1;

}  // namespace

size_t RowRecordBytes(size_t floats) { return kHeader + floats * sizeof(float); }

std::string EncodeRow(const RowHeader& header, const float* data, size_t floats) {
  std::string r(RowRecordBytes(floats), '\0');
  const uint32_t flags = header.initialized ? kInitialized : 0;
  std::memcpy(&r[0], &header.version, 8);
  std::memcpy(&r[8], &flags, 4);
  std::memcpy(&r[kHeader], data, floats * sizeof(float));
  return r;
}

std::string EncodeRow(const RowRecord& row) {
  return EncodeRow(row, row.data.data(), row.data.size());
}

bool DecodeRow(std::string_view r, size_t floats, RowHeader* header, float* data) {
  if (r.size() != RowRecordBytes(floats)) return false;
  int64_t version = 0;
  uint32_t flags = 0, pad = 0;
  std::memcpy(&version, &r[0], 8);
  std::memcpy(&flags, &r[8], 4);
  std::memcpy(&pad, &r[12], 4);
  if ((flags & ~kInitialized) != 0 || pad != 0 || version < 0) return false;
  header->version = version;
  header->initialized = (flags & kInitialized) != 0;
  std::memcpy(data, &r[kHeader], floats * sizeof(float));
  return true;
}

bool DecodeRow(std::string_view r, size_t floats, RowRecord* row) {
  if (r.size() != RowRecordBytes(floats)) return false;
  row->data.resize(floats);
  return DecodeRow(r, floats, row, row->data.data());
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
