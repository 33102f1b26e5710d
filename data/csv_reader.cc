// CSV tables: a header row of names, numeric cells, one label column.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

#include "data/data_source.h"
#include "data/dataset.h"

namespace eps {
namespace {

// A CSV file larger than this is refused (it is read into memory, as text and as floats).
constexpr int64_t kMaxCsvBytes = int64_t{4} << 30;

std::string Trim(std::string s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t\r");
  if (b == std::string::npos) return "";
  s = s.substr(b, e - b + 1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

// Splits one line at commas (no commas inside quotes: cells are numbers).
void Split(const std::string& line, std::vector<std::string>* cells) {
  cells->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    cells->push_back(Trim(line.substr(start, comma - start)));
    if (comma == std::string::npos) return;
    start = comma + 1;
  }
}

// A printable excerpt of a cell for a message.
std::string Quote(const std::string& cell) {
  std::string out;
  for (char c : cell.substr(0, 40)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return "'" + out + (cell.size() > 40 ? "...'" : "'");
}

StatusOr<Dataset> ReadCsv(const std::string& path, const std::string& label_column,
                          int64_t limit) {
  EPS_ASSIGN_OR_RETURN(FileStamp stamp, StampFile(path));
  if (stamp.size == 0) return InvalidArgument(path + ": empty file (a CSV needs a header row)");
  if (stamp.size > kMaxCsvBytes) {
    return InvalidArgument(path + ": " + std::to_string(stamp.size) +
                           " bytes: CSV is read into memory; use NPY for data this large");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::string line;
  int64_t line_no = 0;
  // The header: the first line that is not empty.
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    ++line_no;
    if (!Trim(line).empty()) break;
  }
  if (Trim(line).empty()) return InvalidArgument(path + ": empty file (a CSV needs a header row)");
  Split(line, &header);
  int64_t label_at = -1;
  for (size_t c = 0; c < header.size(); ++c) {
    if (header[c] == label_column) {
      if (label_at >= 0) {
        return InvalidArgument(path + ": header line " + std::to_string(line_no) +
                               ": two columns are named '" + label_column + "'");
      }
      label_at = static_cast<int64_t>(c);
    }
  }
  if (label_at < 0) {
    std::string names;
    for (size_t c = 0; c < header.size() && c < 20; ++c) names += (c ? ", " : "") + Quote(header[c]);
    return InvalidArgument(path + ": the header (line " + std::to_string(line_no) +
                           ") has no label column '" + label_column + "' (--label_column); its " +
                           "columns: " + names);
  }
  const int64_t n_features = static_cast<int64_t>(header.size()) - 1;
  if (n_features < 1) {
    return InvalidArgument(path + ": the header has no feature column besides '" + label_column +
                           "'");
  }

  struct Vectors {
    std::vector<float> features;
    std::vector<int64_t> classes;
    std::vector<float> targets;
  };
  auto v = std::make_shared<Vectors>();
  std::vector<double> labels;
  std::vector<std::string> cells;
  bool integral = true;
  while ((limit <= 0 || static_cast<int64_t>(labels.size()) < limit) && std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    Split(line, &cells);
    if (cells.size() != header.size()) {
      return InvalidArgument(path + ": line " + std::to_string(line_no) + " has " +
                             std::to_string(cells.size()) + " cells, the header has " +
                             std::to_string(header.size()) + " (a ragged row)");
    }
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string& cell = cells[c];
      char* end = nullptr;
      errno = 0;
      const double x = cell.empty() ? 0 : std::strtod(cell.c_str(), &end);
      if (cell.empty() || end != cell.c_str() + cell.size() || !std::isfinite(x) ||
          (static_cast<int64_t>(c) != label_at && std::fabs(x) > 3.4e38)) {
        return InvalidArgument(path + ": line " + std::to_string(line_no) + ", column " +
                               std::to_string(c + 1) + " (" + Quote(header[c]) + "): " +
                               Quote(cell) + " is not a finite number");
      }
      if (static_cast<int64_t>(c) == label_at) {
        labels.push_back(x);
        if (x != std::floor(x) || std::fabs(x) > 9.0e15) integral = false;
      } else {
        v->features.push_back(static_cast<float>(x));
      }
    }
  }
  if (in.bad()) return DataLoss(path + ": read error after line " + std::to_string(line_no));
  if (labels.empty()) return InvalidArgument(path + ": no data rows after the header");

  Dataset ds;
  ds.size = static_cast<int64_t>(labels.size());
  ds.sample_shape = {n_features};
  ds.feature_dtype = DataType::kFloat32;
  ds.features = v->features.data();
  if (integral) {
    ds.label_dtype = DataType::kInt64;
    v->classes.assign(labels.begin(), labels.end());
    ds.labels = v->classes.data();
    EPS_ASSIGN_OR_RETURN(ds.num_classes, CountClasses(v->classes.data(), ds.size,
                                                      path + " column '" + label_column + "'"));
  } else {
    ds.label_dtype = DataType::kFloat32;
    v->targets.assign(labels.begin(), labels.end());
    ds.labels = v->targets.data();
  }
  ds.source = std::make_shared<StampedSource>(std::vector<FileStamp>{stamp}, std::move(v));
  return ds;
}

}  // namespace

StatusOr<Dataset> ReadCsvDataset(const std::string& path, const std::string& label_column,
                                 int64_t limit) {
  try {
    return ReadCsv(path, label_column, limit);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory reading " + path);
  }
}

}  // namespace eps
