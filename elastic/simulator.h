// A trace-driven, event-driven simulator of a shared heterogeneous GPU cluster,
// to compare scheduling policies on average job completion time (JCT) and
// makespan without running anything. It calls the real planner
// (elastic/planner.h) and scheduler (elastic/scheduler.h), not copies.
//
// Trace: CSV text, one job per line, '#' starts a comment line; the header
// names the columns, in any order:
//   arrival_s      submission time, seconds
//   job_id         unique name
//   steps          training steps (each step runs all V VWs once)
//   v              virtual workers
//   batch_per_vw   samples per VW per step
//   gpus           GPUs the job asks for when it cannot scale (the fifo policy)
//   t_<TYPE>       seconds per VW step on device type TYPE; empty: cannot run there
//
// Policies:
//   fifo            non-elastic: in arrival order, the head job waits until `gpus`
//                   GPUs of one type are free, takes the fastest such type, keeps
//                   them to the end (no backfilling); VWs split evenly.
//   elastic-homo    elastic (1..V workers, changed at every arrival and completion
//                   by Schedule()), but each job on one device type only.
//   elastic-hetero  elastic across device types, VWs placed by the speed-aware planner.
// The scheduler's job weight is 1 / remaining samples (shortest remaining first).
// Every change of a job's worker set (its start included, in every policy)
// stalls that job for `rescale_s`.
//
// Pure and deterministic; no I/O (simulator_main.cc reads files and prints).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eps {

struct TraceJob {
  std::string id;
  double arrival_s = 0;
  int64_t steps = 0;
  uint32_t v = 0;
  uint32_t batch_per_vw = 1;
  uint32_t gpus = 1;
  std::map<std::string, double> seconds_per_vw;  // per device type
};

// InvalidArgument (with the line number) for a malformed trace.
StatusOr<std::vector<TraceJob>> ParseTrace(const std::string& csv);
// The inverse, with `comment` lines (each prefixed "# ") first.
std::string FormatTrace(const std::vector<TraceJob>& jobs, const std::string& comment = "");

// Device types and how many GPUs of each, e.g. "A100:4,V100:8,T4:8".
struct ClusterSpec {
  std::vector<std::pair<std::string, uint32_t>> types;
};
StatusOr<ClusterSpec> ParseCluster(const std::string& spec);
std::string FormatCluster(const ClusterSpec& cluster);

enum class Policy { kFifo, kElasticHomo, kElasticHetero };
const char* PolicyName(Policy policy);
// "fifo", "elastic-homo" or "elastic-hetero".
StatusOr<Policy> ParsePolicy(const std::string& name);

struct SimulatorOptions {
  Policy policy = Policy::kElasticHetero;
  double rescale_s = 10;            // stall of a job whenever its worker set changes
  uint32_t max_vws_per_worker = 0;  // the planner's cap (0: none)
  double move_threshold = 0.05;     // the scheduler's
  bool record_decisions = false;    // fill SimulationResult::log
};

struct JobResult {
  std::string id;
  double arrival_s = 0, start_s = 0, finish_s = 0;
  double jct_s = 0;            // finish - arrival
  uint64_t reallocations = 0;  // changes of its worker set after the start
};

struct SimulationResult {
  Policy policy = Policy::kFifo;
  std::vector<JobResult> jobs;  // in trace order
  double avg_jct_s = 0;
  double makespan_s = 0;         // last finish - first arrival
  double busy_gpu_fraction = 0;  // GPU-seconds held by jobs / (GPUs x makespan)
  uint64_t moves = 0;            // worker moves the scheduler decided
  std::vector<std::string> log;  // "t=...: decision" lines, if record_decisions
};

// InvalidArgument when a job can run on no device type of the cluster, or
// (fifo) asks for more GPUs than any type it can run on has.
StatusOr<SimulationResult> Simulate(const std::vector<TraceJob>& trace, const ClusterSpec& cluster,
                                    const SimulatorOptions& options);

// A table for humans: per policy, average JCT, makespan, and FIFO's divided by
// each (the improvement factor; needs a fifo row, else no ratio columns).
std::string FormatTable(const std::vector<SimulationResult>& results);
// The same numbers as CSV:
// policy,jobs,avg_jct_s,makespan_s,jct_speedup_vs_fifo,makespan_speedup_vs_fifo,busy_gpu_fraction,moves
std::string FormatCsv(const std::vector<SimulationResult>& results);
// Per job and policy: policy,job_id,arrival_s,start_s,finish_s,jct_s,reallocations
std::string FormatJobsCsv(const std::vector<SimulationResult>& results);

// A synthetic trace: Poisson arrivals, job sizes log-uniform, models drawn from
// a few speed profiles. Deterministic for a seed (its own generator, not
// std:: distributions; arrivals are rounded to 0.1 s and steps to integers, so
// libm's last bits do not show).
struct TraceGenOptions {
  uint64_t seed = 1;
  uint32_t jobs = 30;
  double mean_interarrival_s = 300;
  int64_t min_steps = 500, max_steps = 20000;
};
std::vector<TraceJob> GenerateTrace(const TraceGenOptions& options);
// The profiles and distributions GenerateTrace draws from, as comment text.
std::string DescribeTraceGen(const TraceGenOptions& options);

}  // namespace eps
