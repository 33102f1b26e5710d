// The coordinator's brain as a pure state machine: events in (registrations,
// step requests, heartbeats, leaves, shard step reports, evaluation results,
// clock ticks), messages out. No sockets, no threads, time from an injected
// Clock: every join / leave / crash schedule can be unit-tested in microseconds.
//
// Membership. A worker is *ready* once it reported its model (first
// StepRequest). Training starts when `min_workers` are ready. The VW assignment
// (an epoch of contiguous ranges over the ready workers in id order, sized by the
// planner from the seconds per VW each worker reports) changes only at step
// boundaries: at once when membership changed; otherwise when measured speeds
// drifted enough that the slowest worker's predicted load improves by more than
// `replan_threshold`, and then at most once per `replan_min_steps` steps unless
// a worker slowed down for `replan_window` reports in a row (hysteresis in
// size and in time: noise moves nothing).
//
// Work of a step. Step t starts with one work item per assigned range, reserved
// for its owner. A worker that asks for a plan gets its reserved range, or else
// any orphaned range of step t (a recovery). A worker's items are confirmed by
// its next StepRequest (it sends one only after every push was acknowledged).
// A worker that leaves, or misses heartbeats past `heartbeat_timeout`, is dead:
// its unconfirmed items become orphans, recomputed by live workers from w(t).
// Because a recovery recomputes exactly the dead worker's range, its aligned
// blocks are the ones the dead worker pushed: each shard holds each block whole
// or not at all, and duplicates are dropped. With no ready worker alive the job
// pauses and resumes when one attaches. Step t is over when every shard has
// reported it; leftover items are moot then.
//
// What happened (a worker joined, the job paused, a new assignment epoch...)
// comes out as typed JobEvents (job_event.h), drained with TakeEvents(); the
// coordinator prints and records them. The state machine itself does no I/O.
//
// Shards (docs/design.md, "Elastic shards"). The shards of the current shard
// map are its *members*; a shard registering with an id outside the map is a
// *spare*, and one an operator removed is *leaving*. At a step boundary where
// the members are not the wanted set (members less leaving, plus spares) the
// job enters kResharding: every shard of both maps gets Reshard, the gaining
// ones fetch their part from the holders and stage it; once all are ready the
// new map becomes the layout's (the shell persists it before anything leaves:
// the commit point) and every shard gets ShardConfig with it; once all have
// committed, leaving shards get Shutdown, every worker registers again (its
// registration reply carries the map) and the step starts. A refusal before the
// commit abandons the move (the old map stays; ShardConfig with it drops what
// was staged) and it is not tried again until the wanted set changes or a
// shard registers anew; so does a move not staged within `move_timeout`. A
// shard restarting abandons it too, and it is tried again at once (after the
// rollback, for a member).
//
// Not thread-safe: the coordinator's event loop owns it.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/layout.h"
#include "elastic/job_event.h"
#include "elastic/planner.h"
#include "schema/messages.h"

namespace eps {

struct JobStateOptions {
  uint32_t min_workers = 1;  // training starts once this many workers are ready
  int64_t eval_every = 0;    // 0: evaluate only at the end
  double epochs = 0;         // when spec.steps == 0
  std::chrono::milliseconds heartbeat_timeout{3000};
  std::chrono::milliseconds startup_timeout{120000};  // for the shards to register
  std::chrono::milliseconds step_timeout{300000};     // progress while workers are alive
  // A move of shard state that is not staged everywhere by then is abandoned
  // (a shard of it died and did not come back): the job goes on on its map.
  std::chrono::milliseconds move_timeout{120000};
  // A spare shard (no member of the map) silent this long (no beacon: shards
  // send one every second) is forgotten, and a move it takes part in is
  // abandoned: a spare that died costs the job this, not the move timeout.
  std::chrono::milliseconds spare_timeout{10000};
  PlannerOptions planner;          // how VW counts follow measured speeds (planner.h)
  // The fingerprint of the job's data files (data/fingerprint.h), as the
  // coordinator read them; empty: the first worker's stands for the job's.
  std::string data_fingerprint;
  double replan_threshold = 0.25;  // re-plan without a membership change only if the slowest
                                   // worker's predicted load improves by more than this
  // ... and at most once per `replan_min_steps` steps after the newest
  // assignment, unless a worker's last `replan_window` reports were each more
  // than replan_threshold slower than the time it was planned with, or a worker
  // planned at a guessed speed has reported (ReplanGate, planner.h).
  // 0 steps: no minimum; 0 window: no early re-plan.
  int64_t replan_min_steps = 50;
  uint32_t replan_window = 10;
  // A worker that held no VW for this many steps has its speed estimate
  // forgotten, so the planner counts it at the median speed and measures it
  // again: a worker that got faster (its GPU freed by another job) is not left
  // idle on a stale estimate. 0: never.
  int64_t probe_idle_after = 1000;
  // A bad host (docs/operations.md, "A bad host"): each worker that leaves
  // with a host fault (it could not set itself up on its machine) counts one
  // failure for that machine. From the `host_failures_before_backoff`-th
  // failure in a row on, the machine is backed off: its registrations are
  // refused for `host_backoff`, doubled on each further failure, at most
  // `host_backoff_max`. A failure more than `host_failure_window` after the
  // previous one (or after the end of the back-off) counts afresh from 1; a
  // step a worker of the machine computed and confirmed resets the count.
  // 0 failures: never back off.
  uint32_t host_failures_before_backoff = 2;
  std::chrono::milliseconds host_backoff{60000};
  std::chrono::milliseconds host_backoff_max{900000};
  std::chrono::milliseconds host_failure_window{600000};
  // The sizes of the job's TorchScript model file (spec.model_sha256; 0: a
  // built-in model) and --init_from file (spec.init_sha256; 0: none), told to
  // every worker in its RegisterWorkerReply with the largest chunk it may ask
  // for: it fetches the bytes with FetchModel (elastic/model_file_server.h).
  // Never to the shards.
  uint64_t model_size = 0;
  uint64_t init_size = 0;
  uint64_t fetch_chunk_bytes = 0;
  // Text data: the serialized vocabulary (data/text.h), sent to every worker in it.
  std::string vocab;
  // What one peer holding the token can make the coordinator keep
  // (docs/security.md, "Bounded resources"): registrations beyond these many
  // live workers on one machine (MachineOf), or in all, are refused (cause
  // too_many_workers). A worker that died before it reported its model is
  // forgotten at the next registration, so registrations that never train
  // leave nothing behind. 0: no cap.
  uint32_t max_workers_per_machine = 64;
  uint32_t max_workers = 1024;
};

// The machine a worker runs on, as back-off counts it: the worker's host
// string less the ":<pid>" the worker appends ("vm:19081" with pid 19081 is
// "vm"); the whole string when it has no such suffix. Pure.
std::string MachineOf(const std::string& host, uint32_t pid);

// Whether a worker that computes on `worker_kind` may join a job whose first
// worker computed on `job_kind` (empty: no worker yet). Kinds are "cpu" or
// "cuda:<GPU name>": bits are reproducible only within one kind, so another
// kind is refused (FailedPrecondition, a message for the worker) unless the
// job accepts placement-dependent bits (`allow_mixed`). Pure.
Status CheckDeviceKind(const std::string& job_kind, const std::string& worker_kind,
                       bool allow_mixed);

// Whether a CPU worker that reported `worker_kernels` (CpuKernelsReport) may
// join a job whose CPU workers run `job_kernels` (the spec's set, or with
// `native` the first CPU worker's report; empty: none yet): FailedPrecondition
// starting with kCpuKernelsMismatch otherwise, unless `allow_mixed`. Pure.
Status CheckCpuKernels(const std::string& job_kernels, const std::string& worker_kernels,
                       bool allow_mixed);

// One message to send.
struct Outgoing {
  enum class To { kWorker, kShard } to;
  uint32_t id;  // WorkerId or ShardId value
  Body body;
};

// What the job produced, for result.json.
struct JobSummary {
  int64_t steps = 0;
  float final_loss = 0;
  bool evaluated = false;
  double test_accuracy = 0, test_loss = 0;
  size_t workers_seen = 0;
  std::chrono::duration<double> train_time{0};
  // Training after the first kWarmupSteps steps (libtorch's one-time warm-up,
  // the first plans): the steady rate. steady_steps 0: the job never got there.
  int64_t steady_steps = 0;
  std::chrono::duration<double> steady_time{0};
  static constexpr int64_t kWarmupSteps = 5;
};

class JobState {
 public:
  enum class Phase {
    kStarting,
    kInitializing,
    kTraining,
    kHeld,        // an operator's hold: waits at step step() (Hold)
    kResharding,  // shard state moves at step step() (the class comment)
    kEvaluating,
    kRollingBack,
    kResuming,
    kFinalizing,
    kStopping,
    kDone
  };

  // What a restarted coordinator read back from its store.
  struct Resumed {
    std::vector<TensorSpec> tensors;  // with the loss tensor, as the shards got them
    int64_t steps = 0;                // the job's length, resolved
    int64_t train_samples = 0, test_samples = 0;
    Epoch epoch{0};
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // the last assignment's VW ranges
    uint32_t next_worker = 0;                           // the first worker id not handed out
    std::optional<Step> hold_from;                      // an operator's hold (Hold)
    uint64_t timeline = 1;                              // the job's timeline (timeline())
    std::optional<ShardMap> map;          // the committed shard map; none: the first map
    std::vector<ShardId> removed_shards;  // removed by an operator (removed_shards())
  };
  // Before any event: the job resumes where the shards are once they all
  // registered again. The step in flight is recomputed in the ranges of the last
  // assignment (so each shard holds each pushed block whole or not at all).
  void Resume(const Resumed& resumed);

  JobState(JobSpec spec, JobStateOptions options, const Clock* clock);

  // ---- events. A non-OK Status is the error reply for the sender. ----
  // A shard that registers again after the job started has restarted: it serves
  // its newest checkpoint `durable_step`, and the job rolls back to the newest
  // step every shard holds durably, then replays (same bits, by the contract).
  // `version` is the version the shard serves; a registration from the peer
  // already known for that shard is a beacon and changes nothing.
  Status OnShardRegistered(ShardId shard, const std::string& address, Step durable_step = Step(-1),
                           Step version = Step(-1), bool new_peer = true);
  Status OnRollbackDone(const RollbackDone& done);
  // A shard's answer to Reshard (staged) or to the ShardConfig that committed
  // the new map (`committed`). Stale answers are ignored.
  Status OnReshardReady(const ReshardReady& ready);
  // An operator removes a shard of the map (JobControl, `elasticps shards
  // --remove`): its state moves to the other members at the next step
  // boundary, then it gets Shutdown. NotFound: no such member;
  // FailedPrecondition: it is the last one, or the job is over.
  Status RemoveShard(ShardId shard);
  // A worker whose device kind CheckDeviceKind refuses, or whose machine is
  // backed off (JobStateOptions), gets the error (FailedPrecondition) in reply
  // at once and never becomes a member; the id is spent. The same process
  // (host, pid) registering again before it reported its model keeps its id and
  // is answered again: a worker repeats an unanswered registration.
  // `cpu_kernels`: what it reported (RegisterWorker); checked against the
  // job's at its first step request (CheckCpuKernels), when a worker that ran
  // other kernels has re-executed itself with the job's.
  WorkerId OnWorkerRegistered(const std::string& host, uint32_t pid,
                              const std::string& device_kind = "cpu",
                              const std::string& cpu_kernels = kDefaultCpuKernels);
  // Aborted: the worker is unknown or was declared dead; it must register again.
  Status OnStepRequest(const StepRequest& request);
  Status OnHeartbeat(WorkerId worker);
  // `host_fault`: the worker could not set itself up on its host (its data,
  // its device, its memory): one failure of its machine (JobStateOptions).
  Status OnLeave(WorkerId worker, const std::string& reason, bool host_fault = false);
  Status OnStepDone(ShardId shard, const StepDone& done);
  Status OnEvalResult(const EvalResult& result);
  // A shard found the job impossible (bad spec), or the coordinator must stop
  // it (a signal, its store): the job fails.
  void OnJobError(const std::string& message);
  // A worker's set-up failed with `error`. Before any worker's model was
  // accepted that is the job's own fault (an unknown model, a layout it cannot
  // have): the job fails. Once one was, the job is evidently possible: the
  // worker leaves with a host fault instead. An unknown or dead worker: ignored.
  void OnWorkerError(WorkerId worker, const Status& error);
  // An operator's hold (JobControl: `elasticps hold`, `elasticps release`):
  // no step >= `from` starts (0: from the next step boundary). The step in
  // flight, or an evaluation, ends first; the job then waits at the boundary
  // (phase kHeld, a `paused` event with cause hold), every worker and all state
  // kept. Workers still join, leave and die, and the next assignment counts
  // them. Release() goes on from there, on the same bits as a job never held,
  // as does a hold moved past the step the job waits at. Repeats change
  // nothing. FailedPrecondition once the job is over; InvalidArgument for a
  // step the job never starts (`from` >= its steps) or below 0.
  Status Hold(Step from);
  Status Release();
  // The step the hold begins at; nullopt: no hold.
  std::optional<Step> hold_from() const { return hold_from_; }
  // Heartbeat deadlines and watchdogs; call often (at least every heartbeat_timeout / 2: a
  // longer gap is taken for the caller's stall, and workers' silence is counted without it).
  void Tick();
  // The shell wrote result.json, whose parameters hash to `params_sha256` (or failed to).
  void OnResultWritten(const StatusOr<std::string>& params_sha256);
  // Queues a Progress event (what the periodic progress line shows), once a step is done.
  void ReportProgress();

  // ---- outputs ----
  std::vector<Outgoing> TakeOutgoing();
  // What happened since the last call, in order.
  std::vector<JobEvent> TakeEvents();
  Phase phase() const { return phase_; }
  const Status& fatal() const { return fatal_; }
  bool done() const { return phase_ == Phase::kDone; }
  const JobSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  // Indexed by shard id: every shard that registered ("" for an id that did not).
  const std::vector<std::string>& shard_addresses() const { return shard_addresses_; }
  // The shard map's shards, ascending.
  const std::vector<uint32_t>& shard_members() const { return members_; }
  // Shards removed by an operator whose state moved away: a registration from
  // one is answered with Shutdown (the shell persists them).
  const std::set<uint32_t>& removed_shards() const { return removed_; }
  JobSummary Summary() const;
  // Ready live workers and their current ranges, e.g. "w0:[0,4) w2:[4,8)".
  std::string AssignmentString() const;
  Epoch epoch() const { return epoch_; }
  // The current assignment's non-empty ranges, in worker order.
  std::vector<std::pair<uint32_t, uint32_t>> AssignmentRanges() const;
  uint32_t next_worker() const { return next_worker_; }
  // The job's timeline (docs/design.md, "Timelines"): 1, plus one per rollback.
  // Every plan, ShardConfig and Rollback carries it; a restart must not go back
  // to an earlier one (the shell persists it before anything that names it leaves).
  uint64_t timeline() const { return timeline_; }
  int64_t train_samples() const { return train_samples_; }
  int64_t test_samples() const { return test_samples_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  Step step() const { return step_; }
  // Steps whose loss the state holds: the step in flight and the newest completed one, whatever
  // the job's length (what the state keeps must not grow with the steps).
  size_t losses_kept() const { return losses_.size(); }
  size_t live_workers() const;
  // What the inter-job scheduler asks for: the job's needs and its live
  // workers' measured seconds per VW (0 while not measured).
  JobInfoReply Info() const;
  // How the job is doing, for `elasticps status` and the metrics: every worker
  // the job has known, every shard. The events and the metrics addresses are
  // the shell's to fill in (job_status.cc).
  JobStatusReply StatusReport() const;

 private:
  struct Work {
    uint32_t lo = 0, hi = 0;
    std::optional<WorkerId> reserved;  // the owner in the current assignment
    std::optional<WorkerId> holder;    // who computes it now
  };
  struct EvalSlice {
    int64_t lo = 0, hi = 0;
    std::optional<WorkerId> holder;
    bool done = false;
    int64_t correct = 0;  // once done
    double loss_sum = 0;
  };
  struct WorkerInfo {
    std::string host;
    std::string machine;  // MachineOf(host, pid)
    uint32_t pid = 0;
    std::string device_kind;
    std::string cpu_kernels;  // as it reported them
    bool alive = true;
    bool ready = false;    // reported its model
    bool pending = false;  // waits for a plan
    Step done_step{-1};
    Clock::time_point last_seen;
    bool init_holder = false;
    int64_t idle_since = -1;  // the step from which it has held no VW (-1: it holds some)
    bool left = false;        // it left gracefully (else, once dead, it was declared dead)
    int64_t steps_contributed = 0;  // steps in which some range of it was confirmed
    Step contributed_step{-1};      // the newest of them
  };

  void Advance();
  // The loss of the newest completed step (none before the first, or when no shard reported it).
  std::optional<float> NewestLoss() const;
  // A range `w` computed in the step in flight was confirmed.
  void Confirm(WorkerId w, uint32_t lo, uint32_t hi);
  void Emit(JobEvent::What what, std::optional<Step> step) {
    events_.push_back({clock_->Now(), step, std::move(what)});
  }
  // The step in flight (during an evaluation: the last one trained); nullopt
  // while no step is (before training, while initializing, while resuming).
  std::optional<Step> CurrentStep() const;
  // Ready live workers' non-empty ranges, in id order.
  std::vector<WorkerRange> LiveRanges() const;
  void Send(WorkerId w, Body body) {
    out_.push_back({Outgoing::To::kWorker, w.value(), std::move(body)});
  }
  void Plan(WorkerId w, StepPlan plan);  // stamped with the timeline
  void Fail(Status status);
  // Back-off of bad hosts (JobStateOptions).
  struct HostRecord {
    uint32_t failures = 0;               // host faults in a row
    Clock::time_point last_failure;      // of the newest one
    Clock::time_point backed_off_until;  // registrations refused before this
    std::string last_reason;
  };
  void CountHostFault(const std::string& machine, const std::string& reason);
  // FailedPrecondition for a registration while `machine` is backed off.
  Status CheckHost(const std::string& machine) const;
  // ResourceExhausted when `machine`, or the job, has the most live workers
  // the options allow.
  Status CheckWorkerCount(const std::string& machine) const;
  void ForgetNeverReadyDead();
  // A worker of `w`'s machine computed and confirmed a step: the count starts over.
  void HostSucceeded(WorkerId w);
  Status AcceptModel(const StepRequest& request);
  // A worker's first request: its data files are the job's, or it is refused (and dead).
  Status AcceptData(const StepRequest& request);
  Status AcceptCpuKernels(WorkerId worker);
  // The CPU kernels of the job's CPU workers (empty: native, before the first).
  std::string JobCpuKernels() const;
  void AnswerRegistrations();
  // Marks `w` dead and frees what it held; returns the unconfirmed ranges it
  // held (the caller's event names them).
  std::vector<WorkerRange> DeclareDead(WorkerId w);
  bool AllShardsRegistered() const;
  Step MinShardDone() const;
  bool MembershipChanged() const;
  // False when the planner cannot place V VWs on the live workers (caps).
  bool Assign(const VwPlan* plan = nullptr);
  std::vector<WorkerId> ReadyWorkers() const;
  void MaybeReplan();
  void StartStep(Step t);
  void DispatchTrain();
  void OnStepFinished();
  void StartEval(Step version);
  void DispatchEval();
  void Finalize();
  void StopWorkers();
  bool HasLiveReadyWorker() const;
  void Progress() { progress_deadline_ = clock_->Now() + options_.step_timeout; }
  void StartRollback(ShardId restarted, Step durable_step);
  // ---- elastic shards (job_state_reshard.cc) ----
  bool IsMember(uint32_t s) const {
    return std::binary_search(members_.begin(), members_.end(), s);
  }
  // Members less leaving shards, plus spares, ascending.
  std::vector<uint32_t> WantedMembers() const;
  // At step boundary `t`: starts a move when the members are not the wanted
  // set (true: the step waits for it).
  bool MaybeStartReshard(Step t);
  void CommitReshard();
  // The committed move is over (every member took the map, or a rollback
  // took over): the workers register again to learn it.
  void EndCommittedMove();
  // Before the commit: every involved shard drops what it staged (ShardConfig
  // with the current map). `retry` false: not tried again for this wanted set.
  void AbandonReshard(const std::string& reason, bool retry);
  // Abandons the move (AbandonReshard) and goes on at its step boundary without
  // it; nothing once the move committed.
  void GiveUpReshard(const std::string& reason, bool retry);
  ShardConfig Config() const;               // the job as the shards get it, with the current map
  void ForgetSilentSpares();                // those silent past options_.spare_timeout (Tick)
  std::string ShardRole(uint32_t s) const;  // ShardStatus::role
  void FinishResume();
  void UpdateRetention();

  JobSpec spec_;
  const JobStateOptions options_;
  const Clock* const clock_;
  std::string data_fingerprint_;  // the job's data files (options_, or the first worker's)
  // Per shard, indexed by id (kMaxShardId entries); only members count in
  // the barrier, the retention floor, rollbacks and resumes.
  std::vector<std::string> shard_addresses_;
  std::vector<Step> shard_done_;
  std::vector<bool> shard_registered_;
  std::vector<Step> shard_durable_;  // newest checkpoint each shard reported
  Step retain_sent_{-2};             // the retention floor last sent to the shards (-2: none)
  std::vector<Step> shard_version_;  // version each shard served when it registered
  std::vector<Clock::time_point> shard_seen_;  // each shard's newest registration or beacon
  std::vector<std::optional<Clock::time_point>> shard_durable_at_;  // when each durable step
                                                                    // last advanced
  std::vector<uint64_t> shard_bytes_in_, shard_bytes_out_;  // as each shard last reported
  std::vector<WorkerRange> step_ranges_;  // the ranges confirmed in the step in flight
  double step_lr_ = 0;  // the learning rate the shards reported for the step in flight
  double last_lr_ = 0;  // ... for the newest completed step
  std::deque<Clock::time_point> completions_;  // when the newest steps completed (a window)
  static constexpr size_t kRateWindow = 20;
  std::vector<std::pair<uint32_t, uint32_t>> resume_ranges_;
  Step rollback_step_{-1};
  uint64_t timeline_ = 1;
  std::vector<bool> rollback_acked_;
  std::vector<uint32_t> members_;  // the shard map's shards, ascending
  uint32_t shard_bound_ = 0;       // one more than any shard id known: loops over ids stop here
  std::set<uint32_t> leaving_;     // removed by an operator: members until the move commits
  std::set<uint32_t> removed_;     // removed, and their state moved away
  struct Move {
    ShardMap map;                    // the new one
    std::vector<uint32_t> wanted;    // its shards
    std::vector<uint32_t> involved;  // of both maps, ascending
    std::set<uint32_t> ready, committed;
    bool committing = false;  // the map is the layout's: the shards adopt it
    uint64_t bytes_in = 0;
    Clock::time_point started;
  };
  std::optional<Move> move_;
  uint64_t last_generation_ = 0;   // of the newest move tried
  std::vector<uint32_t> refused_;  // the wanted set of the last refused move: not tried again
  std::map<WorkerId, WorkerInfo> workers_;
  std::vector<WorkerId> unanswered_registrations_;
  std::map<std::string, HostRecord> hosts_;  // by machine, those with a host fault
  std::string device_kind_;                  // the first accepted worker's; empty before it
  std::string native_kernels_;  // with --cpu_kernels=native: the first ready CPU worker's
  uint32_t next_worker_ = 0;
  size_t workers_joined_ = 0;  // workers that became members (workers_ forgets some dead ones)
  std::vector<TensorSpec> tensors_;
  Layout layout_;
  int64_t train_samples_ = 0, test_samples_ = 0;

  Phase phase_ = Phase::kStarting;
  Status fatal_;
  Epoch epoch_{0};
  std::map<WorkerId, std::pair<uint32_t, uint32_t>> assignment_;  // the current epoch's ranges
  SpeedEstimator speeds_;
  ReplanGate replan_gate_;       // when a speed-driven re-plan may happen (fed beside speeds_)
  bool lacks_capacity_ = false;  // the planner could not place V VWs: wait for workers
  Step step_{0};
  std::vector<Work> work_;
  bool paused_ = false;
  std::optional<Step> hold_from_;  // Hold: no step >= it starts
  // Whether an operator's hold keeps step `t` from starting.
  bool HeldAt(Step t) const { return hold_from_ && t >= *hold_from_; }
  // Leaves kHeld once the hold no longer applies to its step.
  void MaybeGoOn();
  // A restarted coordinator held at the step in flight (FinishResume): the
  // release recomputes it in the last assignment's ranges (ResumeStep).
  bool resumed_step_held_ = false;
  void ResumeStep();
  // Enters kHeld at step_ (StartStep, FinishResume).
  void EnterHold();
  int64_t steps_done_ = 0;
  std::map<int64_t, float> losses_;  // by step: the step in flight's and the newest completed one's
  Step eval_version_{0};
  std::vector<EvalSlice> eval_slices_;
  bool evaluated_ = false;
  double test_accuracy_ = 0, test_loss_ = 0;
  Clock::time_point started_, train_started_, train_ended_, progress_deadline_;
  Clock::time_point warmed_up_;
  std::optional<Clock::time_point> last_tick_;  // the previous Tick's time  // when step JobSummary::kWarmupSteps completed (unset: not yet)
  std::vector<Outgoing> out_;
  std::vector<JobEvent> events_;
};

}  // namespace eps
