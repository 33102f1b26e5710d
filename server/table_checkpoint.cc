#include "server/table_checkpoint.h"

#include <string_view>
#include <utility>

#include "server/sparse_record.h"

namespace eps {

TableCheckpoint::TableCheckpoint(const SparseTableOptions& o, Step step,
                                 std::unique_ptr<SparseRowStore> store)
    : path_(o.path),
      floats_(o.dim * (1 + SparseOptimizerSlots(o.optimizer))),
      step_(step),
      store_(std::move(store)) {}

StatusOr<std::unique_ptr<TableCheckpoint>> TableCheckpoint::Open(const SparseTableOptions& o,
                                                                 Step step) {
  SparseStoreOptions so = StoreOptionsOf(o);
  so.read_only = true;
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<SparseRowStore> store, SparseRowStore::Open(so));
  return std::unique_ptr<TableCheckpoint>(new TableCheckpoint(o, step, std::move(store)));
}

StatusOr<uint64_t> TableCheckpoint::Scan(
    uint64_t from_row, uint64_t max_rows,
    const std::function<void(uint64_t row, const float* weights)>& fn) const {
  RowRecord row;
  uint64_t n = 0;
  bool full = false;  // the scan was ended here, not by the store
  const Status st = store_->ScanCheckpoint(
      step_,
      [&](uint64_t id, std::string_view record) -> Status {
        if (n == max_rows) {
          full = true;
          return Aborted("the page is full");
        }
        if (!DecodeRow(record, floats_, &row))
          return DataLoss("sparse table row " + std::to_string(id) + " is damaged in " + path_);
        fn(id, row.data.data());
        ++n;
        return OkStatus();
      },
      from_row);
  if (!full) EPS_RETURN_IF_ERROR(st);
  return n;
}

}  // namespace eps
