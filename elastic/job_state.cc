#include "elastic/job_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/transfer.h"
#include "data/fingerprint.h"

namespace eps {

JobState::JobState(JobSpec spec, JobStateOptions options, const Clock* clock)
    : spec_(std::move(spec)),
      options_(options),
      clock_(clock),
      data_fingerprint_(options_.data_fingerprint),
      shard_addresses_(kMaxShardId),
      shard_done_(kMaxShardId, Step(-2)),
      shard_registered_(kMaxShardId, false),
      shard_durable_(kMaxShardId, Step(-1)),
      shard_version_(kMaxShardId, Step(-1)),
      shard_seen_(kMaxShardId),
      shard_durable_at_(kMaxShardId),
      shard_bytes_in_(kMaxShardId, 0),
      shard_bytes_out_(kMaxShardId, 0) {
  for (uint32_t s = 0; s < spec_.num_shards && s < kMaxShardId; ++s) members_.push_back(s);
  shard_bound_ = static_cast<uint32_t>(members_.size());
  started_ = clock_->Now();
  progress_deadline_ = started_ + options_.startup_timeout;
  auto speeds = SpeedEstimator::Create(SpeedEstimatorOptions());
  if (speeds.ok()) speeds_ = std::move(speeds).value();
  auto gate = ReplanGate::Create(
      {options_.replan_min_steps, options_.replan_window, options_.replan_threshold});
  // Else the defaults: the coordinator checked the flags.
  if (gate.ok()) replan_gate_ = std::move(gate).value();
}

// ---- events -----------------------------------------------------------------

Status JobState::OnStepRequest(const StepRequest& r) {
  auto it = workers_.find(r.worker);
  if (it == workers_.end() || !it->second.alive) {
    return Aborted("worker " + std::to_string(r.worker.value()) +
                   " is not a member: register again");
  }
  WorkerInfo& w = it->second;
  w.last_seen = clock_->Now();
  if (!w.ready) {
    EPS_RETURN_IF_ERROR(AcceptCpuKernels(r.worker));
    EPS_RETURN_IF_ERROR(AcceptData(r));
    Status st = AcceptModel(r);
    if (!st.ok()) return st;
    w.ready = true;
    Emit(JobEvent::WorkerReady{r.worker}, CurrentStep());
  }
  if (r.abandoned) {
    // It gave its plan up (a shard refused or vanished): the work goes back to the pool.
    for (Work& item : work_) {
      if (item.holder == r.worker) item.holder.reset();
    }
    for (EvalSlice& slice : eval_slices_) {
      if (slice.holder == r.worker && !slice.done) slice.holder.reset();
    }
    if (w.init_holder && phase_ == Phase::kInitializing) phase_ = Phase::kStarting;
  } else {
    // Everything this worker held is confirmed: it asks only after its pushes were acknowledged.
    for (const Work& item : work_) {
      if (item.holder == r.worker) Confirm(r.worker, item.lo, item.hi);
    }
    work_.erase(std::remove_if(work_.begin(), work_.end(),
                               [&](const Work& item) { return item.holder == r.worker; }),
                work_.end());
  }
  if (!r.abandoned && r.seconds_per_vw > 0) {
    Status st = speeds_.Report(r.worker, r.seconds_per_vw);
    if (st.ok()) {
      replan_gate_.Report(r.worker, r.seconds_per_vw);
    } else {
      Emit(JobEvent::SpeedRefused{r.worker, st.ToString()}, CurrentStep());
    }
  }
  w.init_holder = false;
  w.pending = true;
  w.done_step = std::max(w.done_step, r.done_step);
  Progress();
  Advance();
  return OkStatus();
}

Status JobState::OnStepDone(ShardId shard, const StepDone& done) {
  if (shard.value() >= kMaxShardId || !shard_registered_[shard.value()]) {
    return NotFound("step report from an unknown shard: register again");
  }
  shard_bytes_in_[shard.value()] = done.bytes_in;
  shard_bytes_out_[shard.value()] = done.bytes_out;
  if (done.durable_step > shard_durable_[shard.value()]) {
    shard_durable_[shard.value()] = done.durable_step;
    shard_durable_at_[shard.value()] = clock_->Now();
    Emit(JobEvent::CheckpointDurable{shard, done.checkpoint_blocking_ms, done.checkpoint_write_ms},
         done.durable_step);
  }
  UpdateRetention();
  if (!done.checkpoint_error.empty())
    Emit(JobEvent::CheckpointFailed{shard, done.checkpoint_error}, done.step);
  if (phase_ == Phase::kRollingBack) return OkStatus();  // reports from before the rollback
  shard_done_[shard.value()] = std::max(shard_done_[shard.value()], done.step);
  if (done.has_loss) losses_[done.step.value()] = done.loss;
  if (done.step == step_) step_lr_ = done.lr;
  Progress();
  Advance();
  return OkStatus();
}

Status JobState::OnEvalResult(const EvalResult& r) {
  auto it = workers_.find(r.worker);
  if (it == workers_.end() || !it->second.alive) return Aborted("not a member");
  it->second.last_seen = clock_->Now();
  if (phase_ != Phase::kEvaluating || r.version != eval_version_)
    return OkStatus();  // stale: ignore
  for (EvalSlice& s : eval_slices_) {
    if (s.lo == r.lo && s.hi == r.hi && !s.done) {
      s.done = true;
      s.correct = r.correct;
      s.loss_sum = r.loss_sum;
    }
  }
  Progress();
  Advance();
  return OkStatus();
}

void JobState::OnJobError(const std::string& message) { Fail(FailedPrecondition(message)); }

// ---- the clock and the outbox -----------------------------------------------

void JobState::Tick() {
  const auto now = clock_->Now();
  // A gap between ticks longer than half a heartbeat timeout is the coordinator's own stall
  // (writing a large result, a paused process): nothing was read meanwhile, so the workers'
  // silence is moved by the gap, not blamed on them; their queued beats arrive next.
  if (last_tick_ && now - *last_tick_ > options_.heartbeat_timeout / 2) {
    const auto gap = now - *last_tick_;
    for (auto& [id, w] : workers_) w.last_seen += gap;
  }
  last_tick_ = now;
  for (auto& [id, w] : workers_) {
    // A worker learns its id from the registration reply: it cannot beat before that.
    const bool unanswered =
        std::find(unanswered_registrations_.begin(), unanswered_registrations_.end(), id) !=
        unanswered_registrations_.end();
    if (w.alive && !unanswered && now - w.last_seen > options_.heartbeat_timeout) {
      JobEvent::WorkerDead dead{
          id,
          JobEvent::WorkerDead::Cause::kMissedHeartbeats,
          std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_seen).count(),
          ShardId(0),
          {}};
      dead.moved = DeclareDead(id);
      Emit(std::move(dead), CurrentStep());
    }
  }
  ForgetSilentSpares();
  if (move_ && !move_->committing && now - move_->started > options_.move_timeout) {
    GiveUpReshard("not staged by every shard within " +
                      std::to_string(options_.move_timeout.count() / 1000) + " s",
                  /*retry=*/false);
  }
  Advance();
  // Watchdog: while shards are missing, or workers are alive, something must move.
  const bool waiting_for_shards = !AllShardsRegistered();
  const bool working = phase_ == Phase::kTraining || phase_ == Phase::kEvaluating ||
                       phase_ == Phase::kRollingBack || phase_ == Phase::kResuming ||
                       phase_ == Phase::kResharding;
  if ((waiting_for_shards || (working && HasLiveReadyWorker())) && now > progress_deadline_) {
    Fail(DeadlineExceeded(waiting_for_shards ? "the shards did not all register in time"
                                             : "no progress within the step timeout (step " +
                                                   std::to_string(step_.value()) + ")"));
  }
}

void JobState::OnResultWritten(const StatusOr<std::string>& params_sha256) {
  if (!params_sha256.ok()) return Fail(params_sha256.status());
  const JobSummary s = Summary();
  Emit(JobEvent::JobFinished{s.final_loss, s.evaluated, s.test_accuracy, s.test_loss,
                             *params_sha256},
       Step(s.steps));
  phase_ = Phase::kStopping;
  StopWorkers();
}

std::vector<Outgoing> JobState::TakeOutgoing() {
  std::vector<Outgoing> out;
  out.swap(out_);
  return out;
}

std::vector<JobEvent> JobState::TakeEvents() {
  std::vector<JobEvent> events;
  events.swap(events_);
  return events;
}

std::optional<Step> JobState::CurrentStep() const {
  if (phase_ == Phase::kStarting || phase_ == Phase::kInitializing || phase_ == Phase::kResuming)
    return std::nullopt;
  return step_;
}

// ---- the model, the data and the assignment ---------------------------------

Status JobState::AcceptModel(const StepRequest& r) {
  if (r.tensors.empty())
    return InvalidArgument("the first step request must carry the model's tensors");
  std::vector<TensorSpec> tensors = r.tensors;
  tensors.push_back(LossTensor());
  if (!tensors_.empty()) {
    if (tensors != tensors_) return FailedPrecondition("the worker's model differs from the job's");
    return OkStatus();
  }
  if (r.train_samples <= 0) return InvalidArgument("the worker loaded no training data");
  // Every worker has this model: a --freeze that selects none of it fails the job.
  if (Status st = CheckFreeze(spec_.freeze, tensors); !st.ok()) {
    Fail(st);
    return st;
  }
  // One evaluation slice per batch (StartEval): a peer's absurd count must not make billions.
  if (r.test_samples < 0 || r.test_samples / std::max<int64_t>(1, spec_.eval_batch) >= (1 << 20))
    return InvalidArgument("a test set of " + std::to_string(r.test_samples) +
                           " samples: over 2^20 evaluation batches of --eval_batch");
  EPS_ASSIGN_OR_RETURN(layout_, MakeLayout(tensors, spec_.num_shards, spec_.chunk_elems));
  train_samples_ = r.train_samples;
  test_samples_ = spec_.test_limit < 0 ? 0 : r.test_samples;
  if (spec_.steps <= 0) {
    const double global_batch = static_cast<double>(spec_.virtual_workers) * spec_.batch_per_vw;
    spec_.steps = static_cast<int64_t>(std::floor(options_.epochs * train_samples_ / global_batch));
    if (spec_.steps <= 0) return InvalidArgument("--epochs gives no whole step");
  }
  tensors_ = std::move(tensors);
  Emit(JobEvent::ModelAccepted{static_cast<int64_t>(layout_.NumParameters()), layout_.chunks.size(),
                               spec_.steps, train_samples_, test_samples_},
       CurrentStep());
  const ShardConfig config = Config();
  for (uint32_t s = 0; s < shard_bound_; ++s) {
    if (shard_registered_[s]) out_.push_back({Outgoing::To::kShard, s, config});
  }
  return OkStatus();
}

Status JobState::AcceptData(const StepRequest& r) {
  if (r.data_fingerprint.empty()) return OkStatus();  // a worker of the test's, reading no files
  if (data_fingerprint_.empty()) data_fingerprint_ = r.data_fingerprint;
  Status st = CompareFingerprints(data_fingerprint_, r.data_fingerprint);
  if (st.ok()) return st;
  const WorkerInfo& w = workers_[r.worker];
  Emit(JobEvent::WorkerRefused{r.worker, w.host, w.device_kind, st.message(),
                               JobEvent::WorkerRefused::Cause::kDataFingerprint},
       CurrentStep());
  (void)DeclareDead(r.worker);
  return st;
}

std::string JobState::JobCpuKernels() const {
  return spec_.cpu_kernels == kNativeCpuKernels ? native_kernels_ : spec_.cpu_kernels;
}

Status JobState::AcceptCpuKernels(WorkerId id) {
  const WorkerInfo& w = workers_[id];
  if (w.device_kind != "cpu") return OkStatus();  // a GPU's kernels are its device kind's
  Status st = CheckCpuKernels(JobCpuKernels(), w.cpu_kernels, spec_.allow_mixed_devices);
  if (!st.ok()) {
    Emit(JobEvent::WorkerRefused{id, w.host, w.device_kind, st.message(),
                                 JobEvent::WorkerRefused::Cause::kCpuKernels},
         CurrentStep());
    (void)DeclareDead(id);
    return st;
  }
  if (spec_.cpu_kernels == kNativeCpuKernels && native_kernels_.empty())
    native_kernels_ = w.cpu_kernels;
  return OkStatus();
}

bool JobState::AllShardsRegistered() const {
  return std::all_of(members_.begin(), members_.end(),
                     [&](uint32_t s) { return bool(shard_registered_[s]); });
}

Step JobState::MinShardDone() const {
  Step min(std::numeric_limits<int64_t>::max());
  for (uint32_t s : members_) min = std::min(min, shard_done_[s]);
  return min;
}

bool JobState::MembershipChanged() const {
  size_t ready = 0;
  for (const auto& [id, w] : workers_) {
    if (!(w.alive && w.ready)) continue;
    ++ready;
    if (!assignment_.count(id)) return true;
  }
  return ready != assignment_.size();
}

bool JobState::Assign(const VwPlan* given) {
  const std::vector<WorkerId> live = ReadyWorkers();
  VwPlan plan;
  if (given != nullptr) {
    plan = *given;
  } else {
    auto planned = PlanVws(spec_.virtual_workers, speeds_.Estimates(live), options_.planner);
    if (!planned.ok()) {
      assignment_.clear();
      if (!lacks_capacity_) {
        Emit(JobEvent::Paused{JobEvent::Paused::Cause::kCapacity, planned.status().message()},
             step_);
      }
      lacks_capacity_ = true;
      return false;
    }
    plan = std::move(planned).value();
  }
  lacks_capacity_ = false;
  assignment_.clear();
  for (size_t i = 0; i < live.size() && i < plan.ranges.size(); ++i) {
    assignment_[live[i]] = {plan.ranges[i].lo,
                            plan.ranges[i].hi};  // empty when a worker gets no VW
  }
  replan_gate_.Assigned(step_.value(), live, speeds_.Estimates(live));
  epoch_ = Epoch(epoch_.value() + 1);
  JobEvent::Assignment event{epoch_, {}};
  for (const auto& [id, range] : assignment_)
    event.ranges.push_back({id, range.first, range.second});
  Emit(std::move(event), step_);
  return true;
}

// Without a membership change, follow measured speeds only past the hysteresis threshold.
void JobState::MaybeReplan() {
  if (options_.planner.kind != PlannerKind::kSpeed || assignment_.empty()) return;
  const std::vector<WorkerId> live = ReadyWorkers();
  std::vector<uint32_t> counts;
  for (WorkerId id : live) counts.push_back(assignment_[id].second - assignment_[id].first);
  for (size_t i = 0; i < live.size(); ++i) {
    WorkerInfo& w = workers_[live[i]];
    if (counts[i] > 0) {
      w.idle_since = -1;
    } else if (w.idle_since < 0) {
      w.idle_since = step_.value();
    } else if (options_.probe_idle_after > 0 &&
               step_.value() - w.idle_since >= options_.probe_idle_after &&
               speeds_.Estimate(live[i])) {
      Emit(JobEvent::SpeedForgotten{live[i], step_.value() - w.idle_since}, step_);
      speeds_.Forget(live[i]);
      replan_gate_.Forget(live[i]);
      w.idle_since = step_.value();
    }
  }
  const std::vector<std::optional<double>> estimates = speeds_.Estimates(live);
  auto advice = ShouldReplan(counts, estimates, options_.planner, options_.replan_threshold);
  if (!advice.ok()) return;
  if (!advice->replan) return replan_gate_.Kept(live, estimates);
  ReplanGate::Decision gate;
  if (advice->over_cap) {
    gate.trigger = ReplanTrigger::kCap;
    gate.reason = "over the cap";
  } else {
    gate = replan_gate_.May(step_.value());
    if (gate.trigger == ReplanTrigger::kNone) return;  // not yet: noise, or a change still short
  }
  JobEvent::Replan event;
  event.trigger = gate.trigger;
  event.trigger_worker = gate.worker;
  event.steps_since_assignment = step_.value() - replan_gate_.assigned_step();
  event.reason = gate.reason + ": " + advice->reason;
  for (size_t i = 0; i < live.size(); ++i) event.seconds_per_vw.push_back({live[i], estimates[i]});
  Emit(std::move(event), step_);
  Assign(&advice->plan);
}

std::string JobState::AssignmentString() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [id, range] : assignment_) {
    auto it = workers_.find(id);
    if (it == workers_.end() || !it->second.alive || range.first == range.second) continue;
    os << (first ? "" : " ") << "w" << id << ":[" << range.first << "," << range.second << ")";
    first = false;
  }
  return first ? "none" : os.str();
}

// ---- the step clock ---------------------------------------------------------

void JobState::Plan(WorkerId id, StepPlan plan) {
  workers_[id].pending = false;
  plan.timeline = timeline_;
  Send(id, plan);
}

Status JobState::Hold(Step from) {
  if (phase_ >= Phase::kFinalizing) return FailedPrecondition("the job is over");
  if (from.value() < 0) return InvalidArgument("a hold's step must be >= 0");
  if (spec_.steps > 0 && from.value() >= spec_.steps) {
    return InvalidArgument("the job has " + std::to_string(spec_.steps) + " steps: no step " +
                           std::to_string(from.value()) + " to hold at");
  }
  hold_from_ = from;
  MaybeGoOn();
  return OkStatus();
}

Status JobState::Release() {
  if (phase_ >= Phase::kFinalizing) return FailedPrecondition("the job is over");
  hold_from_.reset();
  MaybeGoOn();
  return OkStatus();
}

void JobState::EnterHold() {
  phase_ = Phase::kHeld;
  Emit(JobEvent::Paused{JobEvent::Paused::Cause::kHold,
                        "held by an operator; `elasticps release` goes on"},
       step_);
}

void JobState::MaybeGoOn() {
  if (phase_ != Phase::kHeld || HeldAt(step_)) return;
  Emit(JobEvent::Resumed{}, step_);
  if (resumed_step_held_) return ResumeStep();
  StartStep(step_);
}

void JobState::Fail(Status status) {
  if (!fatal_.ok() || phase_ == Phase::kDone) return;
  Emit(JobEvent::JobFailed{status.code(), status.message()}, CurrentStep());
  fatal_ = std::move(status);
  phase_ = Phase::kStopping;
  StopWorkers();
}

JobInfoReply JobState::Info() const {
  JobInfoReply r;
  r.job_id = spec_.job_id;
  r.virtual_workers = spec_.virtual_workers;
  r.batch_per_vw = spec_.batch_per_vw;
  r.min_workers = options_.min_workers;
  r.max_vws_per_worker = options_.planner.max_vws_per_worker;
  r.steps = spec_.steps;
  r.step = step_.value();
  for (const auto& [id, w] : workers_) {
    if (!w.alive) continue;
    r.workers.push_back({w.host, w.device_kind, speeds_.Estimate(id).value_or(0.0)});
  }
  return r;
}

void JobState::Advance() {
  AnswerRegistrations();
  switch (phase_) {
    case Phase::kStarting:
      if (tensors_.empty() || !AllShardsRegistered()) break;
      for (auto& [id, w] : workers_) {
        if (w.alive && w.ready && w.pending) {
          w.init_holder = true;
          Plan(id, StepPlan{PlanKind::kInit, Step(-1), epoch_, 0, 0, 0, 0});
          phase_ = Phase::kInitializing;
          Emit(JobEvent::Initializing{id}, std::nullopt);
          break;
        }
      }
      break;
    case Phase::kInitializing: {
      uint32_t ready = 0;
      for (const auto& [id, w] : workers_) ready += (w.alive && w.ready) ? 1 : 0;
      if (MinShardDone().value() >= -1 && ready >= options_.min_workers) {
        train_started_ = clock_->Now();
        StartStep(Step(0));
      }
      break;
    }
    case Phase::kTraining:
      if (MinShardDone() >= step_) {
        OnStepFinished();
      } else if (lacks_capacity_) {
        if (MembershipChanged()) StartStep(step_);
      } else {
        DispatchTrain();
      }
      break;
    case Phase::kHeld:        // MaybeGoOn goes on
    case Phase::kResharding:  // OnReshardReady goes on
      break;
    case Phase::kEvaluating:
      DispatchEval();
      if (std::all_of(eval_slices_.begin(), eval_slices_.end(),
                      [](const EvalSlice& s) { return s.done; })) {
        // In slice order, whoever computed which: the same sum in every placement.
        int64_t correct = 0;
        double loss = 0;
        for (const EvalSlice& slice : eval_slices_) {
          correct += slice.correct;
          loss += slice.loss_sum;
        }
        test_accuracy_ = double(correct) / double(test_samples_);
        test_loss_ = loss / double(test_samples_);
        evaluated_ = true;
        Emit(JobEvent::Evaluated{test_accuracy_, test_loss_}, eval_version_);
        if (eval_version_.value() >= spec_.steps) {
          Finalize();
        } else {
          StartStep(eval_version_);
        }
      }
      break;
    case Phase::kResuming:
      if (AllShardsRegistered()) FinishResume();
      break;
    case Phase::kRollingBack:
    case Phase::kFinalizing:
    case Phase::kDone:
      break;
    case Phase::kStopping:
      StopWorkers();
      break;
  }
}

void JobState::StartStep(Step t) {
  resumed_step_held_ = false;
  step_ = t;
  work_.clear();
  step_ranges_.clear();
  if (MaybeStartReshard(t)) return;
  if (HeldAt(t)) return EnterHold();
  phase_ = Phase::kTraining;
  // No assignment at all (a coordinator that rolled back before any worker came back): assign,
  // which pauses the step until workers can hold every VW, rather than start it with no work.
  if (MembershipChanged() || lacks_capacity_ || assignment_.empty()) {
    if (!Assign()) return;  // paused until workers can hold every VW
  } else {
    MaybeReplan();
  }
  for (const auto& [id, range] : assignment_) {
    if (range.second > range.first) work_.push_back({range.first, range.second, id, std::nullopt});
  }
  Progress();
  DispatchTrain();
}

void JobState::DispatchTrain() {
  // Every step request calls this, and most find every item held (a step's items go to their
  // owners as it starts): without this check a step of W workers would cost O(W^3) in scans
  // of the pending workers times the items (3.6 ms a step at 256 workers, jobstate_bench).
  const bool free_work =
      std::any_of(work_.begin(), work_.end(), [](const Work& item) { return !item.holder; });
  for (auto& [id, w] : workers_) {
    if (!free_work) break;
    if (!(w.alive && w.ready && w.pending)) continue;
    Work* pick = nullptr;
    for (Work& item : work_) {  // its own range first
      if (!item.holder && item.reserved == id) pick = &item;
    }
    if (pick == nullptr) {  // then any orphan: a recovery
      for (Work& item : work_) {
        if (!item.holder && !item.reserved) {
          pick = &item;
          break;
        }
      }
      if (pick != nullptr) Emit(JobEvent::RangeRecomputed{id, pick->lo, pick->hi}, step_);
    }
    if (pick == nullptr) continue;
    pick->holder = id;
    Plan(id, StepPlan{PlanKind::kTrain, step_, epoch_, pick->lo, pick->hi, 0, 0});
  }
  const bool stalled = !work_.empty() && !HasLiveReadyWorker();
  if (stalled && !paused_) {
    Emit(JobEvent::Paused{JobEvent::Paused::Cause::kNoWorker,
                          "no worker left; waiting for one to attach"},
         step_);
  } else if (!stalled && paused_) {
    Emit(JobEvent::Resumed{}, step_);
  }
  paused_ = stalled;
}

void JobState::OnStepFinished() {
  for (const Work& item : work_) {  // held ranges whose confirmation the shards' report overtook
    if (item.holder) Confirm(*item.holder, item.lo, item.hi);
  }
  const Step next(step_.value() + 1);
  JobEvent::StepCompleted completed;
  if (auto loss = losses_.find(step_.value()); loss != losses_.end()) {
    completed.has_loss = true;
    completed.loss = loss->second;
  }
  completed.lr = last_lr_ = step_lr_;
  if (train_samples_ > 0) {
    completed.epoch =
        double(next.value()) * spec_.virtual_workers * spec_.batch_per_vw / double(train_samples_);
  }
  std::sort(step_ranges_.begin(), step_ranges_.end(),
            [](const WorkerRange& a, const WorkerRange& b) { return a.lo < b.lo; });
  completed.ranges = std::move(step_ranges_);
  step_ranges_.clear();
  Emit(std::move(completed), step_);
  // Only the newest completed step's loss is read again (NewestLoss): one a
  // step kept for good would grow the coordinator by 64 bytes a step.
  losses_.erase(losses_.begin(), losses_.lower_bound(step_.value()));
  completions_.push_back(clock_->Now());
  if (completions_.size() > kRateWindow) completions_.pop_front();
  steps_done_ = next.value();
  if (steps_done_ == JobSummary::kWarmupSteps && warmed_up_ == Clock::time_point{})
    warmed_up_ = clock_->Now();
  work_.clear();
  if (next.value() >= spec_.steps) {
    train_ended_ = clock_->Now();
    if (test_samples_ > 0) return StartEval(next);
    return Finalize();
  }
  if (options_.eval_every > 0 && next.value() % options_.eval_every == 0 && test_samples_ > 0) {
    return StartEval(next);
  }
  StartStep(next);
}

void JobState::Confirm(WorkerId w, uint32_t lo, uint32_t hi) {
  Emit(JobEvent::RangeConfirmed{w, lo, hi}, step_);
  step_ranges_.push_back({w, lo, hi});
  HostSucceeded(w);
  WorkerInfo& info = workers_[w];
  if (info.contributed_step != step_) {
    info.contributed_step = step_;
    ++info.steps_contributed;
  }
}

void JobState::StartEval(Step version) {
  phase_ = Phase::kEvaluating;
  eval_version_ = version;
  eval_slices_.clear();
  // One slice per evaluation batch: a batch's loss, summed in float by the
  // worker, is then the same whoever computes it (docs/design.md).
  const int64_t per = std::max<int64_t>(1, spec_.eval_batch);
  for (int64_t lo = 0; lo < test_samples_; lo += per)
    eval_slices_.push_back({lo, std::min(test_samples_, lo + per), std::nullopt, false, 0, 0});
  Progress();
  DispatchEval();
}

void JobState::DispatchEval() {
  for (auto& [id, w] : workers_) {
    if (!(w.alive && w.ready && w.pending)) continue;
    for (EvalSlice& s : eval_slices_) {
      if (!s.done && !s.holder) {
        s.holder = id;
        Plan(id, StepPlan{PlanKind::kEval, eval_version_, epoch_, 0, 0, s.lo, s.hi});
        break;
      }
    }
  }
}

void JobState::Finalize() {
  if (train_ended_ == Clock::time_point{}) train_ended_ = clock_->Now();
  phase_ = Phase::kFinalizing;  // the shell now reads the parameters and writes result.json
}

void JobState::StopWorkers() {
  for (auto& [id, w] : workers_) {
    if (w.alive && w.pending) {
      Plan(id, StepPlan{PlanKind::kStop, Step(steps_done_), epoch_, 0, 0, 0, 0});
      w.alive = false;  // it exits now
    }
  }
  for (WorkerId id : unanswered_registrations_)
    Send(id, ErrorReply{StatusCode::kAborted, "the job is over"});
  unanswered_registrations_.clear();
  if (live_workers() == 0 && phase_ != Phase::kDone) {
    for (uint32_t s = 0; s < shard_bound_; ++s) {
      if (shard_registered_[s]) {
        out_.push_back(
            {Outgoing::To::kShard, s, Shutdown{fatal_.ok() ? "job finished" : fatal_.ToString()}});
      }
    }
    phase_ = Phase::kDone;
  }
}

JobSummary JobState::Summary() const {
  JobSummary s;
  s.steps = steps_done_;
  s.final_loss = NewestLoss().value_or(0.0f);
  s.evaluated = evaluated_;
  s.test_accuracy = test_accuracy_;
  s.test_loss = test_loss_;
  s.workers_seen = workers_joined_;
  const Clock::time_point end = train_ended_ == Clock::time_point{} ? clock_->Now() : train_ended_;
  s.train_time = end - train_started_;
  if (warmed_up_ != Clock::time_point{} && steps_done_ > JobSummary::kWarmupSteps) {
    s.steady_steps = steps_done_ - JobSummary::kWarmupSteps;
    s.steady_time = end - warmed_up_;
  }
  return s;
}

std::vector<WorkerRange> JobState::LiveRanges() const {
  std::vector<WorkerRange> out;
  for (const auto& [id, range] : assignment_) {
    auto it = workers_.find(id);
    if (it == workers_.end() || !it->second.alive || range.first == range.second) continue;
    out.push_back({id, range.first, range.second});
  }
  return out;
}

std::optional<float> JobState::NewestLoss() const {
  if (steps_done_ == 0) return std::nullopt;
  auto it = losses_.find(steps_done_ - 1);
  if (it == losses_.end()) return std::nullopt;
  return it->second;
}

void JobState::ReportProgress() {
  const std::optional<float> loss = NewestLoss();
  if (!loss || train_samples_ == 0) return;
  const double secs = std::chrono::duration<double>(clock_->Now() - train_started_).count();
  const double samples = double(steps_done_) * spec_.virtual_workers * spec_.batch_per_vw;
  Emit(JobEvent::Progress{spec_.steps, samples / double(train_samples_), *loss,
                          secs > 0 ? samples / secs : 0.0, live_workers(), paused_,
                          paused_ ? std::vector<WorkerRange>{} : LiveRanges()},
       Step(steps_done_));
}

}  // namespace eps
