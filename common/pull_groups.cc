#include "common/pull_groups.h"

#include <algorithm>
#include <utility>

namespace eps {

std::vector<std::vector<std::vector<ChunkId>>> PullGroupsOf(const Layout& layout,
                                                            WireDType weight_wire,
                                                            const std::vector<char>& frozen) {
  std::vector<std::vector<std::vector<ChunkId>>> out(layout.num_shards);
  for (size_t s = 0; s < out.size(); ++s) {
    // Each shard's parameter chunks, backward, and its buffer chunks.
    std::vector<const Chunk*> parameters;
    std::vector<ChunkId> buffers;
    size_t total = 0;
    for (auto c = layout.chunks.rbegin(); c != layout.chunks.rend(); ++c) {
      if (c->shard.value() != s || (c->tensor < frozen.size() && frozen[c->tensor])) continue;
      const TensorKind kind = layout.tensors[c->tensor].kind;
      if (kind == TensorKind::kBuffer) buffers.push_back(c->id);
      if (kind != TensorKind::kParameter) continue;
      parameters.push_back(&*c);
      total += layout.WireBytes(*c, weight_wire);
    }
    const size_t group_bytes =
        std::max(kEagerPushBytes, (total + kMaxPullGroups - 2) / (kMaxPullGroups - 1));
    std::vector<ChunkId> group;
    size_t bytes = 0;
    for (const Chunk* c : parameters) {
      group.push_back(c->id);
      bytes += layout.WireBytes(*c, weight_wire);
      if (bytes < group_bytes) continue;
      out[s].push_back(std::move(group));
      group.clear();
      bytes = 0;
    }
    for (std::vector<ChunkId>* rest : {&group, &buffers}) {
      if (!rest->empty()) out[s].push_back(std::move(*rest));
    }
  }
  return out;
}

}  // namespace eps
