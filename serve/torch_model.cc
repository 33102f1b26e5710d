#include "serve/torch_model.h"

#include <filesystem>
#include <limits>
#include <utility>

#include "common/digest.h"
#include "common/files.h"
#include "common/layout.h"
#include "data/criteo.h"
#include "data/model_input.h"
#include "models/exported_model.h"
#include "models/model_export.h"

namespace eps {
namespace {

class TorchServedModel final : public ServedModel {
 public:
  TorchServedModel(std::unique_ptr<ModelRunner> runner, ModelInput input, bool raw)
      : runner_(std::move(runner)), input_(std::move(input)), raw_(raw) {}

  const ModelInput& input() const override { return input_; }
  const std::vector<std::string>* labels() const override {
    return input_.vocab ? &input_.vocab->labels() : nullptr;
  }

  StatusOr<BatchOutputs> Predict(const Instances& batch) override {
    const int64_t n = batch.count;
    const bool ids = input_.dtype == DataType::kInt64;
    const size_t elems = static_cast<size_t>(n * input_.SampleElems());
    if (n < 1 || (ids ? batch.ids.size() : batch.floats.size()) != elems)
      return InvalidArgument("a batch of " + std::to_string(n) + " instances of the wrong size");
    labels_.assign(static_cast<size_t>(n), 0);  // labels play no part in a prediction
    Dataset data;
    data.size = n;
    data.sample_shape = input_.sample_shape;
    data.feature_dtype = input_.dtype;
    data.features = ids ? static_cast<const void*>(batch.ids.data()) : batch.floats.data();
    data.label_dtype = DataType::kInt64;
    data.labels = labels_.data();
    data.num_classes = 1;
    EPS_ASSIGN_OR_RETURN(ModelRunner::Outputs out, runner_->Predict(data, 0, n, n));
    BatchOutputs b;
    b.rows = n;
    b.row_shape.assign(out.shape.begin() + 1, out.shape.end());
    b.values = std::move(out.values);
    if (!raw_ && b.row_shape.size() == 1)
      b.probabilities = SoftmaxRows(b.values.data(), n, b.row_shape[0]);
    return b;
  }

 private:
  const std::unique_ptr<ModelRunner> runner_;
  const ModelInput input_;
  const bool raw_;
  std::vector<int64_t> labels_;
};

std::string ShapeText(const std::vector<int64_t>& shape) {
  ModelInput i;
  i.sample_shape = shape;
  return i.ShapeText();
}

}  // namespace

StatusOr<std::shared_ptr<const LoadedModel>> LoadTorchModel(const TorchModelOptions& options) {
  if (options.path.empty()) return InvalidArgument("--model is required: the exported model file");
  auto bytes = ReadFileToString(options.path);
  if (!bytes.ok()) return Status(bytes.status().code(), "--model " + bytes.status().message());
  auto loaded = std::make_shared<LoadedModel>();
  loaded->file = options.path;
  Sha256 sha;
  sha.Update(bytes->data(), bytes->size());
  loaded->sha256 = sha.HexDigest();
  loaded->metadata = ExportMetadataOf(options.path);

  const std::string arch = options.arch.empty() ? loaded->metadata["model"] : options.arch;
  ModelInput input;
  std::string vocab_path = options.vocab;
  const std::filesystem::path beside =
      std::filesystem::path(options.path).parent_path() / "vocab.json";
  std::error_code ec;
  if (vocab_path.empty() && std::filesystem::exists(beside, ec)) vocab_path = beside.string();
  if (!vocab_path.empty()) {
    auto text = ReadFileToString(vocab_path);
    auto vocab = text.ok() ? Vocabulary::Parse(*text) : StatusOr<Vocabulary>(text.status());
    if (!vocab.ok())
      return InvalidArgument("--vocab " + vocab_path + ": " + vocab.status().message());
    input.vocab = std::make_shared<const Vocabulary>(std::move(vocab).value());
    input.dtype = DataType::kInt64;
    input.sample_shape = {static_cast<int64_t>(input.vocab->seq_len())};
    const Vocabulary& v = *input.vocab;
    input.max_id = !v.hashed() ? static_cast<int64_t>(v.words().size())
                   : v.keys()  ? kUnboundedRows
                               : static_cast<int64_t>(v.hash_buckets());
  } else if (arch == "dlrm") {
    // A Criteo sample: its 13 integers (any sign) and 26 category rows, or its fields as text.
    input.dtype = DataType::kInt64;
    input.sample_shape = {kCriteoFeatures};
    input.min_id = std::numeric_limits<int64_t>::min();
    auto sizes = ZooSizesFromMetadata(loaded->metadata);
    if (sizes.ok() && loaded->metadata.count("vocab_size"))
      input.criteo_buckets = sizes->vocab_size;
  } else {
    if (IsTextModel(arch))
      return InvalidArgument("--model " + options.path +
                             " is a text model: name its vocabulary with --vocab");
    input.sample_shape = {1, kImageSide, kImageSide};
  }
  if (!options.input_shape.empty()) input.sample_shape = options.input_shape;
  if (options.input_dtype == "int64") {
    if (input.dtype != DataType::kInt64) input.min_id = 0;  // a module's ids
    input.dtype = DataType::kInt64;
  } else if (options.input_dtype == "float32") {
    if (input.dtype != DataType::kFloat32)
      return InvalidArgument("--input_dtype float32: --model " + options.path + " takes ids");
  } else if (!options.input_dtype.empty()) {
    return InvalidArgument("--input_dtype is float32 or int64, not '" + options.input_dtype + "'");
  }

  ExportedModelOptions o;
  o.path = options.path;
  o.arch = options.arch;
  o.script = options.script;
  o.threads = options.threads;
  o.vocab = input.vocab.get();
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, OpenExportedModel(o));
  auto model = std::make_shared<TorchServedModel>(std::move(runner), input, options.raw);

  // One instance of zeros (a text model's: padding), so that a model that
  // does not take this input is refused now rather than on every request.
  Instances probe;
  probe.count = 1;
  if (input.dtype == DataType::kInt64) {
    probe.ids.assign(static_cast<size_t>(input.SampleElems()), 0);
  } else {
    probe.floats.assign(static_cast<size_t>(input.SampleElems()), 0.0f);
  }
  auto out = model->Predict(probe);
  if (!out.ok()) {
    return InvalidArgument("--model " + options.path + " does not take instances of shape " +
                           ShapeText(input.sample_shape) +
                           " (--input_shape): " + out.status().message());
  }
  loaded->model = std::move(model);
  return std::shared_ptr<const LoadedModel>(std::move(loaded));
}

}  // namespace eps
