// The coordinator's events as people read them (the wording the logs always
// had) and as events.jsonl records them (docs/events.md).
#include "elastic/job_event.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace eps {
namespace {

JobEvent At(std::optional<Step> step, JobEvent::What what) { return {{}, step, std::move(what)}; }

TEST(JobEvent, AnAssignmentIsOneJsonLineWithKindTimeStepAndEveryWorkersRange) {
  const JobEvent e =
      At(Step(12), JobEvent::Assignment{
                       Epoch(3), {{WorkerId(0), 0, 5}, {WorkerId(2), 5, 5}, {WorkerId(4), 5, 8}}});
  const std::string line = EventJson(e, 1700000000.25);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind(R"({"event":"assignment","t":1700000000.25,"step":12,)", 0), 0u) << line;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["epoch"], 3);
  ASSERT_EQ(j["ranges"].size(), 3u);
  EXPECT_EQ(j["ranges"][1], (nlohmann::json{{"worker", 2}, {"lo", 5}, {"hi", 5}}));
  // People read the non-empty ranges, as the log always said them.
  const EventLine text = EventText(e);
  EXPECT_EQ(text.sink, EventLine::Sink::kInfo);
  EXPECT_EQ(text.text, "assignment epoch 3 from step 12: w0:[0,5) w4:[5,8)");
}

TEST(JobEvent, AnEventWithoutAStepHasNoStepField) {
  const JobEvent e = At(std::nullopt, JobEvent::WorkerJoined{WorkerId(1), "h:42", 42, "cpu"});
  const auto j = nlohmann::json::parse(EventJson(e, 1.5));
  EXPECT_FALSE(j.contains("step"));
  EXPECT_EQ(j["event"], "worker_joined");
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["device_kind"], "cpu");
  EXPECT_EQ(EventText(e).text, "worker 1 registered from h:42");
}

TEST(JobEvent, TheLinesLocalShShowsKeepTheirWording) {
  JobEvent::Progress p{
      1200, 2.5, 0.25f, 1234.4, 2, false, {{WorkerId(0), 0, 4}, {WorkerId(1), 4, 8}}};
  EXPECT_EQ(EventText(At(Step(100), p)).text,
            "step 100/1200  epoch 2.50  loss 0.2500  samples/s 1234  workers 2  w0:[0,4) w1:[4,8)");
  p.paused = true;
  EXPECT_EQ(EventText(At(Step(100), p)).text,
            "step 100/1200  epoch 2.50  loss 0.2500  samples/s 1234  workers 2  paused");
  EXPECT_EQ(EventText(At(Step(40), JobEvent::Evaluated{0.875, 0.3})).text,
            "eval  step 40: test accuracy 0.8750, test loss 0.3000");
  const EventLine result =
      EventText(At(Step(40), JobEvent::JobFinished{0.5f, true, 0.875, 0.3, "ab12"}));
  EXPECT_EQ(result.sink, EventLine::Sink::kStdout);
  EXPECT_EQ(result.text,
            "result: steps 40  final loss 0.5000  test accuracy 0.875000  params_sha256 ab12");
  EXPECT_EQ(EventText(At(Step(7), JobEvent::Paused{JobEvent::Paused::Cause::kNoWorker,
                                                   "no worker left; waiting for one to attach"}))
                .text,
            "paused at step 7: no worker left; waiting for one to attach");
  EXPECT_EQ(EventText(At(Step(7), JobEvent::Resumed{})).text, "resumed at step 7");
  EXPECT_EQ(EventText(At(Step(50), JobEvent::RollingBack{ShardId(1), Step(60)})).text,
            "rolling back to step 50: shard 1 restarted from its checkpoint of step 60");
  EXPECT_EQ(EventText(At(Step(-1), JobEvent::StartingOver{ShardId(1), false})).text,
            "starting over from the initial values: shard 1 restarted without state, and no "
            "checkpoint is held by every shard");
  EXPECT_EQ(EventText(At(Step(9), JobEvent::CoordinatorResumed{})).text,
            "resumed at step 9 after a coordinator restart");
}

TEST(JobEvent, ADeadWorkerSaysWhyAndWhatMoves) {
  const JobEvent e =
      At(Step(5), JobEvent::WorkerDead{WorkerId(2),
                                       JobEvent::WorkerDead::Cause::kMissedHeartbeats,
                                       1620,
                                       ShardId(0),
                                       {{WorkerId(2), 6, 8}}});
  EXPECT_EQ(EventText(e).text,
            "worker 2 missed heartbeats for 1620 ms; its VWs [6,8) of step 5 move");
  const auto j = nlohmann::json::parse(EventJson(e, 0));
  EXPECT_EQ(j["cause"], "missed_heartbeats");
  EXPECT_EQ(j["silent_ms"], 1620);
  EXPECT_FALSE(j.contains("shard"));
  const JobEvent left = At(Step(5), JobEvent::WorkerLeft{WorkerId(1), "SIGTERM", {}});
  EXPECT_EQ(EventText(left).text, "worker 1 left (SIGTERM); it held no unfinished VWs");
  EXPECT_EQ(nlohmann::json::parse(EventJson(left, 0))["moved"], nlohmann::json::array());
}

TEST(JobEvent, AMoveOfShardStateSaysBetweenWhichShardsWhatMovedAndWhyOneWasAbandoned) {
  auto j = nlohmann::json::parse(EventJson(
      At(Step(8),
         JobEvent::Resharding{
             1, {ShardId(0), ShardId(1)}, {ShardId(0), ShardId(1), ShardId(2)}, 7, 1365, 131628}),
      0));
  EXPECT_EQ(j["event"], "resharding");
  EXPECT_EQ(j["from"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(j["to"], nlohmann::json::array({0, 1, 2}));
  EXPECT_EQ(j["partitions"], 1365);
  EXPECT_EQ(j["bytes"], 131628);
  const JobEvent done =
      At(Step(9), JobEvent::Resharded{3, {ShardId(1), ShardId(2)}, {ShardId(0)}, 212992, 0.25});
  j = nlohmann::json::parse(EventJson(done, 0));
  EXPECT_EQ(j["removed"], nlohmann::json::array({0}));
  EXPECT_EQ(j["bytes_in"], 212992);
  EXPECT_EQ(EventText(done).text,
            "resharded at step 9: shards {1,2} (map 3), 0.2 MB moved in 0.25 s");
  j = nlohmann::json::parse(
      EventJson(At(Step(8), JobEvent::ReshardAbandoned{2, "shard 2 restarted", true}), 0));
  EXPECT_EQ(j["reason"], "shard 2 restarted");
  EXPECT_TRUE(j["retry"].get<bool>());
  j = nlohmann::json::parse(
      EventJson(At(Step(8),
                   JobEvent::WorkerDead{
                       WorkerId(4), JobEvent::WorkerDead::Cause::kResharded, 0, ShardId(0), {}}),
                0));
  EXPECT_EQ(j["cause"], "resharded");
  EXPECT_FALSE(j.contains("shard"));
}

TEST(JobEvent, ADurableCheckpointSaysHowLongItBlockedAndWroteWhenKnown) {
  const auto j = nlohmann::json::parse(
      EventJson(At(Step(50), JobEvent::CheckpointDurable{ShardId(1), 310.5, 4200.25}), 0));
  EXPECT_EQ(j["shard"], 1);
  EXPECT_EQ(j["blocking_ms"], 310.5);
  EXPECT_EQ(j["write_ms"], 4200.25);
  const auto restored =
      nlohmann::json::parse(EventJson(At(Step(50), JobEvent::CheckpointDurable{ShardId(1)}), 0));
  EXPECT_FALSE(restored.contains("write_ms")) << "a restored checkpoint was not timed here";
}

TEST(JobEvent, ABadHostSaysHowOftenItFailedForHowLongAndWhy) {
  const auto backed = nlohmann::json::parse(
      EventJson(At(Step(9), JobEvent::HostBackedOff{"vm", 3, 120, "cannot run on this host"}), 2));
  EXPECT_EQ(backed["event"], "host_backed_off");
  EXPECT_EQ(backed["host"], "vm");
  EXPECT_EQ(backed["failures"], 3);
  EXPECT_EQ(backed["backoff_s"], 120.0);
  EXPECT_EQ(backed["reason"], "cannot run on this host");
  JobEvent::WorkerRefused refused{WorkerId(4), "vm:7", "cpu", "backed off",
                                  JobEvent::WorkerRefused::Cause::kHostBackedOff};
  EXPECT_EQ(nlohmann::json::parse(EventJson(At(Step(9), refused), 2))["cause"], "host_backed_off");
  refused.cause = JobEvent::WorkerRefused::Cause::kDeviceKind;
  EXPECT_EQ(nlohmann::json::parse(EventJson(At(Step(9), refused), 2))["cause"], "device_kind");
  refused.cause = JobEvent::WorkerRefused::Cause::kDataFingerprint;
  EXPECT_EQ(nlohmann::json::parse(EventJson(At(Step(9), refused), 2))["cause"], "data_fingerprint");
  const auto left = nlohmann::json::parse(
      EventJson(At(Step(9), JobEvent::WorkerLeft{WorkerId(4), "no data", {}, true}), 2));
  EXPECT_EQ(left["host_fault"], true);
}

TEST(JobEvent, BytesThatAreNotUtf8AreReplacedNotThrown) {
  const JobEvent e = At(std::nullopt, JobEvent::WorkerReregistered{WorkerId(1), "h\xff"});
  const auto j = nlohmann::json::parse(EventJson(e, 0));
  EXPECT_EQ(j["host"], "h\xef\xbf\xbd");
}

}  // namespace
}  // namespace eps
