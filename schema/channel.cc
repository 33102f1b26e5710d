#include "schema/channel.h"

#include <glog/logging.h>

#include <cerrno>

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
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
}

}  // namespace

Channel::Channel(zmq::socket_t socket, std::string endpoint, bool router, Options options)
    : socket_(std::move(socket)),
      endpoint_(std::move(endpoint)),
      router_(router),
      options_(std::move(options)) {}

Channel::~Channel() = default;

StatusOr<std::unique_ptr<Channel>> Channel::Bind(zmq::context_t* context,
                                                 const std::string& endpoint,
                                                 const Options& options) {
  try {
    zmq::socket_t s(*context, zmq::socket_type::router);
    ApplyOptions(s, options);
    s.set(zmq::sockopt::router_mandatory, 1);
    // ZeroMQ spells "any port" as '*'; accept the conventional ":0" too.
    std::string ep = endpoint;
    if (ep.size() > 2 && ep.compare(ep.size() - 2, 2, ":0") == 0)
      ep = ep.substr(0, ep.size() - 1) + "*";
    s.bind(ep);
    std::string bound = s.get(zmq::sockopt::last_endpoint);
    return std::unique_ptr<Channel>(new Channel(std::move(s), bound, true, options));
  } catch (const zmq::error_t& e) {
    return Unavailable("cannot bind " + endpoint + ": " + e.what());
  }
}

StatusOr<std::unique_ptr<Channel>> Channel::Connect(zmq::context_t* context,
                                                    const std::string& endpoint,
                                                    const Options& options) {
  try {
    zmq::socket_t s(*context, zmq::socket_type::dealer);
    ApplyOptions(s, options);
    s.connect(endpoint);
    return std::unique_ptr<Channel>(new Channel(std::move(s), endpoint, false, options));
  } catch (const zmq::error_t& e) {
    return InvalidArgument("cannot connect to '" + endpoint + "': " + e.what());
  }
}

Status Channel::Send(const Envelope& envelope) {
  if (router_) return FailedPrecondition("Send on a ROUTER channel needs a peer");
  return SendFrames(nullptr, envelope);
}

Status Channel::SendTo(const std::string& peer, const Envelope& envelope) {
  if (!router_) return FailedPrecondition("SendTo on a DEALER channel");
  return SendFrames(&peer, envelope);
}

Status Channel::SendFrames(const std::string* peer, const Envelope& envelope) {
  EPS_ASSIGN_OR_RETURN(std::vector<Frame> frames, Encode(envelope));
  try {
    if (peer != nullptr) {
      if (!socket_.send(zmq::buffer(*peer), zmq::send_flags::sndmore))
        return Unavailable("send would block");
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(ToMessage(frames[i]), flags)) return Unavailable("send would block");
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Unavailable("peer is gone");
    return Unavailable(std::string("send failed: ") + e.what());
  }
  return OkStatus();
}

StatusOr<Channel::Incoming> Channel::Receive(std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0)
      return DeadlineExceeded("no message within the deadline");
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
    std::vector<Frame> frames;
    frames.reserve(parts->size() - first);
    for (size_t i = first; i < parts->size(); ++i) {
      zmq::message_t& m = (*parts)[i];
      frames.push_back({m.data(), m.size(), std::shared_ptr<const void>(parts, &m)});
    }
    in.envelope = Decode(frames, options_.limits);
    return in;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return Aborted("interrupted by a signal");
    return Unavailable(std::string("receive failed: ") + e.what());
  }
}

StatusOr<size_t> AwaitReadable(const std::vector<Channel*>& channels,
                               std::chrono::milliseconds timeout) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(channels.size());
  for (Channel* c : channels) items.push_back({static_cast<void*>(c->socket()), 0, ZMQ_POLLIN, 0});
  try {
    if (zmq::poll(items.data(), items.size(), timeout) == 0)
      return DeadlineExceeded("no message within the deadline");
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return Aborted("interrupted by a signal");
    return Unavailable(std::string("poll failed: ") + e.what());
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].revents & ZMQ_POLLIN) return i;
  }
  return Internal("poll woke without a readable socket");
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
