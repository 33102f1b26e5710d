// --follow's pieces (serve/follow.h, serve/checkpoints.h): the newest step
// every shard holds durably, read from events.jsonl as it grows; a follower
// that swaps in a rewritten export, skips the same bytes and older steps, and
// keeps serving when a version does not load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/digest.h"
#include "common/files.h"
#include "serve/follow.h"

namespace eps {
namespace {

constexpr auto kWait = std::chrono::seconds(20);

class Follow : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eps-follow-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }
  void Append(const std::string& text) {
    std::ofstream out(dir_ + "/events.jsonl", std::ios::app);
    out << text;
  }
  std::string dir_;
};

TEST_F(Follow, TheDurableStepIsTheNewestEveryRegisteredShardHoldsAndAPartialLineWaits) {
  DurableStepWatch watch(dir_ + "/events.jsonl");
  EXPECT_EQ(watch.Poll(), -1);  // no file yet
  Append(R"({"event":"shard_registered","t":1,"shard":0,"durable_step":-1,"restarted":false})"
         "\n"
         R"({"event":"shard_registered","t":1,"shard":1,"durable_step":-1,"restarted":false})"
         "\n"
         R"({"event":"checkpoint_durable","t":2,"step":10,"shard":0})"
         "\n");
  EXPECT_EQ(watch.Poll(), -1);  // shard 1 holds none yet
  Append(R"({"event":"checkpoint_durable","t":2,"step":10,"shard":1})"
         "\n"
         R"({"event":"checkpoint_durable","t":3,"step":20,"shard":1})"
         "\n"
         R"({"event":"checkpoint_durable","t":3,"step":20,)");
  EXPECT_EQ(watch.Poll(), 10);  // shard 0's step 20 is half written
  Append(R"("shard":0})"
         "\n");
  EXPECT_EQ(watch.Poll(), 20);
  EXPECT_EQ(watch.Poll(), 20);
}

// A model whose file holds its "steps"; loading "bad" fails.
StatusOr<std::shared_ptr<const LoadedModel>> LoadFake(const std::string& path) {
  auto bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == "bad") return InvalidArgument("a torn file");
  auto m = std::make_shared<LoadedModel>();
  m->file = path;
  Sha256 sha;
  sha.Update(bytes->data(), bytes->size());
  m->sha256 = sha.HexDigest();
  m->metadata["steps"] = *bytes;
  return std::shared_ptr<const LoadedModel>(m);
}

TEST_F(Follow, ARewrittenExportIsSwappedInButNotTheSameBytesAnOlderStepOrABadFile) {
  const std::string file = dir_ + "/model.safetensors";
  ASSERT_TRUE(WriteFileAtomically(file, "10").ok());
  auto first = LoadFake(file);
  ASSERT_TRUE(first.ok());
  std::mutex mu;
  std::vector<std::string> served;
  std::vector<std::unique_ptr<ModelSource>> sources;
  sources.push_back(WatchFile(file));
  Metrics metrics;
  ModelFollowerOptions o;
  o.interval = std::chrono::milliseconds(1);
  auto follower = ModelFollower::Start(
      o, *first, std::move(sources), LoadFake,
      [&](std::shared_ptr<const LoadedModel> m) {
        std::lock_guard<std::mutex> lock(mu);
        served.push_back(m->metadata.at("steps"));
        return OkStatus();
      },
      &metrics);
  ASSERT_TRUE(follower.ok());
  // The same bytes rewritten, a torn file, an older step: none is served; then step 30 is.
  auto wait_looked = [&](int64_t failures) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while ((*follower)->failures() < failures && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return (*follower)->failures() >= failures;
  };
  ASSERT_TRUE(WriteFileAtomically(file, "bad").ok());
  ASSERT_TRUE(wait_looked(1));
  ASSERT_TRUE(WriteFileAtomically(file, "20").ok());
  ASSERT_TRUE(WriteFileAtomically(file, "5").ok());  // may or may not be seen: never served
  ASSERT_TRUE(WriteFileAtomically(file, "30").ok());
  // 20 may be skipped if the follower saw 30 first; wait for 30 with a bound.
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!served.empty() && served.back() == "30") break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "step 30 never served";
    std::this_thread::yield();
  }
  follower->reset();  // stops the thread
  for (const std::string& s : served) EXPECT_TRUE(s == "20" || s == "30") << s;
  EXPECT_EQ(metrics.GetCounter("eps_serve_model_load_failures_total", "").value(), 1);
}

}  // namespace
}  // namespace eps
