#include "worker/worker_metrics.h"

#include <memory>
#include <utility>

namespace eps {
namespace {

constexpr const char* kPlanKinds[] = {"train", "eval", "init"};

// Names, help texts and buckets: docs/metrics.md lists the same.
constexpr const char kPlans[] = "eps_worker_plans_total";
constexpr const char kVwsTotal[] = "eps_worker_vws_total";
constexpr const char kVwSeconds[] = "eps_worker_vw_seconds";
constexpr const char kPullSeconds[] = "eps_worker_pull_seconds";
constexpr const char kPushWaitSeconds[] = "eps_worker_push_wait_seconds";
constexpr const char kPushBytes[] = "eps_worker_push_bytes_total";
constexpr const char kPullBytes[] = "eps_worker_pull_bytes_total";
constexpr const char kVws[] = "eps_worker_vws";
constexpr const char kInfo[] = "eps_worker_info";

Labels With(Labels labels, const std::string& name, const std::string& value) {
  labels[name] = value;
  return labels;
}

}  // namespace

WorkerMetrics::WorkerMetrics(Metrics* metrics, std::string host, std::string device,
                             std::string device_kind)
    : own_(metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
      metrics_(metrics != nullptr ? metrics : own_.get()),
      host_(std::move(host)),
      device_(std::move(device)),
      device_kind_(std::move(device_kind)) {
  LookUp({{"host", host_}});
}

WorkerMetrics::~WorkerMetrics() { Remove(labels_); }

void WorkerMetrics::SetWorker(WorkerId worker) {
  Labels labels{{"host", host_}, {"worker", "w" + std::to_string(worker.value())}};
  if (labels == labels_) return;
  Remove(labels_);
  LookUp(labels);
}

void WorkerMetrics::LookUp(const Labels& labels) {
  labels_ = labels;
  Metrics& m = *metrics_;
  for (size_t k = 0; k < series_.plans.size(); ++k) {
    series_.plans[k] =
        &m.GetCounter(kPlans, "Plans the worker took from the coordinator, by kind.",
                      With(labels, "kind", kPlanKinds[k]));
  }
  series_.vws_total = &m.GetCounter(kVwsTotal, "VWs the worker computed (forward and backward).",
                                    labels);
  series_.vw_seconds =
      &m.GetHistogram(kVwSeconds, "Compute seconds per VW (forward, backward, any slowdown).",
                      ExponentialBuckets(0.0005, 2, 16), labels);
  series_.pull_seconds = &m.GetHistogram(
      kPullSeconds, "Seconds a train plan waited to pull its parameters into the model.",
      ExponentialBuckets(0.0001, 2, 18), labels);
  series_.push_wait_seconds = &m.GetHistogram(
      kPushWaitSeconds, "Seconds a train plan waited for the shards to acknowledge its pushes.",
      ExponentialBuckets(0.0001, 2, 18), labels);
  series_.push_bytes = &m.GetCounter(
      kPushBytes, "Bytes the worker pushed to shards, inline or in shared memory.", labels);
  series_.pull_bytes = &m.GetCounter(
      kPullBytes, "Bytes the worker pulled from shards, inline or in shared memory.", labels);
  series_.vws = &m.GetGauge(kVws, "VWs of the worker's current (or last) train plan.", labels);
  series_.info = &m.GetGauge(kInfo, "1, labelled with what the worker computes on.",
                             With(With(labels, "device", device_), "device_kind", device_kind_));
  series_.info->Set(1);
}

void WorkerMetrics::Remove(const Labels& labels) {
  for (const char* kind : kPlanKinds) metrics_->Remove(kPlans, With(labels, "kind", kind));
  for (const char* name :
       {kVwsTotal, kVwSeconds, kPullSeconds, kPushWaitSeconds, kPushBytes, kPullBytes, kVws}) {
    metrics_->Remove(name, labels);
  }
  metrics_->Remove(kInfo, With(With(labels, "device", device_), "device_kind", device_kind_));
}

void WorkerMetrics::Plan(PlanKind kind) {
  switch (kind) {
    case PlanKind::kTrain:
      series_.plans[0]->Add();
      break;
    case PlanKind::kEval:
      series_.plans[1]->Add();
      break;
    case PlanKind::kInit:
      series_.plans[2]->Add();
      break;
    case PlanKind::kWait:
    case PlanKind::kStop:
      break;
  }
}

void WorkerMetrics::Vw(double seconds) {
  series_.vws_total->Add();
  series_.vw_seconds->Observe(seconds);
}

void WorkerMetrics::Transferred(const TransferCounts& counts) {
  series_.push_bytes->Add(static_cast<double>(counts.push_bytes - push_bytes_));
  series_.pull_bytes->Add(static_cast<double>(counts.pull_bytes - pull_bytes_));
  push_bytes_ = counts.push_bytes;
  pull_bytes_ = counts.pull_bytes;
}

}  // namespace eps
