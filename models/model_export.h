// What leaves a job: the final model as digests and as a safetensors file, and
// the job record the coordinator keeps in its store. Shared by the coordinator
// (which reads the final chunks from the shards) and by export_model (which
// reads them from the shards' stores, on demand).
//
// model.safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype (F32
// or I64), shape and byte range, then the tensors' bytes in layout order
// (parameters, then buffers, as the model declares them). The header's
// __metadata__ holds job_id, model, steps and params_sha256. A sparse table
// too large to lay out whole (TableExport) is not among its tensors: it goes
// to a table file beside it, its stored rows as two .npy files, which the
// metadata's "table_files" names (docs/models.md, "Large embedding tables").
#pragma once

#include <cstdint>
#include <functional>
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
// A sparse table of a model version as its stored rows: ids ascending, values
// ids.size() x dim floats. A row no step changed (nor --init_from seeded) is
// not stored: its value is its initial row (common/row_init.h, the job's seed).
struct StoredRows {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};
// Every sparse table of a model version, by tensor index (a table with no
// stored row may be absent).
using ModelTables = std::map<uint32_t, StoredRows>;

// How sparse tables leave a job: laid out whole as the dense tensor they
// stand for (the stored rows in place, the initial rows elsewhere) up to
// `dense_bytes`; a larger one or one of unbounded keys (a table no host need hold: docs/design.md,
// "Sparse tables") as its stored rows, in a table file beside the model and
// in params_sha256. The binaries use the default, so every export of a job
// agrees; tests lower it.
inline constexpr uint64_t kDenseTableBytes = uint64_t{2} << 30;
// How a table file's metadata names its rows' initializer (InitialRow's default, nn.Embedding's
// N(0, 1)): what ExportedTable (models/exported_table.h) reads back.
inline constexpr char kTableFileInitializer[] = "normal(0, 1)";
struct TableExport {
  uint64_t seed = 0;  // the job's: the initial rows
  uint64_t dense_bytes = kDenseTableBytes;
  bool Dense(const TensorSpec& t) const {
    return !t.unbounded() && uint64_t(t.numel()) * DTypeSize(t.dtype) <= dense_bytes;
  }
};

struct ModelDigests {
  // SHA-256 over the parameters in layout order: each dense tensor's chunks, a
  // sparse table as the dense tensor it stands for or, beyond
  // TableExport::dense_bytes, as its stored rows (each its id, 8 bytes
  // little-endian, then its values).
  std::string params_sha256;
  std::string buffers_sha256;  // the same over the buffers (BatchNorm statistics)
};

// A model version as an export reads it, a piece at a time in layout order:
// pulled from the shards in pages (elastic/final_pull.h), or held (HeldModel).
class ModelPieces {
 public:
  virtual ~ModelPieces() = default;
  // Dense chunk `c`'s bytes, asked once each, in layout order; valid until the next call.
  virtual StatusOr<ChunkBytes> ChunkOf(const Chunk& c) = 0;
  // Calls row(id, values) for the stored rows of sparse table `table`
  // (layout.sparse's index), ids ascending; values valid during the call.
  virtual Status RowsOf(uint32_t table,
                        const std::function<Status(uint64_t id, const float* values)>& row) = 0;
};

// The pieces of a model held in memory (its tables' rows sorted: SortTableRows).
class HeldModel final : public ModelPieces {
 public:
  HeldModel(const Layout& layout, const ModelChunks& chunks, const ModelTables& tables = {})
      : layout_(layout), chunks_(chunks), tables_(tables) {}
  StatusOr<ChunkBytes> ChunkOf(const Chunk& c) override;
  Status RowsOf(uint32_t table,
                const std::function<Status(uint64_t id, const float* values)>& row) override;

 private:
  const Layout& layout_;
  const ModelChunks& chunks_;
  const ModelTables& tables_;
};

// What names an exported model file (its header's metadata).
struct ExportFile {
  std::string path;
  Step step{0};
  std::string job_id, model;
  std::map<std::string, std::string> extra;  // more metadata (ExportMetadata)
};

// One pass over `pieces`: the model's digests and, when `file` is given, its
// safetensors file at file->path and the table files of the tables too large
// to lay out (TableExport) beside it: PATH_STEM.tables/NAME.ids.npy (uint64
// [n]) and NAME.rows.npy (float32 [n, dim]), the stored rows. The header's
// __metadata__ holds job_id, model, steps, params_sha256, "table_files" (JSON,
// with the table files) and file->extra. The files are written as the pieces
// come (a model and tables of any size, in memory a piece at a time; the
// headers' digest and row counts filled in at the end) and are seen whole or
// not at all. DataLoss when a chunk is missing or has the wrong size, or a
// table's rows are not ascending or lie beyond it (a row two shards hold).
StatusOr<ModelDigests> ExportModel(const Layout& layout, ModelPieces* pieces, const TableExport& e,
                                   const ExportFile* file = nullptr);
// ExportModel of a held model, without a file.
StatusOr<ModelDigests> DigestModel(const Layout& layout, const ModelChunks& chunks,
                                   const ModelTables& tables = {}, const TableExport& e = {});

// The metadata a job's export carries beyond ExportModel's own: the zoo
// sizes of its spec (data/model_input.h ZooSizesMetadata), which eps_predict
// rebuilds a sized built-in model from, its CPU kernel set and, for a
// TorchScript job, "model_sha256": the SHA-256 of the module file "model"
// names, which runs the export's weights (models/exported_model.h).
std::map<std::string, std::string> ExportMetadata(const JobSpec& spec);

// The __metadata__ of `model` when it is a model.safetensors, else of the
// model.safetensors beside it (job_id, model, steps, params_sha256, ...);
// empty when there is none to read. Reads the header only.
std::map<std::string, std::string> ExportMetadataOf(const std::string& model);
// Its value `key`; nullopt when there is none.
std::optional<std::string> ExportMetadataValue(const std::string& model, const std::string& key);
// Its CPU kernel set ("cpu_kernels"); kDefaultCpuKernels when there is none to read.
std::string ExportCpuKernels(const std::string& model);

// The model's parameters then buffers (not the loss, nor a table TableExport
// leaves to a table file), each as one contiguous piece; DataLoss when a chunk
// is missing or has the wrong size.
StatusOr<std::vector<ExportedTensor>> ModelTensors(const Layout& layout, const ModelChunks& chunks,
                                                   const ModelTables& tables = {},
                                                   const TableExport& e = {});

// Reads a safetensors file as ExportModel writes it: ParseSafetensors
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
