#include "data/data_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <numeric>

namespace eps {
namespace {

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

std::string Changed(const FileStamp& s, const std::string& what) {
  return s.path + " changed while the job ran (" + what +
         "): a data file must stay as it was when the worker opened it";
}

}  // namespace

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return 4;
    case DataType::kUInt8:
      return 1;
    case DataType::kInt64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt64:
      return "int64";
  }
  return "?";
}

int64_t Dataset::SampleElems() const {
  return std::accumulate(sample_shape.begin(), sample_shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

int64_t Dataset::LabelElems() const {
  return std::accumulate(label_shape.begin(), label_shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

Status Dataset::CheckUnchanged() const {
  return source != nullptr ? source->CheckUnchanged() : OkStatus();
}

StatusOr<Dataset> MakeDataset(std::vector<int64_t> sample_shape, std::vector<float> features,
                              std::vector<int64_t> labels) {
  struct Vectors {
    std::vector<float> f;
    std::vector<int64_t> l;
  };
  auto v = std::make_shared<Vectors>(Vectors{std::move(features), std::move(labels)});
  Dataset d;
  d.size = static_cast<int64_t>(v->l.size());
  d.sample_shape = std::move(sample_shape);
  for (int64_t dim : d.sample_shape) {
    if (dim <= 0) return InvalidArgument("MakeDataset: a sample dimension is not positive");
  }
  if (static_cast<int64_t>(v->f.size()) != d.size * d.SampleElems()) {
    return InvalidArgument("MakeDataset: " + std::to_string(v->f.size()) + " feature values for " +
                           std::to_string(d.size) + " samples of " +
                           std::to_string(d.SampleElems()));
  }
  EPS_ASSIGN_OR_RETURN(d.num_classes, CountClasses(v->l.data(), d.size, "MakeDataset"));
  d.features = v->f.data();
  d.labels = v->l.data();
  d.source = std::make_shared<StampedSource>(std::vector<FileStamp>{}, v);
  return d;
}

StatusOr<FileStamp> StampFile(const std::string& path, int fd) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(path + ": no such file");
    return NotFound(path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  return FileStamp{path, st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size), MtimeNs(st), fd};
}

Status CheckStamp(const FileStamp& s) {
  struct stat st;
  if (s.fd >= 0) {  // the mapped file itself: rewritten or truncated in place
    if (fstat(s.fd, &st) != 0) return FailedPrecondition(Changed(s, std::strerror(errno)));
    if (st.st_size != s.size) {
      return FailedPrecondition(Changed(s, "size " + std::to_string(s.size) + " -> " +
                                               std::to_string(st.st_size) + " bytes"));
    }
    if (MtimeNs(st) != s.mtime_ns) return FailedPrecondition(Changed(s, "modified"));
  }
  if (stat(s.path.c_str(), &st) != 0) return FailedPrecondition(Changed(s, "removed"));
  if (st.st_dev != s.dev || st.st_ino != s.ino)
    return FailedPrecondition(Changed(s, "replaced by another file"));
  if (st.st_size != s.size) {
    return FailedPrecondition(Changed(s, "size " + std::to_string(s.size) + " -> " +
                                             std::to_string(st.st_size) + " bytes"));
  }
  if (MtimeNs(st) != s.mtime_ns) return FailedPrecondition(Changed(s, "modified"));
  return OkStatus();
}

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(path + ": no such file");
    return NotFound(path + ": cannot open: " + std::strerror(errno));
  }
  std::unique_ptr<MappedFile> f(new MappedFile);
  f->stamp_.fd = fd;  // closed by the destructor from here on
  struct stat st;
  if (fstat(fd, &st) != 0) return NotFound(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  f->stamp_ = FileStamp{path, st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size),
                        MtimeNs(st), fd};
  if (st.st_size == 0) return InvalidArgument(path + ": empty file");
  f->size_ = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    f->size_ = 0;
    return Internal(path + ": mmap: " + std::strerror(errno));
  }
  (void)madvise(p, f->size_, MADV_RANDOM);  // no read-ahead into other workers' samples
  f->data_ = static_cast<const uint8_t*>(p);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  if (stamp_.fd >= 0) close(stamp_.fd);
}

Status StampedSource::CheckUnchanged() const {
  for (const FileStamp& s : stamps_) EPS_RETURN_IF_ERROR(CheckStamp(s));
  return OkStatus();
}

StatusOr<int64_t> CountClasses(const int64_t* labels, int64_t n, const std::string& path) {
  int64_t largest = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0) {
      return InvalidArgument(path + ": sample " + std::to_string(i) + " has the negative label " +
                             std::to_string(labels[i]) + " (classes are 0, 1, ...)");
    }
    largest = std::max(largest, labels[i]);
  }
  return largest + 1;
}

}  // namespace eps
