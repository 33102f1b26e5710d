// The model files' chunk protocol: the coordinator's ModelFileServer
// (elastic/model_file_server.h) answering FetchModel on a real ROUTER, the
// worker's FetchModelFile and ModelCache (worker/model_fetch.h) on a DEALER.
#include "worker/model_fetch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "common/digest.h"
#include "elastic/model_file_server.h"
#include "schema/channel.h"

namespace eps {
namespace {

using std::chrono::milliseconds;

std::string Hex(const std::string& bytes) {
  Sha256 sha;
  sha.Update(bytes.data(), bytes.size());
  return sha.HexDigest();
}

std::shared_ptr<const std::string> FileOf(size_t size, uint8_t seed) {
  std::string b(size, '\0');
  for (size_t i = 0; i < size; ++i) b[i] = static_cast<char>(seed + i * 131 + (i >> 10));
  return std::make_shared<const std::string>(std::move(b));
}

std::string TempDir() {
  std::string dir = (std::filesystem::temp_directory_path() / "eps-model-fetch-XXXXXX").string();
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

// Regular files but the fetch locks (".<sha256>.lock", kept: see ModelCache::LockForFetch).
size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool lock = name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0;
    n += e.is_regular_file() && !lock ? 1 : 0;
  }
  return n;
}

// A coordinator's ROUTER answering FetchModel from a ModelFileServer on its own
// thread; `tamper` may change each reply before it goes, `silent` answers nothing.
class FileService {
 public:
  explicit FileService(uint64_t chunk_bytes) : files_(ModelFileServer::Open(chunk_bytes).value()) {}
  ~FileService() { Stop(); }

  void Add(const std::string& sha256, std::shared_ptr<const std::string> bytes) {
    files_->Add(sha256, bytes->data(), bytes->size(), bytes);
  }
  std::function<void(FetchModelReply*)> tamper;
  bool silent = false;

  std::string Start() {
    router_ = Channel::Bind(&context_, "tcp://127.0.0.1:0").value();
    thread_ = std::thread([this] { Serve(); });
    return router_->endpoint();
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int64_t requests() const { return requests_; }
  uint64_t longest_request() const { return longest_; }

  zmq::context_t* context() { return &context_; }

 private:
  void Serve() {
    while (!stop_) {
      auto in = router_->Receive(milliseconds(20));
      if (!in.ok() || !in->envelope.ok()) continue;
      const auto* fetch = std::get_if<FetchModel>(&in->envelope->body);
      if (fetch == nullptr) continue;
      ++requests_;
      longest_ = std::max<uint64_t>(longest_, fetch->length);
      if (silent) continue;
      StatusOr<FetchModelReply> reply = files_->Serve(*fetch);
      if (!reply.ok()) {
        (void)router_->SendTo(
            in->peer, Envelope{"", ErrorReply{reply.status().code(), reply.status().message()}});
        continue;
      }
      if (tamper) tamper(&*reply);
      (void)router_->SendTo(in->peer, Envelope{"", std::move(reply).value()});
    }
  }

  zmq::context_t context_;
  std::unique_ptr<ModelFileServer> files_;
  std::unique_ptr<Channel> router_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> requests_{0};
  std::atomic<uint64_t> longest_{0};
};

class ModelFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = FileOf(1'000'003, 7);  // 245 chunks of 4 KiB and a short one
    sha_ = Hex(*file_);
    service_.Add(sha_, file_);
    dir_ = TempDir();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  StatusOr<FetchedFile> Fetch(const ModelCache* cache, const std::string& sha256, uint64_t size,
                              FetchOptions options = FetchOptions()) {
    if (endpoint_.empty()) endpoint_ = service_.Start();
    auto dealer = Channel::Connect(service_.context(), endpoint_).value();
    if (options.chunk_bytes == FetchOptions().chunk_bytes) options.chunk_bytes = kChunk;
    return FetchModelFile(dealer.get(), "model", sha256, size, cache, options, stop_);
  }

  static constexpr uint64_t kChunk = 4096;
  FileService service_{kChunk};
  std::string endpoint_;
  std::shared_ptr<const std::string> file_;
  std::string sha_;
  std::string dir_;
  std::atomic<bool> stop_{false};
};

TEST_F(ModelFetchTest, AFileLargerThanAChunkArrivesWholeInChunksOfAtMostTheLimit) {
  auto got = Fetch(nullptr, sha_, file_->size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, *file_);
  EXPECT_EQ(got->report.fetched_bytes, file_->size());
  EXPECT_EQ(got->report.chunks, (file_->size() + kChunk - 1) / kChunk);
  EXPECT_EQ(got->report.cache, "off");
  EXPECT_EQ(service_.longest_request(), kChunk);
  EXPECT_EQ(service_.requests(), static_cast<int64_t>(got->report.chunks));
}

TEST_F(ModelFetchTest, ASecondFetchThroughTheSameCacheSendsNoRequest) {
  auto cache = ModelCache::Open(dir_ + "/cache").value();
  auto first = Fetch(cache.get(), sha_, file_->size());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->report.cache, "miss");
  EXPECT_EQ(first->report.fetched_bytes, file_->size());
  const int64_t requests = service_.requests();
  // Another worker of the host: its own ModelCache on the same directory.
  auto other = ModelCache::Open(dir_ + "/cache").value();
  auto second = Fetch(other.get(), sha_, file_->size());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->bytes, *file_);
  EXPECT_EQ(second->report.cache, "hit");
  EXPECT_EQ(second->report.fetched_bytes, 0u);
  EXPECT_EQ(service_.requests(), requests);
  EXPECT_EQ(FilesIn(dir_ + "/cache"), 1u) << "no temporary file is left";
}

TEST_F(ModelFetchTest, WorkersOfAHostMissingTogetherFetchTheFileOnce) {
  endpoint_ = service_.Start();
  std::vector<std::thread> workers;
  std::vector<StatusOr<FetchedFile>> got(4, Internal("not run"));
  for (size_t i = 0; i < got.size(); ++i) {
    workers.emplace_back([&, i] {
      auto cache = ModelCache::Open(dir_).value();  // each its own, as processes have
      auto dealer = Channel::Connect(service_.context(), endpoint_).value();
      FetchOptions o;
      o.chunk_bytes = kChunk;
      got[i] = FetchModelFile(dealer.get(), "model", sha_, file_->size(), cache.get(), o, stop_);
    });
  }
  for (auto& t : workers) t.join();
  int misses = 0;
  for (const auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->bytes, *file_);
    misses += g->report.cache == "miss";
    EXPECT_EQ(g->report.fetched_bytes, g->report.cache == "miss" ? file_->size() : 0);
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(service_.requests(), static_cast<int64_t>((file_->size() + kChunk - 1) / kChunk));
}

TEST_F(ModelFetchTest, AFetchLockHeldTooLongIsWaitedForAsLongAsAllowedThenFetchedAnyway) {
  auto cache = ModelCache::Open(dir_).value();
  auto held = cache->LockForFetch(sha_, milliseconds(0), stop_);  // a worker that never finishes
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  FetchOptions impatient;
  impatient.cache_lock_timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto got = Fetch(cache.get(), sha_, file_->size(), impatient);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(got->report.cache, "miss");
  EXPECT_EQ(got->report.fetched_bytes, file_->size());
  std::string bytes;
  EXPECT_EQ(cache->Read(sha_, file_->size(), &bytes).value(), ModelCache::Found::kHit);
}

TEST_F(ModelFetchTest, ACorruptCacheEntryIsDetectedRemovedAndFetchedAgain) {
  auto cache = ModelCache::Open(dir_).value();
  ASSERT_TRUE(Fetch(cache.get(), sha_, file_->size()).ok());
  {  // one byte flipped, the size unchanged
    std::fstream f(cache->PathOf(sha_), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500'000);
    f.put(static_cast<char>((*file_)[500'000] ^ 0x5a));
  }
  auto again = Fetch(cache.get(), sha_, file_->size());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->report.cache, "corrupt");
  EXPECT_EQ(again->report.fetched_bytes, file_->size());
  EXPECT_EQ(again->bytes, *file_);
  // Repaired: the next one reads it.
  auto third = Fetch(cache.get(), sha_, file_->size());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->report.cache, "hit");
  // A truncated entry is damaged too.
  std::filesystem::resize_file(cache->PathOf(sha_), 1000);
  std::string bytes;
  EXPECT_EQ(cache->Read(sha_, file_->size(), &bytes).value(), ModelCache::Found::kCorrupt);
  EXPECT_FALSE(std::filesystem::exists(cache->PathOf(sha_)));
}

TEST_F(ModelFetchTest, BytesThatDoNotHashToTheFileAreDataLossAndNeverCached) {
  const auto other = FileOf(file_->size(), 99);
  const std::string claimed = Hex("not the bytes served");
  service_.Add(claimed, other);
  auto cache = ModelCache::Open(dir_).value();
  auto got = Fetch(cache.get(), claimed, other->size());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_EQ(FilesIn(dir_), 0u);
}

TEST_F(ModelFetchTest, AReplyOtherThanTheOneAskedIsDataLoss) {
  service_.tamper = [](FetchModelReply* r) {
    if (r->offset == 8192) r->offset += 1;
  };
  auto got = Fetch(nullptr, sha_, file_->size());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_NE(got.status().message().find("asked bytes [8192"), std::string::npos)
      << got.status().ToString();
}

TEST_F(ModelFetchTest, TheCoordinatorsRefusalComesBackAsItsStatus) {
  auto unknown = Fetch(nullptr, Hex("no such file"), 10);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  FetchOptions greedy;
  greedy.chunk_bytes = kChunk + 1;  // more than the server allows
  auto too_long = Fetch(nullptr, sha_, file_->size(), greedy);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  // The server serves on.
  auto fine = Fetch(nullptr, sha_, file_->size());
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(fine->bytes, *file_);
}

TEST_F(ModelFetchTest, ASilentCoordinatorGetsMaxInFlightRequestsThenADeadlineAndStopEndsTheWait) {
  service_.silent = true;
  FetchOptions quick;
  quick.reply_timeout = milliseconds(300);
  quick.max_in_flight = 3;
  auto got = Fetch(nullptr, sha_, file_->size(), quick);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_EQ(service_.requests(), 3) << "no more than max_in_flight unanswered";
  stop_ = true;
  got = Fetch(nullptr, sha_, file_->size());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kAborted) << got.status().ToString();
}

TEST_F(ModelFetchTest, ACacheThatCannotBeWrittenStillGivesTheBytesWithAWarning) {
  auto cache = ModelCache::Open(dir_ + "/gone").value();
  std::filesystem::remove_all(dir_ + "/gone");  // removed under it
  auto got = Fetch(cache.get(), sha_, file_->size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, *file_);
  EXPECT_NE(got->report.warning.find("not kept in the model cache"), std::string::npos)
      << got->report.warning;
}

TEST_F(ModelFetchTest, AFileFetchedIntoABoundedCacheLetsTheOnesUsedBeforeItGo) {
  const auto second = FileOf(600'000, 9);
  const std::string second_sha = Hex(*second);
  service_.Add(second_sha, second);
  auto cache = ModelCache::Open(dir_ + "/cache", 1'200'000).value();
  ASSERT_TRUE(Fetch(cache.get(), sha_, file_->size()).ok());
  auto got = Fetch(cache.get(), second_sha, second->size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->report.cache, "miss");
  EXPECT_FALSE(std::filesystem::exists(cache->PathOf(sha_)));
  EXPECT_TRUE(std::filesystem::exists(cache->PathOf(second_sha)));
  EXPECT_EQ(FilesIn(dir_ + "/cache"), 1u);
}

TEST(ModelCache, ADirectoryThatCannotBeCreatedIsAFailedPreconditionNamingIt) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/file") << "x";
  auto cache = ModelCache::Open(dir + "/file/cache");
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(cache.status().message().find(dir + "/file/cache"), std::string::npos)
      << cache.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST(ModelCache, AnEntryAbandonedBeforeCommitLeavesNoFileAndNamesMustBeHashes) {
  const std::string dir = TempDir();
  auto cache = ModelCache::Open(dir).value();
  {
    auto entry = cache->NewEntry(std::string(64, 'a')).value();
    ASSERT_TRUE(entry->Append("abc", 3).ok());
  }
  EXPECT_EQ(FilesIn(dir), 0u);
  EXPECT_FALSE(cache->NewEntry("../etc/passwd").ok());
  std::string bytes;
  EXPECT_FALSE(cache->Read("ABC", 3, &bytes).ok());
  std::filesystem::remove_all(dir);
}

// Entries of 1000 bytes in a cache bounded at 2500, their uses an hour apart.
TEST(ModelCache, PastItsBoundTheFilesUsedLeastRecentlyGoAndAHitIsAUse) {
  namespace fs = std::filesystem;
  const std::string dir = TempDir();
  auto cache = ModelCache::Open(dir, 2500).value();
  std::vector<std::string> shas;
  const auto hour = std::chrono::hours(1);
  for (uint8_t i = 0; i < 4; ++i) {
    const auto bytes = FileOf(1000, i);
    shas.push_back(Hex(*bytes));
    auto entry = cache->NewEntry(shas.back()).value();
    ASSERT_TRUE(entry->Append(bytes->data(), bytes->size()).ok());
    ASSERT_TRUE(entry->Commit().ok());
    fs::last_write_time(cache->PathOf(shas.back()),
                        fs::file_time_type::clock::now() - (5 - i) * hour);
  }
  // A writer that died two hours ago, and one writing now.
  const std::string dead = dir + "/." + shas[0] + ".a1b2c3",
                    live = dir + "/." + shas[1] + ".d4e5f6";
  std::ofstream(dead) << std::string(300, 'd');
  std::ofstream(live) << std::string(300, 'l');
  fs::last_write_time(dead, fs::file_time_type::clock::now() - 2 * hour);
  std::string bytes;  // the oldest, used now
  ASSERT_EQ(cache->Read(shas[0], 1000, &bytes).value(), ModelCache::Found::kHit);

  const ModelCache::Trimmed trimmed = cache->Trim(shas[3]);
  EXPECT_EQ(trimmed.entries, 3u);  // the dead writer's file, then entries 1 and 2: 2000 bytes left
  EXPECT_EQ(trimmed.bytes, 2300u);
  for (size_t i = 0; i < shas.size(); ++i)
    EXPECT_EQ(fs::exists(cache->PathOf(shas[i])), i == 0 || i == 3) << "entry " << i;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));

  // The entry kept stays even when it alone is over the bound; no bound removes nothing.
  auto tiny = ModelCache::Open(dir, 10).value();
  EXPECT_EQ(tiny->Trim(shas[3]).entries, 1u);
  EXPECT_TRUE(fs::exists(cache->PathOf(shas[3])));
  EXPECT_EQ(ModelCache::Open(dir).value()->Trim("").entries, 0u);
  EXPECT_TRUE(fs::exists(cache->PathOf(shas[3])));
  fs::remove_all(dir);
}

TEST(ModelFileServer, RefusesAnUnknownHashABadLengthAndAnOffsetPastTheEndAndServesOn) {
  auto server = ModelFileServer::Open(1000).value();
  const auto file = FileOf(2500, 3);
  const std::string sha = Hex(*file);
  server->Add(sha, file->data(), file->size(), file);
  EXPECT_EQ(server->Serve({Hex("x"), 0, 10}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(server->Serve({sha, 0, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server->Serve({sha, 0, 1001}).status().code(), StatusCode::kInvalidArgument);
  auto past = server->Serve({sha, 2500, 10});
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("past the end"), std::string::npos);
  auto tail = server->Serve({sha, 2000, 1000});  // the last chunk is shorter
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(tail->size, 500u);
  EXPECT_EQ(tail->file_size, 2500u);
  EXPECT_EQ(tail->data, file->data() + 2000) << "served without a copy";
  EXPECT_EQ(server->bytes_served(), 500u);
  EXPECT_FALSE(ModelFileServer::Open(0).ok());
}

TEST(ModelFileServer, ServesOffsetsBeyondFourGiBOfAFileOfFiveGiB) {
  // A sparse file of 5 GiB, mapped: its pages cost nothing until read.
  const std::string dir = TempDir();
  const std::string path = dir + "/big";
  const uint64_t size = uint64_t{5} << 30, at = (uint64_t{9} << 29) + 12345;  // 4.5 GiB + a bit
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  ASSERT_EQ(pwrite(fd, "marker", 6, static_cast<off_t>(at)), 6);
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(map, MAP_FAILED);
  std::shared_ptr<const void> owner(map,
                                    [size](const void* p) { munmap(const_cast<void*>(p), size); });
  auto server = ModelFileServer::Open(4 << 20).value();
  const std::string sha(64, 'b');  // not hashed: 5 GiB would take seconds
  server->Add(sha, map, size, owner);
  auto got = server->Serve({sha, at, 6});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::string(static_cast<const char*>(got->data), got->size), "marker");
  EXPECT_EQ(got->file_size, size);
  auto last = server->Serve({sha, size - 100, 4 << 20});
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->size, 100u);
  EXPECT_EQ(server->Serve({sha, size, 1}).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eps
