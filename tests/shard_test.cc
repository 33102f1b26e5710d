// Tests for the state of one parameter-server shard (server/shard_state.h),
// driven directly with decoded messages, against docs/design.md "The consistency
// contract" and "The step protocol".
//
// The expected values are computed here from the contract, not from the code
// under test: the canonical tree is written out by hand (as in tree_test.cc),
// the mean is sum / V, and plain SGD is p + (-lr) * g with one fused
// multiply-add, the arithmetic of libtorch's p.add_(g, -lr) that
// server/optimizer.h reproduces. Every comparison is on bits.
#include "server/shard.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "schema/channel.h"
#include "server/shard_state.h"
#include "storage/state_store.h"
#include "tests/shard_service_harness.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using Values = std::vector<float>;  // the bytes of one chunk, in 4-byte units

constexpr uint32_t kShards = 2;
constexpr int64_t kChunkElems = 4;
constexpr uint32_t kVws = 5;  // not a power of two: the tree over 8 leaves has absent ones
constexpr float kLr = 0.1f;
constexpr int kSteps = 3;

uint64_t Below(std::mt19937_64& rng, uint64_t n) { return rng() % n; }

// Fisher-Yates on mt19937_64, whose output the standard fixes (std::shuffle is not).
template <class T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(rng, i)]);
}

// Floats of very different magnitudes and both signs, so the order of additions shows in the bits.
float WildFloat(std::mt19937_64& rng) {
  const double mantissa = 1.0 + static_cast<double>(rng() >> 11) / 9007199254740992.0;  // [1, 2)
  const int exponent = static_cast<int>(Below(rng, 13)) - 6;                            // [-6, 6]
  return static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, exponent));
}

std::vector<TensorSpec> Tensors() {
  return {{"w", TensorKind::kParameter, DType::kFloat32, {3, 5}},
          {"b", TensorKind::kParameter, DType::kFloat32, {7}},
          {"bn", TensorKind::kBuffer, DType::kFloat32, {4}},
          {"nb", TensorKind::kBuffer, DType::kInt64, {1}},
          LossTensor()};
}

JobSpec Spec() {
  JobSpec s;
  s.job_id = "shard-test";
  s.model = "mlp";
  s.virtual_workers = kVws;
  s.batch_per_vw = 2;
  s.seed = 7;
  s.steps = 10;
  s.optimizer.kind = "sgd";
  s.optimizer.lr = 0.1;
  s.chunk_elems = kChunkElems;
  s.num_shards = kShards;
  return s;
}

ShardConfig Config() { return ShardConfig{Spec(), Tensors()}; }

uint32_t Width(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Node [lo, lo+size) of the balanced tree over Width(V) leaves: an absent right
// subtree leaves the left value unchanged; otherwise left + right, in that order.
// With a compressed gradient wire dtype every node, leaves included, is rounded
// to it once formed (common/wire.h).
Values ReferenceNode(const std::vector<Values>& leaves, uint32_t lo, uint32_t size,
                     WireDType rounding = WireDType::kFP32) {
  if (size == 1) {
    Values leaf = leaves[lo];
    RoundToWire(rounding, leaf.data(), leaf.size());
    return leaf;
  }
  Values left = ReferenceNode(leaves, lo, size / 2, rounding);
  if (lo + size / 2 >= leaves.size()) return left;
  const Values right = ReferenceNode(leaves, lo + size / 2, size / 2, rounding);
  for (size_t i = 0; i < left.size(); ++i) left[i] = left[i] + right[i];
  RoundToWire(rounding, left.data(), left.size());
  return left;
}

Values SequentialSum(const std::vector<Values>& leaves) {
  Values acc = leaves[0];
  for (size_t v = 1; v < leaves.size(); ++v) {
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + leaves[v][i];
  }
  return acc;
}

bool SameBits(const ChunkBytes& c, const Values& v) {
  return c.data != nullptr && c.size == v.size() * sizeof(float) &&
         std::memcmp(c.data, v.data(), c.size) == 0;
}

ChunkBytes Bytes(ChunkId id, const Values& v) {
  return ChunkBytes{id, v.data(), v.size() * sizeof(float), nullptr};
}

Push MakePush(int64_t step, Block block, std::vector<ChunkBytes> chunks) {
  Push p;
  p.epoch = Epoch(1);
  p.step = Step(step);
  p.block = block;
  p.chunks = std::move(chunks);
  return p;
}

Pull MakePull(int64_t version, std::vector<ChunkId> chunks = {}) {
  Pull p;
  p.version = Step(version);
  p.chunks = std::move(chunks);
  return p;
}

// A job of kSteps steps: initial values, every VW's gradient and loss, VW 0's
// buffers, and the value every chunk must have at every version.
class Job {
 public:
  explicit Job(uint64_t seed) {
    auto layout = MakeLayout(Tensors(), kShards, kChunkElems);
    EXPECT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = std::move(layout).value();
    std::mt19937_64 rng(seed);
    const size_t n = layout_.chunks.size();
    init_.resize(n);
    for (const Chunk& c : layout_.chunks) init_[c.id.value()] = Fill(c, rng, /*salt=*/100);
    grads_.assign(kSteps, std::vector<std::vector<Values>>(kVws, std::vector<Values>(n)));
    buffers_.assign(kSteps, std::vector<Values>(n));
    for (int t = 0; t < kSteps; ++t) {
      for (uint32_t v = 0; v < kVws; ++v) {
        for (const Chunk& c : layout_.chunks) {
          if (Kind(c.id) == TensorKind::kBuffer) continue;
          Values& g = grads_[t][v][c.id.value()];
          g.resize(c.numel);
          for (float& x : g) x = WildFloat(rng);
        }
      }
      for (const Chunk& c : layout_.chunks) {
        if (Kind(c.id) == TensorKind::kBuffer)
          buffers_[t][c.id.value()] = Fill(c, rng, /*salt=*/t + 1);
      }
    }
    // Step 0's losses by hand: the tree gives ((1e8 + 1) + (-1e8 + 1)) + 0.5 = 0.5,
    // a left-to-right sum gives 1.5.
    const float losses[kVws] = {1e8f, 1.0f, -1e8f, 1.0f, 0.5f};
    for (uint32_t v = 0; v < kVws; ++v) grads_[0][v][LossChunk().value()] = {losses[v]};

    expected_.push_back(init_);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<Values> next(n);
      for (const Chunk& c : layout_.chunks) {
        const uint32_t id = c.id.value();
        switch (Kind(c.id)) {
          case TensorKind::kParameter: {
            const Values sum = TreeSum(t, c.id);
            next[id] = expected_.back()[id];
            for (size_t i = 0; i < sum.size(); ++i)
              next[id][i] = std::fma(sum[i] / 5.0f, -kLr, next[id][i]);
            break;
          }
          case TensorKind::kBuffer:
            next[id] = buffers_[t][id];
            break;
          case TensorKind::kLoss:
            loss_.push_back(TreeSum(t, c.id)[0] / 5.0f);
            break;
        }
      }
      expected_.push_back(std::move(next));
    }
  }

  const Layout& layout() const { return layout_; }
  TensorKind Kind(ChunkId id) const {
    return layout_.tensors[layout_.chunks[id.value()].tensor].kind;
  }
  size_t BytesOf(ChunkId id) const { return layout_.ChunkBytes(layout_.chunks[id.value()]); }

  ChunkId LossChunk() const {
    for (const Chunk& c : layout_.chunks) {
      if (Kind(c.id) == TensorKind::kLoss) return c.id;
    }
    ADD_FAILURE() << "no loss chunk";
    return ChunkId(0);
  }
  ShardId LossShard() const { return layout_.chunks[LossChunk().value()].shard; }

  std::vector<ChunkId> Owned(ShardId s, TensorKind kind) const {
    std::vector<ChunkId> out;
    for (ChunkId id : layout_.ChunksOf(s)) {
      if (Kind(id) == kind) out.push_back(id);
    }
    return out;
  }
  // The chunks a pull of `s` returns: every owned chunk but the loss, in id order.
  std::vector<ChunkId> Pullable(ShardId s) const {
    std::vector<ChunkId> out;
    for (ChunkId id : layout_.ChunksOf(s)) {
      if (Kind(id) != TensorKind::kLoss) out.push_back(id);
    }
    return out;
  }
  // A chunk of `kind` on the other shard.
  ChunkId Foreign(ShardId s, TensorKind kind) const {
    return Owned(ShardId((s.value() + 1) % kShards), kind).at(0);
  }

  // Initial values of every owned non-loss chunk (step -1).
  Push Init(ShardId s) const {
    std::vector<ChunkBytes> chunks;
    for (ChunkId id : Pullable(s)) chunks.push_back(Bytes(id, init_[id.value()]));
    return MakePush(-1, Block{0, 1}, std::move(chunks));
  }
  Push InitOf(ChunkId id) const {
    return MakePush(-1, Block{0, 1}, {Bytes(id, init_[id.value()])});
  }
  // Other values for every owned non-loss chunk, for a repeated initialization.
  Push OtherInit(ShardId s) {
    std::vector<ChunkBytes> chunks;
    for (ChunkId id : Pullable(s)) chunks.push_back(Bytes(id, Garbage(id)));
    return MakePush(-1, Block{0, 1}, std::move(chunks));
  }

  // Block `b` of step t for shard s: every owned parameter and loss chunk holds
  // the block's tree partial, and with `buffers` every owned buffer chunk holds
  // VW 0's value. With `garbage` the same chunks hold values no VW produced.
  Push BlockPush(ShardId s, int64_t t, Block b, bool buffers, bool garbage = false) {
    std::vector<ChunkBytes> chunks;
    for (ChunkId id : layout_.ChunksOf(s)) {
      if (Kind(id) == TensorKind::kBuffer) {
        if (buffers) chunks.push_back(Bytes(id, garbage ? Garbage(id) : buffers_[t][id.value()]));
        continue;
      }
      chunks.push_back(Bytes(id, garbage ? Garbage(id) : Partial(t, id, b)));
    }
    return MakePush(t, b, std::move(chunks));
  }
  // Only the buffer chunks of shard s, with the block holding VW 0.
  Push BufferPush(ShardId s, int64_t t, bool garbage = false) {
    std::vector<ChunkBytes> chunks;
    for (ChunkId id : Owned(s, TensorKind::kBuffer)) {
      chunks.push_back(Bytes(id, garbage ? Garbage(id) : buffers_[t][id.value()]));
    }
    return MakePush(t, Block{0, 1}, std::move(chunks));
  }
  // One chunk's partial for block b of step t.
  const Values& Partial(int64_t t, ChunkId id, Block b) {
    std::vector<Values> leaves;
    for (uint32_t v = 0; v < kVws; ++v) leaves.push_back(grads_[t][v][id.value()]);
    storage_.push_back(ReferenceNode(leaves, b.lo, b.size));
    return storage_.back();
  }
  const Values& Garbage(ChunkId id) {
    storage_.emplace_back(BytesOf(id) / sizeof(float), 1e30f);
    return storage_.back();
  }
  // Test-owned bytes of any length, for malformed pushes.
  const Values& Raw(size_t floats) {
    storage_.emplace_back(floats, 3.0f);
    return storage_.back();
  }

  const Values& Expected(int64_t version, ChunkId id) const {
    return expected_.at(version)[id.value()];
  }
  float ExpectedLoss(int64_t t) const { return loss_.at(t); }
  Values TreeSum(int64_t t, ChunkId id) const {
    std::vector<Values> leaves;
    for (uint32_t v = 0; v < kVws; ++v) leaves.push_back(grads_[t][v][id.value()]);
    return ReferenceNode(leaves, 0, Width(kVws));
  }
  // Every VW's gradient (or loss) of chunk `id` at step t.
  std::vector<Values> Leaves(int64_t t, ChunkId id) const {
    std::vector<Values> leaves;
    for (uint32_t v = 0; v < kVws; ++v) leaves.push_back(grads_[t][v][id.value()]);
    return leaves;
  }
  const Values& Init(ChunkId id) const { return init_[id.value()]; }
  const Values& Buffer(int64_t t, ChunkId id) const { return buffers_[t][id.value()]; }
  Values LeftToRightSum(int64_t t, ChunkId id) const {
    std::vector<Values> leaves;
    for (uint32_t v = 0; v < kVws; ++v) leaves.push_back(grads_[t][v][id.value()]);
    return SequentialSum(leaves);
  }

 private:
  // Random bytes for chunk c; int64 chunks hold integers.
  Values Fill(const Chunk& c, std::mt19937_64& rng, int64_t salt) const {
    Values out(layout_.ChunkBytes(c) / sizeof(float));
    if (layout_.tensors[c.tensor].dtype == DType::kInt64) {
      for (int64_t i = 0; i < c.numel; ++i) {
        const int64_t x = salt * 1000 + static_cast<int64_t>(Below(rng, 1000));
        std::memcpy(out.data() + 2 * i, &x, sizeof x);
      }
    } else {
      for (float& x : out) x = WildFloat(rng);
    }
    return out;
  }

  Layout layout_;
  std::vector<Values> init_;                             // by chunk id
  std::vector<std::vector<std::vector<Values>>> grads_;  // [step][vw][chunk]: parameters and loss
  std::vector<std::vector<Values>> buffers_;             // [step][chunk]: VW 0's buffers
  std::vector<std::vector<Values>> expected_;            // [version][chunk]
  std::vector<float> loss_;                              // [step]
  std::deque<Values> storage_;  // bytes pushes point into (stable addresses)
};

std::unique_ptr<ShardState> ConfiguredShard(ShardId s) {
  auto state = std::make_unique<ShardState>(s);
  const Status st = state->Configure(Config());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return state;
}

// A configured shard holding the job's initial values (version 0).
std::unique_ptr<ShardState> InitializedShard(const Job& job, ShardId s) {
  auto state = ConfiguredShard(s);
  auto out = state->HandlePush(job.Init(s));
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out.ok() && out->completed.has_value());
  EXPECT_EQ(state->version(), Step(0));
  return state;
}

// Pushes step t as blocks [0,4) (with the buffers) and [4,5); returns the StepDone.
std::optional<StepDone> RunStep(ShardState& state, Job& job, ShardId s, int64_t t) {
  auto a = state.HandlePush(job.BlockPush(s, t, Block{0, 4}, true));
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a.ok() && !a->completed.has_value());
  auto b = state.HandlePush(job.BlockPush(s, t, Block{4, 1}, false));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  if (!b.ok()) return std::nullopt;
  EXPECT_TRUE(b->completed.has_value());
  EXPECT_EQ(state.version(), Step(t + 1));
  return b->completed;
}

// Pulls every chunk of `version` and compares it with the job's expectation.
void ExpectVersion(const ShardState& state, const Job& job, ShardId s, int64_t version) {
  SCOPED_TRACE("shard " + std::to_string(s.value()) + " version " + std::to_string(version));
  auto reply = state.HandlePull(MakePull(version));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->version, Step(version));
  std::vector<ChunkId> got;
  for (const ChunkBytes& c : reply->chunks) {
    got.push_back(c.chunk);
    EXPECT_EQ(c.size, job.BytesOf(c.chunk)) << "chunk " << c.chunk;
    EXPECT_TRUE(SameBits(c, job.Expected(version, c.chunk))) << "chunk " << c.chunk;
  }
  EXPECT_EQ(got, job.Pullable(s));
}

std::vector<ShardId> AllShards() { return {ShardId(0), ShardId(1)}; }

// The data makes the order of additions observable: a shard that summed step t
// left to right, or in push order, would not produce the tree's bits.
bool OrderShows(const Job& job, int64_t t) {
  for (ShardId s : AllShards()) {
    bool differs = false;
    for (ChunkId id : job.Owned(s, TensorKind::kParameter))
      differs |= job.TreeSum(t, id) != job.LeftToRightSum(t, id);
    if (!differs) return false;
  }
  return true;
}

TEST(ShardTestJob, EveryShardOwnsParametersAndBuffersAndOneOwnsTheLoss) {
  Job job(1);
  for (ShardId s : AllShards()) {
    EXPECT_GE(job.Owned(s, TensorKind::kParameter).size(), 2u) << s;
    EXPECT_GE(job.Owned(s, TensorKind::kBuffer).size(), 1u) << s;
  }
  EXPECT_EQ(job.Owned(ShardId(0), TensorKind::kLoss).size() +
                job.Owned(ShardId(1), TensorKind::kLoss).size(),
            1u);
  EXPECT_TRUE(OrderShows(job, 0));
  EXPECT_EQ(job.ExpectedLoss(0), 0.5f / 5.0f);
  EXPECT_NE(job.LeftToRightSum(0, job.LossChunk())[0], job.TreeSum(0, job.LossChunk())[0]);
}

// ---------------------------------------------------------------------------
// Configure

TEST(ShardStateConfigure, RejectsAnUnknownOptimizerOrInvalidOptimizerOptions) {
  ShardState state(ShardId(0));
  ShardConfig bad = Config();
  bad.spec.optimizer.kind = "sgdd";
  EXPECT_EQ(state.Configure(bad).code(), StatusCode::kInvalidArgument);
  bad = Config();
  bad.spec.optimizer.schedule = "linear";
  EXPECT_EQ(state.Configure(bad).code(), StatusCode::kInvalidArgument);
  bad = Config();
  bad.spec.optimizer.lr = 0;
  EXPECT_EQ(state.Configure(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(state.has_layout());
  // The refused configs left nothing behind: a good one is still taken.
  const Status st = state.Configure(Config());
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(state.has_layout());
}

TEST(ShardStateConfigure, RejectsAShardIdOutsideTheJob) {
  for (uint32_t id : {2u, 3u, 100u}) {
    ShardState state{ShardId(id)};
    EXPECT_EQ(state.Configure(Config()).code(), StatusCode::kInvalidArgument) << id;
    EXPECT_FALSE(state.has_layout());
  }
  ShardState last{ShardId(kShards - 1)};
  EXPECT_TRUE(last.Configure(Config()).ok());
}

TEST(ShardStateConfigure, RejectsZeroVirtualWorkers) {
  ShardState state(ShardId(0));
  ShardConfig bad = Config();
  bad.spec.virtual_workers = 0;
  EXPECT_EQ(state.Configure(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(state.has_layout());
}

TEST(ShardStateConfigure, ASpecWithoutTensorsGivesNoLayoutAndPushesAndPullsWait) {
  Job job(2);
  ShardState state(ShardId(0));
  ASSERT_TRUE(state.Configure(ShardConfig{Spec(), {}}).ok());
  EXPECT_FALSE(state.has_layout());
  EXPECT_EQ(state.HandlePush(job.Init(ShardId(0))).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(state.HandlePull(MakePull(0)).status().code(), StatusCode::kUnavailable);
  // The tensors arrive later with the same spec.
  ASSERT_TRUE(state.Configure(Config()).ok());
  EXPECT_TRUE(state.has_layout());
  EXPECT_EQ(state.chunks(), job.layout().ChunksOf(ShardId(0)));
}

TEST(ShardStateConfigure, RefusesASecondConfigWithOtherTensorsAndKeepsItsState) {
  Job job(3);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    ShardConfig other = Config();
    other.tensors[1].shape = {8};
    EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
    other = Config();
    other.tensors[0].name = "w2";
    EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
    other = Config();
    other.tensors.pop_back();  // no loss tensor
    EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(state->chunks(), job.layout().ChunksOf(s));
    EXPECT_EQ(state->version(), Step(0));
    ExpectVersion(*state, job, s, 0);
  }
}

TEST(ShardStateConfigure, RefusesASecondConfigWithAnotherJobSpec) {
  Job job(4);
  auto state = InitializedShard(job, ShardId(0));
  ShardConfig other = Config();
  other.spec.virtual_workers = kVws + 1;
  EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
  other = Config();
  other.spec.chunk_elems = 8;
  EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
  other = Config();
  other.spec.job_id = "another-job";
  EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
  // The barrier still works over the original 5 VWs.
  RunStep(*state, job, ShardId(0), 0);
  ExpectVersion(*state, job, ShardId(0), 1);
}

// "A second config must agree with the first" (shard_state.h): the optimizer is
// part of the job spec, and a shard that silently changed its learning rate in
// the middle of a job would break the bitwise contract.
TEST(ShardStateConfigure, RefusesASecondConfigWithAnotherOptimizer) {
  Job job(5);
  auto state = InitializedShard(job, ShardId(0));
  ShardConfig other{Spec(), {}};
  other.spec.optimizer.lr = 0.5;
  EXPECT_EQ(state->Configure(other).code(), StatusCode::kFailedPrecondition);
  // Whatever the answer, step 0 must still use lr 0.1.
  RunStep(*state, job, ShardId(0), 0);
  ExpectVersion(*state, job, ShardId(0), 1);
}

TEST(ShardStateConfigure, AcceptsTheSameConfigAgainWithoutResettingAnything) {
  Job job(6);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    RunStep(*state, job, s, 0);
    // Half of step 1 is in.
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 1, Block{0, 4}, true)).ok());
    Status st = state->Configure(Config());
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = state->Configure(ShardConfig{Spec(), {}});
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(state->version(), Step(1));
    EXPECT_EQ(state->chunks(), job.layout().ChunksOf(s));
    ExpectVersion(*state, job, s, 0);
    ExpectVersion(*state, job, s, 1);
    // The barrier of step 1 kept its leaves: one more block completes it.
    auto out = state->HandlePush(job.BlockPush(s, 1, Block{4, 1}, false));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_TRUE(out->completed.has_value());
    ExpectVersion(*state, job, s, 2);
  }
}

// ---------------------------------------------------------------------------
// Initial values

TEST(ShardStateInit, VersionBecomesZeroOnlyWhenEveryOwnedChunkArrived) {
  Job job(10);
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    auto state = ConfiguredShard(s);
    EXPECT_EQ(state->version(), Step(-1));
    std::vector<ChunkId> order = job.Pullable(s);
    std::reverse(order.begin(), order.end());
    for (size_t k = 0; k < order.size(); ++k) {
      EXPECT_EQ(state->HandlePull(MakePull(0)).status().code(), StatusCode::kUnavailable);
      EXPECT_EQ(state->HandlePush(job.BlockPush(s, 0, Block{0, 1}, true)).status().code(),
                StatusCode::kUnavailable);
      auto out = state->HandlePush(job.InitOf(order[k]));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.step, Step(-1));
      EXPECT_EQ(out->reply.accepted, 1u);
      EXPECT_EQ(out->reply.duplicates, 0u);
      if (k + 1 < order.size()) {
        EXPECT_FALSE(out->completed.has_value()) << "after chunk " << order[k];
        EXPECT_EQ(state->version(), Step(-1));
      } else {
        ASSERT_TRUE(out->completed.has_value());
        EXPECT_EQ(out->completed->shard, s);
        EXPECT_EQ(out->completed->step, Step(-1));
        EXPECT_FALSE(out->completed->has_loss);
        EXPECT_EQ(state->version(), Step(0));
      }
    }
    EXPECT_EQ(state->duplicates(), 0u);
    ExpectVersion(*state, job, s, 0);
  }
}

TEST(ShardStateInit, AChunkRepeatedBeforeCompletionKeepsItsFirstValue) {
  Job job(11);
  const ShardId s(1);
  auto state = ConfiguredShard(s);
  const std::vector<ChunkId> chunks = job.Pullable(s);
  ASSERT_TRUE(state->HandlePush(job.InitOf(chunks[0])).ok());
  auto again =
      state->HandlePush(MakePush(-1, Block{0, 1}, {Bytes(chunks[0], job.Garbage(chunks[0]))}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reply.accepted, 0u);
  EXPECT_EQ(again->reply.duplicates, 1u);
  EXPECT_EQ(state->duplicates(), 1u);
  EXPECT_FALSE(again->completed.has_value());
  for (size_t k = 1; k < chunks.size(); ++k)
    ASSERT_TRUE(state->HandlePush(job.InitOf(chunks[k])).ok());
  EXPECT_EQ(state->version(), Step(0));
  ExpectVersion(*state, job, s, 0);
}

TEST(ShardStateInit, ASecondInitIsCountedAsDuplicatesAndChangesNothing) {
  Job job(12);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    const uint32_t n = static_cast<uint32_t>(job.Pullable(s).size());
    auto out = state->HandlePush(job.OtherInit(s));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->reply.accepted, 0u);
    EXPECT_EQ(out->reply.duplicates, n);
    EXPECT_FALSE(out->completed.has_value());
    EXPECT_EQ(state->duplicates(), n);
    EXPECT_EQ(state->version(), Step(0));
    ExpectVersion(*state, job, s, 0);
    // Still so once training moved on: neither version changes.
    RunStep(*state, job, s, 0);
    out = state->HandlePush(job.OtherInit(s));
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->reply.duplicates, n);
    EXPECT_FALSE(out->completed.has_value());
    EXPECT_EQ(state->version(), Step(1));
    ExpectVersion(*state, job, s, 0);
    ExpectVersion(*state, job, s, 1);
  }
}

// ---------------------------------------------------------------------------
// The barrier of a step

TEST(ShardStateBarrier, BlocksAndLeavesInAnyOrderGiveTheTreeSumBits) {
  const std::vector<std::vector<Block>> plans = {
      {Block{0, 4}, Block{4, 1}},
      {Block{0, 1}, Block{1, 1}, Block{2, 2}, Block{4, 1}},
      {Block{4, 4}, Block{0, 2}, Block{2, 1}, Block{3, 1}},
      {Block{0, 8}},
      {Block{0, 1}, Block{1, 1}, Block{2, 1}, Block{3, 1}, Block{4, 1}},
  };
  std::mt19937_64 rng(99);
  ASSERT_TRUE(OrderShows(Job(20), 0));
  for (ShardId s : AllShards()) {
    for (size_t p = 0; p < plans.size(); ++p) {
      for (int trial = 0; trial < 6; ++trial) {
        Job job(20);
        std::vector<Block> order = plans[p];
        if (trial > 0) Shuffle(order, rng);
        std::string desc;
        for (const Block& b : order) desc += b.ToString();
        SCOPED_TRACE("shard " + std::to_string(s.value()) + " blocks " + desc);
        auto state = InitializedShard(job, s);
        for (size_t k = 0; k < order.size(); ++k) {
          auto out = state->HandlePush(job.BlockPush(s, 0, order[k], order[k].lo == 0));
          ASSERT_TRUE(out.ok()) << out.status().ToString();
          EXPECT_EQ(out->reply.step, Step(0));
          EXPECT_EQ(out->reply.duplicates, 0u);
          if (k + 1 < order.size()) {
            EXPECT_FALSE(out->completed.has_value())
                << "completed early, after " << order[k].ToString();
            EXPECT_EQ(state->version(), Step(0));
            EXPECT_EQ(state->HandlePull(MakePull(1)).status().code(), StatusCode::kUnavailable);
            continue;
          }
          ASSERT_TRUE(out->completed.has_value());
          EXPECT_EQ(out->completed->shard, s);
          EXPECT_EQ(out->completed->step, Step(0));
          EXPECT_EQ(out->completed->has_loss, s == job.LossShard());
          if (s == job.LossShard()) {
            EXPECT_EQ(out->completed->loss, job.ExpectedLoss(0));
          }
        }
        EXPECT_EQ(state->version(), Step(1));
        ExpectVersion(*state, job, s, 1);
      }
    }
  }
}

// Workers push a block chunk by chunk as backward produces the gradients; the
// shard steps each chunk as soon as its sum is complete. Until the last chunk
// arrives every pull still sees w(t) whole, and the result has the same bits.
// The step in progress, chunk by chunk: a chunk whose sum is complete (or a
// buffer pushed with VW 0) can be pulled at version t+1 at once, with the bits
// the completed step serves; the others, and so the whole version, only later.
TEST(ShardStateBarrier, ChunksPushedOneByOneArePulledOneByOneAndWholeOnceTheStepCompletes) {
  std::mt19937_64 rng(31);
  Job job(24);
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    auto state = InitializedShard(job, s);
    for (int64_t t = 0; t < kSteps; ++t) {
      Push whole = job.BlockPush(s, t, Block{0, Width(kVws)}, /*buffers=*/true);
      std::vector<ChunkBytes> chunks = whole.chunks;
      Shuffle(chunks, rng);
      for (size_t k = 0; k < chunks.size(); ++k) {
        auto out = state->HandlePush(MakePush(t, whole.block, {chunks[k]}));
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        EXPECT_EQ(out->reply.accepted, 1u);
        if (k + 1 == chunks.size()) {
          EXPECT_TRUE(out->completed.has_value());
          break;
        }
        EXPECT_FALSE(out->completed.has_value());
        auto again =
            state->HandlePush(MakePush(t, whole.block, {chunks[k]}));  // must not step twice
        ASSERT_TRUE(again.ok()) << again.status().ToString();
        EXPECT_EQ(again->reply.duplicates, 1u);
        EXPECT_EQ(state->HandlePull(MakePull(t + 1)).status().code(), StatusCode::kUnavailable);
        ExpectVersion(*state, job, s, t);  // chunks stepped already still serve w(t)
        for (size_t j = 0; j < chunks.size(); ++j) {
          const ChunkId id = chunks[j].chunk;
          if (job.Kind(id) == TensorKind::kLoss) continue;
          auto early = state->HandlePull(MakePull(t + 1, {id}));
          if (j > k) {
            EXPECT_EQ(early.status().code(), StatusCode::kUnavailable)
                << "chunk " << id << " is not pushed yet";
            continue;
          }
          ASSERT_TRUE(early.ok()) << "chunk " << id << ": " << early.status().ToString();
          ASSERT_EQ(early->chunks.size(), 1u);
          EXPECT_EQ(early->version, Step(t + 1));
          EXPECT_TRUE(SameBits(early->chunks[0], job.Expected(t + 1, id))) << "chunk " << id;
        }
        EXPECT_EQ(state->HandlePull(MakePull(t + 2)).status().code(), StatusCode::kUnavailable);
      }
      ASSERT_EQ(state->version(), Step(t + 1));
      ExpectVersion(*state, job, s, t + 1);
    }
  }
}

TEST(ShardStateBarrier, TheStepCompletesOnlyWithTheLastLeaf) {
  Job job(21);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    const uint32_t order[kVws] = {4, 2, 0, 3, 1};
    for (uint32_t k = 0; k < kVws; ++k) {
      const Block leaf{order[k], 1};
      auto out = state->HandlePush(job.BlockPush(s, 0, leaf, leaf.lo == 0));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->completed.has_value(), k + 1 == kVws) << "leaf " << leaf.ToString();
      EXPECT_EQ(state->version(), Step(k + 1 == kVws ? 1 : 0));
    }
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStateBarrier, TheStepDoneCarriesTheTreeMeanOfTheLossesOnlyFromTheLossShard) {
  Job job(22);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    for (int64_t t = 0; t < kSteps; ++t) {
      const std::optional<StepDone> done = RunStep(*state, job, s, t);
      ASSERT_TRUE(done.has_value());
      EXPECT_EQ(done->shard, s);
      EXPECT_EQ(done->step, Step(t));
      if (s == job.LossShard()) {
        EXPECT_TRUE(done->has_loss);
        EXPECT_EQ(done->loss, job.ExpectedLoss(t)) << "step " << t;
      } else {
        EXPECT_FALSE(done->has_loss);
      }
    }
    // Step 0's losses were chosen so that only the tree order gives 0.5 / 5.
    ASSERT_EQ(job.ExpectedLoss(0), 0.1f);
    ExpectVersion(*state, job, s, kSteps);
  }
}

TEST(ShardStateBarrier, OnlyTheBlockHoldingVwZeroMayCarryBuffers) {
  Job job(23);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    for (Block b : {Block{1, 1}, Block{2, 2}, Block{4, 1}, Block{4, 4}}) {
      auto out = state->HandlePush(job.BlockPush(s, 0, b, /*buffers=*/true));
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << b.ToString();
    }
    EXPECT_EQ(state->duplicates(), 0u);
    // None of the refused pushes counted its parameter chunks.
    const uint32_t reduced = static_cast<uint32_t>(job.Owned(s, TensorKind::kParameter).size() +
                                                   job.Owned(s, TensorKind::kLoss).size());
    for (Block b : {Block{1, 1}, Block{2, 2}, Block{4, 1}}) {
      auto out = state->HandlePush(job.BlockPush(s, 0, b, false));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.accepted, reduced) << b.ToString();
      EXPECT_EQ(out->reply.duplicates, 0u) << b.ToString();
    }
    auto last = state->HandlePush(job.BlockPush(s, 0, Block{0, 1}, true));
    ASSERT_TRUE(last.ok());
    EXPECT_TRUE(last->completed.has_value());
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStateBarrier, TheStepWaitsForTheBuffersOfVwZero) {
  Job job(24);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, Block{0, 4}, false)).ok());
    auto out = state->HandlePush(job.BlockPush(s, 0, Block{4, 1}, false));
    ASSERT_TRUE(out.ok());
    EXPECT_FALSE(out->completed.has_value()) << "all leaves are in but VW 0's buffers are not";
    EXPECT_EQ(state->version(), Step(0));
    out = state->HandlePush(job.BufferPush(s, 0));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->reply.accepted, job.Owned(s, TensorKind::kBuffer).size());
    EXPECT_TRUE(out->completed.has_value());
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStateBarrier, TheNewBuffersAreTheFirstOnesPushedWithVwZero) {
  Job job(25);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    const uint32_t buffers = static_cast<uint32_t>(job.Owned(s, TensorKind::kBuffer).size());
    auto out = state->HandlePush(job.BufferPush(s, 0));
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->reply.accepted, buffers);
    // Another copy for VW 0 (a recomputation) is a duplicate, whatever it holds.
    out = state->HandlePush(job.BufferPush(s, 0, /*garbage=*/true));
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->reply.accepted, 0u);
    EXPECT_EQ(out->reply.duplicates, buffers);
    out = state->HandlePush(job.BlockPush(s, 0, Block{0, 4}, /*buffers=*/true, /*garbage=*/false));
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->reply.duplicates, buffers);
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, Block{4, 1}, false)).ok());
    EXPECT_EQ(state->version(), Step(1));
    // Version 1's buffers are VW 0's of step 0, not the initial ones nor the garbage.
    ExpectVersion(*state, job, s, 1);
    for (ChunkId id : job.Owned(s, TensorKind::kBuffer))
      EXPECT_NE(job.Expected(1, id), job.Expected(0, id));
  }
}

// ---------------------------------------------------------------------------
// Duplicates and steps out of turn

TEST(ShardStateDuplicates, TheSameBlockTwiceIsCountedAsDuplicateAndChangesNothing) {
  Job job(30);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    const Push first = job.BlockPush(s, 0, Block{0, 4}, true);
    const uint32_t n = static_cast<uint32_t>(first.chunks.size());
    ASSERT_TRUE(state->HandlePush(first).ok());
    // The same block again, identical or not (it must be identical; the shard cannot tell).
    auto out = state->HandlePush(job.BlockPush(s, 0, Block{0, 4}, true, /*garbage=*/true));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->reply.accepted, 0u);
    EXPECT_EQ(out->reply.duplicates, n);
    EXPECT_FALSE(out->completed.has_value());
    out = state->HandlePush(first);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->reply.duplicates, n);
    EXPECT_EQ(state->duplicates(), 2 * n);
    EXPECT_EQ(state->version(), Step(0));
    out = state->HandlePush(job.BlockPush(s, 0, Block{4, 1}, false));
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(out->completed.has_value());
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStateDuplicates, ABlockOverlappingCountedLeavesIsADuplicate) {
  Job job(31);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, Block{0, 2}, true)).ok());
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, Block{4, 1}, false)).ok());
    uint64_t expected_duplicates = 0;
    // Inside a counted block, containing one, containing both, the whole tree.
    for (Block b : {Block{1, 1}, Block{0, 1}, Block{0, 4}, Block{4, 4}, Block{0, 8}}) {
      const Push garbage = job.BlockPush(s, 0, b, b.lo == 0, /*garbage=*/true);
      auto out = state->HandlePush(garbage);
      ASSERT_TRUE(out.ok()) << b.ToString() << ": " << out.status().ToString();
      EXPECT_EQ(out->reply.accepted, 0u) << b.ToString();
      EXPECT_EQ(out->reply.duplicates, garbage.chunks.size()) << b.ToString();
      EXPECT_FALSE(out->completed.has_value());
      expected_duplicates += garbage.chunks.size();
    }
    EXPECT_EQ(state->duplicates(), expected_duplicates);
    EXPECT_EQ(state->version(), Step(0));
    // The missing leaves complete the step to the tree's bits: the refused values left no trace.
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, Block{2, 1}, false)).ok());
    EXPECT_EQ(state->version(), Step(0));
    auto out = state->HandlePush(job.BlockPush(s, 0, Block{3, 1}, false));
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(out->completed.has_value());
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStateDuplicates, APushForAnAppliedStepIsCountedAsDuplicates) {
  Job job(32);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    RunStep(*state, job, s, 0);
    uint64_t expected_duplicates = 0;
    for (Block b : {Block{0, 4}, Block{4, 1}, Block{0, 8}, Block{2, 1}}) {
      const Push late = job.BlockPush(s, 0, b, b.lo == 0, /*garbage=*/true);
      auto out = state->HandlePush(late);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.step, Step(0));
      EXPECT_EQ(out->reply.accepted, 0u);
      EXPECT_EQ(out->reply.duplicates, late.chunks.size());
      EXPECT_FALSE(out->completed.has_value());
      expected_duplicates += late.chunks.size();
    }
    EXPECT_EQ(state->duplicates(), expected_duplicates);
    EXPECT_EQ(state->version(), Step(1));
    ExpectVersion(*state, job, s, 0);
    ExpectVersion(*state, job, s, 1);
    // Nothing of them reached step 1's barrier.
    RunStep(*state, job, s, 1);
    ExpectVersion(*state, job, s, 2);
    // Two steps back is also late, not an error.
    auto out = state->HandlePush(job.BlockPush(s, 0, Block{0, 1}, true));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out->reply.accepted, 0u);
  }
}

TEST(ShardStateDuplicates, APushForAFutureStepIsAborted) {
  Job job(33);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    for (int64_t t : {1, 2, 100}) {
      Push future = job.BlockPush(s, 0, Block{0, 4}, true, /*garbage=*/true);
      future.step = Step(t);
      EXPECT_EQ(state->HandlePush(future).status().code(), StatusCode::kAborted) << "step " << t;
    }
    EXPECT_EQ(state->duplicates(), 0u);
    EXPECT_EQ(state->version(), Step(0));
    ExpectVersion(*state, job, s, 0);
  }
}

TEST(ShardStateDuplicates, AFuturePushLeavesNoTraceInTheNextStep) {
  Job job(34);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    for (Block b : {Block{0, 4}, Block{4, 1}}) {
      EXPECT_EQ(
          state->HandlePush(job.BlockPush(s, 1, b, b.lo == 0, /*garbage=*/true)).status().code(),
          StatusCode::kAborted);
    }
    EXPECT_EQ(state->duplicates(), 0u);
    RunStep(*state, job, s, 0);
    EXPECT_EQ(state->HandlePush(job.BlockPush(s, 2, Block{0, 4}, true)).status().code(),
              StatusCode::kAborted);
    RunStep(*state, job, s, 1);
    ExpectVersion(*state, job, s, 2);
  }
}

TEST(ShardStateDuplicates, ATrainingPushBeforeTheInitialValuesIsUnavailable) {
  Job job(35);
  auto state = ConfiguredShard(ShardId(0));
  EXPECT_EQ(state->HandlePush(job.BlockPush(ShardId(0), 0, Block{0, 8}, true)).status().code(),
            StatusCode::kUnavailable);
  ASSERT_TRUE(state->HandlePush(job.Init(ShardId(0))).ok());
  RunStep(*state, job, ShardId(0), 0);
  ExpectVersion(*state, job, ShardId(0), 1);
}

// ---------------------------------------------------------------------------
// Validation comes before any state changes

struct BadChunk {
  std::string what;
  ChunkBytes chunk;
};

// Malformed chunks for shard s, to be pushed next to `valid`; the wrong sizes
// are given to `sized`, another chunk of s, so that only the size is wrong.
std::vector<BadChunk> BadChunks(Job& job, ShardId s, ChunkId valid, ChunkId sized) {
  const size_t floats = job.BytesOf(sized) / sizeof(float);
  const Values& longer = job.Raw(floats + 1);
  const Values& shorter = job.Raw(floats - 1);
  const ChunkId foreign = job.Foreign(s, TensorKind::kParameter);
  const Values& foreign_bytes = job.Raw(job.BytesOf(foreign) / sizeof(float));
  const Values& any = job.Raw(floats);
  return {
      {"too many bytes", ChunkBytes{sized, longer.data(), longer.size() * sizeof(float), nullptr}},
      {"too few bytes", ChunkBytes{sized, shorter.data(), shorter.size() * sizeof(float), nullptr}},
      {"one byte short", ChunkBytes{sized, any.data(), any.size() * sizeof(float) - 1, nullptr}},
      {"no bytes", ChunkBytes{sized, any.data(), 0, nullptr}},
      {"unknown chunk id", ChunkBytes{ChunkId(static_cast<uint32_t>(job.layout().chunks.size())),
                                      any.data(), any.size() * sizeof(float), nullptr}},
      {"huge chunk id",
       ChunkBytes{ChunkId(0xffffffffu), any.data(), any.size() * sizeof(float), nullptr}},
      {"chunk of the other shard",
       ChunkBytes{foreign, foreign_bytes.data(), foreign_bytes.size() * sizeof(float), nullptr}},
      {"the valid chunk repeated",
       ChunkBytes{valid, job.Raw(job.BytesOf(valid) / sizeof(float)).data(), job.BytesOf(valid),
                  nullptr}},
  };
}

TEST(ShardStateValidation, APushWithOneInvalidChunkIsRefusedWholeAndCountsNothing) {
  Job job(40);
  for (ShardId s : AllShards()) {
    // A parameter chunk, and another one placed after the bad chunk.
    const ChunkId valid = job.Owned(s, TensorKind::kParameter).at(0);
    const ChunkId second = job.Owned(s, TensorKind::kParameter).at(1);
    const ChunkId sized = job.Owned(s, TensorKind::kParameter).at(2);
    for (const BadChunk& bad : BadChunks(job, s, valid, sized)) {
      SCOPED_TRACE("shard " + std::to_string(s.value()) + ": " + bad.what);
      auto state = InitializedShard(job, s);
      const Block leaf{1, 1};
      const Push good = job.BlockPush(s, 0, leaf, false);
      const Values& valid_bytes = job.Partial(0, valid, leaf);
      const Values& second_bytes = job.Partial(0, second, leaf);
      auto out = state->HandlePush(
          MakePush(0, leaf, {Bytes(valid, valid_bytes), bad.chunk, Bytes(second, second_bytes)}));
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(state->duplicates(), 0u);
      // The valid chunks alone are then accepted, not duplicates: nothing was counted.
      out = state->HandlePush(
          MakePush(0, leaf, {Bytes(valid, valid_bytes), Bytes(second, second_bytes)}));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.accepted, 2u);
      EXPECT_EQ(out->reply.duplicates, 0u);
      // And the step still ends with the tree's bits.
      out = state->HandlePush(good);
      ASSERT_TRUE(out.ok());
      for (Block b : {Block{0, 1}, Block{2, 2}, Block{4, 1}}) {
        ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 0, b, b.lo == 0)).ok()) << b.ToString();
      }
      EXPECT_EQ(state->version(), Step(1));
      ExpectVersion(*state, job, s, 1);
    }
  }
}

TEST(ShardStateValidation, AnInitPushWithOneInvalidChunkStoresNothing) {
  Job job(41);
  for (ShardId s : AllShards()) {
    const ChunkId valid = job.Owned(s, TensorKind::kParameter).at(0);
    const ChunkId sized = job.Owned(s, TensorKind::kParameter).at(2);
    for (const BadChunk& bad : BadChunks(job, s, valid, sized)) {
      SCOPED_TRACE("shard " + std::to_string(s.value()) + ": " + bad.what);
      auto state = ConfiguredShard(s);
      Push push = job.InitOf(valid);
      push.chunks.push_back(bad.chunk);
      EXPECT_EQ(state->HandlePush(push).status().code(), StatusCode::kInvalidArgument);
      auto out = state->HandlePush(job.InitOf(valid));
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.accepted, 1u);
      EXPECT_EQ(out->reply.duplicates, 0u);
    }
  }
}

TEST(ShardStateValidation, ABlockThatIsNotATreeNodeIsInvalid) {
  Job job(42);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    // Misaligned, not a power of two, empty, only absent leaves (V = 5), beyond the tree.
    for (Block b : {Block{1, 2}, Block{2, 4}, Block{0, 3}, Block{0, 0}, Block{3, 0}, Block{5, 1},
                    Block{6, 2}, Block{7, 1}, Block{8, 8}, Block{0, 16}, Block{0xffffffffu, 1}}) {
      // No tree partial exists for b: garbage it is. Blocks starting at 0 carry
      // buffers too, first, so that a shard checking the block only when it
      // reaches a reduced chunk would already have taken them.
      Push push = job.BlockPush(s, 0, b, b.lo == 0, /*garbage=*/true);
      std::stable_partition(push.chunks.begin(), push.chunks.end(), [&](const ChunkBytes& c) {
        return job.Kind(c.chunk) == TensorKind::kBuffer;
      });
      ASSERT_EQ(job.Kind(push.chunks[0].chunk),
                b.lo == 0 ? TensorKind::kBuffer : job.Kind(push.chunks[0].chunk));
      EXPECT_EQ(state->HandlePush(push).status().code(), StatusCode::kInvalidArgument)
          << b.ToString();
    }
    EXPECT_EQ(state->duplicates(), 0u);
    EXPECT_EQ(state->version(), Step(0));
    // Nothing was counted: every leaf is still accepted.
    for (uint32_t v = 0; v < kVws; ++v) {
      const Push push = job.BlockPush(s, 0, Block{v, 1}, v == 0);
      auto out = state->HandlePush(push);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->reply.accepted, push.chunks.size());
      EXPECT_EQ(out->reply.duplicates, 0u);
    }
    ExpectVersion(*state, job, s, 1);
  }
}

// ---------------------------------------------------------------------------
// Pull

// ---- wire dtypes ----------------------------------------------------------------

// A job whose gradients travel in bf16 and weights in fp16: each pushed block is
// the bf16-rounded tree node, the shard keeps rounding as it reduces, optimizes
// the rounded mean in fp32, and serves fp32 masters or their fp16 encoding.
TEST(ShardStateWire, CompressedGradientsReduceOnTheRoundedTreeAndWeightsArePulledEncoded) {
  const WireDType grad = WireDType::kBF16, weight = WireDType::kFP16;
  ShardConfig config = Config();
  config.spec.grad_wire_dtype = grad;
  config.spec.weight_wire_dtype = weight;
  Job job(60);
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    ShardState state(s);
    ASSERT_TRUE(state.Configure(config).ok());
    ASSERT_TRUE(state.HandlePush(job.Init(s)).ok());  // initial values travel as fp32
    ASSERT_EQ(state.version(), Step(0));

    std::deque<std::vector<uint16_t>> wire;  // bytes the pushes point into
    auto block_push = [&](Block b) {
      std::vector<ChunkBytes> chunks;
      for (ChunkId id : job.layout().ChunksOf(s)) {
        if (job.Kind(id) == TensorKind::kBuffer) {
          if (b.lo == 0) chunks.push_back(Bytes(id, job.Buffer(0, id)));
          continue;
        }
        const Values node = ReferenceNode(job.Leaves(0, id), b.lo, b.size, grad);
        wire.emplace_back(node.size());
        EncodeWire(grad, node.data(), node.size(), wire.back().data());
        chunks.push_back(ChunkBytes{id, wire.back().data(), wire.back().size() * 2, nullptr});
      }
      return MakePush(0, b, std::move(chunks));
    };
    // fp32-sized gradient chunks are refused whole.
    auto wrong = state.HandlePush(job.BlockPush(s, 0, Block{0, 4}, true));
    EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
    auto first = state.HandlePush(block_push(Block{0, 2}));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE(state.HandlePush(block_push(Block{2, 1})).ok());
    ASSERT_TRUE(state.HandlePush(block_push(Block{3, 1})).ok());
    // One parameter chunk of the last leaf first: it steps, and is pulled encoded before the step
    // completes.
    const Push tail = block_push(Block{4, 1});
    const auto first_param = std::find_if(
        tail.chunks.begin(), tail.chunks.end(),
        [&](const ChunkBytes& c) { return job.Kind(c.chunk) == TensorKind::kParameter; });
    ASSERT_NE(first_param, tail.chunks.end());
    ASSERT_TRUE(state.HandlePush(MakePush(0, tail.block, {*first_param})).ok());
    Pull early_pull = MakePull(1, {first_param->chunk});
    early_pull.dtype = weight;
    auto early = state.HandlePull(early_pull);
    ASSERT_TRUE(early.ok()) << early.status().ToString();
    ASSERT_EQ(early->chunks.size(), 1u);
    auto last = state.HandlePush(tail);
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    ASSERT_TRUE(last->completed.has_value());
    if (s == job.LossShard()) {
      EXPECT_EQ(last->completed->loss,
                ReferenceNode(job.Leaves(0, job.LossChunk()), 0, Width(kVws), grad)[0] / 5.0f);
    }

    auto masters = state.HandlePull(MakePull(1));
    Pull encoded_pull = MakePull(1);
    encoded_pull.dtype = weight;
    auto encoded = state.HandlePull(encoded_pull);
    ASSERT_TRUE(masters.ok() && encoded.ok());
    ASSERT_EQ(masters->chunks.size(), encoded->chunks.size());
    bool rounding_shows = false;
    for (size_t k = 0; k < masters->chunks.size(); ++k) {
      const ChunkId id = masters->chunks[k].chunk;
      if (job.Kind(id) == TensorKind::kBuffer) {
        EXPECT_TRUE(SameBits(masters->chunks[k], job.Buffer(0, id)));
        EXPECT_TRUE(SameBits(encoded->chunks[k], job.Buffer(0, id))) << "buffers travel as fp32";
        continue;
      }
      const Values sum = ReferenceNode(job.Leaves(0, id), 0, Width(kVws), grad);
      Values next = job.Init(id);
      for (size_t i = 0; i < sum.size(); ++i) next[i] = std::fma(sum[i] / 5.0f, -kLr, next[i]);
      EXPECT_TRUE(SameBits(masters->chunks[k], next)) << "chunk " << id;
      rounding_shows |= next != job.Expected(1, id);
      std::vector<uint16_t> want(next.size());
      EncodeWire(weight, next.data(), next.size(), want.data());
      ASSERT_EQ(encoded->chunks[k].size, want.size() * 2) << "chunk " << id;
      EXPECT_EQ(0, std::memcmp(encoded->chunks[k].data, want.data(), encoded->chunks[k].size))
          << "chunk " << id;
      if (id == first_param->chunk) {
        ASSERT_EQ(early->chunks[0].size, want.size() * 2);
        EXPECT_EQ(0, std::memcmp(early->chunks[0].data, want.data(), want.size() * 2))
            << "pulled before the step completed";
      }
    }
    EXPECT_TRUE(rounding_shows) << "bf16 gradients must change the result against fp32";
    // The previous version is still served encoded; a dtype the job does not use is refused.
    Pull previous = MakePull(0);
    previous.dtype = weight;
    EXPECT_TRUE(state.HandlePull(previous).ok());
    Pull other = MakePull(1);
    other.dtype = WireDType::kBF16;
    EXPECT_EQ(state.HandlePull(other).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ShardStatePull, TheCurrentVersionHoldsEveryOwnedChunk) {
  Job job(50);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    ExpectVersion(*state, job, s, 0);
    // Named chunks come back in the order asked for.
    std::vector<ChunkId> wanted = job.Pullable(s);
    std::reverse(wanted.begin(), wanted.end());
    wanted.pop_back();
    auto reply = state->HandlePull(MakePull(0, wanted));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_EQ(reply->chunks.size(), wanted.size());
    for (size_t k = 0; k < wanted.size(); ++k) {
      EXPECT_EQ(reply->chunks[k].chunk, wanted[k]);
      EXPECT_TRUE(SameBits(reply->chunks[k], job.Expected(0, wanted[k])));
    }
  }
}

TEST(ShardStatePull, APullIntoSharedMemoryGetsTheSameBytesThereAndABadOneStaysInline) {
  Job job(50);
  const ShardId s = AllShards().front();
  auto state = InitializedShard(job, s);
  const std::vector<ChunkId> wanted = job.Pullable(s);
  auto inline_reply = state->HandlePull(MakePull(0, wanted));
  ASSERT_TRUE(inline_reply.ok());
  size_t bytes = 0;
  for (const ChunkBytes& cb : inline_reply->chunks) bytes += cb.size;
  auto region = ShmRegion::Create(ShmRegion::kHeaderBytes + bytes);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  Pull pull = MakePull(0, wanted);
  pull.shm = (*region)->ref();
  uint64_t at = ShmRegion::kHeaderBytes;
  for (const ChunkBytes& cb : inline_reply->chunks) {
    pull.shm_offsets.push_back(at);
    at += cb.size;
  }
  ShmMappings maps;
  auto reply = state->HandlePull(pull);
  ASSERT_TRUE(reply.ok());
  ASSERT_TRUE(MoveIntoShm(pull, &maps, &*reply).ok());
  EXPECT_TRUE(reply->chunks.empty());
  ASSERT_EQ(reply->shm_chunks.size(), wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) {
    const ShmChunk& c = reply->shm_chunks[k];
    EXPECT_EQ(c.chunk, wanted[k]);
    EXPECT_EQ(c.offset, pull.shm_offsets[k]);
    ChunkBytes there{c.chunk, (*region)->data() + c.offset, c.size, nullptr};
    EXPECT_TRUE(SameBits(there, job.Expected(0, wanted[k])));
  }
  // A chunk that would not fit, an offset into the header, a wrong token: inline, the region
  // untouched.
  std::vector<uint8_t> before((*region)->data(), (*region)->data() + (*region)->ref().size);
  Pull too_far = pull;
  too_far.shm_offsets.back() = (*region)->ref().size - 1;
  Pull into_header = pull;
  into_header.shm_offsets.front() = 8;
  Pull wrong_token = pull;
  wrong_token.shm->token ^= 1;
  for (const Pull& bad : {too_far, into_header, wrong_token}) {
    auto r = state->HandlePull(bad);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(MoveIntoShm(bad, &maps, &*r).ok());
    EXPECT_EQ(r->chunks.size(), wanted.size());
    EXPECT_TRUE(r->shm_chunks.empty());
  }
  EXPECT_TRUE(std::equal(before.begin(), before.end(), (*region)->data()));
}

// Moves the bytes of every other chunk of `push` into `region` (after its
// header, one after another) and names them there, as a worker on the same
// host does; the rest stay in the message (as a worker's buffer chunks do).
Push IntoShm(Push push, ShmRegion& region) {
  std::vector<ChunkBytes> kept;
  uint64_t at = ShmRegion::kHeaderBytes;
  push.shm = region.ref();
  for (size_t i = 0; i < push.chunks.size(); ++i) {
    const ChunkBytes& cb = push.chunks[i];
    if (i % 2 == 1) {
      kept.push_back(cb);
      continue;
    }
    if (at + cb.size > region.ref().size) ADD_FAILURE() << "the test region is too small";
    std::memcpy(region.data() + at, cb.data, cb.size);
    push.shm_chunks.push_back({cb.chunk, at, cb.size});
    at += cb.size;
  }
  push.chunks = std::move(kept);
  return push;
}

TEST(ShardStatePush,
     APushFromSharedMemoryStepsAsTheSameInlinePushAndOneItCannotReadChangesNothing) {
  Job job(53);
  for (ShardId s : AllShards()) {
    auto via_shm = InitializedShard(job, s);
    auto region = ShmRegion::Create(1 << 20);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    ShmMappings maps;
    for (int64_t t = 0; t < 2; ++t) {
      for (auto [block, buffers] : {std::pair{Block{0, 4}, true}, std::pair{Block{4, 1}, false}}) {
        Push push = IntoShm(job.BlockPush(s, t, block, buffers), **region);
        ASSERT_FALSE(push.shm_chunks.empty());
        // Chunks outside the region or in its header, a region it cannot map: refused, the push as
        // it was. A region it cannot map is Unimplemented: the worker pushes through the socket.
        for (auto [bad, code] : {std::pair{0, StatusCode::kInvalidArgument},
                                 std::pair{1, StatusCode::kInvalidArgument},
                                 std::pair{2, StatusCode::kUnimplemented}}) {
          Push refused = push;
          if (bad == 0) refused.shm_chunks.back().offset = (*region)->ref().size - 1;
          if (bad == 1) refused.shm_chunks.front().offset = 8;
          if (bad == 2) refused.shm->token ^= 1;
          EXPECT_EQ(ResolveShm(&maps, &refused).code(), code) << bad;
          EXPECT_EQ(refused.chunks.size(), push.chunks.size());
          EXPECT_EQ(refused.shm_chunks.size(), push.shm_chunks.size());
        }
        ASSERT_TRUE(ResolveShm(&maps, &push).ok());
        EXPECT_TRUE(push.shm_chunks.empty());
        auto outcome = via_shm->HandlePush(push);
        ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
        EXPECT_EQ(outcome->reply.duplicates, 0u);
      }
      // The same bits as the inline pushes give (the job's expectation).
      EXPECT_EQ(via_shm->version(), Step(t + 1));
      ExpectVersion(*via_shm, job, s, t + 1);
    }
  }
}

// One worker holding every VW pushes the tree's root whole: the shard steps it from the pushed
// bytes (ShardState::WholeSum) instead of a copy of them. The same bits as the root's halves
// give, with an optimizer that keeps slots, also while a snapshot holds the slots (the step
// writes new ones), and from bytes it cannot read where they lie (misaligned: copied first).
TEST(ShardStatePush, ARootPushedWholeStepsAsItsHalvesWithAdamWAlsoWhileASnapshotHoldsTheSlots) {
  Job job(61);
  ShardConfig config = Config();
  config.spec.optimizer.kind = "adamw";
  config.spec.optimizer.weight_decay = 0.01;
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    auto make = [&] {
      auto state = std::make_unique<ShardState>(s);
      EXPECT_TRUE(state->Configure(config).ok());
      EXPECT_TRUE(state->HandlePush(job.Init(s)).ok());
      return state;
    };
    auto halves = make(), whole = make(), misaligned = make();
    std::deque<std::vector<uint8_t>> shifted_bytes;
    for (int64_t t = 0; t < kSteps; ++t) {
      std::vector<ShardSnapshot> held;  // step 1 runs while a snapshot holds every slot
      for (auto* state : {&halves, &whole, &misaligned}) {
        if (t != 1) continue;
        auto snap = (*state)->Snapshot();
        ASSERT_TRUE(snap.ok()) << snap.status().ToString();
        held.push_back(*std::move(snap));
      }
      RunStep(*halves, job, s, t);
      const Push push = job.BlockPush(s, t, Block{0, 8}, true);
      Push shifted = push;
      for (ChunkBytes& c : shifted.chunks) {  // one byte past an aligned start
        std::vector<uint8_t>& b = shifted_bytes.emplace_back(c.size + 1);
        std::memcpy(b.data() + 1, c.data, c.size);
        c.data = b.data() + 1;
      }
      using Fed = std::pair<ShardState*, const Push*>;
      for (auto [state, p] : {Fed{whole.get(), &push}, Fed{misaligned.get(), &shifted}}) {
        auto out = state->HandlePush(*p);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        EXPECT_EQ(out->reply.duplicates, 0u);
        EXPECT_TRUE(out->completed.has_value());
        EXPECT_EQ(state->HandlePush(*p)->reply.duplicates, p->chunks.size());  // once only
      }
      auto want = halves->HandlePull(MakePull(t + 1));
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      for (ShardState* state : {whole.get(), misaligned.get()}) {
        auto got = state->HandlePull(MakePull(t + 1));
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ASSERT_EQ(got->chunks.size(), want->chunks.size());
        for (size_t i = 0; i < got->chunks.size(); ++i) {
          const ChunkBytes &a = got->chunks[i], &b = want->chunks[i];
          ASSERT_EQ(a.size, b.size);
          EXPECT_EQ(std::memcmp(a.data, b.data, a.size), 0) << "step " << t << " chunk " << a.chunk;
        }
      }
      for (const ChunkBytes& c : want->chunks) {  // AdamW's bits, not the job's SGD ones
        if (t == 0 && job.Kind(c.chunk) == TensorKind::kParameter) {
          EXPECT_FALSE(SameBits(c, job.Expected(1, c.chunk))) << "chunk " << c.chunk;
        }
      }
    }
  }
}

TEST(ShardStatePull, ThePreviousVersionStaysReadableForOneStep) {
  Job job(51);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    EXPECT_EQ(state->HandlePull(MakePull(-1)).status().code(), StatusCode::kFailedPrecondition);
    RunStep(*state, job, s, 0);
    ExpectVersion(*state, job, s, 0);
    ExpectVersion(*state, job, s, 1);
    RunStep(*state, job, s, 1);
    ExpectVersion(*state, job, s, 1);
    ExpectVersion(*state, job, s, 2);
    EXPECT_EQ(state->HandlePull(MakePull(0)).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(state->HandlePull(MakePull(0, {job.Pullable(s)[0]})).status().code(),
              StatusCode::kFailedPrecondition);
    EXPECT_EQ(state->HandlePull(MakePull(-1)).status().code(), StatusCode::kFailedPrecondition);
    // The previous version did not move with the step in progress.
    ASSERT_TRUE(state->HandlePush(job.BlockPush(s, 2, Block{0, 4}, true)).ok());
    ExpectVersion(*state, job, s, 1);
  }
}

TEST(ShardStatePull, AFutureVersionIsUnavailable) {
  Job job(52);
  const ShardId s(0);
  auto state = ConfiguredShard(s);
  EXPECT_EQ(state->HandlePull(MakePull(0)).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(state->HandlePush(job.Init(s)).ok());
  EXPECT_EQ(state->HandlePull(MakePull(1)).status().code(), StatusCode::kUnavailable);
  RunStep(*state, job, s, 0);
  EXPECT_EQ(state->HandlePull(MakePull(2)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(state->HandlePull(MakePull(1000)).status().code(), StatusCode::kUnavailable);
  ExpectVersion(*state, job, s, 1);
}

// What the shard answers (ShardState::Answer): a version past the step in
// progress can only be asked for by a worker of a timeline a rollback or a
// restart abandoned, which must give its plan back at once, not wait.
TEST(ShardStatePull, APullPastTheStepInProgressIsAborted) {
  Job job(52);
  const ShardId s(0);
  auto state = ConfiguredShard(s);
  EXPECT_EQ(state->Answer(MakePull(0)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(state->Answer(MakePull(1)).status().code(), StatusCode::kAborted);
  ASSERT_TRUE(state->HandlePush(job.Init(s)).ok());
  EXPECT_EQ(state->Answer(MakePull(1)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(state->Answer(MakePull(2)).status().code(), StatusCode::kAborted);
  RunStep(*state, job, s, 0);
  EXPECT_EQ(state->Answer(MakePull(2)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(state->Answer(MakePull(3)).status().code(), StatusCode::kAborted);
  EXPECT_EQ(state->Answer(MakePull(1000)).status().code(), StatusCode::kAborted);
  EXPECT_TRUE(state->Answer(MakePull(1)).ok());
}

// A pull of a plan from before the shard's newest timeline (a rollback since)
// is refused at once; one outside any plan (timeline 0) never is.
TEST(ShardStatePull, APullOfAnEarlierTimelineIsAborted) {
  Job job(54);
  const ShardId s(0);
  auto state = ConfiguredShard(s);
  ASSERT_TRUE(state->HandlePush(job.Init(s)).ok());
  RunStep(*state, job, s, 0);
  state->EnterTimeline(3);
  state->EnterTimeline(2);  // a timeline only grows
  EXPECT_EQ(state->timeline(), 3u);
  Pull pull = MakePull(1);
  for (uint64_t timeline : {0, 3, 4}) {
    pull.timeline = timeline;
    EXPECT_TRUE(state->Answer(pull).ok()) << "timeline " << timeline;
  }
  pull.timeline = 2;
  EXPECT_EQ(state->Answer(pull).status().code(), StatusCode::kAborted);
  Pull next = MakePull(2);  // the step in progress: it would wait
  next.timeline = 3;
  EXPECT_EQ(state->Answer(next).status().code(), StatusCode::kUnavailable);
  next.timeline = 1;
  EXPECT_EQ(state->Answer(next).status().code(), StatusCode::kAborted);
}

TEST(ShardStatePull, AChunkNotOnThisShardIsInvalid) {
  Job job(53);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    const ChunkId mine = job.Pullable(s).at(0);
    for (ChunkId bad :
         {job.Foreign(s, TensorKind::kParameter), job.Foreign(s, TensorKind::kBuffer),
          ChunkId(static_cast<uint32_t>(job.layout().chunks.size())), ChunkId(0xffffffffu)}) {
      EXPECT_EQ(state->HandlePull(MakePull(0, {mine, bad})).status().code(),
                StatusCode::kInvalidArgument)
          << bad;
      EXPECT_EQ(state->HandlePull(MakePull(0, {bad})).status().code(), StatusCode::kInvalidArgument)
          << bad;
    }
  }
}

TEST(ShardStatePull, PulledBytesStayValidAndUnchangedAfterLaterSteps) {
  Job job(54);
  for (ShardId s : AllShards()) {
    auto state = InitializedShard(job, s);
    auto v0 = state->HandlePull(MakePull(0));
    ASSERT_TRUE(v0.ok());
    RunStep(*state, job, s, 0);
    auto v1 = state->HandlePull(MakePull(1));
    ASSERT_TRUE(v1.ok());
    auto copy = [](const PullReply& r) {
      std::vector<std::vector<unsigned char>> bytes;
      for (const ChunkBytes& c : r.chunks) {
        const auto* p = static_cast<const unsigned char*>(c.data);
        bytes.emplace_back(p, p + c.size);
      }
      return bytes;
    };
    const auto before0 = copy(*v0);
    const auto before1 = copy(*v1);
    // Two more steps: the shard no longer holds versions 0 and 1 at all.
    RunStep(*state, job, s, 1);
    RunStep(*state, job, s, 2);
    EXPECT_EQ(state->HandlePull(MakePull(1)).status().code(), StatusCode::kFailedPrecondition);
    for (const PullReply* r : {&*v0, &*v1}) {
      for (const ChunkBytes& c : r->chunks) EXPECT_NE(c.owner, nullptr) << "chunk " << c.chunk;
    }
    EXPECT_EQ(copy(*v0), before0);
    EXPECT_EQ(copy(*v1), before1);
    for (const ChunkBytes& c : v0->chunks) EXPECT_TRUE(SameBits(c, job.Expected(0, c.chunk)));
    for (const ChunkBytes& c : v1->chunks) EXPECT_TRUE(SameBits(c, job.Expected(1, c.chunk)));
    ExpectVersion(*state, job, s, 3);
  }
}

// ---------------------------------------------------------------------------
// Durable state: snapshots, restore, rollback (docs/design.md, "Durable state")

// The job's config with another optimizer: "sgd" (the job's plain SGD, whose
// expected values the Job computes), "momentum" (one slot) or "adam" (two).
ShardConfig ConfigWith(const std::string& optimizer) {
  ShardConfig c = Config();
  if (optimizer == "momentum") {
    c.spec.optimizer.momentum = 0.9;
  } else if (optimizer == "adam") {
    c.spec.optimizer.kind = "adam";
    c.spec.optimizer.lr = 0.01;
  }
  return c;
}

std::unique_ptr<ShardState> InitializedShardWith(const Job& job, ShardId s,
                                                 const ShardConfig& config) {
  auto state = std::make_unique<ShardState>(s);
  EXPECT_TRUE(state->Configure(config).ok());
  auto out = state->HandlePush(job.Init(s));
  EXPECT_TRUE(out.ok() && out->completed.has_value());
  return state;
}

std::unique_ptr<StateStore> OpenStore(const std::string& path, ShardId s, int keep = 2) {
  StoreOptions o;
  o.path = path;
  o.job_id = Spec().job_id;
  o.owner = "shard/" + std::to_string(s.value());
  o.keep_checkpoints = keep;
  auto store = StateStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// A snapshot as the store would give it back.
Checkpoint AsCheckpoint(const ShardSnapshot& s) {
  Checkpoint c;
  c.step = s.version;
  c.metadata = s.metadata;
  for (const BlobRef& b : s.blobs)
    c.blobs.push_back({b.name, std::string(static_cast<const char*>(b.data), b.size)});
  return c;
}

Checkpoint SnapshotOf(const ShardState& state) {
  auto snapshot = state.Snapshot();
  EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  return snapshot.ok() ? AsCheckpoint(*snapshot) : Checkpoint();
}

Status WriteSnapshot(StateStore& store, const ShardState& state) {
  EPS_ASSIGN_OR_RETURN(ShardSnapshot s, state.Snapshot());
  return store.WriteCheckpoint(s.version, s.blobs, s.metadata);
}

// Two states hold the same bits: version, values, optimizer slots (all of it is in a snapshot).
void ExpectSameState(const ShardState& a, const ShardState& b) {
  ASSERT_EQ(a.version(), b.version());
  const Checkpoint x = SnapshotOf(a), y = SnapshotOf(b);
  EXPECT_EQ(x.step, y.step);
  EXPECT_EQ(x.metadata, y.metadata);
  ASSERT_EQ(x.blobs.size(), y.blobs.size());
  for (size_t i = 0; i < x.blobs.size(); ++i) {
    EXPECT_EQ(x.blobs[i].name, y.blobs[i].name);
    EXPECT_TRUE(x.blobs[i].bytes == y.blobs[i].bytes) << "blob " << x.blobs[i].name << " differs";
  }
}

int SlotBlobs(const Checkpoint& c) {
  int n = 0;
  for (const Blob& b : c.blobs) n += b.name.rfind("slot", 0) == 0;
  return n;
}

TEST(ShardStateDurable, ASnapshotBeforeTheInitialValuesIsRefused) {
  auto state = ConfiguredShard(ShardId(0));
  EXPECT_EQ(state->Snapshot().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ShardState(ShardId(0)).Snapshot().status().code(), StatusCode::kFailedPrecondition);
}

TEST(ShardStateDurable, ASnapshotHoldsValuesAndExactlyTheOptimizerSlotsInUse) {
  const std::vector<std::pair<std::string, int>> cases = {{"sgd", 0}, {"momentum", 1}, {"adam", 2}};
  for (const auto& [optimizer, slots] : cases) {
    SCOPED_TRACE(optimizer);
    Job job(60);
    const ShardId s(0);
    auto state = InitializedShardWith(job, s, ConfigWith(optimizer));
    const size_t params = job.Owned(s, TensorKind::kParameter).size();
    EXPECT_EQ(SnapshotOf(*state).blobs.size(),
              job.Pullable(s).size());  // no optimizer state before step 0
    RunStep(*state, job, s, 0);
    const Checkpoint c = SnapshotOf(*state);
    EXPECT_EQ(c.step, Step(1));
    EXPECT_EQ(static_cast<size_t>(SlotBlobs(c)), params * slots);
    EXPECT_EQ(c.blobs.size(), job.Pullable(s).size() + params * slots);
  }
}

TEST(ShardStateDurable, ASnapshotStaysUnchangedWhileTheStateMovesOn) {
  Job job(61);
  const ShardId s(1);
  auto state = InitializedShardWith(job, s, ConfigWith("adam"));
  RunStep(*state, job, s, 0);
  auto snapshot = state->Snapshot();
  ASSERT_TRUE(snapshot.ok());
  const Checkpoint before = AsCheckpoint(*snapshot);
  RunStep(*state, job, s, 1);
  RunStep(*state, job, s, 2);
  const Checkpoint after = AsCheckpoint(*snapshot);
  ASSERT_EQ(before.blobs.size(), after.blobs.size());
  for (size_t i = 0; i < before.blobs.size(); ++i) {
    EXPECT_TRUE(before.blobs[i].bytes == after.blobs[i].bytes) << before.blobs[i].name;
  }
  EXPECT_NE(SnapshotOf(*state).blobs[0].bytes, before.blobs[0].bytes);  // the state did move on
}

// A snapshot copies nothing: it shares the optimizer slots as it shares the values, and a
// step while it holds them writes new slots (the same bits as a state never snapshotted),
// leaving the snapshot's as they were; once it is let go, the state steps them in place again.
TEST(ShardStateDurable, ASnapshotSharesTheSlotsAndTheStateStepsOnToTheSameBits) {
  for (const std::string optimizer : {"momentum", "adam"}) {
    SCOPED_TRACE(optimizer);
    Job job(64);
    const ShardId s(0);
    ASSERT_FALSE(job.Owned(s, TensorKind::kParameter).empty());
    auto state = InitializedShardWith(job, s, ConfigWith(optimizer));
    auto never = InitializedShardWith(job, s, ConfigWith(optimizer));  // never snapshotted
    RunStep(*state, job, s, 0);
    RunStep(*never, job, s, 0);
    auto first = state->Snapshot(), second = state->Snapshot();
    ASSERT_TRUE(first.ok() && second.ok());
    ASSERT_EQ(first->blobs.size(), second->blobs.size());
    int slots = 0;
    for (size_t i = 0; i < first->blobs.size(); ++i) {
      EXPECT_EQ(first->blobs[i].data, second->blobs[i].data) << first->blobs[i].name << " copied";
      slots += first->blobs[i].name.rfind("slot", 0) == 0;
    }
    EXPECT_GT(slots, 0);
    const Checkpoint held = AsCheckpoint(*first);
    RunStep(*state, job, s, 1);  // while both snapshots hold the slots
    RunStep(*never, job, s, 1);
    ExpectSameState(*state, *never);
    const Checkpoint after = AsCheckpoint(*first);
    for (size_t i = 0; i < held.blobs.size(); ++i)
      EXPECT_TRUE(held.blobs[i].bytes == after.blobs[i].bytes) << held.blobs[i].name;
    first = Unavailable("let go");
    second = Unavailable("let go");
    // Held alone again: stepped in place, in the buffers the last snapshot saw.
    auto third = state->Snapshot();
    ASSERT_TRUE(third.ok());
    std::vector<const void*> where;
    for (const BlobRef& b : third->blobs) where.push_back(b.data);
    third = Unavailable("let go");
    RunStep(*state, job, s, 2);
    RunStep(*never, job, s, 2);
    ExpectSameState(*state, *never);
    auto fourth = state->Snapshot();
    ASSERT_TRUE(fourth.ok());
    for (size_t i = 0; i < where.size(); ++i) {
      if (fourth->blobs[i].name.rfind("slot", 0) == 0) {
        EXPECT_EQ(fourth->blobs[i].data, where[i]) << fourth->blobs[i].name << " moved";
      }
    }
  }
}

// Restore after reopening the store gives the same bits, version and optimizer
// state, and the restored shard then trains on exactly as the original.
TEST(ShardStateDurable, RestoreAfterReopeningGivesTheSameBitsAndTrainsOnIdentically) {
  for (const std::string optimizer : {"sgd", "momentum", "adam"}) {
    for (ShardId s : AllShards()) {
      SCOPED_TRACE(optimizer + ", shard " + std::to_string(s.value()));
      TempDir dir;
      Job job(62);
      auto original = InitializedShardWith(job, s, ConfigWith(optimizer));
      RunStep(*original, job, s, 0);
      {
        auto store = OpenStore(dir.Sub("store"), s);
        ASSERT_NE(store, nullptr);
        ASSERT_TRUE(WriteSnapshot(*store, *original).ok());
      }
      auto store = OpenStore(dir.Sub("store"), s);
      ASSERT_NE(store, nullptr);
      auto checkpoint = store->LatestCheckpoint();
      ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
      ShardState restored(s);  // knows nothing: the checkpoint carries the job config
      ASSERT_TRUE(restored.Restore(*checkpoint).ok());
      EXPECT_EQ(restored.version(), Step(1));
      EXPECT_TRUE(restored.has_layout());
      EXPECT_EQ(restored.chunks(), original->chunks());
      ExpectSameState(restored, *original);
      // The coordinator's config is accepted again; the previous version is not kept.
      EXPECT_TRUE(restored.Configure(ConfigWith(optimizer)).ok());
      EXPECT_EQ(restored.HandlePull(MakePull(0)).status().code(), StatusCode::kFailedPrecondition);
      for (int64_t t = 1; t < kSteps; ++t) {
        RunStep(*original, job, s, t);
        RunStep(restored, job, s, t);
        ExpectSameState(restored, *original);
      }
      if (optimizer == "sgd") ExpectVersion(restored, job, s, kSteps);
    }
  }
}

// The contract's promise for a crash: roll back to an older checkpoint, replay
// the same pushes, and every bit comes out as in the uninterrupted run.
TEST(ShardStateDurable, RollbackToAnOlderCheckpointThenReplayingGivesTheSameBits) {
  for (const std::string optimizer : {"sgd", "momentum", "adam"}) {
    for (ShardId s : AllShards()) {
      SCOPED_TRACE(optimizer + ", shard " + std::to_string(s.value()));
      TempDir dir;
      Job job(63);
      auto uninterrupted = InitializedShardWith(job, s, ConfigWith(optimizer));
      for (int64_t t = 0; t < kSteps; ++t) RunStep(*uninterrupted, job, s, t);

      auto store = OpenStore(dir.Sub("store"), s);
      ASSERT_NE(store, nullptr);
      auto state = InitializedShardWith(job, s, ConfigWith(optimizer));
      ASSERT_TRUE(WriteSnapshot(*store, *state).ok());  // version 0
      RunStep(*state, job, s, 0);
      ASSERT_TRUE(WriteSnapshot(*store, *state).ok());  // version 1
      RunStep(*state, job, s, 1);
      ASSERT_TRUE(WriteSnapshot(*store, *state).ok());  // version 2: the store keeps {1, 2}
      RunStep(*state, job, s, 2);
      ASSERT_EQ(store->ListCheckpoints().value(), (std::vector<Step>{Step(1), Step(2)}));

      ASSERT_TRUE(state->RollbackTo(*store, Step(1)).ok());
      EXPECT_EQ(state->version(), Step(1));
      // The abandoned future is gone from the store too: a restart comes back to step 1.
      EXPECT_EQ(store->ListCheckpoints().value(), (std::vector<Step>{Step(1)}));
      // A push of the abandoned future is refused; the replay is accepted.
      EXPECT_EQ(state->HandlePush(job.BlockPush(s, 2, Block{0, 4}, true)).status().code(),
                StatusCode::kAborted);
      RunStep(*state, job, s, 1);
      RunStep(*state, job, s, 2);
      ExpectSameState(*state, *uninterrupted);
      if (optimizer == "sgd") ExpectVersion(*state, job, s, kSteps);
    }
  }
}

// A StateStore that counts the checkpoints read through it.
class CountingStore final : public StateStore {
 public:
  explicit CountingStore(StateStore* store) : store_(store) {}
  int reads() const { return reads_; }
  const std::string& path() const override { return store_->path(); }
  const std::string& job_id() const override { return store_->job_id(); }
  const std::string& owner() const override { return store_->owner(); }
  Status WriteCheckpoint(Step step, const std::vector<BlobRef>& blobs,
                         std::string_view metadata) override {
    return store_->WriteCheckpoint(step, blobs, metadata);
  }
  void RetainFrom(Step step) override { store_->RetainFrom(step); }
  StatusOr<std::vector<Step>> ListCheckpoints() const override { return store_->ListCheckpoints(); }
  StatusOr<Checkpoint> LatestCheckpoint() const override {
    ++reads_;
    return store_->LatestCheckpoint();
  }
  StatusOr<Checkpoint> ReadCheckpoint(Step step) const override {
    ++reads_;
    return store_->ReadCheckpoint(step);
  }
  Status DropCheckpointsAfter(Step step) override { return store_->DropCheckpointsAfter(step); }
  Status Put(std::string_view key, std::string_view value) override {
    return store_->Put(key, value);
  }
  Status PutAll(const std::vector<std::pair<std::string, std::string>>& entries) override {
    return store_->PutAll(entries);
  }
  StatusOr<std::string> Get(std::string_view key) const override { return store_->Get(key); }
  Status Delete(std::string_view key) override { return store_->Delete(key); }

 private:
  StateStore* const store_;
  mutable int reads_ = 0;
};

// What a restarted shard does: it restores its newest checkpoint, and the job then rolls back
// to that same step. The state holds the checkpoint's bits already: the rollback reads
// nothing (at 1.3 GB a second read and copy of the whole state), drops the step in progress
// and the newer checkpoints, and the replay gives the same bits. Once a chunk has been
// stepped since the restore, a rollback reads the checkpoint again.
TEST(ShardStateDurable, ARollbackToTheStepJustRestoredReadsNothingAndGivesTheSameBits) {
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    TempDir dir;
    Job job(66);
    auto uninterrupted = InitializedShardWith(job, s, ConfigWith("adam"));
    for (int64_t t = 0; t < kSteps; ++t) RunStep(*uninterrupted, job, s, t);

    auto rocks = OpenStore(dir.Sub("store"), s);
    ASSERT_NE(rocks, nullptr);
    CountingStore store(rocks.get());
    auto original = InitializedShardWith(job, s, ConfigWith("adam"));
    RunStep(*original, job, s, 0);
    ASSERT_TRUE(WriteSnapshot(store, *original).ok());  // version 1
    RunStep(*original, job, s, 1);
    ASSERT_TRUE(WriteSnapshot(store, *original).ok());  // version 2: dropped by the rollback

    ShardState state(s);
    auto one = store.ReadCheckpoint(Step(1));
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    ASSERT_TRUE(state.Restore(std::move(one).value()).ok());
    ASSERT_TRUE(state.HandlePush(job.BlockPush(s, 1, Block{0, 4}, true)).ok());  // in progress
    const int reads = store.reads();
    ASSERT_TRUE(state.RollbackTo(store, Step(1)).ok());
    EXPECT_EQ(store.reads(), reads) << "the rollback read the checkpoint the state holds";
    EXPECT_EQ(state.version(), Step(1));
    EXPECT_EQ(store.ListCheckpoints().value(), (std::vector<Step>{Step(1)}));
    RunStep(state, job, s, 1);  // the block pushed before the rollback is gone
    RunStep(state, job, s, 2);
    ExpectSameState(state, *uninterrupted);

    // Stepped since: read again.
    ASSERT_TRUE(state.RollbackTo(store, Step(1)).ok());
    EXPECT_EQ(store.reads(), reads + 1);
    ASSERT_TRUE(state.HandlePush(job.BlockPush(s, 1, Block{0, 4}, true)).ok());
    ASSERT_TRUE(state.HandlePush(job.BlockPush(s, 1, Block{4, 1}, false)).ok());
    ASSERT_TRUE(state.RollbackTo(store, Step(1)).ok());
    EXPECT_EQ(store.reads(), reads + 2);
    RunStep(state, job, s, 1);
    RunStep(state, job, s, 2);
    ExpectSameState(state, *uninterrupted);
  }
}

TEST(ShardStateDurable, RollbackToAStepNotHeldIsInvalidAndChangesNothing) {
  TempDir dir;
  Job job(64);
  const ShardId s(0);
  auto store = OpenStore(dir.Sub("store"), s);
  ASSERT_NE(store, nullptr);
  auto state = InitializedShard(job, s);
  ASSERT_TRUE(WriteSnapshot(*store, *state).ok());
  RunStep(*state, job, s, 0);
  RunStep(*state, job, s, 1);
  ASSERT_TRUE(WriteSnapshot(*store, *state).ok());
  RunStep(*state, job, s, 2);
  const Checkpoint before = SnapshotOf(*state);
  for (int64_t step : {1, 3, 7, -1}) {
    const Status st = state->RollbackTo(*store, Step(step));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << step << ": " << st.ToString();
  }
  EXPECT_EQ(state->version(), Step(3));
  EXPECT_EQ(SnapshotOf(*state).blobs[0].bytes, before.blobs[0].bytes);
  EXPECT_EQ(store->ListCheckpoints().value(), (std::vector<Step>{Step(0), Step(2)}));
  ExpectVersion(*state, job, s, 3);
  ExpectVersion(*state, job, s, 2);  // the previous version is still served
}

TEST(ShardStateDurable, RestoreRefusesAnotherShardsOrJobsCheckpointAndChangesNothing) {
  Job job(65);
  auto zero = InitializedShard(job, ShardId(0));
  RunStep(*zero, job, ShardId(0), 0);
  const Checkpoint c = SnapshotOf(*zero);

  auto one = InitializedShard(job, ShardId(1));
  Status st = one->Restore(c);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(one->version(), Step(0));
  ExpectVersion(*one, job, ShardId(1), 0);

  ShardConfig other = Config();
  other.spec.seed = 8;
  ShardState other_job(ShardId(0));
  ASSERT_TRUE(other_job.Configure(other).ok());
  st = other_job.Restore(c);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(other_job.version(), Step(-1));

  ShardConfig other_model = Config();
  other_model.tensors[0].shape = {3, 6};
  ShardState other_layout(ShardId(0));
  ASSERT_TRUE(other_layout.Configure(other_model).ok());
  EXPECT_EQ(other_layout.Restore(c).code(), StatusCode::kFailedPrecondition);
}

TEST(ShardStateDurable, AMalformedCheckpointIsDataLossAndChangesNothing) {
  Job job(66);
  const ShardId s(0);
  auto source = InitializedShardWith(job, s, ConfigWith("momentum"));
  RunStep(*source, job, s, 0);
  const Checkpoint good = SnapshotOf(*source);
  ASSERT_GE(SlotBlobs(good), 1);
  std::vector<std::pair<std::string, Checkpoint>> bad;
  auto edit = [&](const std::string& what, const std::function<void(Checkpoint&)>& f) {
    Checkpoint c = good;
    f(c);
    bad.emplace_back(what, std::move(c));
  };
  edit("a value missing", [](Checkpoint& c) { c.blobs.erase(c.blobs.begin()); });
  edit("a slot missing", [](Checkpoint& c) {
    c.blobs.erase(std::find_if(c.blobs.begin(), c.blobs.end(),
                               [](const Blob& b) { return b.name.rfind("slot", 0) == 0; }));
  });
  edit("a value one byte short", [](Checkpoint& c) { c.blobs[0].bytes.pop_back(); });
  edit("a value one float long", [](Checkpoint& c) { c.blobs[0].bytes.append(4, '\0'); });
  edit("an unknown blob", [](Checkpoint& c) { c.blobs.push_back({"value/9999", "abcd"}); });
  edit("a blob twice", [](Checkpoint& c) { c.blobs.push_back(c.blobs[0]); });
  edit("slots at version 0", [](Checkpoint& c) { c.step = Step(0); });
  edit("a negative step", [](Checkpoint& c) { c.step = Step(-1); });
  edit("no metadata", [](Checkpoint& c) { c.metadata.clear(); });
  edit("a bad header", [](Checkpoint& c) { c.metadata[0] = 'X'; });
  edit("a truncated config", [](Checkpoint& c) { c.metadata.resize(c.metadata.size() - 9); });
  edit("a flipped config byte",
       [](Checkpoint& c) { c.metadata[c.metadata.find('\n') + 3] ^= 0x7f; });
  for (const auto& [what, c] : bad) {
    SCOPED_TRACE(what);
    auto state = InitializedShardWith(job, s, ConfigWith("momentum"));
    const Status st = state->Restore(c);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    EXPECT_EQ(state->version(), Step(0));
    ExpectVersion(*state, job, s, 0);
    // A fresh state refuses it the same way.
    ShardState fresh(s);
    EXPECT_FALSE(fresh.Restore(c).ok());
    EXPECT_FALSE(fresh.has_layout());
  }
  ShardState fresh(s);
  EXPECT_TRUE(fresh.Restore(good).ok());
}

// ---------------------------------------------------------------------------
// The shard service with a store: a fake coordinator and a fake worker on
// loopback drive a real Shard running on its own thread.

class FakeWorker : public ShardClient {
 public:
  using ShardClient::ShardClient;
  void Push(const eps::Push& push) {
    auto reply = Send(push);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(std::holds_alternative<PushReply>(reply->body));
  }
  void Step(Job& job, ShardId s, int64_t t) {
    Push(job.BlockPush(s, t, Block{0, 4}, true));
    Push(job.BlockPush(s, t, Block{4, 1}, false));
  }
  // Pulls `version` and compares it with the job's expectation.
  void ExpectVersion(const Job& job, ShardId s, int64_t version) {
    SCOPED_TRACE("version " + std::to_string(version));
    auto reply = Send(MakePull(version));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    auto* pulled = std::get_if<PullReply>(&reply->body);
    ASSERT_NE(pulled, nullptr);
    ASSERT_EQ(pulled->chunks.size(), job.Pullable(s).size());
    for (const ChunkBytes& c : pulled->chunks)
      EXPECT_TRUE(SameBits(c, job.Expected(version, c.chunk))) << c.chunk;
  }
};

ShardOptions StoreShardOptions(const FakeCoordinator& coordinator, const std::string& store,
                               ShardId s) {
  ShardOptions o;
  o.shard = s;
  o.coordinator = coordinator.endpoint();
  o.store_path = store;
  o.checkpoint_every = 1;
  o.store_wait = std::chrono::milliseconds(20000);
  return o;
}

auto DurableAt(int64_t step) {
  return std::function<bool(const StepDone&)>(
      [step](const StepDone& d) { return d.durable_step == Step(step); });
}

TEST(ShardStateWire, ARestoredStateServesItsWeightsEncodedToo) {
  ShardConfig config = Config();
  config.spec.weight_wire_dtype = WireDType::kBF16;
  Job job(61);
  const ShardId s(0);
  ShardState source(s);
  ASSERT_TRUE(source.Configure(config).ok());
  ASSERT_TRUE(source.HandlePush(job.Init(s)).ok());
  ShardState restored(s);
  ASSERT_TRUE(restored.Restore(SnapshotOf(source)).ok());
  Pull pull = MakePull(0);
  pull.dtype = WireDType::kBF16;
  auto want = source.HandlePull(pull);
  auto got = restored.HandlePull(pull);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  ASSERT_EQ(want->chunks.size(), got->chunks.size());
  for (size_t k = 0; k < got->chunks.size(); ++k) {
    ASSERT_EQ(want->chunks[k].size, got->chunks[k].size);
    EXPECT_EQ(0, std::memcmp(want->chunks[k].data, got->chunks[k].data, got->chunks[k].size));
    if (job.Kind(got->chunks[k].chunk) == TensorKind::kParameter) {
      EXPECT_EQ(got->chunks[k].size, job.BytesOf(got->chunks[k].chunk) / 2);
    }
  }
}

TEST(ShardService, CheckpointsEveryStepRestoresAfterARestartAndRollsBackOnRequest) {
  zmq::context_t context(1);
  TempDir dir;
  Job job(70);
  const ShardId s(0);
  FakeCoordinator coordinator(&context);
  {
    // A first life: no store yet; it is created once the coordinator names the job.
    RunningShard running(&context, StoreShardOptions(coordinator, dir.Sub("store"), s));
    ASSERT_TRUE(running.open_status().ok()) << running.open_status().ToString();
    EXPECT_EQ(running.shard()->restored_version(), Step(-1));
    auto reg = coordinator.Next<RegisterShard>();
    ASSERT_TRUE(reg.has_value());
    EXPECT_EQ(reg->durable_step, Step(-1));
    EXPECT_EQ(reg->version, Step(-1));
    coordinator.Send(Config());
    FakeWorker worker(&context, reg->address);
    worker.Push(job.Init(s));
    ASSERT_TRUE(coordinator.Next<StepDone>(DurableAt(0)).has_value());  // version 0 is durable
    for (int64_t t = 0; t < kSteps; ++t) {
      worker.Step(job, s, t);
      auto done = coordinator.Next<StepDone>(DurableAt(t + 1));
      ASSERT_TRUE(done.has_value());
      EXPECT_EQ(done->step, Step(t));
      EXPECT_EQ(done->checkpoint_error, "");
    }
    coordinator.Send(Shutdown{"first life over"});
    EXPECT_TRUE(running.Join().ok());
  }
  {
    // No coordinator named a retention floor: every checkpoint is still held.
    auto store = OpenStore(dir.Sub("store"), s);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->ListCheckpoints().value(),
              (std::vector<Step>{Step(0), Step(1), Step(2), Step(3)}));
  }
  {
    // A restart on the same store restores version 3 before it registers.
    RunningShard running(&context, StoreShardOptions(coordinator, dir.Sub("store"), s));
    ASSERT_TRUE(running.open_status().ok()) << running.open_status().ToString();
    EXPECT_EQ(running.shard()->restored_version(), Step(kSteps));
    // Not a beacon of the first life still queued: this life's address.
    const std::string address = running.shard()->endpoint();
    auto reg = coordinator.Next<RegisterShard>(
        [&](const RegisterShard& r) { return r.address == address; });
    ASSERT_TRUE(reg.has_value());
    EXPECT_EQ(reg->durable_step, Step(kSteps));
    EXPECT_EQ(reg->version, Step(kSteps));
    FakeWorker worker(&context, reg->address);
    worker.ExpectVersion(job, s, kSteps);  // served before any config arrived
    coordinator.Send(Config());
    // Every shard holds step 2 now: older checkpoints may go at the next write.
    coordinator.Send(Retain{Step(2)});

    // Roll back to a step it holds: version 2 again, and replaying step 2 gives version 3's bits.
    coordinator.Send(Rollback{Step(2)});
    auto done = coordinator.Next<RollbackDone>();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->code, StatusCode::kOk) << done->message;
    EXPECT_EQ(done->step, Step(2));
    EXPECT_EQ(done->version, Step(2));
    EXPECT_EQ(done->durable_step, Step(2));
    worker.ExpectVersion(job, s, 2);
    worker.Step(job, s, 2);
    const auto durable3 = coordinator.Next<StepDone>(DurableAt(3));
    ASSERT_TRUE(durable3.has_value());
    EXPECT_GT(durable3->checkpoint_write_ms, 0) << "the write of checkpoint 3 was timed";
    EXPECT_GT(durable3->checkpoint_blocking_ms, 0) << "and the snapshot it stopped the loop for";
    worker.ExpectVersion(job, s, 3);

    // Writing step 3 dropped the steps below the floor: a rollback to 0 is refused, nothing
    // changes.
    coordinator.Send(Rollback{Step(0)});
    auto refused = coordinator.Next<RollbackDone>();
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->code, StatusCode::kInvalidArgument) << refused->message;
    EXPECT_EQ(refused->version, Step(kSteps));
    worker.ExpectVersion(job, s, kSteps);
    coordinator.Send(Shutdown{"done"});
    EXPECT_TRUE(running.Join().ok());
  }
  // The store belongs to this job and this shard: nobody else may open it.
  ShardOptions other = StoreShardOptions(coordinator, dir.Sub("store"), s);
  other.job_id = "another-job";
  RunningShard wrong_job(&context, other);
  EXPECT_EQ(wrong_job.open_status().code(), StatusCode::kFailedPrecondition)
      << wrong_job.open_status().ToString();
  RunningShard wrong_shard(&context, StoreShardOptions(coordinator, dir.Sub("store"), ShardId(1)));
  EXPECT_EQ(wrong_shard.open_status().code(), StatusCode::kFailedPrecondition)
      << wrong_shard.open_status().ToString();
}

// A pull waiting for the step in progress when the job rolls back waits for a
// future the rollback abandoned: the shard refuses it at once (Aborted), and
// its worker takes the new timeline's plan, instead of holding it until
// --pull_wait_ms (a minute here) runs out while no worker can make that step.
TEST(ShardService, ARollbackRefusesThePullsWaitingForTheAbandonedFutureAtOnce) {
  zmq::context_t context(1);
  TempDir dir;
  Job job(72);
  const ShardId s(0);
  FakeCoordinator coordinator(&context);
  ShardOptions o = StoreShardOptions(coordinator, dir.Sub("store"), s);
  o.pull_wait = std::chrono::milliseconds(60000);
  RunningShard running(&context, o);
  ASSERT_TRUE(running.open_status().ok()) << running.open_status().ToString();
  auto reg = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(reg.has_value());
  ShardConfig config = Config();
  config.timeline = 1;
  coordinator.Send(config);
  FakeWorker worker(&context, reg->address);
  worker.Push(job.Init(s));
  for (int64_t t = 0; t < 2; ++t) worker.Step(job, s, t);
  ASSERT_TRUE(coordinator.Next<StepDone>(DurableAt(2)).has_value());

  FakeWorker waiting(&context, reg->address);
  Pull next = MakePull(3);  // step 2 is in progress: it waits for the step's pushes
  next.timeline = 1;
  waiting.Post(next);
  EXPECT_EQ(waiting.Await(std::chrono::milliseconds(300)).status().code(),
            StatusCode::kDeadlineExceeded)
      << "the pull of the step in progress waits";
  coordinator.Send(Rollback{Step(1), 2});
  auto done = coordinator.Next<RollbackDone>();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->code, StatusCode::kOk) << done->message;
  auto refused = waiting.Await(std::chrono::milliseconds(10000));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  auto* err = std::get_if<ErrorReply>(&refused->body);
  ASSERT_NE(err, nullptr) << BodyName(refused->body);
  EXPECT_EQ(err->code, StatusCode::kAborted) << err->message;

  // A pull of the old timeline that arrives later is refused as well; the new one is served.
  Pull late = MakePull(2);
  late.timeline = 1;
  EXPECT_EQ(worker.Send(late).status().code(), StatusCode::kAborted);
  worker.ExpectVersion(job, s, 1);
  coordinator.Send(Shutdown{"done"});
  EXPECT_TRUE(running.Join().ok());
}

TEST(ShardService, AShardWithoutAStoreRefusesARollbackAndServesOn) {
  zmq::context_t context(1);
  Job job(71);
  const ShardId s(1);
  FakeCoordinator coordinator(&context);
  ShardOptions o;
  o.shard = s;
  o.coordinator = coordinator.endpoint();
  RunningShard running(&context, o);
  ASSERT_TRUE(running.open_status().ok());
  auto reg = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(reg->durable_step, Step(-1));
  coordinator.Send(Config());
  FakeWorker worker(&context, reg->address);
  worker.Push(job.Init(s));
  worker.Step(job, s, 0);
  auto done = coordinator.Next<StepDone>([](const StepDone& d) { return d.step == Step(0); });
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->durable_step, Step(-1));
  coordinator.Send(Rollback{Step(0)});
  auto refused = coordinator.Next<RollbackDone>();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused->version, Step(1));
  worker.ExpectVersion(job, s, 1);
  coordinator.Send(Shutdown{"done"});
  EXPECT_TRUE(running.Join().ok());
}

TEST(ShardService, RegistersAgainEveryIntervalWithTheVersionItServes) {
  zmq::context_t context(1);
  Job job(72);
  const ShardId s(0);
  FakeCoordinator coordinator(&context);
  ShardOptions o;
  o.shard = s;
  o.coordinator = coordinator.endpoint();
  o.register_every = std::chrono::milliseconds(20);
  RunningShard running(&context, o);
  ASSERT_TRUE(running.open_status().ok());
  auto reg = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(reg->version, Step(-1));
  // Beacons come on their own, on an idle shard, before any config.
  auto beacon = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(beacon.has_value());
  EXPECT_EQ(beacon->shard, s);
  EXPECT_EQ(beacon->address, reg->address);
  EXPECT_EQ(beacon->version, Step(-1));
  coordinator.Send(Config());
  FakeWorker worker(&context, reg->address);
  worker.Push(job.Init(s));
  worker.Step(job, s, 0);
  auto at_one =
      coordinator.Next<RegisterShard>([](const RegisterShard& r) { return r.version == Step(1); });
  ASSERT_TRUE(at_one.has_value());
  EXPECT_EQ(at_one->durable_step, Step(-1));  // no store
  coordinator.Send(Shutdown{"done"});
  EXPECT_TRUE(running.Join().ok());
}

TEST(ShardService, ServesOnThroughTransientCoordinatorErrorsAndStopsOnAConfigItCannotServe) {
  for (StatusCode fatal : {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
                           StatusCode::kProtocolError}) {
    SCOPED_TRACE(StatusCodeName(fatal));
    zmq::context_t context(1);
    Job job(73);
    const ShardId s(1);
    FakeCoordinator coordinator(&context);
    ShardOptions o;
    o.shard = s;
    o.coordinator = coordinator.endpoint();
    o.register_every = std::chrono::milliseconds(20);
    RunningShard running(&context, o);
    ASSERT_TRUE(running.open_status().ok());
    auto reg = coordinator.Next<RegisterShard>();
    ASSERT_TRUE(reg.has_value());
    coordinator.Send(Config());
    FakeWorker worker(&context, reg->address);
    worker.Push(job.Init(s));
    // What a restarted coordinator, or one in the middle of a rollback, may answer.
    for (int i = 0; i < 3; ++i) {
      coordinator.Send(ErrorReply{StatusCode::kNotFound, "unknown shard"});
      coordinator.Send(ErrorReply{StatusCode::kAborted, "rolling back"});
      coordinator.Send(ErrorReply{StatusCode::kUnavailable, "not ready"});
    }
    worker.Step(job, s, 0);
    worker.ExpectVersion(job, s, 1);  // serves on
    auto beacon = coordinator.Next<RegisterShard>(
        [](const RegisterShard& r) { return r.version == Step(1); });
    ASSERT_TRUE(beacon.has_value());  // and keeps registering
    coordinator.Send(ErrorReply{fatal, "shard id 1 but the job has 1 shards"});
    const Status st = running.Join();
    EXPECT_EQ(st.code(), fatal) << st.ToString();
  }
}

// A shard that cannot read a push's shared memory (--refuse_shm_pushes, or a region it cannot
// map) answers Unimplemented, "do it another way", and takes the same push through the socket.
TEST(ShardService, APushInSharedMemoryItCannotReadIsUnimplementedAndTheSocketServes) {
  for (bool refuse : {true, false}) {
    SCOPED_TRACE(refuse ? "--refuse_shm_pushes" : "a region it cannot map");
    zmq::context_t context(1);
    Job job(79);
    const ShardId s(0);
    FakeCoordinator coordinator(&context);
    ShardOptions o;
    o.shard = s;
    o.coordinator = coordinator.endpoint();
    o.refuse_shm_pushes = refuse;
    RunningShard running(&context, o);
    ASSERT_TRUE(running.open_status().ok());
    auto reg = coordinator.Next<RegisterShard>();
    ASSERT_TRUE(reg.has_value());
    coordinator.Send(Config());
    FakeWorker worker(&context, reg->address);
    worker.Push(job.Init(s));
    auto region = ShmRegion::Create(1 << 20);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    Push push = IntoShm(job.BlockPush(s, 0, Block{0, 4}, true), **region);
    ASSERT_FALSE(push.shm_chunks.empty());
    if (!refuse) push.shm->token ^= 1;
    auto reply = worker.Send(push);
    ASSERT_FALSE(reply.ok());
    EXPECT_EQ(reply.status().code(), StatusCode::kUnimplemented) << reply.status().ToString();
    worker.Step(job, s, 0);  // the same pushes inline
    worker.ExpectVersion(job, s, 1);
    coordinator.Send(Shutdown{"done"});
    EXPECT_TRUE(running.Join().ok());
  }
}

size_t PushedBytes(const Push& push) {
  size_t n = 0;
  for (const ChunkBytes& c : push.chunks) n += c.size;
  for (const ShmChunk& c : push.shm_chunks) n += c.size;
  return n;
}

TEST(ShardService, MetricsCountTheBytesAndBlocksPushedAndPulledAndTheCheckpoints) {
  zmq::context_t context(1);
  TempDir dir;
  Job job(80);
  const ShardId s(1);
  FakeCoordinator coordinator(&context);
  Metrics metrics;
  ShardOptions o = StoreShardOptions(coordinator, dir.Sub("store"), s);
  o.metrics = &metrics;
  o.metrics_address = "127.0.0.1:9999";  // told, not served
  const Labels shard{{"shard", "1"}};
  auto pushes = [&](const char* result) {
    return metrics.GetCounter("eps_shard_pushes_total", "", {{"shard", "1"}, {"result", result}})
        .value();
  };
  RunningShard running(&context, o);
  ASSERT_TRUE(running.open_status().ok()) << running.open_status().ToString();
  auto reg = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(reg.has_value());
  EXPECT_EQ(reg->metrics_address, "127.0.0.1:9999");
  EXPECT_EQ(metrics.GetGauge("eps_shard_version", "", shard).value(), -1);
  EXPECT_EQ(metrics.GetGauge("eps_shard_durable_step", "", shard).value(), -1);
  ShardConfig config = Config();  // the rate halves every step: StepDone tells which one applied
  config.spec.optimizer.schedule = "step";
  config.spec.optimizer.step_size = 1;
  config.spec.optimizer.gamma = 0.5;
  coordinator.Send(config);
  FakeWorker worker(&context, reg->address);
  size_t pushed = 0;
  const Push init = job.Init(s);
  pushed += PushedBytes(init);
  worker.Push(init);
  ASSERT_TRUE(coordinator.Next<StepDone>(DurableAt(0)).has_value());
  auto region = ShmRegion::Create(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  for (int64_t t = 0; t < 2; ++t) {
    // One block through shared memory, one inline: both are counted.
    const Push a = IntoShm(job.BlockPush(s, t, Block{0, 4}, true), **region);
    ASSERT_FALSE(a.shm_chunks.empty());
    const Push b = job.BlockPush(s, t, Block{4, 1}, false);
    pushed += PushedBytes(a) + PushedBytes(b);
    worker.Push(a);
    worker.Push(b);
    auto done = coordinator.Next<StepDone>(DurableAt(t + 1));
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->step, Step(t));
    EXPECT_EQ(done->lr, t == 0 ? 0.1 : 0.05);
    EXPECT_EQ(done->bytes_in, pushed);
    EXPECT_EQ(done->bytes_out, 0u);
    EXPECT_EQ(metrics.GetGauge("eps_shard_version", "", shard).value(), t + 1);
  }
  // A block of a step applied already: a duplicate, read all the same.
  const Push late = job.BlockPush(s, 0, Block{4, 1}, false);
  pushed += PushedBytes(late);
  worker.Push(late);
  // A block of a future step: refused, its bytes not counted.
  Push future = job.BlockPush(s, 2, Block{0, 4}, true);
  future.step = Step(3);
  auto refused = worker.Send(future);
  EXPECT_EQ(refused.status().code(), StatusCode::kAborted) << refused.status().ToString();
  // Two pulls, inline.
  size_t pulled = 0;
  for (int64_t version : {1, 2}) {
    auto reply = worker.Send(MakePull(version));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    for (const ChunkBytes& c : std::get<PullReply>(reply->body).chunks) pulled += c.size;
  }
  EXPECT_GT(pulled, 0u);

  EXPECT_EQ(metrics.GetCounter("eps_shard_push_bytes_total", "", shard).value(), pushed);
  EXPECT_EQ(pushes("accepted"), 1 + 2 * 2);  // the initial values and two blocks per step
  EXPECT_EQ(pushes("duplicate"), 1);
  EXPECT_EQ(pushes("refused"), 1);
  EXPECT_EQ(metrics.GetCounter("eps_shard_pull_bytes_total", "", shard).value(), pulled);
  EXPECT_EQ(metrics.GetCounter("eps_shard_pulls_total", "", shard).value(), 2);
  // Steps 0 and 1 (the initial values are no step); checkpoints of versions 0, 1 and 2.
  EXPECT_EQ(metrics.GetHistogram("eps_shard_step_seconds", "", {}, shard).count(), 2u);
  EXPECT_EQ(metrics.GetHistogram("eps_checkpoint_duration_seconds", "", {}, shard).count(), 3u);
  EXPECT_GT(metrics.GetHistogram("eps_checkpoint_duration_seconds", "", {}, shard).sum(), 0);
  EXPECT_EQ(metrics.GetCounter("eps_checkpoint_failures_total", "", shard).value(), 0);
  EXPECT_EQ(metrics.GetGauge("eps_shard_durable_step", "", shard).value(), 2);
  // StepDone reports the same numbers as the counters.
  for (const Push& p : {job.BlockPush(s, 2, Block{0, 4}, true),
                        job.BlockPush(s, 2, Block{4, 1}, false)}) {
    pushed += PushedBytes(p);
    worker.Push(p);
  }
  auto done = coordinator.Next<StepDone>([](const StepDone& d) { return d.step == Step(2); });
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->bytes_in, pushed);
  EXPECT_EQ(done->bytes_out, pulled);
  EXPECT_DOUBLE_EQ(done->lr, 0.025);
  EXPECT_EQ(metrics.GetCounter("eps_shard_push_bytes_total", "", shard).value(), pushed);
  // Every series carries the shard's label.
  const std::string text = metrics.Render();
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.rfind("#", 0) != 0) {
      EXPECT_NE(line.find("shard=\"1\""), std::string::npos) << line;
    }
  }
  coordinator.Send(Shutdown{"done"});
  EXPECT_TRUE(running.Join().ok());
}

TEST(ShardService, MetricsCountASparseTablesRowsByTier) {
  zmq::context_t context(1);
  TempDir dir;
  FakeCoordinator coordinator(&context);
  Metrics metrics;
  ShardOptions o = StoreShardOptions(coordinator, dir.Sub("store"), ShardId(0));
  o.metrics = &metrics;
  RunningShard running(&context, o);
  ASSERT_TRUE(running.open_status().ok()) << running.open_status().ToString();
  auto reg = coordinator.Next<RegisterShard>();
  ASSERT_TRUE(reg.has_value());
  // "emb.weight" [64, 2] is a sparse table; one VW; plain SGD.
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {64, 2}};
  emb.sparse = true;
  ShardConfig config = Config();
  config.spec.virtual_workers = 1;
  config.spec.num_shards = 1;
  config.tensors = {emb, LossTensor()};
  coordinator.Send(config);
  FakeWorker worker(&context, reg->address);
  Push init;
  init.epoch = Epoch(1);
  init.step = Step(-1);
  init.block = Block{0, 1};
  worker.Push(init);
  ASSERT_TRUE(coordinator.Next<StepDone>(DurableAt(0)).has_value());
  const std::vector<uint64_t> ids{3, 9, 40};
  for (int64_t t = 0; t < 2; ++t) {
    auto held_ids = std::make_shared<std::vector<uint64_t>>(ids);
    auto values = std::make_shared<std::vector<float>>(ids.size() * 2, 1.0f);
    auto loss = std::make_shared<std::vector<float>>(1, 0.5f);
    SparseRowBytes rows;
    rows.rows = static_cast<uint32_t>(ids.size());
    rows.ids = {ChunkId(0), held_ids->data(), held_ids->size() * sizeof(uint64_t), held_ids};
    rows.values = {ChunkId(0), values->data(), values->size() * sizeof(float), values};
    Push push;
    push.epoch = Epoch(1);
    push.step = Step(t);
    push.block = Block{0, 1};
    push.chunks = {ChunkBytes{ChunkId(0), loss->data(), sizeof(float), loss}};
    push.sparse = {rows};
    worker.Push(push);
    ASSERT_TRUE(coordinator.Next<StepDone>(DurableAt(t + 1)).has_value());
  }
  const Labels table{{"shard", "0"}, {"table", "0"}};
  auto tier = [&](const char* name) {
    Labels l = table;
    l["tier"] = name;
    return metrics.GetGauge("eps_shard_table_rows", "", l).value();
  };
  EXPECT_EQ(tier("cached"), 3);  // the touched rows only: the other 61 are not stored
  EXPECT_EQ(tier("spilled"), 0);
  EXPECT_EQ(metrics.GetCounter("eps_shard_table_rows_stepped_total", "", table).value(), 6);
  coordinator.Send(Shutdown{"done"});
  EXPECT_TRUE(running.Join().ok());
}

TEST(ShardService, CheckpointingNeedsAStoreAndABadStoreStopsTheShardAtOpen) {
  zmq::context_t context(1);
  TempDir dir;
  FakeCoordinator coordinator(&context);
  ShardOptions o = StoreShardOptions(coordinator, "", ShardId(0));
  EXPECT_EQ(Shard::Open(o, &context).status().code(), StatusCode::kInvalidArgument);
  o.checkpoint_every = -1;
  EXPECT_EQ(Shard::Open(o, &context).status().code(), StatusCode::kInvalidArgument);
  o = StoreShardOptions(coordinator, dir.Sub("store"), ShardId(0));
  o.register_every = std::chrono::milliseconds(0);
  EXPECT_EQ(Shard::Open(o, &context).status().code(), StatusCode::kInvalidArgument);
  // A path through a regular file, with the job known up front.
  {
    std::FILE* f = std::fopen(dir.Sub("file").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  o = StoreShardOptions(coordinator, dir.Sub("file") + "/store", ShardId(0));
  o.job_id = Spec().job_id;
  auto shard = Shard::Open(o, &context);
  EXPECT_EQ(shard.status().code(), StatusCode::kFailedPrecondition) << shard.status().ToString();
}

// A job that starts over: the cleared shard waits for the initial values and,
// its optimizer state gone too, replays the bits of a fresh shard.
TEST(ShardStateClear, AClearedShardWaitsForTheInitialValuesAndReplaysAFreshShardsBits) {
  Job job(54);
  const ShardConfig adam = ConfigWith("adam");
  for (ShardId s : AllShards()) {
    SCOPED_TRACE("shard " + std::to_string(s.value()));
    auto fresh = InitializedShardWith(job, s, adam);
    RunStep(*fresh, job, s, 0);
    auto state = InitializedShardWith(job, s, adam);
    RunStep(*state, job, s, 0);
    RunStep(*state, job, s, 1);
    ASSERT_TRUE(state->Clear().ok());
    EXPECT_EQ(state->version(), Step(-1));
    for (int64_t v : {0, 1, 2})
      EXPECT_EQ(state->HandlePull(MakePull(v)).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(state->HandlePush(job.BlockPush(s, 0, Block{0, 4}, true)).status().code(),
              StatusCode::kUnavailable);
    auto init = state->HandlePush(job.Init(s));
    ASSERT_TRUE(init.ok()) << init.status().ToString();
    EXPECT_TRUE(init->completed.has_value());
    RunStep(*state, job, s, 0);
    auto want = fresh->HandlePull(MakePull(1));
    auto got = state->HandlePull(MakePull(1));
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(got->chunks.size(), want->chunks.size());
    for (size_t k = 0; k < got->chunks.size(); ++k) {
      ASSERT_EQ(got->chunks[k].size, want->chunks[k].size);
      EXPECT_EQ(0, std::memcmp(got->chunks[k].data, want->chunks[k].data, got->chunks[k].size))
          << "chunk " << got->chunks[k].chunk;
    }
  }
}

}  // namespace
}  // namespace eps
