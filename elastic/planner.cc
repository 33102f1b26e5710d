#include "elastic/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <utility>

namespace eps {
namespace {

bool ValidTime(double t) { return std::isfinite(t) && t > 0; }

std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", x);
  return buf;
}

std::vector<uint32_t> EqualCounts(uint32_t v, size_t n) {
  std::vector<uint32_t> counts(n);
  for (size_t i = 0; i < n; ++i) counts[i] = v / n + (i < v % n ? 1 : 0);
  return counts;
}

// The V smallest values k * t[i] (1 <= k <= cap), ties by worker index; see planner.h.
std::vector<uint32_t> SpeedCounts(uint32_t v, const std::vector<double>& t, uint32_t cap) {
  const size_t n = t.size();
  // The number of values of worker i that are <= b. Computed with the same
  // products k * t[i] as the heap below, so both agree on every boundary.
  auto count = [&](size_t i, double b) -> uint32_t {
    const double q = std::floor(b / t[i]);
    uint64_t k = q <= 0 ? 0 : (q >= double(cap) ? cap : static_cast<uint64_t>(q));
    while (k > 0 && double(k) * t[i] > b) --k;
    while (k < cap && double(k + 1) * t[i] <= b) ++k;
    return static_cast<uint32_t>(k);
  };
  auto capacity = [&](double b) {
    uint64_t c = 0;
    for (size_t i = 0; i < n; ++i) c += count(i, b);
    return c;
  };
  // Invariant: capacity(lo) <= V <= capacity(hi). At hi = V * max t every worker
  // is at its cap, and n * cap >= V (checked by the caller).
  double lo = 0, hi = double(v) * *std::max_element(t.begin(), t.end());
  for (int probes = 0; probes < 2000; ++probes) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;  // adjacent doubles: only ties at hi remain
    const uint64_t c = capacity(mid);
    if (c <= v) lo = mid;
    if (c >= v) hi = mid;
    if (c == v) break;
  }
  std::vector<uint32_t> counts(n);
  uint64_t taken = 0;
  for (size_t i = 0; i < n; ++i) taken += counts[i] = count(i, lo);
  // The remaining values, smallest first, ties by worker index.
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] < cap) heap.push({double(counts[i] + 1) * t[i], i});
  }
  for (; taken < v; ++taken) {
    const size_t i = heap.top().second;
    heap.pop();
    if (++counts[i] < cap) heap.push({double(counts[i] + 1) * t[i], i});
  }
  return counts;
}

}  // namespace

const char* PlannerKindName(PlannerKind kind) {
  return kind == PlannerKind::kEqual ? "equal" : "speed";
}

StatusOr<PlannerKind> ParsePlannerKind(const std::string& name) {
  if (name == "equal") return PlannerKind::kEqual;
  if (name == "speed") return PlannerKind::kSpeed;
  return InvalidArgument("unknown planner '" + name + "': use equal or speed");
}

std::vector<double> EffectiveSecondsPerVw(const std::vector<std::optional<double>>& measured) {
  std::vector<double> known;
  for (const auto& m : measured) {
    if (m) known.push_back(*m);
  }
  double fill = 1.0;
  if (!known.empty()) {
    std::sort(known.begin(), known.end());
    const size_t h = known.size() / 2;
    fill = known.size() % 2 ? known[h] : (known[h - 1] + known[h]) / 2;
  }
  std::vector<double> t;
  t.reserve(measured.size());
  for (const auto& m : measured) t.push_back(m ? *m : fill);
  return t;
}

double Bottleneck(const std::vector<uint32_t>& counts, const std::vector<double>& seconds_per_vw) {
  double b = 0;
  for (size_t i = 0; i < counts.size() && i < seconds_per_vw.size(); ++i) {
    if (counts[i] > 0) b = std::max(b, double(counts[i]) * seconds_per_vw[i]);
  }
  return b;
}

std::vector<VwRange> RangesFromCounts(const std::vector<uint32_t>& counts) {
  std::vector<VwRange> ranges;
  ranges.reserve(counts.size());
  uint32_t lo = 0;
  for (uint32_t c : counts) {
    ranges.push_back({lo, lo + c});
    lo += c;
  }
  return ranges;
}

StatusOr<VwPlan> PlanVws(uint32_t v, const std::vector<std::optional<double>>& seconds_per_vw,
                         const PlannerOptions& options) {
  const size_t n = seconds_per_vw.size();
  if (n == 0) return InvalidArgument("no worker to plan for");
  for (size_t i = 0; i < n; ++i) {
    if (seconds_per_vw[i] && !ValidTime(*seconds_per_vw[i])) {
      return InvalidArgument("worker " + std::to_string(i) + " reports " + Num(*seconds_per_vw[i]) +
                             " seconds per VW: must be finite and > 0");
    }
  }
  const uint32_t cap =
      options.max_vws_per_worker == 0 ? v : std::min(options.max_vws_per_worker, v);
  if (uint64_t(cap) * n < v) {
    return ResourceExhausted("V = " + std::to_string(v) + " does not fit on " + std::to_string(n) +
                             " workers with at most " + std::to_string(options.max_vws_per_worker) +
                             " VWs each");
  }
  VwPlan plan;
  plan.seconds_per_vw = EffectiveSecondsPerVw(seconds_per_vw);
  plan.counts = options.kind == PlannerKind::kEqual ? EqualCounts(v, n)
                                                    : SpeedCounts(v, plan.seconds_per_vw, cap);
  plan.ranges = RangesFromCounts(plan.counts);
  plan.bottleneck = Bottleneck(plan.counts, plan.seconds_per_vw);
  return plan;
}

StatusOr<ReplanAdvice> ShouldReplan(const std::vector<uint32_t>& current_counts,
                                    const std::vector<std::optional<double>>& seconds_per_vw,
                                    const PlannerOptions& options, double threshold) {
  if (current_counts.size() != seconds_per_vw.size()) {
    return InvalidArgument(std::to_string(current_counts.size()) + " current counts for " +
                           std::to_string(seconds_per_vw.size()) + " workers");
  }
  if (!(threshold >= 0 && threshold < 1))
    return InvalidArgument("replan threshold must be in [0, 1)");
  uint64_t v = 0;
  uint32_t most = 0;
  for (uint32_t c : current_counts) {
    v += c;
    most = std::max(most, c);
  }
  if (v > UINT32_MAX) return InvalidArgument("current counts sum past 2^32");
  ReplanAdvice advice;
  EPS_ASSIGN_OR_RETURN(advice.plan, PlanVws(static_cast<uint32_t>(v), seconds_per_vw, options));
  advice.current_bottleneck = Bottleneck(current_counts, advice.plan.seconds_per_vw);
  advice.planned_bottleneck = advice.plan.bottleneck;
  const std::string numbers = "predicted step " + Num(advice.current_bottleneck) + " s now, " +
                              Num(advice.planned_bottleneck) + " s with the new plan";
  if (options.max_vws_per_worker != 0 && most > options.max_vws_per_worker) {
    advice.replan = true;
    advice.over_cap = true;
    advice.reason = "a worker holds " + std::to_string(most) + " VWs, over the cap of " +
                    std::to_string(options.max_vws_per_worker) + "; " + numbers;
  } else if (advice.plan.counts == current_counts) {
    advice.reason = "the current assignment is the plan; " + numbers;
  } else if (advice.planned_bottleneck < advice.current_bottleneck * (1 - threshold)) {
    advice.replan = true;
    advice.reason = numbers + " (" +
                    Num(100 * (1 - advice.planned_bottleneck / advice.current_bottleneck)) +
                    " % better, over the " + Num(100 * threshold) + " % threshold)";
  } else {
    advice.reason = numbers + " (within the " + Num(100 * threshold) + " % threshold: keep)";
  }
  return advice;
}

StatusOr<SpeedEstimator> SpeedEstimator::Create(const SpeedEstimatorOptions& options) {
  if (!(options.alpha > 0 && options.alpha <= 1))
    return InvalidArgument("speed estimator: alpha must be in (0, 1]");
  if (options.window < 1) return InvalidArgument("speed estimator: window must be >= 1");
  if (!(options.min_factor > 0 && options.min_factor <= 1 && options.max_factor >= 1 &&
        std::isfinite(options.max_factor))) {
    return InvalidArgument("speed estimator: need 0 < min_factor <= 1 <= max_factor");
  }
  return SpeedEstimator(options);
}

Status SpeedEstimator::Report(WorkerId worker, double seconds_per_vw) {
  if (!ValidTime(seconds_per_vw)) {
    return InvalidArgument("worker " + std::to_string(worker.value()) + " reports " +
                           Num(seconds_per_vw) + " seconds per VW: must be finite and > 0");
  }
  State& s = workers_[worker];
  s.recent.push_back(seconds_per_vw);
  if (s.recent.size() > options_.window) s.recent.pop_front();
  std::vector<double> sorted(s.recent.begin(), s.recent.end());
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];  // the lower one for an even count
  ++s.reports;
  if (s.reports <= options_.window) {
    s.estimate = median;
  } else {
    const double x =
        std::clamp(median, options_.min_factor * s.estimate, options_.max_factor * s.estimate);
    s.estimate = (1 - options_.alpha) * s.estimate + options_.alpha * x;
  }
  return OkStatus();
}

void SpeedEstimator::Forget(WorkerId worker) { workers_.erase(worker); }

std::optional<double> SpeedEstimator::Estimate(WorkerId worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return std::nullopt;
  return it->second.estimate;
}

std::vector<std::optional<double>> SpeedEstimator::Estimates(
    const std::vector<WorkerId>& workers) const {
  std::vector<std::optional<double>> out;
  out.reserve(workers.size());
  for (WorkerId w : workers) out.push_back(Estimate(w));
  return out;
}

const char* ReplanTriggerName(ReplanTrigger trigger) {
  switch (trigger) {
    case ReplanTrigger::kNone:
      return "none";
    case ReplanTrigger::kDue:
      return "due";
    case ReplanTrigger::kSustained:
      return "sustained";
    case ReplanTrigger::kMeasured:
      return "measured";
    case ReplanTrigger::kCap:
      return "cap";
  }
  return "none";
}

StatusOr<ReplanGate> ReplanGate::Create(const ReplanGateOptions& options) {
  if (options.min_steps < 0) return InvalidArgument("replan gate: min_steps must be >= 0");
  if (!(options.threshold >= 0 && options.threshold < 1))
    return InvalidArgument("replan gate: threshold must be in [0, 1)");
  return ReplanGate(options);
}

void ReplanGate::Assigned(int64_t step, const std::vector<WorkerId>& workers,
                          const std::vector<std::optional<double>>& times) {
  assigned_step_ = step;
  std::map<WorkerId, State> fresh;
  for (size_t i = 0; i < workers.size() && i < times.size(); ++i)
    fresh[workers[i]].judged = times[i];
  workers_ = std::move(fresh);
}

void ReplanGate::Kept(const std::vector<WorkerId>& workers,
                      const std::vector<std::optional<double>>& times) {
  for (size_t i = 0; i < workers.size() && i < times.size(); ++i) {
    if (times[i]) workers_[workers[i]].judged = times[i];
  }
}

void ReplanGate::Report(WorkerId worker, double seconds_per_vw) {
  if (!ValidTime(seconds_per_vw)) return;
  State& s = workers_[worker];
  s.reported = true;
  s.last = seconds_per_vw;
  if (!s.judged) return;
  s.streak = seconds_per_vw > *s.judged * (1 + options_.threshold) ? s.streak + 1 : 0;
}

void ReplanGate::Forget(WorkerId worker) { workers_[worker] = State(); }

ReplanGate::Decision ReplanGate::May(int64_t step) const {
  Decision d;
  const int64_t since = step - assigned_step_;
  if (options_.min_steps == 0 || assigned_step_ < 0 || since >= options_.min_steps) {
    d.trigger = ReplanTrigger::kDue;
    d.reason = options_.min_steps == 0
                   ? "no minimum between re-plans"
                   : std::to_string(since) + " steps since the assignment of step " +
                         std::to_string(assigned_step_) + " (at most one re-plan per " +
                         std::to_string(options_.min_steps) + " steps)";
    return d;
  }
  // In worker-id order: the same answer whatever the order of the reports.
  for (const auto& [id, s] : workers_) {
    if (!s.judged && s.reported) {
      d.trigger = ReplanTrigger::kMeasured;
      d.worker = id;
      d.reason = "worker " + std::to_string(id.value()) +
                 " was planned at a guessed speed and now reports " + Num(s.last) + " s per VW";
      return d;
    }
  }
  if (options_.window == 0) return d;
  for (const auto& [id, s] : workers_) {
    if (s.judged && s.streak >= options_.window) {
      d.trigger = ReplanTrigger::kSustained;
      d.worker = id;
      d.reason = "worker " + std::to_string(id.value()) + "'s last " + std::to_string(s.streak) +
                 " reports were each more than " + Num(100 * options_.threshold) +
                 " % slower than the " + Num(*s.judged) + " s per VW it was planned with (newest " +
                 Num(s.last) + " s), " + std::to_string(since) + " steps after the assignment";
      return d;
    }
  }
  return d;
}

}  // namespace eps
