// The C++ value types of every protocol message (schema/elasticps.capnp). Code
// outside schema/ sees only these; codec.h turns them into frames and back.
// Plain value types, thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/cpu_kernels.h"
#include "common/ids.h"
#include "common/layout.h"
#include "common/shm.h"
#include "common/status.h"
#include "common/tree.h"
#include "common/wire.h"

namespace eps {

// Bytes of one tensor chunk. On receive `data` points into a ZeroMQ frame that
// `owner` keeps alive; on send the caller keeps the bytes alive through `owner`
// until the channel has handed them to ZeroMQ (which may hold them longer).
struct ChunkBytes {
  ChunkId chunk;
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

// ---- The job spec's fields: one list each -----------------------------------
//
// Every field of OptimizerSpec and JobSpec is one row of the list below, and
// everything that must name every field is generated from it: the struct
// members (with their defaults), operator==, SameComputation, the codec's
// encoder and decoder (schema/codec.cc) and the coordinator's flag-to-spec
// conversion (elastic/coordinator_main.cc). Each of those `#define`s a macro
// X(type, name, default, Capnp, flag, role) that turns one row into code, and
// expands the list with it; e.g. the members below come from
//   #define EPS_SPEC_MEMBER(type, name, default_value, ...) type name = default_value;
//
// Adding a field is one row here plus, where the compiler then asks for them,
// the field in schema/elasticps.capnp (at the end, the next number) and the
// coordinator's DEFINE_ of its flag. The columns:
//   type     the C++ type. Numbers and bools have exactly the type of the capnp
//            field (the decoder does not compile otherwise); std::string is
//            Text; WireDType is UInt8; a struct is a capnp struct.
//   name     the C++ member.
//   default  its value in a default-constructed spec (not the flag's default).
//   Capnp    the capnp field's name with a capital first letter, as in its
//            generated accessors: jobId -> setJobId / getJobId.
//   flag     the eps_coordinator flag that sets it, without "--" (FLAGS_flag).
//   role     kComputation: fixes what a worker computes, so SameComputation
//            compares it (a worker that registers again must get the same
//            ones, or the model and data it holds are wrong); kJob: any other
//            part of the job (how long it runs, the shards' optimizer, ...).
// Comments inside the list are /* */: a // comment would swallow the line's
// trailing backslash and the row after it.
enum class SpecFieldRole { kComputation, kJob };

// The tables are wider than 100 columns, to keep one row a line: clang-format off.
// clang-format off
#define EPS_OPTIMIZER_SPEC_FIELDS(X)                                                   \
  /* type         name          default     Capnp        flag          role */         \
  /* kind: sgd, adam, adamw or adagrad; schedule: constant, step or cosine */         \
  X(std::string, kind,         "sgd",      Kind,        optimizer,    kJob)            \
  X(double,      lr,           0.01,       Lr,          lr,           kJob)            \
  X(double,      momentum,     0,          Momentum,    momentum,     kJob)            \
  X(double,      dampening,    0,          Dampening,   dampening,    kJob)            \
  X(bool,        nesterov,     false,      Nesterov,    nesterov,     kJob)            \
  X(double,      weight_decay, 0,          WeightDecay, weight_decay, kJob)            \
  X(double,      beta1,        0.9,        Beta1,       beta1,        kJob)            \
  X(double,      beta2,        0.999,      Beta2,       beta2,        kJob)            \
  X(double,      eps,          1e-8,       Eps,         eps,          kJob)            \
  X(std::string, schedule,     "constant", Schedule,    lr_schedule,  kJob)            \
  X(int64_t,     step_size,    0,          StepSize,    lr_step_size, kJob)            \
  X(double,      gamma,        0.1,        Gamma,       lr_gamma,     kJob)            \
  X(int64_t,     warmup_steps, 0,          WarmupSteps, warmup_steps, kJob)            \
  X(double,      min_lr,       0,          MinLr,       min_lr,       kJob)

// The optimizer row's flag, --optimizer, names its kind; the conversion of a
// struct field reads the struct's own list (EPS_OPTIMIZER_SPEC_FIELDS above).
#define EPS_JOB_SPEC_FIELDS(X)                                                                                  \
  /* type          name                 default           Capnp              flag                 role */       \
  X(std::string,   job_id,              "",               JobId,             job_id,              kComputation) \
  X(std::string,   model,               "",               Model,             model,               kComputation) \
  X(std::string,   data_dir,            "",               DataDir,           data_dir,            kComputation) \
  X(uint32_t,      virtual_workers,     0,                VirtualWorkers,    virtual_workers,     kComputation) \
  X(uint32_t,      batch_per_vw,        0,                BatchPerVw,        batch_per_vw,        kComputation) \
  X(uint64_t,      seed,                0,                Seed,              seed,                kComputation) \
  X(int64_t,       steps,               0,                Steps,             steps,               kJob)         \
  X(uint32_t,      threads,             1,                Threads,           threads,             kComputation) \
  X(OptimizerSpec, optimizer,           {},               Optimizer,         optimizer,           kJob)         \
  /* the first N training samples (0: all) */                                                                   \
  X(int64_t,       train_limit,         0,                TrainLimit,        train_limit,         kComputation) \
  /* the first N test samples (0: all, -1: no evaluation) */                                                    \
  X(int64_t,       test_limit,          0,                TestLimit,         test_limit,          kComputation) \
  X(int64_t,       chunk_elems,         1 << 20,          ChunkElems,        chunk_elems,         kComputation) \
  X(uint32_t,      num_shards,          1,                NumShards,         shards,              kComputation) \
  X(uint32_t,      eval_batch,          1000,             EvalBatch,         eval_batch,          kJob)         \
  /* accept workers whose device kind differs from the first worker's; their gradients, */                      \
  /* and so the job's bits, then depend on placement */                                                         \
  X(bool,          allow_mixed_devices, false,            AllowMixedDevices, allow_mixed_devices, kJob)         \
  /* how gradients (and the loss) are pushed and parameters pulled (common/wire.h) */                           \
  X(WireDType,     grad_wire_dtype,     WireDType::kFP32, GradWireDtype,     grad_wire_dtype,     kComputation) \
  X(WireDType,     weight_wire_dtype,   WireDType::kFP32, WeightWireDtype,   weight_wire_dtype,   kComputation) \
  /* a TorchScript model file's SHA-256 (the coordinator fills it in; a flag pins it) */                        \
  X(std::string,   model_sha256,        "",               ModelSha256,       model_sha256,        kComputation) \
  /* the data files (empty train_data: Fashion-MNIST IDX files in data_dir) */                                  \
  X(std::string,   train_data,          "",               TrainData,         train_data,          kComputation) \
  X(std::string,   train_labels,        "",               TrainLabels,       train_labels,        kComputation) \
  X(std::string,   test_data,           "",               TestData,          test_data,           kComputation) \
  X(std::string,   test_labels,         "",               TestLabels,        test_labels,         kComputation) \
  X(std::string,   data_format,         "",               DataFormat,        data_format,         kComputation) \
  X(std::string,   label_column,        "label",          LabelColumn,       label_column,        kComputation) \
  /* transfer learning: start from an exported model (docs/models.md) */                                        \
  X(std::string,   init_sha256,         "",               InitSha256,        init_sha256,         kComputation) \
  X(std::string,   reinit,              "",               Reinit,            reinit,              kComputation) \
  X(std::string,   freeze,              "",               Freeze,            freeze,              kComputation) \
  X(bool,          init_allow_mismatch, false,            InitAllowMismatch, init_allow_mismatch, kComputation) \
  /* text data and the zoo's sizes */                                                                           \
  X(std::string,   text_column,         "text",           TextColumn,        text_column,         kComputation) \
  X(uint32_t,      seq_len,             128,              SeqLen,            seq_len,             kComputation) \
  X(uint32_t,      vocab_size,          8000,             VocabSize,         vocab_size,          kComputation) \
  /* text models: words (and text_hashed's bigrams) hashed into so many rows; criteo: its categories' rows */ \
  X(uint32_t,      hash_buckets,        0,                HashBuckets,       hash_buckets,        kComputation) \
  X(uint32_t,      model_dim,           64,               ModelDim,          model_dim,           kComputation) \
  X(uint32_t,      model_layers,        2,                ModelLayers,       model_layers,        kComputation) \
  X(uint32_t,      model_heads,         4,                ModelHeads,        model_heads,         kComputation) \
  X(uint32_t,      model_depth,         20,               ModelDepth,        model_depth,         kComputation) \
  /* the CPU math kernels every CPU worker runs (common/cpu_kernels.h): x86-64-v3 or another set, or native */ \
  X(std::string,   cpu_kernels,         kDefaultCpuKernels, CpuKernels,      cpu_kernels,         kComputation) \
  /* sparse=True tables (docs/design.md, "Sparse tables"): lazy (row-wise) or exact (as dense tensors) */      \
  X(std::string,   sparse_optimizer,    "lazy",           SparseOptimizer,   sparse_optimizer,    kComputation) \
  /* each shard's memory for its sparse tables' rows, beyond which they spill to its store (0: 256 MiB) */   \
  X(uint64_t,      shard_memory_mb,     0,                ShardMemoryMb,     shard_memory_mb,     kJob)         \
  /* a worker looks a sparse table of more MiB up by its batches' rows instead of holding it (0: 1024) */  \
  X(uint64_t,      worker_table_mb,     0,                WorkerTableMb,     worker_table_mb,     kJob)
// clang-format on

#define EPS_SPEC_MEMBER(type, name, default_value, Capnp, flag, role) type name = default_value;
#define EPS_SPEC_EQUAL(type, name, default_value, Capnp, flag, role) &&a.name == b.name
#define EPS_SPEC_SAME_COMPUTATION(type, name, default_value, Capnp, flag, role) \
  &&(SpecFieldRole::role != SpecFieldRole::kComputation || a.name == b.name)

// How the shards update the parameters.
struct OptimizerSpec {
  EPS_OPTIMIZER_SPEC_FIELDS(EPS_SPEC_MEMBER)

  friend bool operator==(const OptimizerSpec& a, const OptimizerSpec& b) {
    return true EPS_OPTIMIZER_SPEC_FIELDS(EPS_SPEC_EQUAL);
  }
};

// Everything a process needs to know about a job; owned by the coordinator.
struct JobSpec {
  EPS_JOB_SPEC_FIELDS(EPS_SPEC_MEMBER)

  friend bool operator==(const JobSpec& a, const JobSpec& b) {
    return true EPS_JOB_SPEC_FIELDS(EPS_SPEC_EQUAL);
  }
};

// Whether the fields that fix what a worker computes (role kComputation) are
// equal: a worker that registers again may carry on with the model and the
// data it holds only if they are.
inline bool SameComputation(const JobSpec& a, const JobSpec& b) {
  return true EPS_JOB_SPEC_FIELDS(EPS_SPEC_SAME_COMPUTATION);
}

#undef EPS_SPEC_MEMBER
#undef EPS_SPEC_EQUAL
#undef EPS_SPEC_SAME_COMPUTATION

struct ErrorReply {
  StatusCode code = StatusCode::kInternal;
  std::string message;
  Status ToStatus() const { return Status(code, message); }
};

struct RegisterWorker {
  std::string host;
  uint32_t pid = 0;
  // What the worker computes on: "cpu", or "cuda:<GPU name>" (DeviceKind in
  // models/model_runner.h). Bits are reproducible only across one kind.
  std::string device_kind = "cpu";
  std::string metrics_address{};  // "host:port" of its /metrics (empty: none)
  // The CPU kernels it runs (CpuKernelsReport in common/cpu_kernels.h): the
  // job's set's name when they are that set's, else what runs instead.
  std::string cpu_kernels{};
};

// The largest model file a job takes (models/model_file.h): a TorchScript file
// or an --init_from file of 1 B float32 parameters and some room. Its bytes
// travel in FetchModel chunks, never in one message.
inline constexpr uint64_t kMaxModelBytes = uint64_t{5} << 30;

struct RegisterWorkerReply {
  WorkerId worker;
  JobSpec spec;
  std::vector<std::string> shard_addresses;  // index = shard id
  std::string model_bytes{};  // the TorchScript model file (spec.model_sha256); empty: built-in
  std::string init_bytes{};   // the --init_from model file (spec.init_sha256); empty: none
  std::string vocab{};        // text models: the vocabulary built from the training split
  // The files' sizes: the worker fetches them by spec.model_sha256 and
  // spec.init_sha256 with FetchModel, `fetch_chunk_bytes` at most each, when
  // model_bytes / init_bytes are empty (0: no such file).
  uint64_t model_size = 0;
  uint64_t init_size = 0;
  uint64_t fetch_chunk_bytes = 0;
  // Who holds what; none: InitialShardMap of spec.num_shards shards. With a
  // map, shard_addresses has map->IdBound() entries, "" for an id not in it.
  std::optional<ShardMap> map{};
};

struct RegisterShard {
  ShardId shard;
  std::string address;
  Step durable_step{
      -1};           // newest checkpoint in the shard's store, which it has restored (-1: none)
  Step version{-1};  // the version it serves now (-1: before its initial values)
  std::string metrics_address{};  // "host:port" of its /metrics (empty: none)
};

struct ShardConfig {
  JobSpec spec;
  std::vector<TensorSpec> tensors;  // empty until the first worker reported its model
  uint64_t timeline = 0;            // the job's timeline now (StepPlan::timeline)
  // Who holds what; none: InitialShardMap of spec.num_shards shards.
  std::optional<ShardMap> map{};
};

struct StepRequest {
  WorkerId worker;
  Step done_step{-1};
  std::vector<TensorSpec> tensors;  // the worker's model (first request only)
  int64_t train_samples = 0;        // data set sizes it loaded (first request only)
  int64_t test_samples = 0;
  bool abandoned = false;     // the previous plan was given up: its work is not done
  double seconds_per_vw = 0;  // measured compute time per VW in the previous train plan (0: none)
  std::string data_fingerprint{};  // what identifies the data files it loaded (first request only)
};

enum class PlanKind : uint8_t { kWait = 0, kInit = 1, kTrain = 2, kEval = 3, kStop = 4 };

struct StepPlan {
  PlanKind kind = PlanKind::kWait;
  Step step{0};
  Epoch epoch{0};
  uint32_t vw_lo = 0, vw_hi = 0;     // train: VWs [vw_lo, vw_hi)
  int64_t eval_lo = 0, eval_hi = 0;  // eval: test samples [eval_lo, eval_hi) at version `step`
  // The job's timeline: 1, plus one per rollback (docs/design.md, "Timelines").
  // The plan's pulls carry it; a shard on a later one refuses them at once.
  uint64_t timeline = 0;

  friend bool operator==(const StepPlan& a, const StepPlan& b) {
    return a.kind == b.kind && a.step == b.step && a.epoch == b.epoch && a.vw_lo == b.vw_lo &&
           a.vw_hi == b.vw_hi && a.eval_lo == b.eval_lo && a.eval_hi == b.eval_hi &&
           a.timeline == b.timeline;
  }
};

struct StepDone {
  ShardId shard;
  Step step{-1};  // the shard now serves version step+1
  bool has_loss = false;
  float loss = 0;                // mean VW loss of the step
  Step durable_step{-1};         // newest checkpoint written durably (-1: none)
  std::string checkpoint_error;  // why the newest checkpoint attempt failed (empty: it did not)
  double lr = 0;                 // the learning rate the step applied
  uint64_t bytes_in = 0;         // gradient bytes pushed to the shard so far (this process)
  uint64_t bytes_out = 0;        // parameter bytes pulled from it so far (this process)
  double checkpoint_blocking_ms = 0;  // the durable_step checkpoint: the loop's stop to snapshot it
  double checkpoint_write_ms = 0;     // and its background write (0: unknown)
};

// A chunk's bytes in a shared-memory region: of a push, or of a pull reply
// (written into the region the pull named).
struct ShmChunk {
  ChunkId chunk;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Rows of a sparse table in a message (common/sparse_tree.h SparseRows): `rows`
// ids, strictly ascending, as uint64 in `ids`, and rows x dim float32 values in
// `values`. Byte ownership as ChunkBytes'.
struct SparseRowBytes {
  uint32_t table = 0;  // index among the layout's sparse tensors (Layout::sparse)
  uint32_t rows = 0;
  ChunkBytes ids, values;  // `chunk` unused
  // The bytes lie in a shared-memory region (schema/shm_rows.h) at these offsets instead of in
  // the message: a received message's `data` are null until the receiver points them into its
  // mapping of the region (the sizes are set).
  bool in_shm = false;
  uint64_t ids_offset = 0, values_offset = 0;
};

// A pull's request for a sparse table's rows at the pull's version: those
// changed by the steps after version `since` (0: every row a step has changed;
// -1: every stored row, the ones --init_from seeded at version 0 too).
struct SparseRead {
  uint32_t table = 0;
  Step since{0};
  // A page of the rows changed since `since` (an export's final pull of every
  // stored row): those from row `from_row` on, at most `max_rows` (0: all). A
  // reply of fewer than `max_rows` rows is the last page.
  uint64_t from_row = 0;
  uint32_t max_rows = 0;
  // Looked up by rows (a worker that does not hold the table): `rows` ids,
  // strictly ascending, as uint64 in `ids`, instead of those changed since.
  // Without `lookup`, `rows` ids name the rows the reader's next plan touches
  // (warm rows: the shard brings them into memory, ShardState::WarmSparse);
  // the answer is the rows changed since, all the same.
  bool lookup = false;
  uint32_t rows = 0;
  ChunkBytes ids{};  // `chunk` unused
};

struct Push {
  Epoch epoch{0};
  Step step{0};  // -1: initial values, stored as version 0
  Block block;
  std::vector<ChunkBytes> chunks;  // bytes in the message
  // A region of the worker's on this host (common/shm.h) holding the bytes of
  // `shm_chunks`; the worker writes it again only after the shard's reply.
  std::optional<ShmRegionRef> shm{};
  std::vector<ShmChunk> shm_chunks{};
  // The block's rows of each sparse table this shard holds rows of: every
  // table, with no row where the block touched none of the shard's.
  std::vector<SparseRowBytes> sparse{};
};

struct PushReply {
  Step step{0};
  uint32_t accepted = 0;
  uint32_t duplicates = 0;
};

struct Pull {
  Step version{0};
  std::vector<ChunkId> chunks;  // empty: all chunks of the shard
  WireDType dtype =
      WireDType::kFP32;  // of the parameter chunks in the reply: fp32 or the job's weight dtype
  // A region of the worker's on this host for the reply's bytes (common/shm.h),
  // and where each of `chunks` goes in it; the shard may answer inline instead.
  std::optional<ShmRegionRef> shm{};
  std::vector<uint64_t> shm_offsets{};
  // Sparse tables' rows; a pull naming these names no chunk (and a region only for its rows:
  // shm_rows_at).
  std::vector<SparseRead> sparse{};
  // Also the digest of the shard's optimizer state (ShardState::OptimizerDigest),
  // of the current version only.
  bool optimizer_digest = false;
  // The timeline of the plan the pull serves (StepPlan::timeline); 0: a reader
  // outside any plan, which no timeline refuses.
  uint64_t timeline = 0;
  // A pull of sparse rows naming `shm` (no offsets): the reply's rows may go into the region from
  // this offset on (schema/shm_rows.h); 0 without.
  uint64_t shm_rows_at = 0;
};

struct PullReply {
  Step version{0};
  std::vector<ChunkBytes> chunks;      // bytes in the message
  std::vector<ShmChunk> shm_chunks{};  // bytes in the pull's region
  std::vector<SparseRowBytes> sparse{};  // the rows the pull's SparseReads asked for
  std::string optimizer_digest{};  // SetDigest::Bytes() when the pull asked for it, else empty
};

struct EvalResult {
  WorkerId worker;
  Step version{0};
  int64_t lo = 0, hi = 0;
  int64_t correct = 0;
  double loss_sum = 0;
};

struct Shutdown {
  std::string reason;
};

struct Heartbeat {
  WorkerId worker;
};

struct Leave {
  WorkerId worker;
  std::string reason;
  bool host_fault = false;  // it cannot run on its host (set-up failed): not the job's fault
};

// Coordinator -> shard: load the checkpoint of `step` and serve version `step`.
struct Rollback {
  Step step{-1};
  uint64_t timeline = 0;  // the timeline it starts
};

// Shard -> coordinator: the outcome of a Rollback (see elasticps.capnp).
struct RollbackDone {
  ShardId shard;
  Step step{-1};          // asked for
  Step version{-1};       // served now
  Step durable_step{-1};  // newest checkpoint held now
  StatusCode code = StatusCode::kOk;
  std::string message;
  Status ToStatus() const { return Status(code, message); }
};

// Coordinator -> shard: checkpoints from `from_step` on must be kept (see elasticps.capnp).
struct Retain {
  Step from_step{-1};
};

// The inter-job scheduler's messages (see elasticps.capnp).
struct PoolRequest {
  std::string host;  // "hostname:pid"
  std::string device_kind = "cpu";
  std::string job;    // empty: none
  std::string ended;  // a job this worker saw end (empty: none)
};

struct PoolAssign {
  std::string job;  // empty: idle
  std::string coordinator;
  std::string token;
  std::string server_key;  // the job's servers' CURVE public key (Z85); empty: no CURVE
};

struct JobInfo {};

struct WorkerSpeed {
  std::string host;
  std::string device_kind;
  double seconds_per_vw = 0;  // 0: not measured yet
};

struct JobInfoReply {
  std::string job_id;
  uint32_t virtual_workers = 0;
  uint32_t batch_per_vw = 0;
  uint32_t min_workers = 1;
  uint32_t max_vws_per_worker = 0;
  int64_t steps = 0;
  int64_t step = 0;
  std::vector<WorkerSpeed> workers;
};

// Anyone with the job's token -> coordinator: how the job is doing (read-only).
struct JobStatusRequest {
  uint32_t recent_events = 20;  // how many of the newest events to include
};

struct WorkerStatus {
  WorkerId worker;
  std::string host;
  uint32_t pid = 0;
  std::string device_kind;
  std::string state;  // "registered", "ready", "left" or "dead"
  uint32_t vw_lo = 0, vw_hi = 0;  // VWs in the current assignment (empty: none)
  double seconds_per_vw = 0;      // the coordinator's estimate (0: not measured)
  double since_heartbeat_s = 0;   // since the coordinator last heard from it
  int64_t steps_contributed = 0;  // steps in which its ranges were confirmed
  std::string metrics_address;
  std::string cpu_kernels{};  // as it reported them (RegisterWorker)
};

struct ShardStatus {
  ShardId shard;
  std::string address;
  bool registered = false;
  Step version{-1};               // the version it serves (steps it applied)
  Step durable_step{-1};          // newest checkpoint it holds durably (-1: none)
  double since_checkpoint_s = -1; // since the durable step last advanced (-1: never)
  uint64_t bytes_in = 0, bytes_out = 0;  // as its last StepDone reported
  std::string metrics_address;
  // "member" (in the shard map), "spare" (registered, holding nothing: the
  // next reshard takes it in) or "leaving" (removed: it hands its state over,
  // then exits).
  std::string role = "member";
};

struct JobStatusReply {
  std::string job_id;
  std::string model;
  std::string phase;  // "starting", "initializing", "training", "held", "resharding", "evaluating",
                      // "rolling back", "resuming", "finalizing", "stopping", "done"
  bool paused = false;
  int64_t step = 0;   // steps done
  int64_t steps = 0;  // the job's length (0: not known before the first worker's model)
  double epoch = 0;   // passes over the training data so far
  bool has_loss = false;
  float loss = 0;  // the newest step's mean training loss
  double lr = 0;   // the learning rate of the newest step
  double samples_per_s = 0;  // over the recent steps
  double eta_s = -1;         // to the end of training at that rate (-1: unknown)
  double elapsed_s = 0;      // since training started
  uint32_t virtual_workers = 0;
  uint32_t batch_per_vw = 0;
  Epoch assignment_epoch{0};
  bool evaluated = false;
  double test_accuracy = 0;  // of the newest evaluation
  std::vector<WorkerStatus> workers;
  std::vector<ShardStatus> shards;
  std::vector<std::string> events;  // the newest events, oldest first, as in events.jsonl
  // Messages the coordinator rejected since it started: undecodable, with a
  // wrong token, or of a kind it does not serve (common/rejections.h).
  uint64_t rejected_messages = 0;
  // An operator's hold (JobControl): no step >= hold_from starts (-1: no
  // hold). `phase` is "held" while it keeps the job waiting.
  int64_t hold_from = -1;
  // The CPU kernels of the job's CPU workers: its set's name, or with `native`
  // the first CPU worker's (empty: none registered yet).
  std::string cpu_kernels{};
  uint64_t map_generation = 0;  // the shard map's (0: the job's first map)
  bool resharding = false;      // a move of shard state is in progress
};

// Anyone with the job's token -> coordinator: hold the job, so that no step
// >= from_step starts (0: from the next step boundary), or release it (hold
// false): `elasticps hold [--from-step N]`, `elasticps release`. Answered with
// the JobStatusReply after the change.
struct JobControl {
  bool hold = false;
  int64_t from_step = 0;
  // Set: neither hold nor release, but remove this shard from the job (its
  // state moves to the others at the next step boundary, then it exits).
  std::optional<ShardId> remove_shard{};
};

// Worker -> coordinator: bytes [offset, offset + length) of the job's model
// file (or --init_from file) named by its SHA-256 (hex, lower case); length at
// most RegisterWorkerReply::fetch_chunk_bytes. Answered with a FetchModelReply
// or an ErrorReply (an unknown file, a range outside it, a length of 0 or over
// the limit).
struct FetchModel {
  std::string sha256;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Coordinator -> worker: the bytes FetchModel asked for, in a frame of their own.
struct FetchModelReply {
  std::string sha256;
  uint64_t offset = 0;
  uint64_t file_size = 0;  // the whole file's
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive (see ChunkBytes)
};

// ---- Moving chunks between shards (docs/design.md, "Elastic shards"; elasticps.capnp) ----

// Coordinator -> every shard of the current map and of `map`: stage your part
// of `map`, hold `step` durably, answer ReshardReady.
struct Reshard {
  ShardMap map;
  Step step{0};
  std::vector<std::string> addresses;  // index = shard id: every shard of both maps
};

// Shard -> coordinator: the answer to Reshard.
struct ReshardReady {
  ShardId shard;
  uint64_t generation = 0;
  StatusCode code = StatusCode::kOk;
  std::string message;
  uint64_t bytes_in = 0;  // the bytes of the chunks the move brought it
  // The answer to the ShardConfig that committed the move (not to Reshard): the shard
  // serves under the new map now. The coordinator plans the next step only once every
  // shard said so, as after a rollback.
  bool committed = false;
  Status ToStatus() const { return Status(code, message); }
};

// Shard -> shard: `chunks` at version `step`, for the move to map `generation`,
// and the stored rows of every sparse table in row `partitions`.
struct MoveRequest {
  uint64_t generation = 0;
  Step step{0};
  std::vector<ChunkId> chunks;
  std::vector<uint32_t> partitions{};
};

// One checkpoint blob in a MoveReply, in a frame of its own.
struct MoveBlob {
  std::string name;
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive (see ChunkBytes)
  uint32_t crc32 = 0;                 // zlib's CRC-32 of the bytes, as the sender computed it
};

struct MoveReply {
  uint64_t generation = 0;
  Step step{0};
  std::vector<MoveBlob> blobs;
};

using Body =
    std::variant<ErrorReply, RegisterWorker, RegisterWorkerReply, RegisterShard, ShardConfig,
                 StepRequest, StepPlan, StepDone, Push, PushReply, Pull, PullReply, EvalResult,
                 Shutdown, Heartbeat, Leave, Rollback, RollbackDone, Retain, PoolRequest,
                 PoolAssign, JobInfo, JobInfoReply, JobStatusRequest, JobStatusReply, JobControl,
                 FetchModel, FetchModelReply, Reshard, ReshardReady, MoveRequest, MoveReply>;

struct Envelope {
  std::string token;
  Body body;
};

// Name of the message kind held by `body`, for logs.
const char* BodyName(const Body& body);

}  // namespace eps
