// eps_coordinator: the coordinator of one job. The job spec comes from flags
// (or a --flagfile); see examples/*.flags.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/files.h"
#include "common/memory.h"
#include "common/metrics_server.h"
#include "common/wire.h"
#include "elastic/coordinator.h"
#include "schema/curve.h"
#include "schema/zap_handler.h"

// The job.
DEFINE_string(job_id, "job", "Name of the job");
DEFINE_string(model, "mlp",
              "Model: a zoo model (mlp, cnn, cnn_bn, resnet, text_transformer, text_hashed, dlrm: "
              "docs/models.md) or a TorchScript file (FILE.pt)");
DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist",
              "Folder with the Fashion-MNIST IDX files (.gz)");
DEFINE_uint32(virtual_workers, 8, "V: number of virtual workers (fixed for the job)");
DEFINE_uint32(batch_per_vw, 32, "Samples per virtual worker per step");
DEFINE_uint64(seed, 1, "Seed of the data order, the initialization and every random stream");
DEFINE_int64(steps, 0, "Steps to train (0: use --epochs)");
DEFINE_double(epochs, 0, "Passes over the training data, when --steps is 0");
DEFINE_uint32(threads, 1, "Intra-op threads of every worker (part of the bits)");
DEFINE_int64(train_limit, 0, "Use only the first N training samples (0: all)");
DEFINE_int64(test_limit, 0, "Evaluate on the first N test samples (0: all, -1: no evaluation)");
DEFINE_int64(eval_every, 0, "Evaluate the test set every N steps (0: only at the end)");
DEFINE_uint32(eval_batch, 1000, "Batch size of evaluation");
DEFINE_bool(allow_mixed_devices, false,
            "Accept workers whose device kind (cpu, or cuda:<GPU name>) differs from the first "
            "worker's. Their "
            "gradients differ in their bits, so the job's result then depends on placement");
DEFINE_string(
    wire_dtype, "fp32",
    "fp32, bf16 or fp16: the format gradients are pushed and weights pulled in. bf16 and fp16 "
    "halve "
    "the bytes and change the numerics against fp32 (every node of the reduction tree is rounded, "
    "workers compute with rounded weights; the shards keep fp32 masters); results stay independent "
    "of placement");
DEFINE_string(grad_wire_dtype, "", "Gradients only: overrides --wire_dtype for pushes");
DEFINE_string(weight_wire_dtype, "", "Weights only: overrides --wire_dtype for pulls");
// Your model, your data (docs/models.md).
DECLARE_string(flagfile);  // gflags' own
DEFINE_string(model_sha256, "", "Pins the TorchScript --model file: its SHA-256 (hex); empty: any");
DEFINE_string(train_data, "", "Training features: .npy, .csv or IDX (empty: --data_dir's Fashion-MNIST)");
DEFINE_string(train_labels, "", "Training labels: .npy or IDX (CSV: the --label_column)");
DEFINE_string(test_data, "", "Test features, as --train_data");
DEFINE_string(test_labels, "", "Test labels, as --train_labels");
DEFINE_string(
    data_format, "",
    "idx, npy, csv, tsv, jsonl or criteo; empty: from the files' extensions (criteo: never)");
DEFINE_string(label_column, "label", "CSV, TSV, JSONL: the label column's name");
DEFINE_string(init_from, "",
              "Transfer learning: start from this exported model (model.safetensors, model.pt or "
              "model.script.pt): every tensor whose name, shape and dtype match is loaded");
DEFINE_string(init_sha256, "", "Pins the --init_from file: its SHA-256 (hex); empty: any");
DEFINE_string(reinit, "", "Regex: tensors of --init_from that start afresh (e.g. a new head)");
DEFINE_string(freeze, "", "Regex: tensors that are not trained (no gradient, push or step)");
DEFINE_bool(init_allow_mismatch, false, "Start even when no tensor of --init_from matches");
DEFINE_string(text_column, "text", "TSV/JSONL text data: the text column's name");
DEFINE_string(vocab_from, "",
              "Text data: take the words of this vocabulary (a pretrained job's vocab.json) instead "
              "of building them from the training split, for --init_from of that job's model");
DEFINE_uint32(seq_len, 128, "Text models: tokens per sample (longer texts are truncated)");
DEFINE_uint32(vocab_size, 8000, "Text models: vocabulary size, special tokens included");
DEFINE_uint32(hash_buckets, 0,
              "Text models: hash words (and text_hashed's word bigrams) into this many embedding "
              "rows instead of a vocabulary, the 3 special tokens included; dlrm: its Criteo "
              "categories' rows. 0: text_transformer's vocabulary; for text_hashed and dlrm, "
              "63-bit keys, rows of a table of unbounded keys");
DEFINE_uint32(model_dim, 64, "Zoo models: width (text_transformer: embedding size)");
DEFINE_uint32(model_layers, 2, "Zoo models: encoder layers (text_transformer)");
DEFINE_uint32(model_heads, 4, "Zoo models: attention heads (text_transformer)");
DEFINE_uint32(model_depth, 20, "Zoo models: depth (resnet: 6n+2, e.g. 20)");
DEFINE_string(cpu_kernels, eps::kDefaultCpuKernels,
              "The CPU math kernels (OpenBLAS, ATen, oneDNN) every CPU worker runs, part of the "
              "bits: x86-64-v3 (AVX2: any x86-64 host since Haswell), x86-64-v4 (AVX-512), "
              "x86-64-v2 (SSE4.2), or native (each host its own; a worker whose kernels differ "
              "from the first CPU worker's is refused)");
DEFINE_string(sparse_optimizer, "lazy",
              "sparse=True embedding tables (docs/design.md, \"Sparse tables\"): lazy (only the "
              "rows a step touches move, with their moments; row-wise, as SparseAdam) or exact "
              "(every row every step: the tables are dense tensors). The choice changes the result");
DEFINE_uint64(shard_memory_mb, 0,
              "Memory of each shard for its sparse tables' rows (MiB); beyond it the least "
              "recently used rows spill to the shard's store (0: 256)");
DEFINE_uint64(worker_table_mb, 0,
              "A sparse table of more MiB is not held whole by the workers: each looks up the "
              "rows its batches read (0: 1024)");
// The optimizer.
DEFINE_string(optimizer, "sgd", "sgd, adam, adamw or adagrad (sgd covers momentum and Nesterov)");
DEFINE_double(lr, 0.01, "Learning rate");
DEFINE_double(momentum, 0, "SGD momentum");
DEFINE_double(dampening, 0, "SGD dampening");
DEFINE_bool(nesterov, false, "Nesterov momentum (SGD)");
DEFINE_double(weight_decay, 0, "L2 penalty (sgd, adam) or decoupled decay (adamw)");
DEFINE_double(beta1, 0.9, "Adam beta1");
DEFINE_double(beta2, 0.999, "Adam beta2");
DEFINE_double(eps, 1e-8, "Adam epsilon; Adagrad's too (PyTorch's default there: 1e-10)");
DEFINE_string(lr_schedule, "constant", "constant, step or cosine (with --warmup_steps)");
DEFINE_int64(lr_step_size, 0, "step schedule: steps between decays");
DEFINE_double(lr_gamma, 0.1, "step schedule: decay factor");
DEFINE_int64(warmup_steps, 0, "cosine schedule: linear warmup steps");
DEFINE_double(min_lr, 0, "cosine schedule: final learning rate");
// The cluster.
DEFINE_uint32(shards, 1, "Number of server shards");
DEFINE_int64(chunk_elems, 1 << 20, "Largest chunk of a tensor, in elements");
DEFINE_uint32(workers, 1, "Start training once this many workers have registered");
DEFINE_string(bind, "tcp://127.0.0.1:0", "Endpoint to serve on (port 0: any free port)");
DEFINE_string(run_dir, "", "Folder for result.json");
DEFINE_int32(metrics_port, -1,
             "Serve Prometheus metrics at http://HOST:PORT/metrics (0: a free port; -1: off)");
DEFINE_string(metrics_host, "127.0.0.1", "Interface for --metrics_port (0.0.0.0: every one)");
DEFINE_string(store, "",
              "RocksDB directory of the coordinator's state (empty: none). Restarted on the same "
              "store, the coordinator binds its former endpoint and resumes the job");
DEFINE_string(addr_file, "", "Write the bound endpoint to this file once serving");
DEFINE_string(token_file, "", "File holding the job's secret token (empty: none)");
DEFINE_string(curve_secret_key, "",
              "CURVE (docs/security.md): the job's servers' secret key file (elasticps keygen); "
              "traffic is encrypted and only --allowed_keys clients are served. Empty: plain TCP");
DEFINE_string(curve_server_key, "",
              "The shards' public key file, with --curve_secret_key (empty: the coordinator's own; "
              "the job's servers share one key pair)");
DEFINE_string(
    allowed_keys, "",
    "With --curve_secret_key: the clients' public keys, a file (one Z85 key a line) or a "
    "folder of *.pub; re-read at every handshake and, for open connections, at most once a "
    "second: removing a key revokes it");
DEFINE_int64(max_message_mb, 64,
             "The largest message the coordinator sends (MiB, at least 1): the model and "
             "--init_from files go to the workers in chunks of this less 64 KiB, never whole; "
             "a text job's vocabulary must fit in one registration reply. Lower it to test "
             "chunking with a small model");
DEFINE_uint64(final_pull_kb, 0,
              "The final model is read from the shards in pages of chunks and rows of this many "
              "KiB (0: --max_message_mb); lower it to test paging with a small model");
DEFINE_int32(socket_hwm, 1000,
             "Messages queued per peer each way on the coordinator's socket (0: unbounded)");
DEFINE_int32(startup_timeout_s, 120, "The shards must register within this time");
DEFINE_int32(step_timeout_s, 300,
             "While workers are alive, a step or an evaluation must complete within this time");
DEFINE_string(planner, "speed",
              "VW counts per worker: speed (by measured seconds per VW) or equal");
DEFINE_uint32(max_vws_per_worker, 0, "At most this many VWs on one worker (memory); 0: no cap");
DEFINE_int64(
    probe_idle_steps, 1000,
    "A worker that held no VW for this many steps is measured again (its speed estimate is "
    "forgotten, so the planner counts it at the median speed); 0: never");
DEFINE_double(
    replan_threshold, 0.25,
    "Re-plan by speed without a membership change only if the slowest worker's predicted load "
    "improves by more than this fraction");
DEFINE_int64(replan_min_steps, 50,
             "With an unchanged membership, at most one re-plan by speed per this many steps "
             "(counted from the newest assignment), unless --replan_window applies; 0: no minimum");
DEFINE_uint32(
    replan_window, 10,
    "Re-plan by speed before --replan_min_steps when a worker's last this many reports were "
    "each more than --replan_threshold slower than the time it was planned with; "
    "0: never early");
DEFINE_uint32(host_failures_before_backoff, 2,
              "A host whose workers could not set themselves up there this many times in a row "
              "(data, device, memory) is backed off: its registrations are refused for a while "
              "(docs/operations.md, \"A bad host\"); 0: never");
DEFINE_int32(host_backoff_s, 60,
             "The first back-off of a bad host, in seconds; it doubles on each further failure, "
             "up to 15 minutes");
DEFINE_uint32(max_workers_per_host, 64,
              "Registrations beyond this many live workers on one machine are refused "
              "(docs/security.md, \"Bounded resources\"); 0: no cap");
DEFINE_uint32(max_workers, 1024, "Registrations beyond this many live workers are refused; 0: no cap");
DEFINE_int32(heartbeat_timeout_ms, 3000,
             "A worker whose heartbeats stop for this long is declared dead");

namespace {
volatile bool g_stop = false;
void OnSignal(int) { g_stop = true; }

// ---- The job spec from the flags: one FromFlag per field of the lists in
// schema/messages.h, which name each field's flag. A field whose flag is not
// defined above, or has another type than the field, does not compile.

// A flag of the field's very type is taken as it is.
template <class T>
eps::Status FromFlag(const char*, const T& flag, T* field) {
  *field = flag;
  return eps::OkStatus();
}

// A wire dtype is named (fp32, bf16, fp16); empty: the one --wire_dtype names.
eps::Status FromFlag(const char* flag, const std::string& name, eps::WireDType* field) {
  auto dtype = eps::ParseWireDType(name.empty() ? FLAGS_wire_dtype : name);
  if (!dtype.ok()) {
    return eps::InvalidArgument(std::string(name.empty() ? "--wire_dtype" : flag) + ": " +
                                dtype.status().ToString());
  }
  *field = *dtype;
  return eps::OkStatus();
}

#define EPS_FROM_FLAG(type, name, default_value, Capnp, flag, role) \
  EPS_RETURN_IF_ERROR(FromFlag("--" #flag, FLAGS_##flag, &s->name));

// The optimizer's fields have flags of their own; its row's flag (--optimizer,
// which names its kind) is read with them.
eps::Status FromFlag(const char*, const std::string& /*kind*/, eps::OptimizerSpec* s) {
  EPS_OPTIMIZER_SPEC_FIELDS(EPS_FROM_FLAG)
  return eps::OkStatus();
}

// gflags passes over a flag it does not know in a --flagfile: a typo in a job
// file (--stepz=3) would silently leave its default. OK if every line of every
// flagfile is blank, a # comment, or a flag this binary defines.
eps::Status CheckFlagfiles(const std::string& files) {
  std::istringstream list(files);
  std::string path;
  while (std::getline(list, path, ',')) {
    if (path.empty()) continue;
    std::ifstream in(path);
    if (!in) return eps::NotFound("--flagfile: cannot read " + path);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      std::string name = line.substr(first);
      if (name.rfind("--", 0) == 0) name = name.substr(2);
      else if (name.rfind("-", 0) == 0) name = name.substr(1);
      name = name.substr(0, name.find_first_of("= \t"));
      gflags::CommandLineFlagInfo info;
      if (gflags::GetCommandLineFlagInfo(name.c_str(), &info)) continue;
      if (name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info))
        continue;
      return eps::InvalidArgument(path + " line " + std::to_string(n) + ": unknown flag --" + name);
    }
  }
  return eps::OkStatus();
}

// The job spec the flags describe; InvalidArgument names the flag that is wrong.
eps::StatusOr<eps::JobSpec> JobSpecFromFlags() {
  eps::JobSpec spec;
  eps::JobSpec* s = &spec;
  EPS_JOB_SPEC_FIELDS(EPS_FROM_FLAG)
  return spec;
}

#undef EPS_FROM_FLAG

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "eps_coordinator --flagfile=JOB.flags --run_dir=DIR [--shards=S --workers=W]");
  eps::KeepFreedMemory();
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) {
    LOG(ERROR) << "unexpected argument '" << argv[1] << "'";
    return 2;
  }
  if (eps::Status st = CheckFlagfiles(FLAGS_flagfile); !st.ok()) {
    LOG(ERROR) << "invalid job: " << st.ToString();
    return 2;
  }
  eps::CoordinatorOptions o;
  o.bind = FLAGS_bind;
  o.run_dir = FLAGS_run_dir;
  o.store_path = FLAGS_store;
  o.workers = FLAGS_workers;
  o.epochs = FLAGS_epochs;
  o.eval_every = FLAGS_eval_every;
  o.startup_timeout = std::chrono::seconds(FLAGS_startup_timeout_s);
  o.step_timeout = std::chrono::seconds(FLAGS_step_timeout_s);
  o.heartbeat_timeout = std::chrono::milliseconds(FLAGS_heartbeat_timeout_ms);
  auto planner = eps::ParsePlannerKind(FLAGS_planner);
  if (!planner.ok()) {
    LOG(ERROR) << "invalid job: --planner: " << planner.status().ToString();
    return 2;
  }
  o.planner.kind = *planner;
  o.planner.max_vws_per_worker = FLAGS_max_vws_per_worker;
  if (!(FLAGS_replan_threshold >= 0 && FLAGS_replan_threshold < 1)) {
    LOG(ERROR) << "invalid job: --replan_threshold must be in [0, 1)";
    return 2;
  }
  o.replan_threshold = FLAGS_replan_threshold;
  if (FLAGS_replan_min_steps < 0) {
    LOG(ERROR) << "invalid job: --replan_min_steps must be >= 0";
    return 2;
  }
  o.replan_min_steps = FLAGS_replan_min_steps;
  o.replan_window = FLAGS_replan_window;
  if (FLAGS_probe_idle_steps < 0) {
    LOG(ERROR) << "invalid job: --probe_idle_steps must be >= 0";
    return 2;
  }
  o.probe_idle_after = FLAGS_probe_idle_steps;
  if (FLAGS_host_backoff_s < 0) {
    LOG(ERROR) << "invalid job: --host_backoff_s must be >= 0";
    return 2;
  }
  o.host_failures_before_backoff = FLAGS_host_failures_before_backoff;
  o.host_backoff = std::chrono::seconds(FLAGS_host_backoff_s);
  o.max_workers_per_machine = FLAGS_max_workers_per_host;
  o.max_workers = FLAGS_max_workers;
  auto spec = JobSpecFromFlags();
  if (!spec.ok()) {
    LOG(ERROR) << "invalid job: " << spec.status().message();
    return 2;
  }
  o.spec = *spec;
  o.init_from = FLAGS_init_from;
  std::string words_from;
  if (!FLAGS_vocab_from.empty()) {
    auto bytes = eps::ReadFileToString(FLAGS_vocab_from);
    if (!bytes.ok()) {
      LOG(ERROR) << "invalid job: --vocab_from " << FLAGS_vocab_from << ": "
                 << bytes.status().message();
      return 2;
    }
    words_from = std::move(bytes).value();
  }
  if (eps::Status st = eps::ValidateJobSpec(o.spec); st.ok()) {  // else Open says why
    auto fingerprint = eps::CheckJobData(o.spec, words_from);
    if (fingerprint.ok()) {
      o.data_fingerprint = fingerprint->fingerprint;
      o.vocab = fingerprint->vocab;
      o.truncated_train = fingerprint->truncated_train;
      o.truncated_test = fingerprint->truncated_test;
    } else if (fingerprint.status().code() == eps::StatusCode::kNotFound) {
      LOG(WARNING) << "cannot read the data files here (" << fingerprint.status().message()
                   << "): the first worker's fingerprint stands for the job's";
    } else {
      LOG(ERROR) << "invalid job: " << fingerprint.status().ToString();
      return 2;
    }
    if (!words_from.empty() && o.vocab.empty()) {
      LOG(ERROR) << "invalid job: --vocab_from applies to text data (--data_format tsv, jsonl)";
      return 2;
    }
  }
  auto credentials =
      eps::LoadJobCredentials(FLAGS_token_file, FLAGS_curve_secret_key, FLAGS_curve_server_key);
  if (!credentials.ok()) {
    LOG(ERROR) << credentials.status().ToString();
    return 2;
  }
  o.token = credentials->token;
  o.curve = credentials->curve;
  o.allowed_keys = FLAGS_allowed_keys;
  if (FLAGS_socket_hwm < 0) {
    LOG(ERROR) << "--socket_hwm must be >= 0, not " << FLAGS_socket_hwm;
    return 2;
  }
  o.socket_hwm = FLAGS_socket_hwm;
  if (FLAGS_max_message_mb < 1 || FLAGS_max_message_mb > (int64_t{1} << 20)) {
    LOG(ERROR) << "--max_message_mb must be in [1, 1048576], not " << FLAGS_max_message_mb;
    return 2;
  }
  o.max_message_bytes = FLAGS_max_message_mb << 20;
  o.final_pull_bytes = FLAGS_final_pull_kb > 0
                           ? std::min<uint64_t>(FLAGS_final_pull_kb << 10, o.max_message_bytes)
                           : o.max_message_bytes;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  eps::Metrics metrics;
  auto metrics_server = eps::ServeMetricsIfAsked(FLAGS_metrics_port, FLAGS_metrics_host, &metrics,
                                                 &o.metrics, &o.metrics_address);
  if (!metrics_server.ok()) {
    LOG(ERROR) << "--metrics_port: " << metrics_server.status().ToString();
    return 2;
  }

  zmq::context_t context(1);
  // Before the first Bind, destroyed before the context.
  auto zap = eps::ZapHandler::StartForServer(&context, o.curve, FLAGS_allowed_keys);
  if (!zap.ok()) {
    LOG(ERROR) << zap.status().ToString();
    return 2;
  }
  auto coordinator = eps::Coordinator::Open(o, &context);
  if (!coordinator.ok()) {
    LOG(ERROR) << "invalid job: " << coordinator.status().ToString();
    return 2;
  }
  if (!FLAGS_addr_file.empty()) {
    eps::Status st = eps::WriteFileAtomically(FLAGS_addr_file, (*coordinator)->endpoint() + "\n");
    if (!st.ok()) {
      LOG(ERROR) << st.ToString();
      return 2;
    }
  }
  eps::Status st = (*coordinator)->Run(&g_stop);
  if (!st.ok()) {
    LOG(ERROR) << "job failed: " << st.ToString();
    return 1;
  }
  return 0;
}
