#include "server/sparse_table.h"

#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <utility>

#include "server/row_cache.h"
#include "server/sparse_record.h"
#include "server/sparse_row_step.h"
#include "storage/sparse_store.h"

namespace eps {
namespace {

using Slot = RowCache::Slot;
using Fields = RowCache::Fields;
// How many rows ahead a step fetches the row it will step (RowCache::Prefetch).
constexpr size_t kPrefetchRows = 8;

// Rows read from the store or made by the initializer, or moved in, before they enter the
// cache: the i-th one's fields and its floats at data[i * floats].
struct Rows {
  std::vector<Fields> fields;
  std::vector<float> data;

  void Resize(size_t n, size_t floats) {
    fields.assign(n, Fields{});
    data.resize(n * floats);
  }
};

// A stored row as a scan gives it: its record's header and its floats.
using ScanFn = std::function<bool(uint64_t row, const RowHeader& header, const float* floats)>;

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
        row_bytes_(floats_ * sizeof(float) + RowCache::OverheadBytes()),
        capacity_(o.memory_bytes / row_bytes_),
        store_(std::move(store)),
        reducer_(Block{0, TreeWidth(o.num_vws)}, o.num_vws, o.dim, o.grad_rounding),
        cache_(floats_) {
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
    for (size_t i = 0; i < num_ids; ++i) added += cache_.Find(ids[i]) == RowCache::kNone ? 1 : 0;
    if (store_ == nullptr && cache_.size() + added > capacity_) {
      return ResourceExhausted(table + " would hold " + std::to_string(cache_.size() + added) +
                               " seeded rows, its memory budget of " +
                               std::to_string(o_.memory_bytes) +
                               " bytes (--shard_memory_mb) holds " + std::to_string(capacity_) +
                               " and it has no store to spill to");
    }
    SpillBatch spill;
    for (size_t i = 0; i < num_ids; ++i) {
      Slot slot = cache_.Find(ids[i]);
      if (slot == RowCache::kNone) {
        slot = Put(ids[i], Fields{}, nullptr);
      } else {
        cache_.fields(slot).used = true;
      }
      Fields& row = cache_.fields(slot);
      float* data = cache_.data(slot);
      std::memcpy(data, weights + i * o_.dim, o_.dim * sizeof(float));
      std::fill(data + o_.dim, data + floats_, 0.0f);
      row.version = 0;
      row.initialized = false;
      row.dirty = true;
      row.fresh = false;
      row.spill_current = false;
      Evict(&spill);
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
    std::vector<Slot> rows(ids.size());
    cache_.FindAll(ids.data(), ids.size(), rows.data());
    std::vector<uint64_t> missing;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (rows[i] == RowCache::kNone) missing.push_back(ids[i]);
    }
    if (store_ == nullptr && cache_.size() + missing.size() > capacity_) {
      return ResourceExhausted("sparse table " + std::to_string(o_.table_id) + " would hold " +
                               std::to_string(cache_.size() + missing.size()) +
                               " rows, its memory budget of " + std::to_string(o_.memory_bytes) +
                               " bytes holds " + std::to_string(capacity_) +
                               " and it has no store to spill to");
    }
    EPS_RETURN_IF_ERROR(Load(missing, &loaded_));

    // Now nothing fails until the spill write. The loaded rows enter the cache as the rows put
    // last, the cached ones are marked used (a second chance: server/row_cache.h), and every
    // row is stepped where it is there; rows are evicted only once every row of the step is.
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
    for (size_t i = 0, next_loaded = 0; i < ids.size(); ++i) {
      // Each row is a random place in memory: the rows a few places ahead are fetched while this
      // one steps (all of them at once would overrun the cache's outstanding misses).
      if (i + kPrefetchRows < ids.size()) cache_.Prefetch(rows[i + kPrefetchRows]);
      Slot slot = rows[i];
      if (slot == RowCache::kNone) {
        slot = Put(ids[i], loaded_.fields[next_loaded], &loaded_.data[next_loaded * floats_]);
        ++next_loaded;
      } else {
        cache_.fields(slot).used = true;
      }
      Fields& row = cache_.fields(slot);
      float* data = cache_.data(slot);
      const size_t at = i * o_.dim, bytes = o_.dim * sizeof(float);
      if (changed != nullptr) std::memcpy(changed->before.data() + at, data, bytes);
      stepper.Step(data, pending_->values.data() + at, divisor, row.initialized);
      if (changed != nullptr) std::memcpy(changed->after.data() + at, data, bytes);
      row.initialized = true;
      row.version = new_version;
      row.dirty = true;
      row.fresh = false;
      row.spill_current = false;
      ++stats_.rows_stepped;
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
    std::vector<Slot> rows(num_ids);
    cache_.FindAll(ids, num_ids, rows.data());
    std::vector<uint64_t> missing;
    for (size_t i = 0; i < num_ids; ++i) {
      if (rows[i] == RowCache::kNone) missing.push_back(ids[i]);
    }
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    EPS_RETURN_IF_ERROR(Load(missing, &loaded_));
    // A read does not mark the rows used: it follows the steps (a pull of the rows a step
    // changed would only give them a second chance the step gave them already).
    for (size_t i = 0; out != nullptr && i < num_ids; ++i) {
      if (i + kPrefetchRows < num_ids) cache_.Prefetch(rows[i + kPrefetchRows]);
      const Slot slot = rows[i];
      const float* row =
          slot != RowCache::kNone
              ? cache_.data(slot)
              : &loaded_.data[(std::lower_bound(missing.begin(), missing.end(), ids[i]) -
                               missing.begin()) *
                              floats_];
      std::memcpy(out + i * o_.dim, row, o_.dim * sizeof(float));
    }
    // The stored rows read come into the cache (a pull of a batch's rows comes before their
    // push); rows never touched stay stored nowhere.
    SpillBatch spill;
    for (size_t i = 0; i < missing.size(); ++i) {
      if (loaded_.fields[i].fresh) continue;
      Put(missing[i], loaded_.fields[i], &loaded_.data[i * floats_]);
      Evict(&spill);
    }
    return WriteSpill(spill);
  }

  Status Warm(const uint64_t* ids, size_t num_ids) override {
    const uint64_t before = stats_.store_reads;
    const Status st = Read(ids, num_ids, nullptr);
    stats_.warm_reads += stats_.store_reads - before;
    return st;
  }

  StatusOr<std::vector<uint64_t>> ChangedSince(Step since, uint64_t from_row = 0,
                                               size_t max_rows = SIZE_MAX) override {
    std::vector<uint64_t> out;
    if (since >= version_ || max_rows == 0) return out;
    if (since < log_base_) {  // beyond the log: every stored row's version says
      EPS_RETURN_IF_ERROR(ScanStored(
          [&](uint64_t row, const RowHeader& r, const float*) {
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
        [&](uint64_t id, const RowHeader&, const float* data) {
          ids->push_back(id);
          weights->insert(weights->end(), data, data + o_.dim);
          return ids->size() < max_rows;
        },
        from_row);
  }

  Status ScanRows(
      const std::function<void(uint64_t row, Step version, const float* floats)>& fn) override {
    return ScanStored([&](uint64_t id, const RowHeader& r, const float* data) {
      fn(id, Step(r.version), data);
      return true;
    });
  }

  size_t RecordBytes() const override { return RowRecordBytes(floats_); }

  Status ExportRows(const std::function<bool(uint64_t row)>& want, std::string* out) override {
    return ScanStored([&](uint64_t id, const RowHeader& r, const float* data) {
      if (!want(id)) return true;
      out->append(reinterpret_cast<const char*>(&id), sizeof id);
      out->append(EncodeRow(r, data, floats_));
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
    const size_t n = records.size() / each;
    Rows came;
    came.Resize(n, floats_);
    std::vector<uint64_t> came_ids;
    std::vector<size_t> order(n);  // of the records, by id
    for (size_t i = 0; i < n; ++i) {
      const size_t at = i * each;
      uint64_t id;
      std::memcpy(&id, records.data() + at, sizeof id);
      Fields& row = came.fields[i];
      if (!DecodeRow(records.substr(at + sizeof id, RecordBytes()), floats_, &row,
                     &came.data[i * floats_]) ||
          row.version > version.value())
        return InvalidArgument(table + ": moved row " + std::to_string(id) + " is malformed");
      if (lost(id)) return InvalidArgument(table + ": moved row " + std::to_string(id) + " is one it loses");
      row.dirty = true;
      came_ids.push_back(id);
      order[i] = i;
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return came_ids[a] < came_ids[b]; });
    for (size_t i = 1; i < n; ++i) {
      if (came_ids[order[i]] == came_ids[order[i - 1]])
        return InvalidArgument(table + ": moved row " + std::to_string(came_ids[order[i]]) +
                               " comes twice");
    }
    size_t kept = 0;
    cache_.ForEach([&](Slot slot) { kept += lost(cache_.fields(slot).id) ? 0 : 1; });
    if (store_ == nullptr && kept + n > capacity_) {
      return ResourceExhausted(table + " would hold " + std::to_string(kept + n) +
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
    cache_.ForEach([&](Slot slot) {
      if (lost(cache_.fields(slot).id)) cache_.Erase(slot);
    });
    for (auto it = spilled_.begin(); it != spilled_.end();) {
      if (!lost(*it)) {
        ++it;
        continue;
      }
      spill.deletes.push_back(*it);
      spilled_.erase(it++);
    }
    dropped_.insert(checkpointed.begin(), checkpointed.end());
    for (size_t i : order) {
      const uint64_t id = came_ids[i];
      dropped_.erase(id);
      // A stale copy read earlier.
      if (const Slot stale = cache_.Find(id); stale != RowCache::kNone) cache_.Erase(stale);
      Put(id, came.fields[i], &came.data[i * floats_]);
    }
    Evict(&spill);
    spilled_cached_ = 0;
    for (uint64_t id : spilled_) spilled_cached_ += cache_.Find(id) != RowCache::kNone ? 1 : 0;
    version_ = version;
    log_.clear();
    log_base_ = version;  // the log does not know the rows that came: their versions say
    return WriteSpill(spill);
  }

  // Calls fn(row, its state) for every stored row from `from_row` on, ascending (ScanRows),
  // while fn returns true.
  Status ScanStored(const ScanFn& fn, uint64_t from_row = 0) {
    EPS_RETURN_IF_ERROR(Usable());
    // The cached and spilled ids sorted: held by this scan (a change of the cache meanwhile
    // cannot free them), and kept for the next one while they hold.
    SortedIds ids = std::move(sorted_ids_);
    sorted_ids_.membership = UINT64_MAX;  // none while this scan holds them
    if (ids.membership != membership_) {
      ids.cached.clear();
      cache_.ForEach([&](Slot slot) { ids.cached.push_back(cache_.fields(slot).id); });
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
  Status ScanSorted(const SortedIds& ids, const ScanFn& fn, uint64_t from_row) {
    const std::vector<uint64_t>& cached = ids.cached;
    const std::vector<uint64_t>& spilled = ids.spilled;
    size_t ci = std::lower_bound(cached.begin(), cached.end(), from_row) - cached.begin();
    size_t si = std::lower_bound(spilled.begin(), spilled.end(), from_row) - spilled.begin();
    bool stopped = false;  // fn said so
    RowRecord row;
    row.data.resize(floats_);
    auto emit_cached = [&] {
      const Slot slot = cache_.Find(cached[ci++]);
      stopped = !fn(cache_.fields(slot).id, cache_.fields(slot), cache_.data(slot));
    };
    auto emit_spilled = [&]() -> Status {
      std::vector<std::optional<std::string>> record;
      EPS_RETURN_IF_ERROR(store_->ReadSpilled({spilled[si]}, &record));
      Fields fields;
      EPS_RETURN_IF_ERROR(DecodeInto(spilled[si], record[0], "spilled", &fields, row.data.data()));
      stopped = !fn(spilled[si], fields, row.data.data());
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
              stopped = !fn(id, row, row.data.data());
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
    cache_.ForEach([&](Slot slot) {
      const Fields& row = cache_.fields(slot);
      if (row.dirty) rows.emplace_back(row.id, EncodeRow(row, cache_.data(slot), floats_));
    });
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
    cache_.ForEach(
        [&](Slot slot) { cache_.fields(slot).dirty = cache_.fields(slot).spill_current = false; });
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
      if (cache_.Find(id) == RowCache::kNone) out.push_back(id);
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
    cache_.Clear();
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

  // The rows `ids` (ascending, none cached) from the spill tier, the newest checkpoint or the
  // initializer, in that order, into out's fields[i] and data.
  Status Load(const std::vector<uint64_t>& ids, Rows* out) {
    std::vector<uint64_t> spilled, rest;
    std::vector<size_t> spilled_at, rest_at;  // their places in `ids`
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool s = spilled_.contains(ids[i]);
      (s ? spilled : rest).push_back(ids[i]);
      (s ? spilled_at : rest_at).push_back(i);
    }
    std::vector<std::optional<std::string>> s_records, c_records;
    if (store_ != nullptr) {
      EPS_RETURN_IF_ERROR(store_->ReadSpilled(spilled, &s_records));
      EPS_RETURN_IF_ERROR(store_->ReadCheckpointed(rest, &c_records));
      stats_.store_reads += ids.size();
    }
    out->Resize(ids.size(), floats_);
    for (size_t i = 0; i < spilled.size(); ++i) {
      const size_t at = spilled_at[i];
      EPS_RETURN_IF_ERROR(DecodeInto(spilled[i], s_records[i], "spilled", &out->fields[at],
                                     &out->data[at * floats_]));
    }
    for (size_t i = 0; i < rest.size(); ++i) {
      const size_t at = rest_at[i];
      if (store_ != nullptr && c_records[i].has_value() && !dropped_.contains(rest[i])) {
        EPS_RETURN_IF_ERROR(DecodeInto(rest[i], c_records[i], "checkpointed", &out->fields[at],
                                       &out->data[at * floats_]));
        continue;
      }
      out->fields[at].fresh = true;
      float* data = &out->data[at * floats_];
      std::fill(data, data + floats_, 0.0f);
      InitialRow(o_.init, o_.seed, o_.table_id, rest[i], data, o_.dim);
    }
    return OkStatus();
  }

  Status DecodeInto(uint64_t id, const std::optional<std::string>& record, const char* tier,
                    Fields* fields, float* data) const {
    if (!record.has_value() || !DecodeRow(*record, floats_, fields, data)) {
      return DataLoss(std::string(tier) + " row " + std::to_string(id) + " of sparse table " +
                      std::to_string(o_.table_id) + " is " +
                      (record.has_value() ? "malformed" : "missing") + " in " + store_->path());
    }
    fields->dirty = fields->spill_current = std::string(tier) == "spilled";
    return OkStatus();
  }

  // What moves between the cache and the spill tier, written in one batch.
  struct SpillBatch {
    std::vector<std::pair<uint64_t, std::string>> puts;  // evicted changed rows
    std::vector<uint64_t> deletes;                       // spilled rows that left the table
  };

  // Puts row `id` (not cached) into the cache with `fields` (all but the cache's own: live, id,
  // used) and its floats from `data` (nullptr: zeros), and returns its slot. A spilled one keeps
  // its spilled record, stale once the row changes: its eviction overwrites it, and a
  // checkpoint deletes it (the row comes back at most once between two evictions; deleting its
  // record then would cost a third write for the one a later eviction makes anyway).
  Slot Put(uint64_t id, const Fields& fields, const float* data) {
    spilled_cached_ += spilled_.contains(id) ? 1 : 0;
    MembershipChanged();
    const Slot slot = cache_.Insert(id);
    Fields& f = cache_.fields(slot);
    static_cast<RowHeader&>(f) = fields;
    f.dirty = fields.dirty;
    f.fresh = fields.fresh;
    f.spill_current = fields.spill_current;
    if (data != nullptr) {
      std::memcpy(cache_.data(slot), data, floats_ * sizeof(float));
    } else {
      std::fill(cache_.data(slot), cache_.data(slot) + floats_, 0.0f);
    }
    return slot;
  }

  // Evicts the clock's victims (server/row_cache.h) while the cache is over budget, a changed
  // one to `spill`.
  void Evict(SpillBatch* spill) {
    while (cache_.size() > capacity_) {
      const Slot slot = cache_.Victim();
      const Fields& row = cache_.fields(slot);
      if (row.dirty) {  // its record goes to (or is already in) the spill tier
        if (!row.spill_current) {
          spill->puts.emplace_back(row.id, EncodeRow(row, cache_.data(slot), floats_));
          ++stats_.spill_writes;
        }
        if (!spilled_.insert(row.id).second) --spilled_cached_;
      }
      cache_.Erase(slot);
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

  RowCache cache_;
  Rows loaded_;  // Load's rows, for the call that loaded them (kept: its memory is reused)
  // Rows with a record in the spill tier: changed since the last checkpoint and evicted since.
  // The record is the row's state unless the row is cached (then the cache's is).
  absl::flat_hash_set<uint64_t> spilled_;
  size_t spilled_cached_ = 0;  // of them, the cached ones
  // Counts the changes of which rows are cached and which spilled: ScanStored's sorted ids of
  // both hold while it is the same (the pages of an export's final pull scan them once).
  uint64_t membership_ = 0;
  SortedIds sorted_ids_;
  // Rows a move took away that a checkpoint holds: the next one writes their tombstones.
  absl::flat_hash_set<uint64_t> dropped_;
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
      o.dim * (1 + SparseOptimizerSlots(o.optimizer)) * sizeof(float) + RowCache::OverheadBytes();
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
