#include "models/model_file.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "common/digest.h"
#include "common/tensor_file.h"

namespace eps {
namespace {

uint64_t Le(const std::string& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kCentralEntry = 0x02014b50;

// The names of a zip's entries, from its central directory (no decompression).
StatusOr<std::vector<std::string>> ZipEntryNames(const std::string& b, const std::string& what) {
  const Status not_zip =
      InvalidArgument(what +
                      " is not a zip archive, so not a TorchScript model (save one with "
                      "torch.jit.script(module).save(path))");
  if (b.size() < 22) return not_zip;
  // The end record is the last 22 bytes, unless a comment (< 64 KiB) follows it.
  size_t end = std::string::npos;
  const size_t lowest = b.size() >= 22 + 0xFFFF ? b.size() - 22 - 0xFFFF : 0;
  for (size_t at = b.size() - 22;; --at) {
    if (Le(b, at, 4) == kEndOfCentralDirectory) {
      end = at;
      break;
    }
    if (at == lowest) break;
  }
  if (end == std::string::npos) return not_zip;
  uint64_t count = Le(b, end + 10, 2), offset = Le(b, end + 16, 4);
  if ((count == 0xFFFF || offset == 0xFFFFFFFF) && end >= 20 &&
      Le(b, end - 20, 4) == kZip64Locator) {
    const uint64_t z = Le(b, end - 20 + 8, 8);
    if (z > b.size() || b.size() - z < 56 || Le(b, z, 4) != kZip64End)
      return InvalidArgument(what + ": a corrupt zip64 end record");
    count = Le(b, z + 32, 8);
    offset = Le(b, z + 48, 8);
  }
  std::vector<std::string> names;
  uint64_t at = offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (at > b.size() || b.size() - at < 46 || Le(b, at, 4) != kCentralEntry)
      return InvalidArgument(what + ": a corrupt zip central directory (entry " +
                             std::to_string(i) + ")");
    const uint64_t name_len = Le(b, at + 28, 2), extra = Le(b, at + 30, 2),
                   comment = Le(b, at + 32, 2);
    if (b.size() - at - 46 < name_len + extra + comment)
      return InvalidArgument(what + ": a corrupt zip central directory (entry " +
                             std::to_string(i) + ")");
    names.push_back(b.substr(at + 46, name_len));
    at += 46 + name_len + extra + comment;
  }
  return names;
}

// Whether a torch zip's entries hold "<dir>/data.pkl", and "<dir>/code/..."
// or "<dir>/constants.pkl" (a TorchScript module's).
std::pair<bool, bool> TorchArchiveParts(const std::vector<std::string>& names) {
  bool data = false, code = false;
  for (const std::string& n : names) {
    const size_t slash = n.find('/');
    if (slash == std::string::npos) continue;
    const std::string rest = n.substr(slash + 1);
    if (rest == "data.pkl") data = true;
    if (rest.rfind("code/", 0) == 0 || rest == "constants.pkl") code = true;
  }
  return {data, code};
}

}  // namespace

bool IsModelPath(const std::string& model) {
  return model.find('/') != std::string::npos || EndsWith(model, ".pt");
}

Status CheckTorchScriptArchive(const std::string& bytes, const std::string& what) {
  EPS_ASSIGN_OR_RETURN(std::vector<std::string> names, ZipEntryNames(bytes, what));
  const auto [data, code] = TorchArchiveParts(names);
  if (data && code) return OkStatus();
  if (data) {
    return InvalidArgument(what +
                           " is a torch.save archive (data.pkl without code/ or constants.pkl), "
                           "not a TorchScript model: save torch.jit.script(module) instead of "
                           "its state dict");
  }
  return InvalidArgument(what + " is a zip archive without data.pkl, not a TorchScript model");
}

namespace {

// Reads `path` (at most kMaxModelBytes), hashes it and checks it against
// `expected_sha256` (hex, either case; empty: any). `what` names the file,
// `pin` the flag that pins it.
StatusOr<ModelFile> ReadPinnedFile(const std::string& path, const std::string& what,
                                   const std::string& expected_sha256, const std::string& pin) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound(what + ": cannot open the file");
  const std::streamoff size = in.tellg();
  if (size < 0) return InvalidArgument(what + ": cannot read the file");
  if (static_cast<uint64_t>(size) > kMaxModelBytes) {
    return InvalidArgument(what + " holds " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(kMaxModelBytes >> 20) + " MiB a model file may have");
  }
  ModelFile file;
  file.bytes.resize(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(file.bytes.data(), size)) return InvalidArgument(what + ": cannot read the file");
  Sha256 sha;
  sha.Update(file.bytes.data(), file.bytes.size());
  file.sha256 = sha.HexDigest();
  std::string expected = expected_sha256;
  std::transform(expected.begin(), expected.end(), expected.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!expected.empty() && expected != file.sha256)
    return InvalidArgument(what + " has SHA-256 " + file.sha256 + ", but " + pin + " pins " + expected);
  return file;
}

}  // namespace

StatusOr<ModelFile> ReadModelFile(const std::string& path, const std::string& expected_sha256,
                                  const std::string& flag, const std::string& pin) {
  const std::string what = flag + " " + path;
  EPS_ASSIGN_OR_RETURN(ModelFile file, ReadPinnedFile(path, what, expected_sha256, pin));
  EPS_RETURN_IF_ERROR(CheckTorchScriptArchive(file.bytes, what));
  return file;
}

StatusOr<InitFileKind> CheckInitFile(const std::string& bytes, const std::string& what) {
  if (LooksLikeSafetensors(bytes)) {
    auto parsed = ParseSafetensors(bytes, what, nullptr);
    if (!parsed.ok()) return InvalidArgument(parsed.status().message());
    if (parsed->empty()) return InvalidArgument(what + " holds no tensor");
    return InitFileKind::kSafetensors;
  }
  auto names = ZipEntryNames(bytes, what);
  if (!names.ok()) {
    return InvalidArgument(what +
                           " is neither a safetensors file nor a zip archive (torch.save, "
                           "torch.jit.save): an exported model.safetensors, model.pt or "
                           "model.script.pt");
  }
  const auto [data, code] = TorchArchiveParts(*names);
  if (!data) return InvalidArgument(what + " is a zip archive without data.pkl: no torch file");
  return code ? InitFileKind::kTorchScript : InitFileKind::kStateDict;
}

StatusOr<ModelFile> ReadInitFile(const std::string& path, const std::string& expected_sha256) {
  const std::string what = "--init_from " + path;
  EPS_ASSIGN_OR_RETURN(ModelFile file, ReadPinnedFile(path, what, expected_sha256, "--init_sha256"));
  EPS_RETURN_IF_ERROR(CheckInitFile(file.bytes, what).status());
  return file;
}

}  // namespace eps
