// What leaves a job: the final model as digests and as a safetensors file, and
// the job record the coordinator keeps in its store. Shared by the coordinator
// (which reads the final chunks from the shards) and by export_model (which
// reads them from the shards' stores, on demand).
//
// model.safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype (F32
// or I64), shape and byte range, then the tensors' bytes in layout order
// (parameters, then buffers, as the model declares them). The header's
// __metadata__ holds job_id, model, steps and params_sha256.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/status.h"
#include "schema/messages.h"

namespace eps {

// Every chunk of a model version, by chunk id (the loss tensor's may be absent).
using ModelChunks = std::map<uint32_t, ChunkBytes>;

struct ModelDigests {
  std::string params_sha256;   // SHA-256 over the parameter chunks in layout order
  std::string buffers_sha256;  // the same over the buffers (BatchNorm statistics)
};

// DataLoss when a chunk is missing or has the wrong size.
StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks);

// Writes `path` atomically. `metadata` goes into the header's __metadata__.
Status WriteSafetensors(const std::string& path, const Layout& layout, const ModelChunks& chunks,
                        const Step& step, const std::string& job_id, const std::string& model,
                        const ModelDigests& digests);

// The job as the coordinator stores it under kJobKey: the ShardConfig the shards
// got (spec and tensors, the loss tensor included), in its wire form.
inline constexpr const char* kJobKey = "job";
std::string EncodeStoredJob(const JobSpec& spec, const std::vector<TensorSpec>& tensors);
StatusOr<ShardConfig> DecodeStoredJob(const std::string& bytes);

}  // namespace eps
