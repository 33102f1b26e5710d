#include "tools/model_data.h"

#include <memory>
#include <utility>
#include <vector>

namespace eps {
namespace {

// The data set's own source, and the class-0 labels made for a data set read
// without a labels file.
class ZeroLabels final : public DataSource {
 public:
  ZeroLabels(std::shared_ptr<const DataSource> inner, int64_t n)
      : inner_(std::move(inner)), labels_(static_cast<size_t>(n), 0) {}
  Status CheckUnchanged() const override {
    return inner_ == nullptr ? OkStatus() : inner_->CheckUnchanged();
  }
  const int64_t* labels() const { return labels_.data(); }

 private:
  const std::shared_ptr<const DataSource> inner_;
  const std::vector<int64_t> labels_;
};

}  // namespace

StatusOr<Dataset> OpenModelData(const ModelDataOptions& options) {
  if (options.data.empty()) return InvalidArgument("--data is required: the data set's file");
  DataFiles files;
  files.role = "test";
  files.features = options.data;
  files.labels = options.labels;
  files.format = options.format;
  files.label_column = options.label_column;
  files.limit = options.limit;
  auto format = DataFormatOf(files);
  if (!format.ok()) {
    return InvalidArgument("--data " + options.data + " / --data_format '" + options.format +
                           "': expected idx, npy, csv, tsv, jsonl or criteo, or an extension that says it "
                           "(.npy, .csv, .tsv, .jsonl, .gz, -ubyte)");
  }
  if (IsTextFormat(*format)) {
    if (options.vocab == nullptr) {
      return InvalidArgument("--vocab is required for text data (--data " + options.data +
                             "): the job's run_dir/vocab.json, which tokenizes as the job did");
    }
    if (!options.labels.empty()) {
      return InvalidArgument("--labels " + options.labels + ": text data holds its labels in its " +
                             "--label_column ('" + options.label_column + "'): leave --labels out");
    }
    auto text = OpenTextDataset(options.data, *format, options.text_column,
                                options.labels_optional ? "" : options.label_column, *options.vocab,
                                options.limit);
    if (!text.ok()) return Status(text.status().code(), "--data: " + text.status().message());
    return std::move(text->data);
  }
  if (*format == "criteo") {  // labels inline, categories hashed as the job hashed them
    if (!options.labels.empty()) {
      return InvalidArgument("--labels " + options.labels +
                             ": Criteo data holds its labels in its first column: leave --labels out");
    }
    if (!options.hash_buckets.has_value() || *options.hash_buckets == 1) {
      return InvalidArgument(
          "--hash_buckets: Criteo categories hash into the model's table rows, the job's "
          "--hash_buckets (a job's export names them; give it for another model file)");
    }
    files.hash_buckets = *options.hash_buckets;
  }
  // Without labels, an NPY features file is read as its own (float32, uint8
  // or int64) targets too, which the mapping makes cheap; they are replaced
  // by class 0 below.
  const bool make_labels = options.labels_optional && options.labels.empty() && *format == "npy";
  if (make_labels) files.labels = options.data;
  if (*format == "csv" && !options.labels.empty()) {
    return InvalidArgument("--labels " + options.labels +
                           ": a CSV data set holds its labels in its --label_column ('" +
                           options.label_column + "'): leave --labels out");
  }
  if (*format != "csv" && *format != "criteo" && files.labels.empty()) {
    return InvalidArgument("--labels is required: " + *format + " data keeps its labels in a " +
                           "second file" +
                           (options.labels_optional ? std::string(" (only NPY data may go without)")
                                                    : std::string()));
  }
  auto ds = OpenDataset(files);
  if (!ds.ok()) {
    return Status(ds.status().code(), "--data " + options.data +
                                          (options.labels.empty() ? "" : " --labels " + options.labels) +
                                          ": " + ds.status().message());
  }
  if (make_labels) {
    auto zeros = std::make_shared<const ZeroLabels>(ds->source, ds->size);
    ds->labels = zeros->labels();
    ds->label_dtype = DataType::kInt64;
    ds->label_shape = {};
    ds->num_classes = ds->size > 0 ? 1 : 0;
    ds->source = std::move(zeros);
  }
  return ds;
}

}  // namespace eps
