// One shard as a worker sees it: its two sockets, the pushes awaiting an
// acknowledgement, the shared-memory region it may answer pulls into, and
// whether pushes to it go through shared memory.
#pragma once

#include <memory>
#include <string>
#include <zmq.hpp>

#include "common/shm.h"
#include "common/status.h"
#include "schema/channel.h"

namespace eps {

// A worker's connection to one shard (one object per peer, as gloo's
// transport pair). Pushes and pulls go on separate DEALER sockets, because a
// shard answers pulls out of push order (when their chunks are stepped).
//
// Threads: the ParameterClient that holds the links owns them on the
// worker's main thread, except `pushes` and `outstanding`, which the
// reducing thread uses while it pushes a step's blocks (between the first
// push task posted and TaskThread::Wait() on the main thread; see
// block_pusher.h).
struct ShardLink {
  ShardLink(size_t index, std::string address) : index(index), address(std::move(address)) {}

  // Fresh sockets (replies to an abandoned plan or an unused prefetch must not
  // be taken for the next plan's), no push outstanding, and, with
  // `pull_region_bytes` > 0, a fresh region for pull replies: a shard may
  // still answer the old socket's pulls into the old region. Pushes wait for a
  // pull answered through shared memory again (the shard may have moved).
  // Without a region (none could be made) pulls are answered inline.
  [[nodiscard]] Status Reconnect(zmq::context_t* context, size_t pull_region_bytes,
                                 const CurveOptions& curve);

  // Constant after construction.
  const size_t index;   // the shard's id
  std::string address;  // changes only when a re-registration says the shard moved
  // Empty: the id is not in the shard map (a gap a removed shard left): no
  // sockets, nothing sent to it.
  bool member() const { return !address.empty(); }

  std::unique_ptr<Channel> pushes;         // pushes and their replies
  std::unique_ptr<Channel> pulls;          // pulls and their replies
  int outstanding = 0;                     // push replies not yet collected
  // pushes->Disconnects() (pulls->) when the oldest push (pull) still owed a
  // reply was sent: a disconnect since then lost a reply.
  uint64_t push_disconnects = 0;
  uint64_t pull_disconnects = 0;
  std::unique_ptr<ShmRegion> pull_region;  // where the shard may write pull replies (or null)
  // It answered a pull through shared memory on the current sockets, so it can
  // map this worker's regions: block partials are pushed to it from regions.
  bool shm_pushes = false;
  // It refused a push from shared memory: pushes to it go through the socket for good.
  bool shm_refused = false;
};

}  // namespace eps
