// The worker's side of its conversation with the coordinator: registration
// (and registering again under a new id when the coordinator forgot this
// worker), the heartbeat thread, step requests and their plans, the plan run
// ahead of the coordinator's answer, and leaving.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "schema/channel.h"
#include "schema/messages.h"
#include "worker/heartbeat.h"
#include "worker/worker.h"

namespace eps {

// The options of a worker's channels to the coordinator (its CURVE settings).
Channel::Options CoordinatorChannelOptions(const WorkerOptions& options);

// One worker's session with the coordinator. The coordinator's DEALER socket
// and every field belong to the worker's main thread (the one that calls
// Worker::Run); only the heartbeat thread it starts runs elsewhere (see
// heartbeat.h). Every wait watches `*stop` (worker/wait.h).
//
// Requests and answers: a step request is answered by one plan; a request
// whose answer is given up (a signal, refused heartbeats) renews the socket,
// so a late answer is never taken for the next request's.
//
// Running ahead: after a train plan the worker sends the next request and
// runs the plan it expects (the same VWs at the next step) while the answer
// comes. RunAhead() names that guess; ConfirmPlan() takes the answer; it is
// either the guess (the run goes on and may push) or overrules it, in which
// case the run ends with Aborted and TakeOverruled() holds the answer.
class CoordinatorSession {
 public:
  // `coordinator`: a connected DEALER channel to options.coordinator.
  CoordinatorSession(const WorkerOptions& options, zmq::context_t* context,
                     std::unique_ptr<Channel> coordinator, const std::atomic<bool>* stop);
  ~CoordinatorSession();

  // Registers, repeating the request every 2 s on a fresh connection while no
  // answer comes (up to register_timeout in all, with a log line every 10 s):
  // a coordinator that restarts meanwhile forgets the request, and one that is
  // merely slow (shards still starting) gives the same process the same id.
  // On success id() is the new id, and the heartbeat thread (started on the
  // first call) beats for it. DeadlineExceeded when nothing answered (then
  // unanswered() is true); a refusal comes back as its Status.
  [[nodiscard]] StatusOr<RegisterWorkerReply> Register();

  // A fresh socket to the coordinator: replies to what was sent on the old one
  // (a model file's chunks still in flight) are never taken for later answers.
  [[nodiscard]] Status Renew();

  // Sends a message: a step request (its answer comes from AwaitPlan(), or
  // through a run ahead), or one that has no answer (an evaluation result, a
  // set-up error).
  [[nodiscard]] Status Send(Body body);

  // Waits up to plan_timeout for the answer to the request sent last.
  // Aborted when the heartbeats are refused meanwhile (the coordinator forgot
  // this worker: register again); an ErrorReply comes back as its Status.
  [[nodiscard]] StatusOr<Envelope> AwaitPlan();

  // The plan run ahead of the answer to the request sent last (null: none).
  // `guess` must outlive the run.
  void RunAhead(const StepPlan* guess) { ahead_ = guess; }
  bool running_ahead() const { return ahead_ != nullptr; }
  // While running ahead, takes the coordinator's answer: with `wait`, waiting
  // for it (before the run's first push); without, only if it has come (or the
  // heartbeats were refused). OK when it confirms the guess (running_ahead()
  // turns false), or when not running ahead; Aborted when it overrules it.
  [[nodiscard]] Status ConfirmPlan(bool wait);
  // The answer that overruled the last run ahead, once (empty: none).
  std::optional<StatusOr<Envelope>> TakeOverruled();
  // The socket the answer comes on: a wait on other sockets while running
  // ahead watches it too, and calls ConfirmPlan(false) when it is readable.
  Channel* channel() const { return coordinator_.get(); }

  // Tells the coordinator this worker leaves, stops the heartbeats, waits up
  // to leave_timeout for the ack (a stop plan), and returns OK: leaving is
  // normal, and what was not pushed is recomputed by others. `host_fault`:
  // it cannot set itself up on this host (the coordinator counts that against
  // the host, and backs a host that keeps failing off).
  Status Leave(const std::string& reason, bool host_fault = false);

  // The last registration got no answer at all within register_timeout.
  bool unanswered() const { return unanswered_; }
  WorkerId id() const { return id_; }
  // The ids this process was registered under, in order.
  const std::vector<WorkerId>& ids() const { return ids_; }
  // "<host>/w<id>", naming this worker in messages to people.
  std::string name() const;

 private:
  StatusOr<Envelope> Call(Body body, std::chrono::milliseconds timeout);
  StatusOr<Envelope> AwaitAnswer(std::chrono::milliseconds timeout, bool until_refused);
  bool stopping() const { return stop_->load(); }

  // Constant after construction.
  const WorkerOptions& options_;  // the Worker's, which outlives this
  zmq::context_t* const context_;
  const std::atomic<bool>* const stop_;

  std::unique_ptr<Channel> coordinator_;
  std::unique_ptr<Heartbeater> heartbeat_;  // from the first registration on
  WorkerId id_;
  std::vector<WorkerId> ids_;
  const StepPlan* ahead_ = nullptr;  // see RunAhead()
  std::optional<StatusOr<Envelope>> overruled_;
  bool unanswered_ = false;
};

}  // namespace eps
