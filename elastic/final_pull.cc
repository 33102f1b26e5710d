#include "elastic/final_pull.h"

#include <algorithm>
#include <utility>

#include "schema/shm_rows.h"

namespace eps {

FinalPull::FinalPull(const Layout& layout, Step version, std::vector<uint32_t> shards,
                     ShardCall call, uint64_t page_bytes)
    : layout_(layout),
      version_(version),
      shards_(std::move(shards)),
      call_(std::move(call)),
      page_bytes_(std::max<uint64_t>(1, page_bytes)) {}

StatusOr<PullReply> FinalPull::Ask(uint32_t shard, const Pull& pull) {
  StatusOr<PullReply> reply = call_(shard, pull);
  if (!reply.ok())
    return reply.status().WithContext("the final pull from shard " + std::to_string(shard));
  // It names no shared memory: bytes anywhere but in the message are a confused shard's.
  if (!reply->shm_chunks.empty() || AnyInShm(reply->sparse))
    return ProtocolError("shard " + std::to_string(shard) +
                         " answered the final pull into shared memory it did not name");
  ++pages_;
  for (const ChunkBytes& c : reply->chunks) bytes_ += c.size;
  for (const SparseRowBytes& r : reply->sparse) bytes_ += r.ids.size + r.values.size;
  return reply;
}

StatusOr<SetDigest> FinalPull::OptimizerDigest() {
  SetDigest all;
  for (uint32_t s : shards_) {
    // With the shard's first chunk, or with none for a shard holding only rows (a pull naming
    // no chunk names them all: none then).
    Pull pull{version_, {}};
    pull.optimizer_digest = true;
    const std::vector<ChunkId> mine = layout_.ChunksOf(ShardId(s));
    if (!mine.empty()) pull.chunks.push_back(mine.front());
    EPS_ASSIGN_OR_RETURN(PullReply reply, Ask(s, pull));
    auto digest = SetDigest::FromBytes(reply.optimizer_digest);
    if (!digest.ok())
      return digest.status().WithContext("shard " + std::to_string(s) + "'s optimizer digest");
    all.Merge(*digest);
  }
  return all;
}

StatusOr<ChunkBytes> FinalPull::ChunkOf(const Chunk& c) {
  const uint32_t s = c.shard.value();
  ChunkPage& page = chunk_pages_[s];
  auto at = page.index.find(c.id.value());
  if (at == page.index.end()) {
    // The shard's next page: its chunks from this one on, in layout order.
    Pull pull{version_, {}};
    uint64_t bytes = 0;
    for (size_t i = c.id.value(); i < layout_.chunks.size() && bytes < page_bytes_; ++i) {
      const Chunk& next = layout_.chunks[i];
      if (next.shard != c.shard) continue;
      pull.chunks.push_back(next.id);
      bytes += layout_.ChunkBytes(next);
    }
    page = ChunkPage{};
    EPS_ASSIGN_OR_RETURN(page.reply, Ask(s, pull));
    for (size_t k = 0; k < page.reply.chunks.size(); ++k)
      page.index[page.reply.chunks[k].chunk.value()] = k;
    at = page.index.find(c.id.value());
    if (at == page.index.end()) {
      return DataLoss("shard " + std::to_string(s) + " did not give chunk " +
                      std::to_string(c.id.value()) + " in the final pull");
    }
  }
  return page.reply.chunks[at->second];
}

Status FinalPull::NextRows(uint32_t shard, uint32_t table, RowPage* page) {
  const TensorSpec& spec = layout_.tensors[layout_.sparse[table]];
  const uint64_t dim = static_cast<uint64_t>(spec.shape[1]);
  const uint64_t row_bytes = sizeof(uint64_t) + dim * sizeof(float);
  const uint32_t max_rows =
      static_cast<uint32_t>(std::clamp<uint64_t>(page_bytes_ / row_bytes, 1, UINT32_MAX));
  Pull pull{version_, {}};
  SparseRead read{table, Step(-1)};  // every stored row, the ones --init_from seeded too
  read.from_row = page->from;
  read.max_rows = max_rows;
  pull.sparse.push_back(read);
  EPS_ASSIGN_OR_RETURN(page->reply, Ask(shard, pull));
  if (page->reply.sparse.size() != 1 || page->reply.sparse[0].table != table)
    return ProtocolError("shard " + std::to_string(shard) + " answered a page of rows otherwise");
  const SparseRowBytes& r = page->reply.sparse[0];
  if (r.rows > max_rows || r.ids.size != uint64_t{r.rows} * sizeof(uint64_t) ||
      r.values.size != uint64_t{r.rows} * dim * sizeof(float)) {
    return ProtocolError("shard " + std::to_string(shard) + " gave a page of rows of '" +
                         spec.name + "' of the wrong size");
  }
  const auto* ids = static_cast<const uint64_t*>(r.ids.data);
  for (uint32_t k = 0; k < r.rows; ++k) {
    if (ids[k] < page->from || (k > 0 && ids[k] <= ids[k - 1])) {
      return ProtocolError("shard " + std::to_string(shard) + " gave rows of '" + spec.name +
                           "' out of order");
    }
  }
  page->next = 0;
  page->last = r.rows < max_rows;
  if (r.rows > 0) page->from = ids[r.rows - 1] + 1;
  page->last = page->last || (r.rows > 0 && ids[r.rows - 1] == UINT64_MAX);
  return OkStatus();
}

Status FinalPull::RowsOf(uint32_t table,
                         const std::function<Status(uint64_t id, const float* values)>& row) {
  if (table >= layout_.sparse.size()) return InvalidArgument("no such sparse table");
  const uint64_t dim = static_cast<uint64_t>(layout_.tensors[layout_.sparse[table]].shape[1]);
  std::vector<RowPage> pages(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    EPS_RETURN_IF_ERROR(NextRows(shards_[i], table, &pages[i]));
  while (true) {
    // The least row at the head of a shard's page, refilled as pages run out.
    size_t best = pages.size();
    uint64_t least = 0;
    for (size_t i = 0; i < pages.size(); ++i) {
      RowPage& p = pages[i];
      while (p.next == p.reply.sparse[0].rows && !p.last)
        EPS_RETURN_IF_ERROR(NextRows(shards_[i], table, &p));
      if (p.next == p.reply.sparse[0].rows) continue;  // this shard is done
      const uint64_t id = static_cast<const uint64_t*>(p.reply.sparse[0].ids.data)[p.next];
      if (best < pages.size() && id == least) {
        return DataLoss("row " + std::to_string(id) + " of sparse table '" +
                        layout_.tensors[layout_.sparse[table]].name + "' came from shards " +
                        std::to_string(shards_[best]) + " and " + std::to_string(shards_[i]));
      }
      if (best == pages.size() || id < least) {
        best = i;
        least = id;
      }
    }
    if (best == pages.size()) return OkStatus();
    RowPage& p = pages[best];
    const auto* values = static_cast<const float*>(p.reply.sparse[0].values.data);
    EPS_RETURN_IF_ERROR(row(least, values + uint64_t{p.next} * dim));
    ++p.next;
  }
}

}  // namespace eps
