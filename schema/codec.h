// Turns Envelopes into ZeroMQ-ready frames and back.
//
// Frame 0 is the Cap'n Proto envelope; every tensor chunk travels as a frame of
// its own that references the caller's bytes (send) or the received ZeroMQ frame
// (receive): chunk bytes are never copied here. Decode validates everything a
// peer could get wrong (protocol version, union tag, sizes, frame references,
// list lengths) and answers with a Status instead of throwing: ProtocolError,
// whatever the fault, since a peer that sends it broke the protocol. What only
// the receiver can check (a chunk id against its layout, a step against its
// clock) is the receiver's job. Stateless functions; thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "schema/messages.h"

namespace eps {

// One ZeroMQ frame's bytes, kept alive by `owner`.
struct Frame {
  const void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

struct DecodeLimits {
  size_t max_header_bytes = 8 << 20;  // the envelope itself, not the chunks
  size_t max_frames = 1 << 16;
  size_t max_list = 1 << 20;  // tensors, chunks, shape dims...
  size_t max_text = 64 << 10;
};

StatusOr<std::vector<Frame>> Encode(const Envelope& envelope);
StatusOr<Envelope> Decode(const std::vector<Frame>& frames,
                          const DecodeLimits& limits = DecodeLimits());

}  // namespace eps
