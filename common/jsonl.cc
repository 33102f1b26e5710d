#include "common/jsonl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace eps {

StatusOr<std::unique_ptr<JsonLinesFile>> JsonLinesFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable("cannot open " + path + ": " + std::strerror(errno));
  std::unique_ptr<JsonLinesFile> file(new JsonLinesFile(fd, path));
  // A predecessor killed in the middle of a line left it unterminated: end it,
  // so that the next line is whole (readers skip the torn one).
  struct stat st;
  char last = '\n';
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const int rd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (rd >= 0) {
      if (::pread(rd, &last, 1, st.st_size - 1) != 1) last = '\n';
      ::close(rd);
    }
  }
  if (last != '\n') EPS_RETURN_IF_ERROR(file->Append(""));
  return file;
}

JsonLinesFile::~JsonLinesFile() { ::close(fd_); }

Status JsonLinesFile::Append(const std::string& json) {
  if (failed_) return OkStatus();
  const std::string line = json + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      return Unavailable("cannot append to " + path_ + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace eps
