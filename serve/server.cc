#include "serve/server.h"

#include <glog/logging.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/jsonl.h"
#include "common/threads.h"

namespace eps {
namespace {

using std::chrono::steady_clock;

constexpr const char* kJson = "application/json";

// HTTP threads beyond one per queued request: health checks, scrapes, and
// requests being parsed or refused while the queue is full.
constexpr size_t kSpareHttpThreads = 8;
constexpr std::chrono::seconds kIoTimeout(10);
// Requests on one keep-alive connection before the server closes it (httplib's
// default is 5: a busy client would reconnect every fifth request).
constexpr size_t kKeepAliveMaxCount = 1000;

// Connections the kernel holds for accept(): httplib 0.11 listens with a
// backlog of 5, and a burst of new clients beyond it had connections reset
// (measured: 3 to 15 of 32 clients connecting at once). Linux takes a second
// listen() on a listening socket as a new backlog.
constexpr int kListenBacklog = 1024;

// httplib's server with its listening socket in reach, to widen the backlog.
class HttpServer : public httplib::Server {
 public:
  bool WidenBacklog() { return ::listen(svr_sock_, kListenBacklog) == 0; }
};

double Seconds(steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool SameInput(const ModelInput& a, const ModelInput& b) {
  return a.sample_shape == b.sample_shape && a.dtype == b.dtype && a.max_id == b.max_id &&
         (a.vocab == nullptr) == (b.vocab == nullptr) &&
         (a.vocab == nullptr || a.vocab->Serialize() == b.vocab->Serialize());
}

// The worker a give-back file names, and the signal that gives the node back.
struct LentWorker {
  pid_t pid = 0;
  int signal = 0;
};

// "PID SIGNAL" of give-back file `path`: NotFound without the file; InvalidArgument for other
// text, a signal other than SIGTERM or SIGUSR1, or a process whose executable is not named
// worker (a stale pid, a pid namespace other than the agent's).
StatusOr<LentWorker> ReadGiveBack(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path);
  long pid = 0;
  LentWorker w;
  if (!(in >> pid >> w.signal) || pid <= 1 || pid > std::numeric_limits<pid_t>::max() ||
      (w.signal != SIGTERM && w.signal != SIGUSR1)) {
    return InvalidArgument(path + ": expected \"PID SIGNAL\" (SIGNAL " + std::to_string(SIGTERM) +
                           " or " + std::to_string(SIGUSR1) + ")");
  }
  w.pid = static_cast<pid_t>(pid);
  std::error_code error;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", error);
  if (error || exe.filename() != "worker") {
    return InvalidArgument(path + ": process " + std::to_string(pid) + " is " +
                           (error ? "not there" : "'" + exe.string() + "'") + ", not a worker");
  }
  return w;
}

class InferenceServerImpl final : public InferenceServer {
 public:
  InferenceServerImpl(const InferenceServerOptions& options,
                      std::shared_ptr<const LoadedModel> model, Metrics* metrics,
                      std::unique_ptr<JsonLinesFile> events)
      : options_(options),
        metrics_(metrics),
        events_(std::move(events)),
        queue_(options.batching),
        model_(std::move(model)),
        requests_ok_(Requests("200")),
        request_seconds_(metrics->GetHistogram(
            "eps_serve_request_seconds",
            "Predict requests answered 200: seconds from arrival to the answer.",
            ExponentialBuckets(0.0005, 2, 16))),
        inference_seconds_(metrics->GetHistogram("eps_serve_inference_seconds",
                                                 "Seconds one batch's forward pass took.",
                                                 ExponentialBuckets(0.0005, 2, 16))),
        batch_size_(metrics->GetHistogram("eps_serve_batch_instances",
                                          "Instances in each batch run.",
                                          ExponentialBuckets(1, 2, 11))),
        batch_requests_(metrics->GetHistogram("eps_serve_batch_requests",
                                              "Requests in each batch run.",
                                              ExponentialBuckets(1, 2, 9))),
        queue_depth_(metrics->GetGauge("eps_serve_queue_depth", "Predict requests queued.")),
        queue_instances_(
            metrics->GetGauge("eps_serve_queue_instances", "Instances of the queued requests.")),
        in_flight_(metrics->GetGauge(
            "eps_serve_in_flight",
            "Predict requests inside the server (being read, queued or running).")),
        model_version_(metrics->GetGauge("eps_serve_model_version",
                                         "How many models were served so far (1: the first).")),
        draining_gauge_(metrics->GetGauge("eps_serve_draining", "1 while the server drains.")),
        give_backs_(metrics->GetCounter(
            "eps_serve_give_backs_total",
            "Lent workers this server signalled to give the node back (--give_back_file).")) {
    model_version_.Set(1);
    server_.new_task_queue = [n = options_.batching.max_queue + kSpareHttpThreads] {
      return new httplib::ThreadPool(n);
    };
    // SO_REUSEADDR only (not httplib's SO_REUSEPORT): a second server must not
    // bind the same port.
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    server_.set_read_timeout(kIoTimeout);
    server_.set_write_timeout(kIoTimeout);
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_max_count(kKeepAliveMaxCount);
    server_.set_payload_max_length(options_.max_body_bytes);
    server_.Post(
        R"(/v1/models/([^/:]+):predict)",
        [this](const httplib::Request& req, httplib::Response& res) { Predict(req, res); });
    server_.Get(
        R"(/v1/models/([^/:]+))",
        [this](const httplib::Request& req, httplib::Response& res) { ModelStatus(req, res); });
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(nlohmann::json{{"models", {options_.name}}}.dump(), kJson);
    });
    for (const char* path : {"/healthz", "/v1/health"}) {
      server_.Get(path, [this](const httplib::Request&, httplib::Response& res) {
        const bool draining = draining_.load();
        res.status = draining ? 503 : 200;
        res.set_content(draining ? R"({"status": "draining"})" : R"({"status": "ok"})", kJson);
      });
    }
    server_.Get("/v1/load",
                [this](const httplib::Request& req, httplib::Response& res) { Load(req, res); });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // What httplib answers itself (no route, a body over the limit, a request
    // it cannot read) gets a JSON reason too.
    server_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string why;
          switch (res.status) {
            case 404:
              why = "no such path or method: " + req.method + " " + req.path +
                    " (POST /v1/models/" + options_.name + ":predict, GET /v1/models/" +
                    options_.name + ", /healthz, /metrics)";
              break;
            case 405:
              why = "method " + req.method + " is not served on " + req.path;
              break;
            case 413:
              Error("too_large");
              why = "the body is larger than " + std::to_string(options_.max_body_bytes) +
                    " bytes (--max_body_mb)";
              break;
            default:
              why = "the request cannot be served (HTTP " + std::to_string(res.status) + ")";
          }
          res.set_content(ErrorBody(why), kJson);
          return httplib::Server::HandlerResponse::Handled;
        }));
  }

  ~InferenceServerImpl() override { Drain(); }

  Status Bind() {
    const int port =
        options_.port == 0
            ? server_.bind_to_any_port(options_.host)
            : (server_.bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port <= 0) {
      return Unavailable("cannot serve on " + options_.host + ":" + std::to_string(options_.port) +
                         ": the port is taken, or the host is not an address of this machine");
    }
    if (!server_.WidenBacklog()) return Internal("cannot widen the listen backlog");
    port_ = port;
    EPS_ASSIGN_OR_RETURN(inference_, StartThreadWithoutStopSignals([this] { InferenceLoop(); }));
    std::promise<void> finished;
    http_finished_ = finished.get_future();
    EPS_ASSIGN_OR_RETURN(
        http_, StartThreadWithoutStopSignals([this, finished = std::move(finished)]() mutable {
          server_.listen_after_bind();
          finished.set_value();
        }));
    return OkStatus();
  }

  int port() const override { return port_; }

  Status Swap(std::shared_ptr<const LoadedModel> model) override {
    std::lock_guard<std::mutex> lock(model_mu_);
    if (!SameInput(model->model->input(), model_->model->input())) {
      return FailedPrecondition("the new model " + model->file + " takes instances of shape " +
                                model->model->input().ShapeText() + ", the served one " +
                                model_->model->input().ShapeText() + ": not swapped");
    }
    model_ = std::move(model);
    ++version_;
    model_version_.Set(static_cast<double>(version_));
    return OkStatus();
  }

  std::shared_ptr<const LoadedModel> model() const override {
    std::lock_guard<std::mutex> lock(model_mu_);
    return model_;
  }

  int64_t Drain() override {
    std::lock_guard<std::mutex> lock(drain_mu_);
    if (!drained_) {
      draining_ = true;
      draining_gauge_.Set(1);
      WakeLoadWaiters();
      queue_.Close();
      if (inference_.joinable()) inference_.join();  // every queued request answered
      if (http_.joinable()) {
        // httplib 0.11's stop() does nothing before the listening thread has
        // entered its accept loop: call it once that thread runs, or let the
        // thread end on its own (a listen error).
        while (!server_.is_running()) {
          if (http_finished_.wait_for(std::chrono::milliseconds(1)) == std::future_status::ready)
            break;
        }
        server_.stop();  // the pool's threads send the answers they hold, then end
        http_.join();
      }
      drained_ = true;
    }
    return static_cast<int64_t>(requests_ok_.value());
  }

 private:
  Counter& Requests(const std::string& code) {
    return metrics_->GetCounter("eps_serve_requests_total",
                                "Predict requests answered, by HTTP status.", {{"code", code}});
  }

  void Error(const std::string& reason) {
    metrics_
        ->GetCounter("eps_serve_errors_total", "Requests refused or failed, by reason.",
                     {{"reason", reason}})
        .Add();
  }

  void Answer(httplib::Response& res, int code, const std::string& body,
              const char* reason = nullptr) {
    res.status = code;
    res.set_content(body, kJson);
    Requests(std::to_string(code)).Add();
    if (reason != nullptr) Error(reason);
  }

  bool KnownModel(const httplib::Request& req, httplib::Response& res) {
    if (req.matches.size() > 1 && req.matches[1] == options_.name) return true;
    const std::string name = req.matches.size() > 1 ? req.matches[1].str() : "";
    Answer(res, 404,
           ErrorBody("no model '" + name + "' here: this server serves '" + options_.name + "'"),
           "unknown_model");
    return false;
  }

  // GET /v1/load?in_flight=N&arrived_above=A&wait_ms=T: {"in_flight": k, "arrived": a} as soon
  // as k >= N (default 1) predict requests are inside the server, or a > A of them have arrived
  // since it started (A given: no request between two waits goes unseen, however short), or after
  // T ms (default 0, at most 10 s), or at a drain: the lending agent's wake-up
  // (launcher/serve_probe.py), which gives the node back the moment requests come instead of at
  // its next poll.
  void Load(const httplib::Request& req, httplib::Response& res) {
    auto param = [&req](const char* name, int64_t fallback, int64_t lo, int64_t hi, int64_t* out) {
      if (!req.has_param(name)) {
        *out = fallback;
        return true;
      }
      const std::string v = req.get_param_value(name);
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      *out = x;
      return !v.empty() && *end == '\0' && errno == 0 && x >= lo && x <= hi;
    };
    int64_t want = 1, wait_ms = 0, above = -1;
    if (!param("in_flight", 1, 1, 1 << 30, &want) || !param("wait_ms", 0, 0, 10000, &wait_ms) ||
        !param("arrived_above", -1, 0, INT64_MAX, &above)) {
      Answer(res, 400,
             ErrorBody("in_flight must be an integer >= 1, wait_ms one in [0, 10000] and "
                       "arrived_above one >= 0"),
             "bad_request");
      return;
    }
    {
      std::unique_lock<std::mutex> lock(load_mu_);
      load_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
        return in_flight_.value() >= static_cast<double>(want) ||
               (above >= 0 && arrived_.load() > static_cast<uint64_t>(above)) || draining_.load();
      });
    }
    res.set_content(nlohmann::json{{"in_flight", static_cast<int64_t>(in_flight_.value())},
                                   {"arrived", arrived_.load()}}
                        .dump(),
                    kJson);
  }

  // A lent worker named by the give-back file (InferenceServerOptions::give_back_file) gets its
  // signal: the file read and checked, then claimed by renaming it (one claimant: this server or
  // the agent's probe, which finds it gone and sends nothing), then read again (what was claimed
  // is what counts). A file that names no worker is left for the agent's probe to act on.
  // Without a file, one failed open a request.
  void GiveBack() {
    const std::string& file = options_.give_back_file;
    if (file.empty()) return;
    const double arrived = WallSeconds();  // the request's arrival: nothing was read yet
    StatusOr<LentWorker> lent = ReadGiveBack(file);
    if (lent.ok()) {
      const std::string taken = file + ".taken";
      if (std::rename(file.c_str(), taken.c_str()) != 0) return;  // claimed by another
      lent = ReadGiveBack(taken);
    }
    if (!lent.ok()) {
      if (lent.status().code() != StatusCode::kNotFound) {  // NotFound: no worker lent
        LOG_FIRST_N(WARNING, 10) << "give-back: " << lent.status().message();
      }
      return;
    }
    if (::kill(lent->pid, lent->signal) != 0) {
      LOG(WARNING) << "give-back: worker " << lent->pid
                   << " could not be signalled: " << std::strerror(errno);
      return;
    }
    give_backs_.Add();
    LOG(INFO) << "a request arrived: signalled lent worker " << lent->pid << " (signal "
              << lent->signal << ")";
    if (events_ != nullptr) {
      const nlohmann::json line = {
          {"event", "gave_back"}, {"t", arrived}, {"pid", lent->pid}, {"signal", lent->signal}};
      std::lock_guard<std::mutex> lock(events_mu_);
      const Status st = events_->Append(line.dump());
      if (!st.ok()) LOG(ERROR) << "--events_file: " << st.ToString();  // once; serving goes on
    }
  }

  // Wakes the /v1/load waiters; the lock orders the wake-up after their check of the count.
  void WakeLoadWaiters() {
    { std::lock_guard<std::mutex> lock(load_mu_); }
    load_cv_.notify_all();
  }

  void Predict(const httplib::Request& req, httplib::Response& res) {
    const steady_clock::time_point arrived = steady_clock::now();
    struct InFlight {
      InferenceServerImpl& s;
      explicit InFlight(InferenceServerImpl& server) : s(server) {
        s.GiveBack();
        s.in_flight_.Add(1);
        s.arrived_.fetch_add(1);
        s.WakeLoadWaiters();
      }
      ~InFlight() { s.in_flight_.Add(-1); }
    } in_flight(*this);
    if (!KnownModel(req, res)) return;
    if (draining_) {
      Answer(res, 503, ErrorBody("the server is draining: it takes no new requests"), "draining");
      return;
    }
    const std::shared_ptr<const LoadedModel> model = this->model();
    auto instances = ParsePredictRequest(req.body, model->model->input(), options_.max_instances);
    if (!instances.ok()) {
      Answer(res, 400, ErrorBody(instances.status().message()), "bad_request");
      return;
    }
    auto pending = std::make_shared<PendingRequest>();
    pending->instances = std::move(instances).value();
    pending->arrived = arrived;
    std::future<RequestResult> result = pending->result.get_future();
    const Status pushed = queue_.Push(pending);
    if (!pushed.ok()) {
      const bool full = pushed.code() == StatusCode::kResourceExhausted;
      if (full) res.set_header("Retry-After", "1");
      Answer(res, 503, ErrorBody(pushed.message()), full ? "queue_full" : "draining");
      return;
    }
    SetQueueGauges();
    if (result.wait_for(options_.request_timeout) != std::future_status::ready) {
      Answer(res, 504, ErrorBody("no answer within the request timeout"), "timeout");
      return;
    }
    const RequestResult r = result.get();
    if (!r.status.ok()) {
      const bool bad = r.status.code() == StatusCode::kInvalidArgument;
      Answer(res, bad ? 400 : 500, ErrorBody(r.status.message()), bad ? "bad_request" : "model");
      return;
    }
    // The class names are the served model's: a swap keeps the vocabulary (SameInput).
    Answer(res, 200,
           FormatPredictions(*r.outputs, r.first, pending->instances.count,
                             this->model()->model->labels()));
    res.set_header("X-Model-Version", std::to_string(r.model_version));
    res.set_header("X-Batch-Instances", std::to_string(r.batch_size));
    request_seconds_.Observe(Seconds(steady_clock::now() - arrived));
  }

  void ModelStatus(const httplib::Request& req, httplib::Response& res) {
    if (!KnownModel(req, res)) return;
    const std::shared_ptr<const LoadedModel> m = model();
    uint64_t version;
    {
      std::lock_guard<std::mutex> lock(model_mu_);
      version = version_;
    }
    nlohmann::json j = {
        {"name", options_.name},
        {"ready", !draining_.load()},
        {"version", version},
        {"file", m->file},
        {"sha256", m->sha256},
        {"input_shape", m->model->input().sample_shape},
        {"input", m->model->input().dtype == DataType::kInt64 ? "token ids" : "float32"}};
    for (const char* key : {"job_id", "model", "steps", "params_sha256"}) {
      auto it = m->metadata.find(key);
      if (it != m->metadata.end()) j[key] = it->second;
    }
    res.status = draining_ ? 503 : 200;
    res.set_content(j.dump(), kJson);
  }

  void SetQueueGauges() {
    queue_depth_.Set(static_cast<double>(queue_.depth()));
    queue_instances_.Set(static_cast<double>(queue_.queued_instances()));
  }

  // The inference thread: batch after batch, each on the model served when
  // it starts, until the queue is closed and drained.
  void InferenceLoop() {
    for (;;) {
      std::vector<std::shared_ptr<PendingRequest>> batch = queue_.Take();
      SetQueueGauges();
      if (batch.empty()) return;
      std::shared_ptr<const LoadedModel> model;
      uint64_t version;
      {
        std::lock_guard<std::mutex> lock(model_mu_);
        model = model_;
        version = version_;
      }
      Instances all;
      if (batch.size() == 1) {
        all = batch[0]->instances;  // a copy, so the request keeps its own
      } else {
        for (const auto& r : batch) all.Append(r->instances);
      }
      const steady_clock::time_point start = steady_clock::now();
      StatusOr<BatchOutputs> out = model->model->Predict(all);
      inference_seconds_.Observe(Seconds(steady_clock::now() - start));
      batch_size_.Observe(static_cast<double>(all.count));
      batch_requests_.Observe(static_cast<double>(batch.size()));
      if (out.ok() || batch.size() == 1) {
        auto shared =
            out.ok() ? std::make_shared<const BatchOutputs>(std::move(out).value()) : nullptr;
        int64_t first = 0;
        for (const auto& r : batch) {
          r->result.set_value({out.status(), shared, first, all.count, version});
          first += r->instances.count;
        }
        continue;
      }
      // A batch of several requests failed: each runs alone, so that one
      // request the model refuses does not fail the others.
      for (const auto& r : batch) {
        StatusOr<BatchOutputs> alone = model->model->Predict(r->instances);
        auto shared =
            alone.ok() ? std::make_shared<const BatchOutputs>(std::move(alone).value()) : nullptr;
        r->result.set_value({alone.status(), shared, 0, r->instances.count, version});
      }
    }
  }

 private:
  const InferenceServerOptions options_;
  Metrics* const metrics_;
  const std::unique_ptr<JsonLinesFile> events_;  // options_.events_file (null: none)
  std::mutex events_mu_;                         // its appends, from the request threads
  BatchQueue queue_;
  mutable std::mutex model_mu_;
  std::shared_ptr<const LoadedModel> model_;  // guarded by model_mu_
  uint64_t version_ = 1;                      // guarded by model_mu_
  Counter& requests_ok_;
  Histogram& request_seconds_;
  Histogram& inference_seconds_;
  Histogram& batch_size_;
  Histogram& batch_requests_;
  Gauge& queue_depth_;
  Gauge& queue_instances_;
  Gauge& in_flight_;
  Gauge& model_version_;
  Gauge& draining_gauge_;
  Counter& give_backs_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> arrived_{0};  // predict requests since the start (/v1/load)
  std::mutex load_mu_;  // orders /v1/load's waits with the in-flight count's rises
  std::condition_variable load_cv_;
  std::mutex drain_mu_;
  bool drained_ = false;  // guarded by drain_mu_
  HttpServer server_;
  int port_ = -1;
  std::future<void> http_finished_;
  std::thread inference_;
  std::thread http_;
};

}  // namespace

StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const InferenceServerOptions& options, std::shared_ptr<const LoadedModel> model,
    Metrics* metrics) {
  if (metrics == nullptr) return InvalidArgument("an inference server needs a metrics registry");
  if (model == nullptr || model->model == nullptr) return InvalidArgument("no model to serve");
  if (options.name.empty()) return InvalidArgument("--name: the model needs a name");
  if (options.name.find_first_of("/:") != std::string::npos)
    return InvalidArgument("--name " + options.name + ": a name holds no '/' or ':'");
  if (options.port < 0 || options.port > 65535)
    return InvalidArgument("--port " + std::to_string(options.port) + " is out of range");
  if (options.batching.max_batch < 1) return InvalidArgument("--max_batch must be at least 1");
  if (options.batching.max_queue < 1) return InvalidArgument("--max_queue must be at least 1");
  if (options.batching.max_delay.count() < 0)
    return InvalidArgument("--max_delay_ms must not be negative");
  if (options.max_body_bytes < 1) return InvalidArgument("--max_body_mb must be positive");
  if (options.max_instances < 1) return InvalidArgument("--max_instances must be at least 1");
  std::unique_ptr<JsonLinesFile> events;
  if (!options.events_file.empty()) {
    auto opened = JsonLinesFile::Open(options.events_file);
    if (!opened.ok()) return opened.status().WithContext("--events_file");
    events = std::move(opened).value();
  }
  auto server =
      std::make_unique<InferenceServerImpl>(options, std::move(model), metrics, std::move(events));
  EPS_RETURN_IF_ERROR(server->Bind());
  return std::unique_ptr<InferenceServer>(std::move(server));
}

}  // namespace eps
