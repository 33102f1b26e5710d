// garbage_peer ENDPOINT [TOKEN_FILE] [--barrage=N]: sends malformed, truncated,
// mislabelled and unauthorized messages to a live coordinator or shard and
// checks that each one is answered with an ErrorReply (the process must keep
// serving). Exits 0 when every probe got its error reply within the deadline.
// With --barrage=N it sends N bad messages instead (undecodable, with a wrong
// token, of a kind no coordinator or shard serves, in turn) from one socket as
// fast as the replies come back, 100 in flight, and checks that every one was
// answered with an error. A test tool, used by tests/integration/test_bad_input.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/files.h"
#include "schema/channel.h"

namespace {

using eps::Envelope;
using eps::Frame;

// Sends raw frames on a fresh DEALER and waits for an ErrorReply.
bool Probe(zmq::context_t* ctx, const std::string& endpoint, const char* what,
           const std::vector<std::string>& frames) {
  auto ch = eps::Channel::Connect(ctx, endpoint);
  if (!ch.ok()) return false;
  zmq::socket_t& s = (*ch)->socket();
  for (size_t i = 0; i < frames.size(); ++i) {
    s.send(zmq::buffer(frames[i]),
           i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  auto in = (*ch)->Receive(std::chrono::milliseconds(10000));
  if (!in.ok()) {
    std::printf("FAIL %-28s no reply: %s\n", what, in.status().ToString().c_str());
    return false;
  }
  if (!in->envelope.ok()) {
    std::printf("FAIL %-28s undecodable reply\n", what);
    return false;
  }
  const auto* err = std::get_if<eps::ErrorReply>(&in->envelope->body);
  if (err == nullptr) {
    std::printf("FAIL %-28s reply is %s, not an error\n", what, eps::BodyName(in->envelope->body));
    return false;
  }
  std::printf("ok   %-28s %s\n", what, err->ToStatus().ToString().c_str());
  return true;
}

std::vector<std::string> Encoded(const Envelope& env);

// The barrage: `n` bad messages, in batches of 100 whose replies are awaited.
bool Barrage(zmq::context_t* ctx, const std::string& endpoint, const std::string& token, long n) {
  auto ch = eps::Channel::Connect(ctx, endpoint);
  if (!ch.ok()) return false;
  zmq::socket_t& s = (*ch)->socket();
  eps::RegisterWorkerReply reply;  // named: GCC 12 warns of a braced temporary (maybe-uninitialized)
  reply.worker = eps::WorkerId(0);
  const std::vector<std::vector<std::string>> kinds = {
      {std::string("\x01\x02 not an envelope")},
      Encoded(Envelope{token + "x", eps::Pull{eps::Step(0), {}}}),
      Encoded(Envelope{token, reply}),
  };
  const auto start = std::chrono::steady_clock::now();
  long sent = 0, errors = 0;
  while (sent < n) {
    const long batch = std::min(100L, n - sent);
    for (long i = 0; i < batch; ++i, ++sent) {
      const std::vector<std::string>& frames = kinds[sent % kinds.size()];
      for (size_t f = 0; f < frames.size(); ++f) {
        s.send(zmq::buffer(frames[f]),
               f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
    for (long i = 0; i < batch; ++i) {
      auto in = (*ch)->Receive(std::chrono::milliseconds(10000));
      if (!in.ok()) {
        std::printf("FAIL barrage: no reply after %ld messages: %s\n", sent,
                    in.status().ToString().c_str());
        return false;
      }
      if (in->envelope.ok() && std::get_if<eps::ErrorReply>(&in->envelope->body) != nullptr)
        ++errors;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s barrage: %ld messages, %ld error replies in %.1f s\n",
              errors == n ? "ok  " : "FAIL", n, errors, seconds);
  return errors == n;
}

std::vector<std::string> Encoded(const Envelope& env) {
  auto frames = eps::Encode(env);
  std::vector<std::string> out;
  for (const Frame& f : *frames) out.emplace_back(static_cast<const char*>(f.data), f.size);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: garbage_peer ENDPOINT [TOKEN_FILE]\n");
    return 2;
  }
  const std::string endpoint = argv[1];
  long barrage = 0;
  if (argc > 2 && std::strncmp(argv[argc - 1], "--barrage=", 10) == 0) {
    barrage = std::strtol(argv[argc - 1] + 10, nullptr, 10);
    --argc;
  }
  std::string token;
  if (argc > 2) {
    auto t = eps::ReadTokenFile(argv[2]);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 2;
    }
    token = *t;
  }
  zmq::context_t ctx(1);
  if (barrage > 0) return Barrage(&ctx, endpoint, token, barrage) ? 0 : 1;
  std::mt19937_64 rng(42);  // the test's own randomness; nothing here needs portable bits
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };

  std::vector<float> data(1000, 1.0f);
  auto owner = std::make_shared<std::vector<float>>(data);
  eps::Push push{eps::Epoch(1), eps::Step(0), eps::Block{0, 1}, {}};
  push.chunks.push_back({eps::ChunkId(0), owner->data(), owner->size() * sizeof(float), owner});
  const std::vector<std::string> valid_push = Encoded(Envelope{token, push});

  bool ok = true;
  ok &= Probe(&ctx, endpoint, "random bytes", {random_bytes(37)});
  ok &= Probe(&ctx, endpoint, "random words", {random_bytes(4096)});
  ok &= Probe(&ctx, endpoint, "random multipart",
              {random_bytes(64), random_bytes(100), random_bytes(3)});
  ok &= Probe(&ctx, endpoint, "empty frame", {std::string()});
  {
    std::vector<std::string> cut = valid_push;
    cut[0].resize(cut[0].size() / 2 / 8 * 8);
    ok &= Probe(&ctx, endpoint, "truncated envelope", cut);
  }
  {
    std::vector<std::string> cut = valid_push;
    cut.pop_back();  // the chunk's frame is missing
    ok &= Probe(&ctx, endpoint, "missing chunk frame", cut);
  }
  {
    std::vector<std::string> v = valid_push;
    v[0][16] = '\x7f';  // the version field: first bytes of the root struct's data
    v[0][17] = '\x7f';
    ok &= Probe(&ctx, endpoint, "wrong protocol version", v);
  }
  {
    std::vector<std::string> flipped = valid_push;
    for (int i = 0; i < 8; ++i)
      flipped[0][8 + rng() % (flipped[0].size() - 8)] ^= static_cast<char>(1 + rng() % 255);
    // Bit flips may still decode into some valid message; either way an error must come back.
    ok &= Probe(&ctx, endpoint, "bit-flipped envelope", flipped);
  }
  {
    eps::Push bad = push;
    bad.chunks[0].chunk = eps::ChunkId(999999);
    ok &= Probe(&ctx, endpoint, "unknown chunk id", Encoded(Envelope{token, bad}));
  }
  {
    eps::Push bad = push;
    bad.step = eps::Step(1 << 30);
    ok &= Probe(&ctx, endpoint, "push for a future step", Encoded(Envelope{token, bad}));
  }
  ok &= Probe(&ctx, endpoint, "wrong token",
              Encoded(Envelope{token + "x", eps::Pull{eps::Step(0), {}}}));
  std::printf("%s\n",
              ok ? "all probes answered with errors" : "some probes were not answered with errors");
  return ok ? 0 : 1;
}
