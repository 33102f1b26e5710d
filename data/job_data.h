// The data a job's spec names (JobSpec's train_data ... label_column, data_dir,
// train_limit, test_limit), opened the same way by every worker and checked by
// the coordinator. Pure functions over the spec, thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "data/dataset.h"
#include "data/model_input.h"
#include "schema/messages.h"

namespace eps {

// The files of the training set and, when the job evaluates (test_limit >= 0
// and a test set named, or the default Fashion-MNIST), of the test set. An
// empty train_data names the Fashion-MNIST IDX files in data_dir.
struct JobDataFiles {
  DataFiles train;
  std::optional<DataFiles> test;
};
JobDataFiles DataFilesOf(const JobSpec& spec);

// The sized models' sizes from the spec's fields (num_classes: the default;
// a text model's is its vocabulary's label count).
ZooSizes ZooSizesOf(const JobSpec& spec);

// The job's data, read, with the fingerprint of all its files (train then test).
struct JobData {
  Dataset train, test;  // test.size == 0 when the job does not evaluate
  std::string fingerprint;
};
// Text data (TSV, JSONL) is tokenized with `vocab` (data/text.h), which it needs.
[[nodiscard]] StatusOr<JobData> OpenJobData(const JobSpec& spec,
                                            std::shared_ptr<const Vocabulary> vocab = nullptr);

// Text data: the vocabulary of the job's training text (the coordinator's,
// data/text.h), serialized; InvalidArgument for data that is not text. With
// `words_from` (a serialized vocabulary: --vocab_from), its words and the
// training text's labels (Vocabulary::Build).
[[nodiscard]] StatusOr<std::string> BuildJobVocabulary(const JobSpec& spec,
                                                       const std::string& words_from = "");

// The fingerprint OpenJobData gives, from the files alone (no parsing).
[[nodiscard]] StatusOr<std::string> FingerprintJobData(const JobSpec& spec);

}  // namespace eps
