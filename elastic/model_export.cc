#include "elastic/model_export.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/files.h"
#include "schema/codec.h"

namespace eps {

namespace {

// What the safetensors format allows a header (100 MB).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

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
                        const ModelDigests& digests) {
  nlohmann::json header;
  header["__metadata__"] = {{"job_id", job_id},
                            {"model", model},
                            {"steps", std::to_string(step.value())},
                            {"params_sha256", digests.params_sha256}};
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
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (blob.size() < 8) return DataLoss(path + ": shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(blob[i]);
  if (n > blob.size() - 8) {
    return DataLoss(path + ": its header length " + std::to_string(n) + " runs past the file (" +
                    std::to_string(blob.size()) + " bytes)");
  }
  if (n > kMaxSafetensorsHeader) {
    return DataLoss(path + ": its header length " + std::to_string(n) + " is over the " +
                    std::to_string(kMaxSafetensorsHeader) + " bytes safetensors allows");
  }
  const nlohmann::json header = nlohmann::json::parse(blob.substr(8, n), nullptr, false);
  if (!header.is_object()) return DataLoss(path + ": its header is not a JSON object");
  const std::string data = blob.substr(8 + n);
  std::vector<std::pair<uint64_t, ExportedTensor>> found;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return DataLoss(path + ": its __metadata__ is not a JSON object");
      for (const auto& [k, m] : v.items()) {
        if (!m.is_string())
          return DataLoss(path + ": __metadata__ '" + k + "' is not a string");
        if (metadata != nullptr) (*metadata)[k] = m.get<std::string>();
      }
      continue;
    }
    const auto dtype = v.find("dtype");
    const auto shape = v.find("shape");
    const auto offsets = v.find("data_offsets");
    if (!v.is_object() || dtype == v.end() || shape == v.end() || offsets == v.end() ||
        !dtype->is_string() || !shape->is_array() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return DataLoss(path + ": tensor '" + name +
                      "' lacks dtype, shape or data_offsets [begin, end]");
    }
    ExportedTensor t;
    t.spec.name = name;
    if (*dtype == "F32") {
      t.spec.dtype = DType::kFloat32;
    } else if (*dtype == "I64") {
      t.spec.dtype = DType::kInt64;
    } else {
      return DataLoss(path + ": tensor '" + name + "' has dtype " + dtype->dump() +
                      " (this reader takes F32 and I64)");
    }
    // Bounded so that numel * element size cannot overflow: every product
    // stays at most the file's size.
    uint64_t numel = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > blob.size() ||
          (numel *= d.get<uint64_t>()) > blob.size()) {
        return DataLoss(path + ": tensor '" + name + "': shape " + shape->dump() +
                        " is not a list of sizes that fit the file");
      }
      t.spec.shape.push_back(d.get<int64_t>());
    }
    const uint64_t begin = (*offsets)[0], end = (*offsets)[1];
    if (begin > end || end > data.size() || end - begin != numel * DTypeSize(t.spec.dtype)) {
      return DataLoss(path + ": tensor '" + name + "': data_offsets do not fit its shape");
    }
    // WriteSafetensors writes parameters before buffers; a buffer is int64 or
    // follows one, which the file does not say: the kind is left to the caller.
    t.spec.kind = TensorKind::kParameter;
    t.bytes = data.substr(begin, end - begin);
    found.emplace_back(begin, std::move(t));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ExportedTensor> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
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
