// Rejected messages (a bad envelope, a wrong token, a kind the process does
// not serve, a request it refuses), counted per (peer, reason) and logged at
// a bounded rate: a peer that sends thousands of bad messages a second must
// not fill the log. Each rejection is counted; a token bucket decides whether
// it gets a log line of its own (at most `lines_per_second` on average, bursts
// of `burst`), and the ones that did not are summarized at most every
// `summary_every`: "suppressed K rejections in the last S s: reason x n, ...".
//
// With a registry in the options the counts are also the counter
// eps_rejected_messages_total{reason=...} (plus `labels`), every reason from 0
// (docs/metrics.md). Time comes from the injected clock. Not thread-safe: the
// event loop that receives the messages owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/metrics.h"

namespace eps {

// Why a message was rejected; the `reason` label's values.
enum class RejectReason : uint8_t {
  kBadEnvelope = 0,  // it does not decode (codec.h: a ProtocolError)
  kWrongToken = 1,   // the job's token is missing or another
  kUnserved = 2,     // a message kind this process does not serve
  kRefused = 3,      // a request it refuses (a push it cannot accept)
  kRevoked = 4,      // from a CURVE key no longer allowed (schema/allowed_keys_watch.h)
  kOverLimit = 5,    // over a per-peer limit (pulls waiting at a shard)
};
constexpr int kRejectReasons = 6;
const char* RejectReasonName(RejectReason reason);

struct RejectionOptions {
  double lines_per_second = 5;  // log lines for single rejections, on average
  double burst = 20;            // ... in a burst
  std::chrono::milliseconds summary_every{10000};
  // Peers counted one by one; the rest are counted together as "other".
  size_t max_peers = 1024;
  Metrics* metrics = nullptr;  // null: no counter kept; must outlive this
  Labels labels;               // added to the counter's (e.g. shard="0")
};

class Rejections {
 public:
  Rejections(RejectionOptions options, const Clock* clock);

  // Counts a rejection of a message from `peer` (a ZeroMQ routing id, logged
  // in hex). True: log it now (the caller writes the line with what it knows
  // of the message); false: it is counted for the next summary.
  [[nodiscard]] bool Record(const std::string& peer, RejectReason reason);

  // The summary line due now, if any: some rejections went unlogged and
  // `summary_every` has passed since the last summary (or the first of them).
  // Call it often (each turn of the event loop).
  std::optional<std::string> TakeSummary();

  uint64_t total() const { return total_; }
  uint64_t count(RejectReason reason) const { return by_reason_[static_cast<int>(reason)]; }
  // Of one peer; peers past max_peers are under "other".
  uint64_t count(const std::string& peer, RejectReason reason) const;
  // How a peer's routing id appears in logs and in count(): hex.
  static std::string PeerName(const std::string& peer);

 private:
  const RejectionOptions options_;
  const Clock* const clock_;
  Counter* counters_[kRejectReasons] = {};
  uint64_t by_reason_[kRejectReasons] = {};
  uint64_t total_ = 0;
  std::map<std::pair<std::string, RejectReason>, uint64_t> by_peer_;  // by PeerName
  std::set<std::string> known_peers_;  // at most max_peers
  double tokens_;
  Clock::time_point refilled_;
  // Unlogged since the last summary, by reason, and when the first of them came.
  uint64_t suppressed_[kRejectReasons] = {};
  uint64_t suppressed_total_ = 0;
  std::optional<Clock::time_point> window_start_;
};

}  // namespace eps
