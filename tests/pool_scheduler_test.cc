// The inter-job scheduler process's decisions (elastic/pool_scheduler.h),
// driven poll by poll with a FakeClock.
#include "elastic/pool_scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

namespace eps {
namespace {

using std::chrono::milliseconds;

JobInfoReply Info(const std::string& id, uint32_t v, int64_t steps, int64_t step,
                  std::vector<WorkerSpeed> workers = {}) {
  JobInfoReply r;
  r.job_id = id;
  r.virtual_workers = v;
  r.batch_per_vw = 32;
  r.min_workers = 1;
  r.steps = steps;
  r.step = step;
  r.workers = std::move(workers);
  return r;
}

class Pool {
 public:
  Pool() {
    auto s = PoolScheduler::Create({{"short", "tcp://127.0.0.1:1001", "tok-s", ""},
                                    {"long", "tcp://127.0.0.1:1002", "tok-l", ""}},
                                   PoolSchedulerOptions(), &clock);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    scheduler.emplace(std::move(s).value());
  }
  PoolAssign Poll(const std::string& host, const std::string& job = "",
                  const std::string& kind = "cpu") {
    return scheduler->OnRequest(PoolRequest{host, kind, job, ""});
  }
  std::vector<SchedulerDecision> Round() {
    auto d = scheduler->Round();
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : std::vector<SchedulerDecision>{};
  }
  // Every host polls from the job it was told.
  std::map<std::string, std::string> Follow(const std::vector<std::string>& hosts) {
    std::map<std::string, std::string> jobs;
    for (const std::string& h : hosts) jobs[h] = Poll(h, last_[h]).job;
    for (const std::string& h : hosts) last_[h] = jobs[h];
    return jobs;
  }

  FakeClock clock;
  std::optional<PoolScheduler> scheduler;
  std::map<std::string, std::string> last_;
};

TEST(PoolScheduler, ANewWorkerIsIdleUntilARoundPlacesItAndOnlyRunningJobsGetWorkers) {
  Pool p;
  EXPECT_EQ(p.Poll("a:1").job, "");
  EXPECT_TRUE(p.Round().empty()) << "no job answered yet: nothing to place";
  EXPECT_EQ(p.Poll("a:1").job, "");
  p.scheduler->OnJobInfo("long", Info("long", 8, 1000, 0));
  const auto decisions = p.Round();
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].to_job, "long");
  EXPECT_FALSE(decisions[0].reason.empty());
  const PoolAssign a = p.Poll("a:1");
  EXPECT_EQ(a.job, "long");
  EXPECT_EQ(a.coordinator, "tcp://127.0.0.1:1002");
  EXPECT_EQ(a.token, "tok-l");
}

// Weights are 1 / remaining samples: the job closest to its end gets the
// workers it can use (V = 2: two), the rest go to the other job.
TEST(PoolScheduler, TheJobClosestToItsEndGetsTheWorkersItCanUseAndTheRestGoElsewhere) {
  Pool p;
  const std::vector<std::string> hosts = {"a:1", "b:2", "c:3"};
  p.Follow(hosts);
  p.scheduler->OnJobInfo("short", Info("short", 2, 100, 50));
  p.scheduler->OnJobInfo("long", Info("long", 8, 1000, 0));
  EXPECT_EQ(p.Round().size(), 3u);
  std::map<std::string, int> count;
  for (const auto& [h, job] : p.Follow(hosts)) ++count[job];
  EXPECT_EQ(count["short"], 2);
  EXPECT_EQ(count["long"], 1);
  // Nothing changed: the next round moves nobody.
  for (const SchedulerDecision& d : p.Round())
    ADD_FAILURE() << d.from_job << " -> " << d.to_job << ": " << d.reason;

  // The short job ends: its coordinator stops answering. One silent round is
  // a restart, perhaps; kSilentRounds in a row, an end: its workers go to the other job.
  p.scheduler->OnJobSilent("short");
  EXPECT_TRUE(p.Round().empty());
  EXPECT_FALSE(p.scheduler->JobOver("short"));
  for (int i = 1; i < PoolScheduler::kSilentRounds; ++i) p.scheduler->OnJobSilent("short");
  EXPECT_TRUE(p.scheduler->JobOver("short"));
  const auto decisions = p.Round();
  EXPECT_EQ(decisions.size(), 2u);
  for (const SchedulerDecision& d : decisions) {
    EXPECT_EQ(d.from_job, "short");
    EXPECT_EQ(d.to_job, "long");
  }
  for (const auto& [h, job] : p.Follow(hosts)) EXPECT_EQ(job, "long") << h;
}

TEST(PoolScheduler, AJobAtItsLastStepIsOverAndASilentWorkerLeavesThePool) {
  Pool p;
  p.Follow({"a:1", "b:2"});
  p.scheduler->OnJobInfo("long", Info("long", 8, 1000, 0));
  p.Round();
  EXPECT_EQ(p.Follow({"a:1", "b:2"}).at("b:2"), "long");
  p.clock.Advance(milliseconds(6000));
  p.Follow({"a:1"});  // b:2 went silent
  p.Round();
  EXPECT_NE(p.scheduler->AllocationString().find("long: a:1 |"), std::string::npos)
      << p.scheduler->AllocationString();
  EXPECT_EQ(p.scheduler->AllocationString().find("b:2"), std::string::npos);
  p.scheduler->OnJobInfo("long", Info("long", 8, 1000, 1000));  // done
  p.Round();
  EXPECT_EQ(p.Poll("a:1", "long").job, "");
}

// A worker measured 4x slower than its kind's fastest on the job counts as
// speed 0.25: with two jobs of equal needs, the fast workers share out first.
// A worker whose coordinator said "stop" tells the scheduler at its next
// poll: the job is over at once, every worker placed on it is idle until the
// next round, which places them elsewhere.
TEST(PoolScheduler, AWorkerThatSawItsJobEndEndsItAtOnceForEveryWorker) {
  Pool p;
  const std::vector<std::string> hosts = {"a:1", "b:2"};
  p.Follow(hosts);
  p.scheduler->OnJobInfo("short", Info("short", 8, 100, 10));
  p.scheduler->OnJobInfo("long", Info("long", 8, 100000, 0));
  p.Round();
  auto placed = p.Follow(hosts);
  ASSERT_EQ(placed["a:1"], "short");
  ASSERT_EQ(placed["b:2"], "short");
  // A stranger's "ended" for a job that never ran, or an unknown one, changes nothing.
  p.scheduler->OnRequest(PoolRequest{"c:3", "cpu", "", "nosuchjob"});
  EXPECT_FALSE(p.scheduler->JobOver("short"));

  EXPECT_EQ(p.scheduler->OnRequest(PoolRequest{"a:1", "cpu", "", "short"}).job, "");
  EXPECT_TRUE(p.scheduler->JobOver("short"));
  EXPECT_EQ(p.Poll("b:2", "short").job, "") << "b is told to leave the ended job before any round";
  p.Round();
  EXPECT_EQ(p.Poll("a:1").job, "long");
  EXPECT_EQ(p.Poll("b:2").job, "long");
  // The job's coordinator answering late (its final JobInfo) does not revive it.
  p.scheduler->OnJobInfo("short", Info("short", 8, 100, 99));
  EXPECT_TRUE(p.scheduler->JobOver("short"));
}

TEST(PoolScheduler, MeasuredSpeedsComeFromTheJobsReports) {
  Pool p;
  p.Follow({"fast:1", "slow:2"});
  p.scheduler->OnJobInfo("long", Info("long", 8, 1000, 0));
  p.Round();
  p.Follow({"fast:1", "slow:2"});
  p.scheduler->OnJobInfo(
      "long", Info("long", 8, 1000, 10, {{"fast:1", "cpu", 0.01}, {"slow:2", "cpu", 0.04}}));
  p.Round();
  // Both stay on the only job; the job's VWs split by speed happens in its coordinator.
  for (const auto& [h, job] : p.Follow({"fast:1", "slow:2"})) EXPECT_EQ(job, "long") << h;
}

TEST(PoolScheduler, DuplicateOrEmptyJobIdsAreRefused) {
  FakeClock clock;
  EXPECT_EQ(
      PoolScheduler::Create({{"a", "x", "", ""}, {"a", "y", "", ""}}, {}, &clock).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(PoolScheduler::Create({{"", "x", "", ""}}, {}, &clock).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PoolScheduler, TheJobsFileNamesJobsCoordinatorsAndTokenFiles) {
  char dir[] = "/tmp/eps-pool-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string token = std::string(dir) + "/token", jobs = std::string(dir) + "/jobs";
  std::ofstream(token) << "s3cret\n";
  std::ofstream(jobs) << "# id coordinator token\n\njob-a tcp://10.0.0.1:5555 " << token
                      << "\njob-b ipc:///tmp/b -  # none\n";
  auto read = ReadJobsFile(jobs);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].id, "job-a");
  EXPECT_EQ((*read)[0].coordinator, "tcp://10.0.0.1:5555");
  EXPECT_EQ((*read)[0].token, "s3cret");
  EXPECT_EQ((*read)[1].token, "");
  std::ofstream(jobs) << "job-a tcp://x\n";
  auto bad = ReadJobsFile(jobs);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(":1"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(ReadJobsFile(std::string(dir) + "/missing").status().code(), StatusCode::kNotFound);
  // A fourth field: the job's servers' CURVE public key file.
  const std::string key = std::string(dir) + "/server.pub";
  std::ofstream(key) << "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n";
  std::ofstream(jobs) << "job-c tcp://x " << token << " " << key << "\n";
  auto curve = ReadJobsFile(jobs);
  ASSERT_TRUE(curve.ok()) << curve.status().ToString();
  EXPECT_EQ((*curve)[0].server_key, "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
  std::ofstream(jobs) << "job-c tcp://x " << token << " " << token << "\n";  // not a key
  EXPECT_EQ(ReadJobsFile(jobs).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(jobs) << "job-c tcp://x " << token << " " << key << " extra\n";
  EXPECT_EQ(ReadJobsFile(jobs).status().code(), StatusCode::kInvalidArgument);
  std::remove(key.c_str());
  std::remove(token.c_str());
  std::remove(jobs.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace eps
