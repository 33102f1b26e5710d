// A shard under a shard map other than the first one (common/shard_map.h,
// docs/design.md "Elastic shards"): it holds what the map gives it, refuses
// what the map gives another, and its checkpoints keep the map.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "server/shard_state.h"

namespace eps {
namespace {

std::vector<TensorSpec> Tensors() {
  return {{"w", TensorKind::kParameter, DType::kFloat32, {6, 4}},
          {"b", TensorKind::kParameter, DType::kFloat32, {9}},
          {"e", TensorKind::kParameter, DType::kFloat32, {64, 2}, true},
          LossTensor()};
}

JobSpec Spec() {
  JobSpec s;
  s.job_id = "shard-map-test";
  s.model = "mlp";
  s.virtual_workers = 1;
  s.batch_per_vw = 1;
  s.steps = 10;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = 0.1;
  s.chunk_elems = 4;
  s.num_shards = 2;
  return s;
}

// The map after a third shard joined the first two.
ShardMap ThreeShards() {
  StatusOr<Layout> two = MakeLayout(Tensors(), 2, 4);
  EXPECT_TRUE(two.ok());
  StatusOr<ShardMap> three =
      Rebalance(two->map, two->ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  EXPECT_TRUE(three.ok());
  return *three;
}

// The initial values of every chunk `shard` holds under `map`, as one push.
Push InitPush(const Layout& layout, ShardId shard, std::vector<std::vector<float>>* keep) {
  Push push;
  push.step = Step(-1);
  push.block = Block{0, 1};
  for (const Chunk& c : layout.chunks) {
    if (c.shard != shard) continue;
    keep->emplace_back(static_cast<size_t>(c.numel), 0.5f + static_cast<float>(c.id.value()));
    push.chunks.push_back(
        {c.id, keep->back().data(), keep->back().size() * sizeof(float), nullptr});
  }
  return push;
}

TEST(ShardStateMap, AShardHoldsWhatItsMapGivesItAndRefusesTheRest) {
  const ShardMap map = ThreeShards();
  StatusOr<Layout> layout = MakeLayout(Tensors(), 2, 4);
  ASSERT_TRUE(layout.ok());
  ASSERT_TRUE(layout->SetShardMap(map).ok());
  for (uint32_t s = 0; s < 3; ++s) {
    ShardState state{ShardId(s)};
    ASSERT_TRUE(state.Configure(ShardConfig{Spec(), Tensors(), 1, map}).ok()) << s;
    EXPECT_EQ(state.chunks(), layout->ChunksOf(ShardId(s))) << s;
  }
  // Shard 2 is beyond the job's --servers, and holds chunks under this map.
  EXPECT_FALSE(layout->ChunksOf(ShardId(2)).empty());

  ShardState two(ShardId(2));
  ASSERT_TRUE(two.Configure(ShardConfig{Spec(), Tensors(), 1, map}).ok());
  std::vector<std::vector<float>> values;
  Push other = InitPush(*layout, ShardId(0), &values);
  EXPECT_EQ(two.HandlePush(other).status().code(), StatusCode::kInvalidArgument);
  StatusOr<ShardState::PushOutcome> own = two.HandlePush(InitPush(*layout, ShardId(2), &values));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(two.version(), Step(0));
}

TEST(ShardStateMap, AConfigWithAMapNotOfItsChunksOrAnotherMapIsRefused) {
  ShardMap map = ThreeShards();
  ShardState state(ShardId(1));
  ShardMap short_map = map;
  short_map.chunk_owner.pop_back();
  EXPECT_EQ(state.Configure(ShardConfig{Spec(), Tensors(), 1, short_map}).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(state.Configure(ShardConfig{Spec(), Tensors(), 1, map}).ok());
  // Without a map the config means the first map of two shards: another one.
  EXPECT_EQ(state.Configure(ShardConfig{Spec(), Tensors(), 1}).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(state.Configure(ShardConfig{Spec(), Tensors(), 1, map}).ok());
}

TEST(ShardStateMap, ACheckpointKeepsItsMap) {
  const ShardMap map = ThreeShards();
  StatusOr<Layout> layout = MakeLayout(Tensors(), 2, 4);
  ASSERT_TRUE(layout.ok() && layout->SetShardMap(map).ok());
  ShardState state(ShardId(2));
  ASSERT_TRUE(state.Configure(ShardConfig{Spec(), Tensors(), 1, map}).ok());
  std::vector<std::vector<float>> values;
  ASSERT_TRUE(state.HandlePush(InitPush(*layout, ShardId(2), &values)).ok());
  StatusOr<ShardSnapshot> snap = state.Snapshot();
  ASSERT_TRUE(snap.ok());
  Checkpoint checkpoint{snap->version, snap->metadata, {}};
  for (const BlobRef& b : snap->blobs)
    checkpoint.blobs.push_back({b.name, std::string(static_cast<const char*>(b.data), b.size)});

  // A fresh shard 2 that knows nothing of the map restores it from the checkpoint.
  ShardState restarted(ShardId(2));
  Status st = restarted.Restore(checkpoint);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(restarted.chunks(), layout->ChunksOf(ShardId(2)));
  EXPECT_EQ(restarted.version(), Step(0));
}

// ---- chunks moving between shards ----

std::vector<TensorSpec> DenseTensors() {
  return {{"w", TensorKind::kParameter, DType::kFloat32, {6, 5}},
          {"b", TensorKind::kParameter, DType::kFloat32, {9}},
          LossTensor()};
}

JobSpec AdamSpec() {
  JobSpec s = Spec();
  s.optimizer.kind = "adam";
  s.optimizer.lr = 0.01;
  return s;
}

std::vector<Blob> Copied(const std::vector<BlobRef>& refs) {
  std::vector<Blob> out;
  for (const BlobRef& b : refs)
    out.push_back({b.name, std::string(static_cast<const char*>(b.data), b.size)});
  return out;
}

// Shards of a 1-VW job: pushes deterministic gradients for steps [from, to) to
// whichever shard holds each chunk now.
class Shards {
 public:
  // `n` shards, and `configured - n` more that hold nothing yet.
  Shards(uint32_t n, uint32_t configured) {
    StatusOr<Layout> layout = MakeLayout(DenseTensors(), n, 4);
    EXPECT_TRUE(layout.ok());
    layout_ = *layout;
    for (uint32_t s = 0; s < configured; ++s) {
      states_.push_back(std::make_unique<ShardState>(ShardId(s)));
      EXPECT_TRUE(
          states_.back()->Configure(ShardConfig{AdamSpec(), DenseTensors(), 1, layout_.map}).ok());
    }
    for (uint32_t s = 0; s < n; ++s) {
      std::vector<ChunkBytes> init;
      for (ChunkId id : states_[s]->chunks()) {
        if (layout_.tensors[layout_.chunks[id.value()].tensor].kind == TensorKind::kLoss) continue;
        init.push_back(Data(id, -1));
      }
      Push p;
      p.step = Step(-1);
      p.block = Block{0, 1};
      p.chunks = std::move(init);
      EXPECT_TRUE(states_[s]->HandlePush(p).ok());
    }
  }
  ShardState& operator[](uint32_t s) { return *states_[s]; }
  size_t size() const { return states_.size(); }

  void Train(int from, int to) {
    for (int step = from; step < to; ++step) {
      for (auto& state : states_) {
        if (state->chunks().empty()) continue;
        Push p;
        p.epoch = Epoch(1);
        p.step = Step(step);
        p.block = Block{0, 1};
        for (ChunkId id : state->chunks()) p.chunks.push_back(Data(id, step));
        StatusOr<ShardState::PushOutcome> out = state->HandlePush(p);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        ASSERT_TRUE(out->completed.has_value()) << "step " << step;
      }
    }
  }

  // Every chunk's bits at the current version, whichever shard holds it.
  std::map<uint32_t, std::string> Values() {
    std::map<uint32_t, std::string> out;
    for (auto& state : states_) {
      if (state->chunks().empty()) continue;
      Pull pull;
      pull.version = state->version();
      StatusOr<PullReply> reply = state->HandlePull(pull);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      if (!reply.ok()) continue;
      for (const ChunkBytes& c : reply->chunks)
        out[c.chunk.value()] = std::string(static_cast<const char*>(c.data), c.size);
    }
    return out;
  }

  const Layout& layout() const { return layout_; }

 private:
  // Chunk `id`'s initial value (step -1) or gradient at `step`: floats whose sums round.
  ChunkBytes Data(ChunkId id, int step) {
    auto v =
        std::make_shared<std::vector<float>>(static_cast<size_t>(layout_.chunks[id.value()].numel));
    for (size_t i = 0; i < v->size(); ++i)
      (*v)[i] = static_cast<float>(((step + 2) * 31 + id.value() * 7 + i * 3) % 17) * 0.37f - 2.9f;
    return {id, v->data(), v->size() * sizeof(float), v};
  }

  Layout layout_;
  std::vector<std::unique_ptr<ShardState>> states_;
};

// Moves chunks as the shards would: every export before any adoption.
void Move(Shards& shards, const ShardMap& to, Step version) {
  const ShardMap from = shards.layout().map;
  std::vector<std::vector<Blob>> gained(shards.size());
  for (ChunkId c : MovesBetween(from, to, shards.layout().ChunkSizes()).chunks) {
    StatusOr<std::vector<BlobRef>> blobs =
        shards[from.chunk_owner[c.value()].value()].ExportChunks({c});
    ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
    for (Blob& b : Copied(*blobs)) gained[to.chunk_owner[c.value()].value()].push_back(b);
  }
  for (uint32_t s = 0; s < shards.size(); ++s) {
    Status st = shards[s].AdoptMap(to, version, std::move(gained[s]));
    ASSERT_TRUE(st.ok()) << s << ": " << st.ToString();
  }
}

TEST(ShardStateMove, ChunksMovedBetweenStepsGiveTheBitsOfTheUnmovedJob) {
  Shards fixed(2, 2);
  fixed.Train(0, 6);

  Shards moving(2, 3);  // shard 2 configured, holding nothing
  EXPECT_TRUE(moving[2].chunks().empty());
  moving.Train(0, 3);
  const std::vector<uint64_t> sizes = moving.layout().ChunkSizes();
  StatusOr<ShardMap> three =
      Rebalance(moving.layout().map, sizes, {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(three.ok());
  ASSERT_FALSE(MovesBetween(moving.layout().map, *three, sizes).chunks.empty());
  Move(moving, *three, Step(3));
  EXPECT_FALSE(moving[2].chunks().empty());
  EXPECT_EQ(moving[2].version(), Step(3));
  moving.Train(3, 5);
  // And back to two, shard 0 leaving: its chunks and their optimizer state move again.
  StatusOr<ShardMap> two = Rebalance(*three, sizes, {ShardId(1), ShardId(2)});
  ASSERT_TRUE(two.ok());
  StatusOr<Layout> at_three = MakeLayout(DenseTensors(), 2, 4);
  ASSERT_TRUE(at_three.ok() && at_three->SetShardMap(*three).ok());
  std::vector<std::vector<Blob>> gained(3);
  for (ChunkId c : MovesBetween(*three, *two, sizes).chunks) {
    StatusOr<std::vector<BlobRef>> blobs =
        moving[three->chunk_owner[c.value()].value()].ExportChunks({c});
    ASSERT_TRUE(blobs.ok());
    for (Blob& b : Copied(*blobs)) gained[two->chunk_owner[c.value()].value()].push_back(b);
  }
  for (uint32_t s = 0; s < 3; ++s)
    ASSERT_TRUE(moving[s].AdoptMap(*two, Step(5), gained[s]).ok()) << s;
  EXPECT_TRUE(moving[0].chunks().empty());
  moving.Train(5, 6);

  EXPECT_EQ(moving.Values(), fixed.Values());
  EXPECT_EQ(moving.Values().size(), fixed.layout().chunks.size() - 1);  // all but the loss's
}

TEST(ShardStateMove, AMoveMissingABlobOrOfAnotherVersionChangesNothing) {
  Shards moving(2, 3);
  moving.Train(0, 2);
  const std::vector<uint64_t> sizes = moving.layout().ChunkSizes();
  StatusOr<ShardMap> three =
      Rebalance(moving.layout().map, sizes, {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(three.ok());
  const ShardMoves moves = MovesBetween(moving.layout().map, *three, sizes);
  ASSERT_GE(moves.chunks.size(), 2u);
  std::vector<Blob> gained;
  for (ChunkId c : moves.chunks) {
    StatusOr<std::vector<BlobRef>> blobs =
        moving[moving.layout().map.chunk_owner[c.value()].value()].ExportChunks({c});
    ASSERT_TRUE(blobs.ok());
    for (Blob& b : Copied(*blobs)) gained.push_back(b);
  }
  std::vector<Blob> missing(gained.begin() + 1, gained.end());
  EXPECT_EQ(moving[2].AdoptMap(*three, Step(2), missing).code(), StatusCode::kDataLoss);
  std::vector<Blob> short_blob = gained;
  short_blob[0].bytes.pop_back();
  EXPECT_EQ(moving[2].AdoptMap(*three, Step(2), short_blob).code(), StatusCode::kDataLoss);
  std::vector<Blob> extra = gained;
  extra.push_back({"value/999", "x"});
  EXPECT_EQ(moving[2].AdoptMap(*three, Step(2), extra).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(moving[2].chunks().empty());
  EXPECT_EQ(moving[2].version(), Step(-1));
  // Shard 0 serves version 2: a move of version 1 is refused, and it keeps its chunks.
  const std::vector<ChunkId> held = moving[0].chunks();
  EXPECT_EQ(moving[0].AdoptMap(*three, Step(1), {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(moving[0].chunks(), held);
  // A chunk another shard holds cannot be exported.
  EXPECT_EQ(moving[0].ExportChunks({moving[1].chunks().front()}).status().code(),
            StatusCode::kInvalidArgument);
  // The same map again (no newer generation) is refused.
  ShardMap same = moving.layout().map;
  EXPECT_EQ(moving[1].AdoptMap(same, Step(2), {}).code(), StatusCode::kFailedPrecondition);
}

TEST(ShardStateMove, RowPartitionsOfSparseTablesDoNotMoveYet) {
  ShardState state(ShardId(0));
  ASSERT_TRUE(state.Configure(ShardConfig{Spec(), Tensors(), 1}).ok());
  StatusOr<Layout> layout = MakeLayout(Tensors(), 2, 4);
  ASSERT_TRUE(layout.ok());
  std::vector<std::vector<float>> values;
  ASSERT_TRUE(state.HandlePush(InitPush(*layout, ShardId(0), &values)).ok());
  StatusOr<ShardMap> three =
      Rebalance(layout->map, layout->ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(state.AdoptMap(*three, Step(0), {}).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace eps
