#include "storage/state_store.h"

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <set>
#include <system_error>

#include "common/memory.h"
#include "storage/rocks_status.h"
#include "storage/state_store_testing.h"

namespace eps {
namespace {

// ---- keys -------------------------------------------------------------------
//
//   id                          identity record (job, owner), written at creation
//   kv/<key>                    named strings
//   ck/m/<step:20 digits>       checkpoint manifest
//   ck/b/<step:20 digits>/<i:10 digits>   blob i of a checkpoint
//
// Zero-padded decimal keeps RocksDB's bytewise order equal to numeric order.

constexpr char kIdentityKey[] = "id";
constexpr char kKvPrefix[] = "kv/";
constexpr char kManifestPrefix[] = "ck/m/";
constexpr char kBlobPrefix[] = "ck/b/";
constexpr size_t kStepDigits = 20;
constexpr size_t kMaxName = 1024;
constexpr size_t kMaxBlobs = size_t{1} << 24;

constexpr char kIdentityMagic[8] = {'E', 'P', 'S', 'S', 'T', 'O', 'R', '1'};
constexpr char kManifestMagic[8] = {'E', 'P', 'S', 'C', 'K', 'P', 'T', '1'};

std::string StepDigits(Step step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRId64, step.value());
  return buf;
}

std::string ManifestKey(Step step) { return kManifestPrefix + StepDigits(step); }
// All blob keys of `step` lie in [BlobBegin(step), BlobEnd(step)).
std::string BlobBegin(Step step) { return kBlobPrefix + StepDigits(step) + "/"; }
std::string BlobEnd(Step step) { return kBlobPrefix + StepDigits(step) + "0"; }  // '0' follows '/'
std::string BlobKey(Step step, size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%010zu", index);
  return BlobBegin(step) + buf;
}

// Parses the 20 step digits at `pos` of `key`.
bool ParseStep(const rocksdb::Slice& key, size_t pos, Step* step) {
  if (key.size() < pos + kStepDigits) return false;
  int64_t v = 0;
  for (size_t i = pos; i < pos + kStepDigits; ++i) {
    const char c = key.data()[i];
    if (c < '0' || c > '9') return false;
    if (v > (INT64_MAX - (c - '0')) / 10) return false;
    v = v * 10 + (c - '0');
  }
  *step = Step(v);
  return true;
}

// ---- records: fixed-width little-endian integers and length-prefixed bytes ----

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutBytes(std::string* out, std::string_view s) {
  PutU64(out, s.size());
  out->append(s.data(), s.size());
}
uint32_t Crc(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt part = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), part);
    data += part;
    n -= part;
  }
  return static_cast<uint32_t>(crc);
}
// Appends the CRC of everything before it.
void Seal(std::string* out) { PutU32(out, Crc(out->data(), out->size())); }

// Reads a record written by the Put* functions; every read is bounds-checked.
class RecordReader {
 public:
  explicit RecordReader(std::string_view data) : data_(data) {}
  // Checks the magic and the trailing CRC; the CRC is no longer readable after.
  bool Open(const char (&magic)[8]) {
    if (data_.size() < 12 || std::memcmp(data_.data(), magic, 8) != 0) return false;
    const size_t body = data_.size() - 4;
    RecordReader tail(data_.substr(body));
    uint32_t crc = 0;
    if (!tail.U32(&crc) || crc != Crc(data_.data(), body)) return false;
    data_ = data_.substr(8, body - 8);
    return true;
  }
  bool U32(uint32_t* v) {
    if (data_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= uint32_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (data_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(8);
    return true;
  }
  bool Bytes(std::string* s, size_t max) {
    uint64_t n = 0;
    if (!U64(&n) || n > max || n > data_.size()) return false;
    s->assign(data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  bool done() const { return data_.empty(); }

 private:
  std::string_view data_;
};

struct Identity {
  std::string job_id;
  std::string owner;
};

std::string EncodeIdentity(const Identity& id) {
  std::string out(kIdentityMagic, 8);
  PutBytes(&out, id.job_id);
  PutBytes(&out, id.owner);
  Seal(&out);
  return out;
}

bool DecodeIdentity(std::string_view data, Identity* id) {
  RecordReader r(data);
  return r.Open(kIdentityMagic) && r.Bytes(&id->job_id, kMaxName) &&
         r.Bytes(&id->owner, kMaxName) && r.done();
}

struct Manifest {
  Step step{-1};
  std::string metadata;
  std::vector<std::pair<std::string, uint64_t>> blobs;  // name, size
};

std::string EncodeManifest(Step step, std::string_view metadata,
                           const std::vector<BlobRef>& blobs) {
  std::string out(kManifestMagic, 8);
  PutU64(&out, static_cast<uint64_t>(step.value()));
  PutBytes(&out, metadata);
  PutU64(&out, blobs.size());
  for (const BlobRef& b : blobs) {
    PutBytes(&out, b.name);
    PutU64(&out, b.size);
  }
  Seal(&out);
  return out;
}

bool DecodeManifest(std::string_view data, Manifest* m) {
  RecordReader r(data);
  uint64_t step = 0, count = 0;
  if (!r.Open(kManifestMagic) || !r.U64(&step) || !r.Bytes(&m->metadata, data.size()) ||
      !r.U64(&count) || count > kMaxBlobs) {
    return false;
  }
  m->step = Step(static_cast<int64_t>(step));
  m->blobs.clear();
  for (uint64_t i = 0; i < count; ++i) {
    std::string name;
    uint64_t size = 0;
    if (!r.Bytes(&name, kMaxName) || !r.U64(&size)) return false;
    m->blobs.emplace_back(std::move(name), size);
  }
  return r.done();
}

// ---- errors: FromRocks, FromErrno (storage/rocks_status.h) -------------------------

Status CheckName(std::string_view name, const char* what) {
  if (name.empty() || name.size() > kMaxName) {
    return InvalidArgument(std::string(what) + " must have 1 to " + std::to_string(kMaxName) +
                           " bytes, not " + std::to_string(name.size()));
  }
  return OkStatus();
}

// ---- the store ------------------------------------------------------------------

class StateStoreImpl final : public StateStore {
 public:
  StateStoreImpl(const StoreOptions& options, std::unique_ptr<rocksdb::DB> db, Identity identity)
      : path_(options.path),
        keep_(options.keep_checkpoints),
        read_only_(options.read_only),
        db_(std::move(db)),
        job_id_(std::move(identity.job_id)),
        owner_(std::move(identity.owner)) {
    sync_.sync = true;
  }

  ~StateStoreImpl() override {
    rocksdb::Status st;
    if (!read_only_) {
      rocksdb::FlushOptions flush;
      flush.wait = true;
      st = db_->Flush(flush);
      if (!st.ok())
        LOG(WARNING) << "store " << path_ << ": flush at close failed: " << st.ToString();
    }
    st = db_->Close();
    if (!st.ok()) LOG(WARNING) << "store " << path_ << ": close failed: " << st.ToString();
  }

  const std::string& path() const override { return path_; }
  const std::string& job_id() const override { return job_id_; }
  const std::string& owner() const override { return owner_; }

  Status WriteCheckpoint(Step step, const std::vector<BlobRef>& blobs,
                         std::string_view metadata) override {
    EPS_RETURN_IF_ERROR(CheckBlobs(step, blobs));
    std::lock_guard<std::mutex> lock(write_mu_);
    EPS_ASSIGN_OR_RETURN(std::vector<Step> held, ListCheckpoints());
    // Retention over what will be held after this write: the newest keep_
    // steps, and every step from the retention floor on.
    std::set<Step> after(held.begin(), held.end());
    after.insert(step);
    const Step floor(retain_from_.load());
    std::vector<Step> drop;
    while (after.size() > static_cast<size_t>(keep_) && *after.begin() < floor) {
      drop.push_back(*after.begin());
      after.erase(after.begin());
    }
    if (std::find(drop.begin(), drop.end(), step) != drop.end()) {
      return FailedPrecondition(
          "checkpoint of step " + std::to_string(step.value()) + " is older than the " +
          std::to_string(keep_) + " newest held in store " + path_ +
          " and than the step every shard holds (" + std::to_string(floor.value()) + ")");
    }
    // Sized up front: a batch left to grow doubles and recopies the blobs each
    // time (measured: 1.3-2.0 s of a 2.4 s write of 400 MB; sized, 3x faster).
    size_t reserve = 4096 + metadata.size();
    for (const BlobRef& b : blobs) reserve += b.size + b.name.size() + 64;
    rocksdb::WriteBatch batch(reserve);
    EPS_RETURN_IF_ERROR(AddBlobs(&batch, step, blobs));
    for (Step old : drop) EPS_RETURN_IF_ERROR(AddDrop(&batch, old));
    // The manifest is the batch's last entry: the checkpoint exists once it does.
    EPS_RETURN_IF_ERROR(
        Rocks(batch.Put(ManifestKey(step), EncodeManifest(step, metadata, blobs)), "batching"));
    EPS_RETURN_IF_ERROR(
        Rocks(db_->Write(sync_, &batch), "writing checkpoint " + std::to_string(step.value())));
    FlushIfOverfull(db_.get(), path_, "checkpoint " + std::to_string(step.value()));
    return OkStatus();
  }

  void RetainFrom(Step step) override { retain_from_.store(step.value()); }

  StatusOr<std::vector<Step>> ListCheckpoints() const override {
    rocksdb::ReadOptions ro = ReadOpts();
    const std::string end = "ck/m0";  // '0' follows '/'
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    std::vector<Step> steps;
    for (it->Seek(kManifestPrefix); it->Valid(); it->Next()) {
      Step s;
      if (it->key().size() != sizeof(kManifestPrefix) - 1 + kStepDigits ||
          !ParseStep(it->key(), sizeof(kManifestPrefix) - 1, &s)) {
        return DataLoss("store " + path_ + " holds a malformed checkpoint key '" +
                        it->key().ToString() + "'");
      }
      steps.push_back(s);
    }
    EPS_RETURN_IF_ERROR(Rocks(it->status(), "listing checkpoints"));
    return steps;
  }

  StatusOr<Checkpoint> LatestCheckpoint() const override {
    EPS_ASSIGN_OR_RETURN(std::vector<Step> steps, ListCheckpoints());
    if (steps.empty()) return NotFound("store " + path_ + " holds no checkpoint");
    return ReadCheckpoint(steps.back());
  }

  StatusOr<Checkpoint> ReadCheckpoint(Step step) const override {
    if (step.value() < 0) return NotFound("no checkpoint of step " + std::to_string(step.value()));
    // One snapshot for the manifest and its blobs: a concurrent write cannot
    // delete them half-way through the read.
    const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
    struct Release {
      rocksdb::DB* db;
      const rocksdb::Snapshot* s;
      ~Release() { db->ReleaseSnapshot(s); }
    } release{db_.get(), snapshot};
    rocksdb::ReadOptions ro = ReadOpts();
    ro.snapshot = snapshot;
    const std::string what = "checkpoint " + std::to_string(step.value());
    std::string value;
    rocksdb::Status rs = db_->Get(ro, ManifestKey(step), &value);
    if (rs.IsNotFound())
      return NotFound("store " + path_ + " holds no checkpoint of step " +
                      std::to_string(step.value()));
    EPS_RETURN_IF_ERROR(Rocks(rs, "reading the manifest of " + what));
    Manifest manifest;
    if (!DecodeManifest(value, &manifest) || manifest.step != step) {
      return DataLoss("the manifest of " + what + " in store " + path_ + " is corrupt");
    }
    Checkpoint out;
    out.step = step;
    out.metadata = std::move(manifest.metadata);
    out.blobs.reserve(manifest.blobs.size());
    const std::string begin = BlobBegin(step), end = BlobEnd(step);
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    ro.fill_cache = false;  // read once, sequentially
    ro.readahead_size = 8 << 20;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    it->Seek(begin);
    for (size_t i = 0; i < manifest.blobs.size(); ++i, it->Next()) {
      const auto& [name, size] = manifest.blobs[i];
      if (!it->Valid() || it->key() != BlobKey(step, i)) {
        EPS_RETURN_IF_ERROR(Rocks(it->status(), "reading " + what));
        return DataLoss(what + " in store " + path_ + " lacks blob '" + name + "'");
      }
      if (it->value().size() != size) {
        return DataLoss("blob '" + name + "' of " + what + " in store " + path_ + " has " +
                        std::to_string(it->value().size()) + " bytes, its manifest says " +
                        std::to_string(size));
      }
      // The blobs of a checkpoint are megabytes each, a restarted shard's first memory: on pages
      // advised huge, 1.3 GB of them cost a fault per 2 MiB rather than one per 4 KiB.
      Blob& blob = out.blobs.emplace_back(Blob{name, {}});
      blob.bytes.reserve(size);
      AdviseHugePages(blob.bytes.data(), size);
      blob.bytes.assign(it->value().data(), size);
    }
    EPS_RETURN_IF_ERROR(Rocks(it->status(), "reading " + what));
    if (it->Valid())
      return DataLoss(what + " in store " + path_ + " holds blobs its manifest does not list");
    return out;
  }

  Status DropCheckpointsAfter(Step step) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    EPS_ASSIGN_OR_RETURN(std::vector<Step> held, ListCheckpoints());
    rocksdb::WriteBatch batch;
    for (Step s : held) {
      if (s > step) EPS_RETURN_IF_ERROR(AddDrop(&batch, s));
    }
    if (batch.Count() == 0) return OkStatus();
    return Rocks(db_->Write(sync_, &batch),
                 "dropping checkpoints after step " + std::to_string(step.value()));
  }

  Status Put(std::string_view key, std::string_view value) override {
    EPS_RETURN_IF_ERROR(CheckName(key, "a key"));
    return Rocks(
        db_->Put(sync_, kKvPrefix + std::string(key), rocksdb::Slice(value.data(), value.size())),
        "writing key '" + std::string(key) + "'");
  }

  Status PutAll(const std::vector<std::pair<std::string, std::string>>& entries) override {
    rocksdb::WriteBatch batch;
    for (const auto& [key, value] : entries) {
      EPS_RETURN_IF_ERROR(CheckName(key, "a key"));
      EPS_RETURN_IF_ERROR(Rocks(batch.Put(kKvPrefix + key, value), "batching"));
    }
    return Rocks(db_->Write(sync_, &batch), "writing " + std::to_string(entries.size()) + " keys");
  }

  StatusOr<std::string> Get(std::string_view key) const override {
    EPS_RETURN_IF_ERROR(CheckName(key, "a key"));
    std::string value;
    rocksdb::Status st = db_->Get(ReadOpts(), kKvPrefix + std::string(key), &value);
    if (st.IsNotFound())
      return NotFound("store " + path_ + " has no key '" + std::string(key) + "'");
    EPS_RETURN_IF_ERROR(Rocks(st, "reading key '" + std::string(key) + "'"));
    return value;
  }

  Status Delete(std::string_view key) override {
    EPS_RETURN_IF_ERROR(CheckName(key, "a key"));
    return Rocks(db_->Delete(sync_, kKvPrefix + std::string(key)),
                 "deleting key '" + std::string(key) + "'");
  }

  // Deletes blobs that no manifest owns (left by a writer that did not use one
  // batch; a crash cannot leave them otherwise). Reads one key per step.
  Status RemoveOrphanBlobs() {
    std::lock_guard<std::mutex> lock(write_mu_);
    rocksdb::ReadOptions ro = ReadOpts();
    const std::string end = "ck/b0";
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    rocksdb::WriteBatch batch;
    for (it->Seek(kBlobPrefix); it->Valid();) {
      Step s;
      if (!ParseStep(it->key(), sizeof(kBlobPrefix) - 1, &s)) {
        return DataLoss("store " + path_ + " holds a malformed blob key '" + it->key().ToString() +
                        "'");
      }
      std::string ignored;
      rocksdb::Status rs = db_->Get(ReadOpts(), ManifestKey(s), &ignored);
      if (rs.IsNotFound()) {
        LOG(WARNING) << "store " << path_
                     << ": removing the blobs of an incomplete checkpoint of step " << s;
        EPS_RETURN_IF_ERROR(Rocks(batch.DeleteRange(BlobBegin(s), BlobEnd(s)), "batching"));
      } else {
        EPS_RETURN_IF_ERROR(Rocks(rs, "reading a manifest"));
      }
      it->Seek(BlobEnd(s));
    }
    EPS_RETURN_IF_ERROR(Rocks(it->status(), "scanning blobs"));
    if (batch.Count() == 0) return OkStatus();
    return Rocks(db_->Write(sync_, &batch), "removing incomplete checkpoints");
  }

  // ---- test hooks (state_store_testing.h) ----
  Status WriteBlobsOnly(Step step, const std::vector<BlobRef>& blobs) {
    EPS_RETURN_IF_ERROR(CheckBlobs(step, blobs));
    std::lock_guard<std::mutex> lock(write_mu_);
    rocksdb::WriteBatch batch;
    EPS_RETURN_IF_ERROR(AddBlobs(&batch, step, blobs));
    return Rocks(db_->Write(sync_, &batch), "writing blobs");
  }
  Status EditManifest(Step step, const std::function<void(std::string*)>& edit) {
    std::lock_guard<std::mutex> lock(write_mu_);
    std::string value;
    EPS_RETURN_IF_ERROR(
        Rocks(db_->Get(ReadOpts(), ManifestKey(step), &value), "reading a manifest"));
    edit(&value);
    return Rocks(db_->Put(sync_, ManifestKey(step), value), "writing a manifest");
  }
  StatusOr<uint64_t> MemtableBytes() const {
    uint64_t bytes = 0;
    if (!db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &bytes))
      return Internal("store " + path_ + ": no memtable size");
    return bytes;
  }
  StatusOr<size_t> CountBlobs(Step step) const {
    rocksdb::ReadOptions ro = ReadOpts();
    const std::string end = BlobEnd(step);
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    size_t n = 0;
    for (it->Seek(BlobBegin(step)); it->Valid(); it->Next()) ++n;
    EPS_RETURN_IF_ERROR(Rocks(it->status(), "counting blobs"));
    return n;
  }

 private:
  static rocksdb::ReadOptions ReadOpts() {
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    return ro;
  }

  Status Rocks(const rocksdb::Status& s, const std::string& what) const {
    return s.ok() ? OkStatus() : FromRocks(s, path_, what);
  }

  static Status CheckBlobs(Step step, const std::vector<BlobRef>& blobs) {
    if (step.value() < 0)
      return InvalidArgument("a checkpoint step must be >= 0, not " + std::to_string(step.value()));
    if (blobs.size() > kMaxBlobs) return InvalidArgument("too many blobs in one checkpoint");
    std::set<std::string_view> names;
    for (const BlobRef& b : blobs) {
      EPS_RETURN_IF_ERROR(CheckName(b.name, "a blob name"));
      if (!names.insert(b.name).second)
        return InvalidArgument("blob name '" + b.name + "' appears twice");
      if (b.data == nullptr && b.size > 0)
        return InvalidArgument("blob '" + b.name + "' has no bytes");
    }
    return OkStatus();
  }

  // Replaces whatever step `step` held with `blobs`.
  Status AddBlobs(rocksdb::WriteBatch* batch, Step step, const std::vector<BlobRef>& blobs) const {
    EPS_RETURN_IF_ERROR(Rocks(batch->DeleteRange(BlobBegin(step), BlobEnd(step)), "batching"));
    for (size_t i = 0; i < blobs.size(); ++i) {
      const char* data = blobs[i].size > 0 ? static_cast<const char*>(blobs[i].data) : "";
      EPS_RETURN_IF_ERROR(
          Rocks(batch->Put(BlobKey(step, i), rocksdb::Slice(data, blobs[i].size)), "batching"));
    }
    return OkStatus();
  }

  // The manifest goes first: a reader of an older snapshot still sees all or nothing.
  Status AddDrop(rocksdb::WriteBatch* batch, Step step) const {
    EPS_RETURN_IF_ERROR(Rocks(batch->Delete(ManifestKey(step)), "batching"));
    return Rocks(batch->DeleteRange(BlobBegin(step), BlobEnd(step)), "batching");
  }

  const std::string path_;
  const int keep_;
  const bool read_only_;
  std::atomic<int64_t> retain_from_{std::numeric_limits<int64_t>::max()};  // see RetainFrom
  const std::unique_ptr<rocksdb::DB> db_;
  const std::string job_id_;
  const std::string owner_;
  rocksdb::WriteOptions sync_;
  std::mutex write_mu_;  // serializes writes that read before they write (retention)
};

StateStoreImpl* Impl(StateStore* store) { return static_cast<StateStoreImpl*>(store); }
const StateStoreImpl* Impl(const StateStore* store) {
  return static_cast<const StateStoreImpl*>(store);
}

// RocksDB's warnings and errors go to the process log. RocksDB's own LOG file
// is not used: it lives on the store's disk, and when that disk is full the
// Debian build's file logger trips an assertion instead of failing cleanly.
class GlogLogger final : public rocksdb::Logger {
 public:
  explicit GlogLogger(std::string path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), path_(std::move(path)) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      LOG(ERROR) << "rocksdb (store " << path_ << "): " << buf;
    } else {
      LOG(WARNING) << "rocksdb (store " << path_ << "): " << buf;
    }
  }

 private:
  const std::string path_;
};

rocksdb::Options DbOptions(const StoreOptions& o) {
  rocksdb::Options options;
  options.info_log = std::make_shared<GlogLogger>(o.path);
  options.create_if_missing = o.create_if_missing;
  options.paranoid_checks = true;  // refuse to open on any inconsistency found
  // A crash mid-write may leave a torn last log record: that one batch is
  // dropped whole. Corruption anywhere else in the log fails the open.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  options.track_and_verify_wals_in_manifest = true;  // a missing log file is corruption too
  // Parameters are floats: compression costs time and saves little.
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;  // every block: checked on every read (verify_checksums)
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

}  // namespace

StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const StoreOptions& o) {
  if (o.path.empty()) return InvalidArgument("a store needs a path");
  if (o.owner.empty() || o.owner.size() > kMaxName)
    return InvalidArgument("a store needs an owner");
  if (o.job_id.size() > kMaxName) return InvalidArgument("job id too long");
  if (o.keep_checkpoints < 1) return InvalidArgument("keep_checkpoints must be at least 1");
  std::error_code ec;
  const bool exists = std::filesystem::exists(std::filesystem::path(o.path) / "CURRENT", ec);
  if (ec && ec.value() != ENOENT) return FromErrno(ec.value(), o.path, "looking for the store");
  if (!exists) {
    if (!o.create_if_missing || o.read_only) return NotFound("no store at " + o.path);
    if (o.job_id.empty()) return InvalidArgument("creating store " + o.path + " needs a job id");
    std::filesystem::create_directories(o.path, ec);
    if (ec) return FromErrno(ec.value(), o.path, "creating the store's directory");
  }

  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs = o.read_only ? rocksdb::DB::OpenForReadOnly(DbOptions(o), o.path, &raw)
                                   : rocksdb::DB::Open(DbOptions(o), o.path, &raw);
  if (!rs.ok()) return FromRocks(rs, o.path, "opening");
  std::unique_ptr<rocksdb::DB> db(raw);

  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::string value;
  rs = db->Get(ro, kIdentityKey, &value);
  Identity identity;
  if (rs.IsNotFound() && o.read_only) {
    return FailedPrecondition(o.path + " is not an ElasticPS store (no identity record)");
  }
  if (rs.IsNotFound()) {
    // A fresh store holds nothing at all; anything else is not ours to adopt.
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
    it->SeekToFirst();
    if (!it->status().ok()) return FromRocks(it->status(), o.path, "opening");
    if (it->Valid())
      return FailedPrecondition(o.path + " is a RocksDB database but not an ElasticPS store");
    // Created, and its process killed before it was named: as good as no store.
    if (!o.create_if_missing) return NotFound("the store at " + o.path + " holds nothing yet");
    if (o.job_id.empty()) return InvalidArgument("creating store " + o.path + " needs a job id");
    identity = Identity{o.job_id, o.owner};
    rocksdb::WriteOptions sync;
    sync.sync = true;
    rs = db->Put(sync, kIdentityKey, EncodeIdentity(identity));
    if (!rs.ok()) return FromRocks(rs, o.path, "creating");
  } else if (!rs.ok()) {
    return FromRocks(rs, o.path, "reading the identity");
  } else if (!DecodeIdentity(value, &identity)) {
    return DataLoss("the identity record of store " + o.path + " is corrupt");
  }
  if ((!o.job_id.empty() && identity.job_id != o.job_id) || identity.owner != o.owner) {
    return FailedPrecondition("store " + o.path + " belongs to job '" + identity.job_id +
                              "' (owner '" + identity.owner + "'), not to job '" +
                              (o.job_id.empty() ? identity.job_id : o.job_id) + "' (owner '" +
                              o.owner + "')");
  }
  auto store = std::make_unique<StateStoreImpl>(o, std::move(db), std::move(identity));
  if (!o.read_only) EPS_RETURN_IF_ERROR(store->RemoveOrphanBlobs());
  return std::unique_ptr<StateStore>(std::move(store));
}

Status WriteBlobsWithoutManifestForTesting(StateStore* store, Step step,
                                           const std::vector<BlobRef>& blobs) {
  return Impl(store)->WriteBlobsOnly(step, blobs);
}

Status EditManifestForTesting(StateStore* store, Step step,
                              const std::function<void(std::string*)>& edit) {
  return Impl(store)->EditManifest(step, edit);
}

StatusOr<size_t> CountBlobsForTesting(const StateStore& store, Step step) {
  return Impl(&store)->CountBlobs(step);
}

StatusOr<uint64_t> MemtableBytesForTesting(const StateStore& store) {
  return Impl(&store)->MemtableBytes();
}

}  // namespace eps
