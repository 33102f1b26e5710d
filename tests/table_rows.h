// The reference the tests hold the final pull's merged pages to (elastic/final_pull.h): every
// shard's whole reply of a table's stored rows, gathered, then sorted by id.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "models/model_export.h"

namespace eps {

// Adds a shard's pulled rows of every sparse table (SparseRead since -1: every stored row) to
// `tables`; SortTableRows once every shard's are in. ProtocolError for rows that do not fit the
// layout.
inline Status AddTableRows(const Layout& layout, const std::vector<SparseRowBytes>& rows,
                           ModelTables* tables) {
  for (const SparseRowBytes& r : rows) {
    if (r.table >= layout.sparse.size()) return ProtocolError("rows of an unknown sparse table");
    const uint32_t i = layout.sparse[r.table];
    const TensorSpec& spec = layout.tensors[i];
    const uint64_t n = static_cast<uint64_t>(spec.shape[0]),
                   dim = static_cast<uint64_t>(spec.shape[1]);
    if (r.values.size != uint64_t{r.rows} * dim * sizeof(float) ||
        r.ids.size != uint64_t{r.rows} * sizeof(uint64_t))
      return ProtocolError("rows of sparse table '" + spec.name + "' of the wrong size");
    StoredRows& table = (*tables)[i];
    const size_t first = table.ids.size();
    table.ids.resize(first + r.rows);
    if (r.rows > 0) std::memcpy(&table.ids[first], r.ids.data, r.ids.size);
    for (size_t k = first; k < table.ids.size(); ++k) {
      if (table.ids[k] >= n)
        return ProtocolError("row " + std::to_string(table.ids[k]) + " beyond '" + spec.name + "'");
    }
    const auto* values = static_cast<const float*>(r.values.data);
    table.values.insert(table.values.end(), values, values + r.rows * dim);
  }
  return OkStatus();
}

// Puts every table's rows in ascending order; DataLoss for a row two shards hold.
inline Status SortTableRows(const Layout& layout, ModelTables* tables) {
  for (auto& entry : *tables) {  // not a structured binding: the lambda below captures `table`
    const uint32_t tensor = entry.first;
    StoredRows& table = entry.second;
    const size_t dim = static_cast<size_t>(layout.tensors[tensor].shape[1]);
    std::vector<size_t> order(table.ids.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return table.ids[a] < table.ids[b]; });
    StoredRows sorted;
    sorted.ids.reserve(order.size());
    sorted.values.reserve(table.values.size());
    for (size_t k : order) {
      if (!sorted.ids.empty() && sorted.ids.back() == table.ids[k]) {
        return DataLoss("row " + std::to_string(table.ids[k]) + " of sparse table '" +
                        layout.tensors[tensor].name + "' came twice");
      }
      sorted.ids.push_back(table.ids[k]);
      sorted.values.insert(sorted.values.end(), &table.values[k * dim],
                           &table.values[k * dim] + dim);
    }
    table = std::move(sorted);
  }
  return OkStatus();
}

}  // namespace eps
