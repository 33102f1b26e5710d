#include "elastic/model_file_server.h"

#include <algorithm>

namespace eps {

StatusOr<std::unique_ptr<ModelFileServer>> ModelFileServer::Open(uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return InvalidArgument("model file chunks must hold at least one byte");
  return std::unique_ptr<ModelFileServer>(new ModelFileServer(chunk_bytes));
}

void ModelFileServer::Add(const std::string& sha256, const void* data, uint64_t size,
                          std::shared_ptr<const void> owner) {
  files_[sha256] = File{data, size, std::move(owner)};
}

StatusOr<FetchModelReply> ModelFileServer::Serve(const FetchModel& request) const {
  const std::string what = "FetchModel{" + request.sha256.substr(0, 64) + ", offset " +
                           std::to_string(request.offset) + ", length " +
                           std::to_string(request.length) + "}";
  auto it = files_.find(request.sha256);
  if (it == files_.end()) {
    return NotFound(what + ": this job serves no file with that SHA-256 (" +
                    std::to_string(files_.size()) + " files: its model and --init_from files)");
  }
  const File& file = it->second;
  if (request.length == 0 || request.length > chunk_bytes_) {
    return InvalidArgument(what + ": a length must be 1 to " + std::to_string(chunk_bytes_) +
                           " bytes (the registration reply's fetch_chunk_bytes)");
  }
  if (request.offset >= file.size) {
    return InvalidArgument(what + ": the offset is at or past the end of the file (" +
                           std::to_string(file.size) + " bytes)");
  }
  const uint64_t n = std::min(request.length, file.size - request.offset);
  FetchModelReply reply;
  reply.sha256 = request.sha256;
  reply.offset = request.offset;
  reply.file_size = file.size;
  reply.data = static_cast<const char*>(file.data) + request.offset;
  reply.size = static_cast<size_t>(n);
  reply.owner = file.owner;
  bytes_served_ += n;
  ++chunks_served_;
  return reply;
}

}  // namespace eps
