// garbage_peer ENDPOINT [TOKEN_FILE] [--barrage=N] [--connections=K]
//              [--oversized=M] [--parked_pulls=P] [--multipart_mib=N]: sends malformed, truncated,
// mislabelled and unauthorized messages to a live coordinator or shard and
// checks that each one is answered with an ErrorReply (the process must keep
// serving). Exits 0 when every probe got its error reply within the deadline.
// Any of the flags replaces the probes with:
//   --barrage=N       N bad messages (undecodable, truncated, with a wrong token
//                     or none, of a kind no server serves, a push for an
//                     out-of-range chunk or step, a replayed push of step 0) in
//                     turn, from one socket as fast as the replies come back,
//                     100 in flight; every one must be answered with an error
//                     (or, a replay the shard can read, a reply accepting nothing);
//   --connections=K   K short-lived connections, each one bad message, its
//                     error reply awaited, then closed;
//   --oversized=M     M frames of 80 MiB (over every server's frame limit), each
//                     on a connection of its own, which the server must close
//                     without a reply (the test reads the closes from metrics);
//   --parked_pulls=P  P pulls on one socket of --parked_version=V (default: far
//                     ahead). Of the step in progress (a held shard's version
//                     + 1) they would wait at a shard: all but the shard's
//                     per-peer allowance are refused at once
//                     (ResourceExhausted). Past it, every one is refused at
//                     once (Aborted: no plan can ask for it);
//   --multipart_mib=N one message of N frames of 1 MiB after a small envelope
//                     with no token (each frame under every frame limit): it
//                     must be answered with an error. ZeroMQ hands a message
//                     over only when it is whole, so the server holds all N MiB
//                     first (docs/security.md measures it).
// A test tool, used by tests/integration/test_bad_input.py.
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

void SendFrames(zmq::socket_t& s, const std::vector<std::string>& frames) {
  for (size_t f = 0; f < frames.size(); ++f) {
    s.send(zmq::buffer(frames[f]),
           f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

// A push of one 1000-float chunk with the token: step 0 of epoch 1 (during
// training, a replay of a step long applied), unless changed.
eps::Push SmallPush() {
  auto owner = std::make_shared<std::vector<float>>(1000, 1.0f);
  eps::Push push{eps::Epoch(1), eps::Step(0), eps::Block{0, 1}, {}};
  push.chunks.push_back({eps::ChunkId(0), owner->data(), owner->size() * sizeof(float), owner});
  return push;
}

// Every kind of bad message of the barrage, each answered with an error.
std::vector<std::vector<std::string>> BadKinds(const std::string& token) {
  const std::vector<std::string> push = Encoded(Envelope{token, SmallPush()});
  std::vector<std::string> truncated = push;
  truncated[0].resize(truncated[0].size() / 2 / 8 * 8);
  eps::Push far_chunk = SmallPush(), far_step = SmallPush();
  eps::RegisterWorkerReply unserved;  // a reply no server serves
  unserved.worker = eps::WorkerId(0);
  far_chunk.chunks[0].chunk = eps::ChunkId(999999);
  far_step.step = eps::Step(1 << 30);
  return {
      {std::string("\x01\x02 not an envelope")},
      truncated,
      Encoded(Envelope{token + "x", eps::Pull{eps::Step(0), {}}}),
      Encoded(Envelope{"", eps::Pull{eps::Step(0), {}}}),
      Encoded(Envelope{token, unserved}),
      Encoded(Envelope{token, far_chunk}),
      Encoded(Envelope{token, far_step}),
      push,
  };
}

// Waits for one reply on `ch`; true if it is an ErrorReply (with its code in *code).
bool ErrorReplyCame(eps::Channel* ch, std::chrono::milliseconds wait, eps::StatusCode* code) {
  auto in = ch->Receive(wait);
  if (!in.ok() || !in->envelope.ok()) return false;
  const auto* err = std::get_if<eps::ErrorReply>(&in->envelope->body);
  if (err == nullptr) return false;
  if (code != nullptr) *code = err->ToStatus().code();
  return true;
}

// K short-lived connections: each sends one bad message, awaits its error, closes.
bool Connections(zmq::context_t* ctx, const std::string& endpoint, const std::string& token,
                 long k) {
  const auto kinds = BadKinds(token);
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < k; ++i) {
    eps::Channel::Options o;
    o.linger_ms = 0;
    auto ch = eps::Channel::Connect(ctx, endpoint, o);
    if (!ch.ok()) return false;
    SendFrames((*ch)->socket(), kinds[i % kinds.size()]);
    if (!ErrorReplyCame(ch->get(), std::chrono::milliseconds(10000), nullptr)) {
      std::printf("FAIL connections: no error reply on connection %ld\n", i);
      return false;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ok   connections: %ld short-lived connections answered in %.1f s\n", k, seconds);
  return true;
}

// M oversized frames, each on a connection of its own: none may be answered.
bool Oversized(zmq::context_t* ctx, const std::string& endpoint, long m) {
  const std::string frame(80 << 20, 'o');
  for (long i = 0; i < m; ++i) {
    eps::Channel::Options o;
    o.linger_ms = 2000;  // the frame leaves before the socket closes
    auto ch = eps::Channel::Connect(ctx, endpoint, o);
    if (!ch.ok()) return false;
    (*ch)->socket().send(zmq::buffer(frame), zmq::send_flags::none);
    if (ErrorReplyCame(ch->get(), std::chrono::milliseconds(500), nullptr)) {
      std::printf("FAIL oversized: an 80 MiB frame was read and answered\n");
      return false;
    }
  }
  std::printf("ok   oversized: %ld frames of 80 MiB, none answered\n", m);
  return true;
}

// One message of N 1 MiB frames behind an envelope without a token: answered with an error.
bool Multipart(zmq::context_t* ctx, const std::string& endpoint, long n) {
  eps::Channel::Options o;
  o.linger_ms = 0;
  auto ch = eps::Channel::Connect(ctx, endpoint, o);
  if (!ch.ok()) return false;
  const std::string mib(1 << 20, 'm');
  std::vector<std::string> frames = Encoded(Envelope{"", eps::Heartbeat{eps::WorkerId(0)}});
  const auto start = std::chrono::steady_clock::now();
  zmq::socket_t& s = (*ch)->socket();
  s.send(zmq::buffer(frames[0]), zmq::send_flags::sndmore);
  for (long i = 0; i < n; ++i)
    s.send(zmq::buffer(mib), i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none);
  const bool answered = ErrorReplyCame(ch->get(), std::chrono::milliseconds(120000), nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"multipart_mib\": %ld, \"answered\": %s, \"seconds\": %.2f}\n", n,
              answered ? "true" : "false", seconds);
  return answered;
}

// P pulls of `version` on one socket: the answers that came at once, by kind.
bool ParkedPulls(zmq::context_t* ctx, const std::string& endpoint, const std::string& token, long p,
                 long version) {
  eps::Channel::Options o;
  o.linger_ms = 0;
  auto ch = eps::Channel::Connect(ctx, endpoint, o);
  if (!ch.ok()) return false;
  for (long i = 0; i < p; ++i)
    SendFrames((*ch)->socket(), Encoded(Envelope{token, eps::Pull{eps::Step(version), {}}}));
  long exhausted = 0, aborted = 0;
  eps::StatusCode code;
  while (ErrorReplyCame(ch->get(), std::chrono::milliseconds(2000), &code)) {
    exhausted += code == eps::StatusCode::kResourceExhausted;
    aborted += code == eps::StatusCode::kAborted;
  }
  std::printf("parked pulls of version %ld: %ld sent, %ld refused at once, %ld aborted\n", version,
              p, exhausted, aborted);
  std::printf("{\"parked_pulls\": %ld, \"refused\": %ld, \"aborted\": %ld}\n", p, exhausted,
              aborted);
  return true;
}

// The barrage: `n` bad messages, in batches of 100 whose replies are awaited.
bool Barrage(zmq::context_t* ctx, const std::string& endpoint, const std::string& token, long n) {
  auto ch = eps::Channel::Connect(ctx, endpoint);
  if (!ch.ok()) return false;
  zmq::socket_t& s = (*ch)->socket();
  const std::vector<std::vector<std::string>> kinds = BadKinds(token);
  const auto start = std::chrono::steady_clock::now();
  long sent = 0, errors = 0;
  while (sent < n) {
    const long batch = std::min(100L, n - sent);
    for (long i = 0; i < batch; ++i, ++sent) {
      SendFrames(s, kinds[sent % kinds.size()]);
    }
    for (long i = 0; i < batch; ++i) {
      auto in = (*ch)->Receive(std::chrono::milliseconds(10000));
      if (!in.ok()) {
        std::printf("FAIL barrage: no reply after %ld messages: %s\n", sent,
                    in.status().ToString().c_str());
        return false;
      }
      // An error, or (a replayed push the shard can read) a reply that accepted nothing.
      const auto* pushed =
          in->envelope.ok() ? std::get_if<eps::PushReply>(&in->envelope->body) : nullptr;
      if (in->envelope.ok() && (std::get_if<eps::ErrorReply>(&in->envelope->body) != nullptr ||
                                (pushed != nullptr && pushed->accepted == 0)))
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
  long barrage = 0, connections = 0, oversized = 0, parked = 0, multipart = 0;
  long parked_version = 1L << 30;
  for (bool flag = true; flag && argc > 2;) {
    const char* a = argv[argc - 1];
    flag = false;
    for (auto [name, into] : {std::pair<const char*, long*>{"--barrage=", &barrage},
                              {"--connections=", &connections},
                              {"--oversized=", &oversized},
                              {"--parked_pulls=", &parked},
                              {"--parked_version=", &parked_version},
                              {"--multipart_mib=", &multipart}}) {
      if (std::strncmp(a, name, std::strlen(name)) == 0) {
        *into = std::strtol(a + std::strlen(name), nullptr, 10);
        --argc;
        flag = true;
        break;
      }
    }
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
  if (barrage > 0 || connections > 0 || oversized > 0 || parked > 0 || multipart > 0) {
    bool ok = true;
    if (barrage > 0) ok &= Barrage(&ctx, endpoint, token, barrage);
    if (connections > 0) ok &= Connections(&ctx, endpoint, token, connections);
    if (oversized > 0) ok &= Oversized(&ctx, endpoint, oversized);
    if (parked > 0) ok &= ParkedPulls(&ctx, endpoint, token, parked, parked_version);
    if (multipart > 0) ok &= Multipart(&ctx, endpoint, multipart);
    return ok ? 0 : 1;
  }
  std::mt19937_64 rng(42);  // the test's own randomness; nothing here needs portable bits
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };

  const eps::Push push = SmallPush();
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
