#include "serve/checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/child_process.h"

namespace eps {

int64_t DurableStepWatch::Poll() {
  std::ifstream in(path_, std::ios::binary);
  if (in) {
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    if (size > offset_) {
      std::string text(size - offset_, '\0');
      in.seekg(static_cast<std::streamoff>(offset_));
      in.read(text.data(), static_cast<std::streamsize>(text.size()));
      const size_t end = text.rfind('\n');
      if (end != std::string::npos) {
        offset_ += end + 1;
        size_t at = 0;
        while (at <= end) {
          const size_t nl = text.find('\n', at);
          const std::string_view line(text.data() + at, nl - at);
          at = nl + 1;
          const bool durable = line.find("\"checkpoint_durable\"") != std::string_view::npos;
          if (!durable && line.find("\"shard_registered\"") == std::string_view::npos) continue;
          const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_object() || !j.contains("shard") || !j["shard"].is_number_integer()) continue;
          const int64_t shard = j["shard"].get<int64_t>();
          shards_.insert(shard);
          if (durable && j.contains("step") && j["step"].is_number_integer())
            newest_[shard] = std::max(newest_[shard], j["step"].get<int64_t>());
        }
      }
    }
  }
  if (shards_.empty()) return -1;
  int64_t step = -1;
  for (int64_t shard : shards_) {
    auto it = newest_.find(shard);
    if (it == newest_.end()) return -1;
    step = step < 0 ? it->second : std::min(step, it->second);
  }
  return step;
}

StatusOr<std::string> ExportCheckpoint(const CheckpointExportOptions& options, int64_t step) {
  const std::filesystem::path dir(options.out_dir);
  const std::string safetensors = (dir / "model.safetensors").string();
  const std::string script = (dir / "model.script.pt").string();
  std::error_code ec;
  std::filesystem::remove(script, ec);  // what a built-in job's export does not write
  std::vector<Child> child(1);
  EPS_ASSIGN_OR_RETURN(child[0], Spawn({options.export_model, "--stores=" + options.stores,
                                        "--step=" + std::to_string(step), "--out=" + safetensors,
                                        "--script_out=" + script},
                                       "export_model", (dir / "export.log").string()));
  if (Reap(&child, std::chrono::steady_clock::now() + options.timeout) != 0) {
    return Unavailable("export_model could not export checkpoint " + std::to_string(step) + " of " +
                       options.stores + " (" + (dir / "export.log").string() + ")");
  }
  return std::filesystem::exists(script, ec) ? script : safetensors;
}

}  // namespace eps
