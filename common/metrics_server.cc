#include "common/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include <glog/logging.h>

#include "common/threads.h"

namespace eps {
namespace {

// Two connections served at a time: a slow client holds one for at most the
// read timeout, a scrape still gets the other.
constexpr size_t kServingThreads = 2;
constexpr std::chrono::seconds kIoTimeout(5);

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

class MetricsServerImpl final : public MetricsServer {
 public:
  MetricsServerImpl(const MetricsServerOptions& options, const Metrics* metrics)
      : options_(options), metrics_(metrics) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(kServingThreads); };
    // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a
    // second server would bind the same port and take half the scrapes.
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    server_.set_read_timeout(kIoTimeout);
    server_.set_write_timeout(kIoTimeout);
    // One request per connection (a scrape every few seconds needs no more),
    // so that no idle connection holds a serving thread when the server stops.
    server_.set_keep_alive_max_count(1);
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // Unrouted paths and methods get httplib's own 404 / 405 (400 for what it cannot read).
  }

  ~MetricsServerImpl() override {
    if (!thread_.joinable()) return;
    // httplib 0.11's stop() does nothing before the thread has entered its
    // accept loop (is_running()), and has no wait_until_ready(): call it once
    // that thread runs, or let the thread end on its own (a listen error).
    while (!server_.is_running()) {
      if (finished_.wait_for(std::chrono::milliseconds(1)) == std::future_status::ready) break;
    }
    server_.stop();
    thread_.join();
  }

  Status Bind() {
    const int port = options_.port == 0 ? server_.bind_to_any_port(options_.host)
                                        : (server_.bind_to_port(options_.host, options_.port)
                                               ? options_.port
                                               : -1);
    if (port <= 0) {
      return Unavailable("cannot serve metrics on " + options_.host + ":" +
                         std::to_string(options_.port) +
                         ": the port is taken, or the host is not an address of this machine");
    }
    port_ = port;
    std::promise<void> finished;
    finished_ = finished.get_future();
    // The serving threads (this one and httplib's pool, which inherits its
    // signal mask and CPUs) leave the stop signals to the process's main thread.
    EPS_ASSIGN_OR_RETURN(thread_,
                         StartThreadWithoutStopSignals([this, finished = std::move(finished)]() mutable {
                           server_.listen_after_bind();
                           finished.set_value();
                         }));
    return OkStatus();
  }

  int port() const override { return port_; }
  std::string address() const override {
    std::string host =
        options_.host == "0.0.0.0" || options_.host == "::" ? HostName() : options_.host;
    if (host.find(':') != std::string::npos) host = "[" + host + "]";  // an IPv6 address
    return host + ":" + std::to_string(port_);
  }

 private:
  const MetricsServerOptions options_;
  const Metrics* const metrics_;
  httplib::Server server_;
  int port_ = -1;
  std::future<void> finished_;  // ready once the serving thread has left listen_after_bind
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerOptions& options,
                                                              const Metrics* metrics) {
  if (metrics == nullptr) return InvalidArgument("a metrics server needs a registry");
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("metrics port " + std::to_string(options.port) + " is out of range");
  }
  auto server = std::make_unique<MetricsServerImpl>(options, metrics);
  EPS_RETURN_IF_ERROR(server->Bind());
  return std::unique_ptr<MetricsServer>(std::move(server));
}

StatusOr<std::unique_ptr<MetricsServer>> ServeMetricsIfAsked(int port, const std::string& host,
                                                             Metrics* metrics,
                                                             Metrics** metrics_field,
                                                             std::string* address_field) {
  if (port < 0) return std::unique_ptr<MetricsServer>();
  EPS_ASSIGN_OR_RETURN(auto server, MetricsServer::Start({host, port}, metrics));
  LOG(INFO) << "metrics at http://" << server->address() << "/metrics";
  *metrics_field = metrics;
  *address_field = server->address();
  return server;
}

}  // namespace eps
