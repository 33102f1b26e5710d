// The final pull: a finished job's model version read from its shards in
// pages, for ExportModel (models/model_export.h) to digest and write as the
// pages come. No message holds more than a page, and the coordinator holds at
// most a page of chunks and a page of each table's rows per shard: a model or
// a table of any size leaves the job (docs/design.md, "Sparse tables").
//
// Chunks: the pieces are asked in layout order; a chunk not in its shard's
// page starts the shard's next page, its chunks from that one on in layout
// order, up to `page_bytes`. Rows: each shard's stored rows of a table come in
// pages from a row on (SparseRead.from_row / max_rows), ascending, and are
// merged across the shards by id; a row two shards give is DataLoss.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/layout.h"
#include "common/status.h"
#include "models/model_export.h"
#include "schema/messages.h"

namespace eps {

class FinalPull final : public ModelPieces {
 public:
  // One request to shard `shard` (a Pull at the final version), answered.
  using ShardCall = std::function<StatusOr<PullReply>(uint32_t shard, const Pull& pull)>;

  // `version`: the final one; `shards`: the map's member shards.
  FinalPull(const Layout& layout, Step version, std::vector<uint32_t> shards, ShardCall call,
            uint64_t page_bytes);

  // The shards' optimizer state digests, merged (one small request each).
  StatusOr<SetDigest> OptimizerDigest();

  StatusOr<ChunkBytes> ChunkOf(const Chunk& c) override;
  Status RowsOf(uint32_t table,
                const std::function<Status(uint64_t id, const float* values)>& row) override;

  // Requests answered, and bytes of chunks and rows they carried.
  uint64_t pages() const { return pages_; }
  uint64_t bytes() const { return bytes_; }

 private:
  // A shard's current page of chunks.
  struct ChunkPage {
    PullReply reply;
    std::map<uint32_t, size_t> index;  // chunk id -> its place in reply.chunks
  };
  // A shard's current page of a table's rows.
  struct RowPage {
    PullReply reply;  // one SparseRowBytes
    uint32_t next = 0;
    uint64_t from = 0;  // the row the next page starts at
    bool last = false;  // no page after this one
  };

  StatusOr<PullReply> Ask(uint32_t shard, const Pull& pull);
  Status NextRows(uint32_t shard, uint32_t table, RowPage* page);

  const Layout& layout_;
  const Step version_;
  const std::vector<uint32_t> shards_;
  const ShardCall call_;
  const uint64_t page_bytes_;
  std::map<uint32_t, ChunkPage> chunk_pages_;  // by shard
  uint64_t pages_ = 0, bytes_ = 0;
};

}  // namespace eps
