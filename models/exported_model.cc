#include "models/exported_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/files.h"
#include "data/model_input.h"
#include "models/exported_table.h"
#include "models/init_file.h"
#include "models/model_export.h"
#include "models/model_file.h"

namespace eps {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Writes the exported tensors into the runner's model, matched by name; the tables it looks
// up must be `tables`' (of their shapes), which the safetensors file leaves to table files.
Status LoadWeights(const ExportedModelOptions& o, const std::vector<ExportedTensor>& tensors,
                   const std::map<std::string, ExportedTable>& tables, ModelRunner& runner) {
  std::map<std::string, const ExportedTensor*> by_name;
  for (const ExportedTensor& t : tensors) by_name[t.spec.name] = &t;
  const std::vector<TensorSpec>& own = runner.Tensors();
  if (own.size() != tensors.size() + tables.size()) {
    return InvalidArgument("--model " + o.path + " holds " + std::to_string(tensors.size()) +
                           " tensors and " + std::to_string(tables.size()) + " table files, " +
                           o.arch + " model " + std::to_string(own.size()) + " tensors");
  }
  for (size_t i = 0; i < own.size(); ++i) {
    if (runner.Lookup(i)) {
      auto table = tables.find(own[i].name);
      if (table == tables.end() || table->second.rows() != own[i].shape[0] ||
          table->second.dim() != own[i].shape[1]) {
        return InvalidArgument("--model " + o.path + " has no table file of the model's table '" +
                               own[i].name + "' (of its shape)");
      }
      continue;
    }
    auto it = by_name.find(own[i].name);
    if (it == by_name.end())
      return InvalidArgument("--model " + o.path + " has no tensor '" + own[i].name + "'");
    const ExportedTensor& t = *it->second;
    if (t.spec.shape != own[i].shape || t.spec.dtype != own[i].dtype) {
      return InvalidArgument("--model " + o.path + ": tensor '" + own[i].name +
                             "' differs in shape or dtype from the model's");
    }
    EPS_RETURN_IF_ERROR(runner.Write(i, 0, t.bytes.data(), t.bytes.size()));
  }
  return OkStatus();
}

// The module a TorchScript job's model.safetensors runs (ExportedModelOptions::script): --script's
// file, or the job's own as the metadata names it, still of the SHA-256 the job recorded.
StatusOr<std::string> JobModule(const ExportedModelOptions& options,
                                const std::map<std::string, std::string>& meta) {
  if (!options.script.empty()) {
    EPS_ASSIGN_OR_RETURN(ModelFile file, ReadModelFile(options.script, "", "--script"));
    return std::move(file.bytes);
  }
  const std::string& module = meta.at("model");
  const auto pinned = meta.find("model_sha256");
  auto file =
      ReadModelFile(module, pinned == meta.end() ? "" : pinned->second,
                    "the job's module (its metadata's \"model\")", "the export's \"model_sha256\"");
  if (!file.ok()) {
    return Status(file.status().code(), "--model " + options.path +
                                            " is a TorchScript job's: " + file.status().message() +
                                            "; name the job's module with --script");
  }
  return std::move(file->bytes);
}

// A model whose tables are looked up in an export's table files: before each batch of Evaluate
// and Predict, the batch's rows are read from the files and written into the runner (the
// previous batch's dropped), as a worker writes the rows it pulls before it evaluates. The
// runner's forward on a batch reads exactly that batch's rows, so the bits are the job's.
class TableFileRunner final : public ModelRunner {
 public:
  TableFileRunner(std::unique_ptr<ModelRunner> runner, std::map<std::string, ExportedTable> tables)
      : runner_(std::move(runner)), tables_(std::move(tables)) {
    const std::vector<TensorSpec>& own = runner_->Tensors();
    for (size_t i = 0; i < own.size(); ++i) {
      if (runner_->Lookup(i)) by_param_.emplace_back(i, &tables_.at(own[i].name));
    }
  }

  const std::vector<TensorSpec>& Tensors() const override { return runner_->Tensors(); }
  const void* Data(size_t i) const override { return runner_->Data(i); }
  Status Write(size_t i, size_t byte_offset, const void* src, size_t bytes) override {
    return runner_->Write(i, byte_offset, src, bytes);
  }
  using ModelRunner::TrainStep;
  StatusOr<float> TrainStep(const Dataset& data, const std::vector<int64_t>& indices,
                            uint64_t rng_seed, const GradReady& ready) override {
    return runner_->TrainStep(data, indices, rng_seed, ready);
  }
  const float* GradData(size_t i) const override { return runner_->GradData(i); }
  SparseGradient SparseGrad(size_t i) const override { return runner_->SparseGrad(i); }
  StatusOr<Gradients> TakeGradients() override { return runner_->TakeGradients(); }
  bool Lookup(size_t i) const override { return runner_->Lookup(i); }
  bool NamesHeldTableRows() const override { return runner_->NamesHeldTableRows(); }
  StatusOr<std::vector<std::vector<uint64_t>>> TableRows(const Dataset& data,
                                                         const std::vector<int64_t>& indices,
                                                         bool held_too) override {
    return runner_->TableRows(data, indices, held_too);
  }

  StatusOr<EvalStats> Evaluate(const Dataset& data, int64_t lo, int64_t hi,
                               int64_t batch) override {
    EvalStats all;
    EPS_RETURN_IF_ERROR(ByBatch(data, lo, hi, batch, [&](int64_t first, int64_t end) -> Status {
      EPS_ASSIGN_OR_RETURN(EvalStats s, runner_->Evaluate(data, first, end, end - first));
      all.count += s.count;
      all.correct += s.correct;
      all.loss_sum += s.loss_sum;  // the runner's own sum, batch by batch
      return OkStatus();
    }));
    return all;
  }
  StatusOr<Outputs> Predict(const Dataset& data, int64_t lo, int64_t hi, int64_t batch) override {
    Outputs all;
    EPS_RETURN_IF_ERROR(ByBatch(data, lo, hi, batch, [&](int64_t first, int64_t end) -> Status {
      EPS_ASSIGN_OR_RETURN(Outputs o, runner_->Predict(data, first, end, end - first));
      if (all.shape.empty()) {
        all = std::move(o);
      } else {
        all.shape[0] += o.shape[0];
        all.values.insert(all.values.end(), o.values.begin(), o.values.end());
      }
      return OkStatus();
    }));
    return all;
  }

 private:
  // `f(first, end)` for each batch of [lo, hi), its rows written first; a range the runner
  // refuses goes to it whole, for its error.
  template <typename F>
  Status ByBatch(const Dataset& data, int64_t lo, int64_t hi, int64_t batch, F&& f) {
    if (lo < 0 || lo >= hi || hi > data.size || batch < 1) {
      return runner_->Evaluate(data, lo, hi, batch).status();
    }
    std::vector<int64_t> indices;
    for (int64_t first = lo; first < hi; first += batch) {
      const int64_t end = std::min(hi, first + batch);
      indices.resize(static_cast<size_t>(end - first));
      for (int64_t k = first; k < end; ++k) indices[static_cast<size_t>(k - first)] = k;
      EPS_RETURN_IF_ERROR(BindRows(data, indices));
      EPS_RETURN_IF_ERROR(f(first, end));
    }
    return OkStatus();
  }

  // The rows samples `indices` read, from the table files into the runner.
  Status BindRows(const Dataset& data, const std::vector<int64_t>& indices) {
    EPS_ASSIGN_OR_RETURN(std::vector<std::vector<uint64_t>> rows,
                         runner_->TableRows(data, indices, /*held_too=*/false));
    for (const auto& [i, table] : by_param_) {
      EPS_RETURN_IF_ERROR(runner_->DropTableRows(i));
      if (i >= rows.size() || rows[i].empty()) continue;
      values_.resize(rows[i].size() * static_cast<size_t>(table->dim()));
      EPS_RETURN_IF_ERROR(table->Read(rows[i].data(), rows[i].size(), values_.data()));
      EPS_RETURN_IF_ERROR(
          runner_->WriteTableRows(i, rows[i].data(), values_.data(), rows[i].size()));
    }
    return OkStatus();
  }

  const std::unique_ptr<ModelRunner> runner_;
  const std::map<std::string, ExportedTable> tables_;
  std::vector<std::pair<size_t, const ExportedTable*>> by_param_;
  std::vector<float> values_;
};

// A sized zoo model's sizes: its export's metadata's, the classes and the
// sample length of the job's vocabulary (text).
StatusOr<ZooSizes> SizesOf(const std::map<std::string, std::string>& meta, const Vocabulary* vocab,
                           const std::string& path) {
  auto sizes = ZooSizesFromMetadata(meta);
  if (!sizes.ok()) return InvalidArgument("--model " + path + ": " + sizes.status().message());
  if (vocab != nullptr) {
    sizes->num_classes = static_cast<uint32_t>(vocab->labels().size());
    sizes->seq_len = vocab->seq_len();
  }
  return sizes;
}

}  // namespace

StatusOr<std::unique_ptr<ModelRunner>> OpenExportedModel(const ExportedModelOptions& options) {
  const std::string& path = options.path;
  ModelOptions o;
  o.threads = options.threads;
  std::vector<ExportedTensor> tensors;
  std::map<std::string, ExportedTable> tables;
  EPS_ASSIGN_OR_RETURN(o.sizes, SizesOf({}, options.vocab, path));
  if (EndsWith(path, ".safetensors")) {
    std::map<std::string, std::string> meta;
    auto read = ReadSafetensors(path, &meta);
    if (!read.ok()) return InvalidArgument("--model: " + read.status().message());
    tensors = std::move(read).value();
    if (meta.count("table_files")) {
      auto opened = ExportedTable::OpenAll(path, meta["table_files"]);
      if (!opened.ok())
        return Status(opened.status().code(), "--model: " + opened.status().message());
      tables = std::move(opened).value();
      o.lookup_table_bytes = kDenseTableBytes;  // the tables the export left to table files
    }
    EPS_ASSIGN_OR_RETURN(o.sizes, SizesOf(meta, options.vocab, path));
    o.model = options.arch.empty() ? meta["model"] : options.arch;
    if (options.arch.empty() && !IsBuiltinModel(o.model) && IsModelPath(o.model)) {
      EPS_ASSIGN_OR_RETURN(o.script, JobModule(options, meta));
      o.model.clear();
    } else if (!IsBuiltinModel(o.model)) {
      return InvalidArgument("--model " + path + ": its model '" + o.model +
                             "' is no built-in one, nor a TorchScript module's file: name the "
                             "built-in model with --arch");
    } else if (!options.script.empty()) {
      return InvalidArgument("--script runs a TorchScript job's model.safetensors; --model " +
                             path + " is the built-in " + o.model + "'s");
    }
  } else {
    if (!options.script.empty()) {
      return InvalidArgument("--script runs a TorchScript job's model.safetensors; --model " +
                             path + " is not one");
    }
    auto bytes = ReadFileToString(path);
    if (!bytes.ok()) return Status(bytes.status().code(), "--model " + bytes.status().message());
    if (options.arch.empty()) {
      o.script = std::move(bytes).value();
    } else {
      o.model = options.arch;
      EPS_ASSIGN_OR_RETURN(tensors, ParseStateDict(*bytes, "--model " + path));
    }
  }
  auto runner = ModelRunner::Create(o);
  if (!runner.ok()) {
    std::string hint;
    if (!o.script.empty() && ParseStateDict(o.script, "--model " + path).ok())
      hint = " (it is a state dict: name its built-in model with --arch)";
    const std::string flag = o.script.empty() ? "--arch " + o.model : "--model " + path;
    return Status(runner.status().code(), flag + ": " + runner.status().message() + hint);
  }
  if (o.script.empty() || EndsWith(path, ".safetensors")) {  // weights not in the module
    ExportedModelOptions named = options;
    named.arch = o.model.empty() ? "the module's" : "--arch " + o.model + "'s";
    EPS_RETURN_IF_ERROR(LoadWeights(named, tensors, tables, **runner));
  }
  if (tables.empty()) return runner;
  return std::unique_ptr<ModelRunner>(
      std::make_unique<TableFileRunner>(std::move(runner).value(), std::move(tables)));
}

}  // namespace eps
