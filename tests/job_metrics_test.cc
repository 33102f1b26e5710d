// The coordinator's metrics (elastic/job_metrics.h): gauges from a status
// report, counters and the step-time histogram from events, and the file_sd
// scrape targets of the job's processes.
#include "elastic/job_metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace eps {
namespace {

WorkerStatus Worker(uint32_t id, const std::string& state, uint32_t lo, uint32_t hi,
                    const std::string& metrics) {
  WorkerStatus w;
  w.worker = WorkerId(id);
  w.host = "node" + std::to_string(id);
  w.state = state;
  w.vw_lo = lo;
  w.vw_hi = hi;
  w.seconds_per_vw = 0.01 * (id + 1);
  w.metrics_address = metrics;
  return w;
}

JobStatusReply Status() {
  JobStatusReply s;
  s.job_id = "j";
  s.step = 42;
  s.steps = 100;
  s.has_loss = true;
  s.loss = 0.5f;
  s.lr = 0.125;
  s.samples_per_s = 800;
  s.workers = {Worker(0, "ready", 0, 4, "h0:1"), Worker(1, "ready", 4, 8, ""),
               Worker(2, "registered", 0, 0, "h2:1"), Worker(3, "dead", 0, 0, "h3:1")};
  ShardStatus shard;
  shard.shard = ShardId(0);
  shard.registered = true;
  shard.metrics_address = "s0:1";
  ShardStatus missing;
  missing.shard = ShardId(1);
  missing.metrics_address = "s1:1";
  s.shards = {shard, missing};
  return s;
}

TEST(JobMetrics, GaugesFollowTheStatusAndDeadWorkersSeriesGo) {
  Metrics m;
  JobMetrics metrics(&m);
  JobStatusReply s = Status();
  metrics.Publish(s);
  EXPECT_EQ(m.GetGauge("eps_step", "").value(), 42);
  EXPECT_EQ(m.GetGauge("eps_job_steps", "").value(), 100);
  EXPECT_EQ(m.GetGauge("eps_loss", "").value(), 0.5);
  EXPECT_EQ(m.GetGauge("eps_learning_rate", "").value(), 0.125);
  EXPECT_EQ(m.GetGauge("eps_workers", "").value(), 2) << "workers holding VWs";
  const std::string text = m.Render();
  EXPECT_NE(text.find(R"(eps_worker_vws{host="node1",worker="w1"} 4)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(eps_worker_vws{host="node2",worker="w2"} 0)"), std::string::npos);
  EXPECT_EQ(text.find(R"(worker="w3")"), std::string::npos) << "a dead worker has no series";
  s.workers[1].state = "left";
  metrics.Publish(s);
  EXPECT_EQ(m.Render().find(R"(worker="w1")"), std::string::npos) << "nor one that left";
  EXPECT_EQ(m.GetGauge("eps_workers", "").value(), 1);
}

TEST(JobMetrics, MembershipChangesAreCountedByKindAndStepsTimed) {
  Metrics m;
  JobMetrics metrics(&m);
  const Clock::time_point t0{};
  using std::chrono::milliseconds;
  metrics.OnEvent({t0, std::nullopt, JobEvent::WorkerJoined{WorkerId(0), "h", 1, "cpu"}});
  metrics.OnEvent({t0, std::nullopt, JobEvent::WorkerJoined{WorkerId(1), "h", 2, "cpu"}});
  metrics.OnEvent({t0, Step(3), JobEvent::WorkerDead{}});
  metrics.OnEvent({t0, Step(0), JobEvent::StepCompleted{}});
  metrics.OnEvent({t0 + milliseconds(250), Step(1), JobEvent::StepCompleted{}});
  metrics.OnEvent({t0 + milliseconds(300), Step(2), JobEvent::Evaluated{}});
  metrics.OnEvent({t0 + milliseconds(9000), Step(2), JobEvent::StepCompleted{}});
  metrics.OnEvent({t0 + milliseconds(9500), Step(3), JobEvent::StepCompleted{}});
  const std::string text = m.Render();
  EXPECT_NE(text.find(R"(eps_membership_changes_total{kind="join"} 2)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(eps_membership_changes_total{kind="death"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(eps_membership_changes_total{kind="leave"} 0)"), std::string::npos)
      << "every kind is there from the start, for rate()";
  Histogram& h = m.GetHistogram("eps_step_duration_seconds", "", {});
  EXPECT_EQ(h.count(), 2u) << "the step after an evaluation is not timed";
  EXPECT_DOUBLE_EQ(h.sum(), 0.75);
}

TEST(JobMetrics, MovesOfShardStateAreCountedAndTheMapFollowsTheStatus) {
  Metrics m;
  JobMetrics metrics(&m);
  JobStatusReply s = Status();
  s.map_generation = 3;
  s.resharding = true;
  s.shards[1].role = "spare";
  metrics.Publish(s);
  EXPECT_EQ(m.GetGauge("eps_shard_map_generation", "").value(), 3);
  EXPECT_EQ(m.GetGauge("eps_resharding", "").value(), 1);
  EXPECT_EQ(m.GetGauge("eps_shards", "").value(), 1) << "a spare is not in the map";
  const Clock::time_point t0{};
  JobEvent::Resharded done;
  done.bytes_in = 4096;
  metrics.OnEvent({t0, Step(8), done});
  done.bytes_in = 1024;
  metrics.OnEvent({t0, Step(9), done});
  JobEvent::WorkerDead again{
      WorkerId(2), JobEvent::WorkerDead::Cause::kResharded, 0, ShardId(0), {}};
  metrics.OnEvent({t0, Step(9), again});
  const std::string text = m.Render();
  EXPECT_NE(text.find("eps_reshards_total 2"), std::string::npos) << text;
  EXPECT_NE(text.find("eps_reshard_bytes_total 5120"), std::string::npos);
  EXPECT_NE(text.find(R"(eps_membership_changes_total{kind="death"} 0)"), std::string::npos)
      << "a worker registering again for a new map did not die";
}

TEST(JobMetrics, TheTargetsAreTheProcessesThatServeMetrics) {
  const auto targets = nlohmann::json::parse(PrometheusTargets(Status(), "c:1"));
  ASSERT_TRUE(targets.is_array());
  std::vector<std::string> got;
  for (const auto& t : targets) {
    EXPECT_EQ(t["labels"]["eps_job"], "j");
    got.push_back(t["labels"]["eps_role"].get<std::string>() + " " +
                  t["targets"][0].get<std::string>());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"coordinator c:1", "shard s0:1", "worker h0:1",
                                           "worker h2:1"}))
      << "not the unregistered shard, the worker without metrics, or the dead one";
  EXPECT_EQ(targets[2]["labels"]["eps_worker"], "w0");
  EXPECT_EQ(targets[1]["labels"]["eps_shard"], "0");
}

}  // namespace
}  // namespace eps
