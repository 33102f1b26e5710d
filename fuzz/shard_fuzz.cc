// libFuzzer target: a shard's handling of worker messages, against a live
// ShardState. The shard's loop (server/shard.cc) keeps its sockets and its
// handling of a message together, so this target does what the loop does with
// a decoded message, through the same pure entry points: a Push goes through
// ResolveShm then ShardState::HandlePush, a Pull through
// ShardState::HandlePull and MoveIntoShm. The state is configured with a small
// job and holds version 0 before the first message.
//
// Input: messages one after another, each a byte (how many frames, 1 to 8)
// and that many frames (fuzz/fuzz_input.h).
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_jobs.h"
#include "server/shard_state.h"

namespace {

struct Fixture {
  eps::Layout layout;
  eps::ShardConfig config;
};

const Fixture& TheFixture() {
  static const Fixture* f = [] {
    auto* f = new Fixture;
    f->config = {eps::fuzz::FuzzSpec(), eps::fuzz::FuzzTensors()};
    f->layout = *eps::MakeLayout(f->config.tensors, 1, f->config.spec.chunk_elems);
    return f;
  }();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = TheFixture();
  eps::ShardState state{eps::ShardId(0)};
  if (!state.Configure(f.config).ok()) __builtin_trap();
  if (!state.HandlePush(eps::fuzz::InitPush(f.layout)).ok()) __builtin_trap();
  eps::ShmMappings shm;
  eps::fuzz::Input input(data, size);
  for (int messages = 0; !input.empty() && messages < 16; ++messages) {
    const size_t frames = 1 + input.Byte() % 8;
    std::vector<eps::Frame> wire;
    for (size_t i = 0; i < frames && !input.empty(); ++i) wire.push_back(input.NextFrame());
    auto envelope = eps::Decode(wire);
    if (!envelope.ok()) continue;
    if (auto* push = std::get_if<eps::Push>(&envelope->body)) {
      if (!eps::ResolveShm(&shm, push).ok()) continue;
      auto outcome = state.HandlePush(*push);
      if (outcome.ok() && outcome->completed && outcome->completed->step != eps::Step(-1) &&
          state.version().value() != outcome->completed->step.value() + 1)
        __builtin_trap();  // a completed step t publishes version t + 1
    } else if (auto* pull = std::get_if<eps::Pull>(&envelope->body)) {
      auto reply = state.HandlePull(*pull);
      if (reply.ok() && pull->shm.has_value()) (void)eps::MoveIntoShm(*pull, &shm, &*reply);
    }
  }
  return 0;
}
