// Where a worker's time goes, what moved through shared memory, and the
// worker's end-of-run report (JSON, for people and for the tests and the
// benchmark, which read it instead of the log).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transfer.h"
#include "models/model_runner.h"
#include "schema/messages.h"

namespace eps {

// Summed over a worker's train plans but its first (libtorch's one-time
// initialization, the first pull of the whole model): the means are a steady
// step's. Written by the main thread only.
struct StepTimes {
  using Duration = std::chrono::steady_clock::duration;
  Duration plan{0};     // waiting for the coordinator's next plan (the others, the shards' barrier)
  Duration pull{0};     // pulling w(t) into the model
  Duration compute{0};  // the VWs' forward and backward (and any --slowdown)
  Duration copies{0};   // sampling, taking gradients, waiting for the reducing thread to push
  Duration push_wait{0};        // waiting for the shards to acknowledge the pushes
  int64_t steps = 0;            // train plans run to the end
  int64_t timed = 0;            // of those, the ones whose times the durations sum (all but the first)
  int64_t ahead = 0;            // train plans run ahead of the coordinator's answer (among `steps`)
  int64_t dropped = 0;          // runs ahead the answer overruled
  int64_t abandoned = 0;        // plans given up (a shard refused or was down); redone by someone
  int64_t reregistrations = 0;  // times the coordinator forgot this worker and it joined again
};

// Tensor bytes through shared memory or in the message (ParameterClient).
struct TransferCounts {
  int64_t shm_replies = 0;     // pull replies whose bytes came through shared memory
  int64_t inline_replies = 0;  // pull replies whose bytes came in the message
  int64_t shm_pushes = 0;      // pushes that named bytes in shared memory
  int64_t inline_pushes = 0;   // pushes with all their bytes in the message
  int64_t prefetches_pulled_again = 0;  // prefetches that expired at a shard and were pulled again
  int64_t shm_push_refusals = 0;        // shards that refused a push from shared memory
  // Tensor bytes sent in pushes and received in pull replies, inline or in shared memory
  // (eps_worker_push_bytes_total, eps_worker_pull_bytes_total; not in the report).
  int64_t push_bytes = 0;
  int64_t pull_bytes = 0;
  // Lookup tables (docs/design.md, "Sparse tables"): rows pulled by id, and the pulls of
  // rows a prefetch had not asked for (its plan was not the one guessed).
  int64_t lookup_rows = 0;
  int64_t lookup_repulls = 0;
  // Sparse rows' bytes (ids and values) through shared memory and in the message.
  int64_t shm_row_bytes_pulled = 0;
  int64_t inline_row_bytes_pulled = 0;
  int64_t shm_row_bytes_pushed = 0;
  int64_t inline_row_bytes_pushed = 0;
};

// A model file the worker needed (worker/model_fetch.h) and where its bytes came from.
struct ModelFileReport {
  std::string what;  // "model" (the TorchScript file) or "init_from"
  std::string sha256;
  uint64_t size = 0;
  uint64_t fetched_bytes = 0;  // received from the coordinator (0: all from the cache)
  uint64_t chunks = 0;         // FetchModel replies received
  // "hit" (read from the host's cache), "miss" (fetched, then cached), "corrupt"
  // (the cached entry was damaged: removed, fetched again), "off" (no cache).
  std::string cache;
  double ms = 0;          // getting the bytes, from the cache or the coordinator
  std::string warning{};  // e.g. the cache could not be written (empty: none)
};

// A worker process's run, as written to its report file when Run() ends.
struct WorkerReport {
  std::string host;
  std::string device;                // as asked: "cpu", "cuda:0"
  std::string device_kind;           // as reported to the coordinator
  std::vector<WorkerId> worker_ids;  // every id it was registered under, in order
  std::string outcome;               // "done" (the job ended), "left" (a signal), "failed"
  Status error;                      // with "failed"
  StepTimes times;
  TransferCounts counts;
  std::vector<std::string> warnings{};  // e.g. the dry run's "nondeterministic module"
  InitReport init{};                    // what the model took from --init_from
  std::string cpu_kernels{};            // as reported to the coordinator (CpuKernelsReport)
  std::vector<ModelFileReport> model_files{};  // the model files it got, in order
  std::vector<std::string> sparse_tables{};    // the tensors it trains as sparse tables
  std::vector<std::string> lookup_tables{};    // those it looks up by rows (ModelRunner::Lookup)
  int64_t peak_rss_kb = 0;  // the process's peak resident memory (WriteReport fills it in)
  // What the kernel schedules it as (WriteReport fills them in): "other", "batch" or "idle"
  // (lend.sh --worker-idle), and its niceness.
  std::string scheduling{};
  int nice = 0;
};

// Fills the report's sparse_tables (TensorSpec::sparse) and lookup_tables, in order.
void NameSparseTables(const ModelRunner& model, WorkerReport* report);

// One line for the log: milliseconds per train plan, and the counts.
std::string Summary(const StepTimes& times, const TransferCounts& counts);

// The report as one JSON object; the fields are documented in docs/events.md.
std::string ReportJson(const WorkerReport& report);

// Writes ReportJson to `path` (through a temporary file, renamed: a reader
// never sees half a report), with the calling process's peak resident memory.
// Internal when it cannot.
[[nodiscard]] Status WriteReport(const std::string& path, const WorkerReport& report);

}  // namespace eps
