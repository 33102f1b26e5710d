// The VW planner (elastic/planner.h): exact against brute force on every small
// case, the equal split, caps, hysteresis under noisy speed reports (in size,
// ShouldReplan; in time, ReplanGate), and the speed estimator's outlier filter.
// Runs under ASan + UBSan.
#include "elastic/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "tests/host_noise.h"

namespace eps {
namespace {

using Times = std::vector<std::optional<double>>;

// The smallest bottleneck over every split of v into n counts, each <= cap.
double BruteForce(uint32_t v, const std::vector<double>& t, uint32_t cap) {
  const size_t n = t.size();
  std::vector<uint32_t> c(n, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(size_t, uint32_t)> rec = [&](size_t i, uint32_t left) {
    if (i + 1 == n) {
      if (left > cap) return;
      c[i] = left;
      best = std::min(best, Bottleneck(c, t));
      return;
    }
    for (uint32_t k = 0; k <= std::min(left, cap); ++k) {
      c[i] = k;
      rec(i + 1, left - k);
    }
  };
  rec(0, v);
  return best;
}

void ExpectValid(const VwPlan& plan, uint32_t v, size_t n, uint32_t cap) {
  ASSERT_EQ(plan.counts.size(), n);
  ASSERT_EQ(plan.ranges.size(), n);
  uint32_t lo = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(plan.ranges[i].lo, lo);
    EXPECT_EQ(plan.ranges[i].hi - plan.ranges[i].lo, plan.counts[i]);
    if (cap) {
      EXPECT_LE(plan.counts[i], cap);
    }
    lo = plan.ranges[i].hi;
  }
  EXPECT_EQ(lo, v);
  EXPECT_EQ(plan.bottleneck, Bottleneck(plan.counts, plan.seconds_per_vw));
}

TEST(Planner, SpeedPlanMatchesBruteForceOnEverySmallCase) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> speed(0.1, 4.0);
  int cases = 0;
  for (uint32_t v = 0; v <= 8; ++v) {
    for (size_t n = 1; n <= 4; ++n) {
      for (uint32_t cap = 0; cap <= v; ++cap) {
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<double> t(n);
          for (double& x : t)
            x = trial % 4 == 0 ? double(1 + rng() % 3) : speed(rng);  // some exact ties
          const Times measured(t.begin(), t.end());
          const uint32_t brute_cap = cap == 0 ? v : cap;
          StatusOr<VwPlan> plan = PlanVws(v, measured, {PlannerKind::kSpeed, cap});
          if (uint64_t(brute_cap) * n < v) {
            ASSERT_FALSE(plan.ok());
            EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
            continue;
          }
          ASSERT_TRUE(plan.ok()) << plan.status().ToString();
          ExpectValid(*plan, v, n, cap);
          EXPECT_EQ(plan->bottleneck, BruteForce(v, t, brute_cap))
              << "v=" << v << " n=" << n << " cap=" << cap;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 2000);
}

TEST(Planner, PlansAreDeterministicAndEqualSpeedsGiveTheEqualSplit) {
  for (uint32_t v = 0; v <= 40; ++v) {
    for (size_t n = 1; n <= 7; ++n) {
      Times same;
      for (size_t i = 0; i < n; ++i) same.push_back(0.25);  // (GCC 12 warns falsely on Times(n, x))
      auto speed = PlanVws(v, same, {PlannerKind::kSpeed, 0});
      auto equal = PlanVws(v, same, {PlannerKind::kEqual, 0});
      ASSERT_TRUE(speed.ok() && equal.ok());
      EXPECT_EQ(speed->counts, equal->counts) << "v=" << v << " n=" << n;
      EXPECT_EQ(speed->counts, PlanVws(v, same, {PlannerKind::kSpeed, 0})->counts);
    }
  }
  // Equal split as JobState::Assign: the first V % n workers get one more.
  EXPECT_EQ(PlanVws(10, Times(4), {PlannerKind::kEqual, 0})->counts,
            (std::vector<uint32_t>{3, 3, 2, 2}));
}

TEST(Planner, GivesVwsInProportionToSpeed) {
  // 1x, 2x and 4x slowed workers, V = 14: counts 8 / 4 / 2, every worker 8 s.
  auto plan = PlanVws(14, {1.0, 2.0, 4.0}, {PlannerKind::kSpeed, 0});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->counts, (std::vector<uint32_t>{8, 4, 2}));
  EXPECT_EQ(plan->bottleneck, 8.0);
  EXPECT_EQ(plan->ranges[1], (VwRange{8, 12}));
  auto equal = PlanVws(14, {1.0, 2.0, 4.0}, {PlannerKind::kEqual, 0});
  EXPECT_EQ(equal->bottleneck, 16.0);  // 4 VWs on the 4x worker
}

TEST(Planner, AVeryslowWorkerGetsNothing) {
  auto plan = PlanVws(4, {1.0, 100.0}, {PlannerKind::kSpeed, 0});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->counts, (std::vector<uint32_t>{4, 0}));
  EXPECT_EQ(plan->ranges[1], (VwRange{4, 4}));
}

TEST(Planner, UnknownSpeedsAreTheMedianOfKnownOnesOrOne) {
  EXPECT_EQ(EffectiveSecondsPerVw({std::nullopt, 2.0, std::nullopt, 4.0, 9.0}),
            (std::vector<double>{4.0, 2.0, 4.0, 4.0, 9.0}));
  EXPECT_EQ(EffectiveSecondsPerVw({2.0, std::nullopt, 3.0}), (std::vector<double>{2.0, 2.5, 3.0}));
  EXPECT_EQ(EffectiveSecondsPerVw({std::nullopt, std::nullopt}), (std::vector<double>{1.0, 1.0}));
  auto plan = PlanVws(6, {std::nullopt, std::nullopt}, {PlannerKind::kSpeed, 0});
  EXPECT_EQ(plan->counts, (std::vector<uint32_t>{3, 3}));
}

TEST(Planner, InfeasibleCapIsAnError) {
  auto plan = PlanVws(9, {1.0, 1.0}, {PlannerKind::kSpeed, 4});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("V = 9"), std::string::npos);
  EXPECT_FALSE(PlanVws(9, {1.0, 1.0}, {PlannerKind::kEqual, 4}).ok());
  // The cap binds: the fast worker would take 7 of 8 otherwise.
  auto capped = PlanVws(8, {1.0, 8.0}, {PlannerKind::kSpeed, 5});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->counts, (std::vector<uint32_t>{5, 3}));
}

TEST(Planner, RejectsBadInput) {
  EXPECT_EQ(PlanVws(4, {}, {}).status().code(), StatusCode::kInvalidArgument);
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(PlanVws(4, {1.0, bad}, {}).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParsePlannerKind("speed").value(), PlannerKind::kSpeed);
  EXPECT_EQ(ParsePlannerKind("equal").value(), PlannerKind::kEqual);
  EXPECT_FALSE(ParsePlannerKind("fast").ok());
}

TEST(Planner, LargeJobsPlanFastAndNearTheFluidBound) {
  // V = 2^20 over 4096 workers: the bottleneck lies between the fluid optimum
  // V / sum(1/t) and that plus the slowest time.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> speed(0.01, 1.0);
  Times t(4096);
  double rate = 0, slowest = 0;
  for (auto& x : t) {
    x = speed(rng);
    rate += 1 / *x;
    slowest = std::max(slowest, *x);
  }
  const uint32_t v = 1u << 20;
  auto plan = PlanVws(v, t, {PlannerKind::kSpeed, 0});
  ASSERT_TRUE(plan.ok());
  ExpectValid(*plan, v, t.size(), 0);
  EXPECT_GE(plan->bottleneck, v / rate * (1 - 1e-12));
  EXPECT_LE(plan->bottleneck, v / rate + slowest);
  // Optimal: no single VW move lowers the bottleneck (every worker's next VW lands past it).
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_GE((plan->counts[i] + 1) * *t[i], plan->bottleneck);
  }
  // With a cap that binds for the fast workers.
  auto capped = PlanVws(v, t, {PlannerKind::kSpeed, 400});
  ASSERT_TRUE(capped.ok());
  ExpectValid(*capped, v, t.size(), 400);
}

TEST(Replan, NoisyReportsWithinFivePercentNeverReplanAtTenPercent) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  std::uniform_real_distribution<double> base_speed(0.2, 2.0);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 2 + trial % 6;
    const uint32_t v = 8 + uint32_t(trial) * 5;
    std::vector<WorkerId> ids;
    Times truth;
    for (size_t i = 0; i < n; ++i) {
      ids.push_back(WorkerId(uint32_t(i)));
      truth.push_back(base_speed(rng));
    }
    auto current = PlanVws(v, truth, {});
    ASSERT_TRUE(current.ok());
    SpeedEstimator estimator;
    for (int report = 0; report < 30; ++report) {
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(estimator.Report(ids[i], *truth[i] * noise(rng)).ok());
      auto advice = ShouldReplan(current->counts, estimator.Estimates(ids), {}, 0.10);
      ASSERT_TRUE(advice.ok());
      EXPECT_FALSE(advice->replan) << advice->reason;
      // Raw (unfiltered) reports too: the bound holds for any times within 5 %.
      Times raw;
      for (size_t i = 0; i < n; ++i) raw.push_back(*truth[i] * noise(rng));
      auto raw_advice = ShouldReplan(current->counts, raw, {}, 0.10);
      ASSERT_TRUE(raw_advice.ok());
      EXPECT_FALSE(raw_advice->replan) << raw_advice->reason;
    }
  }
}

TEST(Replan, ARealTwoFoldSlowdownReplans) {
  const std::vector<WorkerId> ids{WorkerId(0), WorkerId(1), WorkerId(2), WorkerId(3)};
  SpeedEstimator estimator;
  for (int k = 0; k < 5; ++k) {
    for (WorkerId w : ids) ASSERT_TRUE(estimator.Report(w, 0.1).ok());
  }
  const std::vector<uint32_t> current{16, 16, 16, 16};
  auto before = ShouldReplan(current, estimator.Estimates(ids), {}, 0.10);
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->replan);
  EXPECT_NE(before->reason.find("is the plan"), std::string::npos);
  int reports = 0;
  bool replanned = false;
  while (!replanned && reports < 10) {
    ++reports;
    for (WorkerId w : ids) ASSERT_TRUE(estimator.Report(w, w == WorkerId(2) ? 0.2 : 0.1).ok());
    auto advice = ShouldReplan(current, estimator.Estimates(ids), {}, 0.10);
    ASSERT_TRUE(advice.ok());
    replanned = advice->replan;
    if (replanned) {
      EXPECT_LT(advice->plan.counts[2], 16u);
      EXPECT_LT(advice->planned_bottleneck, 0.9 * advice->current_bottleneck);
      EXPECT_NE(advice->reason.find("threshold"), std::string::npos) << advice->reason;
    }
  }
  EXPECT_TRUE(replanned);
  EXPECT_LE(reports, 4);  // median of 3 needs 2 reports, then the average crosses 10 %
  // Once converged, the ratio of VWs follows the speeds.
  for (int k = 0; k < 30; ++k) {
    for (WorkerId w : ids) ASSERT_TRUE(estimator.Report(w, w == WorkerId(2) ? 0.2 : 0.1).ok());
  }
  auto plan = PlanVws(64, estimator.Estimates(ids), {});
  EXPECT_EQ(plan->counts, (std::vector<uint32_t>{19, 18, 9, 18}));
}

TEST(Replan, CapViolationReplansAndBadInputIsRefused) {
  auto advice = ShouldReplan({6, 2}, {1.0, 1.0}, {PlannerKind::kSpeed, 4}, 0.1);
  ASSERT_TRUE(advice.ok());
  EXPECT_TRUE(advice->replan);
  EXPECT_EQ(advice->plan.counts, (std::vector<uint32_t>{4, 4}));
  EXPECT_FALSE(ShouldReplan({1, 2}, {1.0}, {}, 0.1).ok());
  EXPECT_FALSE(ShouldReplan({1, 2}, {1.0, 1.0}, {}, 1.5).ok());
  EXPECT_FALSE(
      ShouldReplan({9, 0}, {1.0, 1.0}, {PlannerKind::kSpeed, 4}, 0.1).ok());  // V = 9 cannot fit
}

TEST(SpeedEstimator, OneOutlierDoesNotMoveTheEstimate) {
  SpeedEstimator e;
  const WorkerId w(5);
  EXPECT_FALSE(e.Estimate(w).has_value());
  for (int k = 0; k < 6; ++k) ASSERT_TRUE(e.Report(w, 0.1).ok());
  EXPECT_DOUBLE_EQ(*e.Estimate(w), 0.1);
  ASSERT_TRUE(e.Report(w, 50.0).ok());  // a hiccup
  EXPECT_DOUBLE_EQ(*e.Estimate(w), 0.1);
  ASSERT_TRUE(e.Report(w, 0.1).ok());
  ASSERT_TRUE(e.Report(w, 0.1).ok());
  EXPECT_DOUBLE_EQ(*e.Estimate(w), 0.1);
  // A slow first step (warm-up) is forgotten once the window fills.
  const WorkerId fresh(6);
  ASSERT_TRUE(e.Report(fresh, 30.0).ok());
  EXPECT_DOUBLE_EQ(*e.Estimate(fresh), 30.0);
  ASSERT_TRUE(e.Report(fresh, 0.2).ok());
  ASSERT_TRUE(e.Report(fresh, 0.2).ok());
  EXPECT_DOUBLE_EQ(*e.Estimate(fresh), 0.2);
}

TEST(SpeedEstimator, ClampsEachUpdateAndForgets) {
  SpeedEstimator e;
  const WorkerId w(1);
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(e.Report(w, 1.0).ok());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(e.Report(w, 100.0).ok());
  // Reports 4 and 5: median 1.0 then 100 clamped to 2x; 6: clamped to 2x again.
  const double e5 = 0.7 * 1.0 + 0.3 * 2.0;
  EXPECT_DOUBLE_EQ(*e.Estimate(w), 0.7 * e5 + 0.3 * 2 * e5);
  EXPECT_EQ(e.Report(w, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.Report(w, std::nan("")).code(), StatusCode::kInvalidArgument);
  e.Forget(w);
  EXPECT_FALSE(e.Estimate(w).has_value());
  EXPECT_FALSE(SpeedEstimator::Create({0.0, 3, 0.5, 2.0}).ok());
  EXPECT_FALSE(SpeedEstimator::Create({0.5, 0, 0.5, 2.0}).ok());
  EXPECT_FALSE(SpeedEstimator::Create({0.5, 3, 1.5, 2.0}).ok());
  EXPECT_TRUE(SpeedEstimator::Create({0.5, 5, 0.8, 1.25}).ok());
}

// ---- ReplanGate: hysteresis in time ---------------------------------------------

// The coordinator's loop in small (JobState::MaybeReplan): in step t every worker
// reports; at the boundary to t + 1 ShouldReplan advises and the gate decides.
class ReplanLoop {
 public:
  // n workers measured at `times` (5 clean reports each), V VWs planned for them at step 0.
  ReplanLoop(const std::vector<double>& times, uint32_t v, const ReplanGateOptions& options)
      : threshold_(options.threshold) {
    for (size_t i = 0; i < times.size(); ++i) ids_.push_back(WorkerId(uint32_t(i)));
    auto gate = ReplanGate::Create(options);
    EXPECT_TRUE(gate.ok());
    if (gate.ok()) gate_ = std::move(gate).value();
    for (int k = 0; k < 5; ++k) {
      for (size_t i = 0; i < times.size(); ++i)
        EXPECT_TRUE(estimator_.Report(ids_[i], times[i]).ok());
    }
    auto plan = PlanVws(v, estimator_.Estimates(ids_), {});
    EXPECT_TRUE(plan.ok());
    if (plan.ok()) counts_ = plan->counts;
    gate_.Assigned(0, ids_, estimator_.Estimates(ids_));
  }

  // Step t's reports, one per worker; then the boundary to t + 1.
  void Step(int64_t t, const std::vector<double>& reports) {
    for (size_t i = 0; i < ids_.size(); ++i) {
      ASSERT_TRUE(estimator_.Report(ids_[i], reports[i]).ok());
      gate_.Report(ids_[i], reports[i]);
    }
    const Times estimates = estimator_.Estimates(ids_);
    auto advice = ShouldReplan(counts_, estimates, {}, threshold_);
    ASSERT_TRUE(advice.ok());
    if (!advice->replan) return gate_.Kept(ids_, estimates);
    ++advised_;
    const ReplanGate::Decision d = gate_.May(t + 1);
    if (d.trigger == ReplanTrigger::kNone) return;
    EXPECT_FALSE(d.reason.empty());
    counts_ = advice->plan.counts;
    replans_.push_back({t + 1, d});
    gate_.Assigned(t + 1, ids_, estimates);
  }

  const std::vector<uint32_t>& counts() const { return counts_; }
  // (step, decision) of every re-plan, in order.
  const std::vector<std::pair<int64_t, ReplanGate::Decision>>& replans() const { return replans_; }
  int advised() const { return advised_; }

 private:
  std::vector<WorkerId> ids_;
  SpeedEstimator estimator_;
  ReplanGate gate_;
  double threshold_;
  std::vector<uint32_t> counts_;
  std::vector<std::pair<int64_t, ReplanGate::Decision>> replans_;
  int advised_ = 0;
};

TEST(ReplanGate, NoiseAroundAMeanNeverReplansMoreThanOncePerFiftySteps) {
  const std::vector<double> times{0.010, 0.010, 0.012, 0.020};  // seconds per VW, as measured
  constexpr int64_t kSteps = 2000;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ReplanGateOptions gated;  // the defaults: 50 steps, a window of 10, 25 %
    ReplanLoop with_gate(times, 32, gated);
    ReplanLoop without_gate(times, 32, {0, 0, gated.threshold});
    testing_noise::HostNoise noise(times.size(), seed, 4), same_noise(times.size(), seed, 4);
    for (int64_t t = 0; t < kSteps; ++t) {
      with_gate.Step(t, noise.Reports(times));
      without_gate.Step(t, same_noise.Reports(times));
    }
    // The noise is real: without the gate it re-plans far more often than once per 50 steps.
    EXPECT_GT(without_gate.replans().size(), size_t(3 * kSteps / 50)) << "seed " << seed;
    EXPECT_GT(with_gate.advised(), 3 * kSteps / 50) << "seed " << seed;
    int64_t previous = 0;
    for (const auto& [step, decision] : with_gate.replans()) {
      EXPECT_GE(step - previous, 50) << "seed " << seed << ": " << decision.reason;
      EXPECT_EQ(decision.trigger, ReplanTrigger::kDue) << decision.reason;
      previous = step;
    }
    EXPECT_LE(with_gate.replans().size(), size_t(kSteps / 50)) << "seed " << seed;
  }
}

TEST(ReplanGate, ASustainedSlowdownReplansWithinTheWindowAndAShorterOneWaits) {
  const std::vector<double> times{0.01, 0.01, 0.01, 0.01};
  ReplanGateOptions options;  // 50 steps, a window of 10, 25 %
  for (int slow_reports : {4, 9, 40}) {
    ReplanLoop loop(times, 64, options);
    ASSERT_EQ(loop.counts(), (std::vector<uint32_t>{16, 16, 16, 16}));
    constexpr int64_t kOnset = 5;  // well inside the 50 steps after the assignment of step 0
    for (int64_t t = 0; t < 45; ++t) {
      std::vector<double> r = times;
      if (t >= kOnset && t < kOnset + slow_reports) r[2] = 0.02;  // worker 2 twice as slow
      loop.Step(t, r);
    }
    if (slow_reports < int(options.window)) {
      EXPECT_TRUE(loop.replans().empty()) << slow_reports << " slow reports are noise";
      continue;
    }
    ASSERT_EQ(loop.replans().size(), 1u);
    const auto& [step, decision] = loop.replans()[0];
    EXPECT_EQ(decision.trigger, ReplanTrigger::kSustained) << decision.reason;
    EXPECT_EQ(decision.worker, WorkerId(2));
    EXPECT_EQ(step, kOnset + int64_t(options.window)) << "at the window's end: " << decision.reason;
    EXPECT_LT(loop.counts()[2], 16u);
    EXPECT_NE(decision.reason.find("slower"), std::string::npos) << decision.reason;
  }
}

TEST(ReplanGate, AWorkerPlannedAtAGuessedSpeedReplansAtItsFirstReport) {
  auto gate = ReplanGate::Create({});
  ASSERT_TRUE(gate.ok());
  const std::vector<WorkerId> ids{WorkerId(0), WorkerId(7)};
  gate->Assigned(100, ids, {0.01, std::nullopt});  // worker 7 just joined
  gate->Report(WorkerId(0), 0.01);
  EXPECT_EQ(gate->May(101).trigger, ReplanTrigger::kNone);
  gate->Report(WorkerId(7), 0.04);
  const ReplanGate::Decision d = gate->May(101);
  EXPECT_EQ(d.trigger, ReplanTrigger::kMeasured);
  EXPECT_EQ(d.worker, WorkerId(7));
  // Once the assignment is judged right under its measured time, that trigger is spent.
  gate->Kept(ids, {0.01, 0.04});
  EXPECT_EQ(gate->May(102).trigger, ReplanTrigger::kNone);
  // A forgotten speed (a probe) is a guess again, measured at its next report.
  gate->Forget(WorkerId(7));
  EXPECT_EQ(gate->May(103).trigger, ReplanTrigger::kNone);
  gate->Report(WorkerId(7), 0.05);
  EXPECT_EQ(gate->May(103).trigger, ReplanTrigger::kMeasured);
  EXPECT_EQ(gate->May(150).trigger, ReplanTrigger::kDue) << "50 steps after step 100";
}

TEST(ReplanGate, AStreakCountsSlowerReportsInARowOnlyAndZeroesDisableTheGate) {
  auto gate = ReplanGate::Create({50, 3, 0.25});
  ASSERT_TRUE(gate.ok());
  const std::vector<WorkerId> ids{WorkerId(0)};
  gate->Assigned(0, ids, {1.0});
  for (double r : {2.0, 2.0, 1.2, 2.0, 2.0, 0.5, 2.0, 2.0}) gate->Report(WorkerId(0), r);
  EXPECT_EQ(gate->May(10).trigger, ReplanTrigger::kNone) << "never 3 in a row past 25 % slower";
  for (double r : {0.5, 0.5, 0.5, 0.5}) gate->Report(WorkerId(0), r);
  EXPECT_EQ(gate->May(10).trigger, ReplanTrigger::kNone) << "faster waits for the due re-plan";
  for (double r : {1.3, 1.3, 1.3}) gate->Report(WorkerId(0), r);
  const ReplanGate::Decision d = gate->May(10);
  EXPECT_EQ(d.trigger, ReplanTrigger::kSustained);
  EXPECT_NE(d.reason.find("slower"), std::string::npos) << d.reason;
  gate->Assigned(10, ids, {1.3});
  EXPECT_EQ(gate->May(11).trigger, ReplanTrigger::kNone)
      << "a new assignment starts every streak over";
  auto open = ReplanGate::Create({0, 0, 0.25});
  ASSERT_TRUE(open.ok());
  open->Assigned(0, ids, {1.0});
  EXPECT_EQ(open->May(1).trigger, ReplanTrigger::kDue) << "min_steps 0: no minimum";
  EXPECT_FALSE(ReplanGate::Create({-1, 10, 0.25}).ok());
  EXPECT_FALSE(ReplanGate::Create({50, 10, 1.0}).ok());
  EXPECT_STREQ(ReplanTriggerName(ReplanTrigger::kSustained), "sustained");
}

}  // namespace
}  // namespace eps
