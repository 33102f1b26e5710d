// Serves a Metrics registry at http://HOST:PORT/metrics in Prometheus' text
// format (Debian's cpp-httplib), from a thread of its own: scrapes never touch
// the thread that owns the process's sockets. Anything but GET /metrics is 404.
//
//   auto server = MetricsServer::Start({"127.0.0.1", 0}, &metrics);  // port 0: any free port
//   (*server)->address();  // "127.0.0.1:41234", for a scrape target
#pragma once

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace eps {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" (or "::"): every interface
  int port = 0;                    // 0: a free port, chosen by the kernel
};

class MetricsServer {
 public:
  // Unavailable when the address cannot be bound. `metrics` must outlive the server.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                        const Metrics* metrics);
  virtual ~MetricsServer() = default;  // stops serving and joins the thread
  virtual int port() const = 0;
  // host:port as a scrape target ("0.0.0.0" is given as this host's name).
  virtual std::string address() const = 0;
};

// What a binary's --metrics_port (-1: off, 0: a free port) and --metrics_host
// ask for: null when off, else a started server whose address is logged and
// handed to the component it serves: `*metrics_field` = metrics and
// `*address_field` = the server's address (its Options' `metrics` and
// `metrics_address`; both left as they are when off).
StatusOr<std::unique_ptr<MetricsServer>> ServeMetricsIfAsked(int port, const std::string& host,
                                                             Metrics* metrics,
                                                             Metrics** metrics_field,
                                                             std::string* address_field);

}  // namespace eps
