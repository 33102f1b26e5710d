// eps_shard: one parameter-server shard of a job.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/files.h"
#include "common/memory.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "schema/curve.h"
#include "schema/zap_handler.h"
#include "server/shard.h"

DEFINE_uint32(shard_id, 0, "This shard's id, 0..S-1");
DEFINE_string(coordinator, "", "The coordinator's endpoint, e.g. tcp://127.0.0.1:5555");
DEFINE_string(bind, "tcp://127.0.0.1:0", "Endpoint workers connect to (port 0: any free port)");
DEFINE_string(token_file, "", "File holding the job's secret token (empty: no token)");
DEFINE_string(curve_secret_key, "",
              "CURVE (docs/security.md): the job's servers' secret key file (elasticps keygen); "
              "workers must be in --allowed_keys. Empty: plain TCP");
DEFINE_string(curve_server_key, "",
              "The coordinator's public key file, with --curve_secret_key (empty: the shard's own; "
              "the job's servers share one key pair)");
DEFINE_string(
    allowed_keys, "",
    "With --curve_secret_key: the clients' public keys, a file (one Z85 key a line) or a "
    "folder of *.pub; re-read at every handshake and, for open connections, at most once a "
    "second: removing a key revokes it");
DEFINE_int32(pull_wait_ms, 30000, "How long a pull may wait for its version");
DEFINE_int32(move_stall_ms, 0,
             "A testing aid: having staged its part of a move of shard state, wait this long "
             "before saying so (a window for fault-injection tests); 0: none");
DEFINE_int64(max_message_mb, 64,
             "The largest frame the workers' socket accepts, in MiB (a peer sending a larger one "
             "is disconnected); a job whose chunks need more is refused. 0: no limit");
DEFINE_int32(socket_hwm, 1000,
             "Messages queued per peer each way on the workers' socket (0: unbounded)");
DEFINE_bool(refuse_shm_pushes, false,
            "Testing aid: refuse every push that names shared memory, as a shard that cannot map "
            "the worker's "
            "regions would (the worker then pushes through the socket)");
DEFINE_string(addr_file, "", "Write the endpoint workers connect to into this file once serving");
DEFINE_string(store, "",
              "RocksDB directory of this shard's durable state (empty: memory only). A shard "
              "started on a store holding checkpoints restores the newest one");
DEFINE_int32(threads, 1,
             "Threads the optimizer's elements are cut over: the cores this shard is given "
             "(never changes a bit)");
DEFINE_string(sparse_dir, "",
              "Without --store: where the job's sparse tables keep the rows beyond "
              "--shard_memory_mb (empty: a fresh folder under $TMPDIR, removed at exit; with "
              "--store they spill beside it)");
DEFINE_int64(checkpoint_every, 0, "Write a checkpoint every N steps (0: never; needs --store)");
DEFINE_int32(keep_checkpoints, 2, "How many of the newest checkpoints the store keeps");
DEFINE_string(job_id, "",
              "The job's id, to create or check --store before the coordinator names the job "
              "(empty: learn it from the store or the coordinator)");
DEFINE_int32(metrics_port, -1,
             "Serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md): -1 off, "
             "0 any free port");
DEFINE_string(metrics_host, "127.0.0.1",
              "The address --metrics_port binds (0.0.0.0: every interface)");
DEFINE_string(report_file, "",
              "Write the shard's report here when it ends: JSON with its sparse tables' rows "
              "stepped, read from the store, read ahead and spilled (docs/events.md)");

namespace {
volatile bool g_stop = false;
void OnSignal(int) { g_stop = true; }

// --report_file's JSON (docs/events.md, "The shard's report").
std::string Report(const eps::Shard& shard, const eps::Status& outcome) {
  nlohmann::json tables = nlohmann::json::array();
  const std::vector<eps::SparseTable::Stats> stats = shard.TableStats();
  for (size_t t = 0; t < stats.size(); ++t) {
    const eps::SparseTable::Stats& s = stats[t];
    tables.push_back({{"table", t},
                      {"rows_stepped", s.rows_stepped},
                      {"store_reads", s.store_reads},
                      {"warm_reads", s.warm_reads},
                      {"evictions", s.evictions},
                      {"spill_writes", s.spill_writes},
                      {"cached_rows", s.cached_rows},
                      {"spilled_rows", s.spilled_rows}});
  }
  const nlohmann::json report = {
      {"shard_id", FLAGS_shard_id},
      {"outcome", outcome.ok()                                  ? "done"
                  : outcome.code() == eps::StatusCode::kAborted ? "stopped"
                                                                : "failed"},
      {"error", outcome.ok() ? "" : outcome.ToString()},
      {"sparse_tables", tables}};
  return report.dump() + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("eps_shard --coordinator=ENDPOINT --shard_id=N");
  eps::KeepFreedMemory();
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_coordinator.empty()) {
    LOG(ERROR) << "--coordinator is required";
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  eps::ShardOptions options;
  options.shard = eps::ShardId(FLAGS_shard_id);
  options.coordinator = FLAGS_coordinator;
  options.bind = FLAGS_bind;
  auto credentials =
      eps::LoadJobCredentials(FLAGS_token_file, FLAGS_curve_secret_key, FLAGS_curve_server_key);
  if (!credentials.ok()) {
    LOG(ERROR) << credentials.status().ToString();
    return 2;
  }
  options.token = credentials->token;
  options.curve = credentials->curve;
  options.allowed_keys = FLAGS_allowed_keys;
  if (FLAGS_max_message_mb < 0 || FLAGS_socket_hwm < 0) {
    LOG(ERROR) << "--max_message_mb and --socket_hwm must be >= 0";
    return 2;
  }
  options.max_message_bytes = FLAGS_max_message_mb == 0 ? -1 : FLAGS_max_message_mb << 20;
  options.socket_hwm = FLAGS_socket_hwm;
  options.pull_wait = std::chrono::milliseconds(FLAGS_pull_wait_ms);
  options.move_stall = std::chrono::milliseconds(std::max(0, FLAGS_move_stall_ms));
  options.refuse_shm_pushes = FLAGS_refuse_shm_pushes;
  options.threads = FLAGS_threads;
  options.store_path = FLAGS_store;
  options.checkpoint_every = FLAGS_checkpoint_every;
  options.keep_checkpoints = FLAGS_keep_checkpoints;
  options.job_id = FLAGS_job_id;
  // The sparse tables' spill tier without a store: a folder of this process's own.
  std::optional<eps::TempFolder> sparse_scratch;
  options.sparse_dir = FLAGS_sparse_dir;
  if (FLAGS_store.empty() && FLAGS_sparse_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    auto folder = eps::TempFolder::Create(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                          "eps-shard" + std::to_string(FLAGS_shard_id) + "-sparse");
    if (!folder.ok()) {
      LOG(ERROR) << "--sparse_dir: " << folder.status().ToString();
      return 2;
    }
    sparse_scratch.emplace(std::move(folder).value());
    options.sparse_dir = sparse_scratch->path();
  }
  // Declared before the shard: it keeps its series here, and outlives the server too.
  eps::Metrics metrics;
  auto metrics_server = eps::ServeMetricsIfAsked(FLAGS_metrics_port, FLAGS_metrics_host, &metrics,
                                                 &options.metrics, &options.metrics_address);
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status().ToString();
    return 2;
  }
  zmq::context_t context(1);
  // Before the first Bind, destroyed before the context.
  auto zap = eps::ZapHandler::StartForServer(&context, options.curve, FLAGS_allowed_keys);
  if (!zap.ok()) {
    LOG(ERROR) << zap.status().ToString();
    return 2;
  }
  auto shard = eps::Shard::Open(options, &context);
  if (!shard.ok()) {
    LOG(ERROR) << shard.status().ToString();
    return 1;
  }
  if (!FLAGS_addr_file.empty()) {
    eps::Status st = eps::WriteFileAtomically(FLAGS_addr_file, (*shard)->endpoint() + "\n");
    if (!st.ok()) {
      LOG(ERROR) << st.ToString();
      return 2;
    }
  }
  eps::Status st = (*shard)->Run(&g_stop);
  if (!FLAGS_report_file.empty()) {
    const eps::Status written = eps::WriteFileAtomically(FLAGS_report_file, Report(**shard, st));
    if (!written.ok()) LOG(ERROR) << "--report_file: " << written.ToString();
  }
  if (!st.ok()) {
    LOG(ERROR) << "shard " << FLAGS_shard_id << ": " << st.ToString();
    return 1;
  }
  return 0;
}
