// The coordinator's side of FetchModel (docs/design.md, "How the model reaches
// the workers"): the files every worker needs besides the job spec (the
// TorchScript model file, the --init_from file), served by SHA-256 in chunks
// of at most chunk_bytes(), so that no message holds a whole file. Sizes and
// offsets are 64-bit: a file of 1 B float32 parameters (4 GB) is served like
// one of 4 KB.
//
// A reply's bytes point into the file's bytes (kept alive by their owner while
// ZeroMQ sends them): serving copies nothing. Thread-compatible: the
// coordinator's loop owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "schema/messages.h"

namespace eps {

class ModelFileServer {
 public:
  // What one message may carry besides the bytes (envelope, routing id): the
  // chunk of a server whose messages are at most M bytes is M less this.
  static constexpr uint64_t kEnvelopeRoom = 64 << 10;

  // InvalidArgument for chunk_bytes 0.
  static StatusOr<std::unique_ptr<ModelFileServer>> Open(uint64_t chunk_bytes);

  // Serves `size` bytes at `data` (kept alive by `owner`) as the file whose
  // SHA-256 is `sha256` (hex, lower case; the caller hashed them). Adding the
  // same hash again replaces the bytes.
  void Add(const std::string& sha256, const void* data, uint64_t size,
           std::shared_ptr<const void> owner);

  // The largest length a request may ask.
  uint64_t chunk_bytes() const { return chunk_bytes_; }

  // The answer to `request`: bytes [offset, offset + length) of the file, or
  // the file's tail when it ends first. NotFound for a hash it does not serve;
  // InvalidArgument for a length of 0 or over chunk_bytes(), or an offset at
  // or past the end of the file. Each error names what was asked.
  [[nodiscard]] StatusOr<FetchModelReply> Serve(const FetchModel& request) const;

  // What it served so far (the coordinator's log).
  uint64_t bytes_served() const { return bytes_served_; }
  uint64_t chunks_served() const { return chunks_served_; }

 private:
  explicit ModelFileServer(uint64_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  struct File {
    const void* data = nullptr;
    uint64_t size = 0;
    std::shared_ptr<const void> owner;
  };

  const uint64_t chunk_bytes_;
  std::map<std::string, File> files_;  // by SHA-256
  mutable uint64_t bytes_served_ = 0;
  mutable uint64_t chunks_served_ = 0;
};

}  // namespace eps
