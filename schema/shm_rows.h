// Sparse rows (SparseRowBytes) through a worker's shared-memory region (common/shm.h) instead of
// in the message: the sender copies each table's ids and values into the region and marks them
// in_shm with their offsets (PlaceRows); the receiver checks that they lie in its region, where
// they may, and points their data there (PointRows). On loopback a step's rows (a quarter of a
// megabyte at a batch of 128 over 49 ids) cost about 0.15 ms of TCP each way, a memcpy 0.02 ms.
//
// Where they go: a push's rows into the block partial's region after the partial (BlockPusher),
// a pull reply's into the region its pull names, from Pull::shm_rows_at on (after the dense
// chunks' places). Each region keeps kShmRowsBytes for them; rows that do not fit travel in the
// message as before. The region's owner writes there again only after the reply or the ack.
#pragma once

#include <cstdint>
#include <vector>

#include "common/shm.h"
#include "common/status.h"
#include "schema/messages.h"

namespace eps {

// The room a region keeps for sparse rows (its pages are taken only as rows are written there).
inline constexpr uint64_t kShmRowsBytes = uint64_t{64} << 20;

// Copies the bytes of every one of `rows` into region `base` (the sender's mapping of `ref`),
// from offset *at on, each ids and values at a 64-byte boundary, and marks them in_shm (their
// data pointing there, their owners released); *at moves past them. False, and nothing changed,
// when they do not all fit in the region.
bool PlaceRows(uint8_t* base, const ShmRegionRef& ref, uint64_t* at,
               std::vector<SparseRowBytes>* rows);

// Points the data of those of `rows` that are in_shm into region `base` (the receiver's mapping
// of `ref`): each must lie in it at or after offset `from`. InvalidArgument otherwise.
Status PointRows(const uint8_t* base, const ShmRegionRef& ref, uint64_t from,
                 std::vector<SparseRowBytes>* rows);

// Whether any of `rows` is in_shm.
bool AnyInShm(const std::vector<SparseRowBytes>& rows);

}  // namespace eps
