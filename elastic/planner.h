// The VW assignment planner of one job: how many of the job's V virtual workers
// each live worker hosts, as contiguous ranges in worker order.
//
// With heterogeneous devices a step lasts as long as its slowest worker, whose
// time is (VWs it hosts) x (its seconds per VW step). The speed-aware planner
// (PlannerKind::kSpeed) minimises that bottleneck, max_i count_i * t_i, exactly;
// PlannerKind::kEqual is the near-equal split (the baseline, `--planner=equal`).
// Ranges never affect the result's bits (docs/design.md), only its speed.
//
// Everything here is pure (no I/O, no clock, no globals) and thread-compatible.
// The coordinator (elastic/job_state.h) owns a SpeedEstimator and a ReplanGate,
// feeds both the workers' reports, and at step boundaries asks ShouldReplan()
// whether a new plan is worth it and the ReplanGate whether it is time; the
// inter-job scheduler and the simulator call the same PlanVws().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace eps {

enum class PlannerKind { kEqual, kSpeed };

// "equal" or "speed".
const char* PlannerKindName(PlannerKind kind);
// InvalidArgument for anything but "equal" or "speed".
StatusOr<PlannerKind> ParsePlannerKind(const std::string& name);

struct PlannerOptions {
  PlannerKind kind = PlannerKind::kSpeed;
  // At most this many VWs on any one worker (memory); 0: no cap.
  uint32_t max_vws_per_worker = 0;
};

// A VW range [lo, hi); empty (lo == hi) for a worker that gets no VW.
struct VwRange {
  uint32_t lo = 0, hi = 0;
  friend bool operator==(VwRange a, VwRange b) { return a.lo == b.lo && a.hi == b.hi; }
};

struct VwPlan {
  std::vector<uint32_t> counts;        // per worker, in the order given; sums to V
  std::vector<VwRange> ranges;         // contiguous in that order, covering [0, V)
  std::vector<double> seconds_per_vw;  // the times the plan used (unknowns filled in)
  double bottleneck = 0;               // predicted step time: max_i counts[i] * seconds_per_vw[i]
};

// Seconds per VW step for each worker: a measured value where there is one; an
// unknown one is the median of the known values, or 1.0 when none is known.
// Known values must be finite and > 0 (PlanVws checks).
std::vector<double> EffectiveSecondsPerVw(const std::vector<std::optional<double>>& measured);

// The predicted step time of `counts`: max over workers with VWs of count * time.
double Bottleneck(const std::vector<uint32_t>& counts, const std::vector<double>& seconds_per_vw);

// Contiguous ranges, in order, for these counts.
std::vector<VwRange> RangesFromCounts(const std::vector<uint32_t>& counts);

// Plans V VWs over the workers (one entry of `seconds_per_vw` per worker, in
// worker-id order; nullopt = not measured yet).
//
// kSpeed: the optimal bottleneck B* is the V-th smallest of the values k * t_i
// (k = 1 .. cap, every worker i); the plan takes exactly the V smallest of these
// values, ties broken by worker order, so it is deterministic and, for equal
// speeds, identical to the kEqual split. Workers may get 0 VWs. Found by
// bisection on B (the number of values <= B, O(n) per probe, ~64 probes) and a
// heap for the ties at B*: O(n log n + 64 n) time, O(n) space, independent of V
// (V up to 2^32-1; a few thousand workers take well under a millisecond).
// kEqual: V/n each, the first V%n workers one more (JobState's split).
//
// Errors: InvalidArgument for no worker or a known time that is not finite and
// > 0; ResourceExhausted when the cap makes it infeasible (n * cap < V): more
// workers or a larger cap make it feasible. V = 0 gives an empty plan.
StatusOr<VwPlan> PlanVws(uint32_t v, const std::vector<std::optional<double>>& seconds_per_vw,
                         const PlannerOptions& options);

// Hysteresis for re-planning on speed reports (membership changes always re-plan).
struct ReplanAdvice {
  bool replan = false;
  double current_bottleneck = 0;  // the current counts under the new times
  double planned_bottleneck = 0;  // the new plan's
  VwPlan plan;                    // the new plan (use it when replan is true)
  bool over_cap = false;          // replan because the current counts break the cap
  std::string reason;             // for the log, with the numbers
};

// Says to re-plan only if the new plan's predicted bottleneck beats the current
// assignment's (both under the new times) by more than `threshold` (0.1 = 10 %),
// or if the current counts break the cap. V is the sum of `current_counts`.
// If the current counts were optimal for times t and every new time is within
// a factor (1 +- d) of t, the best possible gain is 1 - (1-d)/(1+d) (9.5 % for
// d = 5 %), so a 10 % threshold never moves VWs on such noise.
// Errors: InvalidArgument when the sizes differ or threshold is not in [0, 1);
// PlanVws's errors.
StatusOr<ReplanAdvice> ShouldReplan(const std::vector<uint32_t>& current_counts,
                                    const std::vector<std::optional<double>>& seconds_per_vw,
                                    const PlannerOptions& options, double threshold);

struct SpeedEstimatorOptions {
  double alpha = 0.3;       // weight of a new (filtered) report in the moving average
  uint32_t window = 3;      // a report is first replaced by the median of the last `window` reports
  double min_factor = 0.5;  // ... then clamped to [min_factor, max_factor] x the current estimate
  double max_factor = 2.0;
};

// Per-worker seconds per VW step from the workers' reports: an exponential
// moving average of the median of the last `window` reports, each clamped to
// [0.5x, 2x] of the current estimate. A single outlier (a slow first step, a
// hiccup) never moves the estimate once `window` >= 3 reports are in; a real
// change moves it after window/2 + 1 reports. Until `window` reports are in, the
// estimate is the (lower) median of the reports so far.
// Not thread-safe: the coordinator's event loop owns it.
class SpeedEstimator {
 public:
  SpeedEstimator() = default;
  // InvalidArgument unless 0 < alpha <= 1, window >= 1, 0 < min_factor <= 1 <= max_factor.
  static StatusOr<SpeedEstimator> Create(const SpeedEstimatorOptions& options);

  // InvalidArgument (and ignored) unless seconds_per_vw is finite and > 0.
  Status Report(WorkerId worker, double seconds_per_vw);
  // The worker left: its history goes.
  void Forget(WorkerId worker);
  std::optional<double> Estimate(WorkerId worker) const;
  // In the order given: the input PlanVws wants.
  std::vector<std::optional<double>> Estimates(const std::vector<WorkerId>& workers) const;

 private:
  explicit SpeedEstimator(const SpeedEstimatorOptions& options) : options_(options) {}
  struct State {
    std::deque<double> recent;  // the last `window` raw reports
    uint64_t reports = 0;
    double estimate = 0;
  };
  SpeedEstimatorOptions options_;
  std::map<WorkerId, State> workers_;
};

// Hysteresis in time for re-planning on speed reports, on top of
// ShouldReplan's in size. On a loaded host noise pushes the estimates past any
// threshold now and then (a soak of 82 minutes on an unchanged membership saw
// 10,426 re-plans, one per 38 steps), and each re-plan is a new assignment
// epoch for every worker. So, with an unchanged membership, a speed-driven
// re-plan that ShouldReplan advises happens only
//   - `min_steps` steps or more after the newest assignment (whatever made it:
//     a join, a leave or a re-plan): at most one per `min_steps` steps; or
//   - sooner, when a worker slowed down for a sustained window: its last
//     `window` reports since the assignment each more than `threshold` slower
//     than the time the assignment was judged with (r > t (1 + threshold)); or
//   - sooner, when the assignment was judged with a guessed time for a worker
//     (one not measured yet, counted at the median: a worker that just joined,
//     or one whose speed was forgotten to measure it again) that has reported
//     since: the first measurement completes the plan its join began.
// "Judged with": the times the assignment was planned with, replaced by the
// current estimates whenever ShouldReplan finds the assignment still right
// (Kept), so a drift that never called for a re-plan is not counted later.
// Only a slowdown is urgent. A slower worker holds every step back now; a
// faster one leaves a gain that the next due re-plan collects. And on a shared
// host measured times err on the slow side only (a process is descheduled,
// never sped up): the estimate an assignment was judged with carries the
// recent slow episodes, and the reports after them look faster for many steps.
// Counting those as a sustained change re-planned noise 12-45 steps apart in
// planner_test's host noise; counting slowdowns only, never.
// Membership changes are not the gate's: the caller re-plans them at once and
// tells the gate (Assigned).
struct ReplanGateOptions {
  int64_t min_steps = 50;  // 0: no limit (every advised re-plan happens)
  uint32_t window = 10;    // 0: no early re-plan on a sustained change
  double threshold = 0.25;
};

// Why a re-plan may happen now (kCap: the current counts break the cap, which
// ShouldReplan finds and no gate holds back).
enum class ReplanTrigger { kNone, kDue, kSustained, kMeasured, kCap };
// "none", "due", "sustained", "measured", "cap".
const char* ReplanTriggerName(ReplanTrigger trigger);

// Not thread-safe: the coordinator's event loop owns it, beside the SpeedEstimator.
class ReplanGate {
 public:
  ReplanGate() = default;
  // InvalidArgument unless min_steps >= 0 and threshold is in [0, 1).
  static StatusOr<ReplanGate> Create(const ReplanGateOptions& options);

  // A new assignment takes effect at `step`, planned for `workers` with the
  // times `times` (one per worker; nullopt: guessed). Every streak starts over.
  void Assigned(int64_t step, const std::vector<WorkerId>& workers,
                const std::vector<std::optional<double>>& times);
  // ShouldReplan found the current assignment right under `times`: they are
  // what it is judged with from now on. Streaks go on.
  void Kept(const std::vector<WorkerId>& workers, const std::vector<std::optional<double>>& times);
  // A worker's raw report (seconds per VW, finite and > 0; others are ignored).
  void Report(WorkerId worker, double seconds_per_vw);
  // The worker left, or its speed was forgotten: it counts as guessed, unreported.
  void Forget(WorkerId worker);

  struct Decision {
    ReplanTrigger trigger = ReplanTrigger::kNone;  // kNone: not now
    std::optional<WorkerId> worker;                // kSustained, kMeasured: whose reports
    std::string reason;                            // for the log, with the numbers
  };
  // Whether a re-plan that ShouldReplan advises may happen at step `step`.
  Decision May(int64_t step) const;
  // The step of the newest assignment (-1: none yet).
  int64_t assigned_step() const { return assigned_step_; }

 private:
  explicit ReplanGate(const ReplanGateOptions& options) : options_(options) {}
  struct State {
    std::optional<double> judged;  // nullopt: guessed
    bool reported = false;         // a report since the assignment (or since Forget)
    uint32_t streak = 0;           // reports in a row past the threshold, slower
    double last = 0;               // the newest report
  };
  ReplanGateOptions options_;
  int64_t assigned_step_ = -1;
  std::map<WorkerId, State> workers_;
};

}  // namespace eps
