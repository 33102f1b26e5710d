// eps_serve: `elasticps serve`, an inference server for a job's export
// (serve/server.h, docs/serving.md).
//
//   eps_serve --model FILE [--name NAME] [--host H] [--port P] [--port_file F]
//             [--max_batch N] [--max_delay_ms MS] [--max_queue N] [--max_body_mb MB]
//             [--follow RUN_DIR [--follow_interval_ms MS]] [--arch A] [--vocab F] ...
//
// With --follow RUN_DIR it serves the job's newest model: its export files
// (model.script.pt, model.safetensors) and, while it trains, its newest
// durable checkpoint, which it exports with export_model (beside this binary)
// into a temporary folder of its own (serve/follow.h). A live job with no
// checkpoint yet: it waits (--follow_wait_s) before it serves.
//
// Once it serves it prints one JSON line on stdout, {"event": "serving",
// "port": P, "address": "H:P", "name": NAME, ...} (and writes the port to
// --port_file, atomically), so that a caller that asked for port 0 reads the
// port. SIGTERM or SIGINT drain it: new requests get 503, every queued one is
// answered, then it prints {"event": "drained", "answered": N} and exits 0.
// Exit codes: 0 drained, 1 an internal error, 2 bad flags or a model that
// does not load.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "data/model_input.h"
#include "models/exported_model.h"
#include "models/model_export.h"
#include "models/model_runner.h"
#include "serve/follow.h"
#include "serve/server.h"
#include "serve/torch_model.h"

DEFINE_string(model, "",
              "The export to serve: model.script.pt, a model.safetensors (a built-in model's, or "
              "a TorchScript job's with its module) or a built-in model's model.pt (with --arch); "
              "with --follow, default: RUN_DIR's");
DEFINE_string(name, "", "The model's name in /v1/models/NAME (default: the export's job_id)");
DEFINE_string(host, "127.0.0.1", "The address to serve on (0.0.0.0: every interface)");
DEFINE_int32(port, 8500, "The port (0: a free one, printed on stdout and written to --port_file)");
DEFINE_string(port_file, "", "Write the bound port to this file once serving");
DEFINE_string(arch, "", "The built-in model a model.pt / model.safetensors holds (as predict's)");
DEFINE_string(script, "",
              "A TorchScript job's model.safetensors: the module that runs it (default: the "
              "job's own, as its metadata names it, unchanged since)");
DEFINE_string(vocab, "", "A text model's vocabulary (default: the vocab.json beside the model)");
DEFINE_string(input_dtype, "",
              "A TorchScript module's instances: float32 (the default) or int64 (ids, >= 0)");
DEFINE_string(input_shape, "",
              "One instance's shape, comma-separated (default: 1,28,28, or a text model's "
              "seq_len token ids)");
DEFINE_bool(raw, false, "Answer the model's outputs, not classes and probabilities");
DEFINE_int32(threads, 1, "libtorch intra-op threads (the job's --threads: bits depend on it)");
DEFINE_int64(max_batch, 32,
             "Instances per batch (a request is never split: a larger one runs alone)");
DEFINE_double(max_delay_ms, 2, "How long the oldest queued request waits for more to batch with");
DEFINE_int64(max_queue, 64, "Requests that may wait; beyond, 503");
DEFINE_double(max_body_mb, 32, "The largest request body (MiB); beyond, 413");
DEFINE_int64(max_instances, 4096, "Instances in one request; beyond, 400");
DEFINE_double(request_timeout_s, 60, "A request not answered by then gets 504");
DEFINE_string(follow, "",
              "A job's run dir: serve its newest export (model.script.pt, else "
              "model.safetensors) and swap each new one in between batches");
DEFINE_int32(follow_interval_ms, 1000, "--follow: how often the export is looked at");
DEFINE_bool(follow_checkpoints, true,
            "--follow: also serve the job's newest durable checkpoint (RUN_DIR/store, exported "
            "by export_model) as soon as every shard holds it");
DEFINE_double(follow_wait_s, 600,
              "--follow: how long to wait at start for a first export or checkpoint");
DEFINE_string(
    give_back_file, "",
    "A lending agent's give-back file (launcher/lend.sh --give-back-file): the first request "
    "to arrive signals the worker it names, so the node is given back at once "
    "(docs/serving.md)");
DEFINE_string(events_file, "",
              "Append JSON lines of what the server does for a lending agent here: a gave_back "
              "for each lent worker it signals, stamped with the request's arrival "
              "(docs/serving.md)");
DEFINE_string(cpu_kernels, "",
              "The CPU kernel set (as predict's; default: the export's, else x86-64-v3)");

namespace eps {
namespace {

constexpr const char* kUsage =
    "elasticps serve --model FILE [--name NAME] [--host H] [--port P] [--port_file F] "
    "[--max_batch N] [--max_delay_ms MS] [--max_queue N] [--max_body_mb MB] "
    "[--follow RUN_DIR] [--follow_interval_ms MS] [--arch A] [--script F] [--vocab F] "
    "[--input_shape D,..] [--input_dtype float32|int64] [--raw] [--threads N]";

StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  if (text.empty()) return shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      const long long d = std::stoll(part, &used);
      if (used != part.size() || d < 1) throw std::invalid_argument(part);
      shape.push_back(d);
    } catch (const std::exception&) {
      return InvalidArgument("--input_shape " + text +
                             ": expected positive sizes, comma-separated");
    }
  }
  return shape;
}

// The export files --follow watches in RUN_DIR: its TorchScript module
// first, then its model.safetensors (a TorchScript job's does not load alone).
std::vector<std::string> FollowedFiles(const std::string& run_dir) {
  const std::filesystem::path d(run_dir);
  return {(d / "model.script.pt").string(), (d / "model.safetensors").string()};
}

// The folder this binary is in: export_model is beside it.
std::filesystem::path BinaryDir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : self.parent_path();
}

// Waits up to `wait` for SIGTERM or SIGINT (blocked in every thread); true if one came.
bool StopSignalWithin(std::chrono::milliseconds wait) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  timespec t{static_cast<time_t>(wait.count() / 1000),
             static_cast<long>(wait.count() % 1000) * 1000000};
  return sigtimedwait(&stop, nullptr, &t) > 0;
}

// A temporary folder, removed with its files when it goes.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

int Fail(const Status& st) {
  std::fprintf(stderr, "elasticps serve: %s\n", st.ToString().c_str());
  const StatusCode c = st.code();
  return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ||
                 c == StatusCode::kDataLoss
             ? 2
             : 1;
}

int Run() {
  if (FLAGS_max_delay_ms < 0 || FLAGS_max_body_mb <= 0 || FLAGS_request_timeout_s <= 0 ||
      FLAGS_threads < 1 || FLAGS_follow_interval_ms < 1 || FLAGS_follow_wait_s < 0) {
    return Fail(InvalidArgument(
        "--max_delay_ms, --max_body_mb, --request_timeout_s, --threads, --follow_interval_ms and "
        "--follow_wait_s must be positive"));
  }
  auto shape = ParseShape(FLAGS_input_shape);
  if (!shape.ok()) return Fail(shape.status());
  TorchModelOptions m;
  m.path = FLAGS_model;
  m.arch = FLAGS_arch;
  m.script = FLAGS_script;
  m.vocab = FLAGS_vocab;
  m.input_dtype = FLAGS_input_dtype;
  m.threads = FLAGS_threads;
  m.input_shape = *shape;
  m.raw = FLAGS_raw;
  auto load = [m](const std::string& path) -> StatusOr<std::shared_ptr<const LoadedModel>> {
    // A TorchScript job's model.safetensors serves through its module where the job left no
    // model.script.pt (its table in a table file); else the model.script.pt beside it does.
    const std::filesystem::path file(path);
    std::error_code ec;
    if (file.extension() == ".safetensors" && m.arch.empty() && m.script.empty() &&
        !IsBuiltinModel(ExportMetadataOf(path)["model"]) &&
        std::filesystem::exists(file.parent_path() / "model.script.pt", ec)) {
      return FailedPrecondition(path + " is a TorchScript job's: its model.script.pt serves");
    }
    TorchModelOptions again = m;
    again.path = path;
    return LoadTorchModel(again);
  };

  // --follow: the export files, and the job's durable checkpoints exported
  // into a folder of this server's.
  std::vector<std::unique_ptr<ModelSource>> sources;
  TempDir exports;
  if (!FLAGS_follow.empty()) {
    const std::vector<std::string> files =
        FLAGS_model.empty() ? FollowedFiles(FLAGS_follow) : std::vector<std::string>{FLAGS_model};
    for (const std::string& f : files) sources.push_back(WatchFile(f));
    if (FLAGS_follow_checkpoints) {
      char tmpl[] = "/tmp/eps-serve-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) return Fail(Internal("cannot make a temporary folder"));
      exports.path = tmpl;
      CheckpointExportOptions c;
      c.export_model = (BinaryDir() / "export_model").string();
      c.stores = (std::filesystem::path(FLAGS_follow) / "store").string();
      c.out_dir = exports.path;
      sources.push_back(
          WatchCheckpoints((std::filesystem::path(FLAGS_follow) / "events.jsonl").string(), c));
    }
  }
  // The first model: --model's; with --follow, the first a source offers
  // that loads (a live job may have none yet: wait for its first checkpoint).
  StatusOr<std::shared_ptr<const LoadedModel>> model = NotFound("no model");
  if (FLAGS_follow.empty()) {
    model = LoadTorchModel(m);
  } else {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(FLAGS_follow_wait_s * 1000));
    bool waiting_said = false;
    while (!model.ok()) {
      for (auto& source : sources) {
        if (model.ok()) break;
        if (std::optional<std::string> path = source->Poll()) {
          model = load(*path);
          if (!model.ok()) LOG(WARNING) << "--follow: " << model.status().ToString();
        }
      }
      if (model.ok()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Fail(NotFound("--follow " + FLAGS_follow +
                             ": no export and no durable checkpoint "
                             "to serve within --follow_wait_s"));
      }
      if (!waiting_said) {
        LOG(INFO) << "--follow: waiting for " << FLAGS_follow << "'s first export or checkpoint";
        waiting_said = true;
      }
      if (StopSignalWithin(std::chrono::milliseconds(FLAGS_follow_interval_ms))) return 0;
    }
  }
  if (!model.ok()) return Fail(model.status());
  m.path = (*model)->file;

  InferenceServerOptions o;
  o.host = FLAGS_host;
  o.port = FLAGS_port;
  o.name = FLAGS_name;
  if (o.name.empty()) {
    auto it = (*model)->metadata.find("job_id");
    o.name = it != (*model)->metadata.end() && !it->second.empty() ? it->second : "model";
  }
  o.give_back_file = FLAGS_give_back_file;
  o.events_file = FLAGS_events_file;
  o.batching.max_batch = FLAGS_max_batch;
  o.batching.max_delay = std::chrono::microseconds(static_cast<int64_t>(FLAGS_max_delay_ms * 1000));
  o.batching.max_queue = FLAGS_max_queue < 1 ? 0 : static_cast<size_t>(FLAGS_max_queue);
  o.max_body_bytes = static_cast<size_t>(FLAGS_max_body_mb * 1024 * 1024);
  o.max_instances = FLAGS_max_instances;
  o.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(FLAGS_request_timeout_s * 1000));
  Metrics metrics;
  auto server = InferenceServer::Start(o, *model, &metrics);
  if (!server.ok()) return Fail(server.status());

  std::unique_ptr<ModelFollower> follower;
  if (!FLAGS_follow.empty()) {
    ModelFollowerOptions f;
    f.interval = std::chrono::milliseconds(FLAGS_follow_interval_ms);
    InferenceServer* s = server->get();
    auto started = ModelFollower::Start(
        f, *model, std::move(sources), load,
        [s](std::shared_ptr<const LoadedModel> loaded) { return s->Swap(std::move(loaded)); },
        &metrics);
    if (!started.ok()) return Fail(started.status());
    follower = std::move(started).value();
  }

  const int port = (*server)->port();
  if (!FLAGS_port_file.empty()) {
    if (Status st = WriteFileAtomically(FLAGS_port_file, std::to_string(port) + "\n"); !st.ok())
      return Fail(st);
  }
  nlohmann::json ready = {{"event", "serving"},
                          {"port", port},
                          {"address", FLAGS_host + ":" + std::to_string(port)},
                          {"name", o.name},
                          {"model", m.path},
                          {"sha256", (*model)->sha256},
                          {"follow", FLAGS_follow}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  LOG(INFO) << "serving " << m.path << " as '" << o.name << "' on http://" << FLAGS_host << ":"
            << port << "/v1/models/" << o.name << ":predict";

  // The stop signals are blocked in every thread (main blocked them first):
  // this thread takes them here.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  LOG(INFO) << "signal " << sig << ": draining";
  follower.reset();  // no swap during the drain
  const int64_t answered = (*server)->Drain();
  std::printf("%s\n", nlohmann::json{{"event", "drained"}, {"answered", answered}}.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  gflags::SetUsageMessage(eps::kUsage);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (argc > 1) {
    std::fprintf(stderr, "elasticps serve: unexpected argument '%s'\nusage: %s\n", argv[1],
                 eps::kUsage);
    return 2;
  }
  if (FLAGS_model.empty() && FLAGS_follow.empty()) {
    std::fprintf(stderr, "elasticps serve: --model (or --follow RUN_DIR) is required\nusage: %s\n",
                 eps::kUsage);
    return 2;
  }
  // The job's CPU kernels, so that predictions are `elasticps predict`'s bits on any host.
  const std::string model = FLAGS_model.empty() ? FLAGS_follow + "/model.safetensors" : FLAGS_model;
  const std::string kernels =
      FLAGS_cpu_kernels.empty() ? eps::ExportCpuKernels(model) : FLAGS_cpu_kernels;
  if (auto used = eps::UseCpuKernels(kernels, args); !used.ok()) {
    std::fprintf(stderr, "elasticps serve: --cpu_kernels: %s\n", used.status().ToString().c_str());
    return 2;
  }
  // Before any thread starts, so that every thread inherits the mask and the
  // signals reach only Run's sigwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return eps::Run();
}
