#include "schema/zap_handler.h"

#include <glog/logging.h>
#include <zmq.h>

#include <algorithm>
#include <map>

#include "schema/curve.h"

namespace eps {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr std::chrono::milliseconds kStopCheck{100};  // how soon the thread notices stop_

}  // namespace

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t* context,
                                                        const Options& options) {
  for (const std::string& key : options.always_allowed)
    EPS_RETURN_IF_ERROR(ParseCurveKey(key).status());
  EPS_RETURN_IF_ERROR(ReadAllowedKeys(options.allowed_keys).status());
  try {
    zmq::socket_t s(*context, zmq::socket_type::rep);
    s.set(zmq::sockopt::linger, 0);
    try {
      s.bind(kZapEndpoint);
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE) return AlreadyExists("this context has a ZAP handler");
      throw;
    }
    auto handler = std::unique_ptr<ZapHandler>(new ZapHandler(std::move(s), options));
    handler->thread_ = std::thread([h = handler.get()] { h->Loop(); });
    return handler;
  } catch (const zmq::error_t& e) {
    return Unavailable(std::string("cannot start the ZAP handler: ") + e.what());
  }
}

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::StartForServer(zmq::context_t* context,
                                                                 const CurveOptions& curve,
                                                                 const std::string& allowed_keys) {
  if (!curve.enabled()) {
    if (!allowed_keys.empty())
      return InvalidArgument("--allowed_keys needs --curve_secret_key (the server's key pair)");
    return std::unique_ptr<ZapHandler>();
  }
  if (allowed_keys.empty())
    return InvalidArgument("a CURVE server needs --allowed_keys (the clients' public keys)");
  return Start(context, {allowed_keys, {curve.keys.public_key}});
}

ZapHandler::ZapHandler(zmq::socket_t socket, Options options)
    : socket_(std::move(socket)), options_(std::move(options)) {}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Loop() {
  std::map<std::string, uint64_t> refusals;  // by key: the log says the 1st, 2nd, 4th, 8th...
  while (!stop_) {
    try {
      zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, kStopCheck) == 0) continue;
      std::vector<zmq::message_t> request;
      do {
        request.emplace_back();
        if (!socket_.recv(request.back(), zmq::recv_flags::dontwait)) {
          request.pop_back();
          break;
        }
      } while (request.back().more());
      auto [code, text] = Decide(request);
      const std::string key = request.size() >= 7 && request[6].size() == 32
                                  ? std::string(static_cast<const char*>(request[6].data()), 32)
                                  : std::string();
      char z85[41] = {0};
      if (!key.empty()) zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(key.data()), 32);
      if (code == "200") {
        ++accepted_;
      } else {
        ++refused_;
        const uint64_t n = ++refusals[z85];
        if ((n & (n - 1)) == 0) {
          LOG(WARNING) << "refused a CURVE client" << (key.empty() ? "" : " with key ") << z85
                       << (request.size() > 3 ? " from " + request[3].to_string() : "") << ": "
                       << text << " (" << n << (n == 1 ? " time)" : " times)");
        }
      }
      // Version, request id, status code and text, user id (the client's key), metadata.
      const std::string version = "1.0";
      const std::string id = request.size() > 1 ? request[1].to_string() : "";
      socket_.send(zmq::buffer(version), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(id), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(code), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
      socket_.send(zmq::buffer(code == "200" ? std::string(z85) : ""), zmq::send_flags::sndmore);
      socket_.send(zmq::str_buffer(""), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      if (e.num() == EINTR) continue;
      LOG(ERROR) << "ZAP handler: " << e.what();
      return;
    }
  }
}

std::pair<std::string, std::string> ZapHandler::Decide(const std::vector<zmq::message_t>& request) {
  // Version, request id, domain, address, routing id, mechanism, credentials...
  if (request.size() < 6 || request[0].to_string() != "1.0")
    return {"500", "malformed ZAP request"};
  if (request[5].to_string() != "CURVE" || request.size() != 7 || request[6].size() != 32)
    return {"400", "only CURVE clients are served"};
  char z85[41] = {0};
  zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
  const std::string key = z85;
  if (std::find(options_.always_allowed.begin(), options_.always_allowed.end(), key) !=
      options_.always_allowed.end())
    return {"200", "OK"};
  auto allowed = ReadAllowedKeys(options_.allowed_keys);
  if (!allowed.ok()) {
    LOG_EVERY_N(ERROR, 20) << "the allowed keys cannot be read, every worker key is refused: "
                           << allowed.status().ToString();
    return {"400", "the server cannot read its allowed keys"};
  }
  if (std::find(allowed->begin(), allowed->end(), key) == allowed->end())
    return {"400", "key not allowed"};
  return {"200", "OK"};
}

}  // namespace eps
