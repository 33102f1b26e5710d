// durable_bench: what the durable state costs (storage/state_store.h and
// server/shard_state.h), against raw RocksDB moving the same bytes in the same
// run. No libtorch: the store and a shard's state in this process, and each
// recovery in a child process running this program again.
//
//   memory   memcpy of 400 MB into fresh pages and into warm ones: on a host
//            where page faults are slow (this VM: 12-18 us per 4 KiB page),
//            the first bounds every figure that lands bytes on fresh pages.
//   write    StateStore::WriteCheckpoint of a model of --write_elems fp32
//            values cut into blobs of --chunk_elems (4 MiB: a shard's chunks,
//            "value/<chunk>"), into a fresh store; against one synced
//            WriteBatch of the same keys (the store's blob key format) and
//            values into a fresh RocksDB opened with default options but no
//            compression (the store does not compress either); and the same
//            with the batch's buffer reserved up front (WriteBatch(reserved_bytes):
//            what growing it costs). Timed: the call (the store's bookkeeping,
//            building the batch, the synced write); not timed: opening, and the
//            memtable flush at close. One unmeasured round first: a shard
//            writes checkpoints all along, on a heap that earlier ones warmed.
//   recover  the state of one shard of a --recover_elems-parameter model under
//            SGD with momentum (what examples/fashion_mnist_mlp.flags uses):
//            ShardState::Snapshot's blobs, the values and the momentum slot
//            (2 x 4 bytes per parameter), written once to a store and once to a
//            raw RocksDB, both flushed and closed. Timed: StateStore::Open +
//            LatestCheckpoint, and that + ShardState::Restore into a new
//            ShardState; against raw RocksDB: DB::Open and one iterator over
//            every key, each value copied into one buffer (the least a reader
//            must do to hold the bytes). Each recovery runs in a fresh process
//            (--recover_child), as a restarted shard does: no heap pages are
//            left warm by an earlier round, and process start-up is not timed.
//            The files stay in the page cache (written just before): "warm".
//            With --cold, also "cold": before each open every file of the
//            database is dropped from the page cache with
//            posix_fadvise(DONTNEED) (a hypervisor may still cache them).
//
// Like the shard (server/shard_main.cc), every process keeps freed memory
// (common/memory.h). Store and raw alternate within each of --reps rounds, so
// host noise hits both alike; the medians are reported. Prints a
// human-readable line per measurement and, for scripts/bench.sh, one JSON
// object per figure on a line of its own ({"kind":"write",...}: the only stdout
// lines that start with '{'). The scratch folder (--dir) is
// removed at the end. Never fails on timing.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "common/clock.h"
#include "common/layout.h"
#include "common/memory.h"
#include "common/status.h"
#include "common/tree.h"
#include "schema/messages.h"
#include "server/shard_state.h"
#include "storage/state_store.h"

DEFINE_string(dir, "", "Scratch folder for the stores (must not exist; removed at the end)");
DEFINE_string(write_elems, "10000000,100000000",
              "Model sizes (fp32 elements) of the write measurement, comma-separated");
DEFINE_int64(recover_elems, 100000000,
             "Parameters of the recovered shard (0: skip the recovery measurement)");
DEFINE_int64(chunk_elems, 1 << 20, "Largest chunk (blob), in elements (1<<20 = 4 MiB)");
DEFINE_int32(reps, 3, "Rounds of each measurement (store and raw alternate); medians are reported");
DEFINE_bool(cold, false,
            "Also time recovery after dropping the database files from the page cache");
// Internal: one recovery in this process, started by the recover measurement.
DEFINE_string(recover_child, "",
              "internal: store | raw: recover --recover_path once and print the seconds");
DEFINE_string(recover_path, "", "internal: the database the child recovers");
DEFINE_uint64(recover_bytes, 0, "internal: the bytes the raw database holds");

namespace eps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kJob[] = "durable_bench";
constexpr char kOwner[] = "shard/0";

double Median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

double GBps(size_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

std::string Join(const std::vector<double>& xs) {
  std::ostringstream out;
  for (size_t i = 0; i < xs.size(); ++i) out << (i ? " " : "") << std::fixed << xs[i];
  return out.str();
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  return s.ok() ? OkStatus() : Internal(what + ": " + s.ToString());
}

// Random floats in [-0.5, 0.5) (xorshift64): incompressible, as trained parameters are.
std::vector<float> RandomFloats(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
  }
  return v;
}

size_t BytesOf(const std::vector<BlobRef>& blobs) {
  size_t n = 0;
  for (const BlobRef& b : blobs) n += b.size;
  return n;
}

// ---- raw RocksDB ------------------------------------------------------------------

// The key the store gives blob `index` of a checkpoint (storage/state_store.cc): the
// raw database gets keys of the same sizes.
std::string RawKey(size_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ck/b/%020d/%010zu", 1, index);
  return buf;
}

rocksdb::Options RawOptions(bool create) {
  rocksdb::Options o;  // RocksDB's defaults, but:
  o.create_if_missing = create;
  o.compression = rocksdb::kNoCompression;  // as the store: floats do not compress
  return o;
}

StatusOr<std::unique_ptr<rocksdb::DB>> OpenRaw(const std::string& path, bool create) {
  rocksdb::DB* db = nullptr;
  EPS_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(RawOptions(create), path, &db), "opening raw " + path));
  return std::unique_ptr<rocksdb::DB>(db);
}

struct RawWriteTimes {
  double batch_s = 0;  // building the WriteBatch (copying the values into it)
  double total_s = 0;  // that and the synced write
};

// One synced WriteBatch of every blob; with `reserve`, its buffer sized up front.
StatusOr<RawWriteTimes> RawWrite(rocksdb::DB& db, const std::vector<BlobRef>& blobs, bool reserve) {
  const Clock::time_point t0 = Clock::now();
  size_t reserved = 0;
  if (reserve) {
    reserved = 64;  // the batch's header
    for (size_t i = 0; i < blobs.size(); ++i)
      reserved += 1 + 10 + RawKey(i).size() + blobs[i].size;  // tag, varints
  }
  rocksdb::WriteBatch batch(reserved);
  for (size_t i = 0; i < blobs.size(); ++i) {
    EPS_RETURN_IF_ERROR(
        FromRocks(batch.Put(RawKey(i),
                            rocksdb::Slice(static_cast<const char*>(blobs[i].data), blobs[i].size)),
                  "batching"));
  }
  RawWriteTimes t;
  t.batch_s = SecondsSince(t0);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  EPS_RETURN_IF_ERROR(FromRocks(db.Write(sync, &batch), "raw write"));
  t.total_s = SecondsSince(t0);
  return t;
}

// Opens the raw database and copies every value into one buffer; returns the seconds.
StatusOr<double> RawRecover(const std::string& path, size_t expected_bytes) {
  const Clock::time_point t0 = Clock::now();
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenRaw(path, false));
  std::unique_ptr<char[]> buffer(new char[expected_bytes]);
  size_t at = 0;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice v = it->value();
    if (v.size() > expected_bytes - at)
      return Internal("raw database " + path + " holds more bytes than written");
    std::memcpy(buffer.get() + at, v.data(), v.size());
    at += v.size();
  }
  EPS_RETURN_IF_ERROR(FromRocks(it->status(), "raw read"));
  const double s = SecondsSince(t0);
  if (at != expected_bytes)
    return Internal("raw database " + path + " gave back fewer bytes than written");
  return s;
}

// ---- the store --------------------------------------------------------------------

StatusOr<std::unique_ptr<StateStore>> OpenStore(const std::string& path, bool create) {
  StoreOptions o;
  o.path = path;
  o.job_id = kJob;
  o.owner = kOwner;
  o.create_if_missing = create;
  return StateStore::Open(o);
}

// Drops every file of `dir` from the page cache (clean pages: RocksDB syncs what it writes).
Status DropFromPageCache(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Internal("open " + e.path().string() + ": " + std::strerror(errno));
    fdatasync(fd);
    const int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rc != 0) return Internal("posix_fadvise " + e.path().string() + ": " + std::strerror(rc));
  }
  if (ec) return Internal("listing " + dir + ": " + ec.message());
  return OkStatus();
}

// ---- this host's memory ---------------------------------------------------------------

// Copying `bytes` into fresh pages (mmap'd, never touched) and again into the same,
// now warm, pages: every recovery lands its bytes on fresh pages of a new process,
// so the first figure bounds it on a host whose page faults are slow.
Status MeasureMemory(size_t bytes) {
  const std::vector<float> src = RandomFloats(static_cast<int64_t>(bytes / sizeof(float)), 3);
  bytes = src.size() * sizeof(float);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Internal(std::string("mmap: ") + std::strerror(errno));
  Clock::time_point t0 = Clock::now();
  std::memcpy(p, src.data(), bytes);
  const double fresh = SecondsSince(t0);
  t0 = Clock::now();
  std::memcpy(p, src.data(), bytes);
  const double warm = SecondsSince(t0);
  munmap(p, bytes);
  std::printf(
      "memcpy of %.0f MB: %.3f s into fresh pages (%.1f us per 4 KiB page), %.3f s into warm "
      "ones\n",
      bytes / 1e6, fresh, (fresh - warm) * 1e6 / (bytes / 4096.0), warm);
  std::printf(
      "{\"kind\":\"memory\",\"bytes\":%zu,\"fresh_s\":%.4f,\"warm_s\":%.4f,"
      "\"fresh_gbps\":%.3f,\"warm_gbps\":%.3f}\n",
      bytes, fresh, warm, GBps(bytes, fresh), GBps(bytes, warm));
  return OkStatus();
}

// ---- write --------------------------------------------------------------------------

Status MeasureWrite(const std::string& scratch, int64_t elems) {
  const std::vector<float> values = RandomFloats(elems, 1);
  std::vector<BlobRef> blobs;
  for (int64_t at = 0, i = 0; at < elems; at += FLAGS_chunk_elems, ++i) {
    const int64_t n = std::min<int64_t>(FLAGS_chunk_elems, elems - at);
    blobs.push_back({"value/" + std::to_string(i),
                     values.data() + at,
                     static_cast<size_t>(n) * sizeof(float),
                     {}});
  }
  const size_t bytes = BytesOf(blobs);
  std::vector<double> store_s, raw_s, raw_batch_s, reserved_s;
  for (int r = -1; r < FLAGS_reps; ++r) {  // round -1 warms the heap up and is not counted
    const std::string store_dir = scratch + "/write_store", raw_dir = scratch + "/write_raw";
    {
      EPS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, OpenStore(store_dir, true));
      const Clock::time_point t0 = Clock::now();
      EPS_RETURN_IF_ERROR(store->WriteCheckpoint(Step(1), blobs));
      if (r >= 0) store_s.push_back(SecondsSince(t0));
    }
    for (bool reserve : {false, true}) {
      EPS_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenRaw(raw_dir, true));
      EPS_ASSIGN_OR_RETURN(RawWriteTimes t, RawWrite(*db, blobs, reserve));
      if (r >= 0) {
        (reserve ? reserved_s : raw_s).push_back(t.total_s);
        if (!reserve) raw_batch_s.push_back(t.batch_s);
      }
      db.reset();
      fs::remove_all(raw_dir);
    }
    fs::remove_all(store_dir);
  }
  const double st = Median(store_s), raw = Median(raw_s), reserved = Median(reserved_s);
  std::printf("write %" PRId64
              " floats (%zu blobs, %.0f MB), seconds per round: StateStore %s | raw %s "
              "(of which building the batch %s) | raw, batch reserved %s\n",
              elems, blobs.size(), bytes / 1e6, Join(store_s).c_str(), Join(raw_s).c_str(),
              Join(raw_batch_s).c_str(), Join(reserved_s).c_str());
  std::printf("{\"kind\":\"write\",\"elems\":%" PRId64
              ",\"bytes\":%zu,\"blobs\":%zu,\"reps\":%d,\"store_s\":%.4f,\"raw_s\":%.4f,"
              "\"raw_batch_s\":%.4f,\"reserved_s\":%.4f,\"store_gbps\":%.3f,\"raw_gbps\":%.3f,"
              "\"reserved_gbps\":%.3f}\n",
              elems, bytes, blobs.size(), FLAGS_reps, st, raw, Median(raw_batch_s), reserved,
              GBps(bytes, st), GBps(bytes, raw), GBps(bytes, reserved));
  std::fflush(stdout);
  return OkStatus();
}

// ---- recover ------------------------------------------------------------------------

// Runs this program as a recovery child ("store" or "raw" on `path`) and returns the
// numbers it printed. Its stderr goes to ours.
StatusOr<std::vector<double>> RunChild(const char* kind, const std::string& path, size_t bytes) {
  std::vector<std::string> args = {"/proc/self/exe", std::string("--recover_child=") + kind,
                                   "--recover_path=" + path,
                                   "--recover_bytes=" + std::to_string(bytes),
                                   "--chunk_elems=" + std::to_string(FLAGS_chunk_elems)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {  // only async-signal-safe calls until exec
    dup2(fds[1], 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(std::string("the ") + kind + " recovery of " + path + " failed (status " +
                    std::to_string(status) + ")");
  }
  std::vector<double> xs;
  std::istringstream in(out);
  for (double x; in >> x;) xs.push_back(x);
  return xs;
}

// A configured shard (the only one of its job) at version 1 of a model of one
// `elems`-parameter tensor: initial values, then one step of SGD with momentum,
// so the momentum slot exists.
StatusOr<std::unique_ptr<ShardState>> TrainedShard(int64_t elems) {
  JobSpec spec;
  spec.job_id = kJob;
  spec.model = "synthetic";
  spec.virtual_workers = 1;
  spec.batch_per_vw = 1;
  spec.steps = 100;
  spec.optimizer.kind = "sgd";
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.chunk_elems = FLAGS_chunk_elems;
  spec.num_shards = 1;
  const ShardConfig config{spec,
                           {{"w", TensorKind::kParameter, DType::kFloat32, {elems}}, LossTensor()}};
  EPS_ASSIGN_OR_RETURN(Layout layout, MakeLayout(config.tensors, 1, spec.chunk_elems));
  auto state = std::make_unique<ShardState>(ShardId(0));
  EPS_RETURN_IF_ERROR(state->Configure(config));

  const std::vector<float> values = RandomFloats(elems, 2);
  const float loss = 1.0f;
  Push init, step;
  init.step = Step(-1);
  init.block = Block{0, 1};
  step.step = Step(0);
  step.block = Block{0, 1};
  for (const Chunk& c : layout.chunks) {
    if (layout.tensors[c.tensor].kind == TensorKind::kLoss) {
      step.chunks.push_back({c.id, &loss, sizeof loss, nullptr});
      continue;
    }
    const ChunkBytes bytes{c.id, values.data() + c.offset, layout.ChunkBytes(c), nullptr};
    init.chunks.push_back(bytes);
    step.chunks.push_back(bytes);  // the values serve as the gradient too
  }
  for (const Push* p : {&init, &step}) {
    EPS_ASSIGN_OR_RETURN(ShardState::PushOutcome out, state->HandlePush(*p));
    if (!out.completed) return Internal("the synthetic push did not complete its step");
  }
  return state;
}

Status MeasureRecover(const std::string& scratch, int64_t elems) {
  const std::string store_dir = scratch + "/recover_store", raw_dir = scratch + "/recover_raw";
  size_t bytes = 0, blobs = 0;
  double snapshot_ms = 0;
  {
    EPS_ASSIGN_OR_RETURN(std::unique_ptr<ShardState> state, TrainedShard(elems));
    const Clock::time_point t0 = Clock::now();
    EPS_ASSIGN_OR_RETURN(ShardSnapshot snapshot, state->Snapshot());
    snapshot_ms = SecondsSince(t0) * 1e3;
    state.reset();  // the snapshot holds what it needs
    bytes = BytesOf(snapshot.blobs);
    blobs = snapshot.blobs.size();
    {
      EPS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, OpenStore(store_dir, true));
      EPS_RETURN_IF_ERROR(
          store->WriteCheckpoint(snapshot.version, snapshot.blobs, snapshot.metadata));
    }  // flushed and closed
    EPS_ASSIGN_OR_RETURN(std::unique_ptr<rocksdb::DB> db, OpenRaw(raw_dir, true));
    EPS_RETURN_IF_ERROR(RawWrite(*db, snapshot.blobs, false).status());
    EPS_RETURN_IF_ERROR(FromRocks(db->Flush(rocksdb::FlushOptions()), "raw flush"));
    EPS_RETURN_IF_ERROR(FromRocks(db->Close(), "raw close"));
  }
  std::printf(
      "recover: %zu blobs, %zu bytes (values + momentum); ShardState::Snapshot took %.1f ms\n",
      blobs, bytes, snapshot_ms);
  std::printf("{\"kind\":\"snapshot\",\"elems\":%" PRId64 ",\"bytes\":%zu,\"ms\":%.2f}\n", elems,
              bytes, snapshot_ms);

  std::vector<const char*> caches = {"warm"};
  if (FLAGS_cold) caches.push_back("cold");
  for (const char* cache : caches) {
    const bool cold = std::strcmp(cache, "cold") == 0;
    std::vector<double> open_read_s, restore_s, raw_s;
    for (int r = 0; r < FLAGS_reps; ++r) {
      if (cold) EPS_RETURN_IF_ERROR(DropFromPageCache(store_dir));
      EPS_ASSIGN_OR_RETURN(std::vector<double> store, RunChild("store", store_dir, bytes));
      if (store.size() != 2) return Internal("the store's recovery printed no times");
      open_read_s.push_back(store[0]);
      restore_s.push_back(store[1]);
      if (cold) EPS_RETURN_IF_ERROR(DropFromPageCache(raw_dir));
      EPS_ASSIGN_OR_RETURN(std::vector<double> raw, RunChild("raw", raw_dir, bytes));
      if (raw.size() != 1) return Internal("the raw recovery printed no time");
      raw_s.push_back(raw[0]);
    }
    std::printf("recover %s, seconds per round: open+LatestCheckpoint %s | +Restore %s | raw %s\n",
                cache, Join(open_read_s).c_str(), Join(restore_s).c_str(), Join(raw_s).c_str());
    const double o = Median(open_read_s), rs = Median(restore_s), raw = Median(raw_s);
    std::printf("{\"kind\":\"recover\",\"cache\":\"%s\",\"elems\":%" PRId64
                ",\"bytes\":%zu,\"reps\":%d,\"read_s\":%.4f,\"restore_s\":%.4f,"
                "\"raw_s\":%.4f,\"read_gbps\":%.3f,\"restore_gbps\":%.3f,\"raw_gbps\":%.3f}\n",
                cache, elems, bytes, FLAGS_reps, o, rs, raw, GBps(bytes, o), GBps(bytes, rs),
                GBps(bytes, raw));
    std::fflush(stdout);
  }
  return OkStatus();
}

// The child's side: one recovery, its seconds printed on stdout ("store": open +
// LatestCheckpoint, then that + Restore; "raw": open + read).
Status RecoverOnce() {
  if (FLAGS_recover_child == "raw") {
    EPS_ASSIGN_OR_RETURN(double s, RawRecover(FLAGS_recover_path, FLAGS_recover_bytes));
    std::printf("%.6f\n", s);
    return OkStatus();
  }
  if (FLAGS_recover_child != "store")
    return InvalidArgument("--recover_child must be store or raw");
  const Clock::time_point t0 = Clock::now();
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store, OpenStore(FLAGS_recover_path, false));
  EPS_ASSIGN_OR_RETURN(Checkpoint checkpoint, store->LatestCheckpoint());
  const double read_s = SecondsSince(t0);
  ShardState restored(ShardId(0));
  EPS_RETURN_IF_ERROR(restored.Restore(std::move(checkpoint)));
  const double restore_s = SecondsSince(t0);
  if (restored.version() != Step(1)) return Internal("restored the wrong version");
  std::printf("%.6f %.6f\n", read_s, restore_s);
  return OkStatus();
}

Status Run() {
  std::error_code ec;
  if (FLAGS_dir.empty()) return InvalidArgument("--dir is required");
  if (fs::exists(FLAGS_dir, ec)) return InvalidArgument("--dir " + FLAGS_dir + " exists already");
  fs::create_directories(FLAGS_dir, ec);
  if (ec) return Internal("creating " + FLAGS_dir + ": " + ec.message());
  std::vector<int64_t> sizes;
  std::stringstream list(FLAGS_write_elems);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    char* end = nullptr;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || n < 1)
      return InvalidArgument("--write_elems: '" + item + "' is not a positive count");
    sizes.push_back(n);
  }
  Status st = MeasureMemory(400000000);
  for (int64_t n : sizes) {
    if (!st.ok()) break;
    st = MeasureWrite(FLAGS_dir, n);
  }
  if (st.ok() && FLAGS_recover_elems > 0) st = MeasureRecover(FLAGS_dir, FLAGS_recover_elems);
  fs::remove_all(FLAGS_dir, ec);
  return st;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "durable_bench --dir=SCRATCH [--write_elems=N,M] [--recover_elems=N] [--reps=3]");
  eps::KeepFreedMemory();  // as the shard does (server/shard_main.cc)
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_chunk_elems < 1 || FLAGS_reps < 1 || FLAGS_recover_elems < 0) {
    std::fprintf(stderr, "durable_bench: counts and sizes must be positive\n");
    return 2;
  }
  const eps::Status st = FLAGS_recover_child.empty() ? eps::Run() : eps::RecoverOnce();
  if (!st.ok()) {
    std::fprintf(stderr, "durable_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
