#include "worker/shard_link.h"

#include <glog/logging.h>

namespace eps {

Status ShardLink::Reconnect(zmq::context_t* context, size_t pull_region_bytes,
                            const CurveOptions& curve) {
  outstanding = 0;
  shm_pushes = false;
  pull_region.reset();
  if (!member()) return OkStatus();
  Channel::Options co;
  co.curve = curve;
  EPS_ASSIGN_OR_RETURN(pushes, Channel::Connect(context, address, co));
  EPS_ASSIGN_OR_RETURN(pulls, Channel::Connect(context, address, co));
  if (pull_region_bytes == 0) return OkStatus();
  auto region = ShmRegion::Create(pull_region_bytes);
  if (region.ok()) {
    pull_region = std::move(region).value();
  } else {
    LOG(WARNING) << "no shared memory for the pulls from shard " << index
                 << " (pulling through the socket): " << region.status().ToString();
  }
  return OkStatus();
}

}  // namespace eps
