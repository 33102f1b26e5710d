// Tests for the rejection counter and its rate-limited log decision
// (common/rejections.h), with a FakeClock.
#include "common/rejections.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace eps {
namespace {

using std::chrono::milliseconds;

RejectionOptions Options(Metrics* metrics = nullptr) {
  RejectionOptions o;
  o.lines_per_second = 2;
  o.burst = 4;
  o.summary_every = milliseconds(10000);
  o.max_peers = 2;
  o.metrics = metrics;
  o.labels = {{"shard", "3"}};
  return o;
}

TEST(Rejections, CountsEveryRejectionPerPeerAndReason) {
  FakeClock clock;
  Rejections r(Options(), &clock);
  for (int i = 0; i < 5; ++i) (void)r.Record("a", RejectReason::kBadEnvelope);
  (void)r.Record("a", RejectReason::kWrongToken);
  (void)r.Record("b", RejectReason::kWrongToken);
  EXPECT_EQ(r.total(), 7u);
  EXPECT_EQ(r.count(RejectReason::kBadEnvelope), 5u);
  EXPECT_EQ(r.count(RejectReason::kWrongToken), 2u);
  EXPECT_EQ(r.count(RejectReason::kUnserved), 0u);
  EXPECT_EQ(r.count("a", RejectReason::kBadEnvelope), 5u);
  EXPECT_EQ(r.count("a", RejectReason::kWrongToken), 1u);
  EXPECT_EQ(r.count("b", RejectReason::kBadEnvelope), 0u);
}

TEST(Rejections, PeersPastTheLimitAreCountedTogether) {
  FakeClock clock;
  Rejections r(Options(), &clock);
  (void)r.Record("a", RejectReason::kUnserved);
  (void)r.Record("b", RejectReason::kUnserved);
  (void)r.Record("c", RejectReason::kUnserved);
  (void)r.Record("d", RejectReason::kUnserved);
  EXPECT_EQ(r.count("a", RejectReason::kUnserved), 1u);
  EXPECT_EQ(r.count("c", RejectReason::kUnserved), 2u);  // "other": c and d
  EXPECT_EQ(r.count("zzz", RejectReason::kUnserved), 2u);
}

TEST(Rejections, LogsABurstThenAtTheRefillRate) {
  FakeClock clock;
  Rejections r(Options(), &clock);
  int logged = 0;
  for (int i = 0; i < 100; ++i) logged += r.Record("a", RejectReason::kBadEnvelope);
  EXPECT_EQ(logged, 4);  // the burst
  clock.Advance(milliseconds(500));  // one token at 2 per second
  logged = 0;
  for (int i = 0; i < 100; ++i) logged += r.Record("a", RejectReason::kBadEnvelope);
  EXPECT_EQ(logged, 1);
  // A barrage over 20 s: at most burst + rate * seconds lines.
  logged = 0;
  for (int i = 0; i < 20000; ++i) {
    clock.Advance(milliseconds(1));
    logged += r.Record("a", RejectReason::kWrongToken);
  }
  EXPECT_GE(logged, 39);
  EXPECT_LE(logged, 41);
  EXPECT_EQ(r.total(), 20200u);
}

TEST(Rejections, SummarizesWhatWentUnloggedOncePerPeriod) {
  FakeClock clock;
  Rejections r(Options(), &clock);
  EXPECT_EQ(r.TakeSummary(), std::nullopt);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.Record("a", RejectReason::kBadEnvelope));
  EXPECT_EQ(r.TakeSummary(), std::nullopt) << "nothing was suppressed";
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(r.Record("a", RejectReason::kBadEnvelope));
  ASSERT_FALSE(r.Record("b", RejectReason::kUnserved));
  clock.Advance(milliseconds(9999));
  EXPECT_EQ(r.TakeSummary(), std::nullopt) << "not due yet";
  clock.Advance(milliseconds(1));
  EXPECT_EQ(r.TakeSummary(),
            std::optional<std::string>(
                "suppressed 4 rejections in the last 10 s: bad_envelope x 3, unserved_kind x 1"));
  EXPECT_EQ(r.TakeSummary(), std::nullopt) << "once";
}

TEST(Rejections, KeepsTheCounterOfEveryReasonFromZero) {
  FakeClock clock;
  Metrics metrics;
  Rejections r(Options(&metrics), &clock);
  (void)r.Record("a", RejectReason::kWrongToken);
  (void)r.Record("a", RejectReason::kWrongToken);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("eps_rejected_messages_total{reason=\"wrong_token\",shard=\"3\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("eps_rejected_messages_total{reason=\"bad_envelope\",shard=\"3\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("eps_rejected_messages_total{reason=\"refused\",shard=\"3\"} 0"),
            std::string::npos);
}

TEST(Rejections, NamesPeersInHex) {
  EXPECT_EQ(Rejections::PeerName(std::string("\x00\x8b\x45", 3)), "008b45");
}

}  // namespace
}  // namespace eps
