// Revocation of open CURVE connections: which clients' keys a server still
// serves, message by message.
//
// The ZAP handler (schema/zap_handler.h) checks a client's key once, at its
// handshake; the connection then lives on. A server that owns one of these
// asks it about every message it receives (Channel::Incoming::user_id, the
// client's public key that the handler gave the connection): a key removed
// from the allowed keys (a file or a folder of *.pub, schema/curve.h) stops
// being served within `reload_every` (the set is re-read that often, when a
// message asks), and a key in `always_allowed` (the server's own) is always
// served. A key not in the set read last (added since, as the handshake saw,
// or revoked) makes it read the set again at once, once per key and period.
// A message without a user id (no CURVE) is always admitted. If the allowed
// keys cannot be read, the last set read stays (a file being rewritten must
// not eject every worker); the handshakes fail closed as before. Time comes from the injected
// clock. Not thread-safe: the event loop that receives the messages owns it.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "schema/curve.h"

namespace eps {

class AllowedKeysWatch {
 public:
  struct Options {
    std::string allowed_keys;                 // a file or a folder (schema/curve.h)
    std::vector<std::string> always_allowed;  // Z85 keys
    std::chrono::milliseconds reload_every{1000};
  };

  // InvalidArgument or NotFound if the allowed keys cannot be read now.
  static StatusOr<AllowedKeysWatch> Open(Options options, const Clock* clock);
  // A server's: none when `curve` is off, else `allowed_keys` and the server's own key. The
  // ZapHandler has read them at its start: one unreadable now (a file being written) is read
  // again at the first message.
  static StatusOr<std::optional<AllowedKeysWatch>> ForServer(const CurveOptions& curve,
                                                             const std::string& allowed_keys,
                                                             const Clock* clock);
  // What a message from a refused key is answered with: PermissionDenied, which
  // a worker reports as its key refused and exits on (docs/security.md).
  static Status Revoked();

  // Whether a message from the client with ZAP User-Id `user_id` is served.
  bool Admits(const std::string& user_id);
  // Keys refused since the watch opened (messages, not clients).
  uint64_t refused() const { return refused_; }

 private:
  AllowedKeysWatch(Options options, const Clock* clock, std::set<std::string> keys);
  void Reload();

  Options options_;
  const Clock* clock_;
  std::set<std::string> keys_;    // the allowed set read last, plus always_allowed
  std::set<std::string> missed_;  // keys not in it that made it read again since
  Clock::time_point read_at_;
  uint64_t refused_ = 0;
};

}  // namespace eps
