// A sparse table's row as its store holds it (server/sparse_table.h,
// storage/sparse_store.h): [version:i64][flags:u32][0:u32], then the weights
// and the optimizer's slots, dim floats each. Shared by the table, which writes
// and reads its rows, and by TableCheckpoint, which reads a checkpoint's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/sparse_table.h"
#include "storage/sparse_store.h"

namespace eps {

// A record's fields besides its floats.
struct RowHeader {
  int64_t version = 0;       // the version that last changed the row
  bool initialized = false;  // the optimizer has stepped the row (its slots are live)
};

struct RowRecord : RowHeader {
  std::vector<float> data;  // weights, then the slots
};

// The bytes of a record of `floats` floats.
size_t RowRecordBytes(size_t floats);
std::string EncodeRow(const RowHeader& header, const float* data, size_t floats);
std::string EncodeRow(const RowRecord& row);
// False for a record that is not one of `floats` floats (a damaged one); `data` takes `floats`.
bool DecodeRow(std::string_view record, size_t floats, RowHeader* header, float* data);
bool DecodeRow(std::string_view record, size_t floats, RowRecord* row);

// The options of the store of a table opened with `o`: its directory, table id, checkpoints kept
// and identity (SparseStoreOptions::identity: a store opened with it is that table's, of its
// width, optimizer, initializer and seed).
SparseStoreOptions StoreOptionsOf(const SparseTableOptions& o);

}  // namespace eps
