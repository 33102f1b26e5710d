// The shard map: which shard holds each dense chunk and each partition of the
// sparse tables' rows, and how a map changes when shards are added or removed
// (issue #39, docs/design.md "Elastic shards"). A value type: every process
// that holds the same map routes every chunk and row alike.
//
// Rows are not given to shards one by one: row r of every table lies in
// partition RowPartition(r) = r % kRowPartitions, and the map gives each
// partition an owner. A fixed number of partitions is what lets a new shard
// take about 1/N of the rows instead of most of them (row % N would move
// (N-1)/N of the rows when N grows by one). The first map of N shards gives
// partition p to shard p % N, which is row % N for every N dividing 4096.
//
// Shard ids need not be contiguous: a removed shard leaves a gap. A shard is
// in the map when it owns at least one partition (every shard of a map does:
// there are more partitions than shards).
#pragma once

#include <cstdint>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace eps {

constexpr uint32_t kRowPartitions = 4096;
inline uint32_t RowPartition(uint64_t row) { return static_cast<uint32_t>(row % kRowPartitions); }

struct ShardMap {
  // One more at every change; a process holding an older map must fetch the new one.
  uint64_t generation = 0;
  std::vector<ShardId> chunk_owner;      // by chunk id
  std::vector<ShardId> partition_owner;  // kRowPartitions entries

  ShardId OwnerOfRow(uint64_t row) const { return partition_owner[RowPartition(row)]; }
  // The shards of the map, ascending.
  std::vector<ShardId> Shards() const;
  // One more than the largest shard id: the size of a vector indexed by shard.
  uint32_t IdBound() const;
  // InvalidArgument unless it has `chunks` chunk owners and kRowPartitions
  // partition owners, every chunk's owner among the partitions' owners, and
  // every id below kMaxShardId.
  Status Validate(size_t chunks) const;

  friend bool operator==(const ShardMap& a, const ShardMap& b) {
    return a.generation == b.generation && a.chunk_owner == b.chunk_owner &&
           a.partition_owner == b.partition_owner;
  }
};

// Shard ids are below this (a vector indexed by shard stays small).
constexpr uint32_t kMaxShardId = 1024;

// The first map of shards 0..num_shards-1 (generation 0): every chunk to the
// shard with the fewest bytes so far in chunk order (lowest id on ties), as
// MakeLayout always did, and partition p to shard p % num_shards.
ShardMap InitialShardMap(const std::vector<uint64_t>& chunk_bytes, uint32_t num_shards);

// What moves from one map to another.
struct ShardMoves {
  std::vector<ChunkId> chunks;       // chunks whose owner changes
  std::vector<uint32_t> partitions;  // partitions whose owner changes
  uint64_t chunk_bytes = 0;          // the moved chunks' bytes (their values; the
                                     // optimizer's slots move with them)
};
ShardMoves MovesBetween(const ShardMap& from, const ShardMap& to,
                        const std::vector<uint64_t>& chunk_bytes);

// The map (generation from.generation + 1) over `shards` (distinct ids below
// kMaxShardId, at least one, in any order) that keeps as much of `from` where
// it is as balance allows. The chunks and partitions of shards that leave, and
// those a shard holds beyond its fair share (bytes over the shards for chunks,
// a count for partitions) once moving one would bring it closer to that share,
// go, largest first, to the shard with the fewest bytes (partitions: the
// fewest partitions), lowest id on ties. Adding one shard to N moves about
// 1/(N+1) of the state; removing one moves what it held. A pure function of
// its arguments: every process that computes it gets the same map.
StatusOr<ShardMap> Rebalance(const ShardMap& from, const std::vector<uint64_t>& chunk_bytes,
                             std::vector<ShardId> shards);

}  // namespace eps
