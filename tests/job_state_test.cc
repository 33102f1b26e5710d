// The coordinator's state machine (elastic/job_state.h) driven event by event:
// registration, initialization, the step clock, join / leave / crash, pause
// with no worker, evaluation, watchdogs and the end of the job. Time comes from
// a FakeClock, so every timeout is crossed without sleeping. Runs under ASan + UBSan.
#include "elastic/job_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/job_state_driver.h"

namespace eps {
namespace {

using namespace test_job;  // NOLINT: the driver and its helpers

// ---- registration and start ---------------------------------------------------

TEST(JobState, RegistrationRepliesWaitUntilEveryShardRegistered) {
  Driver d;
  const WorkerId w0 = d.AddWorker();
  EXPECT_TRUE(d.Replies(w0).empty());
  d.RegisterShard(0);
  EXPECT_TRUE(d.Replies(w0).empty());
  d.RegisterShard(1);
  const std::vector<RegisterWorkerReply> r = d.Replies(w0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].worker, w0);
  EXPECT_EQ(r[0].spec.virtual_workers, kV);
  EXPECT_EQ(r[0].shard_addresses,
            (std::vector<std::string>{"ipc:///tmp/shard0", "ipc:///tmp/shard1"}));

  const WorkerId w1 = d.AddWorker();  // shards known: answered at once
  ASSERT_EQ(d.Replies(w1).size(), 1u);
  EXPECT_TRUE(d.Replies(w0).empty());
}

TEST(DeviceKind, OnlyTheFirstWorkersKindIsAcceptedUnlessTheJobAllowsMixing) {
  EXPECT_TRUE(CheckDeviceKind("", "cpu", false).ok()) << "the first worker sets the kind";
  EXPECT_TRUE(CheckDeviceKind("", "cuda:NVIDIA H200", false).ok());
  EXPECT_TRUE(CheckDeviceKind("cpu", "cpu", false).ok());
  EXPECT_TRUE(CheckDeviceKind("cuda:NVIDIA H200", "cuda:NVIDIA H200", false).ok());
  const Status cpu_gpu = CheckDeviceKind("cpu", "cuda:NVIDIA H200", false);
  EXPECT_EQ(cpu_gpu.code(), StatusCode::kFailedPrecondition);
  for (const char* part : {"'cuda:NVIDIA H200'", "'cpu'", "--allow_mixed_devices"}) {
    EXPECT_NE(cpu_gpu.message().find(part), std::string::npos)
        << cpu_gpu.message() << " lacks " << part;
  }
  EXPECT_EQ(CheckDeviceKind("cuda:NVIDIA H200", "cuda:NVIDIA A100-SXM4-80GB", false).code(),
            StatusCode::kFailedPrecondition)
      << "two GPU models are two kinds";
  EXPECT_EQ(CheckDeviceKind("cuda:NVIDIA H200", "cpu", false).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckDeviceKind("cpu", "cuda:NVIDIA H200", true).ok());
  EXPECT_TRUE(CheckDeviceKind("cuda:NVIDIA H200", "cuda:NVIDIA A100-SXM4-80GB", true).ok());
}

TEST(JobState, AWorkerOfAnotherDeviceKindIsRefusedAtOnceAndTheJobGoesOn) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(1);
  EXPECT_EQ(RangeOf(d.OnePlan(ws[0], PlanKind::kTrain)), Range(0, kV));
  d.Events();
  const WorkerId gpu = d.state.OnWorkerRegistered("gpu-host", 77, "cuda:NVIDIA H200");
  const auto refused = Of<JobEvent::WorkerRefused>(d.Events());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.worker, gpu);
  EXPECT_EQ(refused[0].second.device_kind, "cuda:NVIDIA H200");
  EXPECT_NE(refused[0].second.error.find("--allow_mixed_devices"), std::string::npos);
  const std::vector<ErrorReply> errors = d.Errors(gpu);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code, StatusCode::kFailedPrecondition);
  EXPECT_NE(errors[0].message.find("--allow_mixed_devices"), std::string::npos)
      << errors[0].message;
  EXPECT_TRUE(d.Replies(gpu).empty());
  EXPECT_NE(gpu, ws[0]);
  // Not a member: its step requests are refused, and the job runs on with w0 alone, in the same
  // epoch.
  EXPECT_EQ(d.Report(gpu).code(), StatusCode::kAborted);
  EXPECT_EQ(d.state.live_workers(), 1u);
  const Epoch epoch = d.state.epoch();
  d.RunStep(0, ws);
  const StepPlan next = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(next.step, Step(1));
  EXPECT_EQ(RangeOf(next), Range(0, kV));
  EXPECT_EQ(d.state.epoch(), epoch);
  EXPECT_TRUE(d.state.fatal().ok());
  // A worker of the job's kind still joins.
  const WorkerId cpu = d.state.OnWorkerRegistered("cpu-host", 78, "cpu");
  EXPECT_EQ(d.Replies(cpu).size(), 1u);
  EXPECT_TRUE(d.Errors(cpu).empty());
}

// A data fingerprint of one training file (data/fingerprint.h's format).
std::string DataFingerprint(const std::string& sha) {
  return "train_data size=100 sha256=" + sha + " train_x.npy";
}

TEST(JobState, AWorkerWhoseDataFilesDifferIsRefusedAndTheJobGoesOn) {
  JobStateOptions options = Options();
  options.data_fingerprint = DataFingerprint("aaaa");  // the coordinator read the files
  Driver d(Spec(), options);
  d.RegisterShards();
  const WorkerId bad = d.AddWorker();
  const WorkerId good = d.AddWorker();
  d.Events();
  StepRequest r;
  r.worker = bad;
  r.done_step = Step(-1);
  r.tensors = Model();
  r.train_samples = kSamples;
  r.data_fingerprint = DataFingerprint("bbbb");
  Status st = d.state.OnStepRequest(r);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind("data mismatch: ", 0), 0u) << st.ToString();
  EXPECT_NE(st.message().find("train_x.npy"), std::string::npos) << st.ToString();
  const auto refused = Of<JobEvent::WorkerRefused>(d.Events());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.worker, bad);
  EXPECT_EQ(refused[0].second.cause, JobEvent::WorkerRefused::Cause::kDataFingerprint);
  EXPECT_EQ(d.state.live_workers(), 1u);
  // The model was not accepted from it; a worker with the job's files is.
  r.worker = good;
  r.data_fingerprint = DataFingerprint("aaaa");
  EXPECT_TRUE(d.state.OnStepRequest(r).ok());
  EXPECT_EQ(Of<JobEvent::ModelAccepted>(d.Events()).size(), 1u);
  EXPECT_TRUE(d.state.fatal().ok());
}

TEST(JobState, ACpuWorkerRunningOtherKernelsIsRefusedAtItsFirstRequestAndTheJobGoesOn) {
  Driver d;  // the spec's default set, x86-64-v3
  d.RegisterShards();
  const WorkerId other = d.state.OnWorkerRegistered(
      "old-host", 1, "cpu", "openblas Nehalem, aten default, onednn sse41 (x86-64-v3 not applied)");
  const WorkerId good = d.state.OnWorkerRegistered("new-host", 2, "cpu", "x86-64-v3");
  d.Events();
  Status st = d.Report(other);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind(kCpuKernelsMismatch, 0), 0u) << st.ToString();
  EXPECT_NE(st.message().find("x86-64-v3"), std::string::npos) << st.ToString();
  const auto refused = Of<JobEvent::WorkerRefused>(d.Events());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.worker, other);
  EXPECT_EQ(refused[0].second.cause, JobEvent::WorkerRefused::Cause::kCpuKernels);
  EXPECT_TRUE(d.Report(good).ok());
  EXPECT_EQ(d.state.live_workers(), 1u);
  EXPECT_EQ(d.state.StatusReport().cpu_kernels, "x86-64-v3");
  EXPECT_TRUE(d.state.fatal().ok());
}

TEST(JobState, AGpuWorkerOrAJobThatAllowsMixedDevicesTakesOtherCpuKernels) {
  Driver d;  // a GPU's kernels are its device kind's: its CPU report is not checked
  d.RegisterShards();
  const WorkerId gpu = d.state.OnWorkerRegistered("gpu-host", 1, "cuda:NVIDIA H200", "native: x");
  EXPECT_TRUE(d.Report(gpu).ok());
  JobSpec spec = Spec();
  spec.allow_mixed_devices = true;
  Driver mixed(spec);
  mixed.RegisterShards();
  const WorkerId other = mixed.state.OnWorkerRegistered("old-host", 1, "cpu", "openblas Nehalem");
  EXPECT_TRUE(mixed.Report(other).ok());
}

TEST(JobState, ANativeJobTakesTheFirstCpuWorkersKernelsAndRefusesOthers) {
  JobSpec spec = Spec();
  spec.cpu_kernels = kNativeCpuKernels;
  Driver d(spec);
  d.RegisterShards();
  EXPECT_EQ(d.state.StatusReport().cpu_kernels, "");
  const std::string host_a = "native: openblas Cooperlake, aten avx2, onednn avx512_core_bf16";
  const WorkerId a = d.state.OnWorkerRegistered("a", 1, "cpu", host_a);
  const WorkerId b = d.state.OnWorkerRegistered("b", 2, "cpu", "native: openblas Haswell, aten avx2");
  const WorkerId c = d.state.OnWorkerRegistered("c", 3, "cpu", host_a);
  EXPECT_TRUE(d.Report(a).ok());
  EXPECT_EQ(d.state.StatusReport().cpu_kernels, host_a);
  EXPECT_EQ(d.Report(b).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(d.Report(c).ok());
}

TEST(JobState, CheckCpuKernelsAcceptsTheJobsOnlyUnlessMixedIsAllowed) {
  EXPECT_TRUE(CheckCpuKernels("x86-64-v3", "x86-64-v3", false).ok());
  EXPECT_TRUE(CheckCpuKernels("", "anything", false).ok());  // native, before the first worker
  EXPECT_EQ(CheckCpuKernels("x86-64-v3", "x86-64-v4", false).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckCpuKernels("x86-64-v3", "", false).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CheckCpuKernels("x86-64-v3", "x86-64-v4", true).ok());
}

// Found by job_state_fuzz: a first request claiming 2^40 test samples made the
// coordinator cut one evaluation slice per batch, for minutes, at the first evaluation.
TEST(JobState, AnAbsurdTestSetSizeIsRefusedAndTheModelIsNotAccepted) {
  Driver d;
  d.RegisterShards();
  const WorkerId w = d.AddWorker();
  StepRequest r;
  r.worker = w;
  r.done_step = Step(-1);
  r.tensors = Model();
  r.train_samples = kSamples;
  r.test_samples = int64_t{1} << 40;
  EXPECT_EQ(d.state.OnStepRequest(r).code(), StatusCode::kInvalidArgument);
  r.test_samples = -1;
  EXPECT_EQ(d.state.OnStepRequest(r).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Of<JobEvent::ModelAccepted>(d.Events()).empty());
}

TEST(JobState, WithoutItsOwnFingerprintTheCoordinatorTakesTheFirstWorkers) {
  Driver d;
  d.RegisterShards();
  const WorkerId first = d.AddWorker();
  const WorkerId second = d.AddWorker();
  const WorkerId third = d.AddWorker();
  StepRequest r;
  r.done_step = Step(-1);
  r.tensors = Model();
  r.train_samples = kSamples;
  r.worker = first;
  r.data_fingerprint = DataFingerprint("aaaa");
  EXPECT_TRUE(d.state.OnStepRequest(r).ok());
  r.worker = second;
  r.data_fingerprint = DataFingerprint("cccc");
  EXPECT_EQ(d.state.OnStepRequest(r).code(), StatusCode::kFailedPrecondition);
  r.worker = third;
  r.data_fingerprint = DataFingerprint("aaaa");
  EXPECT_TRUE(d.state.OnStepRequest(r).ok());
}

TEST(JobState, TheFirstRegisteredWorkerSetsTheDeviceKindAlsoBeforeTheShards) {
  Driver d;
  const WorkerId gpu = d.state.OnWorkerRegistered("gpu-host", 1, "cuda:NVIDIA H200");
  const WorkerId cpu = d.state.OnWorkerRegistered("cpu-host", 2, "cpu");
  EXPECT_EQ(d.Errors(cpu).size(), 1u) << "refused at once, before the shards are known";
  d.RegisterShards();
  EXPECT_EQ(d.Replies(gpu).size(), 1u);
  EXPECT_TRUE(d.Replies(cpu).empty());
  EXPECT_TRUE(d.Errors(gpu).empty());
}

TEST(JobState, AJobThatAllowsMixedDevicesTakesEveryKind) {
  JobSpec spec = Spec();
  spec.allow_mixed_devices = true;
  Driver d(spec);
  d.RegisterShards();
  const WorkerId cpu = d.state.OnWorkerRegistered("cpu-host", 1, "cpu");
  const WorkerId h200 = d.state.OnWorkerRegistered("gpu-host", 2, "cuda:NVIDIA H200");
  const WorkerId a100 = d.state.OnWorkerRegistered("gpu-host", 3, "cuda:NVIDIA A100-SXM4-80GB");
  for (WorkerId w : {cpu, h200, a100}) {
    EXPECT_EQ(d.Replies(w).size(), 1u) << w;
    EXPECT_TRUE(d.Errors(w).empty()) << w;
  }
}

// A worker repeats a registration that went unanswered (its coordinator may
// have restarted meanwhile): the same process keeps its id until it is ready.
TEST(JobState, ARepeatedRegistrationOfTheSameProcessKeepsItsIdUntilItIsReady) {
  Driver d;
  const WorkerId w = d.state.OnWorkerRegistered("host-a", 77);
  EXPECT_EQ(d.state.OnWorkerRegistered("host-a", 77), w);
  EXPECT_TRUE(d.Replies(w).empty());  // no shards yet
  d.RegisterShards();
  EXPECT_EQ(d.Replies(w).size(), 1u) << "answered once for both";
  EXPECT_EQ(d.state.OnWorkerRegistered("host-a", 77), w);  // the answer was lost
  EXPECT_EQ(d.Replies(w).size(), 1u);
  const WorkerId other = d.state.OnWorkerRegistered("host-b", 77);
  EXPECT_NE(other, w);
  ASSERT_TRUE(d.Report(w).ok());
  const WorkerId again = d.state.OnWorkerRegistered("host-a", 77);  // a ready worker registers anew
  EXPECT_NE(again, w);
  EXPECT_NE(again, other);
}

TEST(JobState, AWorkerRegisteredBeforeSlowShardsIsStillAnswered) {
  // The worker learns its id only from the reply, so it cannot heartbeat before it.
  Driver d;
  const WorkerId w0 = d.AddWorker();
  d.Pass(seconds(4));  // past the heartbeat timeout, within the startup timeout
  d.RegisterShards();
  EXPECT_TRUE(d.state.fatal().ok());
  EXPECT_EQ(d.Replies(w0).size() + d.Errors(w0).size(), 1u)
      << "the worker waits for an answer that never comes";
  EXPECT_TRUE(d.Report(w0).ok());
}

TEST(JobState, ShardConfigGoesToEveryShardOnceTheFirstWorkerReportsItsModel) {
  Driver d;
  d.RegisterShards();
  const WorkerId w0 = d.AddWorker();
  const WorkerId w1 = d.AddWorker();
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_TRUE(d.Configs(s).empty()) << s;
  EXPECT_EQ(d.state.phase(), JobState::Phase::kStarting);

  ASSERT_TRUE(d.Report(w0).ok());
  for (uint32_t s = 0; s < kShards; ++s) {
    const std::vector<ShardConfig> c = d.Configs(s);
    ASSERT_EQ(c.size(), 1u) << s;
    std::vector<TensorSpec> want = Model();
    want.push_back(LossTensor());
    EXPECT_EQ(c[0].tensors, want);
    EXPECT_EQ(c[0].spec.virtual_workers, kV);
  }
  const StepPlan init = d.OnePlan(w0, PlanKind::kInit);
  EXPECT_EQ(init.step, Step(-1));
  EXPECT_EQ(d.state.phase(), JobState::Phase::kInitializing);

  ASSERT_TRUE(d.Report(w1).ok());  // the same model: no new config, no second initializer
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_TRUE(d.Configs(s).empty()) << s;
  EXPECT_TRUE(d.Plans(w1).empty());

  d.RegisterShard(1);  // a restarted shard learns the model at once
  EXPECT_EQ(d.Configs(1).size(), 1u);
  EXPECT_TRUE(d.Configs(0).empty());
}

TEST(JobState, TrainingStartsAfterTheShardsHoldTheInitialValuesWithNearEqualContiguousRanges) {
  Driver d;
  d.RegisterShards();
  const WorkerId w0 = d.AddWorker(), w1 = d.AddWorker(), w2 = d.AddWorker();
  for (WorkerId w : {w0, w1, w2}) ASSERT_TRUE(d.Report(w).ok());
  d.OnePlan(w0, PlanKind::kInit);

  d.ShardDone(0, -1);  // one shard is not enough
  EXPECT_EQ(d.state.phase(), JobState::Phase::kInitializing);
  EXPECT_TRUE(d.Plans(w1).empty());
  EXPECT_TRUE(d.Plans(w2).empty());

  d.ShardDone(1, -1);
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  const StepPlan p1 = d.OnePlan(w1, PlanKind::kTrain);
  const StepPlan p2 = d.OnePlan(w2, PlanKind::kTrain);
  EXPECT_TRUE(d.Plans(w0).empty()) << "w0 has not confirmed its initialization yet";
  ASSERT_TRUE(d.Confirm(w0, -1).ok());
  const StepPlan p0 = d.OnePlan(w0, PlanKind::kTrain);

  EXPECT_EQ(RangeOf(p0), Range(0, 3));
  EXPECT_EQ(RangeOf(p1), Range(3, 6));
  EXPECT_EQ(RangeOf(p2), Range(6, 8));
  for (const StepPlan& p : {p0, p1, p2}) {
    EXPECT_EQ(p.step, Step(0));
    EXPECT_EQ(p.epoch, d.state.epoch());
  }
  EXPECT_EQ(d.state.AssignmentString(), "w0:[0,3) w1:[3,6) w2:[6,8)");
  const std::vector<JobEvent> events = d.Events();
  EXPECT_EQ(
      Kinds(events, /*all=*/true),
      (std::vector<std::string>{"shard_registered", "shard_registered", "worker_joined",
                                "worker_joined", "worker_joined", "model_accepted", "worker_ready",
                                "initializing", "worker_ready", "worker_ready", "assignment"}));
  for (size_t i = 0; i + 1 < events.size(); ++i)
    EXPECT_FALSE(events[i].step) << "before training: " << EventKind(events[i]);
  const auto epoch = Of<JobEvent::Assignment>(events);
  ASSERT_EQ(epoch.size(), 1u);
  EXPECT_EQ(epoch[0].first, Step(0));
  EXPECT_EQ(epoch[0].second.epoch, d.state.epoch());
  EXPECT_EQ(epoch[0].second.ranges, Ranges({{w0, 0, 3}, {w1, 3, 6}, {w2, 6, 8}}));
}

TEST(JobState, ProgressReportsStepsDoneLossAndTheLiveRanges) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  d.state.ReportProgress();
  EXPECT_TRUE(Of<JobEvent::Progress>(d.Events()).empty()) << "no step is done yet";
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  d.clock.Advance(seconds(2));
  d.RunStep(0, ws);
  d.state.ReportProgress();
  const auto progress = Of<JobEvent::Progress>(d.Events());
  ASSERT_EQ(progress.size(), 1u);
  const JobEvent::Progress& p = progress[0].second;
  EXPECT_EQ(progress[0].first, Step(1)) << "steps done";
  EXPECT_EQ(p.steps, kSteps);
  EXPECT_DOUBLE_EQ(p.epoch, double(kV * 4) / kSamples);
  EXPECT_FLOAT_EQ(p.loss, 1.0f / 3);
  EXPECT_DOUBLE_EQ(p.samples_per_s, kV * 4 / 2.0);
  EXPECT_EQ(p.workers, 2u);
  EXPECT_FALSE(p.paused);
  EXPECT_EQ(p.ranges, Ranges({{ws[0], 0, 4}, {ws[1], 4, 8}}));
}

TEST(JobState, TrainingWaitsForMinWorkersReadyWorkers) {
  Driver d(Spec(), Options(/*min_workers=*/2));
  d.RegisterShards();
  const WorkerId w0 = d.AddWorker();
  ASSERT_TRUE(d.Report(w0).ok());
  d.OnePlan(w0, PlanKind::kInit);
  d.FinishStep(-1);
  ASSERT_TRUE(d.Confirm(w0, -1).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kInitializing);
  EXPECT_TRUE(d.Plans(w0).empty());

  const WorkerId w1 = d.AddWorker();
  ASSERT_TRUE(d.Report(w1).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(RangeOf(d.OnePlan(w0, PlanKind::kTrain)), Range(0, 4));
  EXPECT_EQ(RangeOf(d.OnePlan(w1, PlanKind::kTrain)), Range(4, 8));
}

// ---- the step clock and membership ---------------------------------------------

// A worker re-planned to 0 VWs on a slow measurement is measured again after
// probe_idle_after idle steps: its estimate is forgotten, the planner counts it
// at the median speed and gives it VWs back; measured slow again, it loses them.
TEST(JobState, AWorkerIdleForProbeIdleAfterStepsIsMeasuredAgain) {
  JobStateOptions o = Options();
  o.probe_idle_after = 3;
  o.replan_min_steps = 0;  // the probe alone; JobStateReplan has the gate's timing
  JobSpec spec = Spec();
  spec.steps = 50;
  Driver d(spec, o);
  d.RegisterShards();
  const std::vector<WorkerId> ws = {d.AddWorker(), d.AddWorker()};
  for (WorkerId w : ws) ASSERT_TRUE(d.Report(w).ok());
  d.FinishStep(-1);
  ASSERT_TRUE(d.Confirm(ws[0], -1).ok());
  ASSERT_EQ(d.state.step(), Step(0));
  auto step = [&](int64_t t, double slow) {
    for (size_t i = 0; i < ws.size(); ++i) {
      StepRequest r;
      r.worker = ws[i];
      r.done_step = Step(t);
      r.seconds_per_vw = i == 0 ? 0.01 : slow;
      ASSERT_TRUE(d.state.OnStepRequest(r).ok());
    }
    d.FinishStep(t);
  };
  // A worker that held no VW reports no time (0), as worker.cc does.
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
  step(0, 1.0);  // w1 is 100x slower: re-planned to no VW
  ASSERT_EQ(d.state.AssignmentRanges(), (Ranges{{0, 8}}));
  int64_t t = 1;
  for (; t < 10 && d.state.AssignmentRanges() == Ranges{{0, 8}}; ++t) step(t, 0);
  EXPECT_EQ(d.state.AssignmentRanges(), (Ranges{{0, 4}, {4, 8}}))
      << "w1 probed at the median speed";
  EXPECT_LE(t, 2 + o.probe_idle_after + 1);
  step(t, 1.0);  // still slow: its VWs go back
  EXPECT_EQ(d.state.AssignmentRanges(), (Ranges{{0, 8}}));
}

// The inter-job scheduler's view: the job's needs and each live worker's measured speed.
TEST(JobState, InfoNamesTheJobsNeedsAndEachLiveWorkersMeasuredSpeed) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  StepRequest r;
  r.worker = ws[1];
  r.done_step = Step(-1);
  r.seconds_per_vw = 0.02;
  ASSERT_TRUE(d.state.OnStepRequest(r).ok());
  const JobInfoReply info = d.state.Info();
  EXPECT_EQ(info.job_id, "job");
  EXPECT_EQ(info.virtual_workers, kV);
  EXPECT_EQ(info.batch_per_vw, 4u);
  EXPECT_EQ(info.steps, kSteps);
  EXPECT_EQ(info.step, 0);
  ASSERT_EQ(info.workers.size(), 2u);
  EXPECT_EQ(info.workers[0].host, "host");
  EXPECT_EQ(info.workers[0].device_kind, "cpu");
  EXPECT_EQ(info.workers[0].seconds_per_vw, 0.0) << "not measured yet";
  EXPECT_NEAR(info.workers[1].seconds_per_vw, 0.02, 1e-12);
  ASSERT_TRUE(d.state.OnLeave(ws[0], "test").ok());
  EXPECT_EQ(d.state.Info().workers.size(), 1u) << "only live workers";
}

TEST(JobState, AStepCompletedEventCarriesTheStepsLossLearningRateEpochAndRanges) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  d.Events();
  d.RunStep(0, ws);
  const auto completed = Of<JobEvent::StepCompleted>(d.Events());
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_EQ(completed[0].first, Step(0));
  const JobEvent::StepCompleted& c = completed[0].second;
  EXPECT_TRUE(c.has_loss);
  EXPECT_FLOAT_EQ(c.loss, 1.0f / 3);
  EXPECT_DOUBLE_EQ(c.lr, 0.5 / 2);
  EXPECT_DOUBLE_EQ(c.epoch, double(kV * 4) / kSamples);
  EXPECT_EQ(c.ranges, Ranges({{ws[0], 0, 4}, {ws[1], 4, 8}}));
}

TEST(JobState, TheStatusReportNamesEveryWorkerAndShardAndTheRecentRate) {
  Driver d;
  std::vector<WorkerId> ws = d.Start(2);
  StepRequest r;
  r.worker = ws[1];
  r.done_step = Step(-1);
  r.seconds_per_vw = 0.02;
  ASSERT_TRUE(d.state.OnStepRequest(r).ok());
  JobStatusReply s = d.state.StatusReport();
  EXPECT_EQ(s.phase, "training");
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.eta_s, -1) << "no rate before two steps completed";
  EXPECT_FALSE(s.has_loss) << "no step is done yet";
  for (int64_t t = 0; t < 3; ++t) {
    d.clock.Advance(seconds(2));
    d.RunStep(t, ws);
  }
  d.ShardDone(0, 2, /*durable=*/2);  // shard 0's checkpoint of step 2 landed
  d.clock.Advance(milliseconds(500));
  ASSERT_TRUE(d.state.OnLeave(ws[1], "preempted").ok());
  const WorkerId dead = d.AddWorker();
  d.Pass(seconds(4), {ws[0]});  // `dead` misses its heartbeats
  d.clock.Advance(milliseconds(500));
  s = d.state.StatusReport();
  EXPECT_EQ(s.job_id, "job");
  EXPECT_EQ(s.model, "tiny");
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.steps, kSteps);
  EXPECT_DOUBLE_EQ(s.epoch, 3.0 * kV * 4 / kSamples);
  EXPECT_TRUE(s.has_loss);
  EXPECT_FLOAT_EQ(s.loss, 1.0f / 5);
  EXPECT_DOUBLE_EQ(s.lr, 0.5 / 4);
  EXPECT_DOUBLE_EQ(s.samples_per_s, kV * 4 / 2.0) << "a step every 2 s";
  EXPECT_DOUBLE_EQ(s.eta_s, (kSteps - 3) * 2.0);
  EXPECT_DOUBLE_EQ(s.elapsed_s, 11);
  EXPECT_EQ(s.virtual_workers, kV);
  ASSERT_EQ(s.workers.size(), 3u);
  EXPECT_EQ(s.workers[0].worker, ws[0]);
  EXPECT_EQ(s.workers[0].state, "ready");
  EXPECT_EQ(s.workers[0].host, "host");
  EXPECT_EQ(s.workers[0].device_kind, "cpu");
  EXPECT_EQ(s.workers[0].steps_contributed, 3);
  EXPECT_DOUBLE_EQ(s.workers[0].since_heartbeat_s, 0.5);
  EXPECT_EQ(s.workers[1].state, "left");
  EXPECT_EQ(s.workers[1].steps_contributed, 3);
  EXPECT_NEAR(s.workers[1].seconds_per_vw, 0, 1e-12) << "forgotten once it left";
  EXPECT_EQ(s.workers[1].vw_hi - s.workers[1].vw_lo, 0u) << "a worker that left holds nothing";
  EXPECT_EQ(s.workers[2].worker, dead);
  EXPECT_EQ(s.workers[2].state, "dead");
  EXPECT_EQ(s.workers[2].steps_contributed, 0);
  ASSERT_EQ(s.shards.size(), kShards);
  for (uint32_t i = 0; i < kShards; ++i) {
    EXPECT_TRUE(s.shards[i].registered);
    EXPECT_EQ(s.shards[i].address, "ipc:///tmp/shard" + std::to_string(i));
    EXPECT_EQ(s.shards[i].version, Step(3)) << "it applied steps 0, 1, 2";
    EXPECT_EQ(s.shards[i].bytes_in, 1000u * (i + 1) * 4);
    EXPECT_EQ(s.shards[i].bytes_out, 10u * (i + 1) * 4);
  }
  EXPECT_EQ(s.shards[0].durable_step, Step(2));
  EXPECT_DOUBLE_EQ(s.shards[0].since_checkpoint_s, 5);
  EXPECT_EQ(s.shards[1].durable_step, Step(-1));
  EXPECT_EQ(s.shards[1].since_checkpoint_s, -1) << "no checkpoint";
}

TEST(JobState, TheEpochStaysWhileMembershipDoesNotChange) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  const Epoch e = d.state.epoch();
  for (int64_t t = 0; t < 3; ++t) {
    d.RunStep(t, ws);
    EXPECT_EQ(d.OnePlan(ws[0], PlanKind::kTrain).epoch, e) << "step " << t + 1;
    EXPECT_EQ(d.OnePlan(ws[1], PlanKind::kTrain).epoch, e) << "step " << t + 1;
  }
}

TEST(JobState, TheEpochStaysWhileMembershipDoesNotChangeWithMoreWorkersThanVws) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(kV + 1);  // the last worker holds no VW
  for (uint32_t i = 0; i < kV; ++i) d.OnePlan(ws[i], PlanKind::kTrain);
  EXPECT_TRUE(d.Plans(ws[kV]).empty());
  const Epoch e = d.state.epoch();
  d.RunStep(0, ws);
  EXPECT_EQ(d.state.step(), Step(1));
  EXPECT_EQ(d.state.epoch(), e) << "nobody joined or left, yet the assignment epoch moved";
}

TEST(JobState, AWorkerThatJoinsDuringAStepGetsRangesFromTheNextStepInANewEpoch) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  const StepPlan a = d.OnePlan(ws[0], PlanKind::kTrain);
  const StepPlan b = d.OnePlan(ws[1], PlanKind::kTrain);
  EXPECT_TRUE(CoverAllVws({RangeOf(a), RangeOf(b)}));

  const WorkerId w2 = d.AddWorker();
  ASSERT_TRUE(d.Report(w2).ok());
  EXPECT_TRUE(d.Plans(w2).empty()) << "nothing of step 0 is orphaned";
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());
  EXPECT_TRUE(d.Plans(w2).empty());
  EXPECT_TRUE(d.Plans(ws[0]).empty());

  d.FinishStep(0);
  std::vector<Range> ranges;
  for (WorkerId w : {ws[0], ws[1], w2}) {
    const StepPlan p = d.OnePlan(w, PlanKind::kTrain);
    EXPECT_EQ(p.step, Step(1));
    EXPECT_GT(p.epoch, a.epoch);
    EXPECT_EQ(p.epoch, d.state.epoch());
    ranges.push_back(RangeOf(p));
  }
  EXPECT_TRUE(CoverAllVws(ranges));
  EXPECT_EQ(ranges, (std::vector<Range>{{0, 3}, {3, 6}, {6, 8}}));
}

TEST(JobState, AWorkerThatLeavesBeforeConfirmingHasItsRangeRecomputedByTheNextWorkerThatAsks) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  const StepPlan a = d.OnePlan(ws[0], PlanKind::kTrain);
  const StepPlan b = d.OnePlan(ws[1], PlanKind::kTrain);
  d.Events();

  ASSERT_TRUE(d.state.OnLeave(ws[1], "preempted").ok());
  EXPECT_EQ(d.OnePlan(ws[1], PlanKind::kStop).kind, PlanKind::kStop);
  EXPECT_EQ(d.state.live_workers(), 1u);
  EXPECT_TRUE(d.Plans(ws[0]).empty()) << "w0 is busy: it gets the orphan when it asks";
  const std::vector<JobEvent> left = d.Events();
  ASSERT_EQ(Kinds(left), std::vector<std::string>{"worker_left"});
  const auto& l = *left[0].As<JobEvent::WorkerLeft>();
  EXPECT_EQ(l.worker, ws[1]);
  EXPECT_EQ(l.reason, "preempted");
  EXPECT_EQ(l.moved, Ranges({{ws[1], b.vw_lo, b.vw_hi}}));
  EXPECT_EQ(left[0].step, Step(0));
  EXPECT_EQ(left[0].at, d.clock.Now());

  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  const StepPlan r = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(r.step, Step(0));
  EXPECT_EQ(r.epoch, a.epoch);
  EXPECT_EQ(RangeOf(r), RangeOf(b));
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  EXPECT_TRUE(d.Plans(ws[0]).empty()) << "step 0 has nothing left";
  const std::vector<JobEvent> recovered = d.Events();
  EXPECT_EQ(Kinds(recovered, /*all=*/true),
            (std::vector<std::string>{"range_confirmed", "range_recomputed", "range_confirmed"}));
  const auto confirmed = Of<JobEvent::RangeConfirmed>(recovered);
  ASSERT_EQ(confirmed.size(), 2u);
  EXPECT_EQ(confirmed[1].first, Step(0));
  EXPECT_EQ(Range(confirmed[1].second.lo, confirmed[1].second.hi), RangeOf(b));
  EXPECT_EQ(confirmed[1].second.worker, ws[0]);

  d.FinishStep(0);
  const StepPlan next = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(next.step, Step(1));
  EXPECT_EQ(RangeOf(next), Range(0, kV));
  EXPECT_GT(next.epoch, a.epoch);
  EXPECT_TRUE(d.Plans(ws[1]).empty());
  // The new epoch names the ranges from step 1 on: all of them w0's.
  const std::vector<JobEvent> after = d.Events();
  EXPECT_EQ(Kinds(after, /*all=*/true), (std::vector<std::string>{"step_completed", "assignment"}));
  const auto epochs = Of<JobEvent::Assignment>(after);
  ASSERT_EQ(epochs.size(), 1u);
  EXPECT_EQ(epochs[0].first, Step(1));
  EXPECT_EQ(epochs[0].second.epoch, next.epoch);
  EXPECT_EQ(epochs[0].second.ranges, Ranges({{ws[0], 0, kV}}));
}

TEST(JobState, AWorkerThatLeavesAfterConfirmingItsStepLeavesNothingToRecompute) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  d.OnePlan(ws[0], PlanKind::kTrain);
  d.OnePlan(ws[1], PlanKind::kTrain);

  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());
  ASSERT_TRUE(d.state.OnLeave(ws[1], "done for today").ok());
  d.OnePlan(ws[1], PlanKind::kStop);
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  EXPECT_TRUE(d.Plans(ws[0]).empty()) << "a recovery of a confirmed range";

  d.FinishStep(0);
  EXPECT_EQ(RangeOf(d.OnePlan(ws[0], PlanKind::kTrain)), Range(0, kV));
}

TEST(JobState, AWorkerThatMissesHeartbeatsIsDeclaredDeadAndOnlyItsRangeIsRecomputed) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(3);  // [0,3) [3,6) [6,8)
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);

  d.Pass(seconds(3), {ws[0], ws[1]});  // w2 is silent, but not yet past the deadline
  EXPECT_EQ(d.state.live_workers(), 3u);
  d.Events();
  d.Pass(seconds(1), {ws[0], ws[1]});
  EXPECT_EQ(d.state.live_workers(), 2u) << "w2 missed its heartbeats";
  const auto dead = Of<JobEvent::WorkerDead>(d.Events());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].second.worker, ws[2]);
  EXPECT_EQ(dead[0].second.cause, JobEvent::WorkerDead::Cause::kMissedHeartbeats);
  EXPECT_GT(dead[0].second.silent_ms, 3000);
  EXPECT_EQ(dead[0].second.moved, Ranges({{ws[2], 6, 8}}));
  EXPECT_EQ(dead[0].first, Step(0));
  EXPECT_EQ(d.state.OnHeartbeat(ws[2]).code(), StatusCode::kAborted);
  EXPECT_TRUE(d.Plans(ws[2]).empty());

  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  const StepPlan r0 = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(r0.step, Step(0));
  EXPECT_EQ(RangeOf(r0), Range(6, 8));

  // The recovering worker crashes too: the same range is orphaned again, nothing else.
  d.Pass(seconds(4), {ws[1]});
  EXPECT_EQ(d.state.live_workers(), 1u);
  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());
  const StepPlan r1 = d.OnePlan(ws[1], PlanKind::kTrain);
  EXPECT_EQ(r1.step, Step(0));
  EXPECT_EQ(RangeOf(r1), Range(6, 8));
  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());
  EXPECT_TRUE(d.Plans(ws[1]).empty()) << "w0's own range was confirmed before it crashed";

  d.FinishStep(0);
  EXPECT_EQ(RangeOf(d.OnePlan(ws[1], PlanKind::kTrain)), Range(0, kV));
}

TEST(JobState, TheCoordinatorsOwnStallIsNotAWorkersSilence) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  d.Pass(seconds(1), {ws[0], ws[1]});

  d.clock.Advance(seconds(7));  // the loop was busy (a 400 MB result): no beat read, no tick
  d.state.Tick();
  EXPECT_EQ(d.state.live_workers(), 2u) << "silent only while the coordinator did not listen";
  EXPECT_TRUE(Of<JobEvent::WorkerDead>(d.Events()).empty());

  d.Pass(seconds(4), {ws[0]});  // now w1 is silent while the coordinator listens
  EXPECT_EQ(d.state.live_workers(), 1u);
  const auto dead = Of<JobEvent::WorkerDead>(d.Events());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].second.worker, ws[1]);
  EXPECT_LT(dead[0].second.silent_ms, 5000) << "the stall is not counted";
}

TEST(JobState, AnotherReadyWorkerInitializesWhenTheInitializerCrashes) {
  Driver d;
  d.RegisterShards();
  const WorkerId w0 = d.AddWorker(), w1 = d.AddWorker();
  ASSERT_TRUE(d.Report(w0).ok());
  ASSERT_TRUE(d.Report(w1).ok());
  d.OnePlan(w0, PlanKind::kInit);
  EXPECT_TRUE(d.Plans(w1).empty());

  d.Pass(seconds(4), {w1});
  EXPECT_EQ(d.state.live_workers(), 1u);
  EXPECT_EQ(d.OnePlan(w1, PlanKind::kInit).step, Step(-1));
  EXPECT_EQ(d.state.phase(), JobState::Phase::kInitializing);

  d.FinishStep(-1);
  ASSERT_TRUE(d.Confirm(w1, -1).ok());
  EXPECT_EQ(RangeOf(d.OnePlan(w1, PlanKind::kTrain)), Range(0, kV));
}

// ---- re-planning by speed: hysteresis in time ----------------------------------

// Steps [from, to): each worker that got step t's train plan confirms it and
// reports `seconds(i, t)` seconds per VW (worker i of `ws`); then the shards
// finish t. A worker without VWs waits, as worker.cc does.
void RunTimedSteps(Driver& d, const std::vector<WorkerId>& ws, int64_t from, int64_t to,
                   const std::function<double(size_t, int64_t)>& seconds) {
  for (int64_t t = from; t < to; ++t) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const std::vector<StepPlan> plans = d.Plans(ws[i]);
      if (plans.empty()) continue;
      ASSERT_EQ(plans.size(), 1u);
      ASSERT_EQ(plans[0].step, Step(t));
      StepRequest r;
      r.worker = ws[i];
      r.done_step = Step(t);
      r.seconds_per_vw = seconds(i, t);
      ASSERT_TRUE(d.state.OnStepRequest(r).ok());
    }
    d.FinishStep(t);
  }
}

JobSpec ReplanSpec(uint32_t v, int64_t steps) {
  JobSpec spec = Spec();
  spec.virtual_workers = v;
  spec.steps = steps;
  return spec;
}

TEST(JobStateReplan, NoisySpeedsOnAnUnchangedMembershipReplanAtMostOncePerFiftySteps) {
  constexpr int64_t kSteps = 1000;
  const std::vector<double> times{0.010, 0.010, 0.012, 0.020};
  auto run = [&](int64_t min_steps) {
    JobStateOptions o = Options();
    o.replan_min_steps = min_steps;
    Driver d(ReplanSpec(32, kSteps + 10), o);
    const std::vector<WorkerId> ws = d.Start(4);
    testing_noise::HostNoise noise(ws.size(), 7, 4);
    std::vector<double> reports;
    RunTimedSteps(d, ws, 0, kSteps, [&](size_t i, int64_t) {
      if (i == 0) reports = noise.Reports(times);  // worker 0 confirms first in every step
      return reports[i];
    });
    return d.Events();
  };
  const std::vector<JobEvent> ungated = run(0);
  // The noise is real: without a minimum it re-plans far more often than once per 50 steps.
  EXPECT_GT(Of<JobEvent::Replan>(ungated).size(), size_t(3 * kSteps / 50));

  const std::vector<JobEvent> events = run(50);
  const auto replans = Of<JobEvent::Replan>(events);
  const auto assignments = Of<JobEvent::Assignment>(events);
  EXPECT_EQ(assignments.size(), replans.size() + 1) << "the first assignment, then one a re-plan";
  ASSERT_GE(replans.size(), 1u) << "the workers' speeds differ: some re-plan is due";
  int64_t previous = 0;  // the first assignment's step
  for (const auto& [step, replan] : replans) {
    ASSERT_TRUE(step.has_value());
    // The first reports measure workers planned at guessed speeds: one re-plan at step 1 may
    // follow.
    if (replan.trigger == ReplanTrigger::kMeasured) {
      EXPECT_EQ(*step, Step(1)) << replan.reason;
    } else {
      EXPECT_EQ(replan.trigger, ReplanTrigger::kDue) << replan.reason;
      EXPECT_GE(step->value() - previous, 50) << replan.reason;
      EXPECT_EQ(replan.steps_since_assignment, step->value() - previous);
    }
    previous = step->value();
  }
  EXPECT_LE(replans.size(), size_t(1 + kSteps / 50));
}

TEST(JobStateReplan, ASustainedSlowdownReplansWithinTheWindowAndNotBefore) {
  JobStateOptions o = Options();  // 50 steps, a window of 10 reports
  Driver d(ReplanSpec(32, 100), o);
  const std::vector<WorkerId> ws = d.Start(4);
  constexpr int64_t kOnset = 20;  // 20 steps after the first assignment: not due before step 50
  const auto slow_from = [](int64_t onset) {
    return [onset](size_t i, int64_t t) { return i == 2 && t >= onset ? 0.02 : 0.01; };
  };
  RunTimedSteps(d, ws, 0, kOnset + int64_t(o.replan_window) - 1, slow_from(kOnset));
  EXPECT_TRUE(Of<JobEvent::Replan>(d.Events()).empty())
      << "equal speeds, then a change still short";
  RunTimedSteps(d, ws, kOnset + int64_t(o.replan_window) - 1, kOnset + int64_t(o.replan_window),
                slow_from(kOnset));
  const std::vector<JobEvent> events = d.Events();
  const auto replans = Of<JobEvent::Replan>(events);
  ASSERT_EQ(replans.size(), 1u);
  EXPECT_EQ(replans[0].first, Step(kOnset + int64_t(o.replan_window))) << "at the window's end";
  EXPECT_EQ(replans[0].second.trigger, ReplanTrigger::kSustained) << replans[0].second.reason;
  EXPECT_EQ(replans[0].second.trigger_worker, ws[2]);
  const auto assignments = Of<JobEvent::Assignment>(events);
  ASSERT_EQ(assignments.size(), 1u);
  for (const WorkerRange& r : assignments[0].second.ranges) {
    if (r.worker == ws[2]) {
      EXPECT_LT(r.hi - r.lo, 8u) << "the slowed worker holds fewer VWs";
    } else {
      EXPECT_GT(r.hi - r.lo, 8u);
    }
  }
  for (const JobEvent& e : events) {
    if (std::string(EventKind(e)) == "replan") {
      EXPECT_NE(EventJson(e, 0).find("\"trigger\":\"sustained\""), std::string::npos)
          << EventJson(e, 0);
    }
  }
}

TEST(JobStateReplan, AJoinAndALeaveReassignAtOnceEvenRightAfterAReplan) {
  Driver d(ReplanSpec(32, 100), Options());
  const std::vector<WorkerId> ws = d.Start(4);
  const auto slow = [](size_t i, int64_t t) { return i == 2 && t >= 5 ? 0.02 : 0.01; };
  RunTimedSteps(d, ws, 0, 15, slow);  // a sustained re-plan at step 15
  ASSERT_EQ(Of<JobEvent::Replan>(d.Events()).size(), 1u);
  const Epoch replanned = d.state.epoch();

  const WorkerId joiner = d.AddWorker();
  ASSERT_TRUE(d.Report(joiner).ok());
  RunTimedSteps(d, ws, 15, 16, slow);
  EXPECT_GT(d.state.epoch(), replanned)
      << "the join is assigned at the next step, 1 step after a re-plan";
  const auto joined = Of<JobEvent::Assignment>(d.Events());
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].first, Step(16));
  EXPECT_EQ(joined[0].second.ranges.size(), 5u);

  std::vector<WorkerId> all = ws;
  all.push_back(joiner);
  const Epoch with_joiner = d.state.epoch();
  ASSERT_TRUE(d.state.OnLeave(ws[1], "test").ok());
  all.erase(all.begin() + 1);
  RunTimedSteps(d, all, 16, 17, [](size_t, int64_t) { return 0.01; });
  EXPECT_GT(d.state.epoch(), with_joiner) << "the leave is assigned at the next step";
  const auto left = Of<JobEvent::Assignment>(d.Events());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].first, Step(17));
  EXPECT_EQ(left[0].second.ranges.size(), 4u);
}

// ---- at size ----------------------------------------------------------------------

TEST(JobStateAtSize,
     TwoHundredFiftySixWorkersShareFourThousandNinetySixVwsThroughStepsBeatsAndALeave) {
  constexpr uint32_t kWorkers = 256, kVws = 4096;
  JobStateOptions o = Options();
  o.max_workers_per_machine = 0;  // the Driver registers every worker from one host
  Driver d(ReplanSpec(kVws, 10), o);
  const std::vector<WorkerId> ws = d.Start(kWorkers);
  for (WorkerId w : ws) EXPECT_EQ(d.Replies(w).size(), 1u) << "worker " << w;
  EXPECT_EQ(d.state.live_workers(), kWorkers);
  EXPECT_EQ(d.state.StatusReport().workers.size(), kWorkers);

  // Each step: every worker gets one plan, the plans cover every VW once, heartbeats between steps.
  std::vector<WorkerId> live = ws;
  for (int64_t t = 0; t < 4; ++t) {
    std::vector<Range> ranges;
    for (WorkerId w : live) {
      const StepPlan p = d.OnePlan(w, PlanKind::kTrain);
      EXPECT_EQ(p.step, Step(t));
      ranges.push_back(RangeOf(p));
      const uint32_t n = p.vw_hi - p.vw_lo;
      EXPECT_TRUE(n == kVws / live.size() || n == kVws / live.size() + 1)
          << "near-equal: worker " << w << " holds " << n;
    }
    EXPECT_TRUE(CoverVws(ranges, kVws)) << "step " << t;
    d.Pass(seconds(2), live);
    for (WorkerId w : live) {
      StepRequest r;
      r.worker = w;
      r.done_step = Step(t);
      r.seconds_per_vw = 0.001;
      ASSERT_TRUE(d.state.OnStepRequest(r).ok());
    }
    const size_t confirmers = live.size();
    if (t == 1) {  // a leave in the middle of the job, once its step is confirmed
      ASSERT_TRUE(d.state.OnLeave(live[100], "test").ok());
      live.erase(live.begin() + 100);
    }
    d.FinishStep(t);
    EXPECT_EQ(d.state.step(), Step(t + 1));
    const auto completed = Of<JobEvent::StepCompleted>(d.Events());
    ASSERT_EQ(completed.size(), 1u);
    std::vector<Range> confirmed;
    for (const WorkerRange& r : completed[0].second.ranges) confirmed.push_back({r.lo, r.hi});
    EXPECT_TRUE(CoverVws(confirmed, kVws)) << "step " << t << " confirmed";
    EXPECT_EQ(completed[0].second.ranges.size(), confirmers);
  }
  EXPECT_EQ(d.state.live_workers(), kWorkers - 1);
  size_t ready = 0;
  for (const WorkerStatus& w : d.state.StatusReport().workers) {
    if (w.state != "ready") continue;
    ++ready;
    EXPECT_EQ(w.steps_contributed, 4) << "worker " << w.worker;
  }
  EXPECT_EQ(ready, kWorkers - 1);
}

// ---- evaluation ------------------------------------------------------------------

TEST(JobState, EvaluationRegivesACrashedWorkersSliceAndEndsOnlyWhenEverySliceIsDone) {
  JobSpec spec = Spec(/*test_limit=*/0);
  spec.eval_batch = 50;
  Driver d(spec);
  const std::vector<WorkerId> ws = d.Start(2);
  for (int64_t t = 0; t < kSteps; ++t) {
    for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
    d.RunStep(t, ws);
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kEvaluating);
  const StepPlan e0 = d.OnePlan(ws[0], PlanKind::kEval);
  const StepPlan e1 = d.OnePlan(ws[1], PlanKind::kEval);
  EXPECT_EQ(e0.step, Step(kSteps));
  EXPECT_EQ(std::make_pair(e0.eval_lo, e0.eval_hi), std::make_pair(int64_t{0}, int64_t{50}));
  EXPECT_EQ(std::make_pair(e1.eval_lo, e1.eval_hi), std::make_pair(int64_t{50}, int64_t{100}));

  d.Pass(seconds(4), {ws[0]});  // w1 crashes holding [50,100)
  EXPECT_EQ(d.state.live_workers(), 1u);
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], Step(kSteps), 0, 50, 40, 10.0}).ok());
  ASSERT_TRUE(
      d.state.OnEvalResult({ws[0], Step(kSteps), 0, 50, 40, 10.0}).ok());  // a repeat counts once
  EXPECT_EQ(d.state.phase(), JobState::Phase::kEvaluating)
      << "half of the test set is not evaluated";
  ASSERT_TRUE(d.Confirm(ws[0], kSteps - 1).ok());
  const StepPlan again = d.OnePlan(ws[0], PlanKind::kEval);
  EXPECT_EQ(again.step, Step(kSteps));
  EXPECT_EQ(std::make_pair(again.eval_lo, again.eval_hi),
            std::make_pair(int64_t{50}, int64_t{100}));

  d.Events();
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], Step(kSteps), 50, 100, 30, 20.0}).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kFinalizing);
  const auto evaluated = Of<JobEvent::Evaluated>(d.Events());
  ASSERT_EQ(evaluated.size(), 1u);
  EXPECT_EQ(evaluated[0].first, Step(kSteps));
  EXPECT_DOUBLE_EQ(evaluated[0].second.accuracy, 0.7);
  EXPECT_DOUBLE_EQ(evaluated[0].second.loss, 0.3);
  const JobSummary s = d.state.Summary();
  EXPECT_TRUE(s.evaluated);
  EXPECT_DOUBLE_EQ(s.test_accuracy, 0.7);
  EXPECT_DOUBLE_EQ(s.test_loss, 0.3);
  EXPECT_EQ(s.steps, kSteps);
}

TEST(JobState, EvaluationSlicesAreEvalBatchesWhateverTheWorkersAndSumInSliceOrder) {
  JobSpec spec = Spec(/*test_limit=*/0);
  spec.eval_batch = 34;
  Driver d(spec);
  const std::vector<WorkerId> ws = d.Start(1);
  for (int64_t t = 0; t < kSteps; ++t) {
    d.OnePlan(ws[0], PlanKind::kTrain);
    d.RunStep(t, ws);
  }
  // One worker gets one slice at a time; the slices are the batches of the test set.
  std::vector<std::pair<int64_t, int64_t>> slices;
  for (int i = 0; i < 3; ++i) {
    const StepPlan e = d.OnePlan(ws[0], PlanKind::kEval);
    slices.push_back({e.eval_lo, e.eval_hi});
    if (i < 2) {
      ASSERT_TRUE(d.Confirm(ws[0], kSteps - 1).ok());
    }
  }
  EXPECT_EQ(slices, (std::vector<std::pair<int64_t, int64_t>>{{0, 34}, {34, 68}, {68, 100}}));
  // Results in another order than the slices': the sum is still in slice order, so
  // (1 + 1e16) - 1e16 = 0, where the order of arrival would give 1.
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], Step(kSteps), 34, 68, 10, 1e16}).ok());
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], Step(kSteps), 68, 100, 10, -1e16}).ok());
  d.Events();
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], Step(kSteps), 0, 34, 10, 1.0}).ok());
  const auto evaluated = Of<JobEvent::Evaluated>(d.Events());
  ASSERT_EQ(evaluated.size(), 1u);
  EXPECT_DOUBLE_EQ(evaluated[0].second.accuracy, 0.3);
  EXPECT_EQ(evaluated[0].second.loss, 0.0);
}

// The steady rate leaves out the first kWarmupSteps steps (libtorch's warm-up).
TEST(JobState, TheSummaryTimesTheStepsAfterTheWarmUpApart) {
  JobSpec spec = Spec();
  spec.steps = JobSummary::kWarmupSteps + 3;
  Driver d(spec);
  const std::vector<WorkerId> ws = d.Start(1);
  for (int64_t t = 0; t < spec.steps; ++t) {
    d.OnePlan(ws[0], PlanKind::kTrain);
    d.clock.Advance(t < JobSummary::kWarmupSteps ? seconds(10) : seconds(1));
    d.RunStep(t, ws);
  }
  const JobSummary s = d.state.Summary();
  EXPECT_EQ(s.steps, spec.steps);
  EXPECT_DOUBLE_EQ(s.train_time.count(), 10.0 * JobSummary::kWarmupSteps + 3);
  EXPECT_EQ(s.steady_steps, 3);
  EXPECT_DOUBLE_EQ(s.steady_time.count(), 3.0);
}

// ---- no worker left, and the end of the job ------------------------------------------

TEST(JobState, WithEveryWorkerDeadTheJobPausesAndAFreshWorkerFinishesIt) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (int64_t t = 0; t < 2; ++t) {
    for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
    d.RunStep(t, ws);
  }
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);  // step 2, never pushed

  d.Events();
  d.Pass(seconds(4));
  EXPECT_EQ(d.state.live_workers(), 0u);
  d.Pass(seconds(20));  // twice the step timeout: nobody is alive to blame
  EXPECT_TRUE(d.state.fatal().ok()) << d.state.fatal().ToString();
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.step(), Step(2));
  const std::vector<JobEvent> gone = d.Events();
  EXPECT_EQ(Kinds(gone), (std::vector<std::string>{"worker_dead", "worker_dead", "paused"}));
  const auto paused = Of<JobEvent::Paused>(gone);
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_EQ(paused[0].first, Step(2));
  EXPECT_EQ(paused[0].second.cause, JobEvent::Paused::Cause::kNoWorker);

  const WorkerId w2 = d.AddWorker();
  ASSERT_EQ(d.Replies(w2).size(), 1u);
  ASSERT_TRUE(d.Report(w2).ok());
  const std::vector<JobEvent> back = d.Events();
  EXPECT_EQ(Kinds(back), (std::vector<std::string>{"worker_joined", "worker_ready",
                                                   "range_recomputed", "resumed"}));
  EXPECT_EQ(back.back().step, Step(2));
  const auto joined = Of<JobEvent::WorkerJoined>(back);
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].second.worker, w2);
  EXPECT_EQ(joined[0].second.host, "host");
  EXPECT_EQ(joined[0].second.device_kind, "cpu");
  std::vector<Range> recovered;
  for (int i = 0; i < 2; ++i) {
    const StepPlan p = d.OnePlan(w2, PlanKind::kTrain);
    EXPECT_EQ(p.step, Step(2));
    recovered.push_back(RangeOf(p));
    ASSERT_TRUE(d.Confirm(w2, 2).ok());
  }
  EXPECT_TRUE(CoverAllVws(recovered));
  EXPECT_EQ(recovered, (std::vector<Range>{{0, 4}, {4, 8}}));
  EXPECT_TRUE(d.Plans(w2).empty());

  d.FinishStep(2);
  for (int64_t t = 3; t < kSteps; ++t) {
    const StepPlan p = d.OnePlan(w2, PlanKind::kTrain);
    EXPECT_EQ(p.step, Step(t));
    EXPECT_EQ(RangeOf(p), Range(0, kV));
    d.RunStep(t, {w2});
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kFinalizing);
  EXPECT_EQ(d.state.Summary().steps, kSteps);
  EXPECT_FLOAT_EQ(d.state.Summary().final_loss, 1.0f / float(kSteps - 1 + 3));
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_TRUE(d.Shutdowns(s).empty());
  EXPECT_FALSE(d.state.done());

  d.Events();
  d.state.OnResultWritten(std::string("cafe"));
  d.OnePlan(w2, PlanKind::kStop);
  const auto finished = Of<JobEvent::JobFinished>(d.Events());
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].first, Step(kSteps));
  EXPECT_EQ(finished[0].second.params_sha256, "cafe");
  EXPECT_FALSE(finished[0].second.evaluated);
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_EQ(d.Shutdowns(s).size(), 1u) << s;
  EXPECT_TRUE(d.state.done());
  EXPECT_TRUE(d.state.fatal().ok());
}

// ---- an operator's hold ---------------------------------------------------------

TEST(JobStateHold, TheStepInFlightEndsThenNoStepStartsUntilTheReleaseWhichCountsWhoJoinedOrDied) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(3);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  d.Events();
  ASSERT_TRUE(d.state.Hold(Step(0)).ok());
  EXPECT_EQ(d.state.hold_from(), Step(0));
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining) << "step 0 is in flight";
  EXPECT_EQ(d.state.StatusReport().hold_from, 0);
  d.RunStep(0, ws);
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(1));
  EXPECT_EQ(d.state.StatusReport().phase, "held");
  const auto paused = Of<JobEvent::Paused>(d.Events());
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_EQ(paused[0].first, Step(1));
  EXPECT_EQ(paused[0].second.cause, JobEvent::Paused::Cause::kHold);

  // Held far past the step timeout: no plan and no failure. A worker joins, one dies.
  const WorkerId joined = d.AddWorker();
  ASSERT_TRUE(d.Report(joined).ok());
  d.Pass(seconds(30), {ws[0], ws[1], joined});
  EXPECT_TRUE(d.state.fatal().ok()) << d.state.fatal().ToString();
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  for (WorkerId w : {ws[0], ws[1], ws[2], joined}) EXPECT_TRUE(d.Plans(w).empty()) << w;
  EXPECT_EQ(Kinds(d.Events()),
            (std::vector<std::string>{"worker_joined", "worker_ready", "worker_dead"}));
  const Epoch before = d.state.epoch();

  ASSERT_TRUE(d.state.Release().ok());
  EXPECT_EQ(d.state.StatusReport().hold_from, -1);
  const std::vector<JobEvent> released = d.Events();
  ASSERT_FALSE(released.empty());
  EXPECT_EQ(EventKind(released[0]), std::string("resumed"));
  EXPECT_EQ(released[0].step, Step(1));
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  std::vector<Range> ranges;
  for (WorkerId w : {ws[0], ws[1], joined}) {
    const StepPlan p = d.OnePlan(w, PlanKind::kTrain);
    EXPECT_EQ(p.step, Step(1));
    ranges.push_back(RangeOf(p));
  }
  EXPECT_TRUE(d.Plans(ws[2]).empty()) << "it died while held";
  EXPECT_TRUE(CoverAllVws(ranges));
  EXPECT_GT(d.state.epoch(), before) << "the membership changed while held";
  for (int64_t t = 1; t < kSteps; ++t) {
    if (t > 1)
      for (WorkerId w : {ws[0], ws[1], joined}) d.OnePlan(w, PlanKind::kTrain);
    d.RunStep(t, {ws[0], ws[1], joined});
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kFinalizing);
  EXPECT_EQ(d.state.Hold(Step(0)).code(), StatusCode::kFailedPrecondition) << "the job is over";
}

TEST(JobStateHold, AHoldBeforeTrainingKeepsStepZeroAndRepeatsChangeNothing) {
  Driver d;
  ASSERT_TRUE(d.state.Release().ok()) << "releasing a job not held changes nothing";
  EXPECT_EQ(d.state.Hold(Step(-1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.state.Hold(Step(kSteps)).code(), StatusCode::kInvalidArgument) << "no such step";
  EXPECT_FALSE(d.state.hold_from().has_value());
  ASSERT_TRUE(d.state.Hold(Step(0)).ok());
  ASSERT_TRUE(d.state.Hold(Step(0)).ok());
  d.RegisterShards();
  const WorkerId w = d.AddWorker();
  ASSERT_TRUE(d.Report(w).ok());
  d.OnePlan(w, PlanKind::kInit);  // the initial values are pushed while held
  d.FinishStep(-1);
  ASSERT_TRUE(d.Confirm(w, -1).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(0));
  EXPECT_TRUE(d.Plans(w).empty());
  EXPECT_EQ(Of<JobEvent::Paused>(d.Events()).size(), 1u) << "one pause for two holds";
  ASSERT_TRUE(d.state.Release().ok());
  ASSERT_TRUE(d.state.Release().ok());
  EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(0));
  EXPECT_EQ(Of<JobEvent::Resumed>(d.Events()).size(), 1u);
}

TEST(JobStateHold, AHoldFromALaterStepLetsTheJobRunToItAndMovingItOnGoesOn) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  ASSERT_TRUE(d.state.Hold(Step(2)).ok());
  for (int64_t t = 0; t < 2; ++t) {
    for (WorkerId w : ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(t));
    d.RunStep(t, ws);
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(2));
  EXPECT_EQ(d.state.StatusReport().hold_from, 2);
  for (WorkerId w : ws) EXPECT_TRUE(d.Plans(w).empty());
  ASSERT_TRUE(d.state.Hold(Step(1)).ok());  // an earlier step: still held here
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  d.Events();
  ASSERT_TRUE(d.state.Hold(Step(3)).ok());  // one more step, then held again
  for (WorkerId w : ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(2));
  d.RunStep(2, ws);
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(3));
  EXPECT_EQ(Kinds(d.Events()), (std::vector<std::string>{"resumed", "paused"}));
}

// What a restarted coordinator read from its store: the test's model and data,
// an assignment of two workers in `ranges` (epoch 1), the next worker id 2.
JobState::Resumed ResumedJob(std::vector<std::pair<uint32_t, uint32_t>> ranges) {
  JobState::Resumed r;
  r.tensors = Model();
  r.tensors.push_back(LossTensor());
  r.steps = kSteps;
  r.train_samples = kSamples;
  r.test_samples = kSamples;
  r.epoch = Epoch(1);
  r.ranges = std::move(ranges);
  r.next_worker = 2;
  return r;
}

TEST(JobStateHold,
     ARestartedCoordinatorStaysHeldAndTheReleaseRecomputesTheStepInFlightInItsRanges) {
  Driver d;
  JobState::Resumed r = ResumedJob({{0, 5}, {5, 8}});
  r.epoch = Epoch(3);
  r.hold_from = Step(0);
  d.state.Resume(r);
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_TRUE(
        d.state.OnShardRegistered(ShardId(s), "ipc:///s" + std::to_string(s), Step(-1), Step(3))
            .ok());
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(3));
  const WorkerId w = d.AddWorker();
  ASSERT_TRUE(d.Report(w).ok());
  EXPECT_TRUE(d.Plans(w).empty());
  ASSERT_TRUE(d.state.Release().ok());
  std::vector<Range> ranges;
  for (int i = 0; i < 2; ++i) {
    const StepPlan p = d.OnePlan(w, PlanKind::kTrain);
    EXPECT_EQ(p.step, Step(3));
    ranges.push_back(RangeOf(p));
    ASSERT_TRUE(d.Confirm(w, 3).ok());
  }
  EXPECT_EQ(ranges, (std::vector<Range>{{0, 5}, {5, 8}})) << "the old assignment's ranges";
  d.FinishStep(3);
  EXPECT_EQ(RangeOf(d.OnePlan(w, PlanKind::kTrain)), Range(0, kV)) << "step 4: a new assignment";
}

TEST(JobStateHold, AHoldAskedDuringAnEvaluationWaitsAfterIt) {
  JobSpec spec = Spec(/*test_limit=*/0);
  spec.eval_batch = kSamples;  // one slice
  JobStateOptions o = Options();
  o.eval_every = 2;
  Driver d(spec, o);
  const std::vector<WorkerId> ws = d.Start(1);
  for (int64_t t = 0; t < 2; ++t) {
    d.OnePlan(ws[0], PlanKind::kTrain);
    d.RunStep(t, ws);
  }
  const StepPlan e = d.OnePlan(ws[0], PlanKind::kEval);
  ASSERT_TRUE(d.state.Hold(Step(0)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kEvaluating);
  ASSERT_TRUE(d.state.OnEvalResult({ws[0], e.step, e.eval_lo, e.eval_hi, 90, 5.0}).ok());
  ASSERT_TRUE(d.Confirm(ws[0], 1).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kHeld);
  EXPECT_EQ(d.state.step(), Step(2));
  EXPECT_TRUE(d.Plans(ws[0]).empty());
  EXPECT_DOUBLE_EQ(d.state.StatusReport().test_accuracy, 0.9);
}

TEST(JobState, TheShardsShutDownOnlyOnceNoWorkerIsAlive) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (int64_t t = 0; t + 1 < kSteps; ++t) {
    for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
    d.RunStep(t, ws);
  }
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  ASSERT_TRUE(d.Confirm(ws[0], kSteps - 1).ok());  // w1's request is still on its way
  d.FinishStep(kSteps - 1);
  EXPECT_EQ(d.state.phase(), JobState::Phase::kFinalizing);

  d.state.OnResultWritten(std::string("cafe"));
  d.OnePlan(ws[0], PlanKind::kStop);
  EXPECT_TRUE(d.Plans(ws[1]).empty());
  EXPECT_FALSE(d.state.done());
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_TRUE(d.Shutdowns(s).empty()) << s;

  ASSERT_TRUE(d.Confirm(ws[1], kSteps - 1).ok());
  d.OnePlan(ws[1], PlanKind::kStop);
  for (uint32_t s = 0; s < kShards; ++s) EXPECT_EQ(d.Shutdowns(s).size(), 1u) << s;
  EXPECT_TRUE(d.state.done());
}

// ---- bad input, watchdogs, failures ---------------------------------------------------

TEST(JobState, RequestsFromUnknownOrDeadWorkersAreAborted) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  EXPECT_EQ(d.Confirm(WorkerId(42), 0).code(), StatusCode::kAborted);
  EXPECT_EQ(d.state.OnHeartbeat(WorkerId(42)).code(), StatusCode::kAborted);
  EXPECT_EQ(d.Report(WorkerId(42)).code(), StatusCode::kAborted);

  ASSERT_TRUE(d.state.OnLeave(ws[1], "bye").ok());
  EXPECT_EQ(d.Confirm(ws[1], 0).code(), StatusCode::kAborted);
  EXPECT_EQ(d.state.OnHeartbeat(ws[1]).code(), StatusCode::kAborted);
  EXPECT_TRUE(d.state.OnHeartbeat(ws[0]).ok());
}

TEST(JobState, ShardsThatDoNotAllRegisterInTimeFailTheJob) {
  Driver d;
  d.RegisterShard(0);
  d.clock.Advance(seconds(5));
  d.state.Tick();
  EXPECT_TRUE(d.state.fatal().ok()) << "at the deadline, not past it";
  d.clock.Advance(milliseconds(1));
  d.state.Tick();
  EXPECT_EQ(d.state.fatal().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(d.Shutdowns(0).size(), 1u);
  EXPECT_TRUE(d.state.done());
}

TEST(JobState, NoProgressWithinTheStepTimeoutFailsTheJobWhileAWorkerIsAlive) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());  // w1 never finishes, yet keeps heartbeating
  d.Pass(seconds(10), ws);
  EXPECT_TRUE(d.state.fatal().ok())
      << "heartbeats are not progress, but the deadline is not passed yet";
  d.Pass(seconds(1), ws);
  EXPECT_EQ(d.state.fatal().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(d.state.phase(), JobState::Phase::kTraining);
  d.OnePlan(ws[0], PlanKind::kStop);
}

TEST(JobState, AJobErrorFailsTheJobWithItsMessageAndStopsPendingWorkers) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());

  d.Events();
  d.state.OnJobError("worker host/w1: unknown model 'tiny'");
  EXPECT_FALSE(d.state.fatal().ok());
  EXPECT_NE(d.state.fatal().message().find("unknown model 'tiny'"), std::string::npos);
  const auto failed = Of<JobEvent::JobFailed>(d.Events());
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].second.code, StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed[0].second.error, "worker host/w1: unknown model 'tiny'");
  d.OnePlan(ws[0], PlanKind::kStop);
  EXPECT_TRUE(d.Plans(ws[1]).empty()) << "w1 is busy; it is stopped when it asks";
  EXPECT_FALSE(d.state.done());

  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());
  d.OnePlan(ws[1], PlanKind::kStop);
  EXPECT_TRUE(d.state.done());
  for (uint32_t s = 0; s < kShards; ++s) {
    const std::vector<Shutdown> sd = d.Shutdowns(s);
    ASSERT_EQ(sd.size(), 1u) << s;
    EXPECT_NE(sd[0].reason.find("unknown model"), std::string::npos) << sd[0].reason;
  }
}

// ---- a bad host ----------------------------------------------------------------

TEST(MachineOf, IsTheHostLessThePidTheWorkerAppends) {
  EXPECT_EQ(MachineOf("vm:19081", 19081), "vm");
  EXPECT_EQ(MachineOf("vm", 19081), "vm");
  EXPECT_EQ(MachineOf("vm:1", 19081), "vm:1") << "another number is part of the name";
  EXPECT_EQ(MachineOf(":7", 7), ":7") << "never an empty machine";
}

JobStateOptions BackoffOptions() {
  JobStateOptions o = Options();
  o.host_backoff = seconds(5);
  o.host_backoff_max = seconds(12);
  o.host_failure_window = seconds(30);
  return o;  // 2 failures before the back-off, by default
}

// A worker from `machine` (a fresh pid each call) registers; returns its id.
WorkerId FromMachine(Driver& d, const std::string& machine) {
  const uint32_t pid = 5000 + d.state.next_worker();
  return d.state.OnWorkerRegistered(machine + ":" + std::to_string(pid), pid);
}

// A worker from `machine` registers, is answered, and leaves: it cannot set itself up there.
void FailsOn(Driver& d, const std::string& machine, const std::string& reason = "no data") {
  const WorkerId w = FromMachine(d, machine);
  ASSERT_EQ(d.Replies(w).size(), 1u) << machine << " refused";
  ASSERT_TRUE(d.state.OnLeave(w, reason, /*host_fault=*/true).ok());
  d.OnePlan(w, PlanKind::kStop);
}

TEST(JobStateBadHost, TwoHostFaultsBackTheHostOffAndOnlyItsThirdRegistrationIsRefused) {
  Driver d(Spec(), BackoffOptions());
  const std::vector<WorkerId> ws = d.Start(1);
  d.OnePlan(ws[0], PlanKind::kTrain);
  d.Events();
  FailsOn(d, "bad", "cannot run on this host: data file missing");
  auto events = d.Events();
  ASSERT_EQ(Of<JobEvent::WorkerLeft>(events).size(), 1u);
  EXPECT_TRUE(Of<JobEvent::WorkerLeft>(events)[0].second.host_fault);
  EXPECT_TRUE(Of<JobEvent::HostBackedOff>(events).empty()) << "one failure is not yet a bad host";
  FailsOn(d, "bad", "cannot run on this host: data file missing");
  const auto backed = Of<JobEvent::HostBackedOff>(d.Events());
  ASSERT_EQ(backed.size(), 1u);
  EXPECT_EQ(backed[0].second.host, "bad");
  EXPECT_EQ(backed[0].second.failures, 2u);
  EXPECT_EQ(backed[0].second.backoff_s, 5.0);
  EXPECT_EQ(backed[0].second.reason, "cannot run on this host: data file missing");

  const WorkerId third = FromMachine(d, "bad");
  EXPECT_TRUE(d.Replies(third).empty());
  const std::vector<ErrorReply> errors = d.Errors(third);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code, StatusCode::kFailedPrecondition);
  for (const char* part : {"'bad'", "2 workers", "data file missing", "again in 5 s"}) {
    EXPECT_NE(errors[0].message.find(part), std::string::npos)
        << errors[0].message << " lacks " << part;
  }
  const auto refused = Of<JobEvent::WorkerRefused>(d.Events());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.worker, third);
  EXPECT_EQ(refused[0].second.cause, JobEvent::WorkerRefused::Cause::kHostBackedOff);
  EXPECT_EQ(d.Report(third).code(), StatusCode::kAborted) << "not a member";

  // Another machine joins meanwhile, and the job runs on.
  const WorkerId good = FromMachine(d, "good");
  EXPECT_EQ(d.Replies(good).size(), 1u);
  EXPECT_TRUE(d.Errors(good).empty());
  EXPECT_TRUE(d.state.fatal().ok());
  EXPECT_EQ(d.state.live_workers(), 2u);
}

TEST(JobStateLimits, RegistrationsBeyondTheLiveWorkersAMachineOrTheJobMayHaveAreRefused) {
  JobStateOptions o = Options();
  o.max_workers_per_machine = 3;
  o.max_workers = 5;
  Driver d(Spec(), o);
  d.RegisterShards();
  std::vector<WorkerId> a;
  for (int i = 0; i < 3; ++i) a.push_back(FromMachine(d, "a"));
  for (WorkerId w : a) EXPECT_EQ(d.Replies(w).size(), 1u);
  const WorkerId fourth = FromMachine(d, "a");
  const std::vector<ErrorReply> errors = d.Errors(fourth);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code, StatusCode::kResourceExhausted);
  EXPECT_NE(errors[0].message.find("--max_workers_per_host"), std::string::npos) << errors[0].message;
  auto refused = Of<JobEvent::WorkerRefused>(d.Events());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].second.cause, JobEvent::WorkerRefused::Cause::kTooManyWorkers);

  EXPECT_EQ(d.Replies(FromMachine(d, "b")).size(), 1u);
  EXPECT_EQ(d.Replies(FromMachine(d, "b")).size(), 1u);
  const WorkerId sixth = FromMachine(d, "c");
  ASSERT_EQ(d.Errors(sixth).size(), 1u) << "five live workers in all";
  EXPECT_EQ(d.state.live_workers(), 5u);

  // One of machine a's workers goes before it reported a model: a has room again.
  ASSERT_TRUE(d.state.OnLeave(a[0], "stopped", /*host_fault=*/false).ok());
  const WorkerId again = FromMachine(d, "a");
  EXPECT_EQ(d.Replies(again).size(), 1u);
  EXPECT_TRUE(d.Errors(again).empty());
  EXPECT_TRUE(d.state.fatal().ok());
}

TEST(JobStateLimits, WorkersThatLeaveBeforeReportingAModelLeaveNothingBehind) {
  Driver d(Spec(), Options());
  const std::vector<WorkerId> ws = d.Start(1);
  d.OnePlan(ws[0], PlanKind::kTrain);
  for (int i = 0; i < 5000; ++i) {
    const WorkerId w = FromMachine(d, "churn");
    ASSERT_EQ(d.Replies(w).size(), 1u);
    ASSERT_TRUE(d.state.OnLeave(w, "stopped", /*host_fault=*/false).ok());
  }
  FromMachine(d, "churn");  // forgets the last of them
  EXPECT_LE(d.state.StatusReport().workers.size(), 3u)
      << "the trainer, the newest registration and at most the one that just left";
  EXPECT_EQ(d.state.Summary().workers_seen, 5002u);
  EXPECT_TRUE(d.state.fatal().ok());
}

// The soak's coordinator grew 41 MiB in 660 k steps: it kept every step's loss.
TEST(JobStateLimits, WhatTheStateKeepsDoesNotGrowWithTheSteps) {
  JobSpec spec = Spec();
  spec.steps = 2000;
  Driver d(spec, Options());
  const std::vector<WorkerId> ws = d.Start(2);
  for (int64_t t = 0; t < 1500; ++t) {
    d.RunStep(t, ws);
    for (WorkerId w : ws) d.Plans(w);
    d.Events();
  }
  EXPECT_LE(d.state.losses_kept(), 2u);
  d.state.ReportProgress();
  const auto progress = Of<JobEvent::Progress>(d.Events());
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_FLOAT_EQ(progress[0].second.loss, 1.0f / (1499 + 3)) << "the newest step's loss";
  EXPECT_EQ(d.state.step(), Step(1500));
}

TEST(JobStateBadHost, AfterTheBackOffTheHostIsAcceptedAndEachFurtherFailureDoublesItUpToTheCap) {
  Driver d(Spec(), BackoffOptions());
  d.RegisterShards();
  FailsOn(d, "bad");
  FailsOn(d, "bad");
  d.clock.Advance(milliseconds(4999));
  const WorkerId early = FromMachine(d, "bad");
  ASSERT_EQ(d.Errors(early).size(), 1u) << "refused until the back-off ends";
  d.clock.Advance(milliseconds(1));
  d.Events();
  FailsOn(d, "bad");  // accepted again, and fails again: 10 s
  auto backed = Of<JobEvent::HostBackedOff>(d.Events());
  ASSERT_EQ(backed.size(), 1u);
  EXPECT_EQ(backed[0].second.failures, 3u);
  EXPECT_EQ(backed[0].second.backoff_s, 10.0);
  EXPECT_FALSE(d.Errors(FromMachine(d, "bad")).empty());
  d.clock.Advance(seconds(10));
  FailsOn(d, "bad");  // 20 s, capped at 12 s
  backed = Of<JobEvent::HostBackedOff>(d.Events());
  ASSERT_EQ(backed.size(), 1u);
  EXPECT_EQ(backed[0].second.backoff_s, 12.0);
  EXPECT_TRUE(d.state.fatal().ok());
}

TEST(JobStateBadHost, AStepTheHostsWorkerConfirmedResetsItsCount) {
  Driver d(Spec(), BackoffOptions());
  std::vector<WorkerId> ws = d.Start(1);
  d.OnePlan(ws[0], PlanKind::kTrain);
  FailsOn(d, "flaky");
  const WorkerId ok = FromMachine(d, "flaky");
  ASSERT_EQ(d.Replies(ok).size(), 1u);
  ASSERT_TRUE(d.Report(ok).ok());
  d.RunStep(0, ws);  // step 1 in a new epoch, with `ok`
  ws.push_back(ok);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  d.RunStep(1, ws);  // `ok` computed and confirmed its VWs
  d.Events();
  FailsOn(d, "flaky");  // the first failure again
  EXPECT_TRUE(Of<JobEvent::HostBackedOff>(d.Events()).empty());
  const WorkerId next = FromMachine(d, "flaky");
  EXPECT_EQ(d.Replies(next).size(), 1u);
  EXPECT_TRUE(d.Errors(next).empty());
}

TEST(JobStateBadHost, FailuresFurtherApartThanTheWindowCountAfresh) {
  Driver d(Spec(), BackoffOptions());
  d.RegisterShards();
  FailsOn(d, "bad");
  d.clock.Advance(seconds(31));
  FailsOn(d, "bad");
  EXPECT_TRUE(Of<JobEvent::HostBackedOff>(d.Events()).empty());
  FailsOn(d, "bad");
  EXPECT_EQ(Of<JobEvent::HostBackedOff>(d.Events()).size(), 1u);
}

TEST(JobStateBadHost, APlainLeaveNeverCounts) {
  Driver d(Spec(), BackoffOptions());
  d.RegisterShards();
  for (int i = 0; i < 4; ++i) {
    const WorkerId w = FromMachine(d, "busy");
    ASSERT_EQ(d.Replies(w).size(), 1u) << "registration " << i;
    ASSERT_TRUE(d.state.OnLeave(w, "SIGTERM", /*host_fault=*/false).ok());
  }
  const auto events = d.Events();
  EXPECT_TRUE(Of<JobEvent::HostBackedOff>(events).empty());
  EXPECT_TRUE(Of<JobEvent::WorkerRefused>(events).empty());
}

TEST(JobStateBadHost, ZeroFailuresBeforeBackOffNeverBacksOff) {
  JobStateOptions o = BackoffOptions();
  o.host_failures_before_backoff = 0;
  Driver d(Spec(), o);
  d.RegisterShards();
  for (int i = 0; i < 4; ++i) FailsOn(d, "bad");
  EXPECT_TRUE(Of<JobEvent::HostBackedOff>(d.Events()).empty());
}

TEST(JobStateBadHost, AWorkerErrorBeforeAnyModelWasAcceptedFailsTheJob) {
  Driver d(Spec(), BackoffOptions());
  d.RegisterShards();
  const WorkerId w = d.AddWorker();
  d.state.OnWorkerError(w, InvalidArgument("worker host/w0: unknown model 'tiny'"));
  EXPECT_EQ(d.state.fatal().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.state.fatal().message().find("unknown model 'tiny'"), std::string::npos);
  EXPECT_EQ(Of<JobEvent::JobFailed>(d.Events()).size(), 1u);
}

TEST(JobStateBadHost, AWorkerErrorOnceAModelWasAcceptedIsAHostFaultLeave) {
  Driver d(Spec(), BackoffOptions());
  const std::vector<WorkerId> ws = d.Start(1);
  d.OnePlan(ws[0], PlanKind::kTrain);
  d.Events();
  for (int i = 0; i < 2; ++i) {
    const WorkerId w = FromMachine(d, "odd");
    ASSERT_EQ(d.Replies(w).size(), 1u);
    d.state.OnWorkerError(w, InvalidArgument("worker odd/w: unknown model 'tiny'"));
    d.OnePlan(w, PlanKind::kStop);
  }
  const auto events = d.Events();
  EXPECT_TRUE(d.state.fatal().ok()) << d.state.fatal().ToString();
  const auto left = Of<JobEvent::WorkerLeft>(events);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_TRUE(left[1].second.host_fault);
  EXPECT_EQ(left[1].second.reason, "worker odd/w: unknown model 'tiny'");
  EXPECT_EQ(Of<JobEvent::HostBackedOff>(events).size(), 1u);
  EXPECT_FALSE(d.Errors(FromMachine(d, "odd")).empty());
  // An error from a worker that is not a member changes nothing.
  d.state.OnWorkerError(WorkerId(99), Internal("confused"));
  d.state.OnWorkerError(ws[0], Internal("late"));  // a member: it leaves, the job goes on
  EXPECT_TRUE(d.state.fatal().ok());
  EXPECT_EQ(d.state.live_workers(), 0u);
}

TEST(JobState, AWorkerWhoseModelDiffersFromTheFirstIsRefused) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(1);
  d.OnePlan(ws[0], PlanKind::kTrain);
  const WorkerId w1 = d.AddWorker();
  EXPECT_EQ(d.Report(w1, Model(11)).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(d.Report(w1, {}).code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(d.Plans(w1).empty());

  d.RunStep(0, ws);
  EXPECT_EQ(RangeOf(d.OnePlan(ws[0], PlanKind::kTrain)), Range(0, kV))
      << "w1 is not a ready member";
  EXPECT_TRUE(d.Plans(w1).empty());
}

TEST(JobState, ALateOrDuplicateStepDoneDoesNotMoveTheStepBack) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);
  d.RunStep(0, ws);
  ASSERT_EQ(d.state.step(), Step(1));
  for (WorkerId w : ws) d.OnePlan(w, PlanKind::kTrain);

  d.FinishStep(0);  // a repeat of both reports
  EXPECT_EQ(d.state.step(), Step(1));
  for (WorkerId w : ws) EXPECT_TRUE(d.Plans(w).empty());

  for (WorkerId w : ws) ASSERT_TRUE(d.Confirm(w, 1).ok());
  d.ShardDone(0, 1);
  d.ShardDone(0, 0);  // late, after the newer one
  EXPECT_EQ(d.state.step(), Step(1));
  d.ShardDone(1, 1);
  EXPECT_EQ(d.state.step(), Step(2)) << "shard 0's report of step 1 was forgotten";
  for (WorkerId w : ws) EXPECT_EQ(d.OnePlan(w, PlanKind::kTrain).step, Step(2));
  EXPECT_FLOAT_EQ(d.state.Summary().final_loss, 1.0f / 4.0f);
}

TEST(JobState, AnAbandonedPlanIsNotConfirmedAndIsHandedOutAgain) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  const StepPlan a = d.OnePlan(ws[0], PlanKind::kTrain);
  d.OnePlan(ws[1], PlanKind::kTrain);
  ASSERT_TRUE(d.Confirm(ws[1], 0).ok());

  // w0 gave its plan up (a shard refused it): the range is still owed for step 0.
  StepRequest gave_up;
  gave_up.worker = ws[0];
  gave_up.done_step = Step(-1);
  gave_up.abandoned = true;
  ASSERT_TRUE(d.state.OnStepRequest(gave_up).ok());
  const StepPlan again = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(again.step, Step(0));
  EXPECT_EQ(RangeOf(again), RangeOf(a));

  // Confirming it clears the step; a plain confirmation would have cleared it the first time.
  ASSERT_TRUE(d.Confirm(ws[0], 0).ok());
  EXPECT_TRUE(d.Plans(ws[0]).empty());
  EXPECT_TRUE(d.Plans(ws[1]).empty());
}

// ---- durable state ---------------------------------------------------------------

// Shards report durable steps that drift apart (checkpoints still in their
// writers). Each must keep the newest step all of them hold until all hold a
// newer one, or a restart could find no common step to roll back to.
TEST(JobStateDurable, ShardsRetainTheNewestStepEveryShardHoldsAndARestartRollsBackToIt) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(1);
  EXPECT_TRUE(d.Confirm(ws[0], 0).ok());
  d.ShardDone(0, 0, /*durable=*/0);
  d.ShardDone(1, 0, /*durable=*/-1);
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_TRUE(d.Retains(s).empty()) << "shard 1 holds nothing yet";
  EXPECT_TRUE(d.Confirm(ws[0], 1).ok());
  d.ShardDone(0, 1, 1);
  d.ShardDone(1, 1, 0);
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_EQ(d.Retains(s), std::vector<Step>{Step(0)}) << "shard " << s;
  EXPECT_TRUE(d.Confirm(ws[0], 2).ok());
  d.ShardDone(0, 2, 2);
  d.ShardDone(1, 2, 0);  // shard 1's disk lags
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_TRUE(d.Retains(s).empty()) << "the floor did not move";
  ASSERT_EQ(d.state.step(), Step(3));

  const auto durable = Of<JobEvent::CheckpointDurable>(d.Events());
  ASSERT_EQ(durable.size(), 4u);  // shard 0 at steps 0, 1, 2; shard 1 at step 0
  EXPECT_EQ(durable[0].second.shard, ShardId(0));
  EXPECT_EQ(durable[0].first, Step(0));

  // Shard 1 restarts from step 0, the one shard 0 was told to keep: both roll back there.
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(1), "ipc:///tmp/shard1", Step(0), Step(0)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kRollingBack);
  const std::vector<JobEvent> restart = d.Events();
  EXPECT_EQ(Kinds(restart), (std::vector<std::string>{"shard_registered", "rolling_back"}));
  ASSERT_EQ(restart.size(), 2u);
  EXPECT_TRUE(restart[0].As<JobEvent::ShardRegistered>()->restarted);
  EXPECT_EQ(restart[0].As<JobEvent::ShardRegistered>()->shard, ShardId(1));
  EXPECT_EQ(restart[1].step, Step(0)) << "the step the job goes back to";
  EXPECT_EQ(restart[1].As<JobEvent::RollingBack>()->shard, ShardId(1));
  EXPECT_EQ(restart[1].As<JobEvent::RollingBack>()->shard_checkpoint, Step(0));
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_EQ(d.Rollbacks(s), std::vector<Step>{Step(0)}) << "shard " << s;
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_TRUE(d.state
                    .OnRollbackDone(
                        RollbackDone{ShardId(s), Step(0), Step(0), Step(0), StatusCode::kOk, ""})
                    .ok());
  }
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.step(), Step(0));
  const std::vector<JobEvent> replay = d.Events();
  EXPECT_EQ(Kinds(replay), std::vector<std::string>{"rolled_back"});
  EXPECT_EQ(replay.back().step, Step(0));
  d.Retains(0);
  d.Retains(1);
  // Replaying, the floor follows the slower shard again.
  EXPECT_TRUE(d.Confirm(ws[0], 0).ok());
  d.ShardDone(0, 0, 0);
  d.ShardDone(1, 0, 0);
  EXPECT_TRUE(d.Confirm(ws[0], 1).ok());
  d.ShardDone(0, 1, 1);
  d.ShardDone(1, 1, 1);
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_EQ(d.Retains(s), std::vector<Step>{Step(1)}) << "shard " << s;
}

// Each rollback starts a timeline (docs/design.md, "Timelines"): the Rollback
// names it, and every plan after it carries it, so that shards can refuse the
// pulls of the plans before it at once.
TEST(JobStateDurable, ARollbackStartsATimelineThatTheShardsAndThePlansAfterItCarry) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(1);
  EXPECT_EQ(d.state.timeline(), 1u);
  for (uint32_t s = 0; s < kShards; ++s) {
    for (const ShardConfig& c : d.Configs(s)) EXPECT_EQ(c.timeline, 1u) << "shard " << s;
  }
  EXPECT_TRUE(d.Confirm(ws[0], 0).ok());
  const StepPlan before = d.OnePlan(ws[0], PlanKind::kTrain);
  EXPECT_EQ(before.timeline, 1u);
  d.ShardDone(0, 0, 0);
  d.ShardDone(1, 0, 0);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(1), "ipc:///tmp/shard1", Step(0), Step(0)).ok());
  EXPECT_EQ(d.state.timeline(), 2u);
  for (uint32_t s = 0; s < kShards; ++s) {
    const std::vector<Rollback> rollbacks = d.RollbackMessages(s);
    ASSERT_EQ(rollbacks.size(), 1u) << "shard " << s;
    EXPECT_EQ(rollbacks[0].step, Step(0));
    EXPECT_EQ(rollbacks[0].timeline, 2u) << "shard " << s;
  }
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_TRUE(d.state
                    .OnRollbackDone(
                        RollbackDone{ShardId(s), Step(0), Step(0), Step(0), StatusCode::kOk, ""})
                    .ok());
  }
  EXPECT_TRUE(d.Confirm(ws[0], -1).ok());
  const std::vector<StepPlan> after = d.Plans(ws[0]);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.back().kind, PlanKind::kTrain);
  EXPECT_EQ(after.back().step, Step(0));
  EXPECT_EQ(after.back().timeline, 2u);
}

// A restarted coordinator whose shards are more than a step apart (one
// restarted from an older checkpoint meanwhile) rolls back before any worker
// re-registered: the step it starts has no assignment yet, and the first ready
// worker must get it (the job used to wait, with no work planned, until
// --step_timeout_s failed it).
TEST(JobStateDurable, ARollbackOnResumeBeforeAnyWorkerIsBackPlansTheFirstReadyWorker) {
  Driver d;
  JobState::Resumed r = ResumedJob({{0, 4}, {4, 8}});
  r.timeline = 5;
  d.state.Resume(r);
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(0), "ipc:///s0", Step(4), Step(6)).ok());
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(1), "ipc:///s1", Step(4), Step(4)).ok());
  ASSERT_EQ(d.state.phase(), JobState::Phase::kRollingBack);
  EXPECT_EQ(d.state.timeline(), 6u) << "the stored timeline, and one more for the rollback";
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_EQ(d.Rollbacks(s), std::vector<Step>{Step(4)});
    ASSERT_TRUE(d.state
                    .OnRollbackDone(
                        RollbackDone{ShardId(s), Step(4), Step(4), Step(4), StatusCode::kOk, ""})
                    .ok());
  }
  EXPECT_EQ(d.state.step(), Step(4));
  const WorkerId w = d.AddWorker();
  ASSERT_TRUE(d.Report(w).ok());
  const StepPlan p = d.OnePlan(w, PlanKind::kTrain);
  EXPECT_EQ(p.step, Step(4));
  EXPECT_EQ(RangeOf(p), Range(0, kV));
  EXPECT_EQ(p.timeline, 6u);
}

// A shard that comes back without state before every shard holds a
// checkpoint leaves no step to roll back to: the job starts over from the
// initial values (a worker pushes them again) and replays from step 0.
TEST(JobStateDurable, AShardRestartedBeforeAnyCommonCheckpointStartsTheJobOver) {
  Driver d;
  const std::vector<WorkerId> ws = d.Start(2);
  d.RunStep(0, ws);
  EXPECT_TRUE(d.Confirm(ws[0], 1).ok());
  d.ShardDone(0, 1, /*durable=*/1);  // shard 0 holds a checkpoint, shard 1 none
  ASSERT_EQ(d.state.step(), Step(1));
  d.Plans(ws[0]);
  d.Plans(ws[1]);

  d.Events();
  ASSERT_TRUE(d.state.OnShardRegistered(ShardId(1), "ipc:///tmp/shard1", Step(-1), Step(-1)).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kRollingBack);
  for (uint32_t s = 0; s < kShards; ++s)
    EXPECT_EQ(d.Rollbacks(s), std::vector<Step>{Step(-1)}) << "shard " << s;
  const auto over = Of<JobEvent::StartingOver>(d.Events());
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].first, Step(-1));
  EXPECT_EQ(over[0].second.shard, ShardId(1));
  EXPECT_FALSE(over[0].second.shard_had_state);
  for (uint32_t s = 0; s < kShards; ++s) {
    ASSERT_TRUE(d.state
                    .OnRollbackDone(
                        RollbackDone{ShardId(s), Step(-1), Step(-1), Step(-1), StatusCode::kOk, ""})
                    .ok());
  }
  EXPECT_EQ(d.state.Summary().steps, 0);
  // w0 waits for its next plan: it initializes the parameters again.
  EXPECT_EQ(d.state.phase(), JobState::Phase::kInitializing);
  d.OnePlan(ws[0], PlanKind::kInit);
  d.FinishStep(-1);
  EXPECT_TRUE(d.Confirm(ws[0], -1).ok());
  EXPECT_EQ(d.state.phase(), JobState::Phase::kTraining);
  EXPECT_EQ(d.state.step(), Step(0));
  EXPECT_EQ(d.OnePlan(ws[0], PlanKind::kTrain).step, Step(0));
  // w1's plan for step 1 fails at the shards; it gives it up and gets its range of step 0.
  StepRequest gave_up;
  gave_up.worker = ws[1];
  gave_up.done_step = Step(0);
  gave_up.abandoned = true;
  ASSERT_TRUE(d.state.OnStepRequest(gave_up).ok());
  EXPECT_EQ(d.OnePlan(ws[1], PlanKind::kTrain).step, Step(0));
}

}  // namespace
}  // namespace eps
