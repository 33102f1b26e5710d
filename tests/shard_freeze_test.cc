// Tests for --freeze on a shard (server/shard_state.h, docs/models.md
// "Transfer learning"): the chunks of a frozen parameter take no push, are
// neither reduced nor stepped (no optimizer state, no weight decay), and every
// version holds their initial bits; the other chunks train as without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "server/shard_state.h"

namespace eps {
namespace {

using Values = std::vector<float>;

constexpr uint32_t kVws = 2;
constexpr float kLr = 0.5f;

// One shard, chunks of 4: "embed.weight" (frozen by "^embed") has 2 chunks,
// "head.weight" 1, then the loss.
std::vector<TensorSpec> Tensors() {
  return {{"embed.weight", TensorKind::kParameter, DType::kFloat32, {8}},
          {"head.weight", TensorKind::kParameter, DType::kFloat32, {4}},
          LossTensor()};
}

ShardConfig Config(const std::string& freeze, double momentum = 0) {
  JobSpec s;
  s.job_id = "freeze-test";
  s.model = "mlp";
  s.virtual_workers = kVws;
  s.batch_per_vw = 1;
  s.steps = 10;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = kLr;
  s.optimizer.momentum = momentum;
  s.optimizer.weight_decay = 0.25;  // a stepped frozen chunk would drift even without gradient
  s.chunk_elems = 4;
  s.num_shards = 1;
  s.freeze = freeze;
  return ShardConfig{s, Tensors()};
}

ChunkBytes Bytes(uint32_t chunk, const Values& v) {
  return ChunkBytes{ChunkId(chunk), v.data(), v.size() * sizeof(float), nullptr};
}

Push MakePush(int64_t step, Block block, std::vector<ChunkBytes> chunks) {
  Push p;
  p.epoch = Epoch(1);
  p.step = Step(step);
  p.block = block;
  p.chunks = std::move(chunks);
  return p;
}

// Chunks 0, 1: embed.weight; 2: head.weight; 3: the loss.
const Values kEmbed0{1, 2, 3, 4}, kEmbed1{5, 6, 7, 8}, kHead{0.5f, -1, 2, -4};

Push InitPush() { return MakePush(-1, Block{0, 1}, {Bytes(0, kEmbed0), Bytes(1, kEmbed1), Bytes(2, kHead)}); }

// The whole step (the tree's root over both VWs) of the head and the loss only.
Push HeadPush(int64_t step, const Values& grad, const Values& loss) {
  return MakePush(step, Block{0, kVws}, {Bytes(2, grad), Bytes(3, loss)});
}

ShardState Initialized(const ShardConfig& config) {
  ShardState state(ShardId(0));
  EXPECT_TRUE(state.Configure(config).ok());
  auto init = state.HandlePush(InitPush());
  EXPECT_TRUE(init.ok() && init->completed.has_value());
  return state;
}

// Chunk `id` of version `version`, as a pull gets it.
Values Pulled(const ShardState& state, int64_t version, uint32_t id) {
  Pull p;
  p.version = Step(version);
  p.chunks = {ChunkId(id)};
  auto reply = state.HandlePull(p);
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  if (!reply.ok() || reply->chunks.size() != 1) return {};
  Values v(reply->chunks[0].size / sizeof(float));
  std::memcpy(v.data(), reply->chunks[0].data, reply->chunks[0].size);
  return v;
}

bool SameBits(const Values& a, const Values& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ShardFreeze, FrozenChunksTakeNoPushAndKeepTheirInitialBitsWhileTheOthersStep) {
  ShardState state = Initialized(Config("^embed"));
  const Values grad{1, 1, 1, 1}, loss{3};
  for (int64_t t = 0; t < 3; ++t) {
    auto out = state.HandlePush(HeadPush(t, grad, loss));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_TRUE(out->completed.has_value()) << "step " << t << " waited for a frozen chunk";
    EXPECT_EQ(out->reply.accepted, 2u);
    EXPECT_FLOAT_EQ(out->completed->loss, 1.5f);
  }
  EXPECT_EQ(state.version(), Step(3));
  EXPECT_TRUE(SameBits(Pulled(state, 3, 0), kEmbed0));
  EXPECT_TRUE(SameBits(Pulled(state, 3, 1), kEmbed1));
  EXPECT_TRUE(SameBits(Pulled(state, 2, 1), kEmbed1));  // the previous version too
  // The head moved: SGD with weight decay, p - lr * (g / V + wd * p).
  Values head = kHead;
  for (int t = 0; t < 3; ++t) {
    for (float& p : head) p = p - kLr * (0.5f + 0.25f * p);
  }
  const Values got = Pulled(state, 3, 2);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], head[i], 1e-5) << i;
}

TEST(ShardFreeze, WithoutFreezeTheSamePushesLeaveTheStepWaiting) {
  ShardState state = Initialized(Config(""));
  auto out = state.HandlePush(HeadPush(0, {1, 1, 1, 1}, {3}));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FALSE(out->completed.has_value());
  EXPECT_EQ(state.version(), Step(0));
}

TEST(ShardFreeze, APushCarryingAFrozenChunkIsRefusedWholeAndCountsNothing) {
  ShardState state = Initialized(Config("^embed"));
  const Values grad{1, 1, 1, 1}, loss{3};
  auto out = state.HandlePush(MakePush(0, Block{0, kVws}, {Bytes(2, grad), Bytes(1, grad), Bytes(3, loss)}));
  ASSERT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("embed.weight"), std::string::npos);
  // Nothing of it was counted: the head and the loss are still awaited.
  auto next = state.HandlePush(HeadPush(0, grad, loss));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->reply.accepted, 2u);
  EXPECT_TRUE(next->completed.has_value());
}

TEST(ShardFreeze, TheStepInProgressServesTheFrozenChunksAtOnce) {
  ShardState state = Initialized(Config("^embed"));
  EXPECT_TRUE(SameBits(Pulled(state, 1, 0), kEmbed0));  // version 1 before any push of step 0
  Pull head;
  head.version = Step(1);
  head.chunks = {ChunkId(2)};
  EXPECT_EQ(state.HandlePull(head).status().code(), StatusCode::kUnavailable);
}

TEST(ShardFreeze, ACheckpointHoldsNoOptimizerStateForFrozenChunksAndRestoresToTheSameBits) {
  const ShardConfig config = Config("^embed", /*momentum=*/0.9);
  ShardState original = Initialized(config);
  const Values grad{1, -2, 3, -4}, loss{1};
  ASSERT_TRUE(original.HandlePush(HeadPush(0, grad, loss)).ok());
  auto snapshot = original.Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  Checkpoint c;
  c.step = snapshot->version;
  c.metadata = snapshot->metadata;
  std::vector<std::string> names;
  for (const BlobRef& b : snapshot->blobs) {
    names.push_back(b.name);
    c.blobs.push_back({b.name, std::string(static_cast<const char*>(b.data), b.size)});
  }
  EXPECT_EQ(names, (std::vector<std::string>{"value/0", "value/1", "value/2", "slot0/2"}));
  ShardState restored(ShardId(0));
  ASSERT_TRUE(restored.Restore(c).ok());
  for (ShardState* s : {&original, &restored}) {
    auto out = s->HandlePush(HeadPush(1, grad, loss));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_TRUE(out->completed.has_value());
  }
  for (uint32_t id = 0; id < 3; ++id)
    EXPECT_TRUE(SameBits(Pulled(restored, 2, id), Pulled(original, 2, id))) << "chunk " << id;
  EXPECT_TRUE(SameBits(Pulled(restored, 2, 1), kEmbed1));
}

TEST(ShardFreeze, ClearingTheStateFreezesTheNewInitialValues) {
  ShardState state = Initialized(Config("^embed"));
  ASSERT_TRUE(state.Clear().ok());
  const Values other{9, 9, 9, 9};
  auto init = state.HandlePush(
      MakePush(-1, Block{0, 1}, {Bytes(0, other), Bytes(1, other), Bytes(2, kHead)}));
  ASSERT_TRUE(init.ok() && init->completed.has_value());
  auto out = state.HandlePush(HeadPush(0, {1, 1, 1, 1}, {1}));
  ASSERT_TRUE(out.ok() && out->completed.has_value());
  EXPECT_TRUE(SameBits(Pulled(state, 1, 0), other));
}

}  // namespace
}  // namespace eps
