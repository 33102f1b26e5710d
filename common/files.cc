#include "common/files.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace eps {

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  EPS_ASSIGN_OR_RETURN(FileWriter out, FileWriter::Create(path));
  EPS_RETURN_IF_ERROR(out.Append(text.data(), text.size()));
  return out.Commit();
}

StatusOr<FileWriter> FileWriter::Create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  return FileWriter(path, f);
}

FileWriter::FileWriter(FileWriter&& other) noexcept
    : path_(std::move(other.path_)), file_(other.file_), size_(other.size_) {
  other.file_ = nullptr;
}

FileWriter& FileWriter::operator=(FileWriter&& other) noexcept {
  if (this != &other) {
    Drop();
    path_ = std::move(other.path_);
    file_ = other.file_;
    size_ = other.size_;
    other.file_ = nullptr;
  }
  return *this;
}

FileWriter::~FileWriter() { Drop(); }

void FileWriter::Drop() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove((path_ + ".tmp").c_str());
}

Status FileWriter::Failed(const std::string& what) {
  const std::string error = std::strerror(errno);
  Drop();
  return Unavailable("cannot " + what + " " + path_ + ".tmp: " + error);
}

Status FileWriter::Append(const void* data, size_t size) {
  if (file_ == nullptr) return FailedPrecondition("the writer of " + path_ + " is closed");
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) return Failed("write");
  size_ += size;
  return OkStatus();
}

Status FileWriter::WriteAt(uint64_t offset, const void* data, size_t size) {
  if (file_ == nullptr) return FailedPrecondition("the writer of " + path_ + " is closed");
  if (offset + size > size_)
    return InvalidArgument("a write in place beyond the end of " + path_ + ".tmp");
  if (fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0 ||
      (size > 0 && std::fwrite(data, 1, size, file_) != size) || fseeko(file_, 0, SEEK_END) != 0)
    return Failed("write in place in");
  return OkStatus();
}

Status FileWriter::Commit() {
  if (file_ == nullptr) return FailedPrecondition("the writer of " + path_ + " is closed");
  if (std::fflush(file_) != 0) return Failed("flush");
  std::fclose(file_);
  file_ = nullptr;
  const std::string tmp = path_ + ".tmp";
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    std::remove(tmp.c_str());
    return Unavailable("cannot rename " + tmp + " to " + path_ + ": " + error);
  }
  return OkStatus();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the token file " + path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return InvalidArgument("the token file " + path + " is empty");
  return token;
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Internal("cannot read " + path);
  return bytes;
}

StatusOr<TempFolder> TempFolder::Create(const std::string& base, const std::string& prefix) {
  std::string tmpl = base + "/" + prefix + ".XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr)
    return Internal("cannot make a folder " + tmpl + ": " + std::strerror(errno));
  return TempFolder(std::move(tmpl));
}

TempFolder::~TempFolder() {
  if (path_.empty()) return;
  std::error_code ec;  // nothing better to do than leave it
  std::filesystem::remove_all(path_, ec);
}

}  // namespace eps
