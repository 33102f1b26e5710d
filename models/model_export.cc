#include "models/model_export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/files.h"
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

}  // namespace

StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks) {
  Sha256 params, buffers;
  for (const Chunk& c : layout.chunks) {
    const TensorKind kind = layout.tensors[c.tensor].kind;
    if (kind == TensorKind::kLoss) continue;
    EPS_ASSIGN_OR_RETURN(const ChunkBytes* b, Find(layout, chunks, c));
    (kind == TensorKind::kParameter ? params : buffers).Update(b->data, b->size);
  }
  return ModelDigests{params.HexDigest(), buffers.HexDigest()};
}

Status WriteSafetensors(const std::string& path, const Layout& layout, const ModelChunks& chunks,
                        const Step& step, const std::string& job_id, const std::string& model,
                        const ModelDigests& digests,
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
  for (const Chunk& c : layout.chunks) {  // chunks run through each tensor in order
    if (layout.tensors[c.tensor].kind == TensorKind::kLoss) continue;
    EPS_ASSIGN_OR_RETURN(const ChunkBytes* b, Find(layout, chunks, c));
    out.append(static_cast<const char*>(b->data), b->size);
  }
  return WriteFileAtomically(path, out);
}

std::map<std::string, std::string> ExportMetadata(const JobSpec& spec) {
  std::map<std::string, std::string> m = ZooSizesMetadata(ZooSizesOf(spec));
  m["cpu_kernels"] = spec.cpu_kernels;
  return m;
}

std::string ExportCpuKernels(const std::string& model) {
  const std::filesystem::path p(model);
  const std::filesystem::path file =
      p.extension() == ".safetensors" ? p : p.parent_path() / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  unsigned char size[8];
  if (!in.read(reinterpret_cast<char*>(size), sizeof(size))) return kDefaultCpuKernels;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | size[i];  // little-endian
  if (n > (uint64_t{1} << 20)) return kDefaultCpuKernels;  // not a header this writes
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return kDefaultCpuKernels;
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object())
    return kDefaultCpuKernels;
  const nlohmann::json& m = j["__metadata__"];
  if (!m.contains("cpu_kernels") || !m["cpu_kernels"].is_string()) return kDefaultCpuKernels;
  return m["cpu_kernels"].get<std::string>();
}

StatusOr<std::vector<ExportedTensor>> ModelTensors(const Layout& layout,
                                                   const ModelChunks& chunks) {
  std::vector<ExportedTensor> out;
  std::vector<int> index(layout.tensors.size(), -1);
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    if (layout.tensors[t].kind == TensorKind::kLoss) continue;
    index[t] = static_cast<int>(out.size());
    out.push_back({layout.tensors[t], {}});
  }
  for (const Chunk& c : layout.chunks) {  // chunks run through each tensor in order
    if (index[c.tensor] < 0) continue;
    EPS_ASSIGN_OR_RETURN(const ChunkBytes* b, Find(layout, chunks, c));
    out[static_cast<size_t>(index[c.tensor])].bytes.append(static_cast<const char*>(b->data),
                                                           b->size);
  }
  return out;
}

StatusOr<std::vector<ExportedTensor>> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata) {
  EPS_ASSIGN_OR_RETURN(const std::string blob, ReadFileToString(path));
  return ParseSafetensors(blob, path, metadata);
}

std::string EncodeStoredJob(const JobSpec& spec, const std::vector<TensorSpec>& tensors) {
  auto frames = Encode(Envelope{"", ShardConfig{spec, tensors}});
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
