// JobState::StatusReport: the job as `elasticps status` and the metrics show it.
#include <algorithm>

#include "elastic/job_state.h"

namespace eps {
namespace {

const char* PhaseName(JobState::Phase phase) {
  switch (phase) {
    case JobState::Phase::kStarting:
      return "starting";
    case JobState::Phase::kInitializing:
      return "initializing";
    case JobState::Phase::kTraining:
      return "training";
    case JobState::Phase::kHeld:
      return "held";
    case JobState::Phase::kResharding:
      return "resharding";
    case JobState::Phase::kEvaluating:
      return "evaluating";
    case JobState::Phase::kRollingBack:
      return "rolling back";
    case JobState::Phase::kResuming:
      return "resuming";
    case JobState::Phase::kFinalizing:
      return "finalizing";
    case JobState::Phase::kStopping:
      return "stopping";
    case JobState::Phase::kDone:
      return "done";
  }
  return "unknown";
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

JobStatusReply JobState::StatusReport() const {
  const Clock::time_point now = clock_->Now();
  JobStatusReply r;
  r.job_id = spec_.job_id;
  r.model = spec_.model;
  r.phase = PhaseName(phase_);
  r.paused = paused_;
  r.hold_from = hold_from_ ? hold_from_->value() : -1;
  r.cpu_kernels = JobCpuKernels();
  r.step = steps_done_;
  r.steps = spec_.steps;
  r.virtual_workers = spec_.virtual_workers;
  r.batch_per_vw = spec_.batch_per_vw;
  r.assignment_epoch = epoch_;
  const double samples_per_step = double(spec_.virtual_workers) * spec_.batch_per_vw;
  if (train_samples_ > 0) r.epoch = steps_done_ * samples_per_step / double(train_samples_);
  if (const std::optional<float> loss = NewestLoss()) {
    r.has_loss = true;
    r.loss = *loss;
  }
  r.lr = last_lr_;
  if (phase_ != Phase::kStarting && phase_ != Phase::kInitializing) {
    const Clock::time_point end = train_ended_ == Clock::time_point{} ? now : train_ended_;
    r.elapsed_s = Seconds(end - train_started_);
  }
  // The rate of the newest steps; a pause counts, as it does for the end of the job.
  if (completions_.size() >= 2) {
    const double span = Seconds(completions_.back() - completions_.front());
    const double per_step = span / double(completions_.size() - 1);
    if (per_step > 0) {
      r.samples_per_s = samples_per_step / per_step;
      if (spec_.steps > 0 && phase_ != Phase::kDone && phase_ != Phase::kFinalizing)
        r.eta_s = std::max<int64_t>(0, spec_.steps - steps_done_) * per_step;
    }
  }
  r.evaluated = evaluated_;
  r.test_accuracy = test_accuracy_;
  for (const auto& [id, w] : workers_) {
    WorkerStatus o;
    o.worker = id;
    o.host = w.host;
    o.pid = w.pid;
    o.device_kind = w.device_kind;
    o.cpu_kernels = w.cpu_kernels;
    o.state = w.alive ? (w.ready ? "ready" : "registered") : (w.left ? "left" : "dead");
    if (auto a = assignment_.find(id); w.alive && a != assignment_.end()) {
      o.vw_lo = a->second.first;
      o.vw_hi = a->second.second;
    }
    if (auto speed = speeds_.Estimate(id)) o.seconds_per_vw = *speed;
    o.since_heartbeat_s = Seconds(now - w.last_seen);
    o.steps_contributed = w.steps_contributed;
    r.workers.push_back(std::move(o));
  }
  r.map_generation = layout_.map.generation;
  r.resharding = move_.has_value();
  for (uint32_t s = 0; s < shard_bound_; ++s) {
    if (!IsMember(s) && !shard_registered_[s]) continue;
    ShardStatus o;
    o.role = ShardRole(s);
    o.shard = ShardId(s);
    o.address = shard_addresses_[s];
    o.registered = shard_registered_[s];
    o.version = Step(shard_done_[s].value() + 1);
    o.durable_step = shard_durable_[s];
    if (shard_durable_at_[s]) o.since_checkpoint_s = Seconds(now - *shard_durable_at_[s]);
    o.bytes_in = shard_bytes_in_[s];
    o.bytes_out = shard_bytes_out_[s];
    r.shards.push_back(std::move(o));
  }
  return r;
}

}  // namespace eps
