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
#include <optional>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/status.h"
#include "common/tensor_file.h"  // ExportedTensor, ParseSafetensors
#include "schema/messages.h"

namespace eps {

// Every chunk of a model version, by chunk id (the loss tensor's may be absent).
using ModelChunks = std::map<uint32_t, ChunkBytes>;
// Every sparse table of a model version as a whole tensor ([rows, dim] floats:
// the rows a step changed as the shards hold them, the others their initial
// rows), by tensor index. Exported and digested as if it were dense.
using ModelTables = std::map<uint32_t, std::vector<float>>;

struct ModelDigests {
  std::string params_sha256;   // SHA-256 over the parameter chunks in layout order
  std::string buffers_sha256;  // the same over the buffers (BatchNorm statistics)
};

// Adds a shard's pulled rows of every sparse table (SparseRead since 0: every
// row a step changed) to `tables`, which start from the initial rows
// (common/row_init.h, the job's `seed`). ProtocolError for rows that do not fit
// the layout.
Status AddTableRows(const Layout& layout, uint64_t seed, const std::vector<SparseRowBytes>& rows,
                    ModelTables* tables);

// DataLoss when a chunk (or a sparse table) is missing or has the wrong size.
StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks,
                                   const ModelTables& tables = {});

// Writes `path` atomically. The header's __metadata__ holds job_id, model,
// steps, params_sha256 and `extra` (ExportMetadata: the zoo sizes).
Status WriteSafetensors(const std::string& path, const Layout& layout, const ModelChunks& chunks,
                        const ModelTables& tables, const Step& step, const std::string& job_id,
                        const std::string& model, const ModelDigests& digests,
                        const std::map<std::string, std::string>& extra = {});

// The metadata a job's export carries beyond WriteSafetensors' own: the zoo
// sizes of its spec (data/model_input.h ZooSizesMetadata), which eps_predict
// rebuilds a sized built-in model from.
std::map<std::string, std::string> ExportMetadata(const JobSpec& spec);

// Metadata value `key` of the job that exported `model` (a model.safetensors,
// or a file beside one), read from the header alone; nullopt when there is none.
std::optional<std::string> ExportMetadataValue(const std::string& model, const std::string& key);
// Its CPU kernel set ("cpu_kernels"); kDefaultCpuKernels when there is none to read.
std::string ExportCpuKernels(const std::string& model);

// The model's parameters then buffers (not the loss), each as one contiguous
// piece; DataLoss when a chunk is missing or has the wrong size.
StatusOr<std::vector<ExportedTensor>> ModelTensors(const Layout& layout, const ModelChunks& chunks,
                                                   const ModelTables& tables = {});

// Reads a safetensors file as WriteSafetensors writes it: ParseSafetensors
// (common/tensor_file.h) of its bytes. NotFound for a missing file.
StatusOr<std::vector<ExportedTensor>> ReadSafetensors(const std::string& path,
                                                      std::map<std::string, std::string>* metadata);

// The job as the coordinator stores it under kJobKey: the ShardConfig the shards
// got (spec and tensors, the loss tensor included), in its wire form.
inline constexpr const char* kJobKey = "job";
// The job's TorchScript model file (when it has one), stored with the job record.
inline constexpr const char* kModelScriptKey = "model_script";
// `map`: the job's shard map once it changed (none: the first map).
std::string EncodeStoredJob(const JobSpec& spec, const std::vector<TensorSpec>& tensors,
                            std::optional<ShardMap> map = std::nullopt);
StatusOr<ShardConfig> DecodeStoredJob(const std::string& bytes);

}  // namespace eps
