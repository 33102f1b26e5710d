// The ZAP handler of a process's CURVE servers (ZeroMQ RFC 27).
//
// libzmq asks the handler bound at inproc://zeromq.zap.01 of a context about
// every handshake of a CURVE server socket of that context; this handler
// accepts a client whose public key is in the allowed-keys set (a file of Z85
// keys, one a line, or a folder of *.pub files: schema/curve.h) or in
// `always_allowed`, and refuses every other one (status 400; the client's
// socket sees ZMQ_EVENT_HANDSHAKE_FAILED_AUTH). The set is re-read at every
// handshake, so a key added or removed takes effect at the next connection
// without a restart; a connection already made stays until it breaks. If the
// set cannot be read (missing, a bad line) every key not in `always_allowed` is
// refused until it can: it fails closed.
//
// One handler per context, started before the context's first CURVE Bind (a
// CURVE server without one accepts every client); it owns a thread and its REP
// socket and stops them when destroyed, before the context is closed. The
// counters may be read from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "schema/curve.h"

namespace eps {

class ZapHandler {
 public:
  struct Options {
    std::string allowed_keys;                 // a file or a folder (schema/curve.h)
    std::vector<std::string> always_allowed;  // Z85 keys: e.g. the job's own server key
  };

  // InvalidArgument or NotFound if the allowed keys cannot be read now;
  // AlreadyExists if the context has a ZAP handler.
  static StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t* context,
                                                     const Options& options);
  // A server process's handler: null when `curve` is off (then `allowed_keys`
  // must be empty), else one allowing `allowed_keys` and the server's own key
  // (the job's servers share their key pair and connect to each other with it).
  static StatusOr<std::unique_ptr<ZapHandler>> StartForServer(zmq::context_t* context,
                                                              const CurveOptions& curve,
                                                              const std::string& allowed_keys);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t accepted() const { return accepted_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  ZapHandler(zmq::socket_t socket, Options options);
  void Loop();
  // The answer to one request: the status code ("200", "400") and its text.
  std::pair<std::string, std::string> Decide(const std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;  // the loop's thread's
  const Options options_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0}, refused_{0};
  std::thread thread_;
};

}  // namespace eps
