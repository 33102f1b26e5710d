// Shards under a shard map other than the first one, and chunks moving
// between shards (common/shard_map.h, docs/design.md "Elastic shards"): a
// shard holds what its map gives it and refuses the rest, its checkpoints keep
// the map; chunks moved between steps, by ShardState alone or by running
// shards handing them over (server/shard_mover.h), give the bits of the
// unmoved job.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>
#include <vector>

#include "server/shard_mover.h"
#include "server/shard_state.h"
#include "tests/shard_service_harness.h"
#include "tests/temp_dir.h"

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

// A spare, holding nothing under either map, follows the job's map as moves between
// other shards change it.
TEST(ShardStateMap, ASpareTakesAnotherMapInWhichItHoldsNothing) {
  ShardState spare(ShardId(5));
  StatusOr<Layout> two = MakeLayout(Tensors(), 2, 4);
  ASSERT_TRUE(two.ok());
  ASSERT_TRUE(spare.Configure(ShardConfig{Spec(), Tensors(), 1, two->map}).ok());
  const ShardMap three = ThreeShards();
  ASSERT_TRUE(spare.Configure(ShardConfig{Spec(), Tensors(), 1, three}).ok());
  EXPECT_EQ(spare.layout().map, three);
  EXPECT_TRUE(spare.chunks().empty());
  // Each chunk's holder follows too: a move the spare takes next asks the holders under `three`
  // (before, it asked those of the first map it saw, who refused chunks they had handed on).
  for (const Chunk& c : spare.layout().chunks) EXPECT_EQ(c.shard, three.chunk_owner[c.id.value()]);
  EXPECT_EQ(spare.layout().num_shards, three.IdBound());
  // Shard 2 holds chunks under `three`: no config changes its map.
  ShardState member(ShardId(2));
  ASSERT_TRUE(member.Configure(ShardConfig{Spec(), Tensors(), 1, three}).ok());
  EXPECT_EQ(member.Configure(ShardConfig{Spec(), Tensors(), 1, two->map}).code(),
            StatusCode::kFailedPrecondition);
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

// With `sparse`, a table of 64 rows of 2 too (Layout::sparse's table 0).
std::vector<TensorSpec> DenseTensors(bool sparse = false) {
  std::vector<TensorSpec> t = {{"w", TensorKind::kParameter, DType::kFloat32, {6, 5}},
                               {"b", TensorKind::kParameter, DType::kFloat32, {9}}};
  if (sparse) t.push_back({"e", TensorKind::kParameter, DType::kFloat32, {64, 2}, true});
  t.push_back(LossTensor());
  return t;
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

// Chunk `id`'s initial value (step -1) or gradient at `step` in a 1-VW job:
// floats whose sums round.
ChunkBytes Data(const Layout& layout, ChunkId id, int step) {
  auto v =
      std::make_shared<std::vector<float>>(static_cast<size_t>(layout.chunks[id.value()].numel));
  for (size_t i = 0; i < v->size(); ++i)
    (*v)[i] = static_cast<float>(((step + 2) * 31 + id.value() * 7 + i * 3) % 17) * 0.37f - 2.9f;
  return {id, v->data(), v->size() * sizeof(float), v};
}

// The pushes of step `step` (-1: the initial values) to shard `shard` holding
// `chunks`; with a sparse table, its rows the step touches that `shard` holds.
Push StepPush(const Layout& layout, const std::vector<ChunkId>& chunks, int step,
              ShardId shard = ShardId(0)) {
  Push p;
  p.epoch = Epoch(1);
  p.step = Step(step);
  p.block = Block{0, 1};
  for (ChunkId id : chunks) {
    if (step < 0 && layout.tensors[layout.chunks[id.value()].tensor].kind == TensorKind::kLoss)
      continue;
    p.chunks.push_back(Data(layout, id, step));
  }
  if (step < 0 || layout.sparse.empty()) return p;
  auto ids = std::make_shared<std::vector<uint64_t>>();
  auto values = std::make_shared<std::vector<float>>();
  for (uint64_t row = static_cast<uint64_t>(step) % 5; row < 64; row += 3 + step % 4) {
    if (layout.ShardOfRow(row) != shard) continue;
    ids->push_back(row);
    values->push_back(static_cast<float>((row * 13 + step * 7) % 11) * 0.25f - 1.3f);
    values->push_back(static_cast<float>((row * 5 + step) % 9) * 0.5f - 2.1f);
  }
  SparseRowBytes rows;
  rows.table = 0;
  rows.rows = static_cast<uint32_t>(ids->size());
  rows.ids = {ChunkId(0), ids->data(), ids->size() * sizeof(uint64_t), ids};
  rows.values = {ChunkId(0), values->data(), values->size() * sizeof(float), values};
  p.sparse.push_back(std::move(rows));
  return p;
}

// Shards of a 1-VW job: pushes deterministic gradients for steps [from, to) to
// whichever shard holds each chunk now.
class Shards {
 public:
  // `n` shards, and `configured - n` more that hold nothing yet; `sparse`: with
  // a sparse table (in memory).
  Shards(uint32_t n, uint32_t configured, bool sparse = false) : sparse_(sparse) {
    StatusOr<Layout> layout = MakeLayout(DenseTensors(sparse), n, 4);
    EXPECT_TRUE(layout.ok());
    layout_ = *layout;
    for (uint32_t s = 0; s < configured; ++s) {
      states_.push_back(std::make_unique<ShardState>(ShardId(s)));
      EXPECT_TRUE(states_.back()
                      ->Configure(ShardConfig{AdamSpec(), DenseTensors(sparse), 1, layout_.map})
                      .ok());
    }
    for (uint32_t s = 0; s < n; ++s) {
      EXPECT_TRUE(states_[s]->HandlePush(StepPush(layout_, states_[s]->chunks(), -1)).ok());
    }
  }
  ShardState& operator[](uint32_t s) { return *states_[s]; }
  size_t size() const { return states_.size(); }

  void Train(int from, int to) {
    for (int step = from; step < to; ++step) {
      for (auto& state : states_) {
        if (state->chunks().empty()) continue;
        StatusOr<ShardState::PushOutcome> out =
            state->HandlePush(StepPush(state->layout(), state->chunks(), step, state->shard()));
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        ASSERT_TRUE(out->completed.has_value()) << "step " << step;
      }
    }
  }

  // Every chunk's bits at the current version, whichever shard holds it (keys:
  // chunk ids), and every stored row's of the table (keys: "row" and its id).
  std::map<std::string, std::string> Values() {
    std::map<std::string, std::string> out;
    for (auto& state : states_) {
      if (state->chunks().empty()) continue;
      Pull pull;
      pull.version = state->version();
      StatusOr<PullReply> reply = state->HandlePull(pull);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      if (!reply.ok()) continue;
      for (const ChunkBytes& c : reply->chunks)
        out[std::to_string(c.chunk.value())] =
            std::string(static_cast<const char*>(c.data), c.size);
      if (!sparse_) continue;
      pull.sparse = {SparseRead{0, Step(-1)}};
      reply = state->Answer(pull);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      if (!reply.ok()) continue;
      for (const SparseRowBytes& r : reply->sparse) {
        for (uint32_t i = 0; i < r.rows; ++i) {
          uint64_t id;
          std::memcpy(&id, static_cast<const char*>(r.ids.data) + i * sizeof id, sizeof id);
          EXPECT_EQ(out.count("row" + std::to_string(id)), 0u) << "row " << id << " twice";
          out["row" + std::to_string(id)] = std::string(
              static_cast<const char*>(r.values.data) + i * 2 * sizeof(float), 2 * sizeof(float));
        }
      }
    }
    return out;
  }

  const Layout& layout() const { return layout_; }

 private:
  const bool sparse_;
  Layout layout_;  // the first map's
  std::vector<std::unique_ptr<ShardState>> states_;
};

// Moves chunks and row partitions from map `from` to `to` as the shards would:
// every export before any adoption.
void Move(Shards& shards, const ShardMap& from, const ShardMap& to, Step version) {
  std::vector<std::vector<Blob>> gained(shards.size());
  for (ChunkId c : MovesBetween(from, to, shards.layout().ChunkSizes()).chunks) {
    StatusOr<std::vector<BlobRef>> blobs =
        shards[from.chunk_owner[c.value()].value()].ExportChunks({c});
    ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
    for (Blob& b : Copied(*blobs)) gained[to.chunk_owner[c.value()].value()].push_back(b);
  }
  for (uint32_t holder = 0; holder < shards.size(); ++holder) {
    for (uint32_t taker = 0; taker < shards.size(); ++taker) {
      std::vector<uint32_t> partitions;
      for (uint32_t p = 0; p < kRowPartitions; ++p) {
        if (from.partition_owner[p] == ShardId(holder) && to.partition_owner[p] == ShardId(taker) &&
            holder != taker)
          partitions.push_back(p);
      }
      StatusOr<std::vector<BlobRef>> rows = shards[holder].ExportPartitions(partitions);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      for (Blob& b : Copied(*rows)) gained[taker].push_back(b);
    }
  }
  for (uint32_t s = 0; s < shards.size(); ++s) {
    Status st = shards[s].AdoptMap(to, version, std::move(gained[s]));
    ASSERT_TRUE(st.ok()) << s << ": " << st.ToString();
  }
}

// Without and with a sparse table (its rows and their moments move with their partitions).
TEST(ShardStateMove, ChunksAndRowsMovedBetweenStepsGiveTheBitsOfTheUnmovedJob) {
  for (bool sparse : {false, true}) {
    SCOPED_TRACE(sparse ? "with a sparse table" : "dense");
    Shards fixed(2, 2, sparse);
    fixed.Train(0, 6);

    Shards moving(2, 3, sparse);  // shard 2 configured, holding nothing
    EXPECT_TRUE(moving[2].chunks().empty());
    moving.Train(0, 3);
    const std::vector<uint64_t> sizes = moving.layout().ChunkSizes();
    StatusOr<ShardMap> three =
        Rebalance(moving.layout().map, sizes, {ShardId(0), ShardId(1), ShardId(2)});
    ASSERT_TRUE(three.ok());
    ASSERT_FALSE(MovesBetween(moving.layout().map, *three, sizes).chunks.empty());
    Move(moving, moving.layout().map, *three, Step(3));
    EXPECT_FALSE(moving[2].chunks().empty());
    EXPECT_EQ(moving[2].version(), Step(3));
    EXPECT_EQ(moving.Values(), [&] {
      Shards at3(2, 2, sparse);
      at3.Train(0, 3);
      return at3.Values();
    }());
    moving.Train(3, 5);
    // And back to two, shard 0 leaving: its chunks, rows and optimizer state move again.
    StatusOr<ShardMap> two = Rebalance(*three, sizes, {ShardId(1), ShardId(2)});
    ASSERT_TRUE(two.ok());
    Move(moving, *three, *two, Step(5));
    EXPECT_TRUE(moving[0].chunks().empty());
    moving.Train(5, 6);

    const auto values = moving.Values();
    EXPECT_EQ(values, fixed.Values());
    size_t chunks = 0;
    for (const auto& [key, bytes] : values) chunks += key.rfind("row", 0) != 0 ? 1 : 0;
    EXPECT_EQ(chunks, fixed.layout().chunks.size() - 1);  // all but the loss's
    if (sparse) {
      EXPECT_GT(values.size() - chunks, 20u);  // rows stepped and stored
    }
  }
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
  // Nor while a step has pushes counted: they would be lost with the barrier.
  StatusOr<ShardState::PushOutcome> counted =
      moving[1].HandlePush(StepPush(moving.layout(), {moving[1].chunks().front()}, 2));
  ASSERT_TRUE(counted.ok()) << counted.status().ToString();
  EXPECT_FALSE(counted->completed.has_value());  // one chunk of several: the step goes on
  EXPECT_EQ(moving[1].AdoptMap(*three, Step(2), {}).code(), StatusCode::kFailedPrecondition);
  // The same map again (no newer generation) is refused.
  ShardMap same = moving.layout().map;
  EXPECT_EQ(moving[1].AdoptMap(same, Step(2), {}).code(), StatusCode::kFailedPrecondition);
}

// ---- running shards handing chunks over ----

struct ServedShard {
  ServedShard(zmq::context_t* context, const TempDir& dir, uint32_t id) : coordinator(context) {
    ShardOptions o;
    o.shard = ShardId(id);
    o.coordinator = coordinator.endpoint();
    o.store_path = dir.Sub("shard" + std::to_string(id));
    o.checkpoint_every = 2;
    o.store_wait = std::chrono::milliseconds(20000);
    running = std::make_unique<RunningShard>(context, o);
    EXPECT_TRUE(running->open_status().ok()) << running->open_status().ToString();
    auto reg = coordinator.Next<RegisterShard>();
    EXPECT_TRUE(reg.has_value());
    if (reg) address = reg->address;
    client = std::make_unique<ShardClient>(context, address);
  }
  // Pushes and waits for the shard's acknowledgement; a shard that has not read its config
  // yet answers Unavailable, as it does to a worker, which retries (bounded).
  void Push(const eps::Push& push) {
    auto reply = client->Send(push);
    for (int i = 0; i < 500 && reply.status().code() == StatusCode::kUnavailable; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      reply = client->Send(push);
    }
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(std::holds_alternative<PushReply>(reply->body)) << BodyName(reply->body);
  }

  FakeCoordinator coordinator;  // each shard its own: the test is the coordinator of all
  std::unique_ptr<RunningShard> running;
  std::string address;
  std::unique_ptr<ShardClient> client;
};

// Shards 0..2 running, configured with `two` (shard 2 holding nothing), and the job's
// initial values and steps 0..2 pushed to shards 0 and 1.
std::vector<std::unique_ptr<ServedShard>> TrainedToThree(zmq::context_t* context,
                                                         const TempDir& dir, const Layout& two) {
  std::vector<std::unique_ptr<ServedShard>> shards;
  for (uint32_t s = 0; s < 3; ++s) shards.push_back(std::make_unique<ServedShard>(context, dir, s));
  for (auto& s : shards) s->coordinator.Send(ShardConfig{AdamSpec(), DenseTensors(), 1, two.map});
  for (int step = -1; step < 3; ++step) {
    for (uint32_t s = 0; s < 2; ++s) shards[s]->Push(StepPush(two, two.ChunksOf(ShardId(s)), step));
  }
  return shards;
}

TEST(ShardService, RunningShardsHandChunksOverAndTheJobGoesOnWithTheSameBits) {
  Shards fixed(2, 2);
  fixed.Train(0, 6);

  zmq::context_t context(1);
  TempDir dir;
  const Layout& two = fixed.layout();
  std::vector<std::unique_ptr<ServedShard>> shards = TrainedToThree(&context, dir, two);
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(
        shards[s]->coordinator.Next<StepDone>([](const StepDone& d) { return d.step == Step(2); }));
  }

  // The move at version 3 (not a checkpoint step: each shard takes one for the move).
  StatusOr<ShardMap> map =
      Rebalance(two.map, two.ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(map.ok());
  Layout three = two;
  ASSERT_TRUE(three.SetShardMap(*map).ok());
  const Reshard reshard{
      *map, Step(3), {shards[0]->address, shards[1]->address, shards[2]->address}};
  for (auto& s : shards) s->coordinator.Send(reshard);
  uint64_t moved = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    auto ready = shards[s]->coordinator.Next<ReshardReady>();
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->code, StatusCode::kOk) << s << ": " << ready->message;
    EXPECT_EQ(ready->generation, map->generation);
    moved += ready->bytes_in;
  }
  // What moved, values and two Adam slots each (the loss chunk holds nothing), and nothing else.
  uint64_t want = 0;
  for (ChunkId c : MovesBetween(two.map, *map, two.ChunkSizes()).chunks) {
    if (two.tensors[two.chunks[c.value()].tensor].kind != TensorKind::kLoss)
      want += 3 * two.ChunkBytes(two.chunks[c.value()]);
  }
  EXPECT_GT(want, 0u);
  EXPECT_EQ(moved, want);
  // Until the commit, the holders still serve what they hand over.
  auto before = shards[0]->client->Send(Pull{Step(3), two.ChunksOf(ShardId(0))});
  ASSERT_TRUE(before.ok() && std::holds_alternative<PullReply>(before->body));

  for (auto& s : shards) s->coordinator.Send(ShardConfig{AdamSpec(), DenseTensors(), 2, *map});
  // As after a rollback, the next step's pushes come only once every shard took the map.
  for (auto& s : shards) {
    auto took =
        s->coordinator.Next<ReshardReady>([](const ReshardReady& r) { return r.committed; });
    ASSERT_TRUE(took.has_value());
    EXPECT_EQ(took->code, StatusCode::kOk) << took->message;
  }
  for (int step = 3; step < 6; ++step) {
    for (uint32_t s = 0; s < 3; ++s)
      shards[s]->Push(StepPush(three, three.ChunksOf(ShardId(s)), step));
  }
  std::map<std::string, std::string> values;
  for (uint32_t s = 0; s < 3; ++s) {
    auto reply = shards[s]->client->Send(Pull{Step(6), {}});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    auto* pulled = std::get_if<PullReply>(&reply->body);
    ASSERT_NE(pulled, nullptr) << BodyName(reply->body);
    for (const ChunkBytes& c : pulled->chunks)
      values[std::to_string(c.chunk.value())] =
          std::string(static_cast<const char*>(c.data), c.size);
  }
  EXPECT_EQ(values, fixed.Values());
  // A chunk handed over is refused by its old holder now.
  const ChunkId gone = MovesBetween(two.map, *map, two.ChunkSizes()).chunks.front();
  auto refused =
      shards[two.chunks[gone.value()].shard.value()]->client->Send(Pull{Step(6), {gone}});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  for (auto& s : shards) {
    s->coordinator.Send(Shutdown{"done"});
    EXPECT_TRUE(s->running->Join().ok());
  }
}

TEST(ShardService, AMoveAtAnotherVersionOrAbandonedChangesNothing) {
  zmq::context_t context(1);
  TempDir dir;
  std::vector<std::unique_ptr<ServedShard>> shards;
  for (uint32_t s = 0; s < 3; ++s)
    shards.push_back(std::make_unique<ServedShard>(&context, dir, s));
  StatusOr<Layout> two = MakeLayout(DenseTensors(), 2, 4);
  ASSERT_TRUE(two.ok());
  for (auto& s : shards) s->coordinator.Send(ShardConfig{AdamSpec(), DenseTensors(), 1, two->map});
  for (uint32_t s = 0; s < 2; ++s) shards[s]->Push(StepPush(*two, two->ChunksOf(ShardId(s)), -1));
  StatusOr<ShardMap> map =
      Rebalance(two->map, two->ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(map.ok());
  const std::vector<std::string> addresses = {shards[0]->address, shards[1]->address,
                                              shards[2]->address};
  // The shards serve version 0: a move at version 1 is refused by each.
  for (auto& s : shards) s->coordinator.Send(Reshard{*map, Step(1), addresses});
  for (auto& s : shards) {
    auto ready = s->coordinator.Next<ReshardReady>();
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->code, StatusCode::kFailedPrecondition) << ready->message;
  }
  // Staged at version 0, then abandoned (a config naming the old map): every shard keeps
  // what it held.
  for (auto& s : shards) s->coordinator.Send(Reshard{*map, Step(0), addresses});
  for (auto& s : shards) {
    auto ready = s->coordinator.Next<ReshardReady>();
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->code, StatusCode::kOk) << ready->message;
  }
  for (auto& s : shards) s->coordinator.Send(ShardConfig{AdamSpec(), DenseTensors(), 2, two->map});
  for (uint32_t s = 0; s < 2; ++s) {
    auto reply = shards[s]->client->Send(Pull{Step(0), two->ChunksOf(ShardId(s))});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  }
  for (auto& s : shards) {
    s->coordinator.Send(Shutdown{"done"});
    EXPECT_TRUE(s->running->Join().ok());
  }
}

// Staged moves are durable: shards restarted after the coordinator committed the move take
// their part from their stores, though every holder is gone.
TEST(ShardService, ShardsRestartedAfterTheCommitTakeTheirPartFromTheirStores) {
  Shards fixed(2, 2);
  fixed.Train(0, 3);

  zmq::context_t context(1);
  TempDir dir;
  const Layout& two = fixed.layout();
  std::vector<std::unique_ptr<ServedShard>> shards = TrainedToThree(&context, dir, two);
  StatusOr<ShardMap> map =
      Rebalance(two.map, two.ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(map.ok());
  Layout three = two;
  ASSERT_TRUE(three.SetShardMap(*map).ok());
  for (auto& s : shards) {
    s->coordinator.Send(
        Reshard{*map, Step(3), {shards[0]->address, shards[1]->address, shards[2]->address}});
  }
  for (auto& s : shards) {
    auto ready = s->coordinator.Next<ReshardReady>();
    ASSERT_TRUE(ready.has_value());
    ASSERT_EQ(ready->code, StatusCode::kOk) << ready->message;
  }
  // Every shard stops before the commit reaches it: the holders keep nothing in memory.
  for (auto& s : shards) {
    s->coordinator.Send(Shutdown{"crash stand-in"});
    ASSERT_TRUE(s->running->Join().ok());
  }
  shards.clear();

  const std::map<std::string, std::string> want = fixed.Values();
  for (uint32_t id : {2u, 0u}) {  // the shard that gained, and one that lost
    SCOPED_TRACE("shard " + std::to_string(id));
    ServedShard restarted(&context, dir, id);
    restarted.coordinator.Send(ShardConfig{AdamSpec(), DenseTensors(), 2, *map});
    auto took =
        restarted.coordinator.Next<ReshardReady>([](const ReshardReady& r) { return r.committed; });
    ASSERT_TRUE(took.has_value());
    EXPECT_EQ(took->code, StatusCode::kOk) << took->message;
    auto reply = restarted.client->Send(Pull{Step(3), {}});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    auto* pulled = std::get_if<PullReply>(&reply->body);
    ASSERT_NE(pulled, nullptr);
    std::vector<ChunkId> held;
    for (const ChunkBytes& c : pulled->chunks) {
      held.push_back(c.chunk);
      EXPECT_EQ(std::string(static_cast<const char*>(c.data), c.size),
                want.at(std::to_string(c.chunk.value())))
          << "chunk " << c.chunk;
    }
    std::vector<ChunkId> expected;
    for (ChunkId c : three.ChunksOf(ShardId(id))) {
      if (three.tensors[three.chunks[c.value()].tensor].kind != TensorKind::kLoss)
        expected.push_back(c);
    }
    EXPECT_EQ(held, expected);
    restarted.coordinator.Send(Shutdown{"done"});
    EXPECT_TRUE(restarted.running->Join().ok());
  }
}

// A holder whose bytes do not match their CRC-32 fails the move (DataLoss), never stages them.
TEST(ShardMover, ABlobFailingItsCrcFailsTheMove) {
  zmq::context_t context(1);
  auto holder = Channel::Bind(&context, "tcp://127.0.0.1:0");
  ASSERT_TRUE(holder.ok());
  StatusOr<Layout> two = MakeLayout(DenseTensors(), 2, 4);
  ASSERT_TRUE(two.ok());
  StatusOr<ShardMap> map =
      Rebalance(two->map, two->ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(map.ok());
  ShardMover::Options o;
  o.shard = ShardId(2);
  ShardMover mover(o, &context);
  // Both holders are the fake one.
  ASSERT_TRUE(
      mover.Start(Reshard{*map, Step(0), {(*holder)->endpoint(), (*holder)->endpoint()}}, *two)
          .ok());
  EXPECT_FALSE(mover.staged());
  auto in = (*holder)->Receive(std::chrono::milliseconds(10000));
  ASSERT_TRUE(in.ok() && in->envelope.ok());
  auto* request = std::get_if<MoveRequest>(&in->envelope->body);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->generation, map->generation);
  const std::string bytes(16, 'x');
  MoveReply reply{request->generation, request->step, {}};
  reply.blobs.push_back({"value/" + std::to_string(request->chunks.front().value()), bytes.data(),
                         bytes.size(), nullptr, MoveCrc32(bytes.data(), bytes.size()) ^ 1});
  ASSERT_TRUE((*holder)->SendTo(in->peer, Envelope{"", reply}).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!mover.failure() && std::chrono::steady_clock::now() < deadline) {
    std::vector<zmq::pollitem_t> items;
    mover.AppendPollItems(&items);
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    mover.Poll();
  }
  ASSERT_TRUE(mover.failure().has_value());
  EXPECT_EQ(mover.failure()->code(), StatusCode::kDataLoss) << mover.failure()->ToString();
  EXPECT_FALSE(mover.staged());
}

// The rows of a page of partitions are of sizes no one knows beforehand: the next page asks for as
// many partitions as the previous page's rows say fit page_bytes (at most 8 times more).
TEST(ShardMover, PagesOfRowsFollowTheBytesThePreviousPageTook) {
  zmq::context_t context(1);
  auto holder = Channel::Bind(&context, "tcp://127.0.0.1:0");
  ASSERT_TRUE(holder.ok());
  StatusOr<Layout> one = MakeLayout(DenseTensors(/*sparse=*/true), 1, 4);
  ASSERT_TRUE(one.ok());
  StatusOr<ShardMap> map = Rebalance(one->map, one->ChunkSizes(), {ShardId(0), ShardId(1)});
  ASSERT_TRUE(map.ok());
  std::set<uint32_t> gained;
  for (uint32_t p = 0; p < kRowPartitions; ++p) {
    if (map->partition_owner[p] == ShardId(1)) gained.insert(p);
  }
  ASSERT_EQ(gained.size(), kRowPartitions / 2);
  ShardMover::Options o;
  o.shard = ShardId(1);
  o.page_bytes = 1000;
  o.page_partitions = 4;
  ShardMover mover(o, &context);
  ASSERT_TRUE(mover.Start(Reshard{*map, Step(0), {(*holder)->endpoint(), ""}}, *one).ok());
  // Rows of 100 bytes a partition for the first page of rows, of 10 after it.
  std::vector<size_t> row_pages;
  std::set<uint32_t> asked;
  const std::string chunk(16, 'c');
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!mover.staged() && !mover.failure() && std::chrono::steady_clock::now() < deadline) {
    auto in = (*holder)->Receive(std::chrono::milliseconds(100));
    if (in.ok() && in->envelope.ok()) {
      auto* request = std::get_if<MoveRequest>(&in->envelope->body);
      ASSERT_NE(request, nullptr);
      auto rows = std::make_shared<std::string>();
      MoveReply reply{request->generation, request->step, {}};
      for (ChunkId c : request->chunks) {
        reply.blobs.push_back({"value/" + std::to_string(c.value()), chunk.data(), chunk.size(),
                               nullptr, MoveCrc32(chunk.data(), chunk.size())});
      }
      if (!request->partitions.empty()) {
        row_pages.push_back(request->partitions.size());
        for (uint32_t p : request->partitions) EXPECT_TRUE(asked.insert(p).second) << p;
        rows->assign(request->partitions.size() * (row_pages.size() == 1 ? 100 : 10), 'r');
        reply.blobs.push_back({"rows/0/" + std::to_string(request->partitions.front()),
                               rows->data(), rows->size(), rows,
                               MoveCrc32(rows->data(), rows->size())});
      }
      ASSERT_TRUE((*holder)->SendTo(in->peer, Envelope{"", reply}).ok());
    }
    std::vector<zmq::pollitem_t> items;
    mover.AppendPollItems(&items);
    if (!items.empty()) zmq::poll(items.data(), items.size(), std::chrono::milliseconds(10));
    mover.Poll();
  }
  ASSERT_FALSE(mover.failure().has_value()) << mover.failure()->ToString();
  ASSERT_TRUE(mover.staged());
  EXPECT_EQ(asked, gained);  // every partition gained, once
  ASSERT_GE(row_pages.size(), 3u);
  EXPECT_EQ(row_pages[0], 4u);
  EXPECT_EQ(row_pages[1], 10u);   // 1000 bytes / 100 a partition
  EXPECT_EQ(row_pages[2], 80u);   // 1000 / 10 = 100, but at most 8 x 10
  EXPECT_EQ(row_pages[3], 100u);  // 1000 / 10
}

}  // namespace
}  // namespace eps
