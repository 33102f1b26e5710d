// libFuzzer target: bytes -> frames -> eps::Decode. Decode must answer every
// input with an envelope or a Status, never crash, read out of bounds or hit
// undefined behaviour; whatever it decodes must encode again. With a token
// expected, it decodes only what carries it.
#include <cstdint>

#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  eps::fuzz::Input input(data, size);
  const std::vector<eps::Frame> frames = input.Frames();
  // Small limits too, so that the limit checks themselves are reached.
  eps::DecodeLimits small;
  small.max_header_bytes = 4096;
  small.max_frames = 4;
  small.max_list = 8;
  small.max_text = 64;
  for (const eps::DecodeLimits& limits : {eps::DecodeLimits(), small}) {
    auto envelope = eps::Decode(frames, limits);
    if (!envelope.ok()) continue;
    (void)eps::BodyName(envelope->body);
    auto again = eps::Encode(*envelope);
    if (!again.ok()) __builtin_trap();  // a decoded envelope is one Encode takes
  }
  // A server's token check: with a token expected, what carries it decodes as
  // without one, what carries another is refused as such, nothing else decodes.
  auto plain = eps::Decode(frames);
  for (const char* token : {"t", "secret-token"}) {
    auto checked = eps::Decode(frames, eps::DecodeLimits(), token);
    if (!plain.ok()) {
      if (checked.ok()) __builtin_trap();
      continue;
    }
    const bool carries = plain->token == token;
    if (checked.ok() != carries) __builtin_trap();
    if (!carries && checked.status().code() != eps::StatusCode::kUnauthenticated) __builtin_trap();
  }
  return 0;
}
