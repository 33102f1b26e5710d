// A worker's Prometheus series (docs/metrics.md, "Workers"), looked up once
// per worker id so that an update is one atomic operation. Every series
// carries host="<WorkerOptions::host>" and, once the worker has an id,
// worker="w<id>"; a new id (a re-registration) moves them to new series and
// stops rendering the old ones. Not thread-safe: the worker's compute thread
// owns it.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/metrics.h"
#include "schema/messages.h"
#include "worker/step_times.h"

namespace eps {

class WorkerMetrics {
 public:
  // `metrics` (not owned) outlives this; null: the series live in a registry of this
  // object's own that nobody serves.
  // `device` and `device_kind` label eps_worker_info (WorkerOptions' fields of those names).
  WorkerMetrics(Metrics* metrics, std::string host, std::string device, std::string device_kind);
  // Stops rendering the series (a pool worker's next job starts fresh ones).
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Registered as `worker`: the series from now on carry worker="w<id>".
  void SetWorker(WorkerId worker);

  void Plan(PlanKind kind);  // a plan taken (train, eval or init; others are not counted)
  void PlanVws(uint32_t vws) { series_.vws->Set(vws); }
  void Vw(double seconds);  // one VW computed in `seconds`
  void Pull(double seconds) { series_.pull_seconds->Observe(seconds); }
  void PushWait(double seconds) { series_.push_wait_seconds->Observe(seconds); }
  // The client's cumulative byte counts: the counters grow by what is new.
  void Transferred(const TransferCounts& counts);

 private:
  struct Series {
    std::array<Counter*, 3> plans{};  // train, eval, init
    Counter* vws_total = nullptr;
    Histogram* vw_seconds = nullptr;
    Histogram* pull_seconds = nullptr;
    Histogram* push_wait_seconds = nullptr;
    Counter* push_bytes = nullptr;
    Counter* pull_bytes = nullptr;
    Gauge* vws = nullptr;
    Gauge* info = nullptr;
  };
  void LookUp(const Labels& labels);
  // Stops rendering every series of `labels`.
  void Remove(const Labels& labels);

  std::unique_ptr<Metrics> own_;  // when none was given
  Metrics* const metrics_;
  const std::string host_;
  const std::string device_;
  const std::string device_kind_;
  Labels labels_;  // of the series in series_
  Series series_;
  int64_t push_bytes_ = 0, pull_bytes_ = 0;  // counted into the counters so far
};

}  // namespace eps
