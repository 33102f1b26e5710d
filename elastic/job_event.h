// What the coordinator's state machine tells the world: one typed notice per
// thing that happened to the job (a worker joined, the job paused, an
// assignment epoch began, a step completed...). JobState (job_state.h) queues
// them without any I/O; the coordinator drains them, prints each for people
// (EventText) and appends each as one JSON object per line to
// <run_dir>/events.jsonl (EventJson). docs/events.md lists every kind, its
// fields and their units: it is the contract that tests and tools read, in
// place of the wording of log lines.
//
// Value types; the functions are pure and thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "elastic/planner.h"
#include "schema/messages.h"

namespace eps {

// VWs [lo, hi) of one worker (planner.h's VwRange with its owner).
struct WorkerRange {
  WorkerId worker;
  uint32_t lo = 0, hi = 0;
  bool operator==(const WorkerRange& o) const {
    return worker == o.worker && lo == o.lo && hi == o.hi;
  }
};

struct JobEvent {
  // ---- membership ----
  struct ShardRegistered {  // a shard registered; `restarted`: again, while the job ran
    ShardId shard;
    std::string address;
    Step durable_step;  // its newest checkpoint (-1: none)
    bool restarted = false;
  };
  struct WorkerJoined {  // a worker registered and got an id
    WorkerId worker;
    std::string host;
    uint32_t pid = 0;
    std::string device_kind;
  };
  struct WorkerReregistered {  // the same process repeated an unanswered registration
    WorkerId worker;
    std::string host;
  };
  struct WorkerRefused {  // it never becomes (or stops being) a member; its id is spent
    enum class Cause {
      kDeviceKind,     // its device kind is not the job's
      kHostBackedOff,  // its machine is backed off (HostBackedOff)
      kDataFingerprint,  // its data files differ from the job's (first step request)
      kTooManyWorkers,   // its machine, or the job, has the most live workers allowed
      kCpuKernels,       // its CPU kernels are not the job's (first step request)
    };
    WorkerId worker;
    std::string host;
    std::string device_kind;
    std::string error;
    Cause cause = Cause::kDeviceKind;
  };
  struct WorkerReady {  // it reported its model: it can be given VWs
    WorkerId worker;
  };
  struct WorkerLeft {  // it left gracefully
    WorkerId worker;
    std::string reason;
    std::vector<WorkerRange> moved;  // the unconfirmed ranges it held: recomputed by others
    bool host_fault = false;         // it could not set itself up on its host
  };
  struct HostBackedOff {  // a machine's workers failed there too often: refused for a while
    std::string host;     // the machine (MachineOf in job_state.h)
    uint32_t failures = 0;
    double backoff_s = 0;  // registrations from it are refused until `at` plus this
    std::string reason;    // the last failure's
  };
  struct WorkerDead {  // declared dead; it must register again to come back
    // kResharded: the shard map changed; it registers again to learn the new one.
    enum class Cause { kMissedHeartbeats, kShardMoved, kResharded };
    WorkerId worker;
    Cause cause = Cause::kMissedHeartbeats;
    int64_t silent_ms = 0;  // kMissedHeartbeats: since its last message
    ShardId shard;          // kShardMoved: the shard that came back at another address
    std::vector<WorkerRange> moved;
  };
  // ---- the model and the plan ----
  struct ModelAccepted {  // the first worker's model fixed the layout and the job's length
    int64_t parameters = 0;
    size_t chunks = 0;
    int64_t steps = 0;
    int64_t train_samples = 0, test_samples = 0;
  };
  struct Initializing {  // this worker pushes the initial values
    WorkerId worker;
  };
  struct Assignment {  // a new assignment epoch; step: the first step it plans
    Epoch epoch;
    std::vector<WorkerRange> ranges;  // every assigned worker in id order, empty ranges too
  };
  struct Replan {  // measured speeds moved VWs without a membership change
    std::vector<std::pair<WorkerId, std::optional<double>>> seconds_per_vw;  // nullopt: unknown
    std::string reason;
    ReplanTrigger trigger = ReplanTrigger::kDue;  // why now (ReplanGate, planner.h)
    std::optional<WorkerId> trigger_worker;       // kSustained, kMeasured: whose reports
    int64_t steps_since_assignment = 0;           // since the assignment it replaces
  };
  struct SpeedForgotten {  // a worker idle this long is measured again
    WorkerId worker;
    int64_t idle_steps = 0;
  };
  struct SpeedRefused {  // a worker's speed report was not plausible
    WorkerId worker;
    std::string error;
  };
  // ---- the step clock ----
  struct RangeRecomputed {  // an orphaned range of step `step` went to another worker
    WorkerId worker;
    uint32_t lo = 0, hi = 0;
  };
  struct RangeConfirmed {  // the worker's pushes of [lo, hi) of step `step` were acknowledged
    WorkerId worker;
    uint32_t lo = 0, hi = 0;
  };
  struct StepCompleted {  // every shard applied step `step`
    bool has_loss = false;
    float loss = 0;   // the step's mean VW training loss
    double lr = 0;    // the learning rate it applied
    double epoch = 0;  // passes over the training data after it
    std::vector<WorkerRange> ranges;  // its ranges by the worker that computed them (confirmed)
  };
  struct Paused {           // training waits at step `step`
    enum class Cause { kNoWorker, kCapacity, kHold };
    Cause cause = Cause::kNoWorker;
    std::string detail;  // for people: what the job waits for
  };
  struct Resumed {};  // a worker attached after a kNoWorker pause, or a kHold was released
  struct Evaluated {  // the test set at version `step` (steps done)
    double accuracy = 0;
    double loss = 0;  // mean per sample
  };
  struct Progress {     // the periodic progress line; step: steps done
    int64_t steps = 0;  // the job's length
    double epoch = 0;   // passes over the training data so far
    float loss = 0;     // the newest step's training loss
    double samples_per_s = 0;
    size_t workers = 0;  // live workers
    bool paused = false;
    std::vector<WorkerRange> ranges;  // live workers' non-empty ranges
  };
  // ---- durability ----
  struct CheckpointDurable {  // shard `shard` holds step `step` durably
    ShardId shard;
    double blocking_ms = 0;  // how long the shard stopped to snapshot it (0: unknown)
    double write_ms = 0;     // how long its background write took (0: unknown)
  };
  struct CheckpointFailed {
    ShardId shard;
    std::string error;
  };
  struct RollingBack {  // a shard restarted: every shard goes back to step `step`
    ShardId shard;
    Step shard_checkpoint;  // the checkpoint the restarted shard serves
  };
  struct StartingOver {            // no step every shard holds: back to the initial values
    std::optional<ShardId> shard;  // the restarted shard; nullopt: a restarted coordinator
                                   // found no shard holding the initial values
    bool shard_had_state = false;  // the restarted shard restored a checkpoint
  };
  struct RolledBack {};         // every shard serves version `step` (-1: empty, initialize again)
  struct CoordinatorResuming {  // a restarted coordinator read its store; waits for the shards
    std::string job_id;
    int64_t steps = 0;
    Epoch epoch;
  };
  struct CoordinatorResumed {};  // ... and the job goes on at step `step`
  // ---- elastic shards (docs/design.md, "Elastic shards") ----
  struct Resharding {         // at step `step`, the state moves from shards `from` to shards `to`
    uint64_t generation = 0;  // of the new map
    std::vector<ShardId> from, to;
    size_t chunks = 0;      // chunks whose owner changes
    size_t partitions = 0;  // row partitions whose owner changes
    uint64_t bytes = 0;     // the moving chunks' values (their optimizer slots move too)
  };
  struct Resharded {  // every shard serves the new map (committed when the map was persisted)
    uint64_t generation = 0;
    std::vector<ShardId> shards;   // the map's shards now
    std::vector<ShardId> removed;  // shards told to exit: their state moved away
    uint64_t bytes_in = 0;         // what the receivers staged (values and slots)
    double seconds = 0;            // from `resharding` to every shard committed
  };
  struct ReshardAbandoned {  // the old map stays; `retry`: tried again at the next step boundary
    uint64_t generation = 0;
    std::string reason;
    bool retry = false;
  };
  // ---- the end ----
  struct JobFinished {  // result.json is written; step: steps done
    float final_loss = 0;
    bool evaluated = false;
    double test_accuracy = 0, test_loss = 0;
    std::string params_sha256;
  };
  struct JobFailed {
    StatusCode code = StatusCode::kInternal;
    std::string error;
  };

  using What = std::variant<ShardRegistered, WorkerJoined, WorkerReregistered, WorkerRefused,
                            WorkerReady, WorkerLeft, WorkerDead, HostBackedOff, ModelAccepted,
                            Initializing, Assignment, Replan, SpeedForgotten, SpeedRefused,
                            RangeRecomputed, RangeConfirmed, StepCompleted, Paused, Resumed,
                            Evaluated, Progress, CheckpointDurable, CheckpointFailed, RollingBack,
                            StartingOver, RolledBack, CoordinatorResuming, CoordinatorResumed,
                            Resharding, Resharded, ReshardAbandoned, JobFinished, JobFailed>;

  Clock::time_point at;  // from the JobState's Clock
  // The step the event is about (docs/events.md says which, per kind); nullopt
  // before training started, where no step is meaningful.
  std::optional<Step> step;
  What what;

  template <typename T>
  const T* As() const {
    return std::get_if<T>(&what);
  }
};

// The kind's name in events.jsonl: "worker_joined", "assignment", ...
const char* EventKind(const JobEvent& event);

// The event as one line of events.jsonl (no newline): {"event": kind, "t":
// wall_seconds, "step": ..., fields...}. `wall_seconds`: when it happened, in
// seconds since the Unix epoch (the shell maps the Clock's time to it).
std::string EventJson(const JobEvent& event, double wall_seconds);

// The line people read, as the coordinator always printed it, and where it goes.
struct EventLine {
  enum class Sink {
    kNone,     // nothing is printed
    kStdout,   // a plain line: local.sh shows those starting with step|eval|result
    kVerbose,  // the log at --v=1
    kInfo,
    kWarning,
    kError
  };
  Sink sink = Sink::kNone;
  std::string text;
};
EventLine EventText(const JobEvent& event);

}  // namespace eps
