// The inter-job scheduler (elastic/scheduler.h) on hand-made cases: the job that
// gains more gets the worker, min_workers bundles, device-type limits, the move
// threshold, and decisions whose reasons carry the numbers. Runs under ASan + UBSan.
#include "elastic/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace eps {
namespace {

SchedulerJob Job(const std::string& id, uint32_t v, std::map<std::string, double> times,
                 double weight = 1.0) {
  SchedulerJob j;
  j.id = id;
  j.virtual_workers = v;
  j.batch_per_vw = 10;
  j.seconds_per_vw = std::move(times);
  j.weight = weight;
  return j;
}

std::vector<PoolWorker> Pool(const std::vector<std::string>& types) {
  std::vector<PoolWorker> pool;
  for (size_t i = 0; i < types.size(); ++i) pool.push_back({WorkerId(uint32_t(i)), types[i], 1.0});
  return pool;
}

size_t CountFor(const ScheduleResult& r, const std::string& job) {
  size_t n = 0;
  for (const auto& [w, j] : r.allocation) n += j == job ? 1 : 0;
  return n;
}

TEST(JobThroughput, IsVTimesBatchOverThePlannersBottleneck) {
  SchedulerJob j = Job("a", 6, {{"fast", 1.0}, {"slow", 2.0}});
  auto pool = Pool({"fast", "slow"});
  // Speed plan: 4 VWs on the fast worker, 2 on the slow one: 4 s per step, 60 samples per step.
  EXPECT_DOUBLE_EQ(JobThroughput(j, pool), 60.0 / 4.0);
  j.planner = PlannerKind::kEqual;  // 3 and 3: 6 s
  EXPECT_DOUBLE_EQ(JobThroughput(j, pool), 60.0 / 6.0);
  pool[1].speed = 2.0;  // the slow one, sped up 2x, equals the fast one
  EXPECT_DOUBLE_EQ(JobThroughput(j, pool), 60.0 / 3.0);
  EXPECT_EQ(JobThroughput(j, Pool({"fast", "other"})), 0.0);  // a type it cannot use
  j.min_workers = 3;
  EXPECT_EQ(JobThroughput(j, pool), 0.0);
}

TEST(Scheduler, TheJobThatGainsMoreGetsTheWorker) {
  // a runs on 2 workers with V = 2: a third adds nothing. b (V = 8) has 1 worker: a second doubles
  // it.
  std::vector<SchedulerJob> jobs{Job("a", 2, {{"gpu", 1.0}}), Job("b", 8, {{"gpu", 1.0}})};
  auto pool = Pool({"gpu", "gpu", "gpu", "gpu"});
  std::map<WorkerId, std::string> current{
      {WorkerId(0), "a"}, {WorkerId(1), "a"}, {WorkerId(2), "b"}};
  auto r = Schedule(jobs, pool, current);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->rebalanced);
  ASSERT_EQ(r->decisions.size(), 1u);
  const SchedulerDecision& d = r->decisions[0];
  EXPECT_EQ(d.worker, WorkerId(3));
  EXPECT_EQ(d.from_job, "");
  EXPECT_EQ(d.to_job, "b");
  // b: 80 samples per step, 8 s on one worker, 4 s on two: 10 -> 20 samples/s.
  EXPECT_NE(d.reason.find("job b: 1 -> 2 workers, 10 -> 20 samples/s"), std::string::npos)
      << d.reason;
  EXPECT_DOUBLE_EQ(r->throughput.at("a"), 20.0);
  EXPECT_DOUBLE_EQ(r->throughput.at("b"), 20.0);
}

TEST(Scheduler, WeightsDecideBetweenEqualGains) {
  std::vector<SchedulerJob> jobs{Job("long", 4, {{"gpu", 1.0}}, 0.001),
                                 Job("short", 4, {{"gpu", 1.0}}, 0.01)};
  auto r = Schedule(jobs, Pool({"gpu", "gpu"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(CountFor(*r, "short"), 2u);
  EXPECT_EQ(CountFor(*r, "long"), 0u);
  // Equal weights: the earlier job wins ties, then the other gains more from the second worker.
  jobs[0].weight = jobs[1].weight = 1.0;
  r = Schedule(jobs, Pool({"gpu", "gpu"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->allocation.at(WorkerId(0)), "long");
  EXPECT_EQ(r->allocation.at(WorkerId(1)),
            "long");  // 4 VWs: 2 workers double it, as one would for "short"
}

TEST(Scheduler, FastWorkersGoWhereTheyHelpMost) {
  // "big" speeds up 4x on the A100 but "small" only 1.25x: the A100 goes to big.
  std::vector<SchedulerJob> jobs{Job("small", 1, {{"A100", 0.8}, {"T4", 1.0}}),
                                 Job("big", 1, {{"A100", 1.0}, {"T4", 4.0}})};
  auto r = Schedule(jobs, Pool({"T4", "A100"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->allocation.at(WorkerId(1)), "big");
  EXPECT_EQ(r->allocation.at(WorkerId(0)), "small");
}

TEST(Scheduler, MinWorkersAreGivenAsABundle) {
  SchedulerJob needs3 = Job("needs3", 6, {{"gpu", 1.0}});
  needs3.min_workers = 3;
  auto r = Schedule({needs3}, Pool({"gpu", "gpu", "gpu"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(CountFor(*r, "needs3"), 3u);
  EXPECT_NE(r->decisions[0].reason.find("with 3 more"), std::string::npos)
      << r->decisions[0].reason;
  r = Schedule({needs3}, Pool({"gpu", "gpu"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->allocation.empty());  // 2 workers cannot run it: they stay idle
}

TEST(Scheduler, LooksPastStepsOfTheIntegerSplit) {
  // V = 4 on 2 workers: a third worker leaves the bottleneck at 2 VWs; a fourth halves it.
  std::vector<SchedulerJob> jobs{Job("a", 4, {{"gpu", 1.0}})};
  std::map<WorkerId, std::string> current{{WorkerId(0), "a"}, {WorkerId(1), "a"}};
  auto r = Schedule(jobs, Pool({"gpu", "gpu", "gpu", "gpu"}), current);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(CountFor(*r, "a"), 4u);
}

TEST(Scheduler, SingleDeviceTypeJobsStayOnOneType) {
  SchedulerJob homo = Job("homo", 4, {{"A100", 1.0}, {"T4", 2.0}});
  homo.single_device_type = true;
  auto r = Schedule({homo}, Pool({"T4", "A100", "T4", "A100"}), {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->allocation.size(), 2u);
  for (const auto& [w, job] : r->allocation) EXPECT_TRUE(w == WorkerId(1) || w == WorkerId(3));
  SchedulerJob hetero = homo;
  hetero.single_device_type = false;
  r = Schedule({hetero}, Pool({"T4", "A100", "T4", "A100"}), {});
  ASSERT_TRUE(r.ok());
  // 4 VWs: 2 on each A100 (2 s) is the bottleneck with or without T4s (a T4 with 1 VW takes 2 s
  // too).
  EXPECT_DOUBLE_EQ(r->throughput.at("homo"), 40.0 / 2.0);
}

TEST(Scheduler, MovesBusyWorkersOnlyPastTheThreshold) {
  // a holds both workers. b arrives with a slightly higher weight: giving b
  // both raises the weighted total by 4 %, under the 5 % threshold.
  std::vector<SchedulerJob> jobs{Job("a", 2, {{"gpu", 1.0}}, 1.0),
                                 Job("b", 2, {{"gpu", 1.0}}, 1.04)};
  std::map<WorkerId, std::string> current{{WorkerId(0), "a"}, {WorkerId(1), "a"}};
  auto r = Schedule(jobs, Pool({"gpu", "gpu"}), current);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->decisions.empty());
  EXPECT_FALSE(r->rebalanced);
  // b far more urgent: it takes both (the from-scratch plan is 10x better).
  jobs[1].weight = 10.0;
  r = Schedule(jobs, Pool({"gpu", "gpu"}), current);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->rebalanced);
  ASSERT_EQ(r->decisions.size(), 2u);
  for (const SchedulerDecision& d : r->decisions) {
    EXPECT_EQ(d.from_job, "a");
    EXPECT_EQ(d.to_job, "b");
    EXPECT_NE(d.reason.find("job a: 2 -> 0 workers, 20 -> 0 samples/s"), std::string::npos)
        << d.reason;
    EXPECT_NE(
        d.reason.find("rebalance: weighted throughput 20 without moves, 200 with (+900 % > 5 %)"),
        std::string::npos)
        << d.reason;
  }
}

TEST(Scheduler, WorkersOfFinishedJobsAreFreedAndIdleOnesStay) {
  std::vector<SchedulerJob> jobs{Job("a", 1, {{"gpu", 1.0}})};
  std::map<WorkerId, std::string> current{{WorkerId(0), "gone"}, {WorkerId(1), "gone"}};
  auto r = Schedule(jobs, Pool({"gpu", "gpu"}), current);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->decisions.size(), 2u);
  EXPECT_EQ(r->decisions[0].to_job, "a");  // V = 1: one worker is enough
  EXPECT_EQ(r->decisions[1].from_job, "gone");
  EXPECT_EQ(r->decisions[1].to_job, "");
  EXPECT_NE(r->decisions[1].reason.find("job gone, which is gone"), std::string::npos)
      << r->decisions[1].reason;
}

TEST(Scheduler, IsDeterministic) {
  std::vector<SchedulerJob> jobs{Job("a", 8, {{"A100", 0.5}, {"T4", 1.5}}, 0.3),
                                 Job("b", 16, {{"A100", 0.2}, {"V100", 0.3}}, 0.2),
                                 Job("c", 4, {{"V100", 1.0}, {"T4", 1.2}}, 0.5)};
  auto pool = Pool({"A100", "T4", "V100", "T4", "A100", "V100", "T4", "T4"});
  auto r1 = Schedule(jobs, pool, {});
  auto r2 = Schedule(jobs, pool, {});
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->allocation, r2->allocation);
  // Stable: a second round from the first round's allocation moves nothing.
  auto r3 = Schedule(jobs, pool, r1->allocation);
  ASSERT_TRUE(r3.ok());
  EXPECT_TRUE(r3->decisions.empty());
}

TEST(Scheduler, RejectsBadInput) {
  auto pool = Pool({"gpu"});
  EXPECT_FALSE(Schedule({Job("a", 1, {{"gpu", 1}}), Job("a", 1, {{"gpu", 1}})}, pool, {}).ok());
  EXPECT_FALSE(Schedule({Job("a", 0, {{"gpu", 1}})}, pool, {}).ok());
  EXPECT_FALSE(Schedule({Job("a", 1, {{"gpu", -1}})}, pool, {}).ok());
  EXPECT_FALSE(Schedule({Job("a", 1, {{"gpu", 1}}, -2)}, pool, {}).ok());
  auto twice = Pool({"gpu", "gpu"});
  twice[1].id = twice[0].id;
  EXPECT_FALSE(Schedule({Job("a", 1, {{"gpu", 1}})}, twice, {}).ok());
  pool[0].speed = 0;
  EXPECT_FALSE(Schedule({Job("a", 1, {{"gpu", 1}})}, pool, {}).ok());
}

}  // namespace
}  // namespace eps
