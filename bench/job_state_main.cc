// jobstate_bench: the coordinator's CPU per training step as the job grows
// (issue 35): its state machine (elastic/job_state.h), alone in this process
// on a fake clock, driven through whole steps of W workers sharing V VWs over
// --shards shards. Per step: each worker that holds VWs confirms them with a
// StepRequest reporting a measured speed (+-5 % noise, so the planner's
// ShouldReplan and ReplanGate run as in a job), every worker sends one
// heartbeat, the shards report StepDone, one Tick, and the messages to send are
// drained (TakeOutgoing). Then the step's events are drained and each is
// formatted as its events.jsonl line (EventJson), as the coordinator does.
//
// Timed: CPU time of this thread (CLOCK_THREAD_CPUTIME_ID) per step, "state"
// (the calls above) and "events" (TakeEvents + EventJson) apart; for each
// configuration the median of --reps rounds of --steps steps, after --warmup
// steps. Not timed: the wire (decoding the requests, encoding the plans: the
// codec), the sockets, the event file's write. Configurations run in turn
// within each round, so host noise hits all alike.
//
// Prints a table with the ratio of each configuration's total against the
// smallest one's (the first of --workers and of --vws) in the same run, per
// step and per worker and step (a step has one request per worker: what
// grows faster than the workers is what the coordinator must not do) and, for
// scripts/bench.sh, one JSON object per configuration on a line of its own
// ({"kind":"jobstate",...}: the only stdout lines that start with '{'). Never
// fails on timing.
#include <gflags/gflags.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "elastic/job_event.h"
#include "elastic/job_state.h"
#include "schema/messages.h"

DEFINE_string(workers, "8,64,256", "Worker counts, comma-separated (the first is the baseline's)");
DEFINE_string(vws, "8,512,4096", "V (virtual workers), comma-separated (the first is the baseline's)");
DEFINE_uint32(shards, 2, "Parameter shards reporting each step");
DEFINE_int32(steps, 200, "Timed steps per round and configuration");
DEFINE_int32(warmup, 20, "Untimed steps before the timed ones");
DEFINE_int32(reps, 3, "Rounds; the medians are reported");

namespace eps {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double Median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

StatusOr<std::vector<uint32_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<uint32_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const unsigned long x = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x == 0 || x > (1u << 20))
      return InvalidArgument("--" + flag + ": '" + item + "' is not a count in [1, 2^20]");
    out.push_back(uint32_t(x));
  }
  if (out.empty()) return InvalidArgument("--" + flag + " is empty");
  return out;
}

struct Timing {
  double state_s = 0, events_s = 0;  // CPU seconds over the timed steps
  size_t events = 0, messages = 0;   // per step, the last step's
};

// One job of `workers` workers and `vws` VWs: set up, `warmup` steps, then
// `steps` timed ones.
class Job {
 public:
  Job(uint32_t workers, uint32_t vws, int64_t steps) : state_(Spec(vws, steps), Options(), &clock_) {
    for (uint32_t s = 0; s < FLAGS_shards; ++s)
      (void)state_.OnShardRegistered(ShardId(s), "tcp://127.0.0.1:" + std::to_string(20000 + s));
    for (uint32_t i = 0; i < workers; ++i)
      workers_.push_back(state_.OnWorkerRegistered("host" + std::to_string(i % 16), 1000 + i));
    for (WorkerId w : workers_) {
      StepRequest r;
      r.worker = w;
      r.done_step = Step(-1);
      r.tensors = {{"w", TensorKind::kParameter, DType::kFloat32, {1000}}};
      r.train_samples = int64_t(vws) * 32 * (steps + 10);
      (void)state_.OnStepRequest(r);
    }
    Drain();
    ShardsDone(-1);
    StepRequest r;
    r.worker = workers_[0];
    r.done_step = Step(-1);
    (void)state_.OnStepRequest(r);  // the initializer's confirmation: step 0 starts
    Drain();
    speed_.resize(workers, 0.001);
  }

  // Runs step state_.step(); adds its CPU time to `timing`.
  Status RunStep(Timing* timing) {
    const int64_t t = state_.step().value();
    const double t0 = ThreadCpuSeconds();
    for (size_t i = 0; i < workers_.size(); ++i) {
      (void)state_.OnHeartbeat(workers_[i]);
      if (!planned_[workers_[i]]) continue;
      planned_[workers_[i]] = false;
      StepRequest r;
      r.worker = workers_[i];
      r.done_step = Step(t);
      r.seconds_per_vw = speed_[i] * noise_(rng_);
      if (Status st = state_.OnStepRequest(r); !st.ok()) return st;
    }
    ShardsDone(t);
    clock_.Advance(std::chrono::milliseconds(10));
    state_.Tick();
    const size_t messages = Drain();
    const double t1 = ThreadCpuSeconds();
    size_t bytes = 0;
    const std::vector<JobEvent> events = state_.TakeEvents();
    for (const JobEvent& e : events) bytes += EventJson(e, 0).size();
    const double t2 = ThreadCpuSeconds();
    if (bytes == 0) return Internal("no event in a step");
    if (state_.step().value() != t + 1)
      return Internal("step " + std::to_string(t) + " did not complete");
    timing->state_s += t1 - t0;
    timing->events_s += t2 - t1;
    timing->events = events.size();
    timing->messages = messages;
    return OkStatus();
  }

 private:
  static JobSpec Spec(uint32_t vws, int64_t steps) {
    JobSpec s;
    s.job_id = "jobstate_bench";
    s.model = "tiny";
    s.virtual_workers = vws;
    s.batch_per_vw = 32;
    s.steps = steps + 10;
    s.num_shards = FLAGS_shards;
    s.test_limit = -1;
    return s;
  }
  static JobStateOptions Options() {
    JobStateOptions o;
    o.max_workers_per_machine = 0;
    o.max_workers = 0;
    o.heartbeat_timeout = std::chrono::hours(1);
    return o;
  }
  void ShardsDone(int64_t t) {
    for (uint32_t s = 0; s < FLAGS_shards; ++s) {
      StepDone d;
      d.shard = ShardId(s);
      d.step = Step(t);
      d.has_loss = s == 0;
      d.loss = 1.0f;
      (void)state_.OnStepDone(ShardId(s), d);
    }
  }
  // Takes the outgoing messages; notes which workers got a train plan.
  size_t Drain() {
    const std::vector<Outgoing> out = state_.TakeOutgoing();
    for (const Outgoing& o : out) {
      if (o.to != Outgoing::To::kWorker) continue;
      if (const auto* p = std::get_if<StepPlan>(&o.body); p && p->kind == PlanKind::kTrain)
        planned_[WorkerId(o.id)] = true;
    }
    return out.size();
  }

  FakeClock clock_;  // before state_, which reads it on construction
  JobState state_;
  std::vector<WorkerId> workers_;
  std::map<WorkerId, bool> planned_;
  std::vector<double> speed_;
  std::mt19937_64 rng_{42};
  std::uniform_real_distribution<double> noise_{0.95, 1.05};
};

Status Run() {
  EPS_ASSIGN_OR_RETURN(std::vector<uint32_t> workers, ParseList("workers", FLAGS_workers));
  EPS_ASSIGN_OR_RETURN(std::vector<uint32_t> vws, ParseList("vws", FLAGS_vws));
  if (FLAGS_steps < 1 || FLAGS_warmup < 0 || FLAGS_reps < 1 || FLAGS_shards < 1)
    return InvalidArgument("--steps, --reps and --shards must be >= 1, --warmup >= 0");
  struct Config {
    uint32_t workers, vws;
    std::vector<double> state_us, events_us;
    Timing last;
  };
  std::vector<Config> configs;
  for (uint32_t w : workers) {
    for (uint32_t v : vws) configs.push_back({w, v, {}, {}, {}});
  }
  for (int rep = 0; rep < FLAGS_reps; ++rep) {
    for (Config& c : configs) {
      Job job(c.workers, c.vws, FLAGS_warmup + FLAGS_steps);
      Timing warm, timing;
      for (int s = 0; s < FLAGS_warmup; ++s) EPS_RETURN_IF_ERROR(job.RunStep(&warm));
      for (int s = 0; s < FLAGS_steps; ++s) EPS_RETURN_IF_ERROR(job.RunStep(&timing));
      c.state_us.push_back(timing.state_s / FLAGS_steps * 1e6);
      c.events_us.push_back(timing.events_s / FLAGS_steps * 1e6);
      c.last = timing;
    }
  }
  const double base = Median(configs[0].state_us) + Median(configs[0].events_us);
  std::printf("coordinator JobState CPU per step (median of %d rounds of %d steps, %u shards; "
              "ratio: total vs %u workers x V %u)\n",
              FLAGS_reps, FLAGS_steps, FLAGS_shards, configs[0].workers, configs[0].vws);
  std::printf("%8s | %6s | %10s | %10s | %10s | %7s | %13s | %7s | %8s\n", "workers", "V",
              "state us", "events us", "total us", "ratio", "us per worker", "ratio", "events");
  const double base_per_worker = base / configs[0].workers;
  for (const Config& c : configs) {
    const double state = Median(c.state_us), events = Median(c.events_us);
    const double total = state + events, per_worker = total / c.workers;
    std::printf("%8u | %6u | %10.1f | %10.1f | %10.1f | %7.2f | %13.2f | %7.2f | %8zu\n", c.workers,
                c.vws, state, events, total, base > 0 ? total / base : 0, per_worker,
                base_per_worker > 0 ? per_worker / base_per_worker : 0, c.last.events);
  }
  for (const Config& c : configs) {
    const double state = Median(c.state_us), events = Median(c.events_us);
    std::printf(
        "{\"kind\":\"jobstate\",\"workers\":%u,\"vws\":%u,\"shards\":%u,\"steps\":%d,"
        "\"reps\":%d,\"state_us\":%.3f,\"events_us\":%.3f,\"total_us\":%.3f,\"ratio\":%.4f,"
        "\"events\":%zu,\"messages\":%zu}\n",
        c.workers, c.vws, FLAGS_shards, FLAGS_steps, FLAGS_reps, state, events, state + events,
        base > 0 ? (state + events) / base : 0.0, c.last.events, c.last.messages);
  }
  return OkStatus();
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "jobstate_bench [--workers=8,64,256] [--vws=8,512,4096] [--steps=200] [--reps=3]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const eps::Status st = eps::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "jobstate_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
