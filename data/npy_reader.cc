// NPY (numpy.save) files, mapped read-only. The format:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#include <cctype>
#include <cstring>
#include <limits>
#include <new>

#include "data/data_source.h"
#include "data/dataset.h"
#include "data/npy.h"

namespace eps {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr int64_t kMaxDims = 32;  // numpy's own limit

// What the header says.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
};

// A parser of the header's Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
class DictParser {
 public:
  DictParser(const std::string& path, const char* p, size_t n) : path_(path), p_(p), end_(p + n) {}

  Status Parse(NpyHeader* h) {
    bool have_descr = false, have_order = false, have_shape = false;
    Skip();
    if (!Eat('{')) return Bad("the header is not a dict");
    while (true) {
      Skip();
      if (Eat('}')) break;
      std::string key;
      EPS_RETURN_IF_ERROR(String(&key));
      Skip();
      if (!Eat(':')) return Bad("no ':' after '" + key + "'");
      Skip();
      if (key == "descr") {
        EPS_RETURN_IF_ERROR(String(&h->descr));
        have_descr = true;
      } else if (key == "fortran_order") {
        EPS_RETURN_IF_ERROR(Bool(&h->fortran_order));
        have_order = true;
      } else if (key == "shape") {
        EPS_RETURN_IF_ERROR(Shape(&h->shape));
        have_shape = true;
      } else {
        return Bad("unknown header field '" + key + "'");
      }
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat('}')) break;
      return Bad("expected ',' or '}' after '" + key + "'");
    }
    if (!have_descr) return Bad("no 'descr' field");
    if (!have_order) return Bad("no 'fortran_order' field");
    if (!have_shape) return Bad("no 'shape' field");
    return OkStatus();
  }

 private:
  Status Bad(const std::string& what) const {
    return InvalidArgument(path_ + ": malformed NPY header: " + what);
  }
  void Skip() {
    while (p_ < end_ && std::isspace(static_cast<unsigned char>(*p_))) ++p_;
  }
  bool Eat(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  Status String(std::string* out) {
    if (p_ >= end_ || (*p_ != '\'' && *p_ != '"')) return Bad("expected a quoted string");
    const char quote = *p_++;
    const char* start = p_;
    while (p_ < end_ && *p_ != quote) {
      if (p_ - start > 64) return Bad("a string longer than 64 characters");
      ++p_;
    }
    if (p_ >= end_) return Bad("an unterminated string");
    out->assign(start, p_);
    ++p_;
    return OkStatus();
  }
  Status Bool(bool* out) {
    if (static_cast<size_t>(end_ - p_) >= 4 && std::memcmp(p_, "True", 4) == 0) {
      p_ += 4;
      *out = true;
      return OkStatus();
    }
    if (static_cast<size_t>(end_ - p_) >= 5 && std::memcmp(p_, "False", 5) == 0) {
      p_ += 5;
      *out = false;
      return OkStatus();
    }
    return Bad("'fortran_order' is neither True nor False");
  }
  Status Shape(std::vector<int64_t>* shape) {
    if (!Eat('(')) return Bad("'shape' is not a tuple");
    while (true) {
      Skip();
      if (Eat(')')) return OkStatus();
      if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_)))
        return Bad("a dimension of 'shape' is not a non-negative integer");
      int64_t v = 0;
      while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return Bad("a dimension too large");
        v = v * 10 + (*p_++ - '0');
      }
      if (static_cast<int64_t>(shape->size()) >= kMaxDims) return Bad("more than 32 dimensions");
      shape->push_back(v);
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat(')')) return OkStatus();
      return Bad("expected ',' or ')' in 'shape'");
    }
  }

  const std::string& path_;
  const char* p_;
  const char* const end_;
};

uint32_t LittleEndian(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

StatusOr<NpyHeader> ParseHeader(const std::string& path, const uint8_t* data, size_t size) {
  if (size < kMagicLen + 4 || std::memcmp(data, kMagic, kMagicLen) != 0) {
    return InvalidArgument(path + ": not an NPY file (no \\x93NUMPY magic" +
                           (size < kMagicLen + 4 ? std::string(", file too short)") : ")"));
  }
  const int major = data[6];
  if (major < 1 || major > 3) {
    return InvalidArgument(path + ": NPY format version " + std::to_string(major) + "." +
                           std::to_string(data[7]) + " is not supported (1.0, 2.0, 3.0 are)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + static_cast<size_t>(len_bytes);
  if (size < prefix) return DataLoss(path + ": truncated: the file ends inside the NPY preamble");
  const size_t header_len = LittleEndian(data + 8, len_bytes);
  if (header_len > size - prefix) {
    return DataLoss(path + ": truncated: the NPY header says " + std::to_string(header_len) +
                    " bytes, the file has " + std::to_string(size - prefix) + " after the preamble");
  }
  NpyHeader h;
  DictParser parser(path, reinterpret_cast<const char*>(data + prefix), header_len);
  EPS_RETURN_IF_ERROR(parser.Parse(&h));
  h.data_offset = prefix + header_len;
  return h;
}

// The dtype a descr names, for `what` ("features" / "labels").
StatusOr<DataType> DTypeOf(const std::string& path, const std::string& descr, bool labels) {
  if (descr.size() >= 2 && descr[0] == '>' && descr != ">u1" && descr != ">i1") {
    return InvalidArgument(path + ": dtype '" + descr +
                           "' is big-endian: save it little-endian (arr.astype(arr.dtype."
                           "newbyteorder('<')))");
  }
  if (descr == "<f4") return DataType::kFloat32;
  if (descr == "|u1" || descr == "<u1" || descr == ">u1") return DataType::kUInt8;
  if (descr == "<i8") return DataType::kInt64;
  return InvalidArgument(path + ": dtype '" + descr + "' is not supported for " +
                         (labels ? "labels ('<i8', '|u1' or '<f4')"
                                 : "features ('<f4', '|u1' or '<i8')") +
                         ": convert it, e.g. arr.astype(numpy.float32)");
}

// OK if the data after `h` fill `file_size` exactly as its shape of `elem`-byte elements needs.
Status CheckDataSize(const std::string& path, const NpyHeader& h, size_t elem, size_t file_size) {
  // Bytes the shape needs, refusing overflow: no real file exceeds 2^62 bytes.
  constexpr int64_t kMaxBytes = int64_t{1} << 62;
  int64_t bytes = static_cast<int64_t>(elem);
  for (const int64_t dim : h.shape) {
    if (dim < 0 || (dim > 0 && bytes > kMaxBytes / dim))
      return InvalidArgument(path + ": the shape is absurdly large");
    bytes *= dim;
  }
  const int64_t have = static_cast<int64_t>(file_size - h.data_offset);
  if (have < bytes) {
    return DataLoss(path + ": truncated: its shape needs " + std::to_string(bytes) +
                    " bytes of data, the file holds " + std::to_string(have));
  }
  if (have > bytes) {
    return InvalidArgument(path + ": its shape needs " + std::to_string(bytes) +
                           " bytes of data, but the file holds " + std::to_string(have) + " (" +
                           std::to_string(have - bytes) + " more): shape and size disagree");
  }
  return OkStatus();
}

// One opened array: its mapping, header and the product of its sample dims.
struct NpyArray {
  std::shared_ptr<MappedFile> file;
  NpyHeader header;
  DataType dtype = DataType::kFloat32;
  int64_t count = 0;        // shape[0]
  int64_t sample_elems = 1;  // product of shape[1:]
};

StatusOr<NpyArray> OpenArray(const std::string& path, bool labels) {
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  NpyArray a;
  EPS_ASSIGN_OR_RETURN(a.header, ParseHeader(path, file->data(), file->size()));
  EPS_ASSIGN_OR_RETURN(a.dtype, DTypeOf(path, a.header.descr, labels));
  if (a.header.fortran_order) {
    return InvalidArgument(path +
                           ": fortran_order is True: save a C-order array "
                           "(numpy.ascontiguousarray(arr))");
  }
  if (a.header.shape.empty()) return InvalidArgument(path + ": a scalar, not an array of samples");
  a.count = a.header.shape[0];
  if (a.count == 0) return InvalidArgument(path + ": holds no samples (shape[0] is 0)");
  for (size_t d = 0; d < a.header.shape.size(); ++d) {
    if (a.header.shape[d] == 0)
      return InvalidArgument(path + ": dimension " + std::to_string(d) + " is 0");
  }
  EPS_RETURN_IF_ERROR(CheckDataSize(path, a.header, DataTypeSize(a.dtype), file->size()));
  for (size_t d = 1; d < a.header.shape.size(); ++d) a.sample_elems *= a.header.shape[d];
  a.file = std::move(file);
  return a;
}

StatusOr<Dataset> ReadNpy(const std::string& features_path, const std::string& labels_path,
                          int64_t limit) {
  EPS_ASSIGN_OR_RETURN(NpyArray f, OpenArray(features_path, /*labels=*/false));
  EPS_ASSIGN_OR_RETURN(NpyArray l, OpenArray(labels_path, /*labels=*/true));
  if (f.count != l.count) {
    return InvalidArgument("mismatched counts: " + features_path + " holds " +
                           std::to_string(f.count) + " samples but " + labels_path + " holds " +
                           std::to_string(l.count) + " labels");
  }
  struct Hold {
    std::shared_ptr<MappedFile> features, labels;
    std::vector<uint8_t> aligned_features;  // a copy, when the data is not aligned in the file
    std::vector<int64_t> wide_labels;        // uint8 labels as int64
    std::vector<float> float_labels;         // unaligned float32 labels, copied
  };
  auto hold = std::make_shared<Hold>();
  hold->features = f.file;
  hold->labels = l.file;

  Dataset ds;
  ds.size = limit > 0 ? std::min(limit, f.count) : f.count;
  ds.sample_shape.assign(f.header.shape.begin() + 1, f.header.shape.end());
  ds.feature_dtype = f.dtype;
  const uint8_t* fdata = f.file->data() + f.header.data_offset;
  if (f.header.data_offset % DataTypeSize(f.dtype) != 0) {
    hold->aligned_features.assign(fdata, fdata + ds.size * f.sample_elems * DataTypeSize(f.dtype));
    fdata = hold->aligned_features.data();
  }
  ds.features = fdata;

  ds.label_shape.assign(l.header.shape.begin() + 1, l.header.shape.end());
  const uint8_t* ldata = l.file->data() + l.header.data_offset;
  const int64_t nl = ds.size * l.sample_elems;
  if (l.dtype == DataType::kFloat32) {
    ds.label_dtype = DataType::kFloat32;
    if (l.header.data_offset % 4 != 0) {
      hold->float_labels.resize(static_cast<size_t>(nl));
      std::memcpy(hold->float_labels.data(), ldata, static_cast<size_t>(nl) * 4);
      ldata = reinterpret_cast<const uint8_t*>(hold->float_labels.data());
    }
    ds.labels = ldata;
  } else {
    ds.label_dtype = DataType::kInt64;
    if (l.dtype == DataType::kUInt8 || l.header.data_offset % 8 != 0) {
      hold->wide_labels.resize(static_cast<size_t>(nl));
      for (int64_t i = 0; i < nl; ++i) {
        if (l.dtype == DataType::kUInt8) {
          hold->wide_labels[i] = ldata[i];
        } else {
          std::memcpy(&hold->wide_labels[i], ldata + 8 * i, 8);
        }
      }
      ldata = reinterpret_cast<const uint8_t*>(hold->wide_labels.data());
    }
    ds.labels = ldata;
    EPS_ASSIGN_OR_RETURN(ds.num_classes,
                         CountClasses(static_cast<const int64_t*>(ds.labels), nl, labels_path));
  }
  ds.source = std::make_shared<StampedSource>(
      std::vector<FileStamp>{f.file->stamp(), l.file->stamp()}, std::move(hold));
  return ds;
}

}  // namespace

StatusOr<Dataset> ReadNpyDataset(const std::string& features_path, const std::string& labels_path,
                                 int64_t limit) {
  try {
    return ReadNpy(features_path, labels_path, limit);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory reading " + features_path);
  }
}

StatusOr<NpyArrayView> MapNpyArray(const std::string& path, const std::string& descr,
                                   size_t item_size) {
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  EPS_ASSIGN_OR_RETURN(NpyHeader header, ParseHeader(path, file->data(), file->size()));
  if (header.descr != descr) {
    return InvalidArgument(path + ": dtype '" + header.descr + "', where '" + descr +
                           "' is expected");
  }
  if (header.fortran_order) return InvalidArgument(path + ": fortran_order is True");
  EPS_RETURN_IF_ERROR(CheckDataSize(path, header, item_size, file->size()));
  NpyArrayView out;
  out.shape = std::move(header.shape);
  out.data = file->data() + header.data_offset;
  out.hold = std::shared_ptr<const MappedFile>(std::move(file));
  return out;
}

}  // namespace eps
