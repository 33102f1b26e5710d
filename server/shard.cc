#include "server/shard.h"

#include <glog/logging.h>

#include <deque>

#include "schema/channel.h"
#include "server/shard_state.h"

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

class ShardImpl final : public Shard {
 public:
  ShardImpl(ShardOptions options, std::unique_ptr<Channel> workers, std::unique_ptr<Channel> coordinator)
      : options_(std::move(options)),
        workers_(std::move(workers)),
        coordinator_(std::move(coordinator)),
        state_(options_.shard) {}

  const std::string& endpoint() const override { return workers_->endpoint(); }

  Status Run(const volatile bool* stop) override {
    EPS_RETURN_IF_ERROR(SendToCoordinator(RegisterShard{options_.shard, endpoint()}));
    LOG(INFO) << "shard " << options_.shard << " serving on " << endpoint() << ", coordinator "
              << coordinator_->endpoint();
    while (!*stop && !done_) {
      zmq::pollitem_t items[] = {{static_cast<void*>(workers_->socket()), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(coordinator_->socket()), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, NextTimeout());
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return Internal(std::string("poll failed: ") + e.what());
      }
      if (items[1].revents & ZMQ_POLLIN) EPS_RETURN_IF_ERROR(OnCoordinatorMessage());
      if (items[0].revents & ZMQ_POLLIN) OnWorkerMessage();
      ExpirePulls();
    }
    if (!done_) return Aborted("stopped by a signal");
    return fatal_;
  }

 private:
  struct WaitingPull {
    std::string peer;
    Pull pull;
    Clock::time_point deadline;
  };

  template <class M>
  Status SendToCoordinator(M message) {
    return coordinator_->Send(Envelope{options_.token, std::move(message)});
  }

  void Reply(const std::string& peer, Body body) {
    Status st = workers_->SendTo(peer, Envelope{options_.token, std::move(body)});
    if (!st.ok()) LOG(WARNING) << "reply lost: " << st.ToString();
  }
  void ReplyError(const std::string& peer, const Status& st) { Reply(peer, ErrorReply{st.code(), st.message()}); }

  std::chrono::milliseconds NextTimeout() const {
    if (waiting_.empty()) return std::chrono::milliseconds(1000);
    auto left = waiting_.front().deadline - Clock::now();
    return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(left));
  }

  Status OnCoordinatorMessage() {
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, coordinator_->TryReceive());
    if (!in.envelope.ok()) {
      LOG(WARNING) << "dropped a bad message from the coordinator: " << in.envelope.status().ToString();
      return OkStatus();
    }
    Body& body = in.envelope->body;
    if (auto* config = std::get_if<ShardConfig>(&body)) {
      Status st = state_.Configure(*config);
      if (!st.ok()) {
        LOG(ERROR) << "refusing the job config: " << st.ToString();
        (void)SendToCoordinator(ErrorReply{st.code(), "shard " + std::to_string(options_.shard.value()) + ": " +
                                                         st.message()});
        fatal_ = st;
        done_ = true;
      } else if (state_.has_layout()) {
        LOG(INFO) << "configured: " << state_.chunks().size() << " chunks on this shard";
      }
    } else if (auto* shutdown = std::get_if<Shutdown>(&body)) {
      LOG(INFO) << "shutdown: " << shutdown->reason << " (" << state_.duplicates() << " duplicate contributions dropped)";
      done_ = true;
    } else if (auto* err = std::get_if<ErrorReply>(&body)) {
      LOG(ERROR) << "coordinator refused this shard: " << err->ToStatus().ToString();
      fatal_ = err->ToStatus();
      done_ = true;
    } else {
      LOG(WARNING) << "unexpected " << BodyName(body) << " from the coordinator";
    }
    return OkStatus();
  }

  void OnWorkerMessage() {
    auto received = workers_->TryReceive();
    if (!received.ok()) return;
    Channel::Incoming& in = *received;
    if (!in.envelope.ok()) {
      LOG(WARNING) << "bad message from a worker: " << in.envelope.status().ToString();
      ReplyError(in.peer, in.envelope.status());
      return;
    }
    if (!options_.token.empty() && in.envelope->token != options_.token) {
      LOG(WARNING) << "refused a message with a wrong job token";
      ReplyError(in.peer, Unauthenticated("wrong job token"));
      return;
    }
    Body& body = in.envelope->body;
    if (auto* push = std::get_if<Push>(&body)) {
      auto outcome = state_.HandlePush(*push);
      if (!outcome.ok()) {
        LOG(WARNING) << "refused push for step " << push->step << " block " << push->block.ToString() << ": "
                     << outcome.status().ToString();
        ReplyError(in.peer, outcome.status());
        return;
      }
      if (outcome->reply.duplicates > 0) {
        LOG(INFO) << "dropped " << outcome->reply.duplicates << " duplicate chunk contributions for step "
                  << push->step << " block " << push->block.ToString();
      }
      Reply(in.peer, outcome->reply);
      if (outcome->completed) OnStepCompleted(*outcome->completed);
    } else if (auto* pull = std::get_if<Pull>(&body)) {
      auto reply = state_.HandlePull(*pull);
      if (reply.ok()) {
        Reply(in.peer, std::move(reply).value());
      } else if (reply.status().code() == StatusCode::kUnavailable) {
        waiting_.push_back({in.peer, std::move(*pull), Clock::now() + options_.pull_wait});
      } else {
        ReplyError(in.peer, reply.status());
      }
    } else {
      ReplyError(in.peer, InvalidArgument(std::string("a shard does not serve ") + BodyName(body)));
    }
  }

  void OnStepCompleted(const StepDone& done) {
    VLOG(1) << "step " << done.step << " done";
    Status st = SendToCoordinator(done);
    if (!st.ok()) LOG(WARNING) << "could not report step " << done.step << ": " << st.ToString();
    // Answer the pulls that were waiting for this version.
    std::deque<WaitingPull> still;
    for (WaitingPull& w : waiting_) {
      auto reply = state_.HandlePull(w.pull);
      if (reply.ok()) {
        Reply(w.peer, std::move(reply).value());
      } else if (reply.status().code() == StatusCode::kUnavailable) {
        still.push_back(std::move(w));
      } else {
        ReplyError(w.peer, reply.status());
      }
    }
    waiting_.swap(still);
  }

  void ExpirePulls() {
    const auto now = Clock::now();
    while (!waiting_.empty() && waiting_.front().deadline <= now) {
      ReplyError(waiting_.front().peer,
                 DeadlineExceeded("version " + std::to_string(waiting_.front().pull.version.value()) +
                                  " did not arrive in time"));
      waiting_.pop_front();
    }
  }

  const ShardOptions options_;
  std::unique_ptr<Channel> workers_;
  std::unique_ptr<Channel> coordinator_;
  ShardState state_;
  std::deque<WaitingPull> waiting_;  // ordered by deadline (all share one wait)
  bool done_ = false;
  Status fatal_;
};

}  // namespace

StatusOr<std::unique_ptr<Shard>> Shard::Open(const ShardOptions& options, zmq::context_t* context) {
  if (options.coordinator.empty()) return InvalidArgument("a shard needs the coordinator's address");
  EPS_ASSIGN_OR_RETURN(auto workers, Channel::Bind(context, options.bind));
  EPS_ASSIGN_OR_RETURN(auto coordinator, Channel::Connect(context, options.coordinator));
  return std::unique_ptr<Shard>(new ShardImpl(options, std::move(workers), std::move(coordinator)));
}

}  // namespace eps
