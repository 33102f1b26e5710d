#include "elastic/simulator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

#include "common/format.h"
#include "elastic/planner.h"
#include "elastic/scheduler.h"

namespace eps {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(s);
  while (std::getline(in, field, sep)) out.push_back(Trim(field));
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size() || x < lo || x > hi) return false;
  *out = x;
  return true;
}

Status ValidateJob(const TraceJob& j) {
  if (j.id.empty()) return InvalidArgument("a job has an empty job_id");
  if (!(std::isfinite(j.arrival_s) && j.arrival_s >= 0))
    return InvalidArgument(j.id + ": arrival_s must be >= 0");
  if (j.steps <= 0) return InvalidArgument(j.id + ": steps must be > 0");
  if (j.v == 0) return InvalidArgument(j.id + ": v must be > 0");
  if (j.batch_per_vw == 0) return InvalidArgument(j.id + ": batch_per_vw must be > 0");
  if (j.gpus == 0) return InvalidArgument(j.id + ": gpus must be > 0");
  if (j.seconds_per_vw.empty()) return InvalidArgument(j.id + ": no device type can run it");
  for (const auto& [type, t] : j.seconds_per_vw) {
    if (!(std::isfinite(t) && t > 0)) return InvalidArgument(j.id + ": t_" + type + " must be > 0");
  }
  return OkStatus();
}

// splitmix64: a tiny generator with the same output everywhere.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return double(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t Below(uint64_t n) { return Next() % n; }              // bias is negligible for small n

 private:
  uint64_t s_;
};

struct Profile {
  const char* name;
  uint32_t batch_per_vw;
  double a100, v100, t4;  // seconds per VW step
};
// Synthetic speeds, relative ones in the range public benchmarks show (an A100 is
// ~1.5-2x a V100 and ~3-6x a T4, more for large models, less for small ones).
constexpr Profile kProfiles[] = {
    {"resnet50", 32, 0.10, 0.17, 0.45},
    {"bert-base", 16, 0.12, 0.25, 0.80},
    {"small-cnn", 64, 0.03, 0.04, 0.08},
    {"lstm", 32, 0.05, 0.07, 0.15},
};
constexpr uint32_t kVChoices[] = {4, 8, 8, 16};

}  // namespace

// ---- trace and cluster text -------------------------------------------------

StatusOr<std::vector<TraceJob>> ParseTrace(const std::string& csv) {
  std::vector<TraceJob> jobs;
  std::vector<std::string> header;
  std::set<std::string> ids;
  std::istringstream in(csv);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const std::vector<std::string> fields = Split(t, ',');
    const std::string where = "trace line " + std::to_string(line_no) + ": ";
    if (header.empty()) {
      header = fields;
      std::set<std::string> seen;
      for (const std::string& h : header) {
        if (!seen.insert(h).second)
          return InvalidArgument(where + "column '" + h + "' appears twice");
        if (h != "arrival_s" && h != "job_id" && h != "steps" && h != "v" && h != "batch_per_vw" &&
            h != "gpus" && (h.size() < 3 || h.compare(0, 2, "t_") != 0)) {
          return InvalidArgument(where + "unknown column '" + h + "'");
        }
      }
      for (const char* need : {"arrival_s", "job_id", "steps", "v", "batch_per_vw", "gpus"}) {
        if (!seen.count(need))
          return InvalidArgument(where + "the header lacks column '" + std::string(need) + "'");
      }
      continue;
    }
    if (fields.size() != header.size()) {
      return InvalidArgument(where + std::to_string(fields.size()) + " fields, the header has " +
                             std::to_string(header.size()));
    }
    TraceJob j;
    for (size_t c = 0; c < header.size(); ++c) {
      const std::string& h = header[c];
      const std::string& f = fields[c];
      int64_t x = 0;
      bool ok = true;
      if (h == "arrival_s") {
        ok = ParseDouble(f, &j.arrival_s);
      } else if (h == "job_id") {
        j.id = f;
      } else if (h == "steps") {
        ok = ParseInt(f, 1, int64_t(1) << 50, &j.steps);
      } else if (h == "v") {
        ok = ParseInt(f, 1, UINT32_MAX, &x);
        j.v = uint32_t(x);
      } else if (h == "batch_per_vw") {
        ok = ParseInt(f, 1, UINT32_MAX, &x);
        j.batch_per_vw = uint32_t(x);
      } else if (h == "gpus") {
        ok = ParseInt(f, 1, UINT32_MAX, &x);
        j.gpus = uint32_t(x);
      } else if (!f.empty()) {  // t_<TYPE>
        double s = 0;
        ok = ParseDouble(f, &s);
        j.seconds_per_vw[h.substr(2)] = s;
      }
      if (!ok) return InvalidArgument(where + "bad " + h + " '" + f + "'");
    }
    if (Status st = ValidateJob(j); !st.ok())
      return st.WithContext("trace line " + std::to_string(line_no));
    if (!ids.insert(j.id).second)
      return InvalidArgument(where + "job_id '" + j.id + "' appears twice");
    jobs.push_back(std::move(j));
  }
  if (header.empty()) return InvalidArgument("the trace has no header line");
  return jobs;
}

std::string FormatTrace(const std::vector<TraceJob>& jobs, const std::string& comment) {
  std::ostringstream os;
  std::istringstream lines(comment);
  for (std::string l; std::getline(lines, l);) os << (l.empty() ? "#" : "# " + l) << "\n";
  std::set<std::string> types;
  for (const TraceJob& j : jobs) {
    for (const auto& [type, t] : j.seconds_per_vw) types.insert(type);
  }
  os << "arrival_s,job_id,steps,v,batch_per_vw,gpus";
  for (const std::string& type : types) os << ",t_" << type;
  os << "\n";
  for (const TraceJob& j : jobs) {
    os << StrFormat("%.1f", j.arrival_s) << "," << j.id << "," << j.steps << "," << j.v << ","
       << j.batch_per_vw << "," << j.gpus;
    for (const std::string& type : types) {
      auto it = j.seconds_per_vw.find(type);
      os << "," << (it == j.seconds_per_vw.end() ? "" : StrFormat("%g", it->second));
    }
    os << "\n";
  }
  return os.str();
}

StatusOr<ClusterSpec> ParseCluster(const std::string& spec) {
  ClusterSpec c;
  std::set<std::string> seen;
  for (const std::string& part : Split(spec, ',')) {
    const size_t colon = part.find(':');
    int64_t n = 0;
    if (colon == std::string::npos || colon == 0 ||
        !ParseInt(part.substr(colon + 1), 1, 1 << 20, &n)) {
      return InvalidArgument("cluster: '" + part + "' is not TYPE:COUNT (COUNT >= 1)");
    }
    const std::string type = part.substr(0, colon);
    if (!seen.insert(type).second)
      return InvalidArgument("cluster: type " + type + " appears twice");
    c.types.push_back({type, uint32_t(n)});
  }
  if (c.types.empty()) return InvalidArgument("cluster: no device type");
  return c;
}

std::string FormatCluster(const ClusterSpec& cluster) {
  std::string s;
  for (const auto& [type, n] : cluster.types)
    s += (s.empty() ? "" : ",") + type + ":" + std::to_string(n);
  return s;
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kFifo:
      return "fifo";
    case Policy::kElasticHomo:
      return "elastic-homo";
    case Policy::kElasticHetero:
      return "elastic-hetero";
  }
  return "?";
}

StatusOr<Policy> ParsePolicy(const std::string& name) {
  for (Policy p : {Policy::kFifo, Policy::kElasticHomo, Policy::kElasticHetero}) {
    if (name == PolicyName(p)) return p;
  }
  return InvalidArgument("unknown policy '" + name + "': use fifo, elastic-homo or elastic-hetero");
}

// ---- the simulation ---------------------------------------------------------

namespace {

class Simulation {
 public:
  Simulation(const std::vector<TraceJob>& trace, const ClusterSpec& cluster,
             const SimulatorOptions& options)
      : trace_(trace), options_(options) {
    for (const auto& [type, n] : cluster.types) {
      for (uint32_t k = 0; k < n; ++k)
        pool_.push_back({WorkerId(uint32_t(pool_.size())), type, 1.0});
    }
    holder_.assign(pool_.size(), -1);
    runs_.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      runs_[i].remaining = double(trace[i].steps);
      order_.push_back(i);
    }
    // Arrival order; the trace order among equal arrivals.
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return trace_[a].arrival_s < trace_[b].arrival_s; });
  }

  Status Check(const ClusterSpec& cluster) const {
    for (const TraceJob& j : trace_) {
      EPS_RETURN_IF_ERROR(ValidateJob(j));
      uint32_t largest = 0;
      for (const auto& [type, n] : cluster.types) {
        if (j.seconds_per_vw.count(type)) largest = std::max(largest, n);
      }
      if (largest == 0) return InvalidArgument(j.id + " can run on no device type of the cluster");
      if (options_.policy == Policy::kFifo && std::min(j.gpus, j.v) > largest) {
        return InvalidArgument(j.id + " asks for " + std::to_string(j.gpus) +
                               " GPUs of one type; the cluster has " + std::to_string(largest) +
                               " of its largest usable type");
      }
    }
    return OkStatus();
  }

  StatusOr<SimulationResult> Run() {
    size_t next_arrival = 0, done = 0;
    double busy_gpu_s = 0;
    while (done < runs_.size()) {
      // The next event: an arrival or a completion.
      double t = std::numeric_limits<double>::infinity();
      if (next_arrival < order_.size()) t = trace_[order_[next_arrival]].arrival_s;
      std::vector<double> finish(runs_.size(), std::numeric_limits<double>::infinity());
      for (size_t i = 0; i < runs_.size(); ++i) {
        const JobRun& r = runs_[i];
        if (r.arrived && !r.done && r.rate > 0) {
          finish[i] = std::max(now_, r.stall_until) + r.remaining / r.rate;
          t = std::min(t, finish[i]);
        }
      }
      if (!std::isfinite(t))
        return Internal("simulation stuck at t=" + StrFormat("%.1f", now_) + ": no job can run");
      for (size_t i = 0; i < runs_.size(); ++i) {
        JobRun& r = runs_[i];
        if (!r.arrived || r.done) continue;
        busy_gpu_s += double(r.workers.size()) * (t - now_);
        const double from = std::max(now_, r.stall_until);
        if (r.rate > 0 && t > from) r.remaining -= r.rate * (t - from);
      }
      now_ = t;
      for (size_t i = 0; i < runs_.size(); ++i) {
        if (finish[i] <= now_) Finish(i);
      }
      done =
          size_t(std::count_if(runs_.begin(), runs_.end(), [](const JobRun& r) { return r.done; }));
      while (next_arrival < order_.size() && trace_[order_[next_arrival]].arrival_s <= now_) {
        runs_[order_[next_arrival++]].arrived = true;
      }
      EPS_RETURN_IF_ERROR(options_.policy == Policy::kFifo ? ScheduleFifo() : ScheduleElastic());
    }
    SimulationResult result;
    result.policy = options_.policy;
    double first = std::numeric_limits<double>::infinity(), last = 0, jct = 0;
    for (size_t i = 0; i < runs_.size(); ++i) {
      const JobRun& r = runs_[i];
      JobResult jr{
          trace_[i].id,   trace_[i].arrival_s, r.start, r.finish, r.finish - trace_[i].arrival_s,
          r.reallocations};
      first = std::min(first, jr.arrival_s);
      last = std::max(last, jr.finish_s);
      jct += jr.jct_s;
      result.jobs.push_back(jr);
    }
    if (!runs_.empty()) {
      result.avg_jct_s = jct / double(runs_.size());
      result.makespan_s = last - first;
      if (result.makespan_s > 0 && !pool_.empty()) {
        result.busy_gpu_fraction = busy_gpu_s / (double(pool_.size()) * result.makespan_s);
      }
    }
    result.moves = moves_;
    result.log = std::move(log_);
    return result;
  }

 private:
  struct JobRun {
    bool arrived = false, started = false, done = false;
    double remaining = 0;  // steps
    std::vector<size_t> workers;
    double rate = 0;  // steps/s outside stalls
    double stall_until = 0;
    double start = 0, finish = 0;
    uint64_t reallocations = 0;
  };

  std::vector<PoolWorker> Workers(const std::vector<size_t>& ps) const {
    std::vector<PoolWorker> ws;
    for (size_t p : ps) ws.push_back(pool_[p]);
    return ws;
  }

  SchedulerJob AsSchedulerJob(size_t i) const {
    const TraceJob& j = trace_[i];
    SchedulerJob s;
    s.id = j.id;
    s.virtual_workers = j.v;
    s.batch_per_vw = j.batch_per_vw;
    s.seconds_per_vw = j.seconds_per_vw;
    s.max_vws_per_worker = options_.max_vws_per_worker;
    s.planner = options_.policy == Policy::kFifo ? PlannerKind::kEqual : PlannerKind::kSpeed;
    s.single_device_type = options_.policy != Policy::kElasticHetero;
    s.weight = 1.0 / (std::max(runs_[i].remaining, 1e-9) * j.v * j.batch_per_vw);
    return s;
  }

  void Finish(size_t i) {
    JobRun& r = runs_[i];
    r.done = true;
    r.remaining = 0;
    r.finish = now_;
    for (size_t p : r.workers) holder_[p] = -1;
    r.workers.clear();
    r.rate = 0;
  }

  // Gives job i the workers `ps` (sorted), from now on.
  void Place(size_t i, std::vector<size_t> ps) {
    JobRun& r = runs_[i];
    if (ps == r.workers) return;
    for (size_t p : r.workers) holder_[p] = -1;
    for (size_t p : ps) holder_[p] = int(i);
    r.workers = std::move(ps);
    if (r.workers.empty()) {
      r.rate = 0;
      ++r.reallocations;
      return;
    }
    const SchedulerJob job = AsSchedulerJob(i);
    r.rate =
        JobThroughput(job, Workers(r.workers)) / (double(job.virtual_workers) * job.batch_per_vw);
    r.stall_until = now_ + options_.rescale_s;
    if (r.started) {
      ++r.reallocations;
    } else {
      r.started = true;
      r.start = now_;
    }
  }

  Status ScheduleFifo() {
    for (size_t i : order_) {
      const JobRun& r = runs_[i];
      if (!r.arrived || r.done || r.started) continue;
      const TraceJob& j = trace_[i];
      const uint32_t g = std::min(j.gpus, j.v);
      // The fastest device type with g free GPUs.
      std::vector<size_t> best;
      double best_t = 0;
      for (const auto& [type, t] : j.seconds_per_vw) {
        std::vector<size_t> free;
        for (size_t p = 0; p < pool_.size() && free.size() < g; ++p) {
          if (holder_[p] < 0 && pool_[p].device_type == type) free.push_back(p);
        }
        if (free.size() == g && (best.empty() || t < best_t)) {
          best = std::move(free);
          best_t = t;
        }
      }
      if (best.empty()) break;  // strict FIFO: nobody overtakes the head
      Place(i, std::move(best));
      if (runs_[i].rate <= 0)
        return InvalidArgument(j.id + ": no feasible plan on its GPUs (cap?)");
      if (options_.record_decisions) {
        log_.push_back("t=" + StrFormat("%.1f", now_) + ": " + j.id + " starts on " + std::to_string(g) +
                       " GPUs");
      }
    }
    return OkStatus();
  }

  Status ScheduleElastic() {
    std::vector<SchedulerJob> jobs;
    std::vector<size_t> index;
    for (size_t i : order_) {
      if (runs_[i].arrived && !runs_[i].done) {
        jobs.push_back(AsSchedulerJob(i));
        index.push_back(i);
      }
    }
    std::map<WorkerId, std::string> current;
    for (size_t p = 0; p < pool_.size(); ++p) {
      if (holder_[p] >= 0) current[pool_[p].id] = trace_[size_t(holder_[p])].id;
    }
    SchedulerOptions so;
    so.move_threshold = options_.move_threshold;
    EPS_ASSIGN_OR_RETURN(ScheduleResult round, Schedule(jobs, pool_, current, so));
    for (const SchedulerDecision& d : round.decisions) {
      if (!d.from_job.empty()) ++moves_;
      if (options_.record_decisions) {
        log_.push_back("t=" + StrFormat("%.1f", now_) + ": worker " + std::to_string(d.worker.value()) +
                       " (" + pool_[d.worker.value()].device_type + ") " +
                       (d.from_job.empty() ? "idle" : d.from_job) + " -> " +
                       (d.to_job.empty() ? "idle" : d.to_job) + ": " + d.reason);
      }
    }
    for (size_t k = 0; k < jobs.size(); ++k) {
      std::vector<size_t> ps;
      for (size_t p = 0; p < pool_.size(); ++p) {
        auto it = round.allocation.find(pool_[p].id);
        if (it != round.allocation.end() && it->second == jobs[k].id) ps.push_back(p);
      }
      Place(index[k], std::move(ps));
    }
    return OkStatus();
  }

  const std::vector<TraceJob>& trace_;
  const SimulatorOptions options_;
  std::vector<PoolWorker> pool_;  // id = index
  std::vector<int> holder_;       // per pool index: the job index holding it, or -1
  std::vector<JobRun> runs_;      // per trace index
  std::vector<size_t> order_;     // trace indices in arrival order
  double now_ = 0;
  uint64_t moves_ = 0;
  std::vector<std::string> log_;
};

}  // namespace

StatusOr<SimulationResult> Simulate(const std::vector<TraceJob>& trace, const ClusterSpec& cluster,
                                    const SimulatorOptions& options) {
  if (!(std::isfinite(options.rescale_s) && options.rescale_s >= 0))
    return InvalidArgument("rescale_s must be >= 0");
  if (cluster.types.empty()) return InvalidArgument("the cluster has no device type");
  std::set<std::string> ids;
  for (const TraceJob& j : trace) {
    if (!ids.insert(j.id).second) return InvalidArgument("job_id '" + j.id + "' appears twice");
  }
  Simulation sim(trace, cluster, options);
  EPS_RETURN_IF_ERROR(sim.Check(cluster));
  return sim.Run();
}

// ---- output -----------------------------------------------------------------

namespace {
const SimulationResult* FindFifo(const std::vector<SimulationResult>& results) {
  for (const SimulationResult& r : results) {
    if (r.policy == Policy::kFifo) return &r;
  }
  return nullptr;
}
double Ratio(double fifo, double x) { return x > 0 ? fifo / x : 0; }
}  // namespace

std::string FormatTable(const std::vector<SimulationResult>& results) {
  const SimulationResult* fifo = FindFifo(results);
  char buf[256];
  std::string out;
  std::snprintf(buf, sizeof(buf), "%-15s %5s %12s %13s", "policy", "jobs", "avg JCT (s)",
                "makespan (s)");
  out += buf;
  if (fifo) out += "  JCT vs fifo  makespan vs fifo";
  out += "  busy GPUs  moves\n";
  for (const SimulationResult& r : results) {
    std::snprintf(buf, sizeof(buf), "%-15s %5zu %12.1f %13.1f", PolicyName(r.policy), r.jobs.size(),
                  r.avg_jct_s, r.makespan_s);
    out += buf;
    if (fifo) {
      std::snprintf(buf, sizeof(buf), "  %10.2fx  %15.2fx", Ratio(fifo->avg_jct_s, r.avg_jct_s),
                    Ratio(fifo->makespan_s, r.makespan_s));
      out += buf;
    }
    std::snprintf(buf, sizeof(buf), "  %8.0f %%  %5llu\n", 100 * r.busy_gpu_fraction,
                  (unsigned long long)r.moves);
    out += buf;
  }
  return out;
}

std::string FormatCsv(const std::vector<SimulationResult>& results) {
  const SimulationResult* fifo = FindFifo(results);
  std::string out =
      "policy,jobs,avg_jct_s,makespan_s,jct_speedup_vs_fifo,makespan_speedup_vs_fifo,busy_gpu_"
      "fraction,moves\n";
  char buf[256];
  for (const SimulationResult& r : results) {
    std::snprintf(buf, sizeof(buf), "%s,%zu,%.3f,%.3f,%.4f,%.4f,%.4f,%llu\n", PolicyName(r.policy),
                  r.jobs.size(), r.avg_jct_s, r.makespan_s,
                  fifo ? Ratio(fifo->avg_jct_s, r.avg_jct_s) : 0.0,
                  fifo ? Ratio(fifo->makespan_s, r.makespan_s) : 0.0, r.busy_gpu_fraction,
                  (unsigned long long)r.moves);
    out += buf;
  }
  return out;
}

std::string FormatJobsCsv(const std::vector<SimulationResult>& results) {
  std::string out = "policy,job_id,arrival_s,start_s,finish_s,jct_s,reallocations\n";
  char buf[256];
  for (const SimulationResult& r : results) {
    for (const JobResult& j : r.jobs) {
      std::snprintf(buf, sizeof(buf), "%s,%s,%.3f,%.3f,%.3f,%.3f,%llu\n", PolicyName(r.policy),
                    j.id.c_str(), j.arrival_s, j.start_s, j.finish_s, j.jct_s,
                    (unsigned long long)j.reallocations);
      out += buf;
    }
  }
  return out;
}

// ---- synthetic traces -------------------------------------------------------

std::vector<TraceJob> GenerateTrace(const TraceGenOptions& o) {
  SplitMix rng(o.seed);
  std::vector<TraceJob> jobs;
  double arrival = 0;
  const double log_lo = std::log(double(std::max<int64_t>(1, o.min_steps)));
  const double log_hi = std::log(double(std::max(o.min_steps, o.max_steps)));
  for (uint32_t k = 0; k < o.jobs; ++k) {
    if (k > 0) arrival += -o.mean_interarrival_s * std::log(1 - rng.Uniform());
    const Profile& p = kProfiles[rng.Below(std::size(kProfiles))];
    TraceJob j;
    char id[32];
    std::snprintf(id, sizeof(id), "j%02u-%s", k, p.name);
    j.id = id;
    j.arrival_s = std::round(arrival * 10) / 10;
    j.steps = int64_t(std::llround(std::exp(log_lo + rng.Uniform() * (log_hi - log_lo))));
    j.v = kVChoices[rng.Below(std::size(kVChoices))];
    j.batch_per_vw = p.batch_per_vw;
    j.gpus = std::min<uint32_t>(j.v, uint32_t(1) << rng.Below(4));  // 1, 2, 4 or 8, at most V
    j.seconds_per_vw = {{"A100", p.a100}, {"V100", p.v100}, {"T4", p.t4}};
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::string DescribeTraceGen(const TraceGenOptions& o) {
  std::ostringstream os;
  os << "A synthetic trace from `simulator --generate_trace --seed=" << o.seed
     << " --jobs=" << o.jobs << " --mean_interarrival_s=" << o.mean_interarrival_s
     << " --min_steps=" << o.min_steps << " --max_steps=" << o.max_steps << "`\n";
  os << o.jobs << " jobs; Poisson arrivals (exponential gaps, mean " << o.mean_interarrival_s
     << " s);\n";
  os << "steps log-uniform in [" << o.min_steps << ", " << o.max_steps
     << "]; V uniform over {4, 8, 8, 16};\n";
  os << "gpus (what a non-elastic job asks for) uniform over {1, 2, 4, 8}, at most V;\n";
  os << "model uniform over 4 synthetic speed profiles (seconds per VW step on A100 / V100 / T4, "
        "batch per VW):\n";
  for (const Profile& p : kProfiles) {
    os << "  " << p.name << ": " << p.a100 << " / " << p.v100 << " / " << p.t4 << " s, batch "
       << p.batch_per_vw << "\n";
  }
  os << "Columns: see elastic/simulator.h.";
  return os.str();
}

}  // namespace eps
