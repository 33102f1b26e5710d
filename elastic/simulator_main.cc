// simulator: replays a job trace on a simulated heterogeneous cluster under
// several scheduling policies and prints average JCT and makespan per policy
// (elastic/simulator.h). scripts/simulate.sh wraps it and draws the plot.
//
//   simulator --trace=examples/traces/small.csv --cluster=A100:4,V100:8,T4:8
//   simulator --generate_trace --seed=1 --jobs=30 > trace.csv
#include <gflags/gflags.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "elastic/simulator.h"

DEFINE_string(trace, "", "The job trace (CSV, see elastic/simulator.h)");
DEFINE_string(cluster, "A100:4,V100:8,T4:8", "GPUs per device type, TYPE:COUNT,...");
DEFINE_string(policies, "fifo,elastic-homo,elastic-hetero",
              "Policies to compare (fifo is the ratios' base)");
DEFINE_double(rescale_s, 10,
              "Seconds a job stalls whenever its set of workers changes (its start included)");
DEFINE_uint32(max_vws_per_worker, 0, "The planner's cap of VWs per worker (0: none)");
DEFINE_double(move_threshold, 0.05,
              "The scheduler moves busy workers only for more than this relative gain");
DEFINE_bool(csv, false, "Print the table as CSV");
DEFINE_string(jobs_csv, "", "Also write per-job results (CSV) to this file");
DEFINE_bool(log_decisions, false, "Print every scheduler decision with its reason (to stderr)");
DEFINE_bool(generate_trace, false, "Print a synthetic trace instead (flags below) and exit");
DEFINE_uint64(seed, 1, "--generate_trace: seed");
DEFINE_uint32(jobs, 30, "--generate_trace: number of jobs");
DEFINE_double(mean_interarrival_s, 300, "--generate_trace: mean gap between arrivals (Poisson)");
DEFINE_int64(min_steps, 500, "--generate_trace: fewest steps of a job");
DEFINE_int64(max_steps, 20000, "--generate_trace: most steps of a job");

namespace {

int Fail(const eps::Status& status) {
  std::fprintf(stderr, "simulator: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "simulator --trace=FILE [--cluster=A100:4,V100:8,T4:8] [--csv] [--jobs_csv=FILE]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);

  if (FLAGS_generate_trace) {
    eps::TraceGenOptions o;
    o.seed = FLAGS_seed;
    o.jobs = FLAGS_jobs;
    o.mean_interarrival_s = FLAGS_mean_interarrival_s;
    o.min_steps = FLAGS_min_steps;
    o.max_steps = FLAGS_max_steps;
    if (o.jobs == 0 || !(o.mean_interarrival_s >= 0) || o.min_steps < 1 ||
        o.max_steps < o.min_steps) {
      return Fail(eps::InvalidArgument(
          "need --jobs >= 1, --mean_interarrival_s >= 0, 1 <= --min_steps <= --max_steps"));
    }
    std::cout << eps::FormatTrace(eps::GenerateTrace(o), eps::DescribeTraceGen(o));
    return 0;
  }

  if (FLAGS_trace.empty()) return Fail(eps::InvalidArgument("--trace is required"));
  std::ifstream in(FLAGS_trace);
  if (!in) return Fail(eps::NotFound("cannot read " + FLAGS_trace));
  std::stringstream text;
  text << in.rdbuf();
  auto trace = eps::ParseTrace(text.str());
  if (!trace.ok()) return Fail(trace.status().WithContext(FLAGS_trace));
  auto cluster = eps::ParseCluster(FLAGS_cluster);
  if (!cluster.ok()) return Fail(cluster.status());

  std::vector<eps::SimulationResult> results;
  std::stringstream names(FLAGS_policies);
  for (std::string name; std::getline(names, name, ',');) {
    auto policy = eps::ParsePolicy(name);
    if (!policy.ok()) return Fail(policy.status());
    eps::SimulatorOptions o;
    o.policy = *policy;
    o.rescale_s = FLAGS_rescale_s;
    o.max_vws_per_worker = FLAGS_max_vws_per_worker;
    o.move_threshold = FLAGS_move_threshold;
    o.record_decisions = FLAGS_log_decisions;
    auto result = eps::Simulate(*trace, *cluster, o);
    if (!result.ok()) return Fail(result.status().WithContext(name));
    for (const std::string& line : result->log)
      std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str());
    results.push_back(std::move(result).value());
  }

  if (FLAGS_csv) {
    std::cout << eps::FormatCsv(results);
  } else {
    std::cout << "trace " << FLAGS_trace << ": " << trace->size() << " jobs; cluster "
              << eps::FormatCluster(*cluster) << "; rescale " << FLAGS_rescale_s << " s\n"
              << eps::FormatTable(results);
  }
  if (!FLAGS_jobs_csv.empty()) {
    std::ofstream out(FLAGS_jobs_csv);
    out << eps::FormatJobsCsv(results);
    if (!out) return Fail(eps::Unavailable("cannot write " + FLAGS_jobs_csv));
  }
  return 0;
}
