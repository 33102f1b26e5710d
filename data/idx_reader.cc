#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "data/data_source.h"
#include "data/dataset.h"

namespace eps {
namespace {

constexpr uint32_t kImageMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelMagic = 0x00000801;  // unsigned bytes, 1 dimension
// Limits that only a corrupt or hostile header exceeds.
constexpr int64_t kMaxSide = 1 << 14;
constexpr int64_t kMaxSamples = int64_t{1} << 31;
constexpr int64_t kMaxPixels = int64_t{1} << 31;  // kept pixels, 8 GiB as float32

// An open gzip or plain file (zlib reads both) that reports short reads as Status.
class IdxFile {
 public:
  IdxFile() = default;
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;
  ~IdxFile() {
    if (file_ != nullptr) gzclose(file_);
  }

  Status Open(const std::string& path) {
    path_ = path;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return NotFound(path + ": no such file");
      return NotFound(path + ": " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      return NotFound(path +
                      ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
    }
    gzbuffer(file_, 1 << 17);
    return OkStatus();
  }

  // Reads exactly `len` bytes; what = what the bytes are, for the message.
  Status Read(void* dst, size_t len, const char* what) {
    auto* out = static_cast<unsigned char*>(dst);
    size_t done = 0;
    while (done < len) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(len - done, 1u << 30));
      const int got = gzread(file_, out + done, want);
      if (got < 0) {
        int err = 0;
        const char* msg = gzerror(file_, &err);
        return DataLoss(path_ + ": corrupt data while reading " + what + ": " +
                        (msg ? msg : "unknown error"));
      }
      if (got == 0) {
        int err = 0;
        const char* msg = gzerror(file_, &err);
        std::string detail =
            (err != Z_OK && msg != nullptr && *msg != '\0') ? std::string(" (") + msg + ")" : "";
        return DataLoss(path_ + ": truncated: file ends in the middle of the " + what + detail);
      }
      done += static_cast<size_t>(got);
    }
    return OkStatus();
  }

  // Reads a big-endian 32-bit header word.
  StatusOr<uint32_t> ReadU32(const char* what) {
    std::array<unsigned char, 4> b{};
    EPS_RETURN_IF_ERROR(Read(b.data(), b.size(), what));
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

Status CheckMagic(const IdxFile& f, uint32_t magic, uint32_t want, const char* kind) {
  if (magic == want) return OkStatus();
  char buf[160];
  std::snprintf(buf, sizeof(buf), ": bad magic 0x%08x, expected 0x%08x (not an IDX %s file)", magic,
                want, kind);
  return InvalidArgument(f.path() + buf);
}

StatusOr<Dataset> ReadIdx(const std::string& images_path, const std::string& labels_path,
                          int64_t limit) {
  IdxFile images;
  EPS_RETURN_IF_ERROR(images.Open(images_path));
  EPS_ASSIGN_OR_RETURN(uint32_t image_magic, images.ReadU32("header"));
  EPS_RETURN_IF_ERROR(CheckMagic(images, image_magic, kImageMagic, "image"));
  EPS_ASSIGN_OR_RETURN(uint32_t n_images, images.ReadU32("header"));
  EPS_ASSIGN_OR_RETURN(uint32_t rows, images.ReadU32("header"));
  EPS_ASSIGN_OR_RETURN(uint32_t cols, images.ReadU32("header"));
  if (n_images == 0 || n_images > kMaxSamples || rows == 0 || rows > kMaxSide || cols == 0 ||
      cols > kMaxSide) {
    return InvalidArgument(images_path + ": absurd dimensions " + std::to_string(n_images) + " x " +
                           std::to_string(rows) + " x " + std::to_string(cols));
  }

  IdxFile labels;
  EPS_RETURN_IF_ERROR(labels.Open(labels_path));
  EPS_ASSIGN_OR_RETURN(uint32_t label_magic, labels.ReadU32("header"));
  EPS_RETURN_IF_ERROR(CheckMagic(labels, label_magic, kLabelMagic, "label"));
  EPS_ASSIGN_OR_RETURN(uint32_t n_labels, labels.ReadU32("header"));
  if (n_labels != n_images) {
    return InvalidArgument("mismatched counts: " + images_path + " holds " +
                           std::to_string(n_images) + " images but " + labels_path + " holds " +
                           std::to_string(n_labels) + " labels");
  }

  const int64_t kept = limit > 0 ? std::min<int64_t>(limit, n_images) : int64_t{n_images};
  const int64_t pixels = int64_t{rows} * int64_t{cols};
  if (kept > kMaxPixels / pixels) {
    return InvalidArgument(images_path + ": " + std::to_string(kept) + " images of " +
                           std::to_string(rows) + " x " + std::to_string(cols) +
                           " are more pixels than a worker holds in memory");
  }

  struct Vectors {
    std::vector<float> images;
    std::vector<int64_t> labels;
  };
  auto v = std::make_shared<Vectors>();
  std::array<float, 256> table;
  for (int p = 0; p < 256; ++p) table[p] = NormalizePixel(static_cast<uint8_t>(p));

  // Grow with the data actually read, so a header that lies about its size
  // fails with DataLoss instead of a huge allocation.
  constexpr int64_t kBatch = 4096;
  std::vector<unsigned char> raw;
  for (int64_t first = 0; first < kept; first += kBatch) {
    const int64_t count = std::min(kBatch, kept - first);
    raw.resize(static_cast<size_t>(count * pixels));
    EPS_RETURN_IF_ERROR(images.Read(raw.data(), raw.size(), "image data"));
    const size_t at = v->images.size();
    v->images.resize(at + raw.size());
    std::transform(raw.begin(), raw.end(), v->images.begin() + static_cast<std::ptrdiff_t>(at),
                   [&table](unsigned char p) { return table[p]; });
  }
  raw.resize(static_cast<size_t>(kept));
  EPS_RETURN_IF_ERROR(labels.Read(raw.data(), raw.size(), "label data"));
  v->labels.assign(raw.begin(), raw.end());

  Dataset ds;
  ds.size = kept;
  ds.sample_shape = {1, int64_t{rows}, int64_t{cols}};
  ds.feature_dtype = DataType::kFloat32;
  ds.features = v->images.data();
  ds.label_dtype = DataType::kInt64;
  ds.labels = v->labels.data();
  EPS_ASSIGN_OR_RETURN(ds.num_classes, CountClasses(v->labels.data(), kept, labels_path));
  EPS_ASSIGN_OR_RETURN(FileStamp image_stamp, StampFile(images_path));
  EPS_ASSIGN_OR_RETURN(FileStamp label_stamp, StampFile(labels_path));
  ds.source = std::make_shared<StampedSource>(std::vector<FileStamp>{image_stamp, label_stamp},
                                              std::move(v));
  return ds;
}

}  // namespace

StatusOr<Dataset> ReadIdxDataset(const std::string& images_path, const std::string& labels_path,
                                 int64_t limit) {
  try {
    return ReadIdx(images_path, labels_path, limit);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory reading " + images_path);
  }
}

}  // namespace eps
