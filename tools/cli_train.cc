#include <set>
#include <sstream>

#include "tools/cli.h"

namespace eps {
namespace {

// local.sh's options that take a value, and those that do not (their names
// with underscores, as FlagWithUnderscores writes them).
const std::set<std::string>& LauncherOptionsWithValue() {
  static const std::set<std::string> kNames = {
      "job",         "run_dir",      "servers",          "workers",     "slowdowns",
      "devices",     "worker_cpus",  "server_cpus",      "compute_cpus", "checkpoint_every",
      "shard_threads", "metrics_host"};
  return kNames;
}
const std::set<std::string>& LauncherSwitches() {
  static const std::set<std::string> kNames = {"supervise", "metrics", "secure"};
  return kNames;
}

// local.sh spells its options with dashes.
std::string LauncherSpelling(std::string name) {
  for (char& c : name)
    if (c == '_') c = '-';
  return "--" + name;
}

// The value of --job_id=... in a job file's text, or "".
std::string JobIdIn(const std::string& text) {
  std::istringstream in(text);
  std::string line, id;
  while (std::getline(in, line)) {
    const std::string flag = FlagWithUnderscores(line);
    if (flag.rfind("--job_id=", 0) == 0) id = flag.substr(9);  // the last one counts
  }
  return id;
}

}  // namespace

std::string FlagWithUnderscores(std::string arg) {
  if (arg.rfind("--", 0) != 0) return arg;
  const size_t end = std::min(arg.find('='), arg.size());
  for (size_t k = 2; k < end; ++k)
    if (arg[k] == '-') arg[k] = '_';
  return arg;
}

std::string FindJobFileArg(const std::vector<std::string>& args) {
  std::string job;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = FlagWithUnderscores(args[i]);
    if (a == "--job" && i + 1 < args.size()) job = args[i + 1];
    if (a.rfind("--job=", 0) == 0) job = a.substr(6);
  }
  return job;
}

StatusOr<TrainCommand> ParseTrainArgs(const std::vector<std::string>& args,
                                      const std::string& job_file_text) {
  TrainCommand out;
  std::string servers = "1", workers = "2", job_id;
  bool has_model = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a = FlagWithUnderscores(args[i]);
    if (a.size() <= 2 || a.rfind("--", 0) != 0) {
      return InvalidArgument("unexpected argument '" + args[i] +
                             "': options and job flags start with --");
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (LauncherOptionsWithValue().count(name) > 0) {
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      }
      if (value.empty()) return InvalidArgument("--" + name + " needs a value");
      if (name == "run_dir") {
        out.run_dir = value;
      } else if (name == "job") {
        out.job_file = value;
      } else if (name == "servers") {
        servers = value;
      } else if (name == "workers") {
        workers = value;
      } else {
        out.launcher_args.push_back(LauncherSpelling(name));
        out.launcher_args.push_back(value);
      }
      continue;
    }
    if (LauncherSwitches().count(name) > 0 && eq == std::string::npos) {
      out.launcher_args.push_back(LauncherSpelling(name));
      continue;
    }
    // A job flag: the coordinator checks its name and value.
    if (name == "job_id" && eq != std::string::npos) job_id = a.substr(eq + 1);
    if (name == "model" && eq != std::string::npos && eq + 1 < a.size()) has_model = true;
    if (name == "flagfile") {
      return InvalidArgument("--flagfile: name the job file with --job FILE");
    }
    out.job_flags.push_back(a);
  }
  if (out.job_file.empty() && !has_model) {
    return InvalidArgument("no job: give a job file (--job FILE) or the job's flags, at least "
                           "--model=NAME_OR_FILE");
  }
  if (job_id.empty() && !out.job_file.empty()) job_id = JobIdIn(job_file_text);
  if (out.run_dir.empty()) out.run_dir = "runs/" + (job_id.empty() ? "train" : job_id);
  std::vector<std::string> head = {"--job",     out.job_file.empty() ? out.run_dir + "/job.flags"
                                                                     : out.job_file,
                                   "--run-dir", out.run_dir,
                                   "--servers", servers,
                                   "--workers", workers};
  out.launcher_args.insert(out.launcher_args.begin(), head.begin(), head.end());
  return out;
}

}  // namespace eps
