#include "models/model_export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/files.h"
#include "common/row_init.h"
#include "data/job_data.h"
#include "data/model_input.h"
#include "schema/codec.h"

namespace eps {

namespace {

// Chunk c's bytes; DataLoss when missing or of the wrong size.
StatusOr<const ChunkBytes*> Find(const Layout& layout, const ModelChunks& chunks, const Chunk& c) {
  auto it = chunks.find(c.id.value());
  if (it == chunks.end() || it->second.size != layout.ChunkBytes(c)) {
    return DataLoss("chunk " + std::to_string(c.id.value()) + " of tensor '" +
                    layout.tensors[c.tensor].name + "' is missing or has the wrong size");
  }
  return &it->second;
}

// The stored rows of sparse tensor `tensor` (none when absent).
const StoredRows& RowsOf(const ModelTables& tables, uint32_t tensor) {
  static const StoredRows kNone;
  auto it = tables.find(tensor);
  return it == tables.end() ? kNone : it->second;
}

// Sparse table `table` (layout.sparse's index) as the dense tensor it stands for: its initial
// rows, and its `stored` rows over them.
std::vector<float> DenseTable(const Layout& layout, const TableExport& e, uint32_t table,
                              const StoredRows& stored) {
  const TensorSpec& spec = layout.tensors[layout.sparse[table]];
  const uint64_t n = static_cast<uint64_t>(spec.shape[0]),
                 dim = static_cast<uint64_t>(spec.shape[1]);
  std::vector<float> out(n * dim);
  for (uint64_t row = 0; row < n; ++row)
    InitialRow(RowInitializer{}, e.seed, table, row, &out[row * dim], dim);
  for (size_t k = 0; k < stored.ids.size(); ++k)
    std::memcpy(&out[stored.ids[k] * dim], &stored.values[k * dim], dim * sizeof(float));
  return out;
}

// Calls fn(tensor, bytes, size) for the pieces of every tensor but the loss, in
// layout order: a dense tensor's chunks, a sparse table whole, and
// rows(tensor, stored rows) for a table too large to lay out (TableExport).
template <class Fn, class Rows>
Status ForEachPiece(const Layout& layout, const ModelChunks& chunks, const ModelTables& tables,
                    const TableExport& e, Fn fn, Rows rows) {
  size_t next = 0;     // chunks run through each tensor in order
  uint32_t table = 0;  // and the sparse tables (layout.sparse is in tensor order)
  for (uint32_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    if (spec.sparse) {
      if (e.Dense(spec)) {
        const std::vector<float> dense = DenseTable(layout, e, table, RowsOf(tables, t));
        fn(t, dense.data(), dense.size() * sizeof(float));
      } else {
        rows(t, RowsOf(tables, t));
      }
      ++table;
      continue;
    }
    for (; next < layout.chunks.size() && layout.chunks[next].tensor == t; ++next) {
      if (spec.kind == TensorKind::kLoss) continue;
      EPS_ASSIGN_OR_RETURN(const ChunkBytes* b, Find(layout, chunks, layout.chunks[next]));
      fn(t, b->data, b->size);
    }
  }
  return OkStatus();
}

// An .npy file (format 1.0) of `descr` ("<u8", "<f4") and `shape`, written atomically.
Status WriteNpy(const std::string& path, const char* descr, const std::vector<uint64_t>& shape,
                const void* data, size_t bytes) {
  std::string dims;
  for (uint64_t d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();  // (n,) but (n, d)
  std::string header =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return WriteFileAtomically(path, out);
}

}  // namespace

Status AddTableRows(const Layout& layout, const std::vector<SparseRowBytes>& rows,
                    ModelTables* tables) {
  for (const SparseRowBytes& r : rows) {
    if (r.table >= layout.sparse.size()) return ProtocolError("rows of an unknown sparse table");
    const uint32_t i = layout.sparse[r.table];
    const TensorSpec& spec = layout.tensors[i];
    const uint64_t n = static_cast<uint64_t>(spec.shape[0]),
                   dim = static_cast<uint64_t>(spec.shape[1]);
    if (r.values.size != uint64_t{r.rows} * dim * sizeof(float) ||
        r.ids.size != uint64_t{r.rows} * sizeof(uint64_t))
      return ProtocolError("rows of sparse table '" + spec.name + "' of the wrong size");
    StoredRows& table = (*tables)[i];
    const size_t first = table.ids.size();
    table.ids.resize(first + r.rows);
    if (r.rows > 0) std::memcpy(&table.ids[first], r.ids.data, r.ids.size);
    for (size_t k = first; k < table.ids.size(); ++k) {
      if (table.ids[k] >= n)
        return ProtocolError("row " + std::to_string(table.ids[k]) + " beyond '" + spec.name + "'");
    }
    const auto* values = static_cast<const float*>(r.values.data);
    table.values.insert(table.values.end(), values, values + r.rows * dim);
  }
  return OkStatus();
}

Status SortTableRows(const Layout& layout, ModelTables* tables) {
  for (auto& entry : *tables) {  // not a structured binding: the lambda below captures `table`
    const uint32_t tensor = entry.first;
    StoredRows& table = entry.second;
    const size_t dim = static_cast<size_t>(layout.tensors[tensor].shape[1]);
    std::vector<size_t> order(table.ids.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return table.ids[a] < table.ids[b]; });
    StoredRows sorted;
    sorted.ids.reserve(order.size());
    sorted.values.reserve(table.values.size());
    for (size_t k : order) {
      if (!sorted.ids.empty() && sorted.ids.back() == table.ids[k]) {
        return DataLoss("row " + std::to_string(table.ids[k]) + " of sparse table '" +
                        layout.tensors[tensor].name + "' came twice");
      }
      sorted.ids.push_back(table.ids[k]);
      sorted.values.insert(sorted.values.end(), &table.values[k * dim],
                           &table.values[k * dim] + dim);
    }
    table = std::move(sorted);
  }
  return OkStatus();
}

StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks,
                                   const ModelTables& tables, const TableExport& e) {
  Sha256 params, buffers;
  EPS_RETURN_IF_ERROR(ForEachPiece(
      layout, chunks, tables, e,
      [&](uint32_t t, const void* data, size_t size) {
        (layout.tensors[t].kind == TensorKind::kParameter ? params : buffers).Update(data, size);
      },
      [&](uint32_t t, const StoredRows& rows) {
        const size_t dim = static_cast<size_t>(layout.tensors[t].shape[1]);
        for (size_t k = 0; k < rows.ids.size(); ++k) {
          uint8_t id[8];
          for (int b = 0; b < 8; ++b) id[b] = static_cast<uint8_t>(rows.ids[k] >> (8 * b));
          params.Update(id, sizeof id);
          params.Update(&rows.values[k * dim], dim * sizeof(float));
        }
      }));
  return ModelDigests{params.HexDigest(), buffers.HexDigest()};
}

Status WriteSafetensors(const std::string& path, const Layout& layout, const ModelChunks& chunks,
                        const ModelTables& tables, const TableExport& e, const Step& step,
                        const std::string& job_id, const std::string& model,
                        const ModelDigests& digests,
                        const std::map<std::string, std::string>& extra) {
  nlohmann::json header;
  header["__metadata__"] = extra;
  header["__metadata__"].update({{"job_id", job_id},
                                 {"model", model},
                                 {"steps", std::to_string(step.value())},
                                 {"params_sha256", digests.params_sha256}});
  // The tables too large to lay out: a table file each, beside the model.
  const std::filesystem::path file(path);
  const std::string dir_name = file.stem().string() + ".tables";
  nlohmann::json files = nlohmann::json::object();
  for (size_t i = 0; i < layout.sparse.size(); ++i) {
    const TensorSpec& t = layout.tensors[layout.sparse[i]];
    if (e.Dense(t)) continue;
    const StoredRows& rows = RowsOf(tables, layout.sparse[i]);
    const std::string ids = dir_name + "/" + t.name + ".ids.npy",
                      values = dir_name + "/" + t.name + ".rows.npy";
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path() / dir_name, ec);
    if (ec) return Internal("cannot make " + dir_name + ": " + ec.message());
    const uint64_t n = rows.ids.size(), dim = static_cast<uint64_t>(t.shape[1]);
    EPS_RETURN_IF_ERROR(WriteNpy((file.parent_path() / ids).string(), "<u8", {n}, rows.ids.data(),
                                 n * sizeof(uint64_t)));
    EPS_RETURN_IF_ERROR(WriteNpy((file.parent_path() / values).string(), "<f4", {n, dim},
                                 rows.values.data(), rows.values.size() * sizeof(float)));
    files[t.name] = {{"rows", t.shape[0]},
                     {"dim", dim},
                     {"stored", n},
                     {"table", i},
                     {"seed", std::to_string(e.seed)},
                     {"initializer", "normal(0, 1)"},
                     {"ids", ids},
                     {"values", values}};
  }
  if (!files.empty()) header["__metadata__"]["table_files"] = files.dump();
  uint64_t offset = 0;
  for (const TensorSpec& t : layout.tensors) {
    if (t.kind == TensorKind::kLoss || (t.sparse && !e.Dense(t))) continue;
    const uint64_t bytes = uint64_t(t.numel()) * DTypeSize(t.dtype);
    header[t.name] = {{"dtype", t.dtype == DType::kInt64 ? "I64" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t(head.size()) >> (8 * i)) & 0xff);
  out += head;
  out.reserve(out.size() + offset);
  EPS_RETURN_IF_ERROR(ForEachPiece(
      layout, chunks, tables, e,
      [&](uint32_t, const void* data, size_t size) {
        out.append(static_cast<const char*>(data), size);
      },
      [](uint32_t, const StoredRows&) {}));
  return WriteFileAtomically(path, out);
}

std::map<std::string, std::string> ExportMetadata(const JobSpec& spec) {
  std::map<std::string, std::string> m = ZooSizesMetadata(ZooSizesOf(spec));
  m["cpu_kernels"] = spec.cpu_kernels;
  return m;
}

std::optional<std::string> ExportMetadataValue(const std::string& model, const std::string& key) {
  const std::filesystem::path p(model);
  const std::filesystem::path file =
      p.extension() == ".safetensors" ? p : p.parent_path() / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  unsigned char size[8];
  if (!in.read(reinterpret_cast<char*>(size), sizeof(size))) return std::nullopt;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | size[i];  // little-endian
  if (n > (uint64_t{1} << 20)) return std::nullopt;     // not a header this writes
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object())
    return std::nullopt;
  const nlohmann::json& m = j["__metadata__"];
  if (!m.contains(key) || !m[key].is_string()) return std::nullopt;
  return m[key].get<std::string>();
}

std::string ExportCpuKernels(const std::string& model) {
  return ExportMetadataValue(model, "cpu_kernels").value_or(kDefaultCpuKernels);
}

StatusOr<std::vector<ExportedTensor>> ModelTensors(const Layout& layout, const ModelChunks& chunks,
                                                   const ModelTables& tables,
                                                   const TableExport& e) {
  std::vector<ExportedTensor> out;
  std::vector<int> index(layout.tensors.size(), -1);
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    if (spec.kind == TensorKind::kLoss || (spec.sparse && !e.Dense(spec))) continue;
    index[t] = static_cast<int>(out.size());
    out.push_back({layout.tensors[t], {}});
  }
  EPS_RETURN_IF_ERROR(ForEachPiece(
      layout, chunks, tables, e,
      [&](uint32_t t, const void* data, size_t size) {
        out[static_cast<size_t>(index[t])].bytes.append(static_cast<const char*>(data), size);
      },
      [](uint32_t, const StoredRows&) {}));
  return out;
}

StatusOr<std::vector<ExportedTensor>> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  EPS_ASSIGN_OR_RETURN(const std::string blob, ReadFileToString(path));
  return ParseSafetensors(blob, path, metadata);
}

std::string EncodeStoredJob(const JobSpec& spec, const std::vector<TensorSpec>& tensors,
                            std::optional<ShardMap> map) {
  auto frames = Encode(Envelope{"", ShardConfig{spec, tensors, 0, std::move(map)}});
  return std::string(static_cast<const char*>((*frames)[0].data), (*frames)[0].size);
}

StatusOr<ShardConfig> DecodeStoredJob(const std::string& bytes) {
  auto env = Decode({Frame{bytes.data(), bytes.size(), nullptr}});
  if (!env.ok()) return DataLoss("the stored job record is damaged: " + env.status().message());
  auto* config = std::get_if<ShardConfig>(&env->body);
  if (config == nullptr) return DataLoss("the stored job record is not a job");
  return std::move(*config);
}

}  // namespace eps
