// Internal to elastic/: not part of the coordinator's public API (elastic/coordinator.h).
// What the coordinator does with a decoded message from a peer, less the sockets:
// the JobState transition it makes, the peers it learns, and what to answer. The
// coordinator (elastic/coordinator.cc) and the fuzzer (fuzz/job_state_fuzz.cc)
// both call DispatchMessage, so the fuzzer drives the coordinator's own dispatch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/shard_map.h"
#include "common/status.h"
#include "elastic/job_state.h"
#include "schema/messages.h"

namespace eps {

// The routing ids (ZeroMQ ROUTER identities) the coordinator knows its shards
// and workers by, and the metrics addresses they registered with.
struct CoordinatorPeers {
  CoordinatorPeers() : shards(kMaxShardId), shard_metrics(kMaxShardId) {}

  bool IsShard(ShardId shard, const std::string& peer) const {
    return shard.value() < shards.size() && shards[shard.value()] == peer;
  }
  bool IsWorker(WorkerId worker, const std::string& peer) const {
    auto it = workers.find(worker);
    return it != workers.end() && it->second == peer;
  }

  std::vector<std::string> shards;                 // "": not registered
  std::map<WorkerId, std::string> workers;         // each worker's main socket
  std::vector<std::string> shard_metrics;          // each shard's metrics address (empty: none)
  std::map<WorkerId, std::string> worker_metrics;  // each worker's
};

// What is left to do after DispatchMessage, besides sending JobState's outgoing
// messages. At most one answer (error, reply or status_report) is set.
struct Dispatched {
  Status error;                // not ok: answer the peer with this as an ErrorReply
  std::optional<Body> reply;   // answer the peer with this
  bool status_report = false;  // a JobStatusRequest or JobControl: answer with the job's status
  bool unserved = false;       // a kind the coordinator does not serve (`error` says which)
  bool stray_error = false;    // an ErrorReply from a peer that is no shard or worker of the job
  Status dropped;              // an evaluation result refused: never answered, only logged
};

// Applies `body`, from `peer`, to `state` and `peers`. A shard that reports an
// error fails the job; a worker's error is JobState's to judge. Messages that
// name a shard or a worker are taken only from the peer that registered it.
Dispatched DispatchMessage(const std::string& peer, const Body& body, JobState* state,
                           CoordinatorPeers* peers);

}  // namespace eps
