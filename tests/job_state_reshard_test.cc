// The coordinator's side of elastic shards (elastic/job_state.h, "Shards";
// docs/design.md, "Elastic shards"): a spare shard taken in and a shard
// removed at a step boundary, the commit, a refusal, a restart before the
// commit, and a restarted coordinator, driven event by event.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/shard_map.h"
#include "elastic/job_state.h"
#include "tests/job_state_driver.h"

namespace eps {
namespace {

using namespace test_job;  // NOLINT: the driver and its helpers

// Six parameters of 40 bytes and the loss: chunks to spread over the shards.
std::vector<TensorSpec> SixTensors() {
  std::vector<TensorSpec> t;
  for (int i = 0; i < 6; ++i)
    t.push_back({"w" + std::to_string(i), TensorKind::kParameter, DType::kFloat32, {10}});
  return t;
}

std::string Address(uint32_t s) { return "ipc:///tmp/shard" + std::to_string(s); }

// A job of kShards shards and two workers on SixTensors at step 0.
struct Job {
  Driver d;
  std::vector<WorkerId> ws;

  explicit Job(JobStateOptions options = Options()) : d(Spec(), options) {
    d.RegisterShards();
    ws = {d.AddWorker(), d.AddWorker()};
    for (WorkerId w : ws) EXPECT_TRUE(d.Report(w, SixTensors()).ok());
    d.Plans(ws[0]);
    d.FinishStep(-1);
    EXPECT_TRUE(d.Confirm(ws[0], -1).ok());
    EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
    for (WorkerId w : ws) d.Plans(w);
  }

  // Every shard in `shards` answers the move to map `generation`.
  void Ready(const std::vector<uint32_t>& shards, uint64_t generation, bool committed) {
    for (uint32_t s : shards) {
      ReshardReady r{ShardId(s), generation, StatusCode::kOk, ""};
      r.bytes_in = 100;
      r.committed = committed;
      ASSERT_TRUE(d.state.OnReshardReady(r).ok()) << "shard " << s;
    }
  }
  // Step t done by both workers and by `shards`.
  void Step(int64_t t, const std::vector<uint32_t>& shards) {
    for (WorkerId w : ws) EXPECT_TRUE(d.Confirm(w, t).ok());
    for (uint32_t s : shards) d.ShardDone(s, t);
  }
};

TEST(JobStateReshard, ASpareShardIsTakenInAtTheNextStepBoundaryAndTheWorkersLearnTheMap) {
  Job job;
  Driver& d = job.d;
  const ShardMap before = d.state.layout().map;
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);  // step 0 goes on
  EXPECT_TRUE(d.Reshards(2).empty());
  job.Step(0, {0, 1});
  // At the boundary: the move, and no plan until it is over.
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
  EXPECT_EQ(d.state.step(), Step(1));
  for (WorkerId w : job.ws) EXPECT_TRUE(d.Plans(w).empty());
  std::vector<Reshard> reshards;
  for (uint32_t s : {0u, 1u, 2u}) {
    const std::vector<Reshard> got = d.Reshards(s);
    ASSERT_EQ(got.size(), 1u) << "shard " << s;
    reshards.push_back(got[0]);
  }
  const ShardMap& next = reshards[0].map;
  EXPECT_EQ(next.generation, 1u);
  EXPECT_EQ(reshards[0].step, Step(1));
  EXPECT_EQ(reshards[0].addresses, (std::vector<std::string>{Address(0), Address(1), Address(2)}));
  StatusOr<ShardMap> expected =
      Rebalance(before, d.state.layout().ChunkSizes(), {ShardId(0), ShardId(1), ShardId(2)});
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(next.chunk_owner, expected->chunk_owner);
  EXPECT_EQ(next.partition_owner, expected->partition_owner);
  EXPECT_TRUE(d.state.StatusReport().resharding);

  // Staged everywhere: the commit. The map is the layout's (the shell persists it) and the
  // shards get it in their config.
  job.Ready({0, 1}, 1, false);
  EXPECT_EQ(d.state.layout().map.generation, 0u);
  for (uint32_t s : {0u, 1u, 2u}) d.Configs(s);
  job.Ready({2}, 1, false);
  EXPECT_EQ(d.state.layout().map.generation, 1u);
  EXPECT_EQ(d.state.shard_members(), (std::vector<uint32_t>{0, 1, 2}));
  for (uint32_t s : {0u, 1u, 2u}) {
    const std::vector<ShardConfig> configs = d.Configs(s);
    ASSERT_EQ(configs.size(), 1u) << "shard " << s;
    ASSERT_TRUE(configs[0].map.has_value());
    EXPECT_EQ(configs[0].map->generation, 1u);
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);  // until every member took it

  // Every shard took it: the workers register again to learn it.
  d.Events();
  job.Ready({0, 1, 2}, 1, true);
  const std::vector<JobEvent> events = d.Events();
  const auto resharded = Of<JobEvent::Resharded>(events);
  ASSERT_EQ(resharded.size(), 1u);
  EXPECT_EQ(resharded[0].first, Step(1));
  EXPECT_EQ(resharded[0].second.shards.size(), 3u);
  EXPECT_TRUE(resharded[0].second.removed.empty());
  EXPECT_EQ(resharded[0].second.bytes_in, 300u);
  EXPECT_EQ(Of<JobEvent::WorkerDead>(events).size(), 2u);
  for (WorkerId w : job.ws) {
    const std::vector<ErrorReply> errors = d.Errors(w);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].code, StatusCode::kAborted);
    EXPECT_EQ(d.state.OnStepRequest(StepRequest{w, Step(0), {}}).code(), StatusCode::kAborted);
  }
  const WorkerId again = d.AddWorker();
  const std::vector<RegisterWorkerReply> replies = d.Replies(again);
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_TRUE(replies[0].map.has_value());
  EXPECT_EQ(*replies[0].map, next);
  EXPECT_EQ(replies[0].shard_addresses.size(), 3u);
  ASSERT_TRUE(d.Report(again, SixTensors()).ok());
  const StepPlan plan = d.OnePlan(again, PlanKind::kTrain);
  EXPECT_EQ(plan.step, Step(1));
  EXPECT_EQ(RangeOf(plan), Range(0, kV));
  // Step 1 completes once the three shards report it.
  EXPECT_TRUE(d.Confirm(again, 1).ok());
  d.ShardDone(0, 1);
  d.ShardDone(1, 1);
  EXPECT_EQ(d.state.step(), Step(1));
  d.ShardDone(2, 1);
  EXPECT_EQ(d.state.step(), Step(2));
}

TEST(JobStateReshard, ASpareRegisteringDuringAMoveLearnsItsMapAndIsTakenInByTheNext) {
  Job job;
  Driver& d = job.d;
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  job.Step(0, {0, 1});
  ASSERT_EQ(d.Reshards(2).size(), 1u);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(3), Address(3)).ok());
  EXPECT_TRUE(d.Reshards(3).empty());  // not in this move
  d.Configs(3);
  job.Ready({0, 1, 2}, 1, false);
  const std::vector<ShardConfig> configs = d.Configs(3);
  ASSERT_EQ(configs.size(), 1u);  // the committed map: the one the next move leaves
  EXPECT_EQ(configs[0].map->generation, 1u);
  job.Ready({0, 1, 2}, 1, true);
  // The next move starts at once, from that map.
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
  const std::vector<Reshard> next = d.Reshards(3);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].map.generation, 2u);
  EXPECT_EQ(next[0].map.Shards().size(), 4u);
}

TEST(JobStateReshard, ARemovedShardHandsItsStateOverAndIsToldToExitAtTheCommit) {
  Job job;
  Driver& d = job.d;
  EXPECT_EQ(d.state.RemoveShard(ShardId(7)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  ASSERT_TRUE(d.state.RemoveShard(ShardId(0)).ok());
  EXPECT_EQ(d.state.RemoveShard(ShardId(0)).code(), StatusCode::kNotFound);  // already leaving
  const JobStatusReply status = d.state.StatusReport();
  ASSERT_EQ(status.shards.size(), 3u);
  EXPECT_EQ(status.shards[0].role, "leaving");
  EXPECT_EQ(status.shards[1].role, "member");
  EXPECT_EQ(status.shards[2].role, "spare");
  job.Step(0, {0, 1});
  ASSERT_EQ(d.Reshards(0).size(), 1u);  // the holder of what moves takes part
  const std::vector<Reshard> r2 = d.Reshards(2);
  ASSERT_EQ(r2.size(), 1u);
  const std::vector<ShardId> shards = r2[0].map.Shards();
  EXPECT_EQ(shards, (std::vector<ShardId>{ShardId(1), ShardId(2)}));
  d.Configs(0);
  job.Ready({0, 1, 2}, 1, false);
  // At the commit the leaving shard is done: Shutdown, and no config of the new map.
  EXPECT_EQ(d.Shutdowns(0).size(), 1u);
  EXPECT_TRUE(d.Configs(0).empty());
  EXPECT_EQ(d.state.removed_shards().count(0), 1u);
  job.Ready({1, 2}, 1, true);
  EXPECT_EQ(d.state.shard_members(), (std::vector<uint32_t>{1, 2}));
  const WorkerId w = d.AddWorker();
  const std::vector<RegisterWorkerReply> replies = d.Replies(w);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].shard_addresses, (std::vector<std::string>{"", Address(1), Address(2)}));
  // It comes back: it is told to exit again, and is no spare.
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(0), Address(0)).ok());
  EXPECT_EQ(d.Shutdowns(0).size(), 1u);
  EXPECT_EQ(d.state.StatusReport().shards.size(), 2u);
  EXPECT_EQ(d.state.RemoveShard(ShardId(1)).code(), StatusCode::kOk);
  EXPECT_EQ(d.state.RemoveShard(ShardId(2)).code(), StatusCode::kFailedPrecondition);  // the last
}

TEST(JobStateReshard, ARefusedMoveKeepsTheOldMapAndIsNotTriedAgain) {
  Job job;
  Driver& d = job.d;
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  job.Step(0, {0, 1});
  ASSERT_EQ(d.state.phase(), JobState::Phase::kResharding);
  for (uint32_t s : {0u, 1u, 2u}) {
    d.Configs(s);
    EXPECT_EQ(d.Reshards(s).size(), 1u);
  }
  d.Events();
  ReshardReady refused{ShardId(1), 1, StatusCode::kUnimplemented, "sparse rows do not move yet"};
  ASSERT_TRUE(d.state.OnReshardReady(refused).ok());
  const auto abandoned = Of<JobEvent::ReshardAbandoned>(d.Events());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_FALSE(abandoned[0].second.retry);
  // Every shard of the move drops what it staged: a config of the old map.
  for (uint32_t s : {0u, 1u, 2u}) {
    const std::vector<ShardConfig> configs = d.Configs(s);
    ASSERT_EQ(configs.size(), 1u) << "shard " << s;
    EXPECT_EQ(configs[0].map->generation, 0u);
  }
  // Step 1 runs on the old map, and the next boundary does not try again.
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  for (WorkerId w : job.ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(1));
  job.Step(1, {0, 1});
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.step(), Step(2));
  EXPECT_TRUE(d.Reshards(2).empty());
  // A late answer of the abandoned move changes nothing.
  job.Ready({0, 2}, 1, false);
  EXPECT_EQ(d.state.layout().map.generation, 0u);
}

TEST(JobStateReshard,
     AShardRestartedBeforeTheCommitAbandonsTheMoveWhichStartsAgainAfterTheRollback) {
  Job job;
  Driver& d = job.d;
  job.Step(0, {0, 1});
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  // Step 1 done, and both shards hold version 2 durably.
  for (WorkerId w : job.ws) EXPECT_TRUE(d.Confirm(w, 1).ok());
  for (uint32_t s : {0u, 1u}) d.ShardDone(s, 1, /*durable=*/2);
  ASSERT_EQ(d.state.phase(), JobState::Phase::kResharding);
  ASSERT_EQ(d.Reshards(2).size(), 1u);
  job.Ready({0, 2}, 1, false);
  // Shard 1 restarts from its checkpoint before it is ready.
  ASSERT_TRUE(
      d.state.OnShardRegistered(ShardId(1), "ipc:///tmp/shard1-again", Step(2), Step(2)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kRollingBack);
  const auto abandoned = Of<JobEvent::ReshardAbandoned>(d.Events());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_TRUE(abandoned[0].second.retry);
  EXPECT_EQ(d.state.layout().map.generation, 0u);
  EXPECT_TRUE(d.Rollbacks(2).empty());  // a spare holds nothing to roll back
  for (uint32_t s : {0u, 1u}) {
    ASSERT_EQ(d.Rollbacks(s), std::vector<Step>{Step(2)});
    ASSERT_TRUE(d.state.OnRollbackDone(RollbackDone{ShardId(s), Step(2), Step(2), Step(2), StatusCode::kOk, ""}).ok());
  }
  // The move starts again at step 2, under a generation of its own.
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
  const std::vector<Reshard> again = d.Reshards(2);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].map.generation, 2u);
  EXPECT_EQ(again[0].step, Step(2));
  job.Ready({0, 1, 2}, 1, false);  // answers of the abandoned one: stale
  EXPECT_EQ(d.state.layout().map.generation, 0u);
  job.Ready({0, 1, 2}, 2, false);
  EXPECT_EQ(d.state.layout().map.generation, 2u);
}

TEST(JobStateReshard, AMoveNotStagedInTimeIsAbandonedAndTriedAgainWhenTheShardRegistersAnew) {
  JobStateOptions options = Options();
  options.move_timeout = seconds(5);  // within the step timeout
  Job job(options);
  Driver& d = job.d;
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  job.Step(0, {0, 1});
  ASSERT_EQ(d.state.phase(), JobState::Phase::kResharding);
  job.Ready({0, 1}, 1, false);  // shard 2 died before it staged its part
  d.Pass(seconds(4), job.ws);
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
  d.Pass(seconds(2), job.ws);
  const auto abandoned = Of<JobEvent::ReshardAbandoned>(d.Events());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_FALSE(abandoned[0].second.retry);
  EXPECT_TRUE(d.state.fatal().ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);  // step 1 on the old map
  for (WorkerId w : job.ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(1));
  // It comes back: the next boundary takes it in.
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), "ipc:///tmp/shard2-again").ok());
  job.Step(1, {0, 1});
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
  const std::vector<Reshard> again = d.Reshards(2);
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again.back().map.generation, 2u);
  EXPECT_EQ(again.back().addresses[2], "ipc:///tmp/shard2-again");
}

TEST(JobStateReshard, ASpareThatGoesSilentIsForgottenAndItsMoveAbandonedUntilItBeaconsAgain) {
  Job job;  // the spare timeout (10 s) is within the step timeout (10 s of no progress)
  Driver& d = job.d;
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2)).ok());
  job.Step(0, {0, 1});
  ASSERT_EQ(d.state.phase(), JobState::Phase::kResharding);
  job.Ready({0, 1}, 1, false);  // shard 2 died: no answer, no beacon
  d.Pass(seconds(11), job.ws);
  const auto abandoned = Of<JobEvent::ReshardAbandoned>(d.Events());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_TRUE(abandoned[0].second.retry);
  EXPECT_TRUE(d.state.fatal().ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.StatusReport().shards.size(), 2u) << "the silent spare is forgotten";
  for (WorkerId w : job.ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(1));
  // Its beacon (the same peer, the same address) makes it a spare again.
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2), Step(-1), Step(-1), false).ok());
  EXPECT_EQ(d.state.StatusReport().shards.size(), 3u);
  job.Step(1, {0, 1});
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResharding);
}

TEST(JobStateReshard, ARestartedCoordinatorServesTheStoredMapAndTurnsRemovedShardsAway) {
  Driver first;
  first.RegisterShards();
  const WorkerId w = first.AddWorker();
  ASSERT_TRUE(first.Report(w, SixTensors()).ok());
  std::vector<TensorSpec> tensors = first.state.tensors();
  StatusOr<ShardMap> map = Rebalance(first.state.layout().map, first.state.layout().ChunkSizes(),
                                     {ShardId(1), ShardId(2)});
  ASSERT_TRUE(map.ok());

  Driver d;
  JobState::Resumed r;
  r.tensors = tensors;
  r.steps = kSteps;
  r.train_samples = kSamples;
  r.map = *map;
  r.removed_shards = {ShardId(0)};
  r.ranges = {{0, kV}};
  d.state.Resume(r);
  EXPECT_EQ(d.state.shard_members(), (std::vector<uint32_t>{1, 2}));
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(0), Address(0), Step(2), Step(2)).ok());
  EXPECT_EQ(d.Shutdowns(0).size(), 1u);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(1), Address(1), Step(2), Step(2)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kResuming);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(2), Address(2), Step(2), Step(2)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.step(), Step(2));
  const std::vector<ShardConfig> configs = d.Configs(2);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(*configs[0].map, *map);
  const JobStatusReply status = d.state.StatusReport();
  EXPECT_EQ(status.map_generation, map->generation);
  EXPECT_FALSE(status.resharding);
}

}  // namespace
}  // namespace eps
