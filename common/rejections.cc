#include "common/rejections.h"

#include <algorithm>
#include <cstdio>

namespace eps {

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBadEnvelope:
      return "bad_envelope";
    case RejectReason::kWrongToken:
      return "wrong_token";
    case RejectReason::kUnserved:
      return "unserved_kind";
    case RejectReason::kRefused:
      return "refused";
    case RejectReason::kRevoked:
      return "revoked";
    case RejectReason::kOverLimit:
      return "over_limit";
  }
  return "unknown";
}

Rejections::Rejections(RejectionOptions options, const Clock* clock)
    : options_(std::move(options)), clock_(clock), tokens_(options_.burst),
      refilled_(clock->Now()) {
  if (options_.metrics == nullptr) return;
  for (int r = 0; r < kRejectReasons; ++r) {
    Labels labels = options_.labels;
    labels["reason"] = RejectReasonName(static_cast<RejectReason>(r));
    counters_[r] = &options_.metrics->GetCounter(
        "eps_rejected_messages_total",
        "Messages rejected with an error reply, by reason: bad_envelope (undecodable), "
        "wrong_token, unserved_kind (a kind this process does not serve), refused (a request "
        "it refuses).",
        labels);
  }
}

std::string Rejections::PeerName(const std::string& peer) {
  std::string out;
  char hex[3];
  for (unsigned char c : peer) {
    std::snprintf(hex, sizeof hex, "%02x", c);
    out += hex;
  }
  return out;
}

bool Rejections::Record(const std::string& peer, RejectReason reason) {
  const int r = static_cast<int>(reason);
  ++total_;
  ++by_reason_[r];
  if (counters_[r] != nullptr) counters_[r]->Add();
  std::string name = PeerName(peer);
  if (known_peers_.count(name) == 0) {
    if (known_peers_.size() < options_.max_peers) {
      known_peers_.insert(name);
    } else {
      name = "other";
    }
  }
  ++by_peer_[{name, reason}];

  const Clock::time_point now = clock_->Now();
  const double elapsed = std::chrono::duration<double>(now - refilled_).count();
  tokens_ = std::min(options_.burst, tokens_ + elapsed * options_.lines_per_second);
  refilled_ = now;
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return true;
  }
  if (!window_start_) window_start_ = now;
  ++suppressed_[r];
  ++suppressed_total_;
  return false;
}

std::optional<std::string> Rejections::TakeSummary() {
  if (suppressed_total_ == 0) return std::nullopt;
  const Clock::time_point now = clock_->Now();
  if (now - *window_start_ < options_.summary_every) return std::nullopt;
  const double seconds = std::chrono::duration<double>(now - *window_start_).count();
  char head[96];
  std::snprintf(head, sizeof head, "suppressed %llu rejections in the last %.0f s:",
                static_cast<unsigned long long>(suppressed_total_), seconds);
  std::string line = head;
  const char* sep = " ";
  for (int r = 0; r < kRejectReasons; ++r) {
    if (suppressed_[r] == 0) continue;
    line += sep;
    line += RejectReasonName(static_cast<RejectReason>(r));
    line += " x " + std::to_string(suppressed_[r]);
    sep = ", ";
    suppressed_[r] = 0;
  }
  suppressed_total_ = 0;
  window_start_.reset();
  return line;
}

uint64_t Rejections::count(const std::string& peer, RejectReason reason) const {
  std::string name = PeerName(peer);
  if (known_peers_.count(name) == 0) name = "other";
  auto it = by_peer_.find({name, reason});
  return it == by_peer_.end() ? 0 : it->second;
}

}  // namespace eps
