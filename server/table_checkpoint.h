// A sparse table's checkpoint read from its store a page at a time, for an
// export (tools/export_main.cc): held checkpoint `step` of the table at o.path,
// the rows a step changed up to it (the others are their initializer's) with
// their weights. The store is opened read-only, so a running shard is not
// disturbed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/status.h"
#include "server/sparse_table.h"
#include "storage/sparse_store.h"

namespace eps {

class TableCheckpoint {
 public:
  // NotFound: no store at o.path; FailedPrecondition: the store holds another
  // table (width, optimizer, initializer or seed differ).
  static StatusOr<std::unique_ptr<TableCheckpoint>> Open(const SparseTableOptions& o, Step step);

  // Calls fn(row, weights) for at most `max_rows` of the rows from `from_row`
  // on, in ascending row order, `weights` o.dim floats valid during the call;
  // returns how many. NotFound: `step` is not held; DataLoss: a damaged record.
  StatusOr<uint64_t> Scan(uint64_t from_row, uint64_t max_rows,
                          const std::function<void(uint64_t row, const float* weights)>& fn) const;

 private:
  TableCheckpoint(const SparseTableOptions& o, Step step, std::unique_ptr<SparseRowStore> store);

  const std::string path_;
  const size_t floats_;  // a record's: the weights and the optimizer's slots
  const Step step_;
  const std::unique_ptr<SparseRowStore> store_;
};

}  // namespace eps
