// JobState's side of the shards and of durable state: shard registrations
// and restarts, the rollback to the newest checkpoint every shard holds (or a
// start over), checkpoint retention, and resuming after a coordinator
// restart. The rest of the state machine is in job_state.cc; the class and
// its contract are in job_state.h.
#include <algorithm>
#include <limits>

#include "elastic/job_state.h"

namespace eps {

Status JobState::OnShardRegistered(ShardId shard, const std::string& address, Step durable_step,
                                   Step version, bool new_peer) {
  if (shard.value() >= kMaxShardId) {
    return InvalidArgument("shard id " + std::to_string(shard.value()) + " is not below " +
                           std::to_string(kMaxShardId));
  }
  const uint32_t s = shard.value();
  shard_bound_ = std::max(shard_bound_, s + 1);
  shard_seen_[s] = clock_->Now();
  if (removed_.count(s)) {  // its state moved away: it has nothing to do
    out_.push_back({Outgoing::To::kShard, s, Shutdown{"removed from the job: its state moved"}});
    return OkStatus();
  }
  if (shard_registered_[s] && !new_peer && shard_addresses_[s] == address) {
    // A beacon. It also stands in for a step report lost while no coordinator listened.
    if (durable_step > shard_durable_[s]) {
      shard_durable_[s] = durable_step;
      Emit(JobEvent::CheckpointDurable{shard}, durable_step);
    }
    UpdateRetention();
    if (phase_ == Phase::kTraining || phase_ == Phase::kEvaluating) {
      shard_done_[s] = std::max(shard_done_[s], Step(version.value() - 1));
      Advance();
    }
    return OkStatus();
  }
  // A shard restored from its store serves its newest checkpoint, even if it does not say so.
  shard_version_[s] = std::max(version, durable_step);
  const bool restarted = IsMember(s) && shard_registered_[s] && phase_ != Phase::kStarting &&
                         phase_ != Phase::kResuming && phase_ < Phase::kFinalizing;
  const bool again = shard_registered_[s];
  refused_.clear();  // a shard registered anew: a move refused before may go now
  const bool moved = again && shard_addresses_[s] != address;
  shard_registered_[s] = true;
  shard_addresses_[s] = address;
  shard_durable_[s] = durable_step;
  Emit(JobEvent::ShardRegistered{shard, address, durable_step, restarted}, CurrentStep());
  if (!tensors_.empty()) out_.push_back({Outgoing::To::kShard, s, Config()});
  if (again && !IsMember(s)) {
    // A spare or a leaving shard restarted: a move it takes part in starts again.
    GiveUpReshard("shard " + std::to_string(s) + " restarted", /*retry=*/true);
  } else if (moved) {
    // Workers learn shard addresses when they register: make them register again.
    for (auto& [id, w] : workers_) {
      if (!w.alive) continue;
      JobEvent::WorkerDead dead{id, JobEvent::WorkerDead::Cause::kShardMoved, 0, shard, {}};
      dead.moved = DeclareDead(id);
      Emit(std::move(dead), CurrentStep());
    }
  }
  if (restarted) StartRollback(shard, durable_step);
  retain_sent_ = Step(-2);  // the new peer learns the floor
  UpdateRetention();
  // A spare waits for the next step boundary, or is taken in now while the job is held.
  if (phase_ == Phase::kHeld && !resumed_step_held_) MaybeStartReshard(step_);
  Advance();
  return OkStatus();
}

// Every shard must keep the newest step all of them hold durably (a rollback
// target) until all hold a newer one: their durable steps drift apart by the
// checkpoints still in their writers, so "the newest N" alone could leave the
// shards without a common step.
void JobState::UpdateRetention() {
  if (!AllShardsRegistered()) return;
  Step floor(std::numeric_limits<int64_t>::max());
  for (uint32_t s : members_) floor = std::min(floor, shard_durable_[s]);
  if (floor.value() < 0 || floor == retain_sent_) return;  // none yet: the shards keep everything
  retain_sent_ = floor;
  for (uint32_t s : members_) out_.push_back({Outgoing::To::kShard, s, Retain{floor}});
}

void JobState::Resume(const Resumed& r) {
  tensors_ = r.tensors;
  auto layout = MakeLayout(tensors_, spec_.num_shards, spec_.chunk_elems);
  if (!layout.ok()) return Fail(layout.status().WithContext("the stored model"));
  layout_ = std::move(layout).value();
  if (r.map) {
    if (Status st = layout_.SetShardMap(*r.map); !st.ok())
      return Fail(st.WithContext("the stored shard map"));
    members_.clear();
    for (ShardId s : layout_.map.Shards()) members_.push_back(s.value());
    shard_bound_ = std::max(shard_bound_, layout_.map.IdBound());
  }
  removed_.clear();
  for (ShardId s : r.removed_shards) removed_.insert(s.value());
  spec_.steps = r.steps;
  train_samples_ = r.train_samples;
  test_samples_ = r.test_samples;
  epoch_ = r.epoch;
  next_worker_ =
      r.next_worker;  // ids are never reused: a new worker must not inherit an old one's beats
  resume_ranges_ = r.ranges;
  hold_from_ = r.hold_from;  // the step in flight is recomputed; a step the hold covers waits
  timeline_ = r.timeline;
  phase_ = Phase::kResuming;
  Emit(JobEvent::CoordinatorResuming{spec_.job_id, spec_.steps, epoch_}, std::nullopt);
}

// Every shard registered again: the job goes on at the oldest version a shard serves.
void JobState::FinishResume() {
  uint32_t lowest = members_.front();
  Step highest = shard_version_[lowest];
  for (uint32_t s : members_) {
    if (shard_version_[s] < shard_version_[lowest]) lowest = s;
    highest = std::max(highest, shard_version_[s]);
  }
  Step t = shard_version_[lowest];
  if (t.value() >= 0 && highest.value() - t.value() > 1) {
    // A shard restarted from an older checkpoint while no coordinator ran: the
    // shards are more than one step apart, so the job rolls back as for any restart.
    resume_ranges_.clear();
    phase_ = Phase::kTraining;  // StartRollback leaves it for kRollingBack
    return StartRollback(ShardId(lowest), t);
  }
  if (t.value() < 0) {
    Emit(JobEvent::StartingOver{std::nullopt, false}, std::nullopt);
    phase_ = Phase::kStarting;
    return;
  }
  for (uint32_t s : members_) shard_done_[s] = Step(shard_version_[s].value() - 1);
  steps_done_ = t.value();
  train_started_ = clock_->Now();
  Emit(JobEvent::CoordinatorResumed{}, t);
  if (t.value() >= spec_.steps) {
    train_ended_ = clock_->Now();
    if (test_samples_ > 0) return StartEval(t);
    return Finalize();
  }
  step_ = t;
  if (HeldAt(t)) {  // the step in flight waits for the release, in the same ranges
    resumed_step_held_ = true;
    return EnterHold();
  }
  ResumeStep();
}

void JobState::ResumeStep() {
  // The step in flight is recomputed in the last assignment's ranges, by whoever asks.
  phase_ = Phase::kTraining;
  resumed_step_held_ = false;
  work_.clear();
  for (const auto& [lo, hi] : resume_ranges_) work_.push_back({lo, hi, std::nullopt, std::nullopt});
  resume_ranges_.clear();
  Progress();
  DispatchTrain();
}

std::vector<std::pair<uint32_t, uint32_t>> JobState::AssignmentRanges() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& [id, range] : assignment_) {
    if (range.second > range.first) out.push_back(range);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void JobState::StartRollback(ShardId restarted, Step durable_step) {
  if (move_ && move_->committing) {
    EndCommittedMove();  // the restarted shard got the new map as it registered
  } else {
    AbandonReshard("shard " + std::to_string(restarted.value()) + " restarted", /*retry=*/true);
  }
  Step target = durable_step;
  for (uint32_t s : members_) target = std::min(target, shard_durable_[s]);
  if (target.value() < 0) {
    // No step every shard holds: back to the initial values, which a worker
    // pushes again (they depend only on the seed), and the job replays from step 0.
    target = Step(-1);
    Emit(JobEvent::StartingOver{restarted, durable_step.value() >= 0}, target);
  } else {
    Emit(JobEvent::RollingBack{restarted, durable_step}, target);
  }
  phase_ = Phase::kRollingBack;
  rollback_step_ = target;
  ++timeline_;  // every pull of the plans before it is of an abandoned future
  rollback_acked_.assign(kMaxShardId, true);
  for (uint32_t s : members_) rollback_acked_[s] = false;
  work_.clear();
  eval_slices_.clear();
  for (uint32_t s : members_)
    out_.push_back({Outgoing::To::kShard, s, Rollback{target, timeline_}});
  Progress();
}

Status JobState::OnRollbackDone(const RollbackDone& done) {
  const uint32_t s = done.shard.value();
  if (s >= kMaxShardId || !shard_registered_[s])
    return NotFound("rollback report from an unknown shard");
  if (phase_ != Phase::kRollingBack || done.step != rollback_step_) return OkStatus();  // stale
  if (done.code != StatusCode::kOk) {
    Fail(done.ToStatus().WithContext("shard " + std::to_string(s) +
                                     " could not roll back to step " +
                                     std::to_string(done.step.value())));
    return OkStatus();
  }
  rollback_acked_[s] = true;
  shard_durable_[s] = done.durable_step;
  UpdateRetention();
  if (std::all_of(rollback_acked_.begin(), rollback_acked_.end(), [](bool b) { return b; })) {
    // Every shard serves version R: the job goes on from step R (from its
    // initialization for R = -1: the shards hold nothing).
    const Step r = rollback_step_;
    for (uint32_t s : members_) shard_done_[s] = Step(r.value() - 1);
    losses_.erase(losses_.lower_bound(r.value()), losses_.end());
    steps_done_ = std::max<int64_t>(r.value(), 0);
    for (auto& [id, w] : workers_) w.done_step = std::min(w.done_step, Step(r.value() - 1));
    Emit(JobEvent::RolledBack{}, r);
    if (r.value() < 0) {
      phase_ = Phase::kStarting;
    } else {
      StartStep(r);
    }
  }
  Progress();
  Advance();
  return OkStatus();
}

}  // namespace eps
