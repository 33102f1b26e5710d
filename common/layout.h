// The model layout: which tensors a job trains and how they are cut into chunks
// spread over the server shards. Every process derives the same chunk map from
// the same inputs with MakeLayout, so only the tensor list travels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/shard_map.h"
#include "common/status.h"
#include "common/wire.h"

namespace eps {

enum class TensorKind : uint8_t {
  kParameter = 0,  // reduced along the tree, then updated by the optimizer
  kBuffer = 1,     // model buffer (BatchNorm stats): VW 0's value of step t becomes step t+1's
  kLoss = 2,       // one float per VW, reduced along the tree and reported, never optimized
};

enum class DType : uint8_t { kFloat32 = 0, kInt64 = 1 };

size_t DTypeSize(DType d);
const char* TensorKindName(TensorKind k);

// The bound of a table of unbounded keys' row ids (TensorSpec::RowBound): every int64 id but
// the largest is a row.
inline constexpr int64_t kUnboundedRows = INT64_MAX;

struct TensorSpec {
  std::string name;
  TensorKind kind = TensorKind::kParameter;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  // A sparse table (docs/design.md, "Sparse tables"): a float32 parameter of
  // shape [rows, dim] whose gradient names the rows a step touched. It has no
  // chunks: its rows are spread over the shards by Layout::ShardOfRow, and only the
  // rows a step touches are pushed and stepped.
  // A sparse table of shape [0, dim] has unbounded keys: any row id below
  // 2^63 - 1 (a hash of any value), the table growing with the rows a job
  // touches; only a worker that looks it up by its batches' rows can hold it.
  bool sparse = false;

  int64_t numel() const;
  bool unbounded() const { return sparse && shape.size() == 2 && shape[0] == 0; }
  // A sparse table's row ids are below this: its rows, or 2^63 - 1 unbounded.
  uint64_t RowBound() const;
  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.name == b.name && a.kind == b.kind && a.dtype == b.dtype && a.shape == b.shape &&
           a.sparse == b.sparse;
  }
};

struct Chunk {
  ChunkId id;
  uint32_t tensor = 0;  // index into Layout::tensors
  int64_t offset = 0;   // first element within the tensor
  int64_t numel = 0;
  ShardId shard;
  size_t bytes(const std::vector<TensorSpec>& tensors) const {
    return static_cast<size_t>(numel) * DTypeSize(tensors[tensor].dtype);
  }
};

struct Layout {
  std::vector<TensorSpec> tensors;  // parameters in model order, then buffers, then the loss
  std::vector<Chunk> chunks;        // by id: chunks[i].id == i
  // Who holds what (common/shard_map.h); every chunk's `shard` is its owner there.
  ShardMap map;
  uint32_t num_shards = 0;  // map.IdBound(): a vector indexed by shard id has this size
  // The sparse tables' tensor indices, in model order: a table's id is its
  // position here.
  std::vector<uint32_t> sparse;

  size_t ChunkBytes(const Chunk& c) const { return c.bytes(tensors); }
  // Bytes of chunk c in a message that carries fp32 values as `d` (other dtypes travel as stored).
  size_t WireBytes(const Chunk& c, WireDType d) const {
    return tensors[c.tensor].dtype == DType::kFloat32
               ? static_cast<size_t>(c.numel) * WireDTypeSize(d)
               : ChunkBytes(c);
  }
  std::vector<ChunkId> ChunksOf(ShardId shard) const;
  // The shard that holds row `row` of every sparse table.
  ShardId ShardOfRow(uint64_t row) const { return map.OwnerOfRow(row); }
  // Every chunk's bytes, by chunk id (what Rebalance weighs).
  std::vector<uint64_t> ChunkSizes() const;
  // Makes `m` the layout's map (InvalidArgument: not a map of this layout's chunks).
  Status SetShardMap(ShardMap m);
  int64_t NumParameters() const;  // elements of all kParameter tensors
};

// Validates the tensor list (names unique and non-empty, shapes positive, fp32
// parameters, at most one loss tensor of one element) and cuts every tensor into
// chunks of at most `chunk_elems` elements (but the sparse tables, which must
// be float32 parameters of two dimensions), spread over shards
// 0..num_shards-1 by InitialShardMap.
// At most kMaxChunks chunks (InvalidArgument beyond: chunk_elems is too small for the model).
constexpr uint64_t kMaxChunks = uint64_t{1} << 20;
StatusOr<Layout> MakeLayout(std::vector<TensorSpec> tensors, uint32_t num_shards,
                            int64_t chunk_elems);

// The loss pseudo-tensor every job carries: one float per VW.
TensorSpec LossTensor();

}  // namespace eps
