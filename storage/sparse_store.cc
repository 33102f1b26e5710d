#include "storage/sparse_store.h"

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <unordered_set>

#include "storage/rocks_status.h"
#include "storage/spill_file.h"

namespace eps {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "records are written little-endian");

// ---- keys: big-endian integers, so that RocksDB's bytewise order is numeric order ----
//
//   "M" 0:u32 0:u64                       identity (table id + the table's identity string)
//   'S' table:u32 row:u64                 spilled record of a row (stores before the spill file:
//                                         dropped at open)
//   'C' table:u32 row:u64 ~step:u64       checkpoint record of a row at a step (newest first)
//   'K' table:u32 step:u64                manifest of a checkpoint
//
// The first 13 bytes (kind, table, row or step) are the bloom filters' prefix.

// Every key is at least kPrefixLen bytes long: the prefix extractor asserts it.
const std::string kIdentityKey = std::string("M") + std::string(12, '\0');
constexpr size_t kPrefixLen = 13;
constexpr char kManifestMagic[8] = {'E', 'P', 'S', 'S', 'P', 'R', 'S', '1'};
constexpr size_t kMaxIdentity = 4096;

void PutBE32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutBE64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetBE64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string Prefix(char kind, uint32_t table) {
  std::string k(1, kind);
  PutBE32(&k, table);
  return k;
}
std::string RowKey(char kind, uint32_t table, uint64_t row) {
  std::string k = Prefix(kind, table);
  PutBE64(&k, row);
  return k;
}
std::string CheckpointKey(uint32_t table, uint64_t row, Step step) {
  std::string k = RowKey('C', table, row);
  PutBE64(&k, ~static_cast<uint64_t>(step.value()));
  return k;
}
std::string ManifestKey(uint32_t table, Step step) {
  return RowKey('K', table, static_cast<uint64_t>(step.value()));
}
// Every key of `kind` and `table` lies in [RangeBegin, RangeEnd).
std::string RangeBegin(char kind, uint32_t table) { return RowKey(kind, table, 0); }
std::string RangeEnd(char kind, uint32_t table) {
  if (table != UINT32_MAX) return RowKey(kind, table + 1, 0);
  return RowKey(static_cast<char>(kind + 1), 0, 0);
}

std::string EncodeManifest(Step step, const std::vector<uint64_t>& ids) {
  std::string m(kManifestMagic, sizeof kManifestMagic);
  const int64_t s = step.value();
  const uint64_t n = ids.size();
  m.append(reinterpret_cast<const char*>(&s), 8);
  m.append(reinterpret_cast<const char*>(&n), 8);
  if (!ids.empty()) m.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
  return m;
}

// The ids a manifest lists; false when its bytes are not a manifest of `step`.
bool DecodeManifest(const rocksdb::Slice& v, Step step, std::vector<uint64_t>* ids) {
  if (v.size() < 24 || std::memcmp(v.data(), kManifestMagic, 8) != 0) return false;
  int64_t s = 0;
  uint64_t n = 0;
  std::memcpy(&s, v.data() + 8, 8);
  std::memcpy(&n, v.data() + 16, 8);
  if (s != step.value() || n != (v.size() - 24) / 8 || (v.size() - 24) % 8 != 0) return false;
  ids->resize(n);
  if (n > 0) std::memcpy(ids->data(), v.data() + 24, n * 8);
  return true;
}

rocksdb::Options DbOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // Rows are floats: compression costs time and saves little.
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  options.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(kPrefixLen));
  options.write_buffer_size = 16 << 20;
  // A step's reads of checkpointed rows (a seek a row, many small blocks) from mapped table
  // files: a pread a block was half of their time, in this VM's syscalls.
  options.allow_mmap_reads = true;
  // The memtable takes checkpoints only (spilled rows go to storage/spill_file.h): one ordered
  // skiplist, which a flush writes out as it is (a memtable hashed by row had to be sorted first:
  // 4.4 s for a checkpoint of 200,000 rows), with a bloom filter of the rows' prefixes in front.
  options.memtable_prefix_bloom_size_ratio = 0.1;
  options.memtable_whole_key_filtering = true;
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;
  // Most lookups of a row are misses in one tier (not spilled, or never checkpointed).
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

class RocksSparseRowStore final : public SparseRowStore {
 public:
  RocksSparseRowStore(const SparseStoreOptions& o, std::unique_ptr<rocksdb::DB> db)
      : path_(o.path),
        table_(o.table_id),
        keep_(o.keep_checkpoints),
        db_(std::move(db)),
        read_only_(o.read_only),
        spill_(o.path) {}

  const std::string& path() const override { return path_; }

  // Drops the spilled records a store from before the spill file left (unless read-only); reads
  // the held checkpoints.
  Status Load(bool read_only) {
    if (!read_only) {
      rocksdb::WriteOptions wo;
      wo.sync = true;
      EPS_RETURN_IF_ERROR(Rocks(db_->DeleteRange(wo, db_->DefaultColumnFamily(),
                                                 RangeBegin('S', table_), RangeEnd('S', table_)),
                                "dropping spilled rows"));
    }
    steps_.clear();
    const std::string end = RangeEnd('K', table_);
    rocksdb::ReadOptions ro = TotalOrder();
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->Seek(RangeBegin('K', table_)); it->Valid(); it->Next()) {
      if (it->key().size() != kPrefixLen) return DataLoss("bad manifest key in " + path_);
      const Step step(static_cast<int64_t>(GetBE64(it->key().data() + 5)));
      std::vector<uint64_t> ids;
      if (step.value() < 0 || !DecodeManifest(it->value(), step, &ids)) {
        return DataLoss("checkpoint manifest of step " + std::to_string(step.value()) +
                        " is damaged in " + path_);
      }
      steps_.push_back(step);
    }
    return Rocks(it->status(), "reading the checkpoints");
  }

  Status WriteSpill(const std::vector<std::pair<uint64_t, std::string>>& puts,
                    const std::vector<uint64_t>& deletes) override {
    if (read_only_) return FailedPrecondition("sparse store " + path_ + " is read-only");
    return spill_.Write(puts, deletes);
  }

  Status ReadSpilled(const std::vector<uint64_t>& ids,
                     std::vector<std::optional<std::string>>* out) const override {
    spill_.Read(ids, out);  // none when read-only: the writer's rows are its own
    return OkStatus();
  }

  Status ReadCheckpointed(const std::vector<uint64_t>& ids,
                          std::vector<std::optional<std::string>>* out) const override {
    out->assign(ids.size(), std::nullopt);
    if (ids.empty() || steps_.empty()) return OkStatus();
    rocksdb::ReadOptions ro;
    ro.prefix_same_as_start = true;  // the bloom filter skips rows never checkpointed
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string row = RowKey('C', table_, ids[i]);
      it->Seek(row);  // the newest record of the row comes first; empty: a tombstone
      if (it->Valid() && it->key().starts_with(row) && !it->value().empty())
        (*out)[i] = it->value().ToString();
      EPS_RETURN_IF_ERROR(Rocks(it->status(), "reading checkpointed rows"));
    }
    return OkStatus();
  }

  Status WriteCheckpoint(Step step, const std::vector<std::pair<uint64_t, std::string>>& rows,
                         const std::vector<uint64_t>& moved) override {
    const bool amend = !steps_.empty() && step == steps_.back();
    if (step.value() < 0 || (!steps_.empty() && step < steps_.back())) {
      return FailedPrecondition("sparse checkpoint " + std::to_string(step.value()) +
                                " is older than the newest held one in " + path_);
    }
    rocksdb::WriteBatch batch;
    std::vector<uint64_t> ids;
    ids.reserve(rows.size());
    for (const auto& [id, record] : rows) {
      batch.Put(CheckpointKey(table_, id, step), record);
      ids.push_back(id);
    }
    if (amend) {
      // The same step again (rows a move of shard state brought or took at it): its records
      // are replaced or added, its manifest lists both.
      std::vector<uint64_t> listed;
      EPS_RETURN_IF_ERROR(ReadManifest(step, &listed));
      listed.insert(listed.end(), ids.begin(), ids.end());
      std::sort(listed.begin(), listed.end());
      listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
      batch.Put(ManifestKey(table_, step), EncodeManifest(step, listed));
      rocksdb::WriteOptions wo;
      wo.sync = true;
      EPS_RETURN_IF_ERROR(Rocks(db_->Write(wo, &batch),
                                "amending sparse checkpoint " + std::to_string(step.value())));
      spill_.Erase(moved);
      return OkStatus();
    }

    // Retention: the held steps are always the newest ones (the newest keep_ and every one from
    // retain_from_), so the oldest kept, h0, splits them. A row needs every record newer than
    // h0 and, of the older ones, only its newest.
    std::vector<Step> all = steps_;
    all.push_back(step);
    size_t first_kept = all.size() > static_cast<size_t>(keep_) ? all.size() - keep_ : 0;
    while (first_kept > 0 && retain_from_.has_value() && all[first_kept - 1] >= *retain_from_) {
      --first_kept;
    }
    const Step h0 = all[first_kept];
    const Step old_h0 = steps_.empty() ? Step(-1) : steps_.front();
    // Rows that may now hold two records at or below h0: those written in (old_h0, h0].
    std::set<uint64_t> recheck;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] <= old_h0 || all[i] > h0) continue;
      if (all[i] == step) {
        recheck.insert(ids.begin(), ids.end());
        continue;
      }
      std::vector<uint64_t> listed;
      EPS_RETURN_IF_ERROR(ReadManifest(all[i], &listed));
      recheck.insert(listed.begin(), listed.end());
    }
    std::unordered_set<uint64_t> written(ids.begin(), ids.end());
    rocksdb::ReadOptions ro;
    ro.prefix_same_as_start = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (uint64_t id : recheck) {
      const std::string row = RowKey('C', table_, id);
      // A record written by this batch at `step` <= h0 is the newest at or below h0.
      bool have_newest = step <= h0 && written.count(id) > 0;
      for (it->Seek(row); it->Valid() && it->key().starts_with(row); it->Next()) {
        const Step s(static_cast<int64_t>(~GetBE64(it->key().data() + kPrefixLen)));
        if (s > h0) continue;
        if (have_newest) batch.Delete(it->key());
        have_newest = true;
      }
      EPS_RETURN_IF_ERROR(Rocks(it->status(), "collecting old sparse checkpoint records"));
    }
    for (size_t i = 0; i < first_kept; ++i) batch.Delete(ManifestKey(table_, all[i]));
    // The manifest last: readers only trust checkpoints whose manifest landed.
    batch.Put(ManifestKey(table_, step), EncodeManifest(step, ids));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    EPS_RETURN_IF_ERROR(
        Rocks(db_->Write(wo, &batch), "writing sparse checkpoint " + std::to_string(step.value())));
    FlushIfOverfull(db_.get(), path_, "sparse checkpoint " + std::to_string(step.value()));
    spill_.Erase(moved);  // their records are the checkpoint's now
    steps_.assign(all.begin() + first_kept, all.end());
    return OkStatus();
  }

  std::vector<Step> Checkpoints() const override { return steps_; }

  void RetainFrom(Step step) override {
    retain_from_ = step;
    if (step.value() < 0) retain_from_ = Step(INT64_MIN);
  }

  Status RollbackTo(Step step) override {
    const bool held = std::find(steps_.begin(), steps_.end(), step) != steps_.end();
    if (!held && step.value() > 0) {
      return NotFound("sparse checkpoint " + std::to_string(step.value()) + " is not held in " +
                      path_);
    }
    rocksdb::WriteBatch batch;
    std::vector<Step> kept;
    if (!held) {  // step 0 before any checkpoint, or -1: nothing is stored at all
      for (char kind : {'C', 'K'}) {
        EPS_RETURN_IF_ERROR(
            Rocks(batch.DeleteRange(RangeBegin(kind, table_), RangeEnd(kind, table_)),
                  "dropping checkpoints"));
      }
    } else {
      for (Step held_step : steps_) {
        if (held_step <= step) {
          kept.push_back(held_step);
          continue;
        }
        std::vector<uint64_t> listed;
        EPS_RETURN_IF_ERROR(ReadManifest(held_step, &listed));
        for (uint64_t id : listed) batch.Delete(CheckpointKey(table_, id, held_step));
        batch.Delete(ManifestKey(table_, held_step));
      }
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    EPS_RETURN_IF_ERROR(Rocks(db_->Write(wo, &batch),
                              "rolling back to sparse checkpoint " + std::to_string(step.value())));
    spill_.Clear();
    steps_ = std::move(kept);
    return OkStatus();
  }

  Status ScanCheckpointed(const std::function<Status(uint64_t row, std::string_view record)>& fn,
                          uint64_t from_row) const override {
    if (steps_.empty()) return OkStatus();
    return ScanCheckpoint(steps_.back(), fn, from_row);
  }

  Status ScanCheckpoint(Step step,
                        const std::function<Status(uint64_t row, std::string_view record)>& fn,
                        uint64_t from_row) const override {
    const bool held = std::find(steps_.begin(), steps_.end(), step) != steps_.end();
    if (step == Step(0) && !held) return OkStatus();  // the empty table
    if (!held) {
      return NotFound("sparse checkpoint " + std::to_string(step.value()) + " is not held in " +
                      path_);
    }
    const std::string end = RangeEnd('C', table_);
    rocksdb::ReadOptions ro = TotalOrder();
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    bool have_last = false;
    uint64_t last = 0;
    for (it->Seek(RowKey('C', table_, from_row)); it->Valid(); it->Next()) {
      if (it->key().size() != kPrefixLen + 8) return DataLoss("bad row key in " + path_);
      const uint64_t row = GetBE64(it->key().data() + 5);
      if (have_last && row == last) continue;  // an older record of the same row
      // Records of a row come newest first: skip those after `step`.
      if (static_cast<int64_t>(~GetBE64(it->key().data() + kPrefixLen)) > step.value()) continue;
      have_last = true;
      last = row;
      if (it->value().empty()) continue;  // a tombstone: the row is not this store's at `step`
      EPS_RETURN_IF_ERROR(fn(row, std::string_view(it->value().data(), it->value().size())));
    }
    return Rocks(it->status(), "scanning checkpointed rows");
  }

  StatusOr<Counts> CountRecords() const override {
    Counts c;
    c.spilled = spill_.size();
    const std::string end = RangeEnd('C', table_);
    rocksdb::ReadOptions ro = TotalOrder();
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->Seek(RangeBegin('C', table_)); it->Valid(); it->Next()) ++c.checkpointed;
    EPS_RETURN_IF_ERROR(Rocks(it->status(), "counting records"));
    return c;
  }

 private:
  static rocksdb::ReadOptions TotalOrder() {
    rocksdb::ReadOptions ro;
    ro.total_order_seek = true;  // scans across prefixes
    return ro;
  }

  Status ReadManifest(Step step, std::vector<uint64_t>* ids) const {
    std::string value;
    EPS_RETURN_IF_ERROR(Rocks(db_->Get(rocksdb::ReadOptions(), ManifestKey(table_, step), &value),
                              "reading sparse manifest " + std::to_string(step.value())));
    if (!DecodeManifest(value, step, ids)) {
      return DataLoss("sparse checkpoint manifest of step " + std::to_string(step.value()) +
                      " is damaged in " + path_);
    }
    return OkStatus();
  }

  Status Rocks(const rocksdb::Status& s, const std::string& what) const {
    return s.ok() ? OkStatus() : FromRocks(s, path_, what);
  }

  const std::string path_;
  const uint32_t table_;
  const int keep_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<Step> steps_;  // held checkpoints, ascending
  std::optional<Step> retain_from_;
  const bool read_only_;
  SpillFile spill_;  // its files are made at the first write
};

}  // namespace

StatusOr<std::unique_ptr<SparseRowStore>> SparseRowStore::Open(const SparseStoreOptions& o) {
  if (o.path.empty()) return InvalidArgument("a sparse row store needs a path");
  if (o.keep_checkpoints < 1) return InvalidArgument("keep_checkpoints must be at least 1");
  if (o.identity.size() > kMaxIdentity) return InvalidArgument("sparse store identity too long");
  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs;
  if (o.read_only) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.path, ec)) return NotFound("no sparse store at " + o.path);
    rocksdb::Options options = DbOptions();
    options.create_if_missing = false;
    rs = rocksdb::DB::OpenForReadOnly(options, o.path, &raw);
  } else {
    std::error_code ec;
    std::filesystem::create_directories(o.path, ec);
    if (ec) return FromErrno(ec.value(), o.path, "creating the sparse store's directory");
    rs = rocksdb::DB::Open(DbOptions(), o.path, &raw);
  }
  if (!rs.ok()) return FromRocks(rs, o.path, "opening the sparse store");
  std::unique_ptr<rocksdb::DB> db(raw);

  std::string identity;
  PutBE32(&identity, o.table_id);
  identity += o.identity;
  std::string stored;
  rs = db->Get(rocksdb::ReadOptions(), kIdentityKey, &stored);
  if (rs.IsNotFound() && o.read_only) {
    return NotFound("sparse store " + o.path + " holds no table yet");
  } else if (rs.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rs = db->Put(wo, kIdentityKey, identity);
    if (!rs.ok()) return FromRocks(rs, o.path, "writing the sparse store's identity");
  } else if (!rs.ok()) {
    return FromRocks(rs, o.path, "reading the sparse store's identity");
  } else if (stored != identity) {
    return FailedPrecondition("sparse store " + o.path +
                              " holds another table (table id, row width, optimizer, initializer "
                              "or seed differ)");
  }
  auto store = std::make_unique<RocksSparseRowStore>(o, std::move(db));
  EPS_RETURN_IF_ERROR(store->Load(o.read_only));
  return std::unique_ptr<SparseRowStore>(std::move(store));
}

}  // namespace eps
