// eps_predict: evaluates an exported model on a data set, or writes its
// predictions; `elasticps evaluate` and `elasticps predict` run it (the one
// libtorch-linked piece they need: the dispatcher stays torch-free).
//
//   eps_predict evaluate --model FILE --data F [--labels F] [--arch NAME] [--json] ...
//   eps_predict predict  --model FILE --data F [--labels F] --out predictions.csv ...
//
// FILE is a model.script.pt (a TorchScript module with its weights), or the
// model.safetensors / model.pt (state dict) of a built-in model, whose name
// --arch gives or, for safetensors, the file's __metadata__ "model"
// (OpenExportedModel, models/exported_model.h, which `elasticps serve` opens
// its model with too). The model runs in a ModelRunner
// (models/model_runner.h) on the CPU with --threads intra-op threads, in eval
// mode: the forward and the evaluation a job's workers compute, so `evaluate`
// gives the job's test accuracy. The data go through OpenModelData
// (tools/model_data.h). Exit codes: 0 done, 1 an internal error, 2 bad input
// (flags, files, a model that does not fit).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "data/model_input.h"
#include "models/exported_model.h"
#include "models/model_export.h"
#include "models/model_runner.h"
#include "tools/model_data.h"

DEFINE_string(model, "", "The exported model: model.script.pt, model.safetensors or model.pt");
DEFINE_string(arch, "",
              "The built-in model (mlp, cnn, cnn_bn, ...) a model.pt / model.safetensors holds "
              "(default for safetensors: its metadata's)");
DEFINE_string(script, "",
              "A TorchScript job's model.safetensors: the module that runs it (default: the job's "
              "own, as its metadata names it, unchanged since)");
DEFINE_string(data, "", "The data set's features file (CSV: the whole table)");
DEFINE_string(labels, "", "The labels file (IDX, NPY; optional for predict on NPY)");
DEFINE_string(data_format, "",
              "idx, npy, csv, tsv, jsonl or criteo (default: from --data's extension)");
DEFINE_string(label_column, "label", "CSV, TSV, JSONL: the column holding the labels");
DEFINE_string(text_column, "text", "TSV, JSONL: the column holding the texts");
DEFINE_string(vocab, "",
              "Text data: the job's vocabulary (its run dir's vocab.json), which tokenizes as the "
              "job did and names the classes");
DEFINE_uint64(
    hash_buckets, 0,
    "Criteo data: the table rows its categories hash into, the job's --hash_buckets "
    "(0: the export's, from the metadata of --model's, or beside it, model.safetensors; an export "
    "of unbounded keys takes the categories' 63-bit keys)");
DEFINE_int64(limit, 0, "Use the first N samples only (0: all)");
DEFINE_int64(batch, 1000, "Samples per forward pass (a job's --eval_batch)");
DEFINE_int32(threads, 1, "libtorch intra-op threads (a job's --threads: bits depend on it)");
DEFINE_bool(json, false, "evaluate: print one JSON object");
DEFINE_string(out, "", "predict: the CSV file to write");
DEFINE_bool(raw, false, "predict: write the model's outputs, not classes and probabilities");
DEFINE_string(cpu_kernels, "",
              "The CPU kernel set to run (common/cpu_kernels.h), as the job that trained the model "
              "did. Empty: its export's (the metadata of --model's, or beside it, "
              "model.safetensors), else x86-64-v3");

namespace eps {
namespace {

constexpr const char* kUsage =
    "eps_predict evaluate|predict --model FILE --data F [--labels F] [--arch NAME] [--script F] "
    "[--data_format idx|npy|csv|tsv|jsonl|criteo] [--label_column C] [--text_column C] [--vocab "
    "vocab.json] [--hash_buckets N] [--limit N] [--batch N] [--threads N] "
    "[--json] [--out predictions.csv] [--raw]";

StatusOr<std::string> ReadAll(const std::string& path, const std::string& flag = "--model") {
  auto bytes = ReadFileToString(path);
  if (!bytes.ok()) return Status(bytes.status().code(), flag + " " + bytes.status().message());
  return bytes;
}

// A CSV cell holding `s` (quoted when it holds a comma, a quote or a line break).
std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

StatusOr<std::unique_ptr<ModelRunner>> OpenModel(const std::string& path, const Vocabulary* vocab) {
  ExportedModelOptions o;
  o.path = path;
  o.arch = FLAGS_arch;
  o.script = FLAGS_script;
  o.threads = FLAGS_threads;
  o.vocab = vocab;
  return OpenExportedModel(o);
}

// InvalidArgument, naming --data, when the model refuses the data (shapes,
// labels out of its classes).
Status DataError(const Status& st) {
  if (st.code() != StatusCode::kInvalidArgument) return st;
  return InvalidArgument("--data " + FLAGS_data + " does not fit --model " + FLAGS_model + ": " +
                         st.message());
}

Status Evaluate(ModelRunner& runner, const Dataset& data) {
  auto stats = runner.Evaluate(data, 0, data.size, FLAGS_batch);
  if (!stats.ok()) return DataError(stats.status());
  const bool classes = data.label_dtype == DataType::kInt64;
  const double n = static_cast<double>(std::max<int64_t>(1, stats->count));
  const double accuracy = static_cast<double>(stats->correct) / n, loss = stats->loss_sum / n;
  if (FLAGS_json) {
    char acc[32] = "null";
    if (classes) std::snprintf(acc, sizeof acc, "%.17g", accuracy);
    std::printf("{\"count\": %lld, \"correct\": %lld, \"accuracy\": %s, \"loss\": %.17g, "
                "\"loss_kind\": \"%s\"}\n",
                static_cast<long long>(stats->count), static_cast<long long>(stats->correct), acc,
                loss, classes ? "cross_entropy" : "mse");
  } else {
    std::printf("samples %lld\n", static_cast<long long>(stats->count));
    if (classes) std::printf("accuracy %.6f (%lld correct)\n", accuracy,
                             static_cast<long long>(stats->correct));
    std::printf("loss %.6f (%s)\n", loss, classes ? "cross-entropy" : "mean squared error");
  }
  return OkStatus();
}

Status Predict(ModelRunner& runner, const Dataset& data, const Vocabulary* vocab) {
  auto outputs = runner.Predict(data, 0, data.size, FLAGS_batch);
  if (!outputs.ok()) return DataError(outputs.status());
  const int64_t n = outputs->shape[0];
  const int64_t width = n == 0 ? 0 : static_cast<int64_t>(outputs->values.size()) / n;
  const bool classes = !FLAGS_raw && data.label_dtype == DataType::kInt64 &&
                       outputs->shape.size() == 2;
  std::string csv = "index";
  const bool named = classes && vocab != nullptr && vocab->labels().size() == size_t(width);
  if (classes) {
    csv += named ? ",class,label" : ",class";
    for (int64_t c = 0; c < width; ++c) csv += ",p" + std::to_string(c);
  } else {
    for (int64_t c = 0; c < width; ++c) csv += ",y" + std::to_string(c);
  }
  csv += "\n";
  const std::vector<float> probabilities =
      classes ? SoftmaxRows(outputs->values.data(), n, width) : std::vector<float>();
  const float* v = classes ? probabilities.data() : outputs->values.data();
  char cell[32];
  for (int64_t i = 0; i < n; ++i) {
    csv += std::to_string(i);
    if (classes) {
      const float* row = v + i * width;
      // The class is the output's arg-max, as the evaluation counts it.
      const float* raw = outputs->values.data() + i * width;
      int64_t best = 0;
      for (int64_t c = 1; c < width; ++c) best = raw[c] > raw[best] ? c : best;
      csv += "," + std::to_string(best);
      if (named) csv += "," + CsvCell(vocab->labels()[best]);
      for (int64_t c = 0; c < width; ++c) {
        std::snprintf(cell, sizeof cell, ",%.9g", row[c]);
        csv += cell;
      }
    } else {
      for (int64_t c = 0; c < width; ++c) {
        std::snprintf(cell, sizeof cell, ",%.9g", v[i * width + c]);
        csv += cell;
      }
    }
    csv += "\n";
  }
  EPS_RETURN_IF_ERROR(WriteFileAtomically(FLAGS_out, csv));
  std::printf("%lld predictions written to %s\n", static_cast<long long>(n), FLAGS_out.c_str());
  return OkStatus();
}

int Run(const std::string& command) {
  const char* wrong = nullptr;
  if (FLAGS_model.empty()) wrong = "--model is required: the exported model file";
  else if (FLAGS_batch < 1) wrong = "--batch must be at least 1";
  else if (FLAGS_threads < 1) wrong = "--threads must be at least 1";
  else if (FLAGS_limit < 0) wrong = "--limit must not be negative";
  else if (command == "predict" && FLAGS_out.empty()) wrong = "--out is required: the CSV to write";
  if (wrong != nullptr) {
    std::fprintf(stderr, "elasticps %s: %s\nusage: %s\n", command.c_str(), wrong, kUsage);
    return 2;
  }
  ModelDataOptions d;
  d.data = FLAGS_data;
  d.labels = FLAGS_labels;
  d.format = FLAGS_data_format;
  d.label_column = FLAGS_label_column;
  d.limit = FLAGS_limit;
  d.labels_optional = command == "predict";
  d.text_column = FLAGS_text_column;
  if (FLAGS_hash_buckets != 0) {
    d.hash_buckets = FLAGS_hash_buckets;
  } else {  // the table's rows, as the export's zoo sizes name them (0: unbounded keys)
    const std::optional<std::string> rows = ExportMetadataValue(FLAGS_model, "vocab_size");
    if (rows.has_value()) d.hash_buckets = std::strtoull(rows->c_str(), nullptr, 10);
  }
  Status st = OkStatus();
  if (!FLAGS_vocab.empty()) {
    auto bytes = ReadAll(FLAGS_vocab, "--vocab");
    auto vocab = bytes.ok() ? Vocabulary::Parse(*bytes) : StatusOr<Vocabulary>(bytes.status());
    if (!vocab.ok()) {
      std::fprintf(stderr, "elasticps %s: --vocab %s: %s\n", command.c_str(), FLAGS_vocab.c_str(),
                   vocab.status().message().c_str());
      return 2;
    }
    d.vocab = std::make_shared<const Vocabulary>(std::move(vocab).value());
  }
  auto data = OpenModelData(d);
  if (!data.ok()) {
    st = data.status();
  } else {
    auto runner = OpenModel(FLAGS_model, d.vocab.get());
    if (!runner.ok()) {
      st = runner.status();
    } else {
      // The checks a job makes at its start: the forward runs on the data's
      // shape, the output fits the labels, the loss is a scalar.
      auto checked = (*runner)->DryRun(*data);
      if (!checked.ok()) {
        st = DataError(checked.status());
      } else {
        if (!checked->empty()) std::fprintf(stderr, "elasticps %s: %s\n", command.c_str(),
                                            checked->c_str());
        st = command == "evaluate" ? Evaluate(**runner, *data)
                                   : Predict(**runner, *data, d.vocab.get());
      }
    }
  }
  if (st.ok()) return 0;
  std::fprintf(stderr, "elasticps %s: %s\n", command.c_str(), st.ToString().c_str());
  const StatusCode c = st.code();
  return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ||
                 c == StatusCode::kDataLoss
             ? 2
             : 1;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  gflags::SetUsageMessage(eps::kUsage);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // The job's CPU kernels, so that `evaluate` gives the job's own accuracy on any host.
  const std::string kernels =
      FLAGS_cpu_kernels.empty() ? eps::ExportCpuKernels(FLAGS_model) : FLAGS_cpu_kernels;
  if (auto used = eps::UseCpuKernels(kernels, args); !used.ok()) {
    std::fprintf(stderr, "eps_predict: --cpu_kernels: %s\n", used.status().ToString().c_str());
    return 2;
  }
  const std::string command = argc == 2 ? argv[1] : "";
  if (command != "evaluate" && command != "predict") {
    std::fprintf(stderr, "eps_predict: name one command, evaluate or predict\nusage: %s\n",
                 eps::kUsage);
    return 2;
  }
  return eps::Run(command);
}
