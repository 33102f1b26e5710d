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

// Calls fn(id, values) for the stored rows of sparse table `table` (layout.sparse's index) that
// `pieces` gives, checked: ascending, each once, within the table.
Status EachRow(const Layout& layout, ModelPieces* pieces, uint32_t table,
               const std::function<Status(uint64_t id, const float* values)>& fn) {
  const TensorSpec& spec = layout.tensors[layout.sparse[table]];
  const uint64_t n = spec.RowBound();
  bool first = true;
  uint64_t last = 0;
  return pieces->RowsOf(table, [&](uint64_t id, const float* values) -> Status {
    if (id >= n)
      return DataLoss("row " + std::to_string(id) + " beyond sparse table '" + spec.name + "'");
    if (!first && id <= last) {
      return DataLoss("row " + std::to_string(id) + " of sparse table '" + spec.name + "' came " +
                      (id == last ? "twice" : "out of order"));
    }
    first = false;
    last = id;
    return fn(id, values);
  });
}

// Sparse table `table` as the dense tensor it stands for: its initial rows, and its stored rows
// over them.
StatusOr<std::vector<float>> DenseTable(const Layout& layout, const TableExport& e, uint32_t table,
                                        ModelPieces* pieces) {
  const TensorSpec& spec = layout.tensors[layout.sparse[table]];
  const uint64_t n = static_cast<uint64_t>(spec.shape[0]),
                 dim = static_cast<uint64_t>(spec.shape[1]);
  std::vector<float> out(n * dim);
  for (uint64_t row = 0; row < n; ++row)
    InitialRow(RowInitializer{}, e.seed, table, row, &out[row * dim], dim);
  EPS_RETURN_IF_ERROR(EachRow(layout, pieces, table, [&](uint64_t id, const float* values) {
    std::memcpy(&out[id * dim], values, dim * sizeof(float));
    return OkStatus();
  }));
  return out;
}

// Calls fn(tensor, bytes, size) for the pieces of every tensor but the loss, in layout order:
// a dense tensor's chunks, a sparse table whole, and row(tensor, table, id, values) for each
// stored row of a table too large to lay out (TableExport).
template <class Fn, class Row>
Status ForEachPiece(const Layout& layout, ModelPieces* pieces, const TableExport& e, Fn fn,
                    Row row) {
  size_t next = 0;     // chunks run through each tensor in order
  uint32_t table = 0;  // and the sparse tables (layout.sparse is in tensor order)
  for (uint32_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    if (spec.sparse) {
      if (e.Dense(spec)) {
        EPS_ASSIGN_OR_RETURN(const std::vector<float> dense, DenseTable(layout, e, table, pieces));
        EPS_RETURN_IF_ERROR(fn(t, dense.data(), dense.size() * sizeof(float)));
      } else {
        EPS_RETURN_IF_ERROR(EachRow(layout, pieces, table, [&](uint64_t id, const float* v) {
          return row(t, table, id, v);
        }));
      }
      ++table;
      continue;
    }
    for (; next < layout.chunks.size() && layout.chunks[next].tensor == t; ++next) {
      if (spec.kind == TensorKind::kLoss) continue;
      const Chunk& c = layout.chunks[next];
      EPS_ASSIGN_OR_RETURN(const ChunkBytes b, pieces->ChunkOf(c));
      if (b.size != layout.ChunkBytes(c)) {
        return DataLoss("chunk " + std::to_string(c.id.value()) + " of tensor '" + spec.name +
                        "' has " + std::to_string(b.size) + " bytes, not " +
                        std::to_string(layout.ChunkBytes(c)));
      }
      EPS_RETURN_IF_ERROR(fn(t, b.data, b.size));
    }
  }
  return OkStatus();
}

// An .npy file's header (format 1.0) of `descr` ("<u8", "<f4") and `shape`, padded to `size`
// bytes (0: the least multiple of 64 that holds it).
std::string NpyHeader(const char* descr, const std::vector<uint64_t>& shape, size_t size = 0) {
  std::string dims;
  for (uint64_t d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();  // (n,) but (n, d)
  std::string dict =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = std::max(size, (10 + dict.size() + 1 + 63) / 64 * 64);
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// A table file being written: the ids and the rows of a table too large to lay out.
struct TableFile {
  const TensorSpec* spec = nullptr;
  uint32_t table = 0;
  std::string ids_name, values_name;  // relative to the model file's folder
  std::optional<FileWriter> ids, values;
  size_t header = 0;  // bytes of each .npy header
  uint64_t stored = 0;
};

// The safetensors header: 8 bytes of its length, then its JSON padded with spaces to `size`
// bytes (0: to a multiple of 8).
std::string SafetensorsHeader(const Layout& layout, const TableExport& e, const ExportFile& file,
                              const std::string& digest, const std::vector<TableFile>& tables,
                              bool counted, size_t size = 0) {
  nlohmann::json header;
  header["__metadata__"] = file.extra;
  header["__metadata__"].update({{"job_id", file.job_id},
                                 {"model", file.model},
                                 {"steps", std::to_string(file.step.value())},
                                 {"params_sha256", digest}});
  nlohmann::json files = nlohmann::json::object();
  for (const TableFile& f : tables) {
    files[f.spec->name] = {{"rows", f.spec->shape[0]},
                           {"dim", f.spec->shape[1]},
                           {"stored", counted ? f.stored : UINT64_MAX},  // the widest before
                           {"table", f.table},
                           {"seed", std::to_string(e.seed)},
                           {"initializer", kTableFileInitializer},
                           {"ids", f.ids_name},
                           {"values", f.values_name}};
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
  head.append(size > head.size() ? size - head.size() : (8 - head.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t(head.size()) >> (8 * i)) & 0xff);
  return out + head;
}

// Opens the table files of the tables too large to lay out, beside `path`, each .npy header
// written at the widest it can be (the row count comes at the end).
StatusOr<std::vector<TableFile>> OpenTableFiles(const Layout& layout, const TableExport& e,
                                                const std::string& path) {
  const std::filesystem::path file(path);
  const std::string dir_name = file.stem().string() + ".tables";
  std::vector<TableFile> out;
  for (uint32_t i = 0; i < layout.sparse.size(); ++i) {
    const TensorSpec& t = layout.tensors[layout.sparse[i]];
    if (e.Dense(t)) continue;
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path() / dir_name, ec);
    if (ec) return Internal("cannot make " + dir_name + ": " + ec.message());
    TableFile f;
    f.spec = &t;
    f.table = i;
    f.ids_name = dir_name + "/" + t.name + ".ids.npy";
    f.values_name = dir_name + "/" + t.name + ".rows.npy";
    EPS_ASSIGN_OR_RETURN(f.ids, FileWriter::Create((file.parent_path() / f.ids_name).string()));
    EPS_ASSIGN_OR_RETURN(f.values,
                         FileWriter::Create((file.parent_path() / f.values_name).string()));
    const uint64_t dim = static_cast<uint64_t>(t.shape[1]);
    f.header =
        std::max(NpyHeader("<u8", {UINT64_MAX}).size(), NpyHeader("<f4", {UINT64_MAX, dim}).size());
    const std::string ids = NpyHeader("<u8", {UINT64_MAX}, f.header),
                      values = NpyHeader("<f4", {UINT64_MAX, dim}, f.header);
    EPS_RETURN_IF_ERROR(f.ids->Append(ids.data(), ids.size()));
    EPS_RETURN_IF_ERROR(f.values->Append(values.data(), values.size()));
    out.push_back(std::move(f));
  }
  return out;
}

void UpdateRow(Sha256* sha, uint64_t id, const float* values, size_t dim) {
  uint8_t bytes[8];
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<uint8_t>(id >> (8 * b));
  sha->Update(bytes, sizeof bytes);
  sha->Update(values, dim * sizeof(float));
}

}  // namespace

StatusOr<ChunkBytes> HeldModel::ChunkOf(const Chunk& c) {
  auto it = chunks_.find(c.id.value());
  if (it == chunks_.end()) {
    return DataLoss("chunk " + std::to_string(c.id.value()) + " of tensor '" +
                    layout_.tensors[c.tensor].name + "' is missing");
  }
  return it->second;
}

Status HeldModel::RowsOf(uint32_t table,
                         const std::function<Status(uint64_t id, const float* values)>& row) {
  if (table >= layout_.sparse.size()) return InvalidArgument("no such sparse table");
  auto it = tables_.find(layout_.sparse[table]);
  if (it == tables_.end()) return OkStatus();
  const size_t dim = static_cast<size_t>(layout_.tensors[layout_.sparse[table]].shape[1]);
  for (size_t k = 0; k < it->second.ids.size(); ++k)
    EPS_RETURN_IF_ERROR(row(it->second.ids[k], &it->second.values[k * dim]));
  return OkStatus();
}

StatusOr<ModelDigests> ExportModel(const Layout& layout, ModelPieces* pieces, const TableExport& e,
                                   const ExportFile* file) {
  std::optional<FileWriter> out;
  std::vector<TableFile> tables;
  size_t header = 0;                   // the safetensors header's bytes, its length included
  const std::string unknown(64, '0');  // the digest's place, until it is known
  if (file != nullptr) {
    EPS_ASSIGN_OR_RETURN(tables, OpenTableFiles(layout, e, file->path));
    EPS_ASSIGN_OR_RETURN(out, FileWriter::Create(file->path));
    const std::string widest = SafetensorsHeader(layout, e, *file, unknown, tables, false);
    header = widest.size();
    EPS_RETURN_IF_ERROR(out->Append(widest.data(), widest.size()));
  }
  std::map<uint32_t, TableFile*> table_file;  // by table index
  for (TableFile& f : tables) table_file[f.table] = &f;
  Sha256 params, buffers;
  EPS_RETURN_IF_ERROR(ForEachPiece(
      layout, pieces, e,
      [&](uint32_t t, const void* data, size_t size) -> Status {
        (layout.tensors[t].kind == TensorKind::kParameter ? params : buffers).Update(data, size);
        return out ? out->Append(data, size) : OkStatus();
      },
      [&](uint32_t t, uint32_t table, uint64_t id, const float* values) -> Status {
        const size_t dim = static_cast<size_t>(layout.tensors[t].shape[1]);
        UpdateRow(&params, id, values, dim);
        if (!out) return OkStatus();
        TableFile& f = *table_file.at(table);
        ++f.stored;
        EPS_RETURN_IF_ERROR(f.ids->Append(&id, sizeof id));
        return f.values->Append(values, dim * sizeof(float));
      }));
  const ModelDigests digests{params.HexDigest(), buffers.HexDigest()};
  if (!out) return digests;
  // The headers as they are, in the room their widest form took.
  for (TableFile& f : tables) {
    const std::string ids = NpyHeader("<u8", {f.stored}, f.header),
                      values = NpyHeader("<f4", {f.stored, static_cast<uint64_t>(f.spec->shape[1])},
                                         f.header);
    if (ids.size() != f.header || values.size() != f.header)
      return Internal("a table file's header outgrew its room");
    EPS_RETURN_IF_ERROR(f.ids->WriteAt(0, ids.data(), ids.size()));
    EPS_RETURN_IF_ERROR(f.values->WriteAt(0, values.data(), values.size()));
    EPS_RETURN_IF_ERROR(f.ids->Commit());
    EPS_RETURN_IF_ERROR(f.values->Commit());
  }
  const std::string head =
      SafetensorsHeader(layout, e, *file, digests.params_sha256, tables, true, header - 8);
  if (head.size() != header) return Internal("the safetensors header outgrew its room");
  EPS_RETURN_IF_ERROR(out->WriteAt(0, head.data(), head.size()));
  EPS_RETURN_IF_ERROR(out->Commit());
  return digests;
}

StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks,
                                   const ModelTables& tables, const TableExport& e) {
  HeldModel held(layout, chunks, tables);
  return ExportModel(layout, &held, e);
}

std::map<std::string, std::string> ExportMetadata(const JobSpec& spec) {
  std::map<std::string, std::string> m = ZooSizesMetadata(ZooSizesOf(spec));
  m["cpu_kernels"] = spec.cpu_kernels;
  if (!spec.model_sha256.empty()) m["model_sha256"] = spec.model_sha256;  // a TorchScript job's
  return m;
}

std::map<std::string, std::string> ExportMetadataOf(const std::string& model) {
  const std::filesystem::path p(model);
  const std::filesystem::path file =
      p.extension() == ".safetensors" ? p : p.parent_path() / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  unsigned char size[8];
  if (!in.read(reinterpret_cast<char*>(size), sizeof(size))) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | size[i];  // little-endian
  if (n > (uint64_t{1} << 20)) return {};               // not a header an export writes
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return {};
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object()) return {};
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j["__metadata__"].items())
    if (value.is_string()) out[key] = value.get<std::string>();
  return out;
}

std::optional<std::string> ExportMetadataValue(const std::string& model, const std::string& key) {
  std::map<std::string, std::string> meta = ExportMetadataOf(model);
  auto it = meta.find(key);
  if (it == meta.end()) return std::nullopt;
  return std::move(it->second);
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
  HeldModel held(layout, chunks, tables);
  EPS_RETURN_IF_ERROR(ForEachPiece(
      layout, &held, e,
      [&](uint32_t t, const void* data, size_t size) {
        out[static_cast<size_t>(index[t])].bytes.append(static_cast<const char*>(data), size);
        return OkStatus();
      },
      [](uint32_t, uint32_t, uint64_t, const float*) { return OkStatus(); }));
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
