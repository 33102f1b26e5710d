// A ZeroMQ socket that speaks Envelopes.
//
// Servers (the coordinator, shards) Bind a ROUTER channel and answer peers by
// the routing id that came with their message; clients Connect a DEALER channel
// to one server. Chunk bytes are handed to ZeroMQ without a copy (the frame
// keeps the caller's owner alive until ZeroMQ is done) and received chunks point
// into the received frames. A message that fails to decode is still returned,
// with its error, so a server can answer the peer and keep serving.
// With CURVE (Options::curve, docs/security.md) the traffic is encrypted and
// both ends authenticated: a ROUTER serves as a CURVE server (its clients are
// checked by the context's ZapHandler, schema/zap_handler.h) and a DEALER
// connects as a CURVE client to the server's public key. Every DEALER watches
// its handshakes: when the server refuses its key, or one end speaks CURVE and
// the other not, Receive and AwaitReadable return PermissionDenied instead of
// waiting for an answer that never comes.
// Not thread-safe: one thread owns a channel and its socket.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/rejections.h"
#include "schema/codec.h"
#include "schema/curve.h"

namespace eps {

class Channel {
 public:
  struct Options {
    DecodeLimits limits;
    int linger_ms = 2000;            // how long close() may wait to flush queued messages
    int64_t max_message_bytes = -1;  // ZeroMQ drops larger incoming messages (-1: no limit)
    CurveOptions curve;              // off (plain TCP) without a secret key
  };

  // ROUTER bound to `endpoint` ("tcp://127.0.0.1:0" picks a free port).
  static StatusOr<std::unique_ptr<Channel>> Bind(zmq::context_t* context,
                                                 const std::string& endpoint,
                                                 const Options& options);
  static StatusOr<std::unique_ptr<Channel>> Bind(zmq::context_t* context,
                                                 const std::string& endpoint) {
    return Bind(context, endpoint, Options());
  }
  // DEALER connected to `endpoint`. Connecting is asynchronous: errors surface on Send/Receive.
  static StatusOr<std::unique_ptr<Channel>> Connect(zmq::context_t* context,
                                                    const std::string& endpoint,
                                                    const Options& options);
  static StatusOr<std::unique_ptr<Channel>> Connect(zmq::context_t* context,
                                                    const std::string& endpoint) {
    return Connect(context, endpoint, Options());
  }

  ~Channel();

  // The endpoint as bound or connected, with the real port.
  const std::string& endpoint() const { return endpoint_; }

  // DEALER: sends to the server.
  Status Send(const Envelope& envelope);
  // ROUTER: sends to the peer with routing id `peer`. Unavailable if it is gone.
  Status SendTo(const std::string& peer, const Envelope& envelope);

  struct Incoming {
    std::string peer;  // routing id (ROUTER only)
    StatusOr<Envelope> envelope = InvalidArgument("no message");
  };
  // Waits up to `timeout` for one message. DeadlineExceeded when none came;
  // Aborted when a signal interrupted the wait; PermissionDenied when the
  // server refused this client's handshake (HandshakeStatus).
  StatusOr<Incoming> Receive(std::chrono::milliseconds timeout);
  // Receives only if a message is ready now.
  StatusOr<Incoming> TryReceive() { return Receive(std::chrono::milliseconds(0)); }

  zmq::socket_t& socket() { return socket_; }

  // DEALER: PermissionDenied once a handshake with the server failed (its ZAP
  // handler refused this client's key, or one end speaks CURVE and the other
  // not); it stays so. OK otherwise, and always on a ROUTER.
  Status HandshakeStatus();
  // The socket of the handshake events (DEALER), or null.
  zmq::socket_t* monitor() { return monitor_ ? &monitor_ : nullptr; }

 private:
  Channel(zmq::socket_t socket, zmq::socket_t monitor, std::string endpoint, bool router,
          Options options);
  Status SendFrames(const std::string* peer, const Envelope& envelope);

  zmq::socket_t socket_;
  zmq::socket_t monitor_;  // PAIR receiving socket_'s handshake failures (DEALER only)
  Status handshake_;       // the first handshake failure
  const std::string endpoint_;
  const bool router_;
  const Options options_;
};

// Waits up to `timeout` (0: looks only) until one of `channels` has a message
// waiting, and returns the lowest such index. DeadlineExceeded when none has;
// Aborted when a signal interrupted the wait; PermissionDenied when a server
// refused the handshake of one of them.
StatusOr<size_t> AwaitReadable(const std::vector<Channel*>& channels,
                               std::chrono::milliseconds timeout);

// Sends `request` on a DEALER channel and waits up to `timeout` for the reply.
// An ErrorReply from the server comes back as its Status.
StatusOr<Envelope> Call(Channel* channel, const Envelope& request,
                        std::chrono::milliseconds timeout);

// What a server checks of a message its ROUTER received before it serves it:
// that it decoded and, when the job has a `token`, that it carries it. A
// rejection is counted in `rejections` and, at its rate, logged ("bad message"
// + `from`: the error, for an envelope that did not decode). Returns what to
// answer the peer with (an ErrorReply of it), or OK to serve the message.
Status AdmitIncoming(const Channel::Incoming& in, const std::string& token,
                     Rejections* rejections, const char* from = "");

}  // namespace eps
