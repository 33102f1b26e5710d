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
#include <string>
#include <string_view>
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
// With an `expected_token` (a server's job token; empty: none checked), a
// message that carries another one is refused with Unauthenticated once its
// version and token are read: an unauthenticated peer never has its body
// decoded. The comparison takes the same time wherever the tokens differ.
StatusOr<Envelope> Decode(const std::vector<Frame>& frames,
                          const DecodeLimits& limits = DecodeLimits(),
                          const std::string& expected_token = "");

// Whether `got` equals `want`, in a time that depends on their lengths only
// (not on where they differ): a peer timing the answers learns nothing of a
// token byte by byte.
bool TokenEquals(std::string_view got, std::string_view want);

}  // namespace eps
