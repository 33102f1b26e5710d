// The coordinator's state machine (elastic/job_state.h) driven event by event
// for tests: a JobState on a FakeClock whose outgoing messages are sorted into
// per-worker and per-shard mailboxes, and helpers over its events.
// job_state_test.cc and job_state_reshard_test.cc use it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic/job_state.h"
#include "tests/host_noise.h"

namespace eps {
namespace test_job {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint32_t kV = 8;
constexpr int64_t kSteps = 5;
constexpr uint32_t kShards = 2;
constexpr int64_t kSamples = 100;

inline JobSpec Spec(int64_t test_limit = -1) {
  JobSpec s;
  s.job_id = "job";
  s.model = "tiny";
  s.virtual_workers = kV;
  s.batch_per_vw = 4;
  s.steps = kSteps;
  s.num_shards = kShards;
  s.test_limit = test_limit;
  return s;
}

inline JobStateOptions Options(uint32_t min_workers = 1) {
  JobStateOptions o;
  o.min_workers = min_workers;
  o.heartbeat_timeout = seconds(3);
  o.startup_timeout = seconds(5);
  o.step_timeout = seconds(10);
  return o;
}

inline std::vector<TensorSpec> Model(int64_t n = 10) {
  return {{"w", TensorKind::kParameter, DType::kFloat32, {n}}};
}

using Range = std::pair<uint32_t, uint32_t>;

// Drives one JobState and sorts what it sends into per-worker and per-shard mailboxes.
class Driver {
 public:
  explicit Driver(JobSpec spec = Spec(), JobStateOptions options = Options())
      : state(std::move(spec), options, &clock) {}

  FakeClock clock;  // before `state`, which reads it on construction
  JobState state;

  void RegisterShards() {
    for (uint32_t s = 0; s < kShards; ++s) RegisterShard(s);
  }
  void RegisterShard(uint32_t s) {
    ASSERT_TRUE(state.OnShardRegistered(ShardId(s), "ipc:///tmp/shard" + std::to_string(s)).ok());
  }
  WorkerId AddWorker() { return state.OnWorkerRegistered("host", 1000 + pid_++); }
  // The first StepRequest: the worker reports its model and data set sizes.
  Status Report(WorkerId w, std::vector<TensorSpec> tensors = Model()) {
    StepRequest r;
    r.worker = w;
    r.done_step = Step(-1);
    r.tensors = std::move(tensors);
    r.train_samples = kSamples;
    r.test_samples = kSamples;
    return state.OnStepRequest(r);
  }
  // A later StepRequest: everything the worker held is pushed and acknowledged.
  Status Confirm(WorkerId w, int64_t done) {
    StepRequest r;
    r.worker = w;
    r.done_step = Step(done);
    return state.OnStepRequest(r);
  }
  void ShardDone(uint32_t s, int64_t t, int64_t durable = -1) {
    StepDone d;
    d.shard = ShardId(s);
    d.step = Step(t);
    d.durable_step = Step(durable);
    d.has_loss = s == 0;
    d.loss = 1.0f / float(t + 3);
    d.lr = 0.5 / double(t + 2);
    d.bytes_in = uint64_t(1000 * (s + 1) * (t + 2));
    d.bytes_out = uint64_t(10 * (s + 1) * (t + 2));
    ASSERT_TRUE(state.OnStepDone(ShardId(s), d).ok());
  }
  // Every shard finished step t; shard 0 reports the loss.
  void FinishStep(int64_t t) {
    for (uint32_t s = 0; s < kShards; ++s) ShardDone(s, t);
  }
  // Moves the clock by `total` in 1 s ticks; `alive` heartbeat at every tick.
  void Pass(milliseconds total, const std::vector<WorkerId>& alive = {}) {
    for (milliseconds done(0); done < total;) {
      const milliseconds d = std::min<milliseconds>(seconds(1), total - done);
      clock.Advance(d);
      done += d;
      for (WorkerId w : alive) EXPECT_TRUE(state.OnHeartbeat(w).ok()) << "worker " << w;
      state.Tick();
    }
  }

  // Shards registered, n workers ready, w0 initialized: step 0 is planned for all of them.
  std::vector<WorkerId> Start(uint32_t n) {
    RegisterShards();
    std::vector<WorkerId> ws;
    for (uint32_t i = 0; i < n; ++i) ws.push_back(AddWorker());
    for (WorkerId w : ws) EXPECT_TRUE(Report(w).ok());
    const std::vector<StepPlan> init = Plans(ws[0]);
    EXPECT_EQ(init.size(), 1u);
    if (!init.empty()) {
      EXPECT_EQ(init[0].kind, PlanKind::kInit);
    }
    FinishStep(-1);
    EXPECT_TRUE(Confirm(ws[0], -1).ok());
    EXPECT_EQ(state.phase(), JobState::Phase::kTraining);
    EXPECT_EQ(state.step(), Step(0));
    return ws;
  }

  // Every worker confirms step t, then the shards finish it.
  void RunStep(int64_t t, const std::vector<WorkerId>& ws) {
    for (WorkerId w : ws) EXPECT_TRUE(Confirm(w, t).ok());
    FinishStep(t);
  }

  // Takes the plans sent to `w` since the last call.
  std::vector<StepPlan> Plans(WorkerId w) {
    Collect();
    return std::exchange(plans_[w.value()], {});
  }
  // Exactly one plan for `w`, of `kind` (a failure otherwise).
  StepPlan OnePlan(WorkerId w, PlanKind kind) {
    const std::vector<StepPlan> p = Plans(w);
    EXPECT_EQ(p.size(), 1u) << "plans for worker " << w;
    if (p.size() != 1) return StepPlan{};
    EXPECT_EQ(int(p[0].kind), int(kind)) << "worker " << w;
    return p[0];
  }
  std::vector<RegisterWorkerReply> Replies(WorkerId w) {
    Collect();
    return std::exchange(replies_[w.value()], {});
  }
  std::vector<ErrorReply> Errors(WorkerId w) {
    Collect();
    return std::exchange(errors_[w.value()], {});
  }
  std::vector<ShardConfig> Configs(uint32_t s) {
    Collect();
    return std::exchange(configs_[s], {});
  }
  std::vector<Shutdown> Shutdowns(uint32_t s) {
    Collect();
    return std::exchange(shutdowns_[s], {});
  }
  std::vector<Step> Retains(uint32_t s) {
    Collect();
    return std::exchange(retains_[s], {});
  }
  std::vector<Step> Rollbacks(uint32_t s) {
    Collect();
    std::vector<Step> steps;
    for (const Rollback& r : std::exchange(rollbacks_[s], {})) steps.push_back(r.step);
    return steps;
  }
  std::vector<Rollback> RollbackMessages(uint32_t s) {
    Collect();
    return std::exchange(rollbacks_[s], {});
  }
  std::vector<Reshard> Reshards(uint32_t s) {
    Collect();
    return std::exchange(reshards_[s], {});
  }
  // The events since the last call.
  std::vector<JobEvent> Events() { return state.TakeEvents(); }

 private:
  void Collect() {
    for (Outgoing& o : state.TakeOutgoing()) {
      if (o.to == Outgoing::To::kWorker) {
        if (auto* p = std::get_if<StepPlan>(&o.body)) {
          plans_[o.id].push_back(*p);
        } else if (auto* r = std::get_if<RegisterWorkerReply>(&o.body)) {
          replies_[o.id].push_back(std::move(*r));
        } else if (auto* e = std::get_if<ErrorReply>(&o.body)) {
          errors_[o.id].push_back(std::move(*e));
        } else {
          ADD_FAILURE() << "unexpected " << BodyName(o.body) << " to worker " << o.id;
        }
      } else {
        if (auto* c = std::get_if<ShardConfig>(&o.body)) {
          configs_[o.id].push_back(std::move(*c));
        } else if (auto* s = std::get_if<Shutdown>(&o.body)) {
          shutdowns_[o.id].push_back(std::move(*s));
        } else if (auto* r = std::get_if<Retain>(&o.body)) {
          retains_[o.id].push_back(r->from_step);
        } else if (auto* r = std::get_if<Rollback>(&o.body)) {
          rollbacks_[o.id].push_back(*r);
        } else if (auto* r = std::get_if<Reshard>(&o.body)) {
          reshards_[o.id].push_back(std::move(*r));
        } else {
          ADD_FAILURE() << "unexpected " << BodyName(o.body) << " to shard " << o.id;
        }
      }
    }
  }

  uint32_t pid_ = 0;
  std::map<uint32_t, std::vector<StepPlan>> plans_;
  std::map<uint32_t, std::vector<RegisterWorkerReply>> replies_;
  std::map<uint32_t, std::vector<ErrorReply>> errors_;
  std::map<uint32_t, std::vector<ShardConfig>> configs_;
  std::map<uint32_t, std::vector<Shutdown>> shutdowns_;
  std::map<uint32_t, std::vector<Step>> retains_;
  std::map<uint32_t, std::vector<Rollback>> rollbacks_;
  std::map<uint32_t, std::vector<Reshard>> reshards_;
};

inline Range RangeOf(const StepPlan& p) { return {p.vw_lo, p.vw_hi}; }

// The kinds of `events`, in order, leaving out the per-step chatter
// (range_confirmed, step_completed, checkpoint_durable) unless `all`.
inline std::vector<std::string> Kinds(const std::vector<JobEvent>& events, bool all = false) {
  std::vector<std::string> out;
  for (const JobEvent& e : events) {
    const std::string kind = EventKind(e);
    if (all ||
        (kind != "range_confirmed" && kind != "step_completed" && kind != "checkpoint_durable"))
      out.push_back(kind);
  }
  return out;
}

// The events of type T, in order.
template <typename T>
std::vector<std::pair<std::optional<Step>, T>> Of(const std::vector<JobEvent>& events) {
  std::vector<std::pair<std::optional<Step>, T>> out;
  for (const JobEvent& e : events) {
    if (const T* t = e.As<T>()) out.push_back({e.step, *t});
  }
  return out;
}

inline std::vector<WorkerRange> Ranges(std::initializer_list<WorkerRange> r) { return r; }

// The ranges, sorted, tile [0, v) without gap or overlap.
inline ::testing::AssertionResult CoverVws(std::vector<Range> ranges, uint32_t v) {
  std::sort(ranges.begin(), ranges.end());
  uint32_t next = 0;
  for (const Range& r : ranges) {
    if (r.first != next || r.second <= r.first) {
      return ::testing::AssertionFailure()
             << "range [" << r.first << "," << r.second << ") after " << next;
    }
    next = r.second;
  }
  if (next != v) return ::testing::AssertionFailure() << "ranges end at " << next << " of " << v;
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult CoverAllVws(std::vector<Range> ranges) {
  return CoverVws(std::move(ranges), kV);
}

}  // namespace test_job
}  // namespace eps
