#include "common/shard_map.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>

namespace eps {

std::vector<ShardId> ShardMap::Shards() const {
  std::set<ShardId> s(partition_owner.begin(), partition_owner.end());
  return {s.begin(), s.end()};
}

uint32_t ShardMap::IdBound() const {
  uint32_t bound = 0;
  for (ShardId s : partition_owner) bound = std::max(bound, s.value() + 1);
  return bound;
}

Status ShardMap::Validate(size_t chunks) const {
  if (chunk_owner.size() != chunks || partition_owner.size() != kRowPartitions) {
    return InvalidArgument("a shard map of " + std::to_string(chunk_owner.size()) + " chunks and " +
                           std::to_string(partition_owner.size()) + " row partitions, not " +
                           std::to_string(chunks) + " and " + std::to_string(kRowPartitions));
  }
  std::vector<bool> member(kMaxShardId, false);
  for (ShardId s : partition_owner) {
    if (s.value() >= kMaxShardId) {
      return InvalidArgument("shard id " + std::to_string(s.value()) + " is not below " +
                             std::to_string(kMaxShardId));
    }
    member[s.value()] = true;
  }
  for (ShardId s : chunk_owner) {
    if (s.value() >= kMaxShardId || !member[s.value()]) {
      return InvalidArgument("a chunk's owner, shard " + std::to_string(s.value()) +
                             ", owns no row partition");
    }
  }
  return OkStatus();
}

ShardMap InitialShardMap(const std::vector<uint64_t>& chunk_bytes, uint32_t num_shards) {
  ShardMap map;
  std::vector<uint64_t> load(num_shards, 0);
  map.chunk_owner.reserve(chunk_bytes.size());
  for (uint64_t bytes : chunk_bytes) {
    uint32_t best = 0;
    for (uint32_t s = 1; s < num_shards; ++s) {
      if (load[s] < load[best]) best = s;
    }
    map.chunk_owner.push_back(ShardId(best));
    load[best] += bytes;
  }
  map.partition_owner.resize(kRowPartitions);
  for (uint32_t p = 0; p < kRowPartitions; ++p) map.partition_owner[p] = ShardId(p % num_shards);
  return map;
}

ShardMoves MovesBetween(const ShardMap& from, const ShardMap& to,
                        const std::vector<uint64_t>& chunk_bytes) {
  ShardMoves moves;
  for (size_t c = 0; c < from.chunk_owner.size() && c < to.chunk_owner.size(); ++c) {
    if (from.chunk_owner[c] != to.chunk_owner[c]) {
      moves.chunks.push_back(ChunkId(static_cast<uint32_t>(c)));
      moves.chunk_bytes += chunk_bytes[c];
    }
  }
  for (uint32_t p = 0; p < kRowPartitions; ++p) {
    if (from.partition_owner[p] != to.partition_owner[p]) moves.partitions.push_back(p);
  }
  return moves;
}

namespace {

// Spreads items of the given weights over the shards of `share` (what each
// should hold), keeping each item where `owner` has it unless its shard leaves
// or holds more than its share by at least the item's weight (heaviest items
// go first, of equal weights the last index). The items that go are given,
// heaviest first (lowest index on ties), to the shard furthest below its share
// (lowest id on ties). A shard never drops below its share, so what moves
// goes where room is. `owner` is updated in place.
void Balance(const std::vector<uint64_t>& weight, const std::map<ShardId, double>& share,
             std::vector<ShardId>* owner) {
  std::map<ShardId, double> load;
  std::map<ShardId, std::vector<size_t>> held;
  for (const auto& [s, x] : share) load[s] = 0;
  std::vector<size_t> pool;
  for (size_t i = 0; i < owner->size(); ++i) {
    auto it = load.find((*owner)[i]);
    if (it == load.end()) {
      pool.push_back(i);
      continue;
    }
    it->second += static_cast<double>(weight[i]);
    held[it->first].push_back(i);
  }
  for (auto& [shard, items] : held) {
    std::sort(items.begin(), items.end(), [&](size_t a, size_t b) {
      return weight[a] != weight[b] ? weight[a] > weight[b] : a > b;
    });
    double& l = load[shard];
    for (size_t i : items) {
      if (l - static_cast<double>(weight[i]) >= share.at(shard)) {
        pool.push_back(i);
        l -= static_cast<double>(weight[i]);
      }
    }
  }
  std::sort(pool.begin(), pool.end(), [&](size_t a, size_t b) {
    return weight[a] != weight[b] ? weight[a] > weight[b] : a < b;
  });
  for (size_t i : pool) {
    auto best = load.begin();
    for (auto it = load.begin(); it != load.end(); ++it) {
      if (it->second - share.at(it->first) < best->second - share.at(best->first)) best = it;
    }
    (*owner)[i] = best->first;
    best->second += static_cast<double>(weight[i]);
  }
}

}  // namespace

StatusOr<ShardMap> Rebalance(const ShardMap& from, const std::vector<uint64_t>& chunk_bytes,
                             std::vector<ShardId> shards) {
  EPS_RETURN_IF_ERROR(from.Validate(chunk_bytes.size()));
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) return InvalidArgument("a shard map needs at least one shard");
  if (auto twice = std::adjacent_find(shards.begin(), shards.end()); twice != shards.end()) {
    return InvalidArgument("shard " + std::to_string(twice->value()) + " is named twice");
  }
  if (shards.back().value() >= kMaxShardId) {
    return InvalidArgument("shard id " + std::to_string(shards.back().value()) + " is not below " +
                           std::to_string(kMaxShardId));
  }
  ShardMap to = from;
  to.generation = from.generation + 1;
  // Chunks: an equal share of the bytes each.
  const double bytes =
      static_cast<double>(std::accumulate(chunk_bytes.begin(), chunk_bytes.end(), uint64_t{0}));
  std::map<ShardId, double> share;
  for (ShardId s : shards) share[s] = bytes / static_cast<double>(shards.size());
  Balance(chunk_bytes, share, &to.chunk_owner);
  // Partitions: whole numbers, q or q + 1 each; the r shards that hold the most
  // now (lowest ids on ties) keep one more.
  const uint32_t q = kRowPartitions / static_cast<uint32_t>(shards.size());
  const uint32_t r = kRowPartitions % static_cast<uint32_t>(shards.size());
  std::map<ShardId, uint32_t> held;
  for (ShardId s : from.partition_owner) ++held[s];
  std::vector<ShardId> by_held = shards;
  std::stable_sort(by_held.begin(), by_held.end(),
                   [&](ShardId a, ShardId b) { return held[a] > held[b]; });
  for (size_t i = 0; i < by_held.size(); ++i) share[by_held[i]] = q + (i < r ? 1 : 0);
  Balance(std::vector<uint64_t>(kRowPartitions, 1), share, &to.partition_owner);
  return to;
}

}  // namespace eps
