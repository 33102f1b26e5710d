// Sparse tables' rows and reads in messages (schema/codec_internal.h).
#include "schema/codec_internal.h"

namespace eps {
namespace codec_internal {

void SetSparseRows(capnp::List<wire::SparseRowsRef>::Builder out,
                   const std::vector<SparseRowBytes>& rows, std::vector<Frame>* frames) {
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i].setTable(rows[i].table);
    out[i].setRows(rows[i].rows);
    if (rows[i].in_shm) {
      out[i].setInShm(true);
      out[i].setIdsOffset(rows[i].ids_offset);
      out[i].setValuesOffset(rows[i].values_offset);
      out[i].setValuesBytes(rows[i].values.size);
      continue;
    }
    out[i].setIdsFrame(static_cast<uint32_t>(frames->size() - 1));
    frames->push_back({rows[i].ids.data, rows[i].ids.size, rows[i].ids.owner});
    out[i].setValuesFrame(static_cast<uint32_t>(frames->size() - 1));
    frames->push_back({rows[i].values.data, rows[i].values.size, rows[i].values.owner});
  }
}

void SetSparseReads(capnp::List<wire::SparseRead>::Builder out,
                    const std::vector<SparseRead>& reads, std::vector<Frame>* frames) {
  for (size_t i = 0; i < reads.size(); ++i) {
    out[i].setTable(reads[i].table);
    out[i].setSince(reads[i].since.value());
    out[i].setFromRow(reads[i].from_row);
    out[i].setMaxRows(reads[i].max_rows);
    if (!reads[i].lookup && reads[i].rows == 0) continue;
    out[i].setLookup(reads[i].lookup);
    out[i].setRows(reads[i].rows);
    out[i].setIdsFrame(static_cast<uint32_t>(frames->size() - 1));
    frames->push_back({reads[i].ids.data, reads[i].ids.size, reads[i].ids.owner});
  }
}

}  // namespace codec_internal
}  // namespace eps
