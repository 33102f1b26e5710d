// TSV and JSONL text tables, and a text file as a Dataset of token ids (data/text.h).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/data_source.h"
#include "data/text.h"

namespace eps {
namespace {

constexpr int64_t kMaxTextBytes = int64_t{4} << 30;  // read into memory, as the CSV reader does

std::string Unescape(const std::string& cell) {
  std::string out;
  out.reserve(cell.size());
  for (size_t i = 0; i < cell.size(); ++i) {
    if (cell[i] != '\\' || i + 1 == cell.size()) {
      out.push_back(cell[i]);
      continue;
    }
    const char c = cell[++i];
    if (c == 't') out.push_back('\t');
    else if (c == 'n') out.push_back('\n');
    else if (c == 'r') out.push_back('\r');
    else if (c == '\\') out.push_back('\\');
    else out += {'\\', c};  // not an escape: kept as it is
  }
  return out;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    cells.push_back(line.substr(start, tab - start));
    if (tab == std::string::npos) return cells;
    start = tab + 1;
  }
}

// Calls `row(line, text)` for each non-empty line, CR stripped.
template <typename Row>
Status ForEachLine(const std::string& path, Row row) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (size <= 0) return InvalidArgument(path + ": empty file");
  if (size > kMaxTextBytes) return InvalidArgument(path + ": over 4 GiB of text");
  in.seekg(0);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    bool stop = false;
    EPS_RETURN_IF_ERROR(row(n, line, &stop));
    if (stop) break;
  }
  return OkStatus();
}

Status CheckLabel(const std::string& path, int64_t line, const std::string& label) {
  if (label.empty()) return InvalidArgument(path + ":" + std::to_string(line) + ": empty label");
  if (!IsValidUtf8(label))
    return InvalidArgument(path + ":" + std::to_string(line) + ": the label is not UTF-8");
  return OkStatus();
}

}  // namespace

StatusOr<TextTable> ReadTextTable(const std::string& path, const std::string& format,
                                  const std::string& text_column, const std::string& label_column,
                                  int64_t limit) {
  if (!IsTextFormat(format)) return InvalidArgument("--data_format '" + format + "': not tsv/jsonl");
  TextTable t;
  auto full = [&]() { return limit > 0 && static_cast<int64_t>(t.texts.size()) >= limit; };
  Status st;
  if (format == "tsv") {
    std::vector<std::string> header;
    int64_t text_at = -1, label_at = -1;
    st = ForEachLine(path, [&](int64_t n, const std::string& line, bool* stop) -> Status {
      std::vector<std::string> cells = SplitTabs(line);
      const std::string where = path + ":" + std::to_string(n);
      if (header.empty()) {
        header = std::move(cells);
        for (size_t i = 0; i < header.size(); ++i) {
          if (header[i] == text_column) text_at = static_cast<int64_t>(i);
          if (header[i] == label_column) label_at = static_cast<int64_t>(i);
        }
        if (text_at < 0 || (label_at < 0 && !label_column.empty())) {
          return InvalidArgument(where + ": the header has no column '" +
                                 (text_at < 0 ? text_column : label_column) + "' (--" +
                                 (text_at < 0 ? "text_column" : "label_column") + ")");
        }
        return OkStatus();
      }
      if (cells.size() != header.size()) {
        return InvalidArgument(where + ": " + std::to_string(cells.size()) +
                               " tab-separated cells, the header has " +
                               std::to_string(header.size()));
      }
      std::string label;
      if (label_at >= 0) {
        label = Unescape(cells[label_at]);
        EPS_RETURN_IF_ERROR(CheckLabel(path, n, label));
      }
      t.texts.push_back(Unescape(cells[text_at]));
      t.labels.push_back(std::move(label));
      t.lines.push_back(n);
      *stop = full();
      return OkStatus();
    });
  } else {
    st = ForEachLine(path, [&](int64_t n, const std::string& line, bool* stop) -> Status {
      const std::string where = path + ":" + std::to_string(n);
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object())
        return InvalidArgument(where + ": not a JSON object (one UTF-8 JSON object per line)");
      auto text = j.find(text_column);
      if (text == j.end() || !text->is_string()) {
        return InvalidArgument(where + ": no string member '" + text_column + "' (--text_column)");
      }
      auto label = j.find(label_column);
      std::string l;
      if (label_column.empty()) {
        // No labels: the texts only.
      } else if (label != j.end() && label->is_string()) {
        l = label->get<std::string>();
      } else if (label != j.end() && label->is_number_integer()) {
        l = label->dump();
      } else {
        return InvalidArgument(where + ": the member '" + label_column +
                               "' (--label_column) must be a string or an integer");
      }
      if (!label_column.empty()) EPS_RETURN_IF_ERROR(CheckLabel(path, n, l));
      t.texts.push_back(text->get<std::string>());
      t.labels.push_back(std::move(l));
      t.lines.push_back(n);
      *stop = full();
      return OkStatus();
    });
  }
  EPS_RETURN_IF_ERROR(st);
  if (t.texts.empty()) return InvalidArgument(path + ": no rows");
  return t;
}

StatusOr<TextDataset> OpenTextDataset(const std::string& path, const std::string& format,
                                      const std::string& text_column,
                                      const std::string& label_column, const Vocabulary& vocab,
                                      int64_t limit) {
  EPS_ASSIGN_OR_RETURN(FileStamp stamp, StampFile(path));
  EPS_ASSIGN_OR_RETURN(TextTable table,
                       ReadTextTable(path, format, text_column, label_column, limit));
  struct Vectors {
    std::vector<int64_t> ids, classes;
  };
  auto v = std::make_shared<Vectors>();
  const int64_t n = static_cast<int64_t>(table.texts.size());
  const int64_t len = vocab.seq_len();
  v->ids.resize(static_cast<size_t>(n * len));
  v->classes.resize(static_cast<size_t>(n));
  TextDataset out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = label_column.empty() ? 0 : vocab.ClassOf(table.labels[i]);
    if (c < 0) {
      std::string set;
      for (const std::string& l : vocab.labels()) set += (set.empty() ? "" : ", ") + l;
      return InvalidArgument(path + ":" + std::to_string(table.lines[i]) + ": label '" +
                             table.labels[i] + "' is not in the training split's label set {" +
                             set + "}");
    }
    v->classes[i] = c;
    out.truncated += vocab.Encode(table.texts[i], v->ids.data() + i * len) ? 1 : 0;
  }
  Dataset& d = out.data;
  d.size = n;
  d.sample_shape = {len};
  d.feature_dtype = DataType::kInt64;
  d.features = v->ids.data();
  d.label_dtype = DataType::kInt64;
  d.labels = v->classes.data();
  d.num_classes = static_cast<int64_t>(vocab.labels().size());
  d.source = std::make_shared<StampedSource>(std::vector<FileStamp>{stamp}, v);
  return out;
}

}  // namespace eps
