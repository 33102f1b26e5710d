#include "elastic/job_metrics.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace eps {
namespace {

Labels WorkerLabels(const WorkerStatus& w) {
  return {{"worker", "w" + std::to_string(w.worker.value())}, {"host", w.host}};
}

const char* MembershipKind(const JobEvent& event) {
  using E = JobEvent;
  if (std::holds_alternative<E::WorkerJoined>(event.what)) return "join";
  if (std::holds_alternative<E::WorkerLeft>(event.what)) return "leave";
  if (const auto* dead = std::get_if<E::WorkerDead>(&event.what)) {
    // A worker that registers again to learn a new shard map did not die.
    return dead->cause == E::WorkerDead::Cause::kResharded ? nullptr : "death";
  }
  if (std::holds_alternative<E::WorkerRefused>(event.what)) return "refused";
  return nullptr;
}

}  // namespace

JobMetrics::JobMetrics(Metrics* m)
    : metrics_(m),
      step_(m->GetGauge("eps_step", "Training steps done.")),
      steps_(m->GetGauge("eps_job_steps", "The job's length in steps (0: not known yet).")),
      epoch_(m->GetGauge("eps_epoch", "Passes over the training data so far.")),
      loss_(m->GetGauge("eps_loss", "Mean training loss of the newest step.")),
      lr_(m->GetGauge("eps_learning_rate", "Learning rate of the newest step.")),
      samples_per_s_(m->GetGauge("eps_samples_per_second",
                                 "Training samples per second over the newest steps.")),
      eta_(m->GetGauge("eps_eta_seconds",
                       "Seconds to the end of training at the current rate (-1: unknown).")),
      workers_(m->GetGauge("eps_workers", "Live workers holding VWs.")),
      paused_(m->GetGauge("eps_paused", "1 while training waits for workers.")),
      held_(m->GetGauge("eps_held",
                        "1 while an operator's hold keeps the job waiting (elasticps hold).")),
      test_accuracy_(
          m->GetGauge("eps_test_accuracy", "Test accuracy of the newest evaluation (0: none).")),
      assignment_epoch_(
          m->GetGauge("eps_assignment_epoch", "The VW assignment's epoch (changes on replans).")),
      shards_(m->GetGauge("eps_shards", "Shards in the job's shard map.")),
      map_generation_(
          m->GetGauge("eps_shard_map_generation",
                      "The shard map's generation (one more at each change of shards).")),
      resharding_(m->GetGauge("eps_resharding", "1 while shard state moves between shards.")),
      rollbacks_(m->GetCounter("eps_rollbacks_total",
                               "Rollbacks to a durable step after a shard restarted.")),
      reshards_(m->GetCounter("eps_reshards_total",
                              "Moves of shard state committed (shards added or removed).")),
      reshard_bytes_(m->GetCounter("eps_reshard_bytes_total",
                                   "Bytes of shard state moved (values and optimizer slots).")),
      step_seconds_(m->GetHistogram("eps_step_duration_seconds",
                                    "Seconds from one step's completion to the next's.",
                                    ExponentialBuckets(0.005, 2, 14))) {
  for (const char* kind : {"join", "leave", "death", "refused"}) {
    m->GetCounter("eps_membership_changes_total", "Workers joining, leaving, dying or refused.",
                  {{"kind", kind}});
  }
}

void JobMetrics::Publish(const JobStatusReply& s) {
  step_.Set(double(s.step));
  steps_.Set(double(s.steps));
  epoch_.Set(s.epoch);
  if (s.has_loss) loss_.Set(s.loss);
  lr_.Set(s.lr);
  samples_per_s_.Set(s.samples_per_s);
  eta_.Set(s.eta_s);
  paused_.Set(s.paused ? 1 : 0);
  held_.Set(s.phase == "held" ? 1 : 0);
  if (s.evaluated) test_accuracy_.Set(s.test_accuracy);
  assignment_epoch_.Set(double(s.assignment_epoch.value()));
  map_generation_.Set(double(s.map_generation));
  resharding_.Set(s.resharding ? 1 : 0);
  shards_.Set(double(std::count_if(s.shards.begin(), s.shards.end(),
                                   [](const ShardStatus& sh) { return sh.role != "spare"; })));
  std::vector<Labels> live;
  double holding = 0;
  for (const WorkerStatus& w : s.workers) {
    if (w.state != "ready" && w.state != "registered") continue;
    const Labels labels = WorkerLabels(w);
    live.push_back(labels);
    const uint32_t vws = w.vw_hi - w.vw_lo;
    holding += vws > 0 ? 1 : 0;
    metrics_
        ->GetGauge("eps_worker_seconds_per_vw",
                   "The coordinator's estimate of a worker's compute seconds per VW (0: none).",
                   labels)
        .Set(w.seconds_per_vw);
    metrics_->GetGauge("eps_worker_vws", "VWs a worker holds in the current assignment.", labels)
        .Set(vws);
  }
  workers_.Set(holding);
  metrics_->RemoveAllBut("eps_worker_seconds_per_vw", live);
  metrics_->RemoveAllBut("eps_worker_vws", live);
}

void JobMetrics::OnEvent(const JobEvent& event) {
  if (const char* kind = MembershipKind(event)) {
    metrics_
        ->GetCounter("eps_membership_changes_total", "Workers joining, leaving, dying or refused.",
                     {{"kind", kind}})
        .Add();
  } else if (std::holds_alternative<JobEvent::StepCompleted>(event.what)) {
    if (last_step_at_)
      step_seconds_.Observe(std::chrono::duration<double>(event.at - *last_step_at_).count());
    last_step_at_ = event.at;
  } else if (const auto* moved = std::get_if<JobEvent::Resharded>(&event.what)) {
    reshards_.Add();
    reshard_bytes_.Add(double(moved->bytes_in));
    last_step_at_.reset();  // the move is not a step's time
  } else if (std::holds_alternative<JobEvent::RollingBack>(event.what) ||
             std::holds_alternative<JobEvent::StartingOver>(event.what)) {
    rollbacks_.Add();
    last_step_at_.reset();
  } else if (std::holds_alternative<JobEvent::Paused>(event.what) ||
             std::holds_alternative<JobEvent::Evaluated>(event.what)) {
    last_step_at_.reset();  // a pause or an evaluation is not a step's time
  }
}

std::string PrometheusTargets(const JobStatusReply& status, const std::string& coordinator) {
  nlohmann::json targets = nlohmann::json::array();
  auto add = [&](const std::string& address, nlohmann::json labels) {
    if (address.empty()) return;
    labels["eps_job"] = status.job_id;
    targets.push_back({{"targets", {address}}, {"labels", std::move(labels)}});
  };
  add(coordinator, {{"eps_role", "coordinator"}});
  for (const ShardStatus& s : status.shards) {
    if (s.registered)
      add(s.metrics_address,
          {{"eps_role", "shard"}, {"eps_shard", std::to_string(s.shard.value())}});
  }
  for (const WorkerStatus& w : status.workers) {
    if (w.state == "ready" || w.state == "registered")
      add(w.metrics_address,
          {{"eps_role", "worker"}, {"eps_worker", "w" + std::to_string(w.worker.value())}});
  }
  return targets.dump(2) + "\n";
}

}  // namespace eps
