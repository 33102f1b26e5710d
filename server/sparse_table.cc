#include "server/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "server/sparse_record.h"
#include "server/sparse_row_step.h"
#include "storage/sparse_store.h"

namespace eps {
namespace {

// What the cache spends on a row besides its floats: the hash map's node and bucket, the
// LRU list's node, the vector's header.
constexpr size_t kRowOverhead = 112;

// A cached row: its record's fields, and the cache's.
struct Row : RowRecord {
  bool dirty = false;  // changed since the last checkpoint
  bool fresh = false;  // just made by the initializer: stored nowhere
  // The spill tier holds this row's record as it is: read back from there and not changed
  // since, so that its eviction writes nothing.
  bool spill_current = false;
  // Stepped or seeded since it last reached the LRU list's end: a second chance there
  // (Evict), so that a step sets a flag on the row it touches anyway instead of moving a list
  // node, a cache miss elsewhere in memory.
  bool used = false;
  std::list<uint64_t>::iterator lru;
};

bool Finite(double x) { return std::isfinite(x); }

// Ids of the cached and of the spilled rows, sorted, as of a count of the table's changes of
// which rows those are (SparseTableImpl::membership_).
struct SortedIds {
  uint64_t membership = UINT64_MAX;  // of no table
  std::vector<uint64_t> cached, spilled;
};

class SparseTableImpl final : public SparseTable {
 public:
  SparseTableImpl(const SparseTableOptions& o, std::unique_ptr<SparseRowStore> store)
      : o_(o),
        slots_(SparseOptimizerSlots(o.optimizer)),
        floats_(o.dim * (1 + slots_)),
        row_bytes_(floats_ * sizeof(float) + kRowOverhead),
        capacity_(o.memory_bytes / row_bytes_),
        store_(std::move(store)),
        reducer_(Block{0, TreeWidth(o.num_vws)}, o.num_vws, o.dim, o.grad_rounding) {
    Reset(store_ == nullptr || store_->Checkpoints().empty() ? Step(0)
                                                             : store_->Checkpoints().back());
  }

  Step version() const override { return version_; }
  size_t RowBytes() const override { return row_bytes_; }

  Status Push(Step step, const Block& block, const uint64_t* ids, size_t num_ids,
              const float* values, size_t num_values) override {
    EPS_RETURN_IF_ERROR(Usable());
    if (step < version_) {
      return AlreadyExists("sparse push for step " + std::to_string(step.value()) +
                           ", already applied (table at version " +
                           std::to_string(version_.value()) + ")");
    }
    if (step > version_) {
      return InvalidArgument("sparse push for step " + std::to_string(step.value()) +
                             " ahead of the table's version " + std::to_string(version_.value()));
    }
    if (pending_.has_value()) {
      return AlreadyExists("sparse push for step " + std::to_string(step.value()) +
                           ", whose rows are already reduced");
    }
    EPS_RETURN_IF_ERROR(reducer_.Add(block, ids, num_ids, values, num_values));
    pushed_ = true;
    return OkStatus();
  }

  Status Seed(const uint64_t* ids, size_t num_ids, const float* weights,
              size_t num_values) override {
    EPS_RETURN_IF_ERROR(Usable());
    const std::string table = "sparse table " + std::to_string(o_.table_id);
    if (version_.value() != 0 || pushed_ || pending_.has_value()) {
      return FailedPrecondition(table +
                                " takes seeded rows only at version 0 before any push (at " +
                                std::to_string(version_.value()) + ")");
    }
    EPS_RETURN_IF_ERROR(ValidateSparseRows(ids, num_ids, num_values, o_.dim));
    size_t added = 0;
    for (size_t i = 0; i < num_ids; ++i) added += cache_.count(ids[i]) == 0 ? 1 : 0;
    if (store_ == nullptr && cache_.size() + added > capacity_) {
      return ResourceExhausted(table + " would hold " + std::to_string(cache_.size() + added) +
                               " seeded rows, its memory budget of " +
                               std::to_string(o_.memory_bytes) +
                               " bytes (--shard_memory_mb) holds " + std::to_string(capacity_) +
                               " and it has no store to spill to");
    }
    SpillBatch spill;
    for (size_t i = 0; i < num_ids; ++i) {
      auto it = cache_.find(ids[i]);
      Row* row = nullptr;
      std::unordered_map<uint64_t, Row> one;
      if (it != cache_.end()) {
        row = &it->second;
        row->used = true;
      } else {
        row = &one[ids[i]];
        row->data.assign(floats_, 0.0f);
      }
      std::memcpy(row->data.data(), weights + i * o_.dim, o_.dim * sizeof(float));
      std::fill(row->data.begin() + static_cast<std::ptrdiff_t>(o_.dim), row->data.end(), 0.0f);
      row->version = 0;
      row->initialized = false;
      row->dirty = true;
      row->fresh = false;
      row->spill_current = false;
      if (it == cache_.end()) Admit(one.extract(ids[i]), &spill);
    }
    return WriteSpill(spill);
  }

  bool StepComplete() const override { return pending_.has_value() || reducer_.complete(); }

  Status ApplyStep(double lr, StepRows* changed) override {
    EPS_RETURN_IF_ERROR(Usable());
    if (!Finite(lr) || lr <= 0) return InvalidArgument("sparse step needs a finite lr > 0");
    if (!pending_.has_value()) {
      if (!reducer_.complete()) {
        return FailedPrecondition("sparse step " + std::to_string(version_.value()) +
                                  " is missing VWs");
      }
      EPS_ASSIGN_OR_RETURN(SparseRows sum, reducer_.TakeResult());
      pending_ = std::move(sum);
    }
    const std::vector<uint64_t>& ids = pending_->ids;

    // Everything that can fail comes first: the rows not in memory, read from the store.
    std::vector<Row*> rows(ids.size());
    std::vector<uint64_t> missing;
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = cache_.find(ids[i]);
      if (it != cache_.end()) {
        rows[i] = &it->second;
        // The loop below touches the row's floats: a random place in memory, fetched while
        // this loop looks the next rows up.
        __builtin_prefetch(it->second.data.data(), 1);
      } else {
        missing.push_back(ids[i]);
      }
    }
    if (store_ == nullptr && cache_.size() + missing.size() > capacity_) {
      return ResourceExhausted("sparse table " + std::to_string(o_.table_id) + " would hold " +
                               std::to_string(cache_.size() + missing.size()) +
                               " rows, its memory budget of " + std::to_string(o_.memory_bytes) +
                               " bytes holds " + std::to_string(capacity_) +
                               " and it has no store to spill to");
    }
    std::unordered_map<uint64_t, Row> loaded;
    EPS_RETURN_IF_ERROR(Load(missing, &loaded));

    // Now nothing fails until the spill write. The rows are stepped where they are: the cached
    // ones in the cache (marked used), the loaded ones before they are admitted; rows are
    // evicted only once every row of the step is stepped.
    const double count = static_cast<double>(version_.value() + 1);
    const SparseRowStepper stepper(o_.optimizer, o_.dim, lr, count);
    const float divisor = static_cast<float>(o_.num_vws);
    const int64_t new_version = version_.value() + 1;
    SpillBatch spill;
    if (changed != nullptr) {
      changed->ids = ids;
      changed->before.resize(ids.size() * o_.dim);
      changed->after.resize(ids.size() * o_.dim);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      Row* row = rows[i];
      if (row != nullptr) {
        row->used = true;
      } else {
        row = &loaded.at(ids[i]);
      }
      const size_t at = i * o_.dim, bytes = o_.dim * sizeof(float);
      if (changed != nullptr) std::memcpy(changed->before.data() + at, row->data.data(), bytes);
      stepper.Step(row->data.data(), pending_->values.data() + at, divisor, row->initialized);
      if (changed != nullptr) std::memcpy(changed->after.data() + at, row->data.data(), bytes);
      row->initialized = true;
      row->version = new_version;
      row->dirty = true;
      row->fresh = false;
      row->spill_current = false;
      ++stats_.rows_stepped;
      if (rows[i] == nullptr) Insert(loaded.extract(ids[i]));
    }
    Evict(&spill);
    version_ = Step(new_version);
    Log(std::move(pending_->ids));
    pending_.reset();
    pushed_ = false;
    return WriteSpill(spill);
  }

  Status Read(const uint64_t* ids, size_t num_ids, float* out) override {
    EPS_RETURN_IF_ERROR(Usable());
    std::vector<uint64_t> missing;
    for (size_t i = 0; i < num_ids; ++i) {
      if (cache_.count(ids[i]) == 0) missing.push_back(ids[i]);
    }
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    std::unordered_map<uint64_t, Row> loaded;
    EPS_RETURN_IF_ERROR(Load(missing, &loaded));
    // A read leaves the LRU order as it is: it follows the steps (a pull of the rows a step
    // changed would only move them again to where the step put them).
    for (size_t i = 0; out != nullptr && i < num_ids; ++i) {
      auto it = cache_.find(ids[i]);
      const Row& row = it != cache_.end() ? it->second : loaded.at(ids[i]);
      std::memcpy(out + i * o_.dim, row.data.data(), o_.dim * sizeof(float));
    }
    // The stored rows read come into the cache (a pull of a batch's rows comes before their
    // push); rows never touched stay stored nowhere.
    SpillBatch spill;
    for (uint64_t id : missing) {
      auto node = loaded.extract(id);
      if (!node.mapped().fresh) Admit(std::move(node), &spill);
    }
    return WriteSpill(spill);
  }

  Status Warm(const uint64_t* ids, size_t num_ids) override { return Read(ids, num_ids, nullptr); }

  StatusOr<std::vector<uint64_t>> ChangedSince(Step since, uint64_t from_row = 0,
                                               size_t max_rows = SIZE_MAX) override {
    std::vector<uint64_t> out;
    if (since >= version_ || max_rows == 0) return out;
    if (since < log_base_) {  // beyond the log: every stored row's version says
      EPS_RETURN_IF_ERROR(ScanStored(
          [&](uint64_t row, const Row& r) {
            if (Step(r.version) > since) out.push_back(row);
            return out.size() < max_rows;
          },
          from_row));
      return out;
    }
    for (const auto& [version, ids] : log_) {
      if (version <= since) continue;
      for (uint64_t id : ids) {
        if (id >= from_row) out.push_back(id);
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > max_rows) out.resize(max_rows);
    return out;
  }

  Status ReadStored(uint64_t from_row, size_t max_rows, std::vector<uint64_t>* ids,
                    std::vector<float>* weights) override {
    ids->clear();
    weights->clear();
    if (max_rows == 0) return OkStatus();
    return ScanStored(
        [&](uint64_t id, const Row& r) {
          ids->push_back(id);
          weights->insert(weights->end(), r.data.begin(), r.data.begin() + o_.dim);
          return ids->size() < max_rows;
        },
        from_row);
  }

  Status ScanRows(
      const std::function<void(uint64_t row, Step version, const float* floats)>& fn) override {
    return ScanStored([&](uint64_t id, const Row& r) {
      fn(id, Step(r.version), r.data.data());
      return true;
    });
  }

  size_t RecordBytes() const override { return RowRecordBytes(floats_); }

  Status ExportRows(const std::function<bool(uint64_t row)>& want, std::string* out) override {
    return ScanStored([&](uint64_t id, const Row& r) {
      if (!want(id)) return true;
      out->append(reinterpret_cast<const char*>(&id), sizeof id);
      out->append(EncodeRow(r));
      return true;
    });
  }

  Status Move(Step version, const std::function<bool(uint64_t row)>& lost,
              std::string_view records) override {
    EPS_RETURN_IF_ERROR(Usable());
    const std::string table = "sparse table " + std::to_string(o_.table_id);
    if (pushed_ || pending_.has_value())
      return FailedPrecondition(table + ": a move while a step's pushes are in progress");
    const bool holds_nothing = cache_.empty() && spilled_.empty() &&
                               (store_ == nullptr || store_->Checkpoints().empty());
    if (version != version_ && !holds_nothing) {
      return FailedPrecondition(table + ": a move at version " + std::to_string(version.value()) +
                                ", the table is at " + std::to_string(version_.value()));
    }
    // Everything that can fail first: the records, whole.
    const size_t each = sizeof(uint64_t) + RecordBytes();
    if (records.size() % each != 0)
      return InvalidArgument(table + ": moved rows are not whole records");
    std::unordered_map<uint64_t, Row> came;
    came.reserve(records.size() / each);
    for (size_t at = 0; at < records.size(); at += each) {
      uint64_t id;
      std::memcpy(&id, records.data() + at, sizeof id);
      Row row;
      if (!DecodeRow(records.substr(at + sizeof id, RecordBytes()), floats_, &row) ||
          row.version > version.value())
        return InvalidArgument(table + ": moved row " + std::to_string(id) + " is malformed");
      if (lost(id)) return InvalidArgument(table + ": moved row " + std::to_string(id) + " is one it loses");
      row.dirty = true;
      if (!came.emplace(id, std::move(row)).second)
        return InvalidArgument(table + ": moved row " + std::to_string(id) + " comes twice");
    }
    size_t kept = 0;
    for (const auto& [id, row] : cache_) kept += lost(id) ? 0 : 1;
    if (store_ == nullptr && kept + came.size() > capacity_) {
      return ResourceExhausted(table + " would hold " + std::to_string(kept + came.size()) +
                               " rows after the move, its memory budget of " +
                               std::to_string(o_.memory_bytes) + " bytes holds " +
                               std::to_string(capacity_) + " and it has no store to spill to");
    }
    std::vector<uint64_t> checkpointed;  // lost rows a checkpoint holds: tombstones to come
    if (store_ != nullptr) {
      EPS_RETURN_IF_ERROR(store_->ScanCheckpointed([&](uint64_t id, std::string_view) {
        if (lost(id)) checkpointed.push_back(id);
        return OkStatus();
      }));
    }
    // Now the rows that leave go, and those that came come.
    MembershipChanged();
    SpillBatch spill;
    for (auto it = cache_.begin(); it != cache_.end();) {
      if (!lost(it->first)) {
        ++it;
        continue;
      }
      lru_.erase(it->second.lru);
      it = cache_.erase(it);
    }
    for (auto it = spilled_.begin(); it != spilled_.end();) {
      if (!lost(*it)) {
        ++it;
        continue;
      }
      spill.deletes.push_back(*it);
      it = spilled_.erase(it);
    }
    dropped_.insert(checkpointed.begin(), checkpointed.end());
    std::vector<uint64_t> ids;
    ids.reserve(came.size());
    for (const auto& [id, row] : came) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (uint64_t id : ids) {
      dropped_.erase(id);
      if (auto it = cache_.find(id); it != cache_.end()) {  // a stale copy read earlier
        lru_.erase(it->second.lru);
        cache_.erase(it);
      }
      Insert(came.extract(id));
    }
    Evict(&spill);
    spilled_cached_ = 0;
    for (uint64_t id : spilled_) spilled_cached_ += cache_.count(id);
    version_ = version;
    log_.clear();
    log_base_ = version;  // the log does not know the rows that came: their versions say
    return WriteSpill(spill);
  }

  // Calls fn(row, its state) for every stored row from `from_row` on, ascending (ScanRows),
  // while fn returns true.
  Status ScanStored(const std::function<bool(uint64_t row, const Row& state)>& fn,
                    uint64_t from_row = 0) {
    EPS_RETURN_IF_ERROR(Usable());
    // The cached and spilled ids sorted: held by this scan (a change of the cache meanwhile
    // cannot free them), and kept for the next one while they hold.
    SortedIds ids = std::move(sorted_ids_);
    sorted_ids_.membership = UINT64_MAX;  // none while this scan holds them
    if (ids.membership != membership_) {
      ids.cached.clear();
      for (const auto& [id, row] : cache_) ids.cached.push_back(id);
      std::sort(ids.cached.begin(), ids.cached.end());
      ids.spilled = SpilledOnly();
      ids.membership = membership_;
    }
    const Status st = ScanSorted(ids, fn, from_row);
    if (ids.membership == membership_) sorted_ids_ = std::move(ids);
    return st;
  }

  // Three sorted streams, disjoint but for the checkpoint's: the cache's rows, the spilled ones
  // (`ids`), the newest checkpoint's; a cached or spilled row is newer than its checkpoint record.
  Status ScanSorted(const SortedIds& ids,
                    const std::function<bool(uint64_t row, const Row& state)>& fn,
                    uint64_t from_row) {
    const std::vector<uint64_t>& cached = ids.cached;
    const std::vector<uint64_t>& spilled = ids.spilled;
    size_t ci = std::lower_bound(cached.begin(), cached.end(), from_row) - cached.begin();
    size_t si = std::lower_bound(spilled.begin(), spilled.end(), from_row) - spilled.begin();
    bool stopped = false;  // fn said so
    Row row;
    auto emit_cached = [&] {
      const uint64_t id = cached[ci++];
      stopped = !fn(id, cache_.at(id));
    };
    auto emit_spilled = [&]() -> Status {
      std::vector<std::optional<std::string>> record;
      EPS_RETURN_IF_ERROR(store_->ReadSpilled({spilled[si]}, &record));
      std::unordered_map<uint64_t, Row> one;
      EPS_RETURN_IF_ERROR(DecodeInto(spilled[si], record[0], "spilled", &one));
      stopped = !fn(spilled[si], one.begin()->second);
      ++si;
      return OkStatus();
    };
    // Emits the cached and spilled rows below `bound` (all of them without one).
    auto drain = [&](std::optional<uint64_t> bound) -> Status {
      while (!stopped) {
        const bool c = ci < cached.size() && (!bound || cached[ci] < *bound);
        const bool s = si < spilled.size() && (!bound || spilled[si] < *bound);
        if (!c && !s) return OkStatus();
        if (c && (!s || cached[ci] < spilled[si])) {
          emit_cached();
        } else {
          EPS_RETURN_IF_ERROR(emit_spilled());
        }
      }
      return OkStatus();
    };
    if (store_ != nullptr) {
      // The store's scan ends at its callback's first error: this one's, or the one that
      // says fn stopped (not an error of the scan's).
      const Status scanned = store_->ScanCheckpointed(
          [&](uint64_t id, std::string_view record) -> Status {
            EPS_RETURN_IF_ERROR(drain(id));
            if (stopped) return Aborted("stopped");
            if (ci < cached.size() && cached[ci] == id) {
              emit_cached();
            } else if (si < spilled.size() && spilled[si] == id) {
              EPS_RETURN_IF_ERROR(emit_spilled());
            } else if (dropped_.count(id) == 0) {  // not moved away
              if (!DecodeRow(record, floats_, &row)) {
                return DataLoss("checkpointed row " + std::to_string(id) + " of sparse table " +
                                std::to_string(o_.table_id) + " is malformed in " + store_->path());
              }
              stopped = !fn(id, row);
            }
            return stopped ? Aborted("stopped") : OkStatus();
          },
          from_row);
      if (stopped) return OkStatus();
      EPS_RETURN_IF_ERROR(scanned);
    }
    return drain(std::nullopt);
  }

  Status Checkpoint() override {
    EPS_RETURN_IF_ERROR(Usable());
    if (store_ == nullptr) {
      return FailedPrecondition("sparse table " + std::to_string(o_.table_id) +
                                " has no store to checkpoint to");
    }
    const std::vector<Step> held = store_->Checkpoints();
    std::vector<std::pair<uint64_t, std::string>> rows;
    for (const auto& [id, row] : cache_) {
      if (row.dirty) rows.emplace_back(id, EncodeRow(row));
    }
    for (uint64_t id : dropped_) rows.emplace_back(id, std::string());  // tombstones
    // Every spilled record is deleted; those of rows not cached are the rows' state.
    std::vector<uint64_t> moved(spilled_.begin(), spilled_.end());
    // Nothing changed since the newest checkpoint (rows a move brought or took amend it).
    if (!held.empty() && held.back() == version_ && rows.empty() && moved.empty())
      return OkStatus();
    const std::vector<uint64_t> only = SpilledOnly();  // the cached ones are dirty: in `rows`
    std::vector<std::optional<std::string>> records;
    EPS_RETURN_IF_ERROR(store_->ReadSpilled(only, &records));
    for (size_t i = 0; i < only.size(); ++i) {
      if (!records[i].has_value()) {
        return DataLoss("spilled row " + std::to_string(only[i]) + " of sparse table " +
                        std::to_string(o_.table_id) + " is missing from " + store_->path());
      }
      rows.emplace_back(only[i], std::move(*records[i]));
    }
    std::sort(rows.begin(), rows.end());
    EPS_RETURN_IF_ERROR(store_->WriteCheckpoint(version_, rows, moved));
    for (auto& [id, row] : cache_) row.dirty = row.spill_current = false;
    spilled_.clear();
    spilled_cached_ = 0;
    MembershipChanged();
    dropped_.clear();
    stats_.last_checkpoint_rows = rows.size();
    return OkStatus();
  }

  std::vector<Step> Checkpoints() const override {
    return store_ == nullptr ? std::vector<Step>() : store_->Checkpoints();
  }

  void RetainFrom(Step step) override {
    if (store_ != nullptr) store_->RetainFrom(step);
  }

  Status RollbackTo(Step step) override {
    if (store_ != nullptr) {
      EPS_RETURN_IF_ERROR(store_->RollbackTo(step));
    } else if (step.value() > 0) {
      return NotFound("a memory-only sparse table holds no checkpoint " +
                      std::to_string(step.value()));
    }
    Reset(Step(std::max<int64_t>(step.value(), 0)));
    return OkStatus();
  }

  Stats stats() const override {
    Stats s = stats_;
    s.cached_rows = cache_.size();
    s.spilled_rows = spilled_.size() - spilled_cached_;
    return s;
  }

 private:
  Status Usable() const {
    if (broken_) {
      return FailedPrecondition("sparse table " + std::to_string(o_.table_id) +
                                " lost rows it could not spill; roll back to a checkpoint");
    }
    return OkStatus();
  }

  // The spilled rows not cached (ascending): those whose spilled record is their state.
  std::vector<uint64_t> SpilledOnly() const {
    std::vector<uint64_t> out;
    out.reserve(spilled_.size());
    for (uint64_t id : spilled_) {
      if (cache_.count(id) == 0) out.push_back(id);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Which rows are cached or spilled changed: ScanStored's sorted ids are stale, and let go.
  void MembershipChanged() {
    ++membership_;
    if (sorted_ids_.membership != UINT64_MAX) sorted_ids_ = SortedIds{};
  }

  void Reset(Step version) {
    MembershipChanged();
    cache_.clear();
    lru_.clear();
    spilled_.clear();
    spilled_cached_ = 0;
    dropped_.clear();
    reducer_.Clear();
    pending_.reset();
    log_.clear();
    version_ = version;
    log_base_ = version;
    broken_ = false;
    pushed_ = false;
  }

  // The rows `ids` (ascending, none cached) from the spill tier, the newest
  // checkpoint or the initializer, in that order.
  Status Load(const std::vector<uint64_t>& ids, std::unordered_map<uint64_t, Row>* out) {
    std::vector<uint64_t> spilled, rest;
    for (uint64_t id : ids) (spilled_.count(id) > 0 ? spilled : rest).push_back(id);
    std::vector<std::optional<std::string>> s_records, c_records;
    if (store_ != nullptr) {
      EPS_RETURN_IF_ERROR(store_->ReadSpilled(spilled, &s_records));
      EPS_RETURN_IF_ERROR(store_->ReadCheckpointed(rest, &c_records));
      stats_.store_reads += ids.size();
    }
    out->reserve(ids.size());
    for (size_t i = 0; i < spilled.size(); ++i) {
      EPS_RETURN_IF_ERROR(DecodeInto(spilled[i], s_records[i], "spilled", out));
    }
    for (size_t i = 0; i < rest.size(); ++i) {
      if (store_ != nullptr && c_records[i].has_value() && dropped_.count(rest[i]) == 0) {
        EPS_RETURN_IF_ERROR(DecodeInto(rest[i], c_records[i], "checkpointed", out));
        continue;
      }
      Row row;
      row.fresh = true;
      row.data.assign(floats_, 0.0f);
      InitialRow(o_.init, o_.seed, o_.table_id, rest[i], row.data.data(), o_.dim);
      (*out)[rest[i]] = std::move(row);
    }
    return OkStatus();
  }

  Status DecodeInto(uint64_t id, const std::optional<std::string>& record, const char* tier,
                    std::unordered_map<uint64_t, Row>* out) const {
    Row row;
    if (!record.has_value() || !DecodeRow(*record, floats_, &row)) {
      return DataLoss(std::string(tier) + " row " + std::to_string(id) + " of sparse table " +
                      std::to_string(o_.table_id) + " is " +
                      (record.has_value() ? "malformed" : "missing") + " in " + store_->path());
    }
    row.dirty = row.spill_current = std::string(tier) == "spilled";
    (*out)[id] = std::move(row);
    return OkStatus();
  }

  // What moves between the cache and the spill tier, written in one batch.
  struct SpillBatch {
    std::vector<std::pair<uint64_t, std::string>> puts;  // evicted changed rows
    std::vector<uint64_t> deletes;                       // spilled rows that left the table
  };

  // Puts a row (not cached) into the cache as the most recently used, then evicts while over
  // budget (Evict).
  void Admit(std::unordered_map<uint64_t, Row>::node_type node, SpillBatch* spill) {
    Insert(std::move(node));
    Evict(spill);
  }

  // Puts a row (not cached) into the cache as the most recently used. A spilled one keeps its
  // spilled record, stale once the row changes: its eviction overwrites it, and a checkpoint
  // deletes it (the row comes back at most once between two evictions; deleting its record
  // then would cost a third write for the one a later eviction makes anyway).
  void Insert(std::unordered_map<uint64_t, Row>::node_type node) {
    spilled_cached_ += spilled_.count(node.key());
    MembershipChanged();
    lru_.push_front(node.key());
    node.mapped().lru = lru_.begin();
    cache_.insert(std::move(node));
  }

  // Evicts rows from the LRU list's end while the cache is over budget, a changed one to
  // `spill`; a row used since it was put at the front goes back there instead, unused (the
  // second-chance approximation of least recently used: each such move clears a flag a step
  // set, so the moves are at most the steps' rows).
  void Evict(SpillBatch* spill) {
    while (cache_.size() > capacity_) {
      const uint64_t victim = lru_.back();
      auto it = cache_.find(victim);
      if (it->second.used) {
        it->second.used = false;
        lru_.splice(lru_.begin(), lru_, std::prev(lru_.end()));
        continue;
      }
      lru_.pop_back();
      if (it->second.dirty) {  // its record goes to (or is already in) the spill tier
        if (!it->second.spill_current) {
          spill->puts.emplace_back(victim, EncodeRow(it->second));
          ++stats_.spill_writes;
        }
        if (!spilled_.insert(victim).second) --spilled_cached_;
      }
      cache_.erase(it);
      MembershipChanged();
      ++stats_.evictions;
    }
  }

  Status WriteSpill(SpillBatch& spill) {
    if (spill.puts.empty() && spill.deletes.empty()) return OkStatus();
    // In key order the memtable's inserts reuse their position in the skiplist.
    std::sort(spill.puts.begin(), spill.puts.end());
    std::sort(spill.deletes.begin(), spill.deletes.end());
    Status s = store_->WriteSpill(spill.puts, spill.deletes);
    if (!s.ok()) {
      broken_ = true;
      return s.WithContext("sparse table " + std::to_string(o_.table_id) +
                           " lost evicted rows; roll back to a checkpoint");
    }
    return OkStatus();
  }

  void Log(std::vector<uint64_t> ids) {
    log_.emplace_back(version_, std::move(ids));
    while (log_.size() > o_.changelog_versions) {
      log_base_ = log_.front().first;
      log_.pop_front();
    }
  }

  const SparseTableOptions o_;
  const int slots_;
  const size_t floats_;     // per row: weights and slots
  const size_t row_bytes_;  // per cached row, against the budget
  const size_t capacity_;   // rows the budget holds
  const std::unique_ptr<SparseRowStore> store_;
  SparseTreeReducer reducer_;
  std::optional<SparseRows> pending_;  // the step's reduced rows, until stepped

  std::unordered_map<uint64_t, Row> cache_;
  std::list<uint64_t> lru_;  // most recently put at the front first (Row::used: a second chance)
  // Rows with a record in the spill tier: changed since the last checkpoint and evicted since.
  // The record is the row's state unless the row is cached (then the cache's is).
  std::unordered_set<uint64_t> spilled_;
  size_t spilled_cached_ = 0;  // of them, the cached ones
  // Counts the changes of which rows are cached and which spilled: ScanStored's sorted ids of
  // both hold while it is the same (the pages of an export's final pull scan them once).
  uint64_t membership_ = 0;
  SortedIds sorted_ids_;
  // Rows a move took away that a checkpoint holds: the next one writes their tombstones.
  std::unordered_set<uint64_t> dropped_;
  Step version_{0};
  std::deque<std::pair<Step, std::vector<uint64_t>>> log_;  // (version made, rows changed)
  Step log_base_{0};  // ChangedSince answers for versions >= this
  bool broken_ = false;
  bool pushed_ = false;  // a push of the step in progress came (Seed is refused then)
  Stats stats_;
};

}  // namespace

int SparseOptimizerSlots(const SparseOptimizerOptions& o) {
  switch (o.kind) {
    case SparseOptimizerOptions::Kind::kSgd:
      return o.momentum != 0 ? 1 : 0;
    case SparseOptimizerOptions::Kind::kAdagrad:
      return 1;
    case SparseOptimizerOptions::Kind::kAdam:
    case SparseOptimizerOptions::Kind::kAdamW:
      return 2;
  }
  return 0;
}

StatusOr<std::unique_ptr<SparseTable>> SparseTable::Open(const SparseTableOptions& o) {
  if (o.dim == 0) return InvalidArgument("a sparse table needs rows of width >= 1");
  if (o.num_vws == 0) return InvalidArgument("a sparse table needs V >= 1 virtual workers");
  if (o.dim > (size_t{1} << 24)) return InvalidArgument("sparse table rows wider than 2^24 floats");
  EPS_RETURN_IF_ERROR(ValidateSparseOptimizer(o.optimizer));
  if (o.init.kind == RowInitializer::Kind::kNormal &&
      (!Finite(o.init.mean) || !Finite(o.init.stddev) || o.init.stddev < 0)) {
    return InvalidArgument("a normal row initializer needs a finite mean and stddev >= 0");
  }
  if (o.init.kind == RowInitializer::Kind::kUniform &&
      (!Finite(o.init.low) || !Finite(o.init.high) || o.init.low > o.init.high)) {
    return InvalidArgument("a uniform row initializer needs finite low <= high");
  }
  const size_t row_bytes =
      o.dim * (1 + SparseOptimizerSlots(o.optimizer)) * sizeof(float) + kRowOverhead;
  if (o.memory_bytes < row_bytes) {
    return InvalidArgument("sparse table " + std::to_string(o.table_id) + ": a memory budget of " +
                           std::to_string(o.memory_bytes) + " bytes is smaller than one row (" +
                           std::to_string(row_bytes) + " bytes)");
  }
  std::unique_ptr<SparseRowStore> store;
  if (!o.path.empty()) {
    EPS_ASSIGN_OR_RETURN(store, SparseRowStore::Open(StoreOptionsOf(o)));
  }
  return std::unique_ptr<SparseTable>(new SparseTableImpl(o, std::move(store)));
}

}  // namespace eps
