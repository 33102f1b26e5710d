// Tests for the ZeroMQ channel (schema/channel.h): ROUTER/DEALER round trips
// over tcp and ipc, large chunks byte-exact, errors as Status, timeouts, and a
// server that survives garbage from a peer. Servers run on a std::async thread
// that owns its channel; every wait is bounded.
#include "schema/channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/rejections.h"

namespace eps {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kWait(20000);  // generous: sanitizer builds on a busy machine

Channel::Options TestOptions() {
  Channel::Options o;
  o.linger_ms = 0;  // never hold the test up at close
  return o;
}

std::unique_ptr<Channel> BindOrDie(zmq::context_t* ctx, const std::string& endpoint) {
  auto ch = Channel::Bind(ctx, endpoint, TestOptions());
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  return ch.ok() ? std::move(ch).value() : nullptr;
}

std::unique_ptr<Channel> ConnectOrDie(zmq::context_t* ctx, const std::string& endpoint) {
  auto ch = Channel::Connect(ctx, endpoint, TestOptions());
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  return ch.ok() ? std::move(ch).value() : nullptr;
}

// Runs `handle` on the next `n` messages the server receives, answering each with
// what it returns, on a thread of its own. The future holds the first failure.
std::future<Status> Serve(Channel* server, int n, std::function<Body(const Envelope&)> handle) {
  return std::async(std::launch::async, [server, n, handle]() -> Status {
    for (int i = 0; i < n; ++i) {
      auto in = server->Receive(kWait);
      if (!in.ok()) return in.status().WithContext("server receive");
      if (!in->envelope.ok()) return in->envelope.status().WithContext("server decode");
      EPS_RETURN_IF_ERROR(server->SendTo(in->peer, Envelope{"srv", handle(*in->envelope)}));
    }
    return OkStatus();
  });
}

Status Await(std::future<Status>& f) {
  if (f.wait_for(kWait + milliseconds(5000)) != std::future_status::ready)
    return DeadlineExceeded("server hung");
  return f.get();
}

ChunkBytes PatternChunk(uint32_t id, size_t size) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(size);
  uint32_t x = 2463534242u + id;
  for (uint8_t& b : *bytes) {  // xorshift: no period a misplaced copy could hide in
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return ChunkBytes{ChunkId(id), bytes->data(), bytes->size(), bytes};
}

TEST(Channel, RouterBoundOnPortZeroReportsItsRealPort) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  const std::string ep = server->endpoint();
  const std::string prefix = "tcp://127.0.0.1:";
  ASSERT_EQ(ep.compare(0, prefix.size(), prefix), 0) << ep;
  const std::string port = ep.substr(prefix.size());
  ASSERT_FALSE(port.empty());
  EXPECT_EQ(port.find_first_not_of("0123456789"), std::string::npos) << ep;
  const long p = std::strtol(port.c_str(), nullptr, 10);
  EXPECT_GT(p, 0);
  EXPECT_LT(p, 65536);

  // A second channel on port 0 gets a port of its own.
  auto other = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other->endpoint(), ep);
}

TEST(Channel, BindOnBadEndpointIsAStatus) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto again = Channel::Bind(&ctx, server->endpoint(), TestOptions());  // port taken
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE(Channel::Bind(&ctx, "nonsense://x", TestOptions()).ok());
  EXPECT_FALSE(Channel::Connect(&ctx, "nonsense://x", TestOptions()).ok());
}

TEST(Channel, CallRoundTripsThroughRouter) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->endpoint(), server->endpoint());
  auto done = Serve(server.get(), 2, [](const Envelope& e) -> Body {
    const auto& reg = std::get<RegisterWorker>(e.body);
    return RegisterShard{ShardId(reg.pid), e.token + "/" + reg.host, Step(-1)};
  });
  for (uint32_t pid : {7u, 8u}) {
    auto reply = Call(client.get(), Envelope{"tok", RegisterWorker{"host-a", pid}}, kWait);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->token, "srv");
    const auto* shard = std::get_if<RegisterShard>(&reply->body);
    ASSERT_NE(shard, nullptr) << BodyName(reply->body);
    EXPECT_EQ(shard->shard, ShardId(pid));
    EXPECT_EQ(shard->address, "tok/host-a");
  }
  EXPECT_TRUE(Await(done).ok());
}

TEST(Channel, SixteenMebibyteChunkArrivesByteExactBothWays) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  const ChunkBytes big = PatternChunk(3, 16 << 20);
  const ChunkBytes small = PatternChunk(4, 100);  // below the copy threshold
  // The server checks what came in and sends the received frames straight back.
  auto done = std::async(std::launch::async, [&]() -> Status {
    auto in = server->Receive(kWait);
    if (!in.ok()) return in.status();
    if (!in->envelope.ok()) return in->envelope.status();
    const auto* push = std::get_if<Push>(&in->envelope->body);
    if (push == nullptr || push->chunks.size() != 2) return Internal("not the push that was sent");
    for (size_t i = 0; i < 2; ++i) {
      const ChunkBytes& want = i == 0 ? big : small;
      const ChunkBytes& got = push->chunks[i];
      if (got.chunk != want.chunk || got.size != want.size ||
          std::memcmp(got.data, want.data, want.size) != 0) {
        return DataLoss("chunk " + std::to_string(i) + " arrived changed");
      }
    }
    return server->SendTo(in->peer, Envelope{"", PullReply{push->step, push->chunks}});
  });
  Push push;
  push.step = Step(12);
  push.block = Block{0, 2};
  push.chunks = {big, small};
  auto reply = Call(client.get(), Envelope{"t", push}, kWait);
  ASSERT_TRUE(Await(done).ok());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  const auto& back = std::get<PullReply>(reply->body);
  EXPECT_EQ(back.version, Step(12));
  ASSERT_EQ(back.chunks.size(), 2u);
  ASSERT_EQ(back.chunks[0].size, big.size);
  EXPECT_EQ(back.chunks[0].chunk, big.chunk);
  EXPECT_EQ(std::memcmp(back.chunks[0].data, big.data, big.size), 0);
  EXPECT_NE(back.chunks[0].data, big.data);  // it came over the wire
  ASSERT_EQ(back.chunks[1].size, small.size);
  EXPECT_EQ(std::memcmp(back.chunks[1].data, small.data, small.size), 0);
}

TEST(Channel, ErrorReplyComesBackAsTheStatusOfCall) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  auto done = Serve(server.get(), 2, [](const Envelope& e) -> Body {
    if (std::get<Shutdown>(e.body).reason == "ok-code")
      return ErrorReply{StatusCode::kOk, "not an error"};
    return ErrorReply{StatusCode::kFailedPrecondition, "step 3 is over"};
  });
  auto reply = Call(client.get(), Envelope{"t", Shutdown{"x"}}, kWait);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(reply.status().message(), "step 3 is over");
  // An "error" that claims OK must not pass for a successful reply.
  auto odd = Call(client.get(), Envelope{"t", Shutdown{"ok-code"}}, kWait);
  EXPECT_FALSE(odd.ok());
  EXPECT_TRUE(Await(done).ok());
}

TEST(Channel, ReceiveWithNothingSentTimesOut) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  for (Channel* ch : {server.get(), client.get()}) {
    auto in = ch->Receive(milliseconds(10));
    ASSERT_FALSE(in.ok());
    EXPECT_EQ(in.status().code(), StatusCode::kDeadlineExceeded);
    auto now = ch->TryReceive();
    ASSERT_FALSE(now.ok());
    EXPECT_EQ(now.status().code(), StatusCode::kDeadlineExceeded);
  }
  // A Call nobody answers ends at its deadline too.
  auto reply = Call(client.get(), Envelope{"t", Shutdown{"x"}}, milliseconds(10));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(Channel, AwaitReadableNamesTheChannelWithAMessageAndLeavesItThere) {
  zmq::context_t ctx;
  auto first = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  auto second = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  auto a = ConnectOrDie(&ctx, first->endpoint());
  auto b = ConnectOrDie(&ctx, second->endpoint());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (milliseconds timeout : {milliseconds(0), milliseconds(10)}) {
    auto none = AwaitReadable({a.get(), b.get()}, timeout);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  }
  // Only b's server answers: b is named, and the message stays for Receive.
  ASSERT_TRUE(b->Send(Envelope{"t", Shutdown{"to b"}}).ok());
  auto in = second->Receive(kWait);
  ASSERT_TRUE(in.ok() && in->envelope.ok());
  ASSERT_TRUE(second->SendTo(in->peer, Envelope{"srv", Shutdown{"from b"}}).ok());
  auto ready = AwaitReadable({a.get(), b.get()}, kWait);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(*ready, 1u);
  auto again = AwaitReadable({a.get(), b.get()}, milliseconds(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 1u);
  auto reply = b->TryReceive();
  ASSERT_TRUE(reply.ok() && reply->envelope.ok());
  EXPECT_EQ(std::get<Shutdown>(reply->envelope->body).reason, "from b");
  EXPECT_EQ(AwaitReadable({a.get(), b.get()}, milliseconds(0)).status().code(),
            StatusCode::kDeadlineExceeded);
}

TEST(Channel, ADealerCountsTheLossOfItsConnectionAndReachesTheServersSuccessor) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  const std::string endpoint = server->endpoint();
  auto client = ConnectOrDie(&ctx, endpoint);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Envelope{"t", Shutdown{"to the first"}}).ok());
  auto in = server->Receive(kWait);
  ASSERT_TRUE(in.ok() && in->envelope.ok());
  EXPECT_EQ(client->Disconnects(), 0u);
  server.reset();  // as its process ending: what it owed the client never comes
  // The event comes from ZeroMQ's I/O thread: waited for on the monitor, bounded.
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (client->Disconnects() == 0 && std::chrono::steady_clock::now() < deadline) {
    (void)AwaitReadable({client.get()}, milliseconds(10));
  }
  EXPECT_EQ(client->Disconnects(), 1u);
  // A successor bound at the same endpoint (a restarted shard) gets what is sent from now on.
  auto successor = BindOrDie(&ctx, endpoint);
  ASSERT_NE(successor, nullptr);
  ASSERT_TRUE(client->Send(Envelope{"t", Shutdown{"to the successor"}}).ok());
  auto again = successor->Receive(kWait);
  ASSERT_TRUE(again.ok() && again->envelope.ok());
  EXPECT_EQ(std::get<Shutdown>(again->envelope->body).reason, "to the successor");
  EXPECT_EQ(client->Disconnects(), 1u);
}

TEST(Channel, GarbageFromAPeerIsAnIncomingWithAnErrorAndTheRouterKeepsServing) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(server->endpoint());
  const std::string junk = "this is not a capnp message";
  ASSERT_TRUE(raw.send(zmq::buffer(junk), zmq::send_flags::sndmore));
  ASSERT_TRUE(raw.send(zmq::buffer(std::string("second part")), zmq::send_flags::none));

  auto in = server->Receive(kWait);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_FALSE(in->peer.empty());
  ASSERT_FALSE(in->envelope.ok());
  EXPECT_EQ(in->envelope.status().code(), StatusCode::kProtocolError);
  const std::string garbage_peer = in->peer;

  // The same raw peer now sends a well-formed message: it decodes.
  auto frames = Encode(Envelope{"t", RegisterWorker{"raw", 1}});
  ASSERT_TRUE(frames.ok());
  for (size_t i = 0; i < frames->size(); ++i) {
    const Frame& f = (*frames)[i];
    const auto flags = i + 1 < frames->size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    ASSERT_TRUE(raw.send(zmq::message_t(f.data, f.size), flags));
  }
  auto good = server->Receive(kWait);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE(good->envelope.ok()) << good->envelope.status().ToString();
  EXPECT_EQ(good->peer, garbage_peer);
  EXPECT_EQ(std::get<RegisterWorker>(good->envelope->body).host, "raw");

  // And a proper client is served as usual, with an answer routed back to it.
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  auto done = Serve(server.get(), 1, [](const Envelope&) -> Body {
    return PushReply{Step(1), 2, 3};
  });
  auto reply = Call(client.get(), Envelope{"t", Pull{Step(1), {}}}, kWait);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(std::get<PushReply>(reply->body).accepted, 2u);
  EXPECT_TRUE(Await(done).ok());
}

TEST(Channel, SendToUnknownPeerIsUnavailable) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  Status s = server->SendTo("no-such-peer", Envelope{"t", Shutdown{"x"}});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  // The wrong call for the socket kind is refused, not sent.
  EXPECT_EQ(server->Send(Envelope{"t", Shutdown{"x"}}).code(), StatusCode::kFailedPrecondition);
  auto client = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->SendTo("x", Envelope{"t", Shutdown{"x"}}).code(),
            StatusCode::kFailedPrecondition);
}

TEST(Channel, IpcEndpointInTempDirWorks) {
  char dir_template[] = "/tmp/eps_channel_test_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  ASSERT_NE(dir, nullptr);
  const std::string path = std::string(dir) + "/router.sock";
  {
    zmq::context_t ctx;
    auto server = BindOrDie(&ctx, "ipc://" + path);
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(server->endpoint(), "ipc://" + path);
    auto client = ConnectOrDie(&ctx, server->endpoint());
    ASSERT_NE(client, nullptr);
    auto done = Serve(server.get(), 1, [](const Envelope& e) -> Body {
      return Shutdown{"echo " + std::get<Shutdown>(e.body).reason};
    });
    auto reply = Call(client.get(), Envelope{"t", Shutdown{"over ipc"}}, kWait);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(std::get<Shutdown>(reply->body).reason, "echo over ipc");
    EXPECT_TRUE(Await(done).ok());
  }
  std::remove(path.c_str());
  EXPECT_EQ(rmdir(dir), 0);
}

TEST(AdmitIncoming, RefusesWhatDidNotDecodeOrLacksTheTokenAndCountsIt) {
  FakeClock clock;
  Rejections rejections(RejectionOptions(), &clock);
  Channel::Incoming bad{"peer", "", ProtocolError("garbage")};
  EXPECT_EQ(AdmitIncoming(bad, nullptr, &rejections).code(), StatusCode::kProtocolError);
  Channel::Incoming wrong{"peer", "", Unauthenticated("wrong job token")};  // Decode's token check
  EXPECT_EQ(AdmitIncoming(wrong, nullptr, &rejections).code(), StatusCode::kUnauthenticated);
  Channel::Incoming right{"peer", "", Envelope{"tok", Heartbeat{WorkerId(0)}}};
  EXPECT_TRUE(AdmitIncoming(right, nullptr, &rejections).ok());
  EXPECT_EQ(rejections.count("peer", RejectReason::kBadEnvelope), 1u);
  EXPECT_EQ(rejections.count("peer", RejectReason::kWrongToken), 1u);
  EXPECT_EQ(rejections.total(), 2u);
}

// A ROUTER with Options::token hands a message with another token (or none) to
// its server as Unauthenticated; one with the token decodes. Without the option
// every token passes.
TEST(ChannelToken, AServersTokenIsCheckedAsMessagesAreReceived) {
  zmq::context_t ctx;
  Channel::Options o = TestOptions();
  o.token = "tok";
  auto bound = Channel::Bind(&ctx, "tcp://127.0.0.1:0", o);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  auto server = std::move(bound).value();
  auto open = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  auto client = ConnectOrDie(&ctx, server->endpoint());
  auto open_client = ConnectOrDie(&ctx, open->endpoint());
  for (const char* token : {"other", "", "tok"}) {
    ASSERT_TRUE(client->Send(Envelope{token, Heartbeat{WorkerId(3)}}).ok());
    auto in = server->Receive(kWait);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    if (std::string(token) == "tok") {
      ASSERT_TRUE(in->envelope.ok()) << in->envelope.status().ToString();
      EXPECT_EQ(std::get<Heartbeat>(in->envelope->body).worker, WorkerId(3));
    } else {
      EXPECT_EQ(in->envelope.status().code(), StatusCode::kUnauthenticated) << token;
    }
    ASSERT_TRUE(open_client->Send(Envelope{token, Heartbeat{WorkerId(4)}}).ok());
    auto any = open->Receive(kWait);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    ASSERT_TRUE(any->envelope.ok()) << any->envelope.status().ToString();
    EXPECT_EQ(any->envelope->token, token);
  }
}

// Limits (Options): a frame over max_message_bytes never reaches the server, its
// sender's connection is closed and counted; the largest legit frame of a job
// (a push of one whole chunk) passes; a full per-peer queue refuses a reply.

double CounterValue(const Metrics& m, const std::string& series) {
  const std::string text = m.Render();
  const size_t at = text.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 1));
}

TEST(Channel, FrameOverTheLimitIsDroppedAndItsConnectionCountedClosed) {
  zmq::context_t ctx;
  Metrics metrics;
  Channel::Options o = TestOptions();
  o.max_message_bytes = 4096;
  o.metrics = &metrics;
  o.labels = {{"shard", "0"}};
  auto bound = Channel::Bind(&ctx, "tcp://127.0.0.1:0", o);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  Channel* server = bound->get();
  const std::string closed = R"(eps_connections_total{event="closed",shard="0"})";
  const std::string accepted = R"(eps_connections_total{event="accepted",shard="0"})";

  auto big = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(big, nullptr);
  big->socket().send(zmq::buffer(std::string(4097, 'x')), zmq::send_flags::none);
  // The server never sees it; the connection it came on is closed (and counted).
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (CounterValue(metrics, closed) < 1 && std::chrono::steady_clock::now() < deadline) {
    auto in = server->Receive(milliseconds(20));
    EXPECT_FALSE(in.ok()) << "an oversized frame was delivered";
  }
  EXPECT_GE(CounterValue(metrics, closed), 1);
  EXPECT_GE(CounterValue(metrics, accepted), 1);

  // A frame at the limit, and a message whose frames add up to more than it, are served.
  auto fits = ConnectOrDie(&ctx, server->endpoint());
  ASSERT_NE(fits, nullptr);
  fits->socket().send(zmq::buffer(std::string(4096, 'y')), zmq::send_flags::sndmore);
  fits->socket().send(zmq::buffer(std::string(4096, 'z')), zmq::send_flags::none);
  auto in = server->Receive(kWait);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_FALSE(in->envelope.ok());  // not an envelope, but it arrived
}

TEST(Channel, AMessageOverTheSendLimitIsNotSentAndOneAtItIs) {
  zmq::context_t ctx;
  auto server = BindOrDie(&ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  Channel::Options o = TestOptions();
  o.max_send_bytes = 100000;
  auto client = Channel::Connect(&ctx, server->endpoint(), o).value();
  const auto file = std::make_shared<std::string>(99000, 'm');
  FetchModelReply reply{std::string(64, 'a'), 0, 1 << 20, file->data(), file->size(), file};
  ASSERT_TRUE(client->Send(Envelope{"", reply}).ok());  // 99000 bytes and the envelope
  reply.size = 100000;
  reply.owner = std::make_shared<std::string>(100000, 'n');
  reply.data = static_cast<const std::string*>(reply.owner.get())->data();
  Status st = client->Send(Envelope{"", reply});
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("fetchModelReply"), std::string::npos) << st.ToString();
  auto in = server->Receive(kWait);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_TRUE(in->envelope.ok()) << in->envelope.status().ToString();
  EXPECT_EQ(std::get<FetchModelReply>(in->envelope->body).size, 99000u);
  EXPECT_FALSE(server->Receive(milliseconds(100)).ok()) << "the message over the limit came";
}

TEST(Channel, LargestLegitPushPassesTheLimitMadeForItsJob) {
  constexpr int64_t kChunkElems = 1 << 20;
  zmq::context_t ctx;
  Channel::Options o = TestOptions();
  o.max_message_bytes = LargestLegitFrame(kChunkElems);
  EXPECT_GE(o.max_message_bytes, 4 * kChunkElems);
  EXPECT_GE(o.max_message_bytes, static_cast<int64_t>(DecodeLimits().max_header_bytes));
  auto bound = Channel::Bind(&ctx, "tcp://127.0.0.1:0", o);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  auto client = ConnectOrDie(&ctx, (*bound)->endpoint());
  ASSERT_NE(client, nullptr);
  auto owner = std::make_shared<std::vector<float>>(kChunkElems, 0.5f);
  Push push{Epoch(1), Step(0), Block{0, 1}, {}};
  push.chunks.push_back({ChunkId(0), owner->data(), owner->size() * sizeof(float), owner});
  ASSERT_TRUE(client->Send(Envelope{"t", push}).ok());
  auto in = (*bound)->Receive(kWait);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_TRUE(in->envelope.ok()) << in->envelope.status().ToString();
  const auto& got = std::get<Push>(in->envelope->body);
  ASSERT_EQ(got.chunks.size(), 1u);
  EXPECT_EQ(got.chunks[0].size, owner->size() * sizeof(float));
}

TEST(Channel, ReplyToAPeerWhoseQueueIsFullIsUnavailable) {
  zmq::context_t ctx;
  Channel::Options o = TestOptions();
  o.send_hwm = o.receive_hwm = 10;
  auto bound = Channel::Bind(&ctx, "tcp://127.0.0.1:0", o);
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  Channel::Options co = TestOptions();
  co.receive_hwm = 10;  // the peer reads nothing: its queue fills, then the server's
  auto peer = Channel::Connect(&ctx, (*bound)->endpoint(), co);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE((*peer)->Send(Envelope{"t", JobInfo{}}).ok());
  auto in = (*bound)->Receive(kWait);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  const std::string payload(64 << 10, 'p');  // fills the TCP buffers between them quickly
  Status st;
  int sent = 0;
  for (; sent < 100000 && st.ok(); ++sent)
    st = (*bound)->SendTo(in->peer, Envelope{"t", Shutdown{payload}});
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << "sent " << sent << " without a refusal";
  EXPECT_GT(sent, 10) << "refused before the queues were full: " << st.ToString();
}

// A channel closed while its socket still lingers with messages for a server that then goes
// away: the loss of that connection is an event for a monitor no one reads any more. ZeroMQ's
// I/O thread sends monitor events blocking, so it stopped there for good and every other socket
// of the process stopped with it (a worker's registration never left after a removed shard
// exited). The other channels keep talking.
TEST(Channel, AClosedChannelWhoseSocketLingersNeverStallsTheOthers) {
  auto* ctx = new zmq::context_t;  // leaked when its I/O thread is stuck: terminating it would hang
  zmq::socket_t sink(*ctx, zmq::socket_type::router);  // reads one message, then nothing
  sink.set(zmq::sockopt::rcvhwm, 1);
  sink.set(zmq::sockopt::linger, 0);
  sink.bind("tcp://127.0.0.1:*");
  Channel::Options lingering = TestOptions();
  lingering.linger_ms = 1000;
  auto closed = Channel::Connect(ctx, sink.get(zmq::sockopt::last_endpoint), lingering);
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  ASSERT_TRUE((*closed)->Send(Envelope{"t", Shutdown{"hello"}}).ok());
  zmq::pollitem_t item{static_cast<void*>(sink), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, kWait), 1);  // connected: the loss will be an event
  zmq::message_t part;
  do {
    ASSERT_TRUE(sink.recv(part));
  } while (part.more());
  const std::string payload(1 << 20, 'p');  // more than the TCP buffers hold: some stays queued
  for (int i = 0; i < 64; ++i) ASSERT_TRUE((*closed)->Send(Envelope{"t", Shutdown{payload}}).ok());
  closed->reset();  // lingers with what is queued
  sink.close();     // the connection is lost while it lingers

  auto server = BindOrDie(ctx, "tcp://127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  auto client = ConnectOrDie(ctx, server->endpoint());
  ASSERT_NE(client, nullptr);
  const auto until = std::chrono::steady_clock::now() + milliseconds(1500);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    ASSERT_TRUE(client->Send(Envelope{"t", Shutdown{std::to_string(i)}}).ok());
    auto in = server->Receive(milliseconds(5000));
    ASSERT_TRUE(in.ok() && in->envelope.ok()) << "message " << i << " never came";
  }
  client.reset();
  server.reset();
  delete ctx;
}
}  // namespace
}  // namespace eps
