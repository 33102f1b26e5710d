// Tests for the durable state store (storage/state_store.h), against docs/design.md
// "Durable state": checkpoints round-trip, are atomic (a crash or an
// interrupted write leaves the previous ones intact and the broken one
// invisible), retention keeps exactly the newest N, a store of another job is
// refused, and corruption, a full disk and an unusable directory give clear
// errors instead of wrong data.
#include "storage/state_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "storage/state_store_testing.h"
#include "tests/small_disk.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

namespace fs = std::filesystem;

StoreOptions Options(const std::string& path, const std::string& job = "job-a",
                     const std::string& owner = "shard/0") {
  StoreOptions o;
  o.path = path;
  o.job_id = job;
  o.owner = owner;
  return o;
}

std::unique_ptr<StateStore> OpenOrDie(const StoreOptions& o) {
  auto store = StateStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Blob contents that depend on (step, index, salt), so a blob of one checkpoint
// can never pass for another's.
std::string Pattern(int64_t step, size_t index, size_t size, uint64_t salt = 0) {
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 1000003u + index * 7919u + salt);
  std::string out(size, '\0');
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t x = rng();
    std::memcpy(out.data() + i, &x, std::min<size_t>(8, size - i));
  }
  return out;
}

// A checkpoint's blobs as owned strings, and the references WriteCheckpoint takes.
struct Blobs {
  std::vector<std::string> names;
  std::vector<std::string> bytes;
  std::vector<BlobRef> Refs() const {
    std::vector<BlobRef> refs;
    for (size_t i = 0; i < names.size(); ++i)
      refs.push_back({names[i], bytes[i].data(), bytes[i].size(), nullptr});
    return refs;
  }
};

Blobs MakeBlobs(int64_t step, const std::vector<size_t>& sizes, uint64_t salt = 0) {
  Blobs b;
  for (size_t i = 0; i < sizes.size(); ++i) {
    b.names.push_back("blob/" + std::to_string(i));
    b.bytes.push_back(Pattern(step, i, sizes[i], salt));
  }
  return b;
}

void ExpectCheckpoint(const Checkpoint& got, int64_t step, const Blobs& want,
                      const std::string& metadata) {
  EXPECT_EQ(got.step, Step(step));
  EXPECT_EQ(got.metadata, metadata);
  ASSERT_EQ(got.blobs.size(), want.names.size());
  for (size_t i = 0; i < want.names.size(); ++i) {
    EXPECT_EQ(got.blobs[i].name, want.names[i]);
    EXPECT_TRUE(got.blobs[i].bytes == want.bytes[i]) << "blob " << i << " differs";
  }
}

std::vector<Step> Steps(std::initializer_list<int64_t> s) {
  std::vector<Step> out;
  for (int64_t v : s) out.push_back(Step(v));
  return out;
}

std::vector<Step> ListOrDie(const StateStore& store) {
  auto list = store.ListCheckpoints();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  return list.ok() ? *list : std::vector<Step>{};
}

bool Mentions(const Status& st, const std::string& part) {
  return st.message().find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------
// Round trip

TEST(StateStore, ACheckpointRoundTripsBitForBitAfterReopening) {
  TempDir dir;
  const Blobs blobs = MakeBlobs(7, {0, 1, 4096, 5 << 20, 13});
  const std::string metadata("meta\0data with a NUL", 20);
  {
    auto store = OpenOrDie(Options(dir.Sub("s")));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->LatestCheckpoint().status().code(), StatusCode::kNotFound);
    ASSERT_TRUE(store->WriteCheckpoint(Step(7), blobs.Refs(), metadata).ok());
    auto now = store->LatestCheckpoint();
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    ExpectCheckpoint(*now, 7, blobs, metadata);
  }
  auto store = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->job_id(), "job-a");
  EXPECT_EQ(store->owner(), "shard/0");
  EXPECT_EQ(ListOrDie(*store), Steps({7}));
  auto latest = store->LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ExpectCheckpoint(*latest, 7, blobs, metadata);
  auto read = store->ReadCheckpoint(Step(7));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectCheckpoint(*read, 7, blobs, metadata);
  EXPECT_EQ(store->ReadCheckpoint(Step(8)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->ReadCheckpoint(Step(-1)).status().code(), StatusCode::kNotFound);
}

// A checkpoint larger than a memtable is in a table file once the write returns, not only in
// the log and the memtable: a restarted process reads it without replaying it from the log.
// Small ones stay in the memtable (flushed later with others).
TEST(StateStore, ACheckpointLargerThanAMemtableIsInATableFileWhenWritten) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const Blobs small = MakeBlobs(1, {64 << 10});
  const Blobs big = MakeBlobs(2, {40 << 20, 40 << 20});  // the memtable holds 64 MiB
  {
    auto store = OpenOrDie(Options(path));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WriteCheckpoint(Step(1), small.Refs(), "small").ok());
    auto bytes = MemtableBytesForTesting(*store);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_GE(*bytes, 64u << 10);
    ASSERT_TRUE(store->WriteCheckpoint(Step(2), big.Refs(), "big").ok());
    bytes = MemtableBytesForTesting(*store);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_LT(*bytes, 1u << 20) << "the checkpoint is still in the memtable";
  }
  auto store = OpenOrDie(Options(path));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ListOrDie(*store), Steps({1, 2}));
  auto c = store->ReadCheckpoint(Step(2));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectCheckpoint(*c, 2, big, "big");
}

TEST(StateStore, ACheckpointWithoutBlobsRoundTrips) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_TRUE(store->WriteCheckpoint(Step(0), {}).ok());
  auto latest = store->LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->step, Step(0));
  EXPECT_TRUE(latest->blobs.empty());
  EXPECT_TRUE(latest->metadata.empty());
}

TEST(StateStore, RewritingAStepReplacesAllItsBlobs) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  const Blobs first = MakeBlobs(4, {100, 200, 300});
  const Blobs second = MakeBlobs(4, {50}, /*salt=*/9);
  ASSERT_TRUE(store->WriteCheckpoint(Step(4), first.Refs(), "one").ok());
  ASSERT_TRUE(store->WriteCheckpoint(Step(4), second.Refs(), "two").ok());
  auto got = store->ReadCheckpoint(Step(4));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectCheckpoint(*got, 4, second, "two");
  auto count = CountBlobsForTesting(*store, Step(4));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 1u);
}

TEST(StateStore, BadCheckpointArgumentsAreInvalidAndWriteNothing) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  const std::string x = "x";
  EXPECT_EQ(store->WriteCheckpoint(Step(-1), {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteCheckpoint(Step(1), {{"", x.data(), 1, nullptr}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store->WriteCheckpoint(Step(1), {{std::string(1025, 'n'), x.data(), 1, nullptr}}).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store->WriteCheckpoint(Step(1), {{"a", x.data(), 1, nullptr}, {"a", x.data(), 1, nullptr}})
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteCheckpoint(Step(1), {{"a", nullptr, 1, nullptr}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ListOrDie(*store).empty());
}

// ---------------------------------------------------------------------------
// Atomicity

TEST(StateStore, ACheckpointInterruptedBeforeItsManifestIsInvisibleAfterReopening) {
  TempDir dir;
  const Blobs ten = MakeBlobs(10, {1000, 2000});
  const Blobs twenty = MakeBlobs(20, {1000, 2000, 3000});
  {
    auto store = OpenOrDie(Options(dir.Sub("s")));
    ASSERT_TRUE(store->WriteCheckpoint(Step(10), ten.Refs(), "ten").ok());
    ASSERT_TRUE(WriteBlobsWithoutManifestForTesting(store.get(), Step(20), twenty.Refs()).ok());
    auto count = CountBlobsForTesting(*store, Step(20));
    ASSERT_TRUE(count.ok());
    ASSERT_EQ(*count, 3u);                      // the blobs are really there...
    EXPECT_EQ(ListOrDie(*store), Steps({10}));  // ...but no reader sees them
  }
  auto store = OpenOrDie(Options(dir.Sub("s")));
  EXPECT_EQ(ListOrDie(*store), Steps({10}));
  auto latest = store->LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ExpectCheckpoint(*latest, 10, ten, "ten");
  EXPECT_EQ(store->ReadCheckpoint(Step(20)).status().code(), StatusCode::kNotFound);
  // Open removed the orphans, and the step can be written again.
  auto count = CountBlobsForTesting(*store, Step(20));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 0u);
  const Blobs again = MakeBlobs(20, {10});
  ASSERT_TRUE(store->WriteCheckpoint(Step(20), again.Refs(), "twenty").ok());
  auto got = store->LatestCheckpoint();
  ASSERT_TRUE(got.ok());
  ExpectCheckpoint(*got, 20, again, "twenty");
}

// A child process writes checkpoints as fast as it can and is SIGKILLed right
// after one of them is reported durable, i.e. while the next one is being
// written. Every checkpoint the store then lists must read back whole and
// exact, and the reported one must be among them.
TEST(StateStore, ASigkillDuringACheckpointWriteLeavesOnlyWholeCheckpoints) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::vector<size_t> sizes = {1 << 20, 3 << 20, 12345, 2 << 20};
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(fds[0]);
      auto store = StateStore::Open(Options(path));
      if (!store.ok()) _exit(3);
      auto held = (*store)->ListCheckpoints();
      int64_t step = held.ok() && !held->empty() ? held->back().value() + 1 : 0;
      for (;; ++step) {
        const Blobs b = MakeBlobs(step, sizes);
        if (!(*store)->WriteCheckpoint(Step(step), b.Refs(), "step " + std::to_string(step)).ok())
          _exit(4);
        if (write(fds[1], &step, sizeof step) != sizeof step) _exit(5);
      }
    }
    close(fds[1]);
    int64_t reported = -1, got = 0;
    const int wanted = 2 + round;  // kill after a few durable checkpoints
    for (int n = 0; n < wanted && read(fds[0], &got, sizeof got) == sizeof got; ++n) reported = got;
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself with " << WEXITSTATUS(status);
    ASSERT_GE(reported, 0) << "the writer never reported a checkpoint";

    auto store = OpenOrDie(Options(path));
    ASSERT_NE(store, nullptr);
    const std::vector<Step> held = ListOrDie(*store);
    ASSERT_FALSE(held.empty());
    EXPECT_LE(held.size(), 2u);
    EXPECT_GE(held.back().value(), reported);
    EXPECT_LE(held.back().value(), reported + 1);
    for (Step s : held) {
      auto c = store->ReadCheckpoint(s);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      ExpectCheckpoint(*c, s.value(), MakeBlobs(s.value(), sizes),
                       "step " + std::to_string(s.value()));
    }
  }
}

// ---------------------------------------------------------------------------
// Retention

TEST(StateStore, RetentionKeepsExactlyTheNewestTwo) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  for (int64_t step : {0, 5, 10, 15, 20}) {
    ASSERT_TRUE(store->WriteCheckpoint(Step(step), MakeBlobs(step, {64, 64}).Refs()).ok());
  }
  EXPECT_EQ(ListOrDie(*store), Steps({15, 20}));
  for (int64_t gone : {0, 5, 10}) {
    EXPECT_EQ(store->ReadCheckpoint(Step(gone)).status().code(), StatusCode::kNotFound) << gone;
    auto count = CountBlobsForTesting(*store, Step(gone));
    ASSERT_TRUE(count.ok());
    EXPECT_EQ(*count, 0u) << "the blobs of step " << gone << " outlived their checkpoint";
  }
  for (int64_t kept : {15, 20}) {
    auto c = store->ReadCheckpoint(Step(kept));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ExpectCheckpoint(*c, kept, MakeBlobs(kept, {64, 64}), "");
  }
  // A step older than both kept ones would be dropped at once: refused.
  EXPECT_EQ(store->WriteCheckpoint(Step(12), MakeBlobs(12, {8}).Refs()).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ListOrDie(*store), Steps({15, 20}));
  // One between them replaces the older.
  ASSERT_TRUE(store->WriteCheckpoint(Step(17), MakeBlobs(17, {8}).Refs()).ok());
  EXPECT_EQ(ListOrDie(*store), Steps({17, 20}));
}

TEST(StateStore, RetentionFollowsKeepCheckpoints) {
  TempDir dir;
  StoreOptions o = Options(dir.Sub("s"));
  o.keep_checkpoints = 3;
  auto store = OpenOrDie(o);
  for (int64_t step = 0; step < 6; ++step) ASSERT_TRUE(store->WriteCheckpoint(Step(step), {}).ok());
  EXPECT_EQ(ListOrDie(*store), Steps({3, 4, 5}));
  o.keep_checkpoints = 0;
  EXPECT_EQ(StateStore::Open(o).status().code(), StatusCode::kInvalidArgument);
}

// A shard keeps every step the job may still roll back to: the retention floor
// holds checkpoints beyond the newest N until it moves past them.
TEST(StateStore, RetainFromKeepsEveryCheckpointFromTheFloorOn) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));  // keep 2
  store->RetainFrom(Step(-1));                    // floor unknown: keep all
  for (int64_t step = 0; step < 4; ++step) ASSERT_TRUE(store->WriteCheckpoint(Step(step), {}).ok());
  EXPECT_EQ(ListOrDie(*store), Steps({0, 1, 2, 3}));
  store->RetainFrom(Step(1));  // every shard holds step 1: 0 may go at the next write
  EXPECT_EQ(ListOrDie(*store), Steps({0, 1, 2, 3}));
  ASSERT_TRUE(store->WriteCheckpoint(Step(4), {}).ok());
  EXPECT_EQ(ListOrDie(*store), Steps({1, 2, 3, 4}));
  // Below the floor and outside the newest two: refused, nothing changes.
  EXPECT_EQ(store->WriteCheckpoint(Step(0), {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ListOrDie(*store), Steps({1, 2, 3, 4}));
  // A floor past the newest N leaves the newest N.
  store->RetainFrom(Step(9));
  ASSERT_TRUE(store->WriteCheckpoint(Step(5), {}).ok());
  EXPECT_EQ(ListOrDie(*store), Steps({4, 5}));
}

TEST(StateStore, DropCheckpointsAfterRemovesOnlyNewerOnes) {
  TempDir dir;
  StoreOptions o = Options(dir.Sub("s"));
  o.keep_checkpoints = 3;
  {
    auto store = OpenOrDie(o);
    for (int64_t step : {10, 20, 30})
      ASSERT_TRUE(store->WriteCheckpoint(Step(step), MakeBlobs(step, {16}).Refs()).ok());
    ASSERT_TRUE(store->DropCheckpointsAfter(Step(30)).ok());
    EXPECT_EQ(ListOrDie(*store), Steps({10, 20, 30}));
    ASSERT_TRUE(store->DropCheckpointsAfter(Step(15)).ok());
    EXPECT_EQ(ListOrDie(*store), Steps({10}));
  }
  auto store = OpenOrDie(o);
  EXPECT_EQ(ListOrDie(*store), Steps({10}));
  auto count = CountBlobsForTesting(*store, Step(20));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 0u);
}

// ---------------------------------------------------------------------------
// Identity

TEST(StateStore, AStoreOfAnotherJobOrOwnerIsRefusedNamingBoth) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  { ASSERT_NE(OpenOrDie(Options(path, "job-a", "shard/0")), nullptr); }
  auto other_job = StateStore::Open(Options(path, "job-b", "shard/0"));
  ASSERT_FALSE(other_job.ok());
  EXPECT_EQ(other_job.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(other_job.status(), "job-a") && Mentions(other_job.status(), "job-b") &&
              Mentions(other_job.status(), path))
      << other_job.status().ToString();
  auto other_owner = StateStore::Open(Options(path, "job-a", "shard/1"));
  ASSERT_FALSE(other_owner.ok());
  EXPECT_EQ(other_owner.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(other_owner.status(), "shard/0") &&
              Mentions(other_owner.status(), "shard/1"))
      << other_owner.status().ToString();
  // Without a job id an existing store is opened for its own job.
  auto adopted = StateStore::Open(Options(path, "", "shard/0"));
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ((*adopted)->job_id(), "job-a");
}

TEST(StateStore, CreatingNeedsAJobIdAndAnOwnerAndOpeningOnlyAMissingStoreIsNotFound) {
  TempDir dir;
  EXPECT_EQ(StateStore::Open(Options(dir.Sub("a"), "", "shard/0")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StateStore::Open(Options(dir.Sub("a"), "job", "")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StateStore::Open(Options("", "job", "x")).status().code(),
            StatusCode::kInvalidArgument);
  StoreOptions o = Options(dir.Sub("b"));
  o.create_if_missing = false;
  EXPECT_EQ(StateStore::Open(o).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir.Sub("b")));
}

// A shard killed between creating its store and writing the store's identity
// (a spare of a move, killed at once) starts again on it as on no store.
TEST(StateStore, AStoreCreatedButNeverNamedIsNotFoundUntilItsJobIsNamed) {
  TempDir dir;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.Sub("s"), &raw).ok());
    delete raw;
  }
  StoreOptions o = Options(dir.Sub("s"), "", "shard/2");
  o.create_if_missing = false;
  EXPECT_EQ(StateStore::Open(o).status().code(), StatusCode::kNotFound);
  o.job_id = "job";
  o.create_if_missing = true;
  EXPECT_TRUE(StateStore::Open(o).ok());
}

// An exporter reads a running shard's store: no lock, what was durable at open
// time, and no write goes through.
TEST(StateStore, ReadOnlyOpensAStoreItsOwnerHoldsAndRefusesWrites) {
  TempDir dir;
  auto owner = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->WriteCheckpoint(Step(3), MakeBlobs(3, {64, 4096}).Refs(), "meta").ok());
  StoreOptions o = Options(dir.Sub("s"), "", "shard/0");
  o.read_only = true;
  auto reader = OpenOrDie(o);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->job_id(), "job-a");
  auto c = reader->LatestCheckpoint();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectCheckpoint(*c, 3, MakeBlobs(3, {64, 4096}), "meta");
  EXPECT_EQ(reader->WriteCheckpoint(Step(4), {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader->Put("k", "v").code(), StatusCode::kFailedPrecondition);
  // The owner writes on; the reader keeps the view it opened with.
  ASSERT_TRUE(owner->WriteCheckpoint(Step(5), {}).ok());
  EXPECT_EQ(ListOrDie(*reader), Steps({3}));
  // Read-only never creates, and never adopts a store of another owner.
  o.path = dir.Sub("missing");
  EXPECT_EQ(StateStore::Open(o).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir.Sub("missing")));
  o = Options(dir.Sub("s"), "", "coordinator");
  o.read_only = true;
  EXPECT_EQ(StateStore::Open(o).status().code(), StatusCode::kFailedPrecondition);
}

TEST(StateStore, AStoreOpenElsewhereIsUnavailable) {
  TempDir dir;
  auto first = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_NE(first, nullptr);
  auto second = StateStore::Open(Options(dir.Sub("s")));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
}

// ---------------------------------------------------------------------------
// Bad disks

TEST(StateStore, APathThroughARegularFileIsAClearFailedPrecondition) {
  TempDir dir;
  const std::string file = dir.Sub("plain-file");
  std::ofstream(file) << "not a directory";
  for (const std::string& path : {file + "/store", file + "/a/b/store", file}) {
    auto store = StateStore::Open(Options(path));
    ASSERT_FALSE(store.ok()) << path;
    EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition) << store.status().ToString();
    EXPECT_TRUE(Mentions(store.status(), path)) << store.status().ToString();
  }
}

// Writes a checkpoint whose one blob is a recognizable pattern, closes the
// store (which flushes it into an SST file), and returns the SST holding it.
std::string WriteAndFindSst(const std::string& path, const std::string& blob) {
  {
    auto store = OpenOrDie(Options(path));
    EXPECT_TRUE(
        store->WriteCheckpoint(Step(3), {{"p", blob.data(), blob.size(), nullptr}}, "m").ok());
  }
  for (const auto& e : fs::directory_iterator(path)) {
    if (e.path().extension() != ".sst") continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.find(blob.substr(1000, 64)) != std::string::npos) return e.path().string();
  }
  ADD_FAILURE() << "no SST file holds the blob";
  return "";
}

void FlipBytesAt(const std::string& file, const std::string& needle) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  f.seekp(static_cast<std::streamoff>(at + needle.size() / 2));
  const char flipped[2] = {static_cast<char>(~bytes[at + needle.size() / 2]),
                           static_cast<char>(~bytes[at + needle.size() / 2 + 1])};
  f.write(flipped, 2);
  ASSERT_TRUE(f.good());
}

TEST(StateStore, FlippedBytesInAnSstFileAreDataLossNeverWrongData) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string blob = Pattern(3, 0, 256 << 10);
  const std::string sst = WriteAndFindSst(path, blob);
  ASSERT_FALSE(sst.empty());
  FlipBytesAt(sst, blob.substr(1000, 64));
  auto store = StateStore::Open(Options(path));
  if (!store.ok()) {  // found while opening: as good as found while reading
    EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
    return;
  }
  auto c = (*store)->ReadCheckpoint(Step(3));
  ASSERT_FALSE(c.ok()) << "corrupted bytes were returned as a good checkpoint";
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << c.status().ToString();
  EXPECT_TRUE(Mentions(c.status(), path)) << c.status().ToString();
  EXPECT_EQ((*store)->LatestCheckpoint().status().code(), StatusCode::kDataLoss);
}

TEST(StateStore, ACorruptManifestIsDataLoss) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_TRUE(store->WriteCheckpoint(Step(5), MakeBlobs(5, {100, 200}).Refs(), "meta").ok());
  const std::vector<std::function<void(std::string*)>> edits = {
      [](std::string* m) { (*m)[m->size() / 2] ^= 0x40; },  // one bit in the middle
      [](std::string* m) { (*m)[0] = 'X'; },                // the magic
      [](std::string* m) { m->resize(m->size() - 5); },     // truncated
      [](std::string* m) { m->push_back('\0'); },           // trailing garbage
      [](std::string* m) { m->clear(); },                   // empty
      [](std::string* m) { *m = std::string(m->size(), '\xff'); },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    std::string saved;
    ASSERT_TRUE(EditManifestForTesting(store.get(), Step(5), [&](std::string* m) {
                  saved = *m;
                  edits[i](m);
                }).ok());
    auto c = store->ReadCheckpoint(Step(5));
    EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << "edit " << i;
    ASSERT_TRUE(
        EditManifestForTesting(store.get(), Step(5), [&](std::string* m) { *m = saved; }).ok());
    ASSERT_TRUE(store->ReadCheckpoint(Step(5)).ok());
  }
}

TEST(StateStore, BlobsThatDisagreeWithTheManifestAreDataLoss) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_TRUE(store->WriteCheckpoint(Step(5), MakeBlobs(5, {100, 200}).Refs()).ok());
  // Same count, one blob of another size.
  ASSERT_TRUE(
      WriteBlobsWithoutManifestForTesting(store.get(), Step(5), MakeBlobs(5, {100, 199}).Refs())
          .ok());
  auto c = store->ReadCheckpoint(Step(5));
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Mentions(c.status(), "199")) << c.status().ToString();
  // A missing blob.
  ASSERT_TRUE(
      WriteBlobsWithoutManifestForTesting(store.get(), Step(5), MakeBlobs(5, {100}).Refs()).ok());
  EXPECT_EQ(store->ReadCheckpoint(Step(5)).status().code(), StatusCode::kDataLoss);
  // A blob too many.
  ASSERT_TRUE(
      WriteBlobsWithoutManifestForTesting(store.get(), Step(5), MakeBlobs(5, {100, 200, 1}).Refs())
          .ok());
  EXPECT_EQ(store->ReadCheckpoint(Step(5)).status().code(), StatusCode::kDataLoss);
}

TEST(StateStore, AFullDiskIsResourceExhaustedAndKeepsTheOlderCheckpoint) {
  TempDir dir;
  SmallDisk disk(dir, "6m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << disk.error();
  const std::string path = disk.path() + "/s";
  const Blobs small = MakeBlobs(1, {64 << 10});
  {
    auto store = OpenOrDie(Options(path));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WriteCheckpoint(Step(1), small.Refs(), "small").ok());
    const Blobs big = MakeBlobs(2, {16 << 20});
    const Status st = store->WriteCheckpoint(Step(2), big.Refs(), "big");
    ASSERT_FALSE(st.ok()) << "16 MiB fitted on a 6 MiB file system";
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
    EXPECT_TRUE(Mentions(st, path)) << st.ToString();
  }
  // Reopened on the still full disk (the torn end of the log is dropped): the
  // older checkpoint is intact and nothing of the big one is visible.
  auto store = StateStore::Open(Options(path));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(ListOrDie(**store), Steps({1}));
  auto c = (*store)->LatestCheckpoint();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectCheckpoint(*c, 1, small, "small");
}

// ---------------------------------------------------------------------------
// Named strings

TEST(StateStoreStrings, PutGetDeleteAndPutAllSurviveReopening) {
  TempDir dir;
  const std::string binary("a\0b\xff", 4);
  {
    auto store = OpenOrDie(Options(dir.Sub("s"), "job-a", "coordinator"));
    ASSERT_TRUE(store->Put("spec", "the job spec").ok());
    ASSERT_TRUE(store->Put("binary", binary).ok());
    ASSERT_TRUE(store->Put("gone", "x").ok());
    ASSERT_TRUE(store->Delete("gone").ok());
    ASSERT_TRUE(store->PutAll({{"step", "41"}, {"members", "w1,w2"}, {"spec", "v2"}}).ok());
    ASSERT_TRUE(store->Put("empty", "").ok());
  }
  auto store = OpenOrDie(Options(dir.Sub("s"), "job-a", "coordinator"));
  auto get = [&](const std::string& k) {
    auto v = store->Get(k);
    EXPECT_TRUE(v.ok()) << k << ": " << v.status().ToString();
    return v.ok() ? *v : std::string("<missing>");
  };
  EXPECT_EQ(get("spec"), "v2");
  EXPECT_EQ(get("binary"), binary);
  EXPECT_EQ(get("step"), "41");
  EXPECT_EQ(get("members"), "w1,w2");
  EXPECT_EQ(get("empty"), "");
  EXPECT_EQ(store->Get("gone").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Get("never").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Get("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutAll({{"ok", "1"}, {"", "2"}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("ok").status().code(), StatusCode::kNotFound);  // all or nothing
}

TEST(StateStoreStrings, KeysNeverCollideWithCheckpoints) {
  TempDir dir;
  auto store = OpenOrDie(Options(dir.Sub("s")));
  ASSERT_TRUE(store->Put("ck/m/00000000000000000009", "not a manifest").ok());
  ASSERT_TRUE(store->Put("id", "not the identity").ok());
  EXPECT_TRUE(ListOrDie(*store).empty());
  ASSERT_TRUE(store->WriteCheckpoint(Step(9), {}).ok());
  auto v = store->Get("ck/m/00000000000000000009");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "not a manifest");
  store.reset();
  EXPECT_NE(OpenOrDie(Options(dir.Sub("s"))), nullptr);
}

}  // namespace
}  // namespace eps
