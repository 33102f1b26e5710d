// The subcommands of `elasticps`, the command line for people training and
// operating jobs (tools/elasticps_main.cc dispatches to them):
//
//   elasticps train    a job on this host (launcher/local.sh runs it)
//   elasticps export   a job's model from its stores (export_model)
//   elasticps evaluate accuracy and loss of an exported model on a data set (eps_predict)
//   elasticps predict  an exported model's predictions as CSV (eps_predict)
//   elasticps status   a running job's step, workers, shards and events
//   elasticps hold     hold a running job at its next step boundary; `release` goes on
//   elasticps keygen   a CURVE key pair
//
// What is here is the part worth testing without a process: the status
// command, and how `train`'s arguments split into the launcher's options and
// the job's flags. Thread-compatible functions; nothing here reads flags or
// the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

// ---- status ----------------------------------------------------------------

inline constexpr const char* kStatusUsage =
    "elasticps status (--run-dir DIR | --coordinator ADDR --token-file FILE) [--json] "
    "[--events N] [--timeout-s S] [--curve-secret-key FILE --curve-server-key FILE]";
inline constexpr const char* kHoldUsage =
    "elasticps hold [--from-step N] (--run-dir DIR | --coordinator ADDR --token-file FILE)\n"
    "               [--json] [--timeout-s S] [--curve-secret-key FILE --curve-server-key FILE]\n"
    "elasticps release (the same, less --from-step)\n"
    "\n"
    "hold: no step starts once the step in flight has ended (--from-step N: once N steps are\n"
    "done); every worker and all state stay, and the hold outlives a coordinator restart.\n"
    "release: the job goes on, on the same bits as if it had never been held.\n"
    "Prints the job's status after the change (docs/operations.md, \"Holding a job\").";

inline constexpr const char* kShardsUsage =
    "elasticps shards [--remove ID] (--run-dir DIR | --coordinator ADDR --token-file FILE)\n"
    "                 [--json] [--timeout-s S] [--curve-secret-key FILE --curve-server-key FILE]\n"
    "\n"
    "The job's shards: each one's role (member of the shard map, spare, leaving), version,\n"
    "durable step and bytes, and the map's generation. --remove ID: at the next step boundary\n"
    "shard ID hands its state over to the other shards, then exits; the bits do not change.\n"
    "A shard started with the job's coordinator and token and a new --shard_id (launcher/\n"
    "attach.sh --shard) is a spare: the next step boundary moves part of the state to it\n"
    "(docs/operations.md, \"Adding and removing shards\").";

struct StatusCommandOptions {
  std::string run_dir;      // a job's run folder: its coordinator.addr, token (and keys/)
  std::string coordinator;  // or the coordinator's endpoint ...
  std::string token_file;   // ... and the job's token file
  bool json = false;        // the reply as one JSON object instead of tables
  uint32_t events = 10;     // how many of the newest events to show
  double timeout_s = 5;     // how long to wait for the answer
  std::string curve_secret_key, curve_server_key;  // a CURVE job (docs/security.md)
  // hold / release (JobControl) instead of a plain status request: true holds
  // (no step >= from_step starts; 0: from the next step boundary), false
  // releases; the reply is the status after the change.
  std::optional<bool> hold;
  int64_t from_step = 0;
  // `elasticps shards`: the shards' table only; with remove_shard, a
  // JobControl removing it first (the reply is the status after the change).
  bool shards = false;
  std::optional<uint32_t> remove_shard;
};

// Prints the job's status on stdout. Returns the process's exit code: 0
// answered, 1 no answer or refused (it says when result.json shows the job
// has finished), 2 bad options.
int RunStatusCommand(const StatusCommandOptions& options);

// ---- evaluate, predict (eps_predict, tools/predict_main.cc) ------------------

inline constexpr const char* kEvaluateUsage =
    "elasticps evaluate --model FILE --data F [--labels F] [--arch NAME] [--script FILE]\n"
    "                   [--data-format FORMAT] [--label-column C] [--text-column C]\n"
    "                   [--vocab vocab.json] [--limit N] [--batch N] [--threads N] [--json]\n"
    "\n"
    "Accuracy and mean loss of an exported model on a data set (cross-entropy for classes,\n"
    "mean squared error for float targets), computed as a job's workers evaluate.\n"
    "  --model FILE   model.script.pt (TorchScript), or model.safetensors / model.pt of a\n"
    "                 built-in model (--arch NAME; safetensors name theirs in their metadata)\n"
    "                 or model.safetensors of a TorchScript job (its table files too)\n"
    "  --script FILE  the module that runs a TorchScript job's model.safetensors (default:\n"
    "                 the job's module file, as the metadata names it, if still unchanged)\n"
    "  --data, --labels, --data-format, --label-column  the data set (docs/data.md):\n"
    "                 idx, npy, csv, criteo, or text (tsv, jsonl; --text-column, docs/text.md)\n"
    "  --vocab FILE   text: the job's run_dir/vocab.json (tokenizes as the job did)\n"
    "  --hash-buckets N  criteo: the job's --hash_buckets (default: the export's)\n"
    "  --batch N      samples per forward pass (the job's --eval_batch; default 1000)\n"
    "  --threads N    libtorch threads (the job's --threads; default 1)\n"
    "Exit code: 0 done, 1 internal error, 2 bad input (the message names the flag).";

inline constexpr const char* kPredictUsage =
    "elasticps predict --model FILE --data F [--labels F] --out predictions.csv [--arch NAME]\n"
    "                  [--script FILE] [--data-format FORMAT] [--label-column C]\n"
    "                  [--text-column C] [--vocab vocab.json] [--limit N] [--batch N]\n"
    "                  [--threads N] [--raw]\n"
    "\n"
    "Writes one CSV row per sample, after a header: index, class (the output's arg-max), and\n"
    "p0..pC-1, the softmax of the output; for a float-target model (float --labels, an output\n"
    "that is not [n, classes], or --raw) index and the outputs y0... With --vocab, the class's\n"
    "label follows the class (`spam`). Labels are optional for NPY data and never read from\n"
    "text (raw mails predict). Flags and exit codes as `elasticps evaluate`.";

// ---- train -------------------------------------------------------------------

inline constexpr const char* kTrainUsage =
    "elasticps train [--job FILE] [--run-dir DIR] [--servers S] [--workers W] [launcher options]\n"
    "                [--FLAG=VALUE ...]\n"
    "\n"
    "Runs a job on this host: its coordinator, S shards (default 1) and W workers (default 2),\n"
    "through launcher/local.sh, and waits for it; the run folder (default runs/JOB_ID) gets\n"
    "the logs, events.jsonl, metrics.csv, result.json and the model files.\n"
    "\n"
    "  --job FILE        a job file (one --flag=value a line, e.g. examples/*.flags)\n"
    "  --FLAG=VALUE      a job flag (`coordinator --help` lists them): it overrides\n"
    "                    the job file's, or, without --job, makes the job (DIR/job.flags).\n"
    "                    Job flags are written with '=': --model=model.pt --steps=300\n"
    "  launcher options  --slowdowns F0,.. --devices D --worker-cpus C --server-cpus C\n"
    "                    --compute-cpus C --checkpoint-every K --shard-threads N --supervise\n"
    "                    --metrics --metrics-host HOST --secure (launcher/local.sh --help)\n"
    "Exit code: local.sh's (0 only if the job succeeded, 2 bad arguments).";

// `elasticps train`'s arguments, sorted out.
struct TrainCommand {
  std::string run_dir;                      // the job's run folder
  std::string job_file;                     // --job; empty: write job_flags to run_dir/job.flags
  std::vector<std::string> launcher_args;   // local.sh's options (--job and --run-dir included)
  std::vector<std::string> job_flags;       // "--name=value", names with underscores
};

// Splits `args` (what follows `elasticps train`) into local.sh's options, with
// --servers and --workers defaulted, and the job's flags. Options may be
// written --name VALUE or --name=VALUE, with dashes or underscores; a job flag
// is --name=VALUE, --name or --noname. The run folder defaults to
// runs/JOB_ID, JOB_ID being --job_id or the job file's (read from
// `job_file_text`, the --job file's contents, when it is given), else "train".
// InvalidArgument, naming the argument, for a positional argument, an option
// without its value, or neither --job nor --model.
[[nodiscard]] StatusOr<TrainCommand> ParseTrainArgs(const std::vector<std::string>& args,
                                                   const std::string& job_file_text);

// The --job option's value among `args`, if any (the caller reads the file
// before ParseTrainArgs).
std::string FindJobFileArg(const std::vector<std::string>& args);

// "--run-dir=x" -> "--run_dir=x": dashes in a flag's name read as underscores;
// anything that is not a --flag stays as it is.
std::string FlagWithUnderscores(std::string arg);

}  // namespace eps
