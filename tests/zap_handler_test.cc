// Tests for the ZAP handler (schema/zap_handler.h) and CURVE channels
// (schema/channel.h, schema/curve.h): real ZeroMQ sockets over tcp loopback in
// one context, as a CURVE server process has them. A client with an allowed
// key is served; one with an unknown key, no key, or a key revoked by a change
// of the allowed keys is refused, and its own channel says so (PermissionDenied)
// instead of waiting. Every wait is bounded.
#include "schema/zap_handler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "schema/channel.h"
#include "schema/curve.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kWait(20000);  // generous: sanitizer builds on a busy machine

CurveKeyPair NewKeys() {
  auto keys = GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return *keys;
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A CURVE server channel with its ZAP handler, both on `ctx`.
struct Server {
  std::unique_ptr<ZapHandler> zap;
  std::unique_ptr<Channel> channel;
};

Server StartServer(zmq::context_t* ctx, const CurveKeyPair& keys, const std::string& allowed) {
  Server s;
  auto zap = ZapHandler::Start(ctx, {allowed, {keys.public_key}});
  EXPECT_TRUE(zap.ok()) << zap.status().ToString();
  if (zap.ok()) s.zap = std::move(zap).value();
  Channel::Options o;
  o.linger_ms = 0;
  o.curve.keys = keys;
  auto ch = Channel::Bind(ctx, "tcp://127.0.0.1:0", o);
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  if (ch.ok()) s.channel = std::move(ch).value();
  return s;
}

std::unique_ptr<Channel> Client(zmq::context_t* ctx, const std::string& endpoint,
                                const CurveKeyPair* keys, const std::string& server_key) {
  Channel::Options o;
  o.linger_ms = 0;
  if (keys != nullptr) {
    o.curve.keys = *keys;
    o.curve.server_key = server_key;
  }
  auto ch = Channel::Connect(ctx, endpoint, o);
  EXPECT_TRUE(ch.ok()) << ch.status().ToString();
  return ch.ok() ? std::move(ch).value() : nullptr;
}

// Sends one request from `client`; returns what the client's wait for an
// answer ends with, the server answering whatever reaches it.
Status RoundTrip(Server* server, Channel* client) {
  EPS_RETURN_IF_ERROR(client->Send(Envelope{"t", JobInfo{}}));
  // The server answers if the request reaches it; the client's wait ends with
  // the answer or with its handshake's refusal.
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto in = server->channel->Receive(milliseconds(20));
    if (in.ok()) EPS_RETURN_IF_ERROR(server->channel->SendTo(in->peer, Envelope{"t", JobInfo{}}));
    auto reply = client->Receive(milliseconds(20));
    if (reply.ok()) return OkStatus();
    if (reply.status().code() != StatusCode::kDeadlineExceeded) return reply.status();
  }
  return DeadlineExceeded("neither an answer nor a refusal");
}

TEST(ZapHandler, ServesAnAllowedKeyAndRefusesAnUnknownOne) {
  TempDir dir;
  const CurveKeyPair server_keys = NewKeys(), allowed = NewKeys(), unknown = NewKeys();
  WriteText(dir.path() + "/allowed", "# the job's workers\n" + allowed.public_key + "\n");
  zmq::context_t ctx;
  Server server = StartServer(&ctx, server_keys, dir.path() + "/allowed");
  ASSERT_NE(server.channel, nullptr);
  const std::string ep = server.channel->endpoint();

  auto good = Client(&ctx, ep, &allowed, server_keys.public_key);
  EXPECT_TRUE(RoundTrip(&server, good.get()).ok());

  auto bad = Client(&ctx, ep, &unknown, server_keys.public_key);
  Status refused = RoundTrip(&server, bad.get());
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("ZAP status 400"), std::string::npos) << refused.ToString();
  // It stays refused, and the allowed client is still served.
  EXPECT_EQ(bad->HandshakeStatus().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(RoundTrip(&server, good.get()).ok());
  EXPECT_GE(server.zap->refused(), 1u);
  EXPECT_GE(server.zap->accepted(), 1u);
}

TEST(ZapHandler, RefusesAClientWithoutAKeyAsADisagreementOnCurve) {
  TempDir dir;
  const CurveKeyPair server_keys = NewKeys();
  WriteText(dir.path() + "/allowed", "");
  zmq::context_t ctx;
  Server server = StartServer(&ctx, server_keys, dir.path() + "/allowed");
  ASSERT_NE(server.channel, nullptr);
  auto plain = Client(&ctx, server.channel->endpoint(), nullptr, "");
  Status refused = RoundTrip(&server, plain.get());
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_NE(refused.message().find("disagree on CURVE"), std::string::npos) << refused.ToString();
  // A send after the refusal fails too. ZeroMQ may drop a refused connection and its queue, and
  // a DEALER's blocking send without one waited for ever (RoundTrip's, on a busy machine, until
  // ctest killed the test).
  std::promise<Status> sent;
  std::future<Status> result = sent.get_future();
  std::thread([&] { sent.set_value(plain->Send(Envelope{"t", JobInfo{}})); }).detach();
  if (result.wait_for(kWait) != std::future_status::ready) {
    ADD_FAILURE() << "the send still waits for a connection that never comes";
    std::abort();  // the thread cannot be stopped, nor the context closed under it
  }
  EXPECT_EQ(result.get().code(), StatusCode::kPermissionDenied);
}

TEST(ZapHandler, RefusesAKeyRevokedByRemovingItsFileWithoutARestart) {
  TempDir dir;
  const std::string allowed_dir = dir.path() + "/allowed";
  ASSERT_EQ(mkdir(allowed_dir.c_str(), 0700), 0);
  const CurveKeyPair server_keys = NewKeys(), worker = NewKeys(), other = NewKeys();
  ASSERT_TRUE(WriteCurveKeyPair(allowed_dir, "worker0", worker).ok());
  ASSERT_TRUE(WriteCurveKeyPair(allowed_dir, "worker1", other).ok());
  zmq::context_t ctx;
  Server server = StartServer(&ctx, server_keys, allowed_dir);
  ASSERT_NE(server.channel, nullptr);
  const std::string ep = server.channel->endpoint();
  auto before = Client(&ctx, ep, &worker, server_keys.public_key);
  EXPECT_TRUE(RoundTrip(&server, before.get()).ok());

  ASSERT_EQ(std::remove((allowed_dir + "/worker0.pub").c_str()), 0);  // revoked
  auto after = Client(&ctx, ep, &worker, server_keys.public_key);
  EXPECT_EQ(RoundTrip(&server, after.get()).code(), StatusCode::kPermissionDenied);
  auto still = Client(&ctx, ep, &other, server_keys.public_key);
  EXPECT_TRUE(RoundTrip(&server, still.get()).ok());

  ASSERT_TRUE(WriteCurveKeyPair(dir.path(), "again", worker).ok());  // allowed again
  ASSERT_EQ(std::rename((dir.path() + "/again.pub").c_str(), (allowed_dir + "/w0.pub").c_str()), 0);
  auto readmitted = Client(&ctx, ep, &worker, server_keys.public_key);
  EXPECT_TRUE(RoundTrip(&server, readmitted.get()).ok());
}

TEST(ZapHandler, FailsClosedWhileTheAllowedKeysCannotBeRead) {
  TempDir dir;
  const CurveKeyPair server_keys = NewKeys(), worker = NewKeys();
  const std::string allowed = dir.path() + "/allowed";
  WriteText(allowed, worker.public_key + "\n");
  zmq::context_t ctx;
  Server server = StartServer(&ctx, server_keys, allowed);
  ASSERT_NE(server.channel, nullptr);
  WriteText(allowed, worker.public_key + "\nnot a key\n");
  auto refused = Client(&ctx, server.channel->endpoint(), &worker, server_keys.public_key);
  EXPECT_EQ(RoundTrip(&server, refused.get()).code(), StatusCode::kPermissionDenied);
  // The server's own key pair (the job's servers share it) is always allowed.
  auto own = Client(&ctx, server.channel->endpoint(), &server_keys, server_keys.public_key);
  EXPECT_TRUE(RoundTrip(&server, own.get()).ok());
}

TEST(ZapHandler, StartRefusesBadKeysAndASecondHandlerOnTheContext) {
  TempDir dir;
  WriteText(dir.path() + "/bad", "# comment\nnot a key\n");
  zmq::context_t ctx;
  auto bad = ZapHandler::Start(&ctx, {dir.path() + "/bad", {}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bad:2"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(ZapHandler::Start(&ctx, {dir.path() + "/missing", {}}).status().code(),
            StatusCode::kNotFound);
  WriteText(dir.path() + "/good", "");
  auto first = ZapHandler::Start(&ctx, {dir.path() + "/good", {}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(ZapHandler::Start(&ctx, {dir.path() + "/good", {}}).status().code(),
            StatusCode::kAlreadyExists);
}

TEST(CurveKeys, AKeyPairIsWrittenOnceAndReadBack) {
  TempDir dir;
  const CurveKeyPair keys = NewKeys();
  ASSERT_TRUE(WriteCurveKeyPair(dir.path(), "w", keys).ok());
  struct stat st;
  ASSERT_EQ(stat((dir.path() + "/w.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(WriteCurveKeyPair(dir.path(), "w", NewKeys()).code(), StatusCode::kAlreadyExists);
  auto read = ReadCurveSecretKey(dir.path() + "/w.key");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, keys.public_key);  // derived from the secret key
  EXPECT_EQ(read->secret_key, keys.secret_key);
  EXPECT_EQ(*ReadCurvePublicKey(dir.path() + "/w.pub"), keys.public_key);
  EXPECT_FALSE(ParseCurveKey("short").ok());
  ASSERT_TRUE(WriteCurveKeyPair(dir.path() + "/new/keys", "w", keys).ok()) << "creates the folder";
  ASSERT_EQ(stat((dir.path() + "/new/keys").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(CurveKeys, JobCredentialsAreTheTokenAndTheKeysOfTheFlagsFiles) {
  TempDir dir;
  const CurveKeyPair keys = NewKeys();
  ASSERT_TRUE(WriteCurveKeyPair(dir.path(), "job", keys).ok());
  WriteText(dir.path() + "/token", "s3cret\n");
  auto plain = LoadJobCredentials(dir.path() + "/token", "", "");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->token, "s3cret");
  EXPECT_FALSE(plain->curve.enabled());
  auto secure = LoadJobCredentials("", dir.path() + "/job.key", "");
  ASSERT_TRUE(secure.ok()) << secure.status().ToString();
  EXPECT_EQ(secure->token, "");
  EXPECT_EQ(secure->curve.keys.public_key, keys.public_key);
  EXPECT_EQ(secure->curve.server_key, keys.public_key);  // the servers' own pair
  const Status missing = LoadJobCredentials(dir.path() + "/none", "", "").status();
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(dir.path() + "/none"), std::string::npos);
  EXPECT_FALSE(LoadJobCredentials(dir.path() + "/token", dir.path() + "/token", "").ok());
}

TEST(ZapHandler, EveryMessageOfAClientCarriesItsKeyAsUserId) {
  TempDir dir;
  const CurveKeyPair server_keys = NewKeys(), allowed = NewKeys();
  WriteText(dir.path() + "/allowed", allowed.public_key + "\n");
  zmq::context_t ctx;
  Server server = StartServer(&ctx, server_keys, dir.path() + "/allowed");
  ASSERT_NE(server.channel, nullptr);
  auto client = Client(&ctx, server.channel->endpoint(), &allowed, server_keys.public_key);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client->Send(Envelope{"t", JobInfo{}}).ok());
    auto in = server.channel->Receive(kWait);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    EXPECT_EQ(in->user_id, allowed.public_key);
  }
}

}  // namespace
}  // namespace eps
