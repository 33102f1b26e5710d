// The final pull in pages (elastic/final_pull.h) from two real shard states
// (server/shard_state.h) of a job with dense chunks and a sparse table: the
// model ExportModel digests and writes from pages of any size is the one the
// shards' whole replies give, in as many requests as the pages need; a row two
// shards give, or a shard's error, ends it with an error.
#include "elastic/final_pull.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "models/model_export.h"
#include "server/shard_state.h"
#include "tests/table_rows.h"

namespace eps {
namespace {

constexpr uint32_t kVws = 2;
constexpr int64_t kRows = 64, kDim = 3;

std::vector<TensorSpec> Tensors() {
  TensorSpec emb{"emb.weight", TensorKind::kParameter, DType::kFloat32, {kRows, kDim}};
  emb.sparse = true;
  return {emb,
          {"w", TensorKind::kParameter, DType::kFloat32, {5, 4}},
          {"b", TensorKind::kParameter, DType::kFloat32, {7}},
          LossTensor()};
}

ShardConfig Config() {
  JobSpec s;
  s.job_id = "final-pull-test";
  s.model = "mlp";
  s.virtual_workers = kVws;
  s.batch_per_vw = 1;
  s.steps = 10;
  s.seed = 3;
  s.optimizer.kind = "adam";
  s.optimizer.lr = 0.1;
  s.chunk_elems = 4;
  s.num_shards = 2;
  return ShardConfig{s, Tensors()};
}

// Owned bytes for a message's views.
template <class T>
ChunkBytes Own(std::vector<T> v, uint32_t chunk = 0) {
  auto held = std::make_shared<std::vector<T>>(std::move(v));
  return ChunkBytes{ChunkId(chunk), held->data(), held->size() * sizeof(T), held};
}

// Two shards of a job stepped a few times: every chunk and some rows of the table changed.
class FinalPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto layout = MakeLayout(Tensors(), 2, 4);
    ASSERT_TRUE(layout.ok());
    layout_ = *layout;
    for (uint32_t s = 0; s < 2; ++s) {
      shards_.push_back(std::make_unique<ShardState>(ShardId(s)));
      ASSERT_TRUE(shards_[s]->Configure(Config()).ok());
      ASSERT_TRUE(Push(s, -1, 0.5f, {}).ok());
    }
    // Rows of both shards (shard 0 holds the even ones), some touched twice.
    const std::vector<std::vector<uint64_t>> steps{{1, 2, 9, 40}, {2, 3, 63}, {0, 9, 10, 11, 12}};
    for (size_t t = 0; t < steps.size(); ++t) {
      for (uint32_t s = 0; s < 2; ++s) {
        std::vector<uint64_t> mine;
        for (uint64_t row : steps[t]) {
          if (row % 2 == s) mine.push_back(row);
        }
        ASSERT_TRUE(Push(s, static_cast<int64_t>(t), 0.25f * (t + 1), mine).ok());
      }
    }
    ASSERT_EQ(shards_[0]->version(), Step(3));
  }

  // A push of block [0, V) to shard s at `step` (-1: the initial values): its chunks filled
  // with `value`, and gradients of `rows` of the table.
  Status Push(uint32_t s, int64_t step, float value, const std::vector<uint64_t>& rows) {
    eps::Push p;
    p.epoch = Epoch(1);
    p.step = Step(step);
    p.block = step < 0 ? Block{0, 1} : Block{0, kVws};
    for (const Chunk& c : layout_.chunks) {
      if (c.shard.value() != s) continue;
      if (step < 0 && layout_.tensors[c.tensor].kind == TensorKind::kLoss) continue;
      std::vector<float> v(static_cast<size_t>(c.numel));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = value + 0.01f * static_cast<float>(i + c.id.value());
      p.chunks.push_back(Own(std::move(v), c.id.value()));
    }
    if (step >= 0) {
      SparseRowBytes r;
      r.rows = static_cast<uint32_t>(rows.size());
      std::vector<float> g(rows.size() * kDim);
      for (size_t i = 0; i < g.size(); ++i) g[i] = value * static_cast<float>(i % 5 + 1);
      r.ids = Own(rows);
      r.values = Own(std::move(g));
      p.sparse.push_back(std::move(r));
    }
    return shards_[s]->HandlePush(p).status();
  }

  FinalPull::ShardCall Call() {
    return [this](uint32_t s, const Pull& pull) { return shards_.at(s)->Answer(pull); };
  }

  // The digests and optimizer digest of the shards' whole replies (no pages).
  ModelDigests Whole(SetDigest* optimizer) {
    ModelChunks chunks;
    ModelTables tables;
    for (uint32_t s = 0; s < 2; ++s) {
      Pull all{Step(3), {}};
      all.optimizer_digest = true;
      auto reply = shards_[s]->Answer(all);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      for (ChunkBytes& c : reply->chunks) chunks[c.chunk.value()] = c;
      optimizer->Merge(*SetDigest::FromBytes(reply->optimizer_digest));
      replies_.push_back(*reply);
      Pull rows{Step(3), {}};
      rows.sparse = {SparseRead{0, Step(-1)}};
      auto rows_reply = shards_[s]->Answer(rows);
      EXPECT_TRUE(rows_reply.ok());
      EXPECT_TRUE(AddTableRows(layout_, rows_reply->sparse, &tables).ok());
    }
    EXPECT_TRUE(SortTableRows(layout_, &tables).ok());
    EXPECT_EQ(tables[0].ids, (std::vector<uint64_t>{0, 1, 2, 3, 9, 10, 11, 12, 40, 63}));
    auto digests = DigestModel(layout_, chunks, tables, TableExport{3});
    EXPECT_TRUE(digests.ok());
    return *digests;
  }

  Layout layout_;
  std::vector<std::unique_ptr<ShardState>> shards_;
  std::vector<PullReply> replies_;  // keeps Whole's chunks' bytes
};

TEST_F(FinalPullTest, PagesOfAnySizeGiveTheModelOfTheWholeReplies) {
  SetDigest whole_optimizer;
  const ModelDigests whole = Whole(&whole_optimizer);
  // 1 byte: a chunk or a row a page; 40 bytes: some; 1 MiB: each shard's part in one page.
  // A table laid out dense, and one left to a table file (dense_bytes 0): its rows in order.
  uint64_t requests_small = 0, requests_large = 0;
  for (const uint64_t page : {uint64_t{1}, uint64_t{40}, uint64_t{1} << 20}) {
    for (const uint64_t dense_bytes : {kDenseTableBytes, uint64_t{0}}) {
      FinalPull pull(layout_, Step(3), {0, 1}, Call(), page);
      auto optimizer = pull.OptimizerDigest();
      ASSERT_TRUE(optimizer.ok()) << optimizer.status().ToString();
      EXPECT_EQ(optimizer->HexDigest(), whole_optimizer.HexDigest());
      auto digests = ExportModel(layout_, &pull, TableExport{3, dense_bytes});
      ASSERT_TRUE(digests.ok()) << digests.status().ToString();
      if (dense_bytes > 0) {
        EXPECT_EQ(digests->params_sha256, whole.params_sha256) << page;
        EXPECT_EQ(digests->buffers_sha256, whole.buffers_sha256) << page;
      }
      (page == 1 ? requests_small : requests_large) = pull.pages();
    }
  }
  // Per row and per chunk, against a page a shard (plus the digests' requests and the empty
  // last page of rows).
  EXPECT_GE(requests_small, 2u + 7u + 10u);
  EXPECT_LE(requests_large, 2u + 2u + 2u);
}

TEST_F(FinalPullTest, ARowTwoShardsGiveOrAShardsErrorEndsIt) {
  // Shard 1 answers the rows with shard 0's as well.
  FinalPull twice(
      layout_, Step(3), {0, 1},
      [this](uint32_t s, const Pull& pull) {
        return shards_.at(pull.sparse.empty() ? s : 0)->Answer(pull);
      },
      1 << 20);
  auto digests = ExportModel(layout_, &twice, TableExport{3});
  EXPECT_EQ(digests.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(digests.status().message().find("came from shards 0 and 1"), std::string::npos)
      << digests.status().ToString();
  // A version the shards no longer serve.
  FinalPull gone(layout_, Step(1), {0, 1}, Call(), 1 << 20);
  EXPECT_FALSE(ExportModel(layout_, &gone, TableExport{3}).ok());
}

}  // namespace
}  // namespace eps
