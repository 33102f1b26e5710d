// One NPY array (numpy.save) mapped read-only, as its header describes it:
// what the table files of an export (models/exported_table.h) are read
// through. The data sets' NPY reader (ReadNpyDataset, data/dataset.h) parses
// the same headers. Thread-safe after the open (read-only memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

struct NpyArrayView {
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;     // C order, the shape's elements
  std::shared_ptr<const void> hold;  // the mapping: `data` lives as long as it
};

// Maps the NPY file `path` whose elements are `descr` ("<u8", "<f4", ...) of
// `item_size` bytes. An array of 0 elements has `data` past its header.
//   NotFound         no such file.
//   InvalidArgument  not an NPY file, another dtype, fortran_order, or more
//                    bytes than the shape needs; naming the file.
//   DataLoss         fewer bytes than the shape needs.
[[nodiscard]] StatusOr<NpyArrayView> MapNpyArray(const std::string& path, const std::string& descr,
                                                 size_t item_size);

}  // namespace eps
