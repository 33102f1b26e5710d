// The worker's heartbeat: tells the coordinator that this worker lives, from a
// thread of its own, also while a long VW computes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/status.h"
#include "schema/channel.h"
#include "schema/messages.h"

namespace eps {

// Sends Heartbeat{worker} to the coordinator every `interval` from its own
// thread and DEALER socket (a ZeroMQ socket belongs to one thread), until
// Stop(), and logs the error replies it gets (the coordinator answers a beat
// only when it does not know the worker). A refusal that says the coordinator
// does not know the worker (Aborted, NotFound) sets refused(), which the main
// thread watches while it waits for a plan: a restarted coordinator has
// forgotten the request and will never answer it. A refusal of this
// worker's credentials (PermissionDenied: its CURVE key was revoked;
// Unauthenticated) sets denied(): the coordinator will answer nothing of it
// again, so the wait for a plan ends with that status.
//
// Threads: SetWorker() and refused() may be called from any thread; Start(),
// Stop() and the destructor from the thread that owns the object. The beating
// thread blocks SIGTERM and SIGINT, so signals reach the owner.
class Heartbeater {
 public:
  // Internal if the thread cannot start; the socket's errors as Channel gives them.
  [[nodiscard]] static StatusOr<std::unique_ptr<Heartbeater>> Start(
      zmq::context_t* context, const std::string& endpoint, std::string token,
      std::chrono::milliseconds interval, WorkerId worker, CurveOptions curve = {});
  ~Heartbeater() { Stop(); }
  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;

  // Beats for `worker` from now on (after a re-registration), on a fresh
  // socket, and clears refused(): what the old socket still receives answers
  // beats from before the registration.
  void SetWorker(WorkerId worker);

  // The coordinator refused a beat of the current registration as unknown or dead.
  bool refused() const { return refused_.load(); }
  // The coordinator refused this worker's credentials (OK: not so far).
  Status denied() const {
    std::lock_guard<std::mutex> guard(mu_);
    return denied_;
  }

  // Stops beating and joins the thread; returns within about one send.
  void Stop();

 private:
  Heartbeater(zmq::context_t* context, std::string endpoint, std::string token,
              std::chrono::milliseconds interval, WorkerId worker, CurveOptions curve)
      : context_(context),
        endpoint_(std::move(endpoint)),
        token_(std::move(token)),
        interval_(interval),
        curve_(std::move(curve)),
        worker_(worker) {}
  static StatusOr<std::unique_ptr<Channel>> Connect(zmq::context_t* context,
                                                    const std::string& endpoint,
                                                    const CurveOptions& curve);
  void Loop(std::unique_ptr<Channel> channel);

  // Constant after construction.
  zmq::context_t* const context_;
  const std::string endpoint_;
  const std::string token_;
  const std::chrono::milliseconds interval_;
  const CurveOptions curve_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status denied_;                     // GUARDED_BY(mu_)
  WorkerId worker_;                   // GUARDED_BY(mu_)
  uint64_t registration_ = 0;         // GUARDED_BY(mu_); SetWorker() calls so far
  bool stop_ = false;                 // GUARDED_BY(mu_)
  std::atomic<bool> refused_{false};  // written under mu_, read without it
  std::thread thread_;                // owned by the owner's thread
};

}  // namespace eps
