// A parameter-server shard process: owns its slice of every tensor (chunks of the
// layout assigned to its id), runs the step barrier over virtual workers and
// serves versioned pulls.
//
// It binds a ROUTER for workers, connects to the coordinator, registers its id
// and address, and learns the job spec and the model layout from it. It reports
// every completed step (with the step's loss if it owns the loss chunk) to the
// coordinator and exits when the coordinator sends Shutdown. Bad messages get an
// ErrorReply and a log line; nothing from the network stops the service.
// Run() owns the sockets and the state: one thread, no locks.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/status.h"

namespace eps {

struct ShardOptions {
  ShardId shard;
  std::string bind = "tcp://127.0.0.1:0";  // where workers reach this shard
  std::string coordinator;                 // the coordinator's endpoint
  std::string token;                       // the job's secret; empty: none required
  std::chrono::milliseconds pull_wait{30000};  // how long a pull may wait for its version
};

class Shard {
 public:
  static StatusOr<std::unique_ptr<Shard>> Open(const ShardOptions& options, zmq::context_t* context);
  virtual ~Shard() = default;
  // The endpoint workers connect to, with the real port.
  virtual const std::string& endpoint() const = 0;
  // Serves until the coordinator says Shutdown (OK) or the job's config is
  // invalid (the error). `stop` set by a signal handler ends it early (Aborted).
  virtual Status Run(const volatile bool* stop) = 0;
};

}  // namespace eps
