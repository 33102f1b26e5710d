#include "common/layout.h"

#include <set>

namespace eps {

size_t DTypeSize(DType d) { return d == DType::kInt64 ? 8 : 4; }

const char* TensorKindName(TensorKind k) {
  switch (k) {
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kBuffer:
      return "buffer";
    case TensorKind::kLoss:
      return "loss";
  }
  return "unknown";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t TensorSpec::RowBound() const {
  if (unbounded()) return uint64_t{kUnboundedRows};
  return shape.empty() ? 0 : static_cast<uint64_t>(shape[0]);
}

TensorSpec LossTensor() { return {"__loss__", TensorKind::kLoss, DType::kFloat32, {1}}; }

std::vector<ChunkId> Layout::ChunksOf(ShardId shard) const {
  std::vector<ChunkId> out;
  for (const Chunk& c : chunks) {
    if (c.shard == shard) out.push_back(c.id);
  }
  return out;
}

std::vector<uint64_t> Layout::ChunkSizes() const {
  std::vector<uint64_t> out;
  out.reserve(chunks.size());
  for (const Chunk& c : chunks) out.push_back(ChunkBytes(c));
  return out;
}

Status Layout::SetShardMap(ShardMap m) {
  EPS_RETURN_IF_ERROR(m.Validate(chunks.size()));
  for (Chunk& c : chunks) c.shard = m.chunk_owner[c.id.value()];
  num_shards = m.IdBound();
  map = std::move(m);
  return OkStatus();
}

int64_t Layout::NumParameters() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) {
    if (t.kind == TensorKind::kParameter) n += t.numel();
  }
  return n;
}

StatusOr<Layout> MakeLayout(std::vector<TensorSpec> tensors, uint32_t num_shards,
                            int64_t chunk_elems) {
  if (num_shards == 0) return InvalidArgument("a layout needs at least one shard");
  if (chunk_elems <= 0) return InvalidArgument("chunk_elems must be positive");
  if (tensors.empty()) return InvalidArgument("a model needs at least one tensor");
  constexpr int64_t kMaxElems = int64_t{1} << 40;
  std::set<std::string> names;
  int losses = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty() || !names.insert(t.name).second) {
      return InvalidArgument("tensor name '" + t.name + "' is empty or repeated");
    }
    if (t.shape.size() > 8)
      return InvalidArgument("tensor " + t.name + " has more than 8 dimensions");
    int64_t n = 1;
    for (size_t k = 0; k < t.shape.size(); ++k) {
      const int64_t d = t.shape[k];
      if (d == 0 && k == 0 && t.sparse) continue;  // a table of unbounded keys
      if (d <= 0 || d > kMaxElems || n > kMaxElems / d) {
        return InvalidArgument("tensor " + t.name + " has an invalid shape");
      }
      n *= d;
    }
    if (t.kind == TensorKind::kParameter && t.dtype != DType::kFloat32) {
      return InvalidArgument("parameter " + t.name + " is not float32");
    }
    if (t.sparse && (t.kind != TensorKind::kParameter || t.shape.size() != 2)) {
      return InvalidArgument("sparse table " + t.name + " is not a parameter of shape [rows, dim]");
    }
    if (t.kind == TensorKind::kLoss && (++losses > 1 || n != 1 || t.dtype != DType::kFloat32)) {
      return InvalidArgument("a layout holds at most one float32 loss tensor of one element");
    }
  }
  // Chunk ids are 32-bit, and every message that lists a shard's chunks (a
  // pull of all of them, a checkpoint) holds at most the codec's 2^20 list
  // entries: a model reported with huge shapes is refused here instead of
  // cutting billions of chunks (found by fuzz/job_state_fuzz.cc).
  uint64_t chunks = 0;
  for (const TensorSpec& t : tensors) {
    if (!t.sparse) chunks += static_cast<uint64_t>((t.numel() - 1) / chunk_elems + 1);
  }
  if (chunks > kMaxChunks) {
    return InvalidArgument("the model has " + std::to_string(chunks) + " chunks of " +
                           std::to_string(chunk_elems) + " elements, more than " +
                           std::to_string(kMaxChunks) + ": raise chunk_elems");
  }
  Layout layout;
  layout.tensors = std::move(tensors);
  for (uint32_t ti = 0; ti < layout.tensors.size(); ++ti) {
    const TensorSpec& t = layout.tensors[ti];
    if (t.sparse) {
      layout.sparse.push_back(ti);
      continue;
    }
    const int64_t n = t.numel();
    for (int64_t off = 0; off < n; off += chunk_elems) {
      Chunk c;
      c.id = ChunkId(static_cast<uint32_t>(layout.chunks.size()));
      c.tensor = ti;
      c.offset = off;
      c.numel = std::min(chunk_elems, n - off);
      layout.chunks.push_back(c);
    }
  }
  if (num_shards > kMaxShardId) {
    return InvalidArgument("a layout of " + std::to_string(num_shards) + " shards: at most " +
                           std::to_string(kMaxShardId));
  }
  EPS_RETURN_IF_ERROR(layout.SetShardMap(InitialShardMap(layout.ChunkSizes(), num_shards)));
  return layout;
}

}  // namespace eps
