// The coordinator's dispatch of a decoded message (elastic/coordinator_dispatch.h):
// who may send what, the peers it learns, and what it says to answer.
#include "elastic/coordinator_dispatch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace eps {
namespace {

JobSpec Spec() {
  JobSpec s;
  s.job_id = "job";
  s.model = "tiny";
  s.virtual_workers = 4;
  s.batch_per_vw = 2;
  s.steps = 3;
  s.num_shards = 1;
  return s;
}

struct Job {
  Job() : state(Spec(), JobStateOptions(), &clock) {}
  Dispatched From(const std::string& peer, const Body& body) {
    return DispatchMessage(peer, body, &state, &peers);
  }
  FakeClock clock;  // before `state`, which reads it on construction
  JobState state;
  CoordinatorPeers peers;
};

TEST(CoordinatorDispatch, RegistrationsRecordThePeersAndTheirMetricsAddresses) {
  Job job;
  Dispatched d = job.From("s0", RegisterShard{ShardId(0), "tcp://s0", Step(-1), Step(-1), "s0:9"});
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_TRUE(job.peers.IsShard(ShardId(0), "s0"));
  EXPECT_EQ(job.peers.shard_metrics[0], "s0:9");
  d = job.From("w", RegisterWorker{"host", 7, "cpu", "w:9"});
  EXPECT_TRUE(d.error.ok());
  ASSERT_EQ(job.peers.workers.size(), 1u);
  const WorkerId id = job.peers.workers.begin()->first;
  EXPECT_TRUE(job.peers.IsWorker(id, "w"));
  EXPECT_EQ(job.peers.worker_metrics[id], "w:9");
}

TEST(CoordinatorDispatch, AShardIdOverTheLimitIsRefusedAndNotRecordedAndAnotherIsASpare) {
  Job job;
  Dispatched d =
      job.From("s", RegisterShard{ShardId(kMaxShardId), "tcp://s", Step(-1), Step(-1), ""});
  EXPECT_FALSE(d.error.ok());
  EXPECT_TRUE(std::all_of(job.peers.shards.begin(), job.peers.shards.end(),
                          [](const std::string& p) { return p.empty(); }));
  // An id outside the job's shards is a spare: the next reshard takes it in.
  d = job.From("s9", RegisterShard{ShardId(9), "tcp://s9", Step(-1), Step(-1), ""});
  EXPECT_TRUE(d.error.ok());
  EXPECT_EQ(job.peers.shards[9], "s9");
  const JobStatusReply status = job.state.StatusReport();
  ASSERT_EQ(status.shards.size(), 2u);
  EXPECT_EQ(status.shards[1].role, "spare");
}

TEST(CoordinatorDispatch, AJobControlRemovingAShardAnswersWithTheStatusOrTheError) {
  Job job;
  Dispatched d = job.From("cli", JobControl{false, 0, ShardId(0)});
  EXPECT_EQ(d.error.code(), StatusCode::kFailedPrecondition);  // the job's only shard
  d = job.From("cli", JobControl{false, 0, ShardId(3)});
  EXPECT_EQ(d.error.code(), StatusCode::kNotFound);
}

TEST(CoordinatorDispatch, MessagesNamingAWorkerOrShardAreTakenOnlyFromItsPeer) {
  Job job;
  job.From("w", RegisterWorker{"host", 7, "cpu", ""});
  const WorkerId id = job.peers.workers.begin()->first;
  Dispatched d = job.From("other", StepRequest{id, Step(-1), {}, 10, 1});
  EXPECT_EQ(d.error.code(), StatusCode::kAborted);
  d = job.From("other", StepDone{});
  EXPECT_EQ(d.error.code(), StatusCode::kNotFound);
  d = job.From("other", RollbackDone{});
  EXPECT_EQ(d.error.code(), StatusCode::kNotFound);
  d = job.From("other", EvalResult{});
  EXPECT_TRUE(d.error.ok());  // never answered
  EXPECT_EQ(d.dropped.code(), StatusCode::kAborted);
}

TEST(CoordinatorDispatch, ALeaveFromAStrangerIsAnsweredWithStop) {
  Job job;
  Dispatched d = job.From("stranger", Leave{WorkerId(3), "bye", false});
  ASSERT_TRUE(d.reply.has_value());
  const auto* plan = std::get_if<StepPlan>(&*d.reply);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->kind, PlanKind::kStop);
  EXPECT_TRUE(d.error.ok());
}

TEST(CoordinatorDispatch, QueriesAskForTheirAnswers) {
  Job job;
  EXPECT_TRUE(job.From("cli", JobStatusRequest{5}).status_report);
  Dispatched d = job.From("scheduler", JobInfo{});
  ASSERT_TRUE(d.reply.has_value());
  EXPECT_NE(std::get_if<JobInfoReply>(&*d.reply), nullptr);
}

TEST(CoordinatorDispatch, AJobControlHoldsOrReleasesTheJobAndAsksForTheStatus) {
  Job job;
  Dispatched d = job.From("cli", JobControl{true, 2});
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_TRUE(d.status_report);
  EXPECT_EQ(job.state.hold_from(), Step(2));
  d = job.From("cli", JobControl{false, 0});
  EXPECT_TRUE(d.status_report);
  EXPECT_FALSE(job.state.hold_from().has_value());
  d = job.From("cli", JobControl{true, -5});
  EXPECT_EQ(d.error.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(d.status_report);
  job.state.OnJobError("stopped");  // over: a hold is refused, and no status goes with the error
  d = job.From("cli", JobControl{true, 0});
  EXPECT_EQ(d.error.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(d.status_report);
  EXPECT_FALSE(job.state.hold_from().has_value());
}

TEST(CoordinatorDispatch, KindsTheCoordinatorDoesNotServeAreRejections) {
  Job job;
  Dispatched d = job.From("peer", Pull{});
  EXPECT_TRUE(d.unserved);
  EXPECT_EQ(d.error.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(job.From("peer", Heartbeat{WorkerId(0)}).unserved);
}

TEST(CoordinatorDispatch, ErrorsFailTheJobFromAShardAndAreStrayFromAStranger) {
  Job job;
  job.From("s0", RegisterShard{ShardId(0), "tcp://s0", Step(-1), Step(-1), ""});
  Dispatched d = job.From("stranger", ErrorReply{StatusCode::kInternal, "confused"});
  EXPECT_TRUE(d.stray_error);
  EXPECT_TRUE(job.state.fatal().ok());
  d = job.From("s0", ErrorReply{StatusCode::kFailedPrecondition, "impossible job"});
  EXPECT_FALSE(d.stray_error);
  EXPECT_TRUE(d.error.ok());  // an error is never answered
  EXPECT_FALSE(job.state.fatal().ok());
}

}  // namespace
}  // namespace eps
