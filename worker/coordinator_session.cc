#include "worker/coordinator_session.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>

#include "worker/wait.h"

namespace eps {

Channel::Options CoordinatorChannelOptions(const WorkerOptions& options) {
  Channel::Options co;
  co.curve = options.curve;
  // RegisterWorkerReply carries a text job's vocabulary in its envelope (the model files
  // come in FetchModel chunks, each in a frame of its own): the coordinator's envelopes
  // may be larger than a shard's (docs/security.md).
  co.limits.max_header_bytes = size_t{1} << 30;
  return co;
}

using std::chrono::milliseconds;

namespace {
constexpr milliseconds kRegisterRepeat(
    2000);  // an unanswered registration is sent again after this
constexpr std::chrono::seconds kRegisterReport(10);  // a line this often while none answers
}  // namespace

CoordinatorSession::CoordinatorSession(const WorkerOptions& options, zmq::context_t* context,
                                       std::unique_ptr<Channel> coordinator,
                                       const std::atomic<bool>* stop)
    : options_(options), context_(context), stop_(stop), coordinator_(std::move(coordinator)) {}

CoordinatorSession::~CoordinatorSession() {
  if (heartbeat_) heartbeat_->Stop();
}

std::string CoordinatorSession::name() const {
  return options_.host + "/w" + std::to_string(id_.value());
}

Status CoordinatorSession::Renew() {
  coordinator_->socket().set(zmq::sockopt::linger, 0);
  EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Connect(context_, options_.coordinator,
                                                      CoordinatorChannelOptions(options_)));
  return OkStatus();
}

Status CoordinatorSession::Send(Body body) {
  return coordinator_->Send(Envelope{options_.token, std::move(body)});
}

StatusOr<Envelope> CoordinatorSession::Call(Body body, milliseconds timeout) {
  EPS_RETURN_IF_ERROR(Send(std::move(body)));
  return AwaitAnswer(timeout, /*until_refused=*/false);
}

// With `until_refused` (a plan), the wait also ends, Aborted, once the
// coordinator refuses this worker's heartbeats: a restarted coordinator never
// answers a request it has forgotten.
StatusOr<Envelope> CoordinatorSession::AwaitAnswer(milliseconds timeout, bool until_refused) {
  std::function<Status()> refused;
  if (until_refused) {
    refused = [this] {
      if (heartbeat_ == nullptr) return OkStatus();
      if (Status denied = heartbeat_->denied(); !denied.ok()) return denied;
      if (!heartbeat_->refused()) return OkStatus();
      return Aborted("the coordinator refuses the heartbeats of worker " +
                     std::to_string(id_.value()) + ": it no longer knows this worker");
    };
  }
  StatusOr<Channel::Incoming> received =
      ReceiveOrStop(coordinator_.get(), timeout, *stop_, refused);
  if (until_refused && !received.ok() && received.status().code() == StatusCode::kAborted &&
      !stopping()) {
    // Abandoned: a late answer must not be taken for the next call's.
    EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Connect(context_, options_.coordinator,
                                                        CoordinatorChannelOptions(options_)));
  }
  EPS_ASSIGN_OR_RETURN(Channel::Incoming in, std::move(received));
  if (!in.envelope.ok()) return in.envelope.status().WithContext("bad reply from the coordinator");
  if (const auto* err = std::get_if<ErrorReply>(&in.envelope->body)) return err->ToStatus();
  return std::move(in.envelope).value();
}

StatusOr<Envelope> CoordinatorSession::AwaitPlan() {
  return AwaitAnswer(options_.plan_timeout, /*until_refused=*/true);
}

Status CoordinatorSession::ConfirmPlan(bool wait) {
  if (ahead_ == nullptr) return OkStatus();
  if (!wait && !heartbeat_->refused() && heartbeat_->denied().ok() &&
      !AwaitReadable({coordinator_.get()}, milliseconds(0)).ok()) {
    return OkStatus();
  }
  StatusOr<Envelope> answer = AwaitPlan();
  if (answer.ok()) {
    const auto* plan = std::get_if<StepPlan>(&answer->body);
    if (plan != nullptr && *plan == *ahead_) {
      ahead_ = nullptr;
      return OkStatus();
    }
  }
  overruled_ = std::move(answer);
  return Aborted("the coordinator planned otherwise");
}

std::optional<StatusOr<Envelope>> CoordinatorSession::TakeOverruled() {
  std::optional<StatusOr<Envelope>> out = std::move(overruled_);
  overruled_.reset();
  return out;
}

StatusOr<RegisterWorkerReply> CoordinatorSession::Register() {
  using std::chrono::steady_clock;
  const auto start = steady_clock::now();
  const auto deadline = start + options_.register_timeout;
  auto next_report = start + kRegisterReport;
  unanswered_ = false;
  StatusOr<Envelope> reply = DeadlineExceeded("");
  for (;;) {
    const auto now = steady_clock::now();
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    if (left.count() <= 0) break;
    if (now >= next_report) {
      LOG(WARNING) << "no answer from " << options_.coordinator << " for "
                   << std::chrono::duration_cast<std::chrono::seconds>(now - start).count()
                   << " s; still trying (for "
                   << std::chrono::duration_cast<std::chrono::seconds>(left).count() << " s more)";
      next_report += kRegisterReport;
    }
    reply = Call(RegisterWorker{options_.host, uint32_t(getpid()), options_.device_kind,
                                options_.metrics_address, options_.cpu_kernels},
                 std::min(left, kRegisterRepeat));
    if (reply.status().code() != StatusCode::kDeadlineExceeded) break;
    // A late answer to this request must not be taken for the next call's,
    // and the request, if still queued, is worthless: it must not hold the exit up.
    coordinator_->socket().set(zmq::sockopt::linger, 0);
    EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Connect(context_, options_.coordinator,
                                                        CoordinatorChannelOptions(options_)));
  }
  if (!reply.ok()) {
    if (reply.status().code() != StatusCode::kDeadlineExceeded) return reply.status();
    coordinator_->socket().set(zmq::sockopt::linger, 0);
    unanswered_ = true;
    return DeadlineExceeded(
        "no coordinator answered at " + options_.coordinator + " within " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(options_.register_timeout).count()) +
        " s: the job may have ended, or the address is not its coordinator's");
  }
  auto* r = std::get_if<RegisterWorkerReply>(&reply->body);
  if (r == nullptr) {
    return ProtocolError(std::string("registration answered with ") + BodyName(reply->body));
  }
  id_ = r->worker;
  ids_.push_back(id_);
  LOG(INFO) << "registered as worker " << id_ << " of job '" << r->spec.job_id << "' ("
            << r->spec.model << ", V=" << r->spec.virtual_workers << ", "
            << r->shard_addresses.size() << " shards) on " << options_.device << " ("
            << options_.device_kind << ")";
  if (heartbeat_ != nullptr) {
    heartbeat_->SetWorker(id_);
  } else {
    EPS_ASSIGN_OR_RETURN(heartbeat_,
                         Heartbeater::Start(context_, options_.coordinator, options_.token,
                                            options_.heartbeat_interval, id_, options_.curve));
  }
  return std::move(*r);
}

Status CoordinatorSession::Leave(const std::string& reason, bool host_fault) {
  LOG(INFO) << "worker " << id_ << " leaves the job (" << reason << ")"
            << (stopping() ? "; VWs not pushed yet are abandoned" : "");
  if (heartbeat_) heartbeat_->Stop();
  Status st = Send(eps::Leave{id_, reason, host_fault});
  if (!st.ok()) {
    LOG(WARNING) << "could not tell the coordinator: " << st.ToString();
    return OkStatus();
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.leave_timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      LOG(WARNING) << "the coordinator did not acknowledge the leave within "
                   << options_.leave_timeout.count() << " ms";
      return OkStatus();
    }
    StatusOr<Channel::Incoming> in = coordinator_->Receive(left);
    if (!in.ok()) {
      // Aborted: a signal interrupted the poll; DeadlineExceeded: the loop's deadline says.
      const StatusCode code = in.status().code();
      if (code == StatusCode::kAborted || code == StatusCode::kDeadlineExceeded) continue;
      LOG(WARNING) << "waiting for the leave's ack: " << in.status().ToString();
      return OkStatus();
    }
    if (!in->envelope.ok()) continue;
    if (auto* err = std::get_if<ErrorReply>(&in->envelope->body)) {
      LOG(WARNING) << "the coordinator answered the leave with " << err->ToStatus().ToString();
      return OkStatus();
    }
    auto* plan = std::get_if<StepPlan>(&in->envelope->body);
    if (plan != nullptr && plan->kind == PlanKind::kStop) {
      LOG(INFO) << "the coordinator acknowledged the leave";
      return OkStatus();
    }
    // Anything else answers an earlier request (a plan sent before the Leave arrived): skip it.
  }
}

}  // namespace eps
