// An append-only file of JSON lines (events.jsonl, the scheduler's decisions):
// one object per line, each written with one write() so that a reader tailing
// the file sees whole lines, and a file left with a torn last line (its writer
// was killed mid-line) is repaired on open by ending that line.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace eps {

// Not thread-safe: one writer thread.
class JsonLinesFile {
 public:
  // Opens `path` for appending (created if missing). Unavailable when it cannot.
  [[nodiscard]] static StatusOr<std::unique_ptr<JsonLinesFile>> Open(const std::string& path);
  ~JsonLinesFile();
  JsonLinesFile(const JsonLinesFile&) = delete;
  JsonLinesFile& operator=(const JsonLinesFile&) = delete;

  // Appends `json` (one object, no newline) and a newline. Unavailable with
  // the reason on the first failure; later failures are OK and dropped
  // (these files are for people and tools: the writer's work goes on).
  Status Append(const std::string& json);

  const std::string& path() const { return path_; }

 private:
  JsonLinesFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  const int fd_;
  const std::string path_;
  bool failed_ = false;
};

}  // namespace eps
