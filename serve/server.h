// `elasticps serve`: an inference server for a job's export, speaking the
// KServe / TensorFlow Serving V1 REST protocol (docs/serving.md).
//
//   POST /v1/models/NAME:predict  {"instances": [...]} -> {"predictions": [...]}
//   GET  /v1/models/NAME          {"name", "ready", "version", "sha256", ...}
//   GET  /v1/models               {"models": [NAME]}
//   GET  /healthz, /v1/health     200 {"status": "ok"}; 503 while draining
//   GET  /v1/load?in_flight=N&arrived_above=A&wait_ms=T
//                                        {"in_flight": k, "arrived": a} once k >= N, or a > A,
//                                        or after T ms
//   GET  /metrics                 Prometheus text (docs/metrics.md)
//
// HTTP threads (cpp-httplib's pool) parse each request (serve/request.h) and
// queue it (serve/batch_queue.h); one inference thread takes batches and runs
// them on the served model; the HTTP thread answers with its rows. Every
// error is a JSON body {"error": reason}: 400 bad input, 404 an unknown model
// or path, 413 a body over max_body_bytes, 503 a full queue or a drain.
//
// The model is swapped (Swap, --follow) by exchanging one pointer between
// batches: the batch running finishes on the old model, the next runs on the
// new one, no request is dropped. Drain (SIGTERM) refuses new requests,
// answers every queued one, then stops. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"
#include "serve/batch_queue.h"
#include "serve/served_model.h"

namespace eps {

struct InferenceServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;      // 0: a free port (port() tells which)
  std::string name;  // the model's name in /v1/models/NAME
  BatchQueueOptions batching;
  size_t max_body_bytes = size_t{32} << 20;
  int64_t max_instances = 4096;  // instances in one request
  // A request not answered by then gets 504 (a model stuck in a batch).
  std::chrono::milliseconds request_timeout{60000};
  // The give-back file of a lending agent (launcher/lend.sh --give-back-file,
  // docs/serving.md): "PID SIGNAL" of the worker lent on this node. The first
  // predict request to arrive checks it (SIGTERM or SIGUSR1, a process whose
  // executable is named worker: the agent and the server share a pid
  // namespace), claims it (renamed to FILE.taken, so the agent's probe, which
  // claims it the same way, sends no second signal) and sends the worker its
  // signal before the request is even read: the node goes back to serving
  // without a hop through the agent. A file that names no worker is left to
  // the probe. Empty: none.
  std::string give_back_file;
  // JSON lines of what the server did for a lending agent (docs/serving.md,
  // "The server's events"): one `gave_back` for each worker it signalled,
  // stamped when the request that did it arrived, so that the time a lent
  // worker takes to leave is measured from the server's first request. Empty:
  // none.
  std::string events_file;
};

class InferenceServer {
 public:
  // Binds and starts serving `model`. InvalidArgument for bad options,
  // Unavailable when the address cannot be bound. `metrics` (not null) must
  // outlive the server.
  [[nodiscard]] static StatusOr<std::unique_ptr<InferenceServer>> Start(
      const InferenceServerOptions& options, std::shared_ptr<const LoadedModel> model,
      Metrics* metrics);
  virtual ~InferenceServer() = default;  // drains (Drain) first

  virtual int port() const = 0;

  // Serves `model` from the next batch on. FailedPrecondition (and the old
  // model serves on) when its input differs from the served one's: queued
  // requests were checked against that.
  [[nodiscard]] virtual Status Swap(std::shared_ptr<const LoadedModel> model) = 0;
  // The model served now (for the follower and status).
  virtual std::shared_ptr<const LoadedModel> model() const = 0;

  // Refuses new predict requests (503) and says so on the health endpoint,
  // answers every queued request, then stops serving HTTP. Returns the number
  // of predict requests answered 200 over the server's life. Idempotent.
  virtual int64_t Drain() = 0;
};

}  // namespace eps
