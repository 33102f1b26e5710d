// The shard's side of shared memory: pull replies moved into a worker's region and pushes read
// from one (MoveIntoShm, ResolveShm: server/shard_state.h).
#include <cstring>

#include "schema/shm_rows.h"
#include "server/shard_state.h"

namespace eps {

Status MoveIntoShm(const Pull& pull, ShmMappings* maps, PullReply* reply) {
  if (!pull.shm.has_value()) return FailedPrecondition("the pull names no shared memory");
  // HandlePull answers the chunks a pull names in the order it names them: the i-th goes to the
  // i-th offset.
  if (pull.shm_offsets.size() != reply->chunks.size())
    return InvalidArgument("one shared-memory offset per chunk");
  for (size_t i = 0; i < reply->chunks.size(); ++i) {
    const ChunkBytes& cb = reply->chunks[i];
    if (!pull.shm->Holds(pull.shm_offsets[i], cb.size)) {
      return InvalidArgument("chunk " + std::to_string(cb.chunk.value()) +
                             " does not fit in the shared-memory region");
    }
  }
  EPS_ASSIGN_OR_RETURN(uint8_t * region, maps->Map(*pull.shm));
  uint64_t rows_at = pull.shm_rows_at;
  if (rows_at != 0 && !PlaceRows(region, *pull.shm, &rows_at, &reply->sparse))
    return ResourceExhausted("the sparse rows do not fit in the region's room for them");
  reply->shm_chunks.clear();
  for (size_t i = 0; i < reply->chunks.size(); ++i) {
    const ChunkBytes& cb = reply->chunks[i];
    std::memcpy(region + pull.shm_offsets[i], cb.data, cb.size);
    reply->shm_chunks.push_back({cb.chunk, pull.shm_offsets[i], cb.size});
  }
  reply->chunks.clear();
  return OkStatus();
}

Status ResolveShm(ShmMappings* maps, Push* push) {
  if (push->shm_chunks.empty() && !AnyInShm(push->sparse)) return OkStatus();
  if (!push->shm.has_value())
    return InvalidArgument("shared-memory chunks or rows in a push without a region");
  for (const ShmChunk& c : push->shm_chunks) {
    if (!push->shm->Holds(c.offset, c.size)) {
      return InvalidArgument("chunk " + std::to_string(c.chunk.value()) +
                             " lies outside the shared-memory region");
    }
  }
  // A region this shard cannot map is no fault of the push: the worker pushes another way.
  StatusOr<uint8_t*> region = maps->Map(*push->shm);
  if (!region.ok()) return Unimplemented(region.status().message());
  EPS_RETURN_IF_ERROR(PointRows(*region, *push->shm, ShmRegion::kHeaderBytes, &push->sparse));
  for (const ShmChunk& c : push->shm_chunks)
    push->chunks.push_back({c.chunk, *region + c.offset, c.size, nullptr});
  push->shm_chunks.clear();
  return OkStatus();
}

}  // namespace eps
