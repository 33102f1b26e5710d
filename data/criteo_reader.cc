// Criteo-format click logs (data/criteo.h).
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include <string_view>
#include <vector>

#include "common/layout.h"
#include "data/criteo.h"
#include "data/data_source.h"

namespace eps {
namespace {

constexpr int kFields = 1 + kCriteoFeatures;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  const std::string text(s);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size() ||
      std::isspace(static_cast<unsigned char>(text[0])) || text[0] == '+') {
    return false;
  }
  *out = v;
  return true;
}

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// The 39 features of `fields` (a sample's fields less its label) into out[0, 39); else the
// index of the field that is wrong, and `what` is.
int ParseFeatures(const std::string_view* fields, uint64_t buckets, int64_t* out,
                  std::string* what) {
  for (int i = 0; i < kCriteoIntegers; ++i) {
    const std::string_view f = fields[i];
    out[i] = 0;
    if (!f.empty() && !ParseInt64(f, &out[i])) {
      *what = "'" + std::string(f.substr(0, 32)) + "' is not an integer";
      return i;
    }
  }
  for (int c = 0; c < kCriteoCategories; ++c) {
    const std::string_view f = fields[kCriteoIntegers + c];
    uint64_t x = 0;
    if (!f.empty() && !ParseHex(f, &x)) {
      *what = "'" + std::string(f.substr(0, 32)) + "' is not a category (1 to 16 hex digits)";
      return kCriteoIntegers + c;
    }
    out[kCriteoIntegers + c] = f.empty() ? 0 : CriteoCategoryRow(c, x, buckets);
  }
  return -1;
}

// The tab-separated fields of `line`.
void SplitTabs(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  for (;;) {
    const size_t tab = line.find('\t');
    fields->push_back(line.substr(0, tab));
    if (tab == std::string_view::npos) return;
    line.remove_prefix(tab + 1);
  }
}

struct CriteoVectors {
  std::vector<int64_t> features;
  std::vector<int64_t> labels;
};

StatusOr<Dataset> ReadCriteo(const std::string& path, uint64_t buckets, int64_t limit) {
  if (buckets == 1) {
    return InvalidArgument(
        "--hash_buckets 1: Criteo categories need at least 2 rows (row 0 is a "
        "missing value's), or 0 for unbounded keys");
  }
  EPS_ASSIGN_OR_RETURN(FileStamp stamp, StampFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  auto v = std::make_shared<CriteoVectors>();
  std::string line;
  int64_t line_no = 0;
  std::vector<std::string_view> fields;
  auto bad = [&](int field, const std::string& what) {
    return InvalidArgument(path + ": line " + std::to_string(line_no) + ", column " +
                           std::to_string(field + 1) + ": " + what);
  };
  while ((limit <= 0 || static_cast<int64_t>(v->labels.size()) < limit) && std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    SplitTabs(line, &fields);
    if (fields.size() != kFields) {
      return InvalidArgument(path + ": line " + std::to_string(line_no) + " has " +
                             std::to_string(fields.size()) +
                             " tab-separated fields, a Criteo line has " + std::to_string(kFields) +
                             " (label, 13 integers, 26 categories)");
    }
    if (fields[0] != "0" && fields[0] != "1") {
      return bad(0, "the label '" + std::string(fields[0].substr(0, 32)) + "' is not 0 or 1");
    }
    v->labels.push_back(fields[0] == "1" ? 1 : 0);
    const size_t at = v->features.size();
    v->features.resize(at + kCriteoFeatures);
    std::string what;
    const int wrong = ParseFeatures(fields.data() + 1, buckets, v->features.data() + at, &what);
    if (wrong >= 0) return bad(1 + wrong, what);
  }
  if (in.bad()) return DataLoss(path + ": read error after line " + std::to_string(line_no));
  if (v->labels.empty()) return InvalidArgument(path + ": no samples");
  Dataset ds;
  ds.size = static_cast<int64_t>(v->labels.size());
  ds.sample_shape = {kCriteoFeatures};
  ds.feature_dtype = DataType::kInt64;
  ds.features = v->features.data();
  ds.label_dtype = DataType::kInt64;
  ds.labels = v->labels.data();
  ds.num_classes = 2;
  ds.source = std::make_shared<StampedSource>(std::vector<FileStamp>{stamp}, std::move(v));
  return ds;
}

}  // namespace

int64_t CriteoCategoryRow(int column, uint64_t value, uint64_t buckets) {
  const uint64_t mixed =
      SplitMix64(value ^ (static_cast<uint64_t>(column) + 1) * 0x9E3779B97F4A7C15ull);
  // Unbounded (0): the row ids of a table of unbounded keys.
  const uint64_t rows = buckets == 0 ? uint64_t{kUnboundedRows} : buckets;
  return 1 + static_cast<int64_t>(mixed % (rows - 1));
}

Status ParseCriteoFeatures(std::string_view line, uint64_t buckets, int64_t* out) {
  if (buckets == 1) return InvalidArgument("Criteo categories need at least 2 rows, or 0");
  std::vector<std::string_view> fields;
  SplitTabs(line, &fields);
  if (fields.size() != kCriteoFeatures) {
    return InvalidArgument("has " + std::to_string(fields.size()) +
                           " tab-separated fields, a Criteo sample without its label has " +
                           std::to_string(kCriteoFeatures) + " (13 integers, 26 categories)");
  }
  std::string what;
  const int wrong = ParseFeatures(fields.data(), buckets, out, &what);
  if (wrong >= 0) return InvalidArgument("field " + std::to_string(wrong + 1) + ": " + what);
  return OkStatus();
}

StatusOr<Dataset> ReadCriteoDataset(const std::string& path, uint64_t buckets, int64_t limit) {
  try {
    return ReadCriteo(path, buckets, limit);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory reading " + path);
  }
}

}  // namespace eps
