// The inter-job scheduler's policy: which job each worker of a shared pool
// (idle GPUs, serving nodes) trains, round by round.
//
// A job's throughput on a set of workers is modelled with the job's own planner
// (elastic/planner.h): samples/s = V * batch_per_vw / bottleneck, where worker
// w's seconds per VW step are job.seconds_per_vw[w.device_type] / w.speed. Each
// round grows an allocation greedily: it repeatedly gives the job with the
// largest weighted marginal gain per added worker its next workers (the
// fastest for that job first; a bundle of k > 1 workers counts gain / k, which
// covers min_workers and the steps of the integer VW split). It builds two
// allocations: the current one topped up with the free workers (no move), and
// one from scratch, then improved by swapping pairs of workers between jobs
// while that raises the total (greedy alone can give the fastest worker to the
// job that gains most in absolute terms rather than the one it speeds up
// most). It takes the second only if its weighted throughput beats the
// first's by more than `move_threshold`, so rounds do not shuffle workers for
// nothing. Every change comes out as a decision with its reason, numbers
// included.
//
// Cost: a pick tries, for each job, bundles of its k fastest free workers:
// O(J x P) planner calls per pick and up to P picks, plus swap passes over
// distinct (job, device type, speed) pairs. Measured here: 20 jobs on 200
// workers, 0.3 s per round; 30 jobs on 20 workers, 17 ms.
//
// Pure, deterministic (ties go to the earlier job, then the worker already
// there, then the lower worker id), no I/O; thread-compatible. A process wraps
// it: it asks the coordinators for jobs and speeds, moves workers through them
// (graceful leave, then attach) and logs the decisions. The simulator
// (elastic/simulator.h) calls the same Schedule().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "elastic/planner.h"

namespace eps {

// A worker of the pool.
struct PoolWorker {
  WorkerId id;
  std::string device_type;  // e.g. "A100"
  double speed = 1.0;       // this worker's factor on its type's speed (a slowed worker: 0.5)
};

// A job as the scheduler sees it.
struct SchedulerJob {
  std::string id;
  uint32_t virtual_workers = 0;  // V
  uint32_t batch_per_vw = 1;
  // Seconds per VW step on each device type; a type not listed cannot run the job.
  std::map<std::string, double> seconds_per_vw;
  uint32_t min_workers = 1;  // it makes no progress with fewer
  uint32_t max_workers = 0;  // 0: V
  uint32_t max_vws_per_worker = 0;
  PlannerKind planner = PlannerKind::kSpeed;
  bool single_device_type = false;  // all its workers must be of one type (a homogeneous-only job)
  // Gains are weight x samples/s, so the caller makes jobs comparable: e.g.
  // 1 / remaining samples favours jobs close to the end (shortest remaining first).
  double weight = 1.0;
  // Optional: samples/s on these workers (measured curves), used instead of the planner's model.
  std::function<double(const std::vector<PoolWorker>&)> throughput;
};

// Samples/s of `job` on `workers`: 0 with fewer than min_workers (or more than
// max_workers) workers, with a worker whose type the job cannot use, or when
// the plan is infeasible (cap).
double JobThroughput(const SchedulerJob& job, const std::vector<PoolWorker>& workers);

struct SchedulerOptions {
  // A round moves busy workers only if that raises the weighted throughput by more than this
  // fraction.
  double move_threshold = 0.05;
};

// One worker changes job. An empty job id means idle.
struct SchedulerDecision {
  WorkerId worker;
  std::string from_job, to_job;
  std::string reason;
};

struct ScheduleResult {
  std::map<WorkerId, std::string> allocation;  // the busy workers and their jobs
  std::map<std::string, double> throughput;    // samples/s of every job under `allocation`
  double objective = 0;                        // sum of weight x throughput
  bool rebalanced = false;                   // busy workers moved (the from-scratch allocation won)
  std::vector<SchedulerDecision> decisions;  // in worker-id order
};

// One round. `jobs` in priority order (e.g. arrival); `current`: worker -> job
// now (entries for workers not in the pool are ignored; a job not in `jobs` has
// finished or left, its workers are free).
// InvalidArgument for duplicate ids, V = 0, a time that is not finite and > 0,
// a weight that is not finite and >= 0, or max_workers < min_workers.
StatusOr<ScheduleResult> Schedule(const std::vector<SchedulerJob>& jobs,
                                  const std::vector<PoolWorker>& pool,
                                  const std::map<WorkerId, std::string>& current,
                                  const SchedulerOptions& options = {});

}  // namespace eps
