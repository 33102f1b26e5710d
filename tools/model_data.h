// The data set `elasticps evaluate` and `elasticps predict` (eps_predict) read:
// one function, so that every format data/ opens (OpenDataset: IDX, NPY, CSV,
// and a text reader when data/ adds one) reaches these tools the same way a
// job's test set reaches its workers. Torch-free; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "data/dataset.h"
#include "data/text.h"

namespace eps {

// The tools' data flags.
struct ModelDataOptions {
  std::string data;                    // --data: the features file (CSV: the whole table)
  std::string labels;                  // --labels: the labels file (IDX, NPY)
  std::string format;                  // --data_format: "" for the extension's
  std::string label_column = "label";  // --label_column (CSV)
  int64_t limit = 0;                   // --limit: the first `limit` samples if > 0
  // predict: the labels may be absent. An NPY data set without --labels then
  // gets class 0 for every sample (labels play no part in a prediction);
  // IDX and CSV data sets carry theirs (a CSV's --label_column).
  bool labels_optional = false;
  // Text data (TSV, JSONL; data/text.h): tokenized with the job's vocabulary
  // (its run dir's vocab.json, --vocab), the texts in --text_column. predict
  // reads no labels from it (every sample of class 0); evaluate needs them,
  // in --label_column, from the vocabulary's label set.
  std::shared_ptr<const Vocabulary> vocab;
  std::string text_column = "text";
  // Criteo data (data/criteo.h, labels inline): the rows its categories hash
  // into, the model's table (the job's --hash_buckets): at least 2, or 0 for
  // the 63-bit keys of a table of unbounded keys; unset: not known.
  std::optional<uint64_t> hash_buckets;
};

// Opens the data set through OpenDataset (role "test"), or OpenTextDataset for
// text. InvalidArgument or NotFound naming the flag (--data, --labels,
// --data_format, --label_column, --text_column, --vocab) and what was wrong.
[[nodiscard]] StatusOr<Dataset> OpenModelData(const ModelDataOptions& options);

}  // namespace eps
