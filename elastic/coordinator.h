// The coordinator: one per job. It holds the job spec, the shard map, the live
// workers and their VW ranges (an assignment epoch), and drives the step clock.
//
// Workers only need its address: they register, get the spec and the shard
// addresses, and then ask for a plan before each step (init, train a VW range,
// evaluate a slice of the test set, or stop). Shards register their address,
// get the spec and the layout, and report each completed step. At the end the
// coordinator has the test set evaluated, reads the final parameters from the
// shards, and writes <run_dir>/result.json.
//
// Along the way it writes <run_dir>/events.jsonl (docs/events.md),
// <run_dir>/metrics.csv (one row per step) and, when the processes serve
// Prometheus metrics, <run_dir>/prometheus_targets.json; anyone with the
// token may ask it for a JobStatusReply (`elasticps status`).
//
// The decisions (membership, assignment, recovery, the step clock) live in the
// pure JobState (job_state.h); this class is its I/O shell.
// Run() owns the socket and all state: one thread, no locks.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "common/metrics.h"
#include "common/status.h"
#include "elastic/planner.h"
#include "schema/curve.h"
#include "schema/messages.h"

namespace eps {

struct CoordinatorOptions {
  JobSpec spec;
  std::string bind = "tcp://127.0.0.1:0";
  std::string token;       // required from every peer when not empty
  // CURVE (docs/security.md): the key pair it serves with and connects to the shards with
  // (server_key: the shards'); off without a key. The context needs a ZapHandler.
  CurveOptions curve;
  // With curve: the allowed keys (as the ZapHandler's), re-read at most once a second; a
  // message from a key no longer among them is refused (revocation of open connections).
  std::string allowed_keys;
  // Limits of the bound socket (docs/security.md, "Bounded resources"): messages queued per
  // peer each way (0: unbounded). Its largest frame is an envelope's (DecodeLimits).
  int socket_hwm = 1000;
  // The largest message the coordinator sends, all frames together (--max_message_mb).
  // The model files go to the workers in FetchModel chunks of this less 64 KiB of
  // envelope room (ModelFileServer::kEnvelopeRoom); a registration reply over it
  // (a text job's vocabulary) fails Open. At least 128 KiB.
  int64_t max_message_bytes = int64_t{64} << 20;
  // The final pull's pages of chunks and rows (elastic/final_pull.h), at most a message.
  uint64_t final_pull_bytes = uint64_t{64} << 20;
  std::string run_dir;     // result.json goes here
  std::string store_path;  // RocksDB store of the job's state (empty: none). A coordinator
                           // restarted on it binds the same endpoint and resumes the job
  uint32_t workers = 1;    // start training once this many workers registered
  double epochs = 0;       // when spec.steps == 0: train this many passes over the data
  int64_t eval_every = 0;  // evaluate the test set every N steps (0: only at the end)
  std::chrono::milliseconds heartbeat_timeout{3000};  // a worker silent this long is dead
  std::chrono::milliseconds startup_timeout{120000};  // the shards must register by then
  std::chrono::milliseconds step_timeout{300000};  // while workers live, a step must finish by then
  std::chrono::milliseconds progress_every{1000};  // progress line period
  PlannerOptions planner;                          // VW counts by measured speed, or equal
  double replan_threshold = 0.25;                  // hysteresis of speed-driven re-planning
  int64_t replan_min_steps = 50;    // ... at most one per this many steps (0: no minimum)
  uint32_t replan_window = 10;      // ... unless a worker slowed for this many reports (0: never)
  int64_t probe_idle_after = 1000;  // re-measure a worker idle this many steps (0: never)
  // A bad host (JobStateOptions): back off a machine after this many host faults in a row
  // (0: never), for host_backoff at first, doubling, at most 15 min.
  uint32_t host_failures_before_backoff = 2;
  std::chrono::milliseconds host_backoff{60000};
  // Live workers the job takes from one machine, and in all (JobStateOptions; 0: no cap).
  uint32_t max_workers_per_machine = 64;
  uint32_t max_workers = 1024;
  // The job's data files' fingerprint (data/fingerprint.h; CheckJobData):
  // workers whose files differ are refused. Empty: the first worker's.
  std::string data_fingerprint;
  // The TorchScript file --model names (docs/models.md): Open reads it when
  // spec.model is a path (IsModelPath, models/model_file.h) and fills this and
  // spec.model_sha256; every registering worker fetches these bytes in chunks
  // (FetchModel; elastic/model_file_server.h). Null: a built-in model.
  std::shared_ptr<const std::string> model_bytes;
  // Text data (data/text.h): the serialized vocabulary of the training text
  // (CheckJobData builds it; a restarted coordinator takes its store's), sent
  // to every worker, kept in the store and written to run_dir/vocab.json.
  std::string vocab;
  // Text data: the samples of each split cut to --seq_len (CheckJobData), for result.json.
  int64_t truncated_train = 0, truncated_test = 0;
  // Transfer learning (docs/models.md): the exported model the job starts
  // from. Open reads `init_from` (ReadInitFile, models/model_file.h), pins it
  // in spec.init_sha256 and serves its bytes to every registering worker as
  // it serves the model's (null: none).
  std::string init_from;
  std::shared_ptr<const std::string> init_bytes;
  Metrics* metrics = nullptr;       // the coordinator's metrics go here (null: none)
  std::string metrics_address;      // where they are served ("host:port"), for the scrape targets
};

// Checks what can be checked before any process starts: sizes, counts, the data files.
Status ValidateJobSpec(const JobSpec& spec);

// What CheckJobData found.
struct CheckedJobData {
  std::string fingerprint;  // of every data file (data/fingerprint.h)
  // Text data: the serialized vocabulary, and the samples cut to --seq_len.
  std::string vocab;
  int64_t truncated_train = 0, truncated_test = 0;
};

// Reads the job's data files as a worker would (data/job_data.h) and gives
// their fingerprint: InvalidArgument/DataLoss for a malformed data set (or one
// a built-in model cannot train on), NotFound when this host cannot read them
// (then the first worker's fingerprint stands for the job's).
// Text data: builds the vocabulary of the training text first (data/job_data.h
// BuildJobVocabulary; `words_from`: --vocab_from's bytes) and reads the data
// with it.
StatusOr<CheckedJobData> CheckJobData(const JobSpec& spec, const std::string& words_from = "");

// The store key of the vocabulary (CoordinatorOptions::vocab).
inline constexpr const char* kVocabKey = "vocab";

class Coordinator {
 public:
  static StatusOr<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options,
                                                     zmq::context_t* context);
  virtual ~Coordinator() = default;
  virtual const std::string& endpoint() const = 0;
  // Runs the job to its end. OK when result.json was written.
  virtual Status Run(const volatile bool* stop) = 0;
};

}  // namespace eps
