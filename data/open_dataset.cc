// Picking a format, opening a data set by its files, and a job's data.
#include <optional>

#include "data/criteo.h"
#include "data/fingerprint.h"
#include "data/job_data.h"
#include "data/text.h"

namespace eps {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The fingerprint lines of a data set's files.
StatusOr<std::string> FingerprintFiles(const DataFiles& files) {
  EPS_ASSIGN_OR_RETURN(std::string fp, FingerprintFile(files.role + "_data", files.features));
  if (!files.labels.empty()) {
    EPS_ASSIGN_OR_RETURN(std::string labels, FingerprintFile(files.role + "_labels", files.labels));
    fp += "\n" + labels;
  }
  return fp;
}

}  // namespace

StatusOr<std::string> DataFormatOf(const DataFiles& files) {
  const std::string& f = files.format;
  if (f == "idx" || f == "npy" || f == "csv" || f == "criteo" || IsTextFormat(f)) return f;
  if (!f.empty()) {
    return InvalidArgument("--data_format '" + f +
                           "': expected idx, npy, csv, tsv, jsonl or criteo (or empty: " +
                           "from the files' extensions)");
  }
  const std::string& p = files.features;
  if (EndsWith(p, ".npy")) return std::string("npy");
  if (EndsWith(p, ".csv")) return std::string("csv");
  if (EndsWith(p, ".tsv")) return std::string("tsv");
  if (EndsWith(p, ".jsonl")) return std::string("jsonl");
  if (EndsWith(p, ".gz") || EndsWith(p, "-ubyte") || EndsWith(p, ".idx")) return std::string("idx");
  return InvalidArgument("--" + files.role + "_data " + p +
                         ": the extension does not say the format (.npy, .csv, .tsv, .jsonl, .gz or -ubyte for "
                         "IDX): set --data_format");
}

StatusOr<Dataset> OpenDataset(const DataFiles& files) {
  EPS_ASSIGN_OR_RETURN(std::string format, DataFormatOf(files));
  if (files.features.empty()) return InvalidArgument("--" + files.role + "_data is empty");
  StatusOr<Dataset> ds = InvalidArgument("no format");
  if (IsTextFormat(format)) {
    if (!files.labels.empty()) {
      return InvalidArgument("--" + files.role + "_labels " + files.labels + ": a " + format +
                             " data set holds its labels in its --label_column ('" +
                             files.label_column + "'): leave --" + files.role + "_labels empty");
    }
    if (files.vocab == nullptr) {
      return FailedPrecondition(files.role + " data (" + format +
                                "): no vocabulary to tokenize it with (the coordinator builds it "
                                "from --train_data at start)");
    }
    StatusOr<TextDataset> text = OpenTextDataset(files.features, format, files.text_column,
                                                 files.label_column, *files.vocab, files.limit);
    if (text.ok()) {
      text->data.truncated = text->truncated;
      ds = std::move(text->data);
    } else {
      ds = text.status();
    }
  } else if (format == "criteo") {
    if (!files.labels.empty()) {
      return InvalidArgument("--" + files.role + "_labels " + files.labels +
                             ": a Criteo file holds its labels in its first column: leave --" +
                             files.role + "_labels empty");
    }
    ds = ReadCriteoDataset(files.features, files.hash_buckets, files.limit);
  } else if (format == "csv") {
    if (!files.labels.empty()) {
      return InvalidArgument("--" + files.role + "_labels " + files.labels +
                             ": a CSV data set holds its labels in its --label_column ('" +
                             files.label_column + "'): leave --" + files.role + "_labels empty");
    }
    ds = ReadCsvDataset(files.features, files.label_column, files.limit);
  } else if (files.labels.empty()) {
    return InvalidArgument("--" + files.role + "_labels is empty: " + format +
                           " data needs a labels file");
  } else if (format == "npy") {
    ds = ReadNpyDataset(files.features, files.labels, files.limit);
  } else {
    ds = ReadIdxDataset(files.features, files.labels, files.limit);
  }
  if (!ds.ok()) return ds.status().WithContext(files.role + " data (" + format + ")");
  EPS_ASSIGN_OR_RETURN(ds->fingerprint, FingerprintFiles(files));
  return ds;
}

JobDataFiles DataFilesOf(const JobSpec& spec) {
  JobDataFiles out;
  const std::string dir = spec.data_dir + "/";
  out.train.role = "train";
  out.train.limit = spec.train_limit;
  out.train.label_column = spec.label_column;
  out.train.text_column = spec.text_column;
  out.train.hash_buckets = spec.hash_buckets;
  if (spec.train_data.empty()) {
    out.train.format = "idx";
    out.train.features = dir + "train-images-idx3-ubyte.gz";
    out.train.labels = dir + "train-labels-idx1-ubyte.gz";
  } else {
    out.train.format = spec.data_format;
    out.train.features = spec.train_data;
    out.train.labels = spec.train_labels;
  }
  if (spec.test_limit < 0) return out;
  DataFiles test = out.train;
  test.role = "test";
  test.limit = spec.test_limit;
  if (spec.train_data.empty()) {
    test.features = dir + "t10k-images-idx3-ubyte.gz";
    test.labels = dir + "t10k-labels-idx1-ubyte.gz";
  } else if (!spec.test_data.empty()) {
    test.features = spec.test_data;
    test.labels = spec.test_labels;
  } else {
    return out;  // no test set named: no evaluation
  }
  out.test = test;
  return out;
}

StatusOr<JobData> OpenJobData(const JobSpec& spec, std::shared_ptr<const Vocabulary> vocab) {
  JobDataFiles files = DataFilesOf(spec);
  files.train.vocab = vocab;
  if (files.test) files.test->vocab = std::move(vocab);
  JobData data;
  EPS_ASSIGN_OR_RETURN(data.train, OpenDataset(files.train));
  data.fingerprint = data.train.fingerprint;
  if (files.test) {
    EPS_ASSIGN_OR_RETURN(data.test, OpenDataset(*files.test));
    data.fingerprint += "\n" + data.test.fingerprint;
  }
  return data;
}

StatusOr<std::string> FingerprintJobData(const JobSpec& spec) {
  const JobDataFiles files = DataFilesOf(spec);
  EPS_ASSIGN_OR_RETURN(std::string fp, FingerprintFiles(files.train));
  if (files.test) {
    EPS_ASSIGN_OR_RETURN(std::string test, FingerprintFiles(*files.test));
    fp += "\n" + test;
  }
  return fp;
}

ZooSizes ZooSizesOf(const JobSpec& spec) {
  ZooSizes z;
  z.dim = spec.model_dim;
  z.layers = spec.model_layers;
  z.heads = spec.model_heads;
  z.depth = spec.model_depth;
  z.seq_len = spec.seq_len;
  // The table's rows. The models that always hash (dlrm, text_hashed) have --hash_buckets, 0
  // for unbounded keys (the Criteo reader's, the hashed vocabulary's 63-bit keys).
  z.vocab_size =
      spec.hash_buckets > 0 || HashesItsIds(spec.model) ? spec.hash_buckets : spec.vocab_size;
  return z;
}

StatusOr<std::string> BuildJobVocabulary(const JobSpec& spec, const std::string& words_from) {
  const JobDataFiles files = DataFilesOf(spec);
  EPS_ASSIGN_OR_RETURN(std::string format, DataFormatOf(files.train));
  if (!IsTextFormat(format)) return InvalidArgument("--train_data is not text (tsv, jsonl)");
  StatusOr<TextTable> table = ReadTextTable(files.train.features, format, files.train.text_column,
                                            files.train.label_column, files.train.limit);
  if (!table.ok()) return table.status().WithContext("train data (" + format + ")");
  if (spec.hash_buckets > 0 || HashesItsIds(spec.model)) {
    if (!words_from.empty()) {
      return InvalidArgument(
          "--vocab_from takes a vocabulary's words; hashed there are "
          "none (the hashing is fixed: a fine-tuned model finds its rows)");
    }
    EPS_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::BuildHashed(
                                               *table, spec.hash_buckets,
                                               spec.model == "text_hashed" ? 2 : 1, spec.seq_len));
    return vocab.Serialize();
  }
  std::optional<Vocabulary> words;
  if (!words_from.empty()) {
    StatusOr<Vocabulary> parsed = Vocabulary::Parse(words_from);
    if (!parsed.ok()) return parsed.status().WithContext("--vocab_from");
    words = std::move(parsed).value();
  }
  EPS_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::Build(*table, spec.vocab_size, spec.seq_len,
                                                           words ? &*words : nullptr));
  return vocab.Serialize();
}

}  // namespace eps
