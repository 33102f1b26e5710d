// The coordinator's Prometheus metrics (docs/metrics.md, "Coordinator"): gauges
// published from the job's status report, counters and the step-time histogram
// from its events. And the job's scrape targets, in Prometheus' file_sd format.
// Not thread-safe: the coordinator's loop owns it (the Metrics registry itself
// may be rendered from any thread).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/metrics.h"
#include "elastic/job_event.h"
#include "schema/messages.h"

namespace eps {

class JobMetrics {
 public:
  explicit JobMetrics(Metrics* metrics);
  // The gauges, from a status report (the workers' series follow its live workers).
  void Publish(const JobStatusReply& status);
  // The counters and the step-duration histogram.
  void OnEvent(const JobEvent& event);

 private:
  Metrics* const metrics_;
  Gauge &step_, &steps_, &epoch_, &loss_, &lr_, &samples_per_s_, &eta_, &workers_, &paused_, &held_,
      &test_accuracy_, &assignment_epoch_, &shards_, &map_generation_, &resharding_;
  Counter& rollbacks_;
  Counter &reshards_, &reshard_bytes_;
  Histogram& step_seconds_;
  std::optional<Clock::time_point> last_step_at_;
};

// RUN_DIR/prometheus_targets.json for `status`: the coordinator (its metrics
// address `coordinator`, empty: none), the registered shards and the live
// workers that serve metrics, each with labels eps_job, eps_role and
// eps_shard / eps_worker.
std::string PrometheusTargets(const JobStatusReply& status, const std::string& coordinator);

}  // namespace eps
