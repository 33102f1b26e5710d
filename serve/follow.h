// --follow: serves a live job's newest model. A ModelFollower asks its
// sources every `interval` whether there is something new to serve:
//
//   WatchFile         an export file (RUN_DIR/model.script.pt or model.safetensors,
//                     which the coordinator, local.sh and `elasticps export`
//                     write atomically: a rename), when its inode, size or
//                     modification time changed;
//   WatchCheckpoints  the newest checkpoint every shard of the job holds
//                     durably (serve/checkpoints.h), exported by export_model.
//
// A file a source names is hashed; when its bytes differ from the served
// model's, and it is not of an older step than the served one (the export's
// "steps" metadata), it is loaded in full on the follower's thread (the serving
// one never waits for a load) and handed to the server (InferenceServer::Swap),
// which swaps it in between batches. A file that does not load (a torn copy,
// another model) is logged and counted, the old model serves on, and it is
// tried again once its source has something new again. A loader that answers
// FailedPrecondition says the file is not one to serve (a TorchScript job's
// model.safetensors): skipped, not counted.
//
// Start and the destructor are thread-compatible; the follower's thread is the
// only caller of the sources, `load` and `serve`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "serve/checkpoints.h"
#include "serve/served_model.h"

namespace eps {

// Where new versions of the served model come from. Not thread-safe: the
// follower's thread calls it.
class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // A file to (maybe) serve when there is something new since the last
  // call; nothing otherwise.
  virtual std::optional<std::string> Poll() = 0;
};

std::unique_ptr<ModelSource> WatchFile(const std::string& path);
// `options.stores` is RUN_DIR/store; events are read from `events_path`.
std::unique_ptr<ModelSource> WatchCheckpoints(const std::string& events_path,
                                              const CheckpointExportOptions& options);

using ModelLoader =
    std::function<StatusOr<std::shared_ptr<const LoadedModel>>(const std::string& path)>;
using ModelSink = std::function<Status(std::shared_ptr<const LoadedModel>)>;

struct ModelFollowerOptions {
  std::chrono::milliseconds interval{1000};  // how often the sources are asked (> 0)
};

class ModelFollower {
 public:
  // Starts the thread. `served`: the model served now (not loaded again).
  // `metrics` (may be null) counts swaps and failures.
  [[nodiscard]] static StatusOr<std::unique_ptr<ModelFollower>> Start(
      const ModelFollowerOptions& options, std::shared_ptr<const LoadedModel> served,
      std::vector<std::unique_ptr<ModelSource>> sources, ModelLoader load, ModelSink serve,
      Metrics* metrics);
  virtual ~ModelFollower() = default;  // stops the thread (a load under way finishes first)

  // Models handed to `serve` so far, and versions that failed to load or serve.
  virtual int64_t swaps() const = 0;
  virtual int64_t failures() const = 0;
};

// The step an export's metadata names ("steps"), or -1.
int64_t StepOf(const LoadedModel& model);

}  // namespace eps
