#include "models/exported_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/files.h"
#include "data/model_input.h"
#include "models/init_file.h"
#include "models/model_export.h"

namespace eps {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes the exported tensors into the runner's model, matched by name.
Status LoadWeights(const ExportedModelOptions& o, const std::vector<ExportedTensor>& tensors,
                   ModelRunner& runner) {
  std::map<std::string, const ExportedTensor*> by_name;
  for (const ExportedTensor& t : tensors) by_name[t.spec.name] = &t;
  const std::vector<TensorSpec>& own = runner.Tensors();
  if (own.size() != tensors.size()) {
    return InvalidArgument("--model " + o.path + " holds " + std::to_string(tensors.size()) +
                           " tensors, --arch " + o.arch + "'s model " + std::to_string(own.size()));
  }
  for (size_t i = 0; i < own.size(); ++i) {
    auto it = by_name.find(own[i].name);
    if (it == by_name.end())
      return InvalidArgument("--model " + o.path + " has no tensor '" + own[i].name + "'");
    const ExportedTensor& t = *it->second;
    if (t.spec.shape != own[i].shape || t.spec.dtype != own[i].dtype) {
      return InvalidArgument("--model " + o.path + ": tensor '" + own[i].name +
                             "' differs in shape or dtype from the model's");
    }
    EPS_RETURN_IF_ERROR(runner.Write(i, 0, t.bytes.data(), t.bytes.size()));
  }
  return OkStatus();
}

// A sized zoo model's sizes: its export's metadata's, the classes and the
// sample length of the job's vocabulary (text).
StatusOr<ZooSizes> SizesOf(const std::map<std::string, std::string>& meta, const Vocabulary* vocab,
                           const std::string& path) {
  auto sizes = ZooSizesFromMetadata(meta);
  if (!sizes.ok()) return InvalidArgument("--model " + path + ": " + sizes.status().message());
  if (vocab != nullptr) {
    sizes->num_classes = static_cast<uint32_t>(vocab->labels().size());
    sizes->seq_len = vocab->seq_len();
  }
  return sizes;
}

}  // namespace

StatusOr<std::unique_ptr<ModelRunner>> OpenExportedModel(const ExportedModelOptions& options) {
  const std::string& path = options.path;
  ModelOptions o;
  o.threads = options.threads;
  std::vector<ExportedTensor> tensors;
  EPS_ASSIGN_OR_RETURN(o.sizes, SizesOf({}, options.vocab, path));
  if (EndsWith(path, ".safetensors")) {
    std::map<std::string, std::string> meta;
    auto read = ReadSafetensors(path, &meta);
    if (!read.ok()) return InvalidArgument("--model: " + read.status().message());
    tensors = std::move(read).value();
    if (meta.count("table_files")) {
      return InvalidArgument("--model " + path +
                             ": a sparse table of the model is exported as a table file (larger "
                             "than one host loads whole); read it with elasticps.load_tables");
    }
    EPS_ASSIGN_OR_RETURN(o.sizes, SizesOf(meta, options.vocab, path));
    o.model = options.arch.empty() ? meta["model"] : options.arch;
    if (!IsBuiltinModel(o.model)) {
      return InvalidArgument(
          "--model " + path + ": its model '" + o.model +
          "' is no built-in one (a TorchScript job's: evaluate its model.script.pt), or name "
          "the built-in model with --arch");
    }
  } else {
    auto bytes = ReadFileToString(path);
    if (!bytes.ok()) return Status(bytes.status().code(), "--model " + bytes.status().message());
    if (options.arch.empty()) {
      o.script = std::move(bytes).value();
    } else {
      o.model = options.arch;
      EPS_ASSIGN_OR_RETURN(tensors, ParseStateDict(*bytes, "--model " + path));
    }
  }
  auto runner = ModelRunner::Create(o);
  if (!runner.ok()) {
    std::string hint;
    if (!o.script.empty() && ParseStateDict(o.script, "--model " + path).ok())
      hint = " (it is a state dict: name its built-in model with --arch)";
    const std::string flag = o.script.empty() ? "--arch " + o.model : "--model " + path;
    return Status(runner.status().code(), flag + ": " + runner.status().message() + hint);
  }
  if (o.script.empty()) {
    ExportedModelOptions named = options;
    named.arch = o.model;
    EPS_RETURN_IF_ERROR(LoadWeights(named, tensors, **runner));
  }
  return runner;
}

std::map<std::string, std::string> ExportMetadataOf(const std::string& path) {
  const std::filesystem::path p(path);
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

}  // namespace eps
