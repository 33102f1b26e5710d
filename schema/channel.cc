#include "schema/channel.h"

#include <glog/logging.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/format.h"

namespace eps {
namespace {

constexpr size_t kCopyBelowBytes = 256;  // tiny frames are cheaper to copy than to pin

void ReleaseOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

zmq::message_t ToMessage(const Frame& f) {
  if (f.size < kCopyBelowBytes || !f.owner) return zmq::message_t(f.data, f.size);
  auto* hint = new std::shared_ptr<const void>(f.owner);
  return zmq::message_t(const_cast<void*>(f.data), f.size, &ReleaseOwner, hint);
}

void ApplyOptions(zmq::socket_t& s, const Channel::Options& o) {
  s.set(zmq::sockopt::linger, o.linger_ms);
  s.set(zmq::sockopt::sndhwm, o.send_hwm);
  s.set(zmq::sockopt::rcvhwm, o.receive_hwm);
  s.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
}

void ApplyCurve(zmq::socket_t& s, const CurveOptions& c, bool server) {
  if (!c.enabled()) return;
  if (server) {
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, c.keys.secret_key);
    s.set(zmq::sockopt::zap_domain, c.zap_domain);
  } else {
    s.set(zmq::sockopt::curve_serverkey, c.server_key);
    s.set(zmq::sockopt::curve_publickey, c.keys.public_key);
    s.set(zmq::sockopt::curve_secretkey, c.keys.secret_key);
  }
}

// The handshake failures a DEALER watches: each is only possible when an end
// uses CURVE, so a job without CURVE never sees one (and a connection reset in
// a handshake, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, is not watched: it is retried).
// And the loss of its connection (Disconnects).
constexpr int kWatchedEvents =
    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_DISCONNECTED;

// Names the inproc endpoints of the monitors: unique in the process.
std::atomic<uint64_t> monitors_started{0};

// The failure one monitor event reports, or OK for one that is not fatal.
Status HandshakeFailure(uint16_t event, uint32_t value, const std::string& endpoint) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return PermissionDenied(StrFormat(
        "the server at %s refused this process's CURVE key (ZAP status %u): the key is not "
        "among the ones the job allows, or it was revoked",
        endpoint.c_str(), value));
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
      value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return PermissionDenied("the server at " + endpoint +
                            " and this process disagree on CURVE: one end encrypts "
                            "(a CURVE key pair), the other not");
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
      value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return PermissionDenied("the CURVE handshake with " + endpoint +
                            " failed: is the server key this process was given the server's?");
  }
  return OkStatus();
}

}  // namespace

Channel::Channel(zmq::socket_t socket, zmq::socket_t monitor, std::string endpoint, bool router,
                 Options options)
    : socket_(std::move(socket)),
      monitor_(std::move(monitor)),
      endpoint_(std::move(endpoint)),
      router_(router),
      options_(std::move(options)) {}

Channel::~Channel() {
  // ZeroMQ's I/O thread sends monitor events blocking: a socket that lingers (queued messages)
  // after the reader of its monitor closed would stop that thread at its next event, a lost
  // connection, and every socket of the context with it. The monitor stops first.
  if (socket_ && (monitor_ || connections_)) zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

int64_t LargestLegitFrame(int64_t chunk_elems, const DecodeLimits& limits) {
  constexpr int64_t kSlack = 64 << 10;
  return std::max<int64_t>(static_cast<int64_t>(limits.max_header_bytes), 4 * chunk_elems) + kSlack;
}

Status Channel::StartConnectionCount(zmq::context_t* context) {
  if (options_.metrics == nullptr) return OkStatus();
  const char kHelp[] =
      "Connections this server accepted and closed (a peer sending a frame over the limit is "
      "closed).";
  Labels accepted = options_.labels, closed = options_.labels;
  accepted["event"] = "accepted";
  closed["event"] = "closed";
  accepted_ = &options_.metrics->GetCounter("eps_connections_total", kHelp, accepted);
  closed_ = &options_.metrics->GetCounter("eps_connections_total", kHelp, closed);
  const std::string events = "inproc://eps-connections-" + std::to_string(++monitors_started);
  if (zmq_socket_monitor(socket_.handle(), events.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0)
    return Unavailable(std::string("cannot monitor ") + endpoint_ + ": " + zmq_strerror(errno));
  connections_ = zmq::socket_t(*context, zmq::socket_type::pair);
  connections_.set(zmq::sockopt::linger, 0);
  connections_.connect(events);
  return OkStatus();
}

void Channel::CountConnections() {
  if (!connections_) return;
  for (;;) {
    zmq::message_t event, address;
    if (!connections_.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more() && !connections_.recv(address, zmq::recv_flags::dontwait)) return;
    if (event.size() < 2) continue;
    uint16_t id;
    std::memcpy(&id, event.data(), sizeof id);
    if (id == ZMQ_EVENT_ACCEPTED) accepted_->Add();
    if (id == ZMQ_EVENT_DISCONNECTED) closed_->Add();
  }
}

StatusOr<std::unique_ptr<Channel>> Channel::Bind(zmq::context_t* context,
                                                 const std::string& endpoint,
                                                 const Options& options) {
  try {
    zmq::socket_t s(*context, zmq::socket_type::router);
    ApplyOptions(s, options);
    ApplyCurve(s, options.curve, /*server=*/true);
    s.set(zmq::sockopt::router_mandatory, 1);
    // ZeroMQ spells "any port" as '*'; accept the conventional ":0" too.
    std::string ep = endpoint;
    if (ep.size() > 2 && ep.compare(ep.size() - 2, 2, ":0") == 0)
      ep = ep.substr(0, ep.size() - 1) + "*";
    s.bind(ep);
    std::string bound = s.get(zmq::sockopt::last_endpoint);
    auto channel =
        std::unique_ptr<Channel>(new Channel(std::move(s), zmq::socket_t(), bound, true, options));
    EPS_RETURN_IF_ERROR(channel->StartConnectionCount(context));
    return channel;
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot bind " + endpoint + ": " + e.what());
  }
}

StatusOr<std::unique_ptr<Channel>> Channel::Connect(zmq::context_t* context,
                                                    const std::string& endpoint,
                                                    const Options& options) {
  if (options.curve.enabled() && options.curve.server_key.empty())
    return InvalidArgument("a CURVE client needs the server's public key");
  try {
    zmq::socket_t s(*context, zmq::socket_type::dealer);
    ApplyOptions(s, options);
    ApplyCurve(s, options.curve, /*server=*/false);
    // The monitor is connected before the socket: no event is lost.
    const std::string events = "inproc://eps-handshakes-" + std::to_string(++monitors_started);
    if (zmq_socket_monitor(s.handle(), events.c_str(), kWatchedEvents) != 0) throw zmq::error_t();
    zmq::socket_t monitor(*context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(events);
    s.connect(endpoint);
    return std::unique_ptr<Channel>(
        new Channel(std::move(s), std::move(monitor), endpoint, false, options));
  } catch (const zmq::error_t& e) {
    return InvalidArgument("cannot connect to '" + endpoint + "': " + e.what());
  }
}

Status Channel::Send(const Envelope& envelope) {
  if (router_) return FailedPrecondition("Send on a ROUTER channel needs a peer");
  EPS_RETURN_IF_ERROR(HandshakeStatus());
  return SendFrames(nullptr, envelope);
}

Status Channel::AwaitRoom() {
  EPS_RETURN_IF_ERROR(HandshakeStatus());
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLOUT, 0},
                             {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, monitor_ ? 2 : 1, std::chrono::milliseconds(100));
  return HandshakeStatus();
}

Status Channel::SendTo(const std::string& peer, const Envelope& envelope) {
  if (!router_) return FailedPrecondition("SendTo on a DEALER channel");
  return SendFrames(&peer, envelope);
}

Status Channel::SendFrames(const std::string* peer, const Envelope& envelope) {
  EPS_ASSIGN_OR_RETURN(std::vector<Frame> frames, Encode(envelope));
  if (options_.max_send_bytes >= 0) {
    uint64_t total = 0;
    for (const Frame& f : frames) total += f.size;
    if (total > static_cast<uint64_t>(options_.max_send_bytes)) {
      return ResourceExhausted(std::string("a ") + BodyName(envelope.body) + " of " +
                               std::to_string(total) + " bytes is over the " +
                               std::to_string(options_.max_send_bytes) +
                               " bytes a message of this channel may have");
    }
  }
  // No send blocks. A ROUTER fails at once when the peer's queue is full (send_hwm,
  // ZMQ_ROUTER_MANDATORY); a DEALER waits for room (AwaitRoom), watching its handshake: a blocking
  // send waited for ever once ZeroMQ had dropped a refused connection and its queue. The rest of
  // a message whose first frame went always goes.
  const auto flags = [&](size_t i) {
    return (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) |
           zmq::send_flags::dontwait;
  };
  try {
    size_t i = 0;
    if (peer != nullptr) {
      if (!socket_.send(zmq::buffer(*peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return Unavailable("the peer's queue is full (send would block)");
    } else if (!frames.empty()) {
      while (!socket_.send(ToMessage(frames[0]), flags(0))) EPS_RETURN_IF_ERROR(AwaitRoom());
      i = 1;
    }
    for (; i < frames.size(); ++i) {
      if (!socket_.send(ToMessage(frames[i]), flags(i))) return Unavailable("send would block");
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Unavailable("peer is gone");
    return Unavailable(std::string("send failed: ") + e.what());
  }
  return OkStatus();
}

Status Channel::HandshakeStatus() {
  if (!monitor_) return OkStatus();
  while (handshake_.ok()) {
    zmq::message_t event, address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more() && !monitor_.recv(address, zmq::recv_flags::dontwait)) break;
    if (event.size() < 6) continue;
    uint16_t id;
    uint32_t value;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (id == ZMQ_EVENT_DISCONNECTED) {
      ++disconnects_;
      continue;
    }
    handshake_ = HandshakeFailure(id, value, endpoint_);
  }
  return handshake_;
}

uint64_t Channel::Disconnects() {
  (void)HandshakeStatus();  // reads the events that came
  return disconnects_;
}

StatusOr<Channel::Incoming> Channel::Receive(std::chrono::milliseconds timeout) {
  try {
    CountConnections();
    EPS_RETURN_IF_ERROR(AwaitReadable({this}, timeout).status());
    auto parts = std::make_shared<std::vector<zmq::message_t>>();
    do {
      parts->emplace_back();
      if (!socket_.recv(parts->back(), zmq::recv_flags::dontwait)) {
        parts->pop_back();
        break;
      }
    } while (parts->back().more());
    Incoming in;
    size_t first = 0;
    if (router_) {
      if (parts->empty()) return DeadlineExceeded("spurious wake-up");
      in.peer = parts->front().to_string();
      first = 1;
    }
    if (parts->size() > first) {
      // Set by the ZAP handler on every message of a CURVE connection; absent without CURVE.
      const char* user = zmq_msg_gets((*parts)[first].handle(), "User-Id");
      if (user != nullptr) in.user_id = user;
    }
    std::vector<Frame> frames;
    frames.reserve(parts->size() - first);
    for (size_t i = first; i < parts->size(); ++i) {
      zmq::message_t& m = (*parts)[i];
      frames.push_back({m.data(), m.size(), std::shared_ptr<const void>(parts, &m)});
    }
    in.envelope = Decode(frames, options_.limits, options_.token);
    return in;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return Aborted("interrupted by a signal");
    return Unavailable(std::string("receive failed: ") + e.what());
  }
}

StatusOr<size_t> AwaitReadable(const std::vector<Channel*>& channels,
                               std::chrono::milliseconds timeout) {
  // The channels' sockets, then the monitors of those that have one.
  std::vector<zmq::pollitem_t> items;
  std::vector<Channel*> watched;
  items.reserve(2 * channels.size());
  for (Channel* c : channels) {
    EPS_RETURN_IF_ERROR(c->HandshakeStatus());
    items.push_back({static_cast<void*>(c->socket()), 0, ZMQ_POLLIN, 0});
  }
  for (Channel* c : channels) {
    if (c->monitor() == nullptr) continue;
    items.push_back({static_cast<void*>(*c->monitor()), 0, ZMQ_POLLIN, 0});
    watched.push_back(c);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    try {
      if (zmq::poll(items.data(), items.size(), left) == 0)
        return DeadlineExceeded("no message within the deadline");
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return Aborted("interrupted by a signal");
      return Unavailable(std::string("poll failed: ") + e.what());
    }
    for (size_t i = 0; i < watched.size(); ++i) {
      if (items[channels.size() + i].revents & ZMQ_POLLIN)
        EPS_RETURN_IF_ERROR(watched[i]->HandshakeStatus());
    }
    for (size_t i = 0; i < channels.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) return i;
    }
    if (left.count() == 0) return DeadlineExceeded("no message within the deadline");
  }
}

StatusOr<Envelope> Call(Channel* channel, const Envelope& request,
                        std::chrono::milliseconds timeout) {
  EPS_RETURN_IF_ERROR(channel->Send(request));
  EPS_ASSIGN_OR_RETURN(Channel::Incoming in, channel->Receive(timeout));
  if (!in.envelope.ok())
    return in.envelope.status().WithContext("bad reply from " + channel->endpoint());
  if (const auto* err = std::get_if<ErrorReply>(&in.envelope->body)) return err->ToStatus();
  return std::move(in.envelope).value();
}

}  // namespace eps
