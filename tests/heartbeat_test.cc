#include "worker/heartbeat.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace eps {
namespace {

using std::chrono::milliseconds;

// Waits (bounded) for the next heartbeat at `coordinator`; the beat's sender and worker id.
std::pair<std::string, WorkerId> NextBeat(Channel* coordinator) {
  for (int i = 0; i < 100; ++i) {
    StatusOr<Channel::Incoming> in = coordinator->Receive(milliseconds(100));
    if (!in.ok()) continue;
    EXPECT_TRUE(in->envelope.ok());
    EXPECT_EQ(in->envelope->token, "secret");
    const auto* beat = std::get_if<Heartbeat>(&in->envelope->body);
    if (beat != nullptr) return {in->peer, beat->worker};
  }
  ADD_FAILURE() << "no heartbeat within 10 s";
  return {"", WorkerId(0)};
}

bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(milliseconds(5));
  return done();
}

TEST(Heartbeater, BeatsForTheCurrentWorkerUntilStopped) {
  zmq::context_t context(1);
  auto coordinator = Channel::Bind(&context, "tcp://127.0.0.1:0");
  ASSERT_TRUE(coordinator.ok());
  auto hb = Heartbeater::Start(&context, (*coordinator)->endpoint(), "secret", milliseconds(20),
                               WorkerId(4));
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(NextBeat(coordinator->get()).second, WorkerId(4));
  EXPECT_EQ(NextBeat(coordinator->get()).second, WorkerId(4));
  (*hb)->SetWorker(WorkerId(9));
  // Beats sent before SetWorker may still arrive; then only the new id, on a fresh socket.
  std::pair<std::string, WorkerId> beat;
  do beat = NextBeat(coordinator->get());
  while (beat.second == WorkerId(4));
  EXPECT_EQ(beat.second, WorkerId(9));
  (*hb)->Stop();
  while ((*coordinator)->Receive(milliseconds(500)).ok()) {  // drain what was sent before Stop
  }
  EXPECT_FALSE((*coordinator)->Receive(milliseconds(200)).ok()) << "a beat after Stop()";
}

TEST(Heartbeater, ARefusalAsUnknownIsSeenAndASetWorkerClearsIt) {
  zmq::context_t context(1);
  auto coordinator = Channel::Bind(&context, "tcp://127.0.0.1:0");
  ASSERT_TRUE(coordinator.ok());
  auto hb = Heartbeater::Start(&context, (*coordinator)->endpoint(), "secret", milliseconds(20),
                               WorkerId(1));
  ASSERT_TRUE(hb.ok());
  // Another error does not mean "unknown": no refusal.
  auto [peer, id] = NextBeat(coordinator->get());
  ASSERT_TRUE((*coordinator)
                  ->SendTo(peer, Envelope{"", ErrorReply{StatusCode::kInvalidArgument, "bad"}})
                  .ok());
  NextBeat(coordinator->get());
  NextBeat(coordinator->get());
  EXPECT_FALSE((*hb)->refused());
  ASSERT_TRUE((*coordinator)
                  ->SendTo(peer, Envelope{"", ErrorReply{StatusCode::kAborted, "unknown worker"}})
                  .ok());
  EXPECT_TRUE(Eventually([&] { return (*hb)->refused(); }));
  (*hb)->SetWorker(WorkerId(2));
  EXPECT_FALSE((*hb)->refused());
}

}  // namespace
}  // namespace eps
