// eps_worker: a worker process. It needs only the coordinator's address; the
// job spec, the model and the data location come from the coordinator.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/cpus.h"
#include "common/files.h"
#include "common/memory.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "models/model_runner.h"
#include "schema/curve.h"
#include "worker/pool_client.h"
#include "worker/worker.h"

DEFINE_string(coordinator, "", "The coordinator's endpoint, e.g. tcp://10.0.0.1:5555");
DEFINE_int32(metrics_port, -1,
             "Serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md): -1 off, "
             "0 any free port");
DEFINE_string(metrics_host, "127.0.0.1",
              "The address --metrics_port binds (0.0.0.0: every interface)");
DEFINE_string(
    scheduler, "",
    "Instead of --coordinator: join the worker pool of this inter-job scheduler (pool_scheduler), "
    "which names the job to train and moves the worker between jobs");
DEFINE_string(pool_token_file, "", "File holding the pool's token, with --scheduler (empty: none)");
DEFINE_int32(pool_poll_ms, 1000,
             "With --scheduler: interval between two questions to the scheduler");
DEFINE_string(token_file, "", "File holding the job's secret token (empty: none)");
DEFINE_string(curve_secret_key, "",
              "CURVE (docs/security.md): this worker's secret key file (elasticps keygen); its "
              "public key must be among the job's allowed keys. Empty: plain TCP");
DEFINE_string(curve_server_key, "",
              "With --curve_secret_key: the job's servers' public key file (the coordinator and "
              "the shards share one); with --scheduler, a job's own comes from the scheduler");
DEFINE_string(pool_curve_server_key, "",
              "With --scheduler and --curve_secret_key: the pool scheduler's public key file");
DEFINE_int32(plan_timeout_s, 600, "Longest wait for the coordinator's next plan");
DEFINE_int32(register_timeout_s, 120,
             "Longest wait for the coordinator to answer a registration (a log line every 10 s "
             "meanwhile); then the worker exits 3");
DEFINE_int32(rpc_timeout_s, 60, "Longest wait for a shard's reply");
DEFINE_int32(heartbeat_ms, 500, "Interval between two heartbeats to the coordinator");
DEFINE_string(device, "cpu",
              "Device to compute on: cpu, or cuda:N in a build against a CUDA libtorch (one worker "
              "process per "
              "GPU, or several sharing one)");
DEFINE_bool(print_device_kind, false,
            "Print the kind of --device (cpu, or cuda:<GPU name>) as the worker reports it, and "
            "exit: 0 if this "
            "build can compute on it, 2 (with the reason) if not");
DEFINE_int32(
    threads, 0,
    "Cores this worker may use (0: the job's intra-op thread count). Fewer than the job's count is "
    "refused (the bits depend on it); more is accepted, the extra cores stay unused");
DEFINE_double(
    slowdown, 1.0,
    "Testing and demo aid standing in for slower hardware: idle (F - 1) x each VW's compute time "
    "(on the CPU its CPU time) after it (1: off). Changes timing, never bits");
DEFINE_string(compute_cpus, "",
              "Pin the compute (libtorch) threads to these CPUs (a list as taskset -c takes it: 0, "
              "0-3, 0,2); "
              "the worker's other threads (ZeroMQ I/O, gradient reduction, heartbeats) then run on "
              "the rest of "
              "the CPUs it may use. Empty: no pinning. Changes timing, never bits");

DEFINE_bool(
    shm, true,
    "Move tensor bytes to and from shards on this host through shared memory instead of the "
    "socket: "
    "each pull offers a region the shard writes the weights into (a shard elsewhere answers "
    "inline), "
    "and once a shard has answered that way the block partials are pushed to it from regions too. "
    "Changes timing, never bits");
DEFINE_string(report_file, "",
              "Write the worker's report here when it ends: JSON with where the time went, what "
              "moved through shared memory, the worker ids it held and how it ended "
              "(docs/events.md). Empty: none");
DEFINE_string(model_cache_dir, "",
              "The host's cache of model files (TorchScript models, --init_from files), keyed by "
              "SHA-256: a second worker of the host, or this one attaching again, fetches nothing "
              "from the coordinator. Empty: $TMPDIR/elasticps-model-cache-<uid> (/tmp without "
              "TMPDIR); 'none': no cache. A directory that cannot be written is a warning: the "
              "files are fetched and kept in memory only");
DEFINE_int64(model_cache_mb, 8192,
             "The model cache's bound, in MiB: once the files in it total more, the ones used "
             "least recently are removed (the file just fetched stays). 0: no bound");
DEFINE_int32(model_fetch_in_flight, 4,
             "FetchModel requests in flight at once while a model file is fetched (1 to 64)");
DEFINE_string(
    reported_device_kind, "",
    "Testing aid: report this device kind to the coordinator instead of the device's own (the "
    "computation is unchanged)");
DEFINE_bool(testing_skip_cpu_kernels, false,
            "Testing aid: apply no CPU kernel set, as on a host whose CPU cannot run the job's; "
            "the worker reports the kernels its environment gives, and the coordinator refuses it");

namespace {
// Written by the signal handlers (and g_leave by the pool client's thread): lock-free atomics.
std::atomic<bool> g_stop{false};    // SIGTERM/SIGINT: leave and exit
std::atomic<bool> g_leave{false};   // leave the current job (a signal, or the pool scheduler)
std::atomic<bool> g_park{false};    // SIGUSR1: leave the job and wait, parked, for SIGUSR2
std::atomic<bool> g_resume{false};  // SIGUSR2 since the last SIGUSR1: join the job again
static_assert(std::atomic<bool>::is_always_lock_free);
int g_wake[2] = {-1, -1};  // a pipe each handler writes a byte to: wakes a parked worker

void Wake() {
  const char byte = 0;
  if (g_wake[1] >= 0) (void)!write(g_wake[1], &byte, 1);  // full: a wake-up is pending anyway
}
// The first SIGTERM/SIGINT asks for a graceful leave; a second one kills.
void OnSignal(int sig) {
  g_stop = true;
  g_leave = true;
  std::signal(sig, SIG_DFL);
  Wake();
}
void OnPark(int) {
  g_resume = false;
  g_park = true;
  g_leave = true;
  Wake();
}
void OnResume(int) {
  g_resume = true;
  Wake();
}

// SIGUSR1 parks the worker (it leaves the job as on SIGTERM, then waits without using the CPU,
// its libraries, kernels and model cache warm) and SIGUSR2 makes it join again: what
// `launcher/lend.sh --keep-warm` sends, so that lending a node again costs a registration, not a
// process start. False when the pipe cannot be made (the signals then keep their default).
bool HandleParking() {
  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    PLOG(WARNING) << "no pipe for SIGUSR1/SIGUSR2: this worker cannot park";
    g_wake[0] = g_wake[1] = -1;
    return false;
  }
  std::signal(SIGUSR1, OnPark);
  std::signal(SIGUSR2, OnResume);
  return true;
}

// After a park's leave: waits for SIGUSR2 (true: join again) or SIGTERM/SIGINT (false: exit).
bool AwaitResume() {
  LOG(INFO) << "parked: SIGUSR2 joins the job again, SIGTERM exits";
  while (!g_stop && !g_resume) {
    pollfd fd{g_wake[0], POLLIN, 0};
    if (poll(&fd, 1, -1) < 0 && errno != EINTR) {
      PLOG(ERROR) << "waiting parked";
      return false;
    }
    char drain[64];
    while (read(g_wake[0], drain, sizeof drain) > 0) {
    }
  }
  if (g_stop) return false;
  g_park = false;
  g_leave = false;
  g_resume = false;
  LOG(INFO) << "resumed: joining the job again";
  return true;
}

// --compute_cpus: the main thread (which computes, and starts libtorch's
// threads) to `list`, the helper threads and ZeroMQ's I/O threads to the rest
// of the CPUs this process may use. Before the context starts its I/O threads.
eps::Status PinCompute(const std::string& list, zmq::context_t& context) {
  EPS_ASSIGN_OR_RETURN(std::vector<int> compute, eps::ParseCpuList(list));
  EPS_ASSIGN_OR_RETURN(std::vector<int> allowed, eps::AllowedCpus());
  if (!std::includes(allowed.begin(), allowed.end(), compute.begin(), compute.end())) {
    return eps::InvalidArgument("--compute_cpus=" + list + ": this process may only use CPUs " +
                                eps::FormatCpuList(allowed));
  }
  std::vector<int> rest;
  std::set_difference(allowed.begin(), allowed.end(), compute.begin(), compute.end(),
                      std::back_inserter(rest));
  EPS_RETURN_IF_ERROR(eps::PinThisThread(compute));
  LOG(INFO) << "computing on CPUs " << eps::FormatCpuList(compute) << ", helper threads on "
            << (rest.empty() ? "the same (no other CPU is allowed)" : eps::FormatCpuList(rest));
  if (rest.empty()) return eps::OkStatus();  // they inherit the main thread's
  eps::SetHelperThreadCpus(rest);
  for (int cpu : rest) {
    if (zmq_ctx_set(context.handle(), ZMQ_THREAD_AFFINITY_CPU_ADD, cpu) != 0) {
      return eps::Internal("zmq_ctx_set(ZMQ_THREAD_AFFINITY_CPU_ADD): " +
                           std::string(zmq_strerror(zmq_errno())));
    }
  }
  return eps::OkStatus();
}

// Pool mode: train the jobs the scheduler names, one after another, until a signal.
// The arguments this program was started with, for executing it again with a job's CPU kernels.
std::vector<std::string> g_argv;

// After a worker left a job that runs other CPU kernels than this process
// (Worker::wants_cpu_kernels): execute the worker again with them (this does
// not return then); on a CPU that cannot run them, go on with what
// UseCpuKernels reports instead, which the coordinator refuses. Exit code on
// failure, else -1.
int SwitchCpuKernels(const std::string& name, eps::WorkerOptions* options) {
  auto report = eps::UseCpuKernels(name, g_argv, !FLAGS_testing_skip_cpu_kernels);
  if (!report.ok()) {
    LOG(ERROR) << report.status().ToString();
    return 1;
  }
  options->cpu_kernels_set = name;
  options->cpu_kernels = *report;
  return -1;
}

int RunPool(eps::WorkerOptions options, zmq::context_t* context) {
  auto pool_token = eps::ReadTokenFile(FLAGS_pool_token_file);
  if (!pool_token.ok()) {
    LOG(ERROR) << pool_token.status().ToString();
    return 2;
  }
  auto pool_curve = eps::LoadCurveOptions(FLAGS_curve_secret_key, FLAGS_pool_curve_server_key);
  if (!pool_curve.ok()) {
    LOG(ERROR) << pool_curve.status().ToString();
    return 2;
  }
  if (pool_curve->enabled() && FLAGS_pool_curve_server_key.empty()) {
    LOG(ERROR) << "--scheduler with --curve_secret_key needs --pool_curve_server_key";
    return 2;
  }
  eps::PoolClient pool(context, FLAGS_scheduler, *pool_token,
                       eps::PoolRequest{options.host, options.device_kind, "", ""},
                       std::chrono::milliseconds(FLAGS_pool_poll_ms), *pool_curve);
  const eps::CurveOptions curve = options.curve;  // the job's server key comes with each job
  // A job that ended since the scheduler named it never answers: ask the scheduler again soon.
  options.register_timeout = std::chrono::seconds(15);
  LOG(INFO) << "joined the pool of the scheduler at " << FLAGS_scheduler;
  std::string ended;  // the job this worker last saw end
  while (!g_stop) {
    auto job = pool.NextJob(&g_stop, ended);
    if (!job.ok()) {
      if (g_stop) break;
      LOG(ERROR) << job.status().ToString();
      return job.status().code() == eps::StatusCode::kPermissionDenied ? 4 : 1;
    }
    LOG(INFO) << "the scheduler sends this worker to job " << job->job << " at "
              << job->coordinator;
    options.coordinator = job->coordinator;
    options.token = job->token;
    // A job without a server key (in the jobs file, or --curve_server_key) runs in the clear.
    options.curve = curve;
    if (!job->server_key.empty()) options.curve.server_key = job->server_key;
    if (options.curve.server_key.empty()) options.curve = eps::CurveOptions();
    g_leave = g_stop.load();
    auto worker = eps::Worker::Open(options, context);
    if (!worker.ok()) {
      LOG(ERROR) << worker.status().ToString();
      return 2;
    }
    eps::Status st = pool.Watch(job->job, &g_leave);
    if (st.ok()) st = (*worker)->Run(&g_leave);
    pool.StopWatching();
    if (st.ok() && !(*worker)->wants_cpu_kernels().empty() && !g_stop) {
      const std::string wanted = (*worker)->wants_cpu_kernels();
      worker->reset();  // its threads and sockets end before this program executes again
      if (int rc = SwitchCpuKernels(wanted, &options); rc >= 0) return rc;
      continue;  // the same job again, with its kernels
    }
    ended = st.ok() && !g_leave
                ? job->job
                : "";  // not left: the job stopped (it ended); said at the next poll
    if (!st.ok()) {
      // The job failed or refused this worker: the pool worker lives on; a pause keeps a failing
      // job from being retried in a tight loop.
      LOG(ERROR) << "job " << job->job << ": " << st.ToString();
      std::this_thread::sleep_for(std::chrono::seconds(1));
    } else {
      LOG(INFO) << "out of job " << job->job;
    }
  }
  LOG(INFO) << "left the pool";
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  g_argv.assign(argv, argv + argc);
  // Deterministic cuBLAS needs a fixed workspace, set before the first cuBLAS
  // call; whatever was set before would change the bits between workers.
  const char* inherited = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  const std::string overridden =
      inherited != nullptr && std::strcmp(inherited, eps::kCublasWorkspaceConfig) != 0 ? inherited
                                                                                       : "";
  setenv("CUBLAS_WORKSPACE_CONFIG", eps::kCublasWorkspaceConfig, /*overwrite=*/1);
  gflags::SetUsageMessage(
      "eps_worker --coordinator=ENDPOINT [--token_file=FILE] [--device=cpu|cuda:N] [--threads=N]\n"
      "SIGTERM or Ctrl-C: leave the job gracefully and exit 0 (a second one kills); SIGUSR1: leave\n"
      "and wait parked, SIGUSR2: join again (launcher/lend.sh --keep-warm)");
  eps::KeepFreedMemory();
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_print_device_kind) {
    auto kind = eps::DeviceKind(FLAGS_device);
    if (!kind.ok()) {
      LOG(ERROR) << kind.status().ToString();
      return 2;
    }
    std::printf("%s\n", kind->c_str());
    return 0;
  }
  // The CPU kernels, before anything computes: those an earlier run of this program chose (a
  // job's), else the default set, which most jobs run. A job of another set makes the worker
  // leave it and run again with that set (SwitchCpuKernels).
  std::string kernels_set = eps::CpuKernelsFromEnvironment();
  if (!eps::FindCpuKernelSet(kernels_set).ok()) kernels_set = eps::kDefaultCpuKernels;
  auto kernels = eps::UseCpuKernels(kernels_set, g_argv, !FLAGS_testing_skip_cpu_kernels);
  if (!kernels.ok()) {
    LOG(ERROR) << kernels.status().ToString();
    return 1;
  }
  if (!overridden.empty()) {
    LOG(WARNING) << "CUBLAS_WORKSPACE_CONFIG=" << overridden << " replaced by "
                 << eps::kCublasWorkspaceConfig << ": every worker of a job must use the same";
  }
  if (FLAGS_coordinator.empty() == FLAGS_scheduler.empty()) {
    LOG(ERROR) << "give one of --coordinator (a job) and --scheduler (a worker pool)";
    return 2;
  }
  if (FLAGS_pool_poll_ms < 10) {
    LOG(ERROR) << "--pool_poll_ms must be at least 10";
    return 2;
  }
  eps::WorkerOptions options;
  options.coordinator = FLAGS_coordinator;
  options.plan_timeout = std::chrono::seconds(FLAGS_plan_timeout_s);
  if (FLAGS_register_timeout_s < 1) {
    LOG(ERROR) << "--register_timeout_s must be at least 1";
    return 2;
  }
  options.register_timeout = std::chrono::seconds(FLAGS_register_timeout_s);
  options.rpc_timeout = std::chrono::seconds(FLAGS_rpc_timeout_s);
  options.heartbeat_interval = std::chrono::milliseconds(FLAGS_heartbeat_ms);
  options.device = FLAGS_device;
  options.threads = FLAGS_threads;
  options.slowdown = FLAGS_slowdown;
  options.shm = FLAGS_shm;
  options.report_file = FLAGS_report_file;
  if (FLAGS_model_cache_dir == "none") {
    options.model_cache_dir.clear();
  } else if (FLAGS_model_cache_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    options.model_cache_dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                              "/elasticps-model-cache-" + std::to_string(getuid());
  } else {
    options.model_cache_dir = FLAGS_model_cache_dir;
  }
  if (FLAGS_model_cache_mb < 0) {
    LOG(ERROR) << "--model_cache_mb must be >= 0 (0: no bound), not " << FLAGS_model_cache_mb;
    return 2;
  }
  options.model_cache_bytes = static_cast<uint64_t>(FLAGS_model_cache_mb) << 20;
  if (FLAGS_model_fetch_in_flight < 1 || FLAGS_model_fetch_in_flight > 64) {
    LOG(ERROR) << "--model_fetch_in_flight must be in [1, 64]";
    return 2;
  }
  options.model_fetch_in_flight = FLAGS_model_fetch_in_flight;
  options.model_factory = &eps::ModelRunner::Create;
  if (!(FLAGS_slowdown >= 1.0) || FLAGS_slowdown > 1000) {
    LOG(ERROR) << "--slowdown must be in [1, 1000], got " << FLAGS_slowdown;
    return 2;
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  options.host = std::string(host) + ":" + std::to_string(getpid());
  auto credentials =
      eps::LoadJobCredentials(FLAGS_token_file, FLAGS_curve_secret_key, FLAGS_curve_server_key);
  if (!credentials.ok()) {
    LOG(ERROR) << credentials.status().ToString();
    return 2;
  }
  options.token = credentials->token;
  options.curve = credentials->curve;
  if (options.curve.enabled() && FLAGS_curve_server_key.empty() && FLAGS_scheduler.empty()) {
    LOG(ERROR) << "--curve_secret_key needs --curve_server_key (the job's servers' public key)";
    return 2;
  }
  if (FLAGS_curve_server_key.empty()) options.curve.server_key.clear();  // not this worker's own
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (FLAGS_scheduler.empty() && HandleParking()) options.parking = &g_park;
  zmq::context_t context(1);
  if (!FLAGS_compute_cpus.empty()) {
    eps::Status st = PinCompute(FLAGS_compute_cpus, context);
    if (!st.ok()) {
      LOG(ERROR) << st.ToString();
      return 2;
    }
  }
  auto kind = eps::DeviceKind(FLAGS_device);
  if (!kind.ok()) {
    LOG(ERROR) << kind.status().ToString();
    return 2;
  }
  options.device_kind = FLAGS_reported_device_kind.empty() ? *kind : FLAGS_reported_device_kind;
  options.cpu_kernels_set = kernels_set;
  options.cpu_kernels = *kernels;
  // Started after the pinning: its threads run on the helper CPUs. It outlives every worker.
  eps::Metrics metrics;
  auto metrics_server = eps::ServeMetricsIfAsked(FLAGS_metrics_port, FLAGS_metrics_host, &metrics,
                                                 &options.metrics, &options.metrics_address);
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status().ToString();
    return 2;
  }
  if (!FLAGS_scheduler.empty()) return RunPool(options, &context);
  while (true) {
    auto worker = eps::Worker::Open(options, &context);
    if (!worker.ok()) {
      LOG(ERROR) << worker.status().ToString();
      return 2;
    }
    eps::Status st = (*worker)->Run(&g_leave);
    if (st.ok() && !(*worker)->wants_cpu_kernels().empty() && !g_leave) {
      const std::string wanted = (*worker)->wants_cpu_kernels();
      worker->reset();  // its threads and sockets end before this program executes again
      if (int rc = SwitchCpuKernels(wanted, &options); rc >= 0) return rc;
      continue;
    }
    if (st.ok() && g_park && !g_stop && (*worker)->left()) {
      worker->reset();  // its report written, its sockets and threads gone
      if (AwaitResume()) continue;
      return 0;
    }
    if (st.ok()) return 0;
    LOG(ERROR) << "worker failed: " << st.ToString();
    if (st.code() == eps::StatusCode::kPermissionDenied) {
      LOG(ERROR) << "this worker's CURVE key was refused: it is not among the job's allowed keys "
                    "(or it was revoked), or this worker and the job disagree on CURVE";
      return 4;  // exit codes: docs/operations.md
    }
    if ((*worker)->host_refused()) return 5;  // exit codes: docs/operations.md
    return (*worker)->unreachable() ? 3 : 1;
  }
}
