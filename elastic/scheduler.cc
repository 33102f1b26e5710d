#include "elastic/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace eps {
namespace {

constexpr int kIdle = -1;

std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", x);
  return buf;
}

uint32_t MaxWorkers(const SchedulerJob& job) {
  return job.max_workers == 0 ? job.virtual_workers : job.max_workers;
}

// Seconds per VW step of `job` on `w`; nullopt if the job cannot use it. A job
// with only a throughput function and no times can use any worker (ordered by speed).
std::optional<double> WorkerTime(const SchedulerJob& job, const PoolWorker& w) {
  if (job.seconds_per_vw.empty()) {
    if (job.throughput) return 1.0 / w.speed;
    return std::nullopt;
  }
  auto it = job.seconds_per_vw.find(w.device_type);
  if (it == job.seconds_per_vw.end()) return std::nullopt;
  return it->second / w.speed;
}

Status Validate(const std::vector<SchedulerJob>& jobs, const std::vector<PoolWorker>& pool) {
  std::set<std::string> job_ids;
  for (const SchedulerJob& j : jobs) {
    if (!job_ids.insert(j.id).second) return InvalidArgument("job '" + j.id + "' is listed twice");
    if (j.id.empty()) return InvalidArgument("a job has an empty id");
    if (j.virtual_workers == 0) return InvalidArgument("job '" + j.id + "' has V = 0");
    if (j.max_workers != 0 && j.max_workers < j.min_workers) {
      return InvalidArgument("job '" + j.id + "': max_workers < min_workers");
    }
    if (!(std::isfinite(j.weight) && j.weight >= 0))
      return InvalidArgument("job '" + j.id + "': bad weight");
    for (const auto& [type, t] : j.seconds_per_vw) {
      if (!(std::isfinite(t) && t > 0)) {
        return InvalidArgument("job '" + j.id + "': seconds per VW on " + type +
                               " must be finite and > 0");
      }
    }
  }
  std::set<WorkerId> worker_ids;
  for (const PoolWorker& w : pool) {
    if (!worker_ids.insert(w.id).second) {
      return InvalidArgument("worker " + std::to_string(w.id.value()) + " is listed twice");
    }
    if (!(std::isfinite(w.speed) && w.speed > 0)) {
      return InvalidArgument("worker " + std::to_string(w.id.value()) +
                             ": speed must be finite and > 0");
    }
  }
  return OkStatus();
}

// One round's world: jobs x pool, with the greedy that fills an allocation.
class Round {
 public:
  Round(const std::vector<SchedulerJob>& jobs, const std::vector<PoolWorker>& pool,
        std::vector<int> sticky)
      : jobs_(jobs), pool_(pool), sticky_(std::move(sticky)) {}

  // Why a worker got its job: the greedy pick that gave it.
  struct Pick {
    std::string how;  // with the numbers
  };
  struct Allocation {
    std::vector<int> owner;                 // per pool index: job index or kIdle
    std::vector<double> throughput;         // per job
    std::vector<std::optional<Pick>> pick;  // per pool index, for workers the greedy placed
    double objective = 0;
  };

  std::vector<size_t> Members(const std::vector<int>& owner, int j) const {
    std::vector<size_t> m;
    for (size_t p = 0; p < owner.size(); ++p) {
      if (owner[p] == j) m.push_back(p);
    }
    return m;
  }

  double Throughput(int j, const std::vector<size_t>& members) const {
    std::vector<PoolWorker> ws;
    ws.reserve(members.size());
    for (size_t p : members) ws.push_back(pool_[p]);
    std::sort(ws.begin(), ws.end(),
              [](const PoolWorker& a, const PoolWorker& b) { return a.id < b.id; });
    return JobThroughput(jobs_[j], ws);
  }

  // Fastest for job j first; among equals the worker already on j, then the lower id.
  void SortForJob(int j, std::vector<size_t>* ps) const {
    std::sort(ps->begin(), ps->end(), [&](size_t a, size_t b) {
      const double ta = *WorkerTime(jobs_[j], pool_[a]), tb = *WorkerTime(jobs_[j], pool_[b]);
      if (ta != tb) return ta < tb;
      const bool sa = sticky_[a] == j, sb = sticky_[b] == j;
      if (sa != sb) return sa;
      return pool_[a].id < pool_[b].id;
    });
  }

  // Drops what breaks a job's limits from a given allocation: unusable workers,
  // a second device type for a single-type job, workers past max_workers.
  std::vector<int> Repair(std::vector<int> owner) const {
    for (int j = 0; j < int(jobs_.size()); ++j) {
      std::vector<size_t> m = Members(owner, j);
      std::vector<size_t> keep;
      for (size_t p : m) {
        if (WorkerTime(jobs_[j], pool_[p])) keep.push_back(p);
      }
      SortForJob(j, &keep);
      if (jobs_[j].single_device_type && !keep.empty()) {
        const std::string type = pool_[keep[0]].device_type;
        keep.erase(std::remove_if(keep.begin(), keep.end(),
                                  [&](size_t p) { return pool_[p].device_type != type; }),
                   keep.end());
      }
      if (keep.size() > MaxWorkers(jobs_[j])) keep.resize(MaxWorkers(jobs_[j]));
      for (size_t p : m) {
        if (std::find(keep.begin(), keep.end(), p) == keep.end()) owner[p] = kIdle;
      }
    }
    return owner;
  }

  // Gives idle workers to jobs by largest weighted marginal gain per added worker.
  Allocation Greedy(std::vector<int> owner) const {
    Allocation a;
    a.pick.resize(pool_.size());
    a.throughput.resize(jobs_.size());
    for (int j = 0; j < int(jobs_.size()); ++j) a.throughput[j] = Throughput(j, Members(owner, j));
    for (;;) {
      int best_job = -1;
      std::vector<size_t> best_bundle;
      double best_gain = 0, best_after = 0;
      for (int j = 0; j < int(jobs_.size()); ++j) {
        const SchedulerJob& job = jobs_[j];
        const std::vector<size_t> members = Members(owner, j);
        const uint32_t limit =
            std::min(MaxWorkers(job), job.virtual_workers);  // each needs a VW to help
        if (members.size() >= limit) continue;
        const size_t room = limit - members.size();
        // Candidate lists: one, or one per device type for a single-type job not placed yet.
        std::map<std::string, std::vector<size_t>> lists;
        for (size_t p = 0; p < pool_.size(); ++p) {
          if (owner[p] != kIdle || !WorkerTime(job, pool_[p])) continue;
          if (!job.single_device_type) {
            lists[""].push_back(p);
          } else if (members.empty()) {
            lists[pool_[p].device_type].push_back(p);
          } else if (pool_[p].device_type == pool_[members[0]].device_type) {
            lists[""].push_back(p);
          }
        }
        for (auto& [type, list] : lists) {
          SortForJob(j, &list);
          std::vector<size_t> ws = members;
          for (size_t k = 1; k <= std::min(room, list.size()); ++k) {
            ws.push_back(list[k - 1]);
            const double after = Throughput(j, ws);
            const double gain = job.weight * (after - a.throughput[j]) / double(k);
            if (gain > best_gain) {
              best_job = j;
              best_gain = gain;
              best_after = after;
              best_bundle.assign(list.begin(), list.begin() + k);
            }
          }
        }
      }
      if (best_job < 0) break;
      for (size_t p : best_bundle) {
        owner[p] = best_job;
        a.pick[p] = Pick{"greedy: " + Num(a.throughput[best_job]) + " -> " + Num(best_after) +
                         " samples/s with " + std::to_string(best_bundle.size()) +
                         " more, weighted gain " + Num(best_gain) + " per added worker"};
      }
      a.throughput[best_job] = best_after;
    }
    a.owner = std::move(owner);
    Total(&a);
    return a;
  }

  // Swaps two workers of different jobs (or a busy and an idle one) while that
  // raises the weighted throughput: the greedy gives each worker to the largest
  // gain, which can be the wrong job for the fastest worker (a job that speeds
  // up 1.25x on it beats one that speeds up 4x, if the first gains more in absolute terms).
  void Improve(Allocation* a) const {
    const size_t limit =
        4 * pool_.size() + 16;  // each swap strictly raises the objective; this only bounds it
    for (size_t swaps = 0; swaps < limit;) {
      bool improved = false;
      std::set<std::tuple<int, std::string, double, int, std::string, double>> tried;
      for (size_t p = 0; p < pool_.size() && !improved; ++p) {
        for (size_t q = p + 1; q < pool_.size() && !improved; ++q) {
          const int jp = a->owner[p], jq = a->owner[q];
          if (jp == jq) continue;
          const PoolWorker &wp = pool_[p], &wq = pool_[q];
          if (wp.device_type == wq.device_type && wp.speed == wq.speed)
            continue;  // same worker to every job
          if (!tried.insert({jp, wp.device_type, wp.speed, jq, wq.device_type, wq.speed}).second)
            continue;
          std::vector<int> owner = a->owner;
          std::swap(owner[p], owner[q]);
          double delta = 0;
          std::vector<std::pair<int, double>> changed;
          bool ok = true;
          for (int j : {jp, jq}) {
            if (j == kIdle) continue;
            const std::vector<size_t> m = Members(owner, j);
            for (size_t x : m) ok = ok && WorkerTime(jobs_[j], pool_[x]).has_value();
            if (jobs_[j].single_device_type) {
              for (size_t x : m) ok = ok && pool_[x].device_type == pool_[m[0]].device_type;
            }
            if (!ok) break;
            const double t = Throughput(j, m);
            delta += jobs_[j].weight * (t - a->throughput[j]);
            changed.push_back({j, t});
          }
          if (!ok || !(delta > 1e-9 * std::max(a->objective, 1e-300))) continue;
          a->owner = std::move(owner);
          for (auto [j, t] : changed) a->throughput[j] = t;
          const auto name = [&](int j) {
            return j == kIdle ? std::string("idle") : "job " + jobs_[j].id;
          };
          a->pick[p] = Pick{"swapped with worker " + std::to_string(wq.id.value()) + " (" +
                            name(jq) + " -> " + name(jp) + "): weighted throughput +" + Num(delta)};
          a->pick[q] = Pick{"swapped with worker " + std::to_string(wp.id.value()) + " (" +
                            name(jp) + " -> " + name(jq) + "): weighted throughput +" + Num(delta)};
          Total(a);
          improved = true;
          ++swaps;
        }
      }
      if (!improved) break;
    }
  }

 private:
  void Total(Allocation* a) const {
    a->objective = 0;
    for (size_t j = 0; j < jobs_.size(); ++j) a->objective += jobs_[j].weight * a->throughput[j];
  }

  const std::vector<SchedulerJob>& jobs_;
  const std::vector<PoolWorker>& pool_;
  const std::vector<int> sticky_;  // per pool index: the job it is on now, or kIdle
};

}  // namespace

double JobThroughput(const SchedulerJob& job, const std::vector<PoolWorker>& workers) {
  if (workers.empty() || workers.size() < job.min_workers || workers.size() > MaxWorkers(job))
    return 0;
  if (job.throughput) return job.throughput(workers);
  std::vector<std::optional<double>> times;
  times.reserve(workers.size());
  for (const PoolWorker& w : workers) {
    const std::optional<double> t = WorkerTime(job, w);
    if (!t || !(std::isfinite(*t) && *t > 0)) return 0;
    times.push_back(t);
  }
  StatusOr<VwPlan> plan =
      PlanVws(job.virtual_workers, times, {job.planner, job.max_vws_per_worker});
  if (!plan.ok() || plan->bottleneck <= 0) return 0;
  return double(job.virtual_workers) * job.batch_per_vw / plan->bottleneck;
}

StatusOr<ScheduleResult> Schedule(const std::vector<SchedulerJob>& jobs,
                                  const std::vector<PoolWorker>& pool,
                                  const std::map<WorkerId, std::string>& current,
                                  const SchedulerOptions& options) {
  EPS_RETURN_IF_ERROR(Validate(jobs, pool));
  if (!(options.move_threshold >= 0 && std::isfinite(options.move_threshold))) {
    return InvalidArgument("move_threshold must be finite and >= 0");
  }
  std::map<std::string, int> job_index;
  for (int j = 0; j < int(jobs.size()); ++j) job_index[jobs[j].id] = j;
  std::vector<int> now(pool.size(), kIdle);
  for (size_t p = 0; p < pool.size(); ++p) {
    auto it = current.find(pool[p].id);
    if (it == current.end()) continue;
    auto jt = job_index.find(it->second);
    if (jt != job_index.end()) now[p] = jt->second;
  }
  const Round round(jobs, pool, now);
  const std::vector<int> kept = round.Repair(now);
  std::vector<double> before(jobs.size());
  for (int j = 0; j < int(jobs.size()); ++j)
    before[j] = round.Throughput(j, round.Members(kept, j));

  const Round::Allocation top_up = round.Greedy(kept);
  Round::Allocation scratch = round.Greedy(std::vector<int>(pool.size(), kIdle));
  round.Improve(&scratch);
  const bool rebalance = scratch.objective > top_up.objective * (1 + options.move_threshold);
  const Round::Allocation& chosen = rebalance ? scratch : top_up;

  ScheduleResult result;
  result.rebalanced = rebalance;
  result.objective = chosen.objective;
  for (int j = 0; j < int(jobs.size()); ++j) result.throughput[jobs[j].id] = chosen.throughput[j];
  std::string why_rebalance;
  if (rebalance) {
    why_rebalance =
        "rebalance: weighted throughput " + Num(top_up.objective) + " without moves, " +
        Num(scratch.objective) + " with (" +
        (top_up.objective > 0 ? "+" + Num(100 * (scratch.objective / top_up.objective - 1)) + " %"
                              : std::string("from none")) +
        " > " + Num(100 * options.move_threshold) + " %)";
  }
  auto job_change = [&](int j) {
    return "job " + jobs[j].id + ": " + std::to_string(round.Members(kept, j).size()) + " -> " +
           std::to_string(round.Members(chosen.owner, j).size()) + " workers, " + Num(before[j]) +
           " -> " + Num(chosen.throughput[j]) + " samples/s";
  };

  std::vector<size_t> order(pool.size());
  for (size_t p = 0; p < pool.size(); ++p) order[p] = p;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return pool[a].id < pool[b].id; });
  for (size_t p : order) {
    const int to = chosen.owner[p];
    if (to != kIdle) result.allocation[pool[p].id] = jobs[to].id;
    auto it = current.find(pool[p].id);
    const std::string from_id = it == current.end() ? "" : it->second;
    const std::string to_id = to == kIdle ? "" : jobs[to].id;
    if (from_id == to_id) continue;
    std::string reason;
    if (to != kIdle) {
      reason = job_change(to);
      if (const auto& pick = chosen.pick[p]) reason += " (" + pick->how + ")";
    } else {
      reason = "no job gains from it";
    }
    if (!from_id.empty()) {
      reason += "; from ";
      reason += now[p] == kIdle ? "job " + from_id + ", which is gone or cannot use it"
                                : job_change(now[p]);
    }
    if (rebalance && now[p] != kIdle) reason += "; " + why_rebalance;
    result.decisions.push_back({pool[p].id, from_id, to_id, std::move(reason)});
  }
  return result;
}

}  // namespace eps
