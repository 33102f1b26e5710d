#include "worker/heartbeat.h"

#include <glog/logging.h>

#include "common/threads.h"

namespace eps {

using std::chrono::milliseconds;

StatusOr<std::unique_ptr<Heartbeater>> Heartbeater::Start(zmq::context_t* context,
                                                          const std::string& endpoint,
                                                          std::string token, milliseconds interval,
                                                          WorkerId worker, CurveOptions curve) {
  EPS_ASSIGN_OR_RETURN(auto channel, Connect(context, endpoint, curve));
  std::unique_ptr<Heartbeater> hb(
      new Heartbeater(context, endpoint, std::move(token), interval, worker, std::move(curve)));
  Heartbeater* raw = hb.get();
  EPS_ASSIGN_OR_RETURN(hb->thread_,
                       StartThreadWithoutStopSignals(
                           [raw, ch = std::move(channel)]() mutable { raw->Loop(std::move(ch)); }));
  return hb;
}

void Heartbeater::SetWorker(WorkerId worker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    worker_ = worker;
    ++registration_;  // also with the same id: a restarted coordinator may give it again
    refused_ = false;
  }
  cv_.notify_all();
}

void Heartbeater::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::unique_ptr<Channel>> Heartbeater::Connect(zmq::context_t* context,
                                                        const std::string& endpoint,
                                                        const CurveOptions& curve) {
  Channel::Options co;
  co.curve = curve;
  co.linger_ms = 0;  // a beat not sent by the time we exit is worthless
  return Channel::Connect(context, endpoint, co);
}

void Heartbeater::Loop(std::unique_ptr<Channel> channel) {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t beating = registration_;  // every beat on `channel` was sent after this registration
  int64_t refusals = 0;              // error replies on `channel`
  while (!stop_) {
    const WorkerId worker = worker_;
    const uint64_t registration = registration_;
    lock.unlock();
    if (registration != beating) {
      // Refusals of beats sent before the registration still in flight go with the old socket.
      auto fresh = Connect(context_, endpoint_, curve_);
      if (fresh.ok()) {
        channel = std::move(fresh).value();
      } else {
        LOG(WARNING) << "heartbeat: no fresh socket for worker " << worker << ": "
                     << fresh.status().ToString();
      }
      beating = registration;
      refusals = 0;
    }
    // Replies to earlier beats first: only errors come back.
    while (true) {
      StatusOr<Channel::Incoming> in = channel->TryReceive();
      if (!in.ok()) break;
      if (!in->envelope.ok()) {
        LOG(WARNING) << "heartbeat: bad reply from the coordinator: "
                     << in->envelope.status().ToString();
      } else if (auto* err = std::get_if<ErrorReply>(&in->envelope->body)) {
        // Logged once per registration and then every 20th.
        if (refusals++ % 20 == 0) {
          LOG(WARNING) << "the coordinator refused a heartbeat (" << refusals << " since worker "
                       << worker << " began): " << err->ToStatus().ToString();
        }
        if (err->code == StatusCode::kAborted || err->code == StatusCode::kNotFound) {
          std::lock_guard<std::mutex> guard(mu_);
          if (registration_ == registration) refused_ = true;  // not if SetWorker() came meanwhile
        } else if (err->code == StatusCode::kPermissionDenied ||
                   err->code == StatusCode::kUnauthenticated) {
          std::lock_guard<std::mutex> guard(mu_);
          denied_ = err->ToStatus();  // for good: no registration mends credentials
        }
      } else {
        LOG(WARNING) << "heartbeat: unexpected " << BodyName(in->envelope->body)
                     << " from the coordinator";
      }
    }
    Status st = channel->Send(Envelope{token_, Heartbeat{worker}});
    if (!st.ok()) LOG(WARNING) << "heartbeat not sent: " << st.ToString();
    lock.lock();
    cv_.wait_for(lock, interval_, [&] { return stop_ || registration_ != registration; });
  }
}

}  // namespace eps
