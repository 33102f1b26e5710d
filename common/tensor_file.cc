#include "common/tensor_file.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace eps {
namespace {

// What the safetensors format allows a header (100 MB).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// The first 8 bytes of `blob` (at least 8), little-endian.
uint64_t HeaderLength(const std::string& blob) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(blob[i]);
  return n;
}

}  // namespace

bool LooksLikeSafetensors(const std::string& bytes) {
  if (bytes.size() < 9) return false;
  const uint64_t n = HeaderLength(bytes);
  return n >= 2 && n <= bytes.size() - 8 && bytes[8] == '{';
}

StatusOr<std::vector<ExportedTensor>> ParseSafetensors(
    const std::string& blob, const std::string& path,
    std::map<std::string, std::string>* metadata) {
  if (blob.size() < 8) return DataLoss(path + ": shorter than a safetensors header");
  const uint64_t n = HeaderLength(blob);
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

}  // namespace eps
