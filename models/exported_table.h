// The sparse tables an export left as table files (models/model_export.h: a
// table too large to lay out, or of unbounded keys, leaves a job as its
// stored rows), opened to read rows by id: what `elasticps predict`,
// `evaluate` and `serve` look a table up in (models/exported_model.h). A row
// the file does not hold is its initial row (common/row_init.h), computed from
// the job's seed as the shards did, so any row reads as the job left it, as
// elasticps.load_tables gives it in Python. The files are memory-mapped: a
// table of any size opens at once and holds pages only for the rows read.
// Torch-free. Thread-safe after the open (read-only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace eps {

class ExportedTable {
 public:
  // Every table file the safetensors metadata's `table_files` (its JSON:
  // name -> rows, dim, stored, table, seed, initializer, ids, values, the
  // files relative to the folder of `safetensors`) names, by tensor name.
  // InvalidArgument naming the file for metadata that is not such JSON, a
  // file outside the export's folder, an initializer other than the one
  // exports write, or an .npy file whose dtype or shape disagrees with the
  // metadata; NotFound for a missing file; DataLoss for a truncated one.
  [[nodiscard]] static StatusOr<std::map<std::string, ExportedTable>> OpenAll(
      const std::string& safetensors, const std::string& table_files);

  int64_t rows() const { return rows_; }  // 0: unbounded keys
  int64_t dim() const { return dim_; }
  uint64_t stored() const { return stored_; }  // rows the file holds

  // Rows `ids` into out[n * dim]: each stored one from the file, any other its
  // initial row. InvalidArgument for an id beyond the table (2^63 - 1 and up
  // for unbounded keys).
  [[nodiscard]] Status Read(const uint64_t* ids, size_t n, float* out) const;

 private:
  std::string name_;
  int64_t rows_ = 0, dim_ = 0;
  uint64_t stored_ = 0;
  uint64_t seed_ = 0;
  uint32_t table_ = 0;
  const uint64_t* ids_ = nullptr;  // ascending
  const float* values_ = nullptr;
  std::shared_ptr<const void> ids_hold_, values_hold_;
};

}  // namespace eps
