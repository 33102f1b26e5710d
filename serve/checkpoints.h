// --follow on a live job: its newest durable checkpoint, exported for serving.
//
// A job run with shard stores (local.sh --checkpoint-every K) keeps its
// checkpoints there and reports each in RUN_DIR/events.jsonl
// (`checkpoint_durable`, one per shard and checkpoint; `shard_registered` names
// the shards: docs/events.md). DurableStepWatch reads the lines appended since
// its last look and gives the newest step every shard holds durably;
// ExportCheckpoint runs export_model (tools/export_main.cc: it reads the
// stores read-only, beside the live job) to write that step's model.safetensors
// and, for a TorchScript job, model.script.pt. Torch-free; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "common/status.h"

namespace eps {

class DurableStepWatch {
 public:
  explicit DurableStepWatch(std::string events_path) : path_(std::move(events_path)) {}

  // Reads the complete lines appended since the last call (a line still being
  // written waits for the next call) and returns the newest step that every
  // shard registered so far holds durably; -1 while there is none (or no file).
  int64_t Poll();

 private:
  const std::string path_;
  uint64_t offset_ = 0;                // bytes of the file read so far
  std::set<int64_t> shards_;           // shard_registered
  std::map<int64_t, int64_t> newest_;  // shard -> its newest durable step
};

struct CheckpointExportOptions {
  std::string export_model;  // the export_model binary
  std::string stores;        // RUN_DIR/store
  std::string out_dir;       // where model.safetensors (and model.script.pt) go
  std::chrono::seconds timeout{120};
};

// Exports checkpoint `step` into options.out_dir; returns the file to serve:
// out_dir/model.script.pt for a TorchScript job, else out_dir/model.safetensors.
// Unavailable when export_model fails or runs past the timeout (its log is
// out_dir/export.log).
[[nodiscard]] StatusOr<std::string> ExportCheckpoint(const CheckpointExportOptions& options,
                                                     int64_t step);

}  // namespace eps
