// A worker process: hosts the virtual workers the coordinator assigns to it and
// runs them one after another on one model copy.
//
// It needs only the coordinator's address (and the job token): registration
// returns the job spec and the shard addresses; the worker builds the model,
// loads the data, and then asks the coordinator for a plan before every step.
// For a train plan over VWs [lo, hi) of step t it pulls w(t) and the step's
// buffers, runs each VW on its own microbatch with its own random streams,
// pre-sums every aligned block of its range along the canonical tree and pushes
// one partial per block to each shard (VW 0's buffers ride with VW 0's block).
// Pushes are not awaited one by one: replies are collected at the end of the
// step, so sending overlaps the next VW's compute.
// Run() owns the sockets and the model: one thread.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace eps {

struct WorkerOptions {
  std::string coordinator;  // the coordinator's endpoint
  std::string token;        // the job's secret
  std::string host;         // reported to the coordinator, for logs
  std::chrono::milliseconds plan_timeout{600000};  // longest wait for the next plan
  std::chrono::milliseconds rpc_timeout{60000};    // longest wait for a shard's reply
};

class Worker {
 public:
  static StatusOr<std::unique_ptr<Worker>> Open(const WorkerOptions& options, zmq::context_t* context);
  virtual ~Worker() = default;
  // Runs until the coordinator says stop (OK) or something fails.
  virtual Status Run(const volatile bool* stop) = 0;
};

}  // namespace eps
