// --follow: watches a live job's export file (RUN_DIR/model.script.pt or
// model.safetensors, which the coordinator, local.sh and `elasticps export`
// write atomically: a rename) and hands every new version, loaded in full, to
// the server (InferenceServer::Swap), which swaps it in between batches.
//
// Every `interval` the follower stats the file; when its inode, size or
// modification time changed it hashes the bytes and, when they differ from
// the served model's, loads them on its own thread (the serving one never
// waits for a load). A file that does not load (a torn copy, another model)
// is logged and counted, the old model serves on, and it is tried again once
// the file changes again. Start and the destructor are thread-compatible;
// the follower's thread is the only caller of `load` and `serve`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "serve/served_model.h"

namespace eps {

struct ModelFollowerOptions {
  std::string path;                          // the export file to watch
  std::chrono::milliseconds interval{1000};  // how often it is looked at (> 0)
};

using ModelLoader =
    std::function<StatusOr<std::shared_ptr<const LoadedModel>>(const std::string& path)>;
using ModelSink = std::function<Status(std::shared_ptr<const LoadedModel>)>;

class ModelFollower {
 public:
  // Starts the thread. `served_sha256`: the bytes served now (not loaded
  // again). `metrics` (may be null) counts loads and failures.
  [[nodiscard]] static StatusOr<std::unique_ptr<ModelFollower>> Start(
      const ModelFollowerOptions& options, const std::string& served_sha256, ModelLoader load,
      ModelSink serve, Metrics* metrics);
  virtual ~ModelFollower() = default;  // stops the thread (a load under way finishes first)

  // Models handed to `serve` so far, and loads that failed.
  virtual int64_t swaps() const = 0;
  virtual int64_t failures() const = 0;
};

}  // namespace eps
