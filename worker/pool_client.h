// A pool worker's link to the inter-job scheduler (elastic/pool_scheduler.h):
// it asks which job to train, and while it trains one, a thread asks again
// every poll; once the answer names another job (or none) it raises the
// worker's leave flag, and the worker leaves its job gracefully (at a VW
// boundary) before it asks for the next one. No libtorch.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/status.h"
#include "schema/curve.h"
#include "schema/messages.h"

namespace eps {

class PoolClient {
 public:
  // `self` names this worker (host "hostname:pid", as it registers with
  // coordinators, and its device kind); `token` is the pool's; `curve` this
  // worker's key pair and the scheduler's public key (off without a key).
  PoolClient(zmq::context_t* context, std::string scheduler, std::string token, PoolRequest self,
             std::chrono::milliseconds poll, CurveOptions curve = {});
  ~PoolClient();

  // Asks every poll until the scheduler names a job; Aborted once *stop.
  // Unauthenticated (a wrong pool token) and other refusals end the wait.
  // `ended` names a job this worker just saw end: every poll says so, and
  // the scheduler takes the job as over at once.
  StatusOr<PoolAssign> NextJob(const std::atomic<bool>* stop, const std::string& ended = "");

  // While this worker trains `job`: polls from a thread and sets *leave once
  // the scheduler names another job or none. A scheduler that does not answer
  // changes nothing (the worker trains on). One watch at a time.
  Status Watch(const std::string& job, std::atomic<bool>* leave);
  // Ends the watch and joins its thread.
  void StopWatching();

 private:
  // One poll: the scheduler's answer, from the job this worker is in.
  StatusOr<PoolAssign> Ask(const std::string& job, const std::string& ended = "");

  zmq::context_t* const context_;
  const std::string scheduler_;
  const std::string token_;
  const PoolRequest self_;
  const std::chrono::milliseconds poll_;
  const CurveOptions curve_;
  std::atomic<bool> watching_{false};
  std::thread watcher_;
};

}  // namespace eps
