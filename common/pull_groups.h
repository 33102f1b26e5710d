// How a worker cuts the transfer of a version: the bytes of gradient chunks worth a push of
// their own, and the groups its pulls ask for (PullGroupsOf). Shared by the worker
// (worker/param_client.h, worker/block_pusher.h) and the transfer benchmark (bench/ps_transfer).
#pragma once

#include <cstddef>
#include <vector>

#include "common/ids.h"
#include "common/layout.h"
#include "common/wire.h"

namespace eps {

// Bytes of ready gradient chunks worth a push of their own before backward
// ends; pulls are cut into groups of about this size too, so that a group is
// stepped, and answered, about when one of those pushes arrives.
constexpr size_t kEagerPushBytes = 256 << 10;
// At most this many pull groups per shard: a shard holds at most 64 waiting pulls of a peer
// (ShardOptions::max_waiting_pulls_per_peer) and refuses the next, so a model of more than
// kMaxPullGroups x kEagerPushBytes per shard (8 MiB) is pulled in larger groups. The rest of
// the room is for the pulls of sparse tables.
constexpr size_t kMaxPullGroups = 32;

// By shard, the chunks each pull asks for: parameter chunks in backward
// order (the layout's, reversed), cut into groups of at least
// kEagerPushBytes as the last VW's pushes are, so that a group is stepped,
// and answered, about when one of those pushes arrives, and into at most
// kMaxPullGroups - 1; then the buffer chunks, final only with VW 0's last
// push, in a group of their own. The chunks of frozen tensors (by tensor,
// `frozen`) are never pulled: the model holds their values from its creation,
// as every shard does.
std::vector<std::vector<std::vector<ChunkId>>> PullGroupsOf(const Layout& layout,
                                                            WireDType weight_wire,
                                                            const std::vector<char>& frozen);

}  // namespace eps
