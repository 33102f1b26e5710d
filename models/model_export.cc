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

// Calls fn(tensor, bytes, size) for the pieces of every tensor but the loss, in
// layout order: a dense tensor's chunks, a sparse table whole.
template <class Fn>
Status ForEachPiece(const Layout& layout, const ModelChunks& chunks, const ModelTables& tables,
                    Fn fn) {
  size_t next = 0;  // chunks run through each tensor in order
  for (uint32_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorSpec& spec = layout.tensors[t];
    if (spec.sparse) {
      auto it = tables.find(t);
      if (it == tables.end() || it->second.size() != static_cast<size_t>(spec.numel()))
        return DataLoss("sparse table '" + spec.name + "' is missing or has the wrong size");
      fn(t, it->second.data(), it->second.size() * sizeof(float));
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

}  // namespace

Status AddTableRows(const Layout& layout, uint64_t seed, const std::vector<SparseRowBytes>& rows,
                    ModelTables* tables) {
  for (const SparseRowBytes& r : rows) {
    if (r.table >= layout.sparse.size()) return ProtocolError("rows of an unknown sparse table");
    const uint32_t i = layout.sparse[r.table];
    const TensorSpec& spec = layout.tensors[i];
    const uint64_t n = static_cast<uint64_t>(spec.shape[0]),
                   dim = static_cast<uint64_t>(spec.shape[1]);
    if (r.values.size != uint64_t{r.rows} * dim * sizeof(float))
      return ProtocolError("rows of sparse table '" + spec.name + "' of the wrong size");
    auto [it, fresh] = tables->try_emplace(i);
    std::vector<float>& table = it->second;
    if (fresh) {
      table.resize(n * dim);
      for (uint64_t row = 0; row < n; ++row)
        InitialRow(RowInitializer{}, seed, r.table, row, &table[row * dim], dim);
    }
    for (uint32_t k = 0; k < r.rows; ++k) {
      uint64_t id;
      std::memcpy(&id, static_cast<const uint8_t*>(r.ids.data) + k * sizeof id, sizeof id);
      if (id >= n)
        return ProtocolError("row " + std::to_string(id) + " beyond '" + spec.name + "'");
      std::memcpy(&table[id * dim], static_cast<const float*>(r.values.data) + k * dim,
                  dim * sizeof(float));
    }
  }
  return OkStatus();
}

StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks,
                                   const ModelTables& tables) {
  Sha256 params, buffers;
  EPS_RETURN_IF_ERROR(
      ForEachPiece(layout, chunks, tables, [&](uint32_t t, const void* data, size_t size) {
        (layout.tensors[t].kind == TensorKind::kParameter ? params : buffers).Update(data, size);
      }));
  return ModelDigests{params.HexDigest(), buffers.HexDigest()};
}

Status WriteSafetensors(const std::string& path, const Layout& layout, const ModelChunks& chunks,
                        const ModelTables& tables, const Step& step, const std::string& job_id,
                        const std::string& model, const ModelDigests& digests,
                        const std::map<std::string, std::string>& extra) {
  nlohmann::json header;
  header["__metadata__"] = extra;
  header["__metadata__"].update({{"job_id", job_id},
                                 {"model", model},
                                 {"steps", std::to_string(step.value())},
                                 {"params_sha256", digests.params_sha256}});
  uint64_t offset = 0;
  for (const TensorSpec& t : layout.tensors) {
    if (t.kind == TensorKind::kLoss) continue;
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
  EPS_RETURN_IF_ERROR(
      ForEachPiece(layout, chunks, tables, [&](uint32_t, const void* data, size_t size) {
        out.append(static_cast<const char*>(data), size);
      }));
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
                                                   const ModelTables& tables) {
  std::vector<ExportedTensor> out;
  std::vector<int> index(layout.tensors.size(), -1);
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    if (layout.tensors[t].kind == TensorKind::kLoss) continue;
    index[t] = static_cast<int>(out.size());
    out.push_back({layout.tensors[t], {}});
  }
  EPS_RETURN_IF_ERROR(
      ForEachPiece(layout, chunks, tables, [&](uint32_t t, const void* data, size_t size) {
        out[static_cast<size_t>(index[t])].bytes.append(static_cast<const char*>(data), size);
      }));
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
