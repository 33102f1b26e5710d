#include "models/lookup_tables.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace eps {
namespace {

constexpr uint64_t kPageBytes = 4096;

// The bound of a table's ids (TensorSpec::RowBound): its rows, or 2^63 - 1 unbounded (0 rows).
int64_t IdBound(int64_t rows) { return rows == 0 ? kUnboundedRows : rows; }

}  // namespace

void LookupTables::Add(Kind kind, int64_t rows, const torch::Tensor& weight) {
  Table t;
  t.kind = kind;
  t.rows = rows;
  t.dim = weight.dim() == 2 ? weight.size(1) : 0;
  if (kind == Kind::kCompact) {
    t.store = std::make_unique<RowStore>(static_cast<size_t>(t.dim));
    weight.set_data(torch::zeros({0, t.dim}));
  } else if (kind == Kind::kLazy) {
    weight.set_data(memory_->New(rows, t.dim));
  }
  any_ = any_ || kind != Kind::kHeld;
  tables_.push_back(std::move(t));
}

void LookupTables::MakeLazy(size_t i, const torch::Tensor& weight) {
  Table& t = tables_[i];
  if (t.kind != Kind::kCompact || t.rows == 0) return;
  t.kind = Kind::kLazy;
  t.store.reset();
  weight.set_data(memory_->New(t.rows, t.dim));
}

Status LookupTables::RowsOf(Net& net, const std::vector<TensorSpec>& specs, const torch::Tensor& x,
                            bool held_too, std::vector<std::vector<uint64_t>>* out) const {
  if (any_ || (held_too && net.HasTableIds()))
    return RowsOfIds(specs, net.TableIds(x), held_too, out);
  out->assign(specs.size(), {});
  return OkStatus();
}

Status LookupTables::RowsOfIds(const std::vector<TensorSpec>& specs, const NamedTensors& table_ids,
                               bool held_too, std::vector<std::vector<uint64_t>>* out) const {
  out->assign(specs.size(), {});
  std::vector<char> named(tables_.size(), 0);
  for (const auto& [name, ids] : table_ids) {
    for (size_t i = 0; i < tables_.size() && i < specs.size(); ++i) {
      const Table& t = tables_[i];
      if ((t.kind == Kind::kHeld && (!held_too || !specs[i].sparse)) || specs[i].name != name)
        continue;
      EPS_ASSIGN_OR_RETURN((*out)[i], DistinctRows(ids, IdBound(t.rows), name));
      std::vector<uint64_t>& rows = (*out)[i];
      if (t.kind == Kind::kCompact && (rows.empty() || rows[0] != 0)) rows.insert(rows.begin(), 0);
      named[i] = 1;
    }
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i].kind != Kind::kHeld && !named[i])
      return InvalidArgument("the module's table ids for a batch leave table " + specs[i].name +
                             " out");
  }
  return OkStatus();
}

StatusOr<torch::Tensor> LookupTables::Bind(Net& net, const std::vector<TensorSpec>& specs,
                                           const torch::Tensor& x,
                                           const std::vector<torch::Tensor>& weights,
                                           bool zero_missing) {
  if (!any_) return x;
  const NamedTensors table_ids = net.TableIds(x);
  std::vector<std::vector<uint64_t>> rows;
  EPS_RETURN_IF_ERROR(RowsOfIds(specs, table_ids, /*held_too=*/false, &rows));
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i].kind != Kind::kHeld) tables_[i].batch = std::move(rows[i]);
  }
  NamedTensors ranks;
  for (const auto& [name, ids] : table_ids) {
    for (size_t i = 0; i < tables_.size() && i < specs.size(); ++i) {
      Table& t = tables_[i];
      if (t.kind != Kind::kCompact || specs[i].name != name) continue;
      const int64_t n = static_cast<int64_t>(t.batch.size());
      torch::Tensor bound = torch::empty({n, t.dim});
      float* to = bound.data_ptr<float>();
      const size_t row_bytes = static_cast<size_t>(t.dim) * sizeof(float);
      for (int64_t k = 0; k < n; ++k) {
        const float* row = t.store->Find(t.batch[static_cast<size_t>(k)]);
        if (row == nullptr && !zero_missing) {
          return FailedPrecondition("row " + std::to_string(t.batch[static_cast<size_t>(k)]) +
                                    " of table " + name + " was read before it was pulled");
        }
        if (row == nullptr) {
          std::memset(to + k * t.dim, 0, row_bytes);
        } else {
          std::memcpy(to + k * t.dim, row, row_bytes);
        }
      }
      weights[i].set_data(bound);
      const torch::Tensor sorted =
          torch::from_blob(t.batch.data(), {n}, torch::kInt64);  // ids below 2^63: as int64
      ranks.emplace_back(name, torch::searchsorted(sorted, ids));
    }
  }
  if (ranks.empty()) return x;
  torch::Tensor rewritten = net.WithTableIds(x, ranks);
  if (net.builtin()) return rewritten;  // the zoo's rewriting: model_runner_test's
  // A module's ids of the rewritten batch must be the ranks: else its forward would read other
  // rows of the compact weight than the batch's (a with_table_ids that misplaces them).
  for (const auto& [name, ids] : net.TableIds(rewritten)) {
    for (const auto& [ranked, want] : ranks) {
      if (ranked == name && !(ids.sizes() == want.sizes() && torch::equal(ids, want))) {
        return InvalidArgument(
            "the module's table ids of the batch with_table_ids rewrote are not "
            "the ids it was given for table " +
            name);
      }
    }
  }
  return rewritten;
}

void LookupTables::GradientIds(size_t i, const std::string& name, torch::Tensor& ids) const {
  const Table& t = tables_[i];
  if (t.kind == Kind::kHeld) return;
  const std::vector<uint64_t>& rows = t.batch;
  if (t.kind == Kind::kCompact) {
    ids = ids.clone();  // not the gradient's own indices
    int64_t* p = ids.data_ptr<int64_t>();
    for (int64_t k = 0, n = ids.numel(); k < n; ++k) {
      if (p[k] < 0 || static_cast<uint64_t>(p[k]) >= rows.size())
        throw std::invalid_argument("a gradient of row " + std::to_string(p[k]) + " of table " +
                                    name + ", beyond its batch's rows");
      p[k] = static_cast<int64_t>(rows[static_cast<size_t>(p[k])]);
    }
    return;
  }
  // A lazy table holds the rows its batch reads: a gradient of any other row means the
  // forward read a row that was not pulled (a module's table_ids(x) that leaves one out).
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t k = 0, n = ids.numel(); k < n; ++k) {
    if (!std::binary_search(rows.begin(), rows.end(), static_cast<uint64_t>(p[k]))) {
      throw std::invalid_argument("the forward read row " + std::to_string(p[k]) +
                                  " of lookup table " + name +
                                  ", which its table ids for the batch do not name");
    }
  }
}

Status LookupTables::Write(size_t i, const torch::Tensor& weight, const uint64_t* ids,
                           const float* values, size_t n) {
  if (kind(i) == Kind::kHeld) return FailedPrecondition("rows written to a table held whole");
  Table& t = tables_[i];
  const uint64_t bound = static_cast<uint64_t>(IdBound(t.rows));
  const size_t dim = static_cast<size_t>(t.dim);
  for (size_t k = 0; k < n; ++k) {
    if (ids[k] >= bound) {
      return InvalidArgument("row " + std::to_string(ids[k]) + " outside a table of " +
                             std::to_string(bound) + " rows");
    }
  }
  if (t.kind == Kind::kCompact) {
    for (size_t k = 0; k < n; ++k) t.store->Put(ids[k], values + k * dim);
    return OkStatus();
  }
  auto* table = static_cast<uint8_t*>(weight.data_ptr());
  const uint64_t row_bytes = dim * sizeof(float);
  for (size_t k = 0; k < n; ++k) {
    std::memcpy(table + ids[k] * row_bytes, values + k * dim, row_bytes);
    // A row takes memory by the page: the pages its first and last byte lie in.
    t.pages.insert(ids[k] * row_bytes / kPageBytes);
    t.pages.insert(((ids[k] + 1) * row_bytes - 1) / kPageBytes);
  }
  return OkStatus();
}

Status LookupTables::Drop(size_t i, const torch::Tensor& weight) {
  switch (kind(i)) {
    case Kind::kHeld:
      return OkStatus();
    case Kind::kCompact:
      tables_[i].store->Clear();
      return OkStatus();
    case Kind::kLazy:
      tables_[i].pages.clear();
      return memory_->Drop(weight);
  }
  return OkStatus();
}

size_t LookupTables::HeldBytes(size_t i) const {
  switch (kind(i)) {
    case Kind::kHeld:
      return 0;
    case Kind::kCompact:
      return tables_[i].store->bytes();
    case Kind::kLazy:
      return tables_[i].pages.size() * kPageBytes;
  }
  return 0;
}

}  // namespace eps
