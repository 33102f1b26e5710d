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
// Limits (Options, docs/security.md "Bounded resources"): queues bounded in
// messages, frames bounded in bytes (ZeroMQ drops the connection of a peer
// that sends a larger one), and a ROUTER with a registry counts the
// connections it accepts and closes, so that such a drop is visible.
// Not thread-safe: one thread owns a channel and its socket.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/metrics.h"
#include "common/rejections.h"
#include "schema/codec.h"
#include "schema/curve.h"

namespace eps {

class AllowedKeysWatch;

class Channel {
 public:
  struct Options {
    DecodeLimits limits;
    int linger_ms = 2000;  // how long close() may wait to flush queued messages
    // The queues, in messages (ZMQ_SNDHWM, ZMQ_RCVHWM; 0: unbounded). On a
    // ROUTER they hold per peer: a peer that floods fills its own queue (then
    // ZeroMQ stops reading its connection, the others are served as before), and
    // a reply to a peer whose queue is full fails with Unavailable. A DEALER's
    // Send blocks while its queue is full: clients keep 0.
    int send_hwm = 0;
    int receive_hwm = 0;
    // ZeroMQ refuses a larger incoming frame (ZMQ_MAXMSGSIZE, checked per frame
    // before it is read: it closes the peer's connection); -1: no limit. A
    // message's frames are not bounded together: DecodeLimits::max_frames
    // bounds their number once the message is whole.
    int64_t max_message_bytes = -1;
    // The largest message this channel sends, all its frames together; a
    // larger one is not sent: ResourceExhausted. -1: no limit. (The
    // coordinator's --max_message_mb: no message of its may hold a whole model.)
    int64_t max_send_bytes = -1;
    CurveOptions curve;  // off (plain TCP) without a secret key
    // The token every incoming message must carry (a server's job token;
    // empty: none checked). Receive returns a message with another one as
    // Unauthenticated, its body never decoded (Decode's expected_token).
    std::string token;
    // ROUTER: with a registry, the connections accepted and closed are counted
    // as eps_connections_total{event="accepted"|"closed"} (plus `labels`); a
    // peer dropped for an oversized frame is a closed one. Must outlive this.
    Metrics* metrics = nullptr;
    Labels labels;
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

  // DEALER: sends to the server, waiting while its queue is full (send_hwm).
  // PermissionDenied (HandshakeStatus) once the server refused the handshake,
  // also while it waits: ZeroMQ may drop a refused connection and its queue, and
  // a send without one would wait for ever.
  Status Send(const Envelope& envelope);
  // ROUTER: sends to the peer with routing id `peer`. Unavailable if it is gone.
  Status SendTo(const std::string& peer, const Envelope& envelope);

  struct Incoming {
    std::string peer;     // routing id (ROUTER only)
    std::string user_id;  // with CURVE, the ZAP handler's User-Id: the peer's public key (Z85)
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
  // DEALER: how often the connection to the server was lost since this channel
  // was made (its process ended, or the connection broke). ZeroMQ connects
  // again by itself, but what the server owed on the lost connection never
  // comes. Reads the monitor's events that came; 0 on a ROUTER.
  uint64_t Disconnects();

  // ROUTER with a registry: reads the connection events that came (Receive
  // does too) and counts them. Call it each turn of a loop that polls the
  // socket itself.
  void CountConnections();

 private:
  Channel(zmq::socket_t socket, zmq::socket_t monitor, std::string endpoint, bool router,
          Options options);
  Status StartConnectionCount(zmq::context_t* context);
  Status SendFrames(const std::string* peer, const Envelope& envelope);
  // DEALER: waits up to 100 ms for room for a message, reading the handshake's events.
  Status AwaitRoom();

  zmq::socket_t socket_;
  zmq::socket_t monitor_;      // PAIR receiving socket_'s handshake failures (DEALER only)
  zmq::socket_t connections_;  // PAIR receiving socket_'s accepted/closed events (ROUTER)
  Counter* accepted_ = nullptr;
  Counter* closed_ = nullptr;
  Status handshake_;  // the first handshake failure
  uint64_t disconnects_ = 0;  // DEALER: ZMQ_EVENT_DISCONNECTED events read
  const std::string endpoint_;
  const bool router_;
  const Options options_;
};

// The largest frame a legit peer sends a server of a job whose chunks hold at
// most `chunk_elems` elements: an envelope (limits.max_header_bytes) or one
// chunk's bytes (4 bytes an element: fp32, the widest wire dtype), the larger,
// plus 64 KiB. The limit a server sets (Options::max_message_bytes) must not
// be below it.
int64_t LargestLegitFrame(int64_t chunk_elems, const DecodeLimits& limits = DecodeLimits());

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
// with CURVE (`keys` set), that its client's key is still allowed
// (schema/allowed_keys_watch.h: revocation of open connections); and that it
// decoded, which on a channel with Options::token includes carrying the
// job's token (Unauthenticated: a wrong token). A rejection is counted in
// `rejections` and, at its rate, logged ("bad message" + `from`: the error,
// for an envelope that did not decode). Returns what to answer the peer with
// (an ErrorReply of it), or OK to serve the message.
Status AdmitIncoming(const Channel::Incoming& in, AllowedKeysWatch* keys, Rejections* rejections,
                     const char* from = "");

}  // namespace eps
