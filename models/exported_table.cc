#include "models/exported_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/layout.h"
#include "common/row_init.h"
#include "data/npy.h"
#include "models/model_export.h"

namespace eps {
namespace {

// Field `key` of table `name`'s entry as an unsigned number (a decimal string for the seed,
// which JSON numbers cannot hold whole).
StatusOr<uint64_t> Number(const nlohmann::json& entry, const char* key, const std::string& name) {
  const auto it = entry.find(key);
  if (it != entry.end() && it->is_number_unsigned()) return it->get<uint64_t>();
  if (it != entry.end() && it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (!s.empty() && s[0] != '-' && *end == '\0' && errno == 0) return uint64_t{v};
  }
  return InvalidArgument("table '" + name + "': no unsigned number '" + key + "'");
}

// Where a table file named `relative` lies: inside `folder`, or InvalidArgument.
StatusOr<std::string> Inside(const std::filesystem::path& folder, const nlohmann::json& entry,
                             const char* key, const std::string& name) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_string())
    return InvalidArgument("table '" + name + "': no file name '" + key + "'");
  const std::filesystem::path relative(it->get<std::string>());
  for (const auto& part : relative) {
    if (part == "..") return InvalidArgument("table '" + name + "': " + key + " leaves the folder");
  }
  if (relative.empty() || relative.is_absolute())
    return InvalidArgument("table '" + name + "': " + key + " is no file of the export's folder");
  return (folder / relative).string();
}

}  // namespace

StatusOr<std::map<std::string, ExportedTable>> ExportedTable::OpenAll(
    const std::string& safetensors, const std::string& table_files) {
  const nlohmann::json files =
      nlohmann::json::parse(table_files, nullptr, /*allow_exceptions=*/false);
  if (!files.is_object())
    return InvalidArgument(safetensors + ": its metadata's table_files is no JSON object");
  const std::filesystem::path folder = std::filesystem::path(safetensors).parent_path();
  std::map<std::string, ExportedTable> out;
  for (const auto& item : files.items()) {
    // Named, not structured bindings: the lambdas below capture them.
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (!entry.is_object()) return InvalidArgument(safetensors + ": table '" + name + "'");
    ExportedTable t;
    t.name_ = name;
    auto fail = [&](const Status& st) {
      return Status(st.code(), safetensors + ": " + st.message());
    };
    const auto number = [&](const char* key, uint64_t* v) -> Status {
      auto n = Number(entry, key, name);
      if (!n.ok()) return fail(n.status());
      *v = *n;
      return OkStatus();
    };
    uint64_t rows = 0, dim = 0, table = 0;
    EPS_RETURN_IF_ERROR(number("rows", &rows));
    EPS_RETURN_IF_ERROR(number("dim", &dim));
    EPS_RETURN_IF_ERROR(number("stored", &t.stored_));
    EPS_RETURN_IF_ERROR(number("table", &table));
    EPS_RETURN_IF_ERROR(number("seed", &t.seed_));
    if (rows > uint64_t(kUnboundedRows) || dim == 0 || dim > (1u << 20) || table > UINT32_MAX)
      return fail(InvalidArgument("table '" + name + "': rows, dim or index out of range"));
    if (entry.value("initializer", "") != kTableFileInitializer) {
      return fail(InvalidArgument("table '" + name + "': an initializer other than " +
                                  kTableFileInitializer));
    }
    t.rows_ = static_cast<int64_t>(rows);
    t.dim_ = static_cast<int64_t>(dim);
    t.table_ = static_cast<uint32_t>(table);
    auto ids_path = Inside(folder, entry, "ids", name);
    auto values_path = Inside(folder, entry, "values", name);
    if (!ids_path.ok()) return fail(ids_path.status());
    if (!values_path.ok()) return fail(values_path.status());
    EPS_ASSIGN_OR_RETURN(NpyArrayView ids, MapNpyArray(*ids_path, "<u8", sizeof(uint64_t)));
    EPS_ASSIGN_OR_RETURN(NpyArrayView values, MapNpyArray(*values_path, "<f4", sizeof(float)));
    const int64_t stored = static_cast<int64_t>(t.stored_);
    if (ids.shape != std::vector<int64_t>{stored} ||
        values.shape != std::vector<int64_t>{stored, t.dim_}) {
      return InvalidArgument(*ids_path + ", " + *values_path + ": not the " +
                             std::to_string(stored) + " rows of " + std::to_string(dim) +
                             " of table '" + name + "' the metadata names");
    }
    t.ids_ = reinterpret_cast<const uint64_t*>(ids.data);
    t.values_ = reinterpret_cast<const float*>(values.data);
    t.ids_hold_ = std::move(ids.hold);
    t.values_hold_ = std::move(values.hold);
    out.emplace(name, std::move(t));
  }
  return out;
}

Status ExportedTable::Read(const uint64_t* ids, size_t n, float* out) const {
  const uint64_t bound = rows_ == 0 ? uint64_t(kUnboundedRows) : uint64_t(rows_);
  const size_t dim = static_cast<size_t>(dim_);
  const uint64_t* const end = ids_ + stored_;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t id = ids[k];
    if (id >= bound) {
      return InvalidArgument("row " + std::to_string(id) + " is beyond table '" + name_ + "' (" +
                             std::to_string(bound) + " rows)");
    }
    float* row = out + k * dim;
    const uint64_t* at = std::lower_bound(ids_, end, id);
    if (at != end && *at == id) {
      std::copy_n(values_ + static_cast<size_t>(at - ids_) * dim, dim, row);
    } else {
      InitialRow(RowInitializer{}, seed_, table_, id, row, dim);
    }
  }
  return OkStatus();
}

}  // namespace eps
