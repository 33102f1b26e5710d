// elasticps: the command line for training and operating jobs.
//
//   elasticps train    [--job FILE] [--run-dir DIR] [--servers S] [--workers W] [--FLAG=VALUE ...]
//   elasticps export   --stores DIR/store --out FILE [--step N]
//   elasticps evaluate --model FILE --data F [--labels F] [--json] ...
//   elasticps predict  --model FILE --data F [--labels F] --out predictions.csv ...
//   elasticps serve    --model FILE [--name NAME] [--host H] --port P ... (docs/serving.md)
//   elasticps status   (--run-dir DIR | --coordinator ADDR --token-file FILE) [--json] [--events N]
//   elasticps hold     [--from-step N] (--run-dir DIR | --coordinator ADDR --token-file FILE)
//   elasticps release  (the same)
//   elasticps shards   [--remove ID] (--run-dir DIR | --coordinator ADDR --token-file FILE)
//   elasticps keygen   --out DIR [--name NAME]
//   elasticps kernels  [--set NAME]
//   elasticps COMMAND --help
//
// Flags may be spelled with dashes or underscores. `train` runs
// launcher/local.sh (found beside this binary's build folder, or under
// $EPS_ROOT) and `export` runs export_model (beside this binary), each in
// place of this process, so signals and the exit code are theirs (as do
// `evaluate` and `predict`, which run eps_predict, and `serve`, which runs
// eps_serve); `status`
// and `keygen` run here (tools/cli.h).
//
// `status`, `hold`, `release` and `shards` exit codes: 0 answered, 1 no answer or
// refused, 2 bad flags. With --run-dir of a job started with `local.sh
// --secure`, they use the run dir's keys (keys/status.key, keys/server.pub).
//
// `keygen` writes a CURVE key pair (docs/security.md): DIR/NAME.key, the
// secret key (mode 0600), and DIR/NAME.pub, the public key, one Z85 line each;
// it never overwrites a key (exit 1). NAME defaults to "key".
//
// `kernels` prints the environment that selects a CPU kernel set
// (common/cpu_kernels.h), one VAR=value a line, for a program of one's own to
// compute with a job's kernels: env $(elasticps kernels) python3 mine.py.
#include <gflags/gflags.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cpu_kernels.h"
#include "common/files.h"
#include "schema/curve.h"
#include "tools/cli.h"

DEFINE_string(run_dir, "", "status: a job's run folder (its coordinator.addr and token)");
DEFINE_string(coordinator, "", "status: the coordinator's endpoint, instead of --run_dir");
DEFINE_string(token_file, "", "status: the job's token (with --coordinator)");
DEFINE_bool(json, false, "status: print the reply as one JSON object");
DEFINE_uint32(events, 10, "status: how many of the newest events to show");
DEFINE_double(timeout_s, 5, "status: how long to wait for the coordinator's answer");
DEFINE_string(curve_secret_key, "", "status: this client's CURVE secret key file (a CURVE job)");
DEFINE_string(curve_server_key, "", "status: the job's servers' CURVE public key file");
DEFINE_int64(from_step, 0, "hold: no step >= this starts (0: from the next step boundary)");
DEFINE_int32(remove, -1, "shards: remove this shard from the job (its state moves to the others)");
DEFINE_string(out, "", "keygen: the folder to write the key pair to");
DEFINE_string(name, "key", "keygen: the key pair's name (NAME.key, NAME.pub)");
DEFINE_string(set, eps::kDefaultCpuKernels, "kernels: the CPU kernel set");

namespace eps {
namespace {

constexpr const char* kKeygenUsage = "elasticps keygen --out DIR [--name NAME]";
constexpr const char* kKernelsUsage =
    "elasticps kernels [--set NAME]\n"
    "\n"
    "Prints the environment (VAR=value, one a line) that makes OpenBLAS, ATen, oneDNN and MKL run\n"
    "a CPU kernel set (a job's --cpu_kernels; default x86-64-v3), for a program of your own that\n"
    "must compute what the job's workers do: env $(elasticps kernels) python3 mine.py";
constexpr const char* kExportUsage =
    "elasticps export --stores RUN_DIR/store --out FILE [--step N] [--pt-out FILE]\n"
    "                 [--script-out FILE]\n"
    "elasticps export --safetensors RUN_DIR/model.safetensors [--stores RUN_DIR/store]\n"
    "                 --pt-out FILE [--script-out FILE]\n"
    "\n"
    "Writes a job's model from its stores (while it runs, or after it stopped or crashed),\n"
    "and prints the step and its params_sha256 (result.json's for the final step).\n"
    "--pt-out: the state dict torch.load reads; --script-out: a TorchScript job's module with\n"
    "the trained weights, for torch.jit.load (docs/models.md).";

constexpr const char* kServeUsage =
    "elasticps serve --model FILE [--name NAME] [--host H] --port P [--port-file F]\n"
    "                [--max-batch N] [--max-delay-ms MS] [--max-queue N] [--max-body-mb MB]\n"
    "                [--follow RUN_DIR] [--follow-interval-ms MS] [--arch A] [--script F]\n"
    "                [--vocab F] [--input-shape D,...] [--input-dtype float32|int64] [--raw]\n"
    "                [--threads N]\n"
    "\n"
    "Serves an export (model.script.pt, a model.safetensors: a built-in model's, or a TorchScript\n"
    "job's with its module, a text model with its vocab.json) over the KServe / TF Serving V1\n"
    "REST protocol: POST /v1/models/NAME:predict {\"instances\": [...]}, GET /v1/models/NAME,\n"
    "/healthz, /metrics.\n"
    "Port 0 picks a free port: the first line on stdout is JSON with it. SIGTERM drains.\n"
    "docs/serving.md has every flag.";

struct Command {
  const char* name;
  const char* summary;
  const char* usage;
};
constexpr Command kCommands[] = {
    {"train", "run a job on this host (launcher/local.sh)", kTrainUsage},
    {"export", "write a job's model from its stores", kExportUsage},
    {"evaluate", "accuracy and loss of an exported model on a data set", kEvaluateUsage},
    {"predict", "an exported model's predictions on a data set, as CSV", kPredictUsage},
    {"serve", "serve an exported model over HTTP (KServe V1)", kServeUsage},
    {"status", "a running job's step, workers, shards and events", kStatusUsage},
    {"hold", "hold a running job at its next step boundary", kHoldUsage},
    {"release", "let a held job go on", kHoldUsage},
    {"shards", "a running job's shards; remove one (its state moves)", kShardsUsage},
    {"keygen", "write a CURVE key pair (docs/security.md)", kKeygenUsage},
    {"kernels", "the environment that selects a CPU kernel set", kKernelsUsage},
};

void PrintCommands(FILE* to) {
  std::fprintf(to, "usage: elasticps COMMAND [options]   (elasticps COMMAND --help)\n\n");
  for (const Command& c : kCommands) std::fprintf(to, "  %-9s %s\n", c.name, c.summary);
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

// The folder this binary is in (build/bin/ in a build tree).
std::filesystem::path BinaryDir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : self.parent_path();
}

// Runs `program` with `args` in place of this process; returns only if that fails.
int Exec(const std::string& program, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> all = {program};
  all.insert(all.end(), args.begin(), args.end());
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::fprintf(stderr, "elasticps: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
  return 1;
}

int RunTrain(const std::vector<std::string>& args) {
  const char* root_env = std::getenv("EPS_ROOT");
  const std::filesystem::path root =
      root_env != nullptr ? std::filesystem::path(root_env) : BinaryDir().parent_path().parent_path();
  const std::string local_sh = (root / "launcher" / "local.sh").string();
  if (::access(local_sh.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "elasticps train: %s is missing: set EPS_ROOT to the ElasticPS folder\n",
                 local_sh.c_str());
    return 2;
  }
  std::string job_text;
  const std::string job = FindJobFileArg(args);
  if (!job.empty()) {
    std::ifstream in(job);
    if (!in) {
      std::fprintf(stderr, "elasticps train: --job: cannot read %s\n", job.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    job_text = text.str();
  }
  auto train = ParseTrainArgs(args, job_text);
  if (!train.ok()) {
    std::fprintf(stderr, "elasticps train: %s\n%s\n", train.status().message().c_str(),
                 kTrainUsage);
    return 2;
  }
  std::vector<std::string> launcher = train->launcher_args;
  if (train->job_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(train->run_dir, ec);
    std::string flags;
    for (const std::string& f : train->job_flags) flags += f + "\n";
    const Status written = WriteFileAtomically(train->run_dir + "/job.flags", flags);
    if (ec || !written.ok()) {
      std::fprintf(stderr, "elasticps train: cannot write %s/job.flags: %s\n",
                   train->run_dir.c_str(), ec ? ec.message().c_str() : written.ToString().c_str());
      return 1;
    }
  } else if (!train->job_flags.empty()) {
    launcher.push_back("--");
    launcher.insert(launcher.end(), train->job_flags.begin(), train->job_flags.end());
  }
  return Exec(local_sh, launcher);
}

int RunKeygen() {
  if (FLAGS_out.empty()) {
    std::fprintf(stderr, "elasticps keygen: --out is required\n%s\n", kKeygenUsage);
    return 2;
  }
  auto keys = GenerateCurveKeyPair();
  if (!keys.ok()) {
    std::fprintf(stderr, "elasticps keygen: %s\n", keys.status().ToString().c_str());
    return 1;
  }
  Status st = WriteCurveKeyPair(FLAGS_out, FLAGS_name, *keys);
  if (!st.ok()) {
    std::fprintf(stderr, "elasticps keygen: %s\n", st.ToString().c_str());
    return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s/%s.key (secret) %s/%s.pub %s\n", FLAGS_out.c_str(), FLAGS_name.c_str(),
              FLAGS_out.c_str(), FLAGS_name.c_str(), keys->public_key.c_str());
  return 0;
}


// Parses the command's flags (gflags, dashes read as underscores); false and
// a message for an unknown flag or a positional argument.
bool ParseFlags(const char* argv0, const std::string& command, const Command& c,
                const std::vector<std::string>& raw) {
  std::vector<std::string> args = {std::string(argv0) + " " + command};
  for (const std::string& r : raw) {
    std::string a = FlagWithUnderscores(r);
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      const std::string name = a.substr(2, std::min(a.find('='), a.size()) - 2);
      gflags::CommandLineFlagInfo info;
      if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info) &&
          !(name.rfind("no", 0) == 0 && gflags::GetCommandLineFlagInfo(name.c_str() + 2, &info))) {
        std::fprintf(stderr, "elasticps %s: unknown flag --%s\nusage: %s\n", command.c_str(),
                     name.c_str(), c.usage);
        return false;
      }
    }
    args.push_back(std::move(a));
  }
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  int n = static_cast<int>(ptrs.size());
  char** p = ptrs.data();
  gflags::ParseCommandLineFlags(&n, &p, true);
  if (n > 1) {
    std::fprintf(stderr, "elasticps %s: unexpected argument '%s'\n", command.c_str(), p[1]);
    return false;
  }
  return true;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    eps::PrintCommands(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const eps::Command* c = eps::FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "elasticps: unknown command '%s'\n", command.c_str());
    eps::PrintCommands(stderr);
    return 2;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s\n", c->usage);
      return 0;
    }
  }
  if (command == "train") return eps::RunTrain(args);
  if (command == "export") {
    std::vector<std::string> flags;
    for (const std::string& a : args) flags.push_back(eps::FlagWithUnderscores(a));
    return eps::Exec((eps::BinaryDir() / "export_model").string(), flags);
  }
  if (command == "evaluate" || command == "predict") {
    std::vector<std::string> flags = {command};
    for (const std::string& a : args) flags.push_back(eps::FlagWithUnderscores(a));
    return eps::Exec((eps::BinaryDir() / "eps_predict").string(), flags);
  }
  if (command == "serve") {
    std::vector<std::string> flags;
    for (const std::string& a : args) flags.push_back(eps::FlagWithUnderscores(a));
    return eps::Exec((eps::BinaryDir() / "eps_serve").string(), flags);
  }
  if (!eps::ParseFlags(argv[0], command, *c, args)) return 2;
  if (command == "keygen") return eps::RunKeygen();
  if (command == "kernels") {
    auto set = eps::FindCpuKernelSet(FLAGS_set);
    if (!set.ok()) {
      std::fprintf(stderr, "elasticps kernels: --set: %s\n", set.status().message().c_str());
      return 2;
    }
    for (const auto& [variable, value] : eps::CpuKernelEnvironment(*set))
      std::printf("%s=%s\n", variable.c_str(), value.c_str());
    return 0;
  }
  eps::StatusCommandOptions o;
  o.run_dir = FLAGS_run_dir;
  o.coordinator = FLAGS_coordinator;
  o.token_file = FLAGS_token_file;
  o.json = FLAGS_json;
  o.events = FLAGS_events;
  o.timeout_s = FLAGS_timeout_s;
  o.curve_secret_key = FLAGS_curve_secret_key;
  o.curve_server_key = FLAGS_curve_server_key;
  if (command == "hold" || command == "release") o.hold = command == "hold";
  o.from_step = FLAGS_from_step;
  o.shards = command == "shards";
  if (FLAGS_remove >= 0) o.remove_shard = static_cast<uint32_t>(FLAGS_remove);
  if (o.remove_shard && !o.shards) {
    std::fprintf(stderr, "elasticps %s: --remove is a flag of `elasticps shards`\n", command.c_str());
    return 2;
  }
  return eps::RunStatusCommand(o);
}
