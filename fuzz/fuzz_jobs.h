// The small jobs the stateful fuzz targets run against, shared with the corpus
// writer so that its seeds are real messages of those jobs. Header-only.
#pragma once

#include <memory>
#include <vector>

#include "common/layout.h"
#include "schema/messages.h"

namespace eps {
namespace fuzz {

constexpr uint32_t kVws = 3;  // not a power of two: the tree has absent leaves

inline JobSpec FuzzSpec() {
  JobSpec s;
  s.job_id = "fuzz";
  s.model = "tiny";
  s.virtual_workers = kVws;
  s.batch_per_vw = 2;
  s.steps = 4;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = 0.1;
  s.chunk_elems = 4;
  s.num_shards = 1;
  return s;
}

inline std::vector<TensorSpec> FuzzTensors() {
  return {{"w", TensorKind::kParameter, DType::kFloat32, {3, 3}},
          {"bn", TensorKind::kBuffer, DType::kFloat32, {2}},
          {"nb", TensorKind::kBuffer, DType::kInt64, {1}},
          LossTensor()};
}

// A chunk of `bytes` bytes, every float of it `value`.
inline ChunkBytes FilledChunk(ChunkId id, size_t bytes, float value) {
  auto v = std::make_shared<std::vector<float>>((bytes + 3) / 4, value);
  return ChunkBytes{id, v->data(), bytes, v};
}

// The initial values of every chunk of shard 0 (the loss has none).
inline Push InitPush(const Layout& layout) {
  Push p{Epoch(0), Step(-1), Block{0, 1}, {}};
  for (const Chunk& c : layout.chunks) {
    if (layout.tensors[c.tensor].kind == TensorKind::kLoss) continue;
    p.chunks.push_back(FilledChunk(c.id, layout.ChunkBytes(c), 0.5f));
  }
  return p;
}

// Block `block` of step `step`: every parameter and loss chunk, and the buffers with VW 0's.
inline Push StepPush(const Layout& layout, Step step, Block block) {
  Push p{Epoch(1), step, block, {}};
  for (const Chunk& c : layout.chunks) {
    if (layout.tensors[c.tensor].kind == TensorKind::kBuffer && block.lo != 0) continue;
    p.chunks.push_back(FilledChunk(c.id, layout.ChunkBytes(c), 0.25f));
  }
  return p;
}

}  // namespace fuzz
}  // namespace eps
