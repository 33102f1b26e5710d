// pool_scheduler: the inter-job scheduler, its own process. It shares a pool of
// workers (started with `launcher/attach.sh --scheduler ENDPOINT`) among the
// running jobs of a jobs file, round by round, and logs every decision with
// its reason. It starts no processes: a launcher, Slurm or Kubernetes
// provides them. Policy: elastic/pool_scheduler.h and elastic/scheduler.h.
//
//   pool_scheduler --jobs=FILE [--bind=tcp://0.0.0.0:PORT] [--addr_file=F]
//   [--token_file=POOL_TOKEN]
//
// It exits 0 once every job of the file has run and ended, or on SIGTERM.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "common/rejections.h"
#include "elastic/pool_scheduler.h"
#include "schema/allowed_keys_watch.h"
#include "schema/channel.h"
#include "schema/curve.h"
#include "schema/zap_handler.h"

DEFINE_string(
    jobs, "",
    "Jobs file: one 'ID COORDINATOR_ENDPOINT TOKEN_FILE [SERVER_KEY_FILE]' per line ('-': "
    "no token; SERVER_KEY_FILE: the job's servers' CURVE public key)");
DEFINE_string(
    curve_secret_key, "",
    "CURVE (docs/security.md): the scheduler's secret key file (elasticps keygen): it "
    "serves the pool with it and connects to CURVE coordinators with it. Empty: plain TCP");
DEFINE_string(
    allowed_keys, "",
    "With --curve_secret_key: the pool workers' public keys, a file (one Z85 key a line) or "
    "a folder of *.pub; re-read at every handshake");
DEFINE_string(bind, "tcp://127.0.0.1:0", "Endpoint the pool workers reach");
DEFINE_string(addr_file, "", "Write the bound endpoint to this file once serving");
DEFINE_string(token_file, "", "The pool's token, which pool workers must present (empty: none)");
DEFINE_string(events_file, "",
              "Append every decision to this file as one JSON object per line (docs/events.md): "
              "{\"event\": \"decision\", \"t\", \"worker\", \"host\", \"from\", \"to\", "
              "\"reason\"}; from and to are job ids, empty for idle. Empty: none");
DEFINE_int32(round_ms, 2000, "Interval between two scheduling rounds");
DEFINE_int32(worker_timeout_ms, 5000, "A pool worker silent this long has left the pool");
DEFINE_int32(info_timeout_ms, 1000, "Longest wait for a coordinator's answer in a round");
DEFINE_double(move_threshold, 0.05,
              "Move busy workers only if the weighted throughput rises by more than this fraction");

namespace {
volatile bool g_stop = false;
void OnSignal(int) { g_stop = true; }
}  // namespace

namespace eps {
namespace {

using std::chrono::milliseconds;

class SchedulerProcess {
 public:
  SchedulerProcess(PoolScheduler scheduler, std::unique_ptr<Channel> pool, zmq::context_t* context,
                   std::string token, std::unique_ptr<JsonLinesFile> events, CurveKeyPair keys,
                   std::optional<AllowedKeysWatch> allowed, const Clock* clock)
      : scheduler_(std::move(scheduler)),
        pool_(std::move(pool)),
        context_(context),
        token_(std::move(token)),
        events_(std::move(events)),
        keys_(std::move(keys)),
        allowed_(std::move(allowed)),
        rejections_(RejectionOptions(), clock) {}

  Status Run() {
    auto next_round = std::chrono::steady_clock::now();
    while (!g_stop) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_round) {
        EPS_RETURN_IF_ERROR(RoundTrip());
        if (scheduler_.AllJobsOver()) {
          LOG(INFO) << "every job has ended";
          return OkStatus();
        }
        // From the round's end: a round that waited on silent coordinators leaves time for the
        // pool.
        next_round = std::chrono::steady_clock::now() + milliseconds(FLAGS_round_ms);
        continue;
      }
      auto in = pool_->Receive(std::chrono::duration_cast<milliseconds>(next_round - now));
      if (!in.ok()) {
        if (in.status().code() == StatusCode::kDeadlineExceeded ||
            in.status().code() == StatusCode::kAborted)
          continue;
        return in.status();
      }
      OnPoolMessage(*in);
      if (auto summary = rejections_.TakeSummary()) LOG(WARNING) << *summary;
    }
    return OkStatus();
  }

 private:
  void Reply(const std::string& peer, Body body) {
    Status st = pool_->SendTo(peer, Envelope{token_, std::move(body)});
    if (!st.ok()) LOG(WARNING) << "reply lost: " << st.ToString();
  }

  // Checked as the job's servers check theirs (AdmitIncoming: a revoked key,
  // an undecodable envelope, a wrong token: the pool channel's Options::token), counted, and logged at a bounded rate.
  void OnPoolMessage(Channel::Incoming& in) {
    const Status admitted =
        AdmitIncoming(in, allowed_ ? &*allowed_ : nullptr, &rejections_, " from the pool");
    if (!admitted.ok()) {
      Reply(in.peer, ErrorReply{admitted.code(), admitted.message()});
      return;
    }
    if (auto* r = std::get_if<PoolRequest>(&in.envelope->body)) {
      Reply(in.peer, scheduler_.OnRequest(*r));
      return;
    }
    const std::string kind = BodyName(in.envelope->body);
    if (rejections_.Record(in.peer, RejectReason::kUnserved))
      LOG(WARNING) << "refused a " << kind << " from the pool: not served here";
    Reply(in.peer,
          ErrorReply{StatusCode::kInvalidArgument, "the scheduler does not serve " + kind});
  }

  // Asks every coordinator, decides, logs.
  Status RoundTrip() {
    for (const PoolJobConfig& job : scheduler_.jobs()) {
      if (scheduler_.JobOver(job.id)) continue;
      auto& channel = coordinators_[job.id];
      if (channel == nullptr) {
        Channel::Options co;
        if (!job.server_key.empty()) {  // a CURVE job: this scheduler's key must be allowed there
          if (keys_.secret_key.empty())
            return InvalidArgument("job " + job.id + " uses CURVE: give --curve_secret_key");
          co.curve.keys = keys_;
          co.curve.server_key = job.server_key;
        }
        EPS_ASSIGN_OR_RETURN(channel, Channel::Connect(context_, job.coordinator, co));
      }
      auto reply =
          Call(channel.get(), Envelope{job.token, JobInfo{}}, milliseconds(FLAGS_info_timeout_ms));
      auto* info = reply.ok() ? std::get_if<JobInfoReply>(&reply->body) : nullptr;
      if (info != nullptr) {
        scheduler_.OnJobInfo(job.id, *info);
        continue;
      }
      if (!reply.ok() && reply.status().code() != StatusCode::kDeadlineExceeded) {
        LOG_EVERY_N(WARNING, 10) << "job " << job.id << ": " << reply.status().ToString();
      }
      scheduler_.OnJobSilent(job.id);
      channel.reset();  // a late answer must not be taken for the next round's
    }
    auto decisions = scheduler_.Round();
    if (!decisions.ok()) {
      LOG(ERROR) << "round failed: " << decisions.status().ToString();
      return OkStatus();
    }
    if (scheduler_.members() != last_members_) {
      last_members_ = scheduler_.members();
      AppendEvent({{"event", "pool"}, {"members", last_members_}});
    }
    for (const SchedulerDecision& d : *decisions) {
      std::printf("decision: %s from %s to %s: %s\n", scheduler_.HostOf(d.worker).c_str(),
                  d.from_job.empty() ? "idle" : d.from_job.c_str(),
                  d.to_job.empty() ? "idle" : d.to_job.c_str(), d.reason.c_str());
      AppendEvent({{"event", "decision"},
                   {"worker", d.worker.value()},
                   {"host", scheduler_.HostOf(d.worker)},
                   {"from", d.from_job},
                   {"to", d.to_job},
                   {"reason", d.reason}});
    }
    const std::string allocation = scheduler_.AllocationString();
    if (allocation != last_allocation_) std::printf("allocation: %s\n", allocation.c_str());
    last_allocation_ = allocation;
    std::fflush(stdout);
    return OkStatus();
  }

  // One line of --events_file, stamped "t" (seconds since the epoch).
  void AppendEvent(nlohmann::json line) {
    if (events_ == nullptr) return;
    line["t"] = WallSeconds();
    const Status st = events_->Append(line.dump());
    if (!st.ok()) LOG(ERROR) << st.ToString();  // once; scheduling goes on
  }

  PoolScheduler scheduler_;
  std::unique_ptr<Channel> pool_;
  zmq::context_t* const context_;
  const std::string token_;
  const std::unique_ptr<JsonLinesFile> events_;  // or null
  const CurveKeyPair keys_;                      // CURVE off: empty
  std::optional<AllowedKeysWatch> allowed_;      // with CURVE: revocation of open connections
  Rejections rejections_;
  std::map<std::string, std::unique_ptr<Channel>> coordinators_;
  std::string last_allocation_;
  size_t last_members_ = 0;
};

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "pool_scheduler --jobs=FILE [--bind=ENDPOINT] [--addr_file=FILE] [--token_file=FILE]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_jobs.empty()) {
    LOG(ERROR) << "--jobs is required";
    return 2;
  }
  if (FLAGS_round_ms < 10 || FLAGS_worker_timeout_ms < FLAGS_round_ms ||
      FLAGS_info_timeout_ms < 1 || !(FLAGS_move_threshold >= 0)) {
    LOG(ERROR) << "--round_ms must be >= 10, --worker_timeout_ms >= --round_ms, --info_timeout_ms "
                  ">= 1 and "
                  "--move_threshold >= 0";
    return 2;
  }
  auto jobs = eps::ReadJobsFile(FLAGS_jobs);
  auto token = eps::ReadTokenFile(FLAGS_token_file);
  if (!jobs.ok() || !token.ok()) {
    LOG(ERROR) << (jobs.ok() ? token.status() : jobs.status()).ToString();
    return 2;
  }
  eps::PoolSchedulerOptions options;
  options.worker_timeout = std::chrono::milliseconds(FLAGS_worker_timeout_ms);
  options.policy.move_threshold = FLAGS_move_threshold;
  eps::SteadyClock clock;
  auto scheduler = eps::PoolScheduler::Create(std::move(jobs).value(), options, &clock);
  if (!scheduler.ok()) {
    LOG(ERROR) << scheduler.status().ToString();
    return 2;
  }
  auto curve = eps::LoadCurveOptions(FLAGS_curve_secret_key, "");
  if (!curve.ok()) {
    LOG(ERROR) << curve.status().ToString();
    return 2;
  }
  zmq::context_t context(1);
  // Before the first Bind, destroyed before the context.
  auto zap = eps::ZapHandler::StartForServer(&context, *curve, FLAGS_allowed_keys);
  if (!zap.ok()) {
    LOG(ERROR) << zap.status().ToString();
    return 2;
  }
  eps::Channel::Options pool_options;
  pool_options.curve = *curve;
  pool_options.token = *token;
  auto pool = eps::Channel::Bind(&context, FLAGS_bind, pool_options);
  if (!pool.ok()) {
    LOG(ERROR) << pool.status().ToString();
    return 2;
  }
  LOG(INFO) << "pool scheduler for " << scheduler->jobs().size() << " jobs on "
            << (*pool)->endpoint();
  if (!FLAGS_addr_file.empty()) {
    eps::Status st = eps::WriteFileAtomically(FLAGS_addr_file, (*pool)->endpoint() + "\n");
    if (!st.ok()) {
      LOG(ERROR) << st.ToString();
      return 2;
    }
  }
  std::unique_ptr<eps::JsonLinesFile> events;
  if (!FLAGS_events_file.empty()) {
    auto opened = eps::JsonLinesFile::Open(FLAGS_events_file);
    if (!opened.ok()) {
      LOG(ERROR) << opened.status().ToString();
      return 2;
    }
    events = std::move(opened).value();
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto allowed = eps::AllowedKeysWatch::ForServer(*curve, FLAGS_allowed_keys, &clock);
  if (!allowed.ok()) {
    LOG(ERROR) << allowed.status().ToString();
    return 2;
  }
  eps::SchedulerProcess process(std::move(scheduler).value(), std::move(pool).value(), &context,
                                *token, std::move(events), curve->keys, std::move(allowed).value(),
                                &clock);
  eps::Status st = process.Run();
  if (!st.ok()) {
    LOG(ERROR) << "scheduler failed: " << st.ToString();
    return 1;
  }
  return 0;
}
