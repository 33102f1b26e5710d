// export_model: writes a job's model from its stores, on demand, while the job
// runs or after it stopped or crashed, without any of its processes; or
// converts the model.safetensors a finished job wrote.
//
//   export_model --stores=RUN_DIR/store --out=model.safetensors [--step=N]
//                [--pt_out=model.pt] [--script_out=model.script.pt]
//   export_model --safetensors=RUN_DIR/model.safetensors [--stores=RUN_DIR/store]
//                --pt_out=model.pt [--script_out=model.script.pt]
//
// Reads the job record from the coordinator's store (STORES/coordinator) and
// checkpoint `step` (default: the newest one every shard holds) from each
// shard's store (STORES/shard<N>) and its sparse tables' (STORES/shard<N>.sparse),
// opened read-only, so running processes are not disturbed. Writes the safetensors file described
// in models/model_export.h and prints the step and the params_sha256, which equals result.json's
// for the job's final step. --pt_out and --script_out: the exports Python loads
// (models/torch_export.h); the scripted one needs the job's TorchScript file,
// which the coordinator keeps in its store (or --script_model names it).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/digest.h"
#include "common/layout.h"
#include "elastic/final_pull.h"
#include "models/model_export.h"
#include "models/torch_export.h"
#include "server/shard_state.h"
#include "server/table_checkpoint.h"
#include "storage/state_store.h"

DEFINE_string(
    stores, "",
    "The job's store directory: coordinator/ and shard<N>/ in it (local.sh: RUN_DIR/store)");
DEFINE_string(out, "", "The safetensors file to write (from the stores' checkpoints)");
DEFINE_string(safetensors, "",
              "Convert this model.safetensors (a finished job's) instead of reading checkpoints");
DEFINE_string(pt_out, "", "Also write the state dict torch.load reads (model.pt)");
DEFINE_string(script_out, "",
              "Also write the trained TorchScript module torch.jit.load runs (a TorchScript job "
              "only; ignored, with a note, for a built-in model)");
DEFINE_string(script_model, "",
              "The job's TorchScript file for --script_out (default: the copy in the "
              "coordinator's store)");
DEFINE_int64(step, -1, "The checkpoint to export (default: the newest one every shard holds)");

namespace eps {
namespace {

StatusOr<std::unique_ptr<StateStore>> OpenReadOnly(const std::string& path,
                                                   const std::string& job_id,
                                                   const std::string& owner) {
  StoreOptions o;
  o.path = path;
  o.job_id = job_id;
  o.owner = owner;
  o.read_only = true;
  return StateStore::Open(o);
}

std::string Join(const std::vector<Step>& steps) {
  std::string out;
  for (Step s : steps) out += (out.empty() ? "" : " ") + std::to_string(s.value());
  return out.empty() ? "none" : out;
}

// The job record and TorchScript file from the coordinator's store.
struct StoredJob {
  ShardConfig job;
  std::string script;  // empty: a built-in model, or a store without it
};

StatusOr<StoredJob> ReadStoredJob(const std::string& stores) {
  EPS_ASSIGN_OR_RETURN(auto coordinator, OpenReadOnly(stores + "/coordinator", "", "coordinator"));
  auto record = coordinator->Get(kJobKey);
  if (!record.ok()) {
    return record.status().WithContext(
        "the coordinator's store holds no job record yet (the job never started)");
  }
  StoredJob out;
  EPS_ASSIGN_OR_RETURN(out.job, DecodeStoredJob(*record));
  auto script = coordinator->Get(kModelScriptKey);
  if (script.ok()) {
    out.script = std::move(script).value();
  } else if (script.status().code() != StatusCode::kNotFound) {
    return script.status();
  }
  return out;
}

// How much one answer of the export's final pull holds: a page of a shard's chunks, or of its
// rows of a table (elastic/final_pull.h), as the coordinator's default --final_pull_kb.
constexpr uint64_t kPageBytes = uint64_t{64} << 20;

// The model at checkpoint `step` of the shards' stores, read as the coordinator's final pull reads
// a finished job's (FinalPull), its requests answered here: chunks by the shards' states loaded
// from their checkpoints, a page of a table's rows by a scan of the table's checkpoint beside the
// shard's store (STORES/shard<N>.sparse/, opened read-only). Tables of any size go through in
// pages.
class CheckpointedShards {
 public:
  CheckpointedShards(std::string stores, const JobSpec& spec, OptimizerOptions optimizer,
                     const Layout& layout, Step step)
      : stores_(std::move(stores)),
        spec_(spec),
        optimizer_(std::move(optimizer)),
        layout_(layout),
        step_(step) {}

  void Add(uint32_t shard, std::unique_ptr<ShardState> state) { states_[shard] = std::move(state); }
  // Every chunk of every shard, by chunk id (for the tensors torch.load reads).
  StatusOr<ModelChunks> Chunks() const {
    ModelChunks chunks;
    for (const auto& [s, state] : states_) {
      EPS_ASSIGN_OR_RETURN(PullReply pulled, state->HandlePull(Pull{step_, {}}));
      for (ChunkBytes& c : pulled.chunks) chunks[c.chunk.value()] = std::move(c);
    }
    return chunks;
  }

  StatusOr<PullReply> Answer(uint32_t shard, const Pull& pull) {
    auto state = states_.find(shard);
    if (state == states_.end()) return Internal("no shard " + std::to_string(shard));
    if (pull.sparse.empty()) return state->second->HandlePull(pull);
    const SparseRead& read = pull.sparse.at(0);
    EPS_ASSIGN_OR_RETURN(const TableCheckpoint* table, Table(shard, read.table));
    const size_t dim = static_cast<size_t>(layout_.tensors[layout_.sparse[read.table]].shape[1]);
    auto ids = std::make_shared<std::vector<uint64_t>>();
    auto values = std::make_shared<std::vector<float>>();
    EPS_RETURN_IF_ERROR(table
                            ->Scan(read.from_row, read.max_rows,
                                   [&](uint64_t row, const float* weights) {
                                     ids->push_back(row);
                                     values->insert(values->end(), weights, weights + dim);
                                   })
                            .status()
                            .WithContext("shard " + std::to_string(shard) + "'s table " +
                                         layout_.tensors[layout_.sparse[read.table]].name));
    PullReply reply;
    reply.version = step_;
    SparseRowBytes& r = reply.sparse.emplace_back();
    r.table = read.table;
    r.rows = static_cast<uint32_t>(ids->size());
    r.ids = {ChunkId(0), ids->data(), ids->size() * sizeof(uint64_t), ids};
    r.values = {ChunkId(0), values->data(), values->size() * sizeof(float), values};
    return reply;
  }

 private:
  StatusOr<const TableCheckpoint*> Table(uint32_t shard, uint32_t table) {
    if (table >= layout_.sparse.size()) return InvalidArgument("no such sparse table");
    std::unique_ptr<TableCheckpoint>& open = tables_[{shard, table}];
    if (open == nullptr) {
      ShardTablesOptions dir;
      dir.dir = stores_ + "/shard" + std::to_string(shard) + ".sparse";  // shard_main's
      EPS_ASSIGN_OR_RETURN(
          open,
          TableCheckpoint::Open(ShardTableOptions(spec_, optimizer_, layout_, table, dir), step_));
    }
    return open.get();
  }

  const std::string stores_;
  const JobSpec& spec_;
  const OptimizerOptions optimizer_;
  const Layout& layout_;
  const Step step_;
  std::map<uint32_t, std::unique_ptr<ShardState>> states_;
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<TableCheckpoint>> tables_;
};

// The model at checkpoint `wanted` of the stores (-1: the newest every shard
// holds); writes `out` (safetensors) when not empty; with `tensors`, returns
// its tensors (for torch.load), else none.
// The shards are those of the job's newest shard map (the job record's,
// docs/design.md "Elastic shards"): a step from before its last change of
// shards is not whole in their stores, and is refused (a chunk is missing).
StatusOr<std::vector<ExportedTensor>> FromCheckpoints(const std::string& stores,
                                                      const ShardConfig& job,
                                                      const std::string& out, Step wanted,
                                                      bool tensors) {
  const JobSpec& spec = job.spec;
  EPS_ASSIGN_OR_RETURN(Layout layout, MakeLayout(job.tensors, spec.num_shards, spec.chunk_elems));
  if (job.map) EPS_RETURN_IF_ERROR(layout.SetShardMap(*job.map).WithContext("the job record"));
  std::vector<uint32_t> ids;
  for (const ShardId s : layout.map.Shards()) ids.push_back(s.value());
  std::vector<std::unique_ptr<StateStore>> shards;
  std::vector<std::vector<Step>> held;
  for (const uint32_t s : ids) {
    const std::string path = stores + "/shard" + std::to_string(s);
    EPS_ASSIGN_OR_RETURN(auto store, OpenReadOnly(path, spec.job_id, "shard/" + std::to_string(s)));
    EPS_ASSIGN_OR_RETURN(std::vector<Step> steps, store->ListCheckpoints());
    shards.push_back(std::move(store));
    held.push_back(std::move(steps));
  }
  Step step = wanted;
  if (step.value() < 0) {
    std::set<Step> common(held[0].begin(), held[0].end());
    for (const auto& h : held) {
      std::set<Step> both;
      for (Step s : h) {
        if (common.count(s)) both.insert(s);
      }
      common.swap(both);
    }
    if (common.empty()) {
      std::string what;
      for (size_t i = 0; i < held.size(); ++i)
        what += "; shard " + std::to_string(ids[i]) + " holds " + Join(held[i]);
      return NotFound("no checkpoint is held by every shard" + what);
    }
    step = *common.rbegin();
  }

  EPS_ASSIGN_OR_RETURN(OptimizerOptions optimizer,
                       OptimizerOptionsFromSpec(spec.optimizer, spec.steps));
  CheckpointedShards checkpointed(stores, spec, optimizer, layout, step);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t s = ids[i];
    auto checkpoint = shards[i]->ReadCheckpoint(step);
    if (!checkpoint.ok()) {
      return checkpoint.status().WithContext("shard " + std::to_string(s) + " holds steps " +
                                             Join(held[i]));
    }
    const ShardState loader{ShardId(s)};
    auto state = loader.Load(std::move(checkpoint).value());
    if (!state.ok()) return state.status().WithContext("shard " + std::to_string(s));
    checkpointed.Add(s, std::move(state).value());
  }
  FinalPull pieces(
      layout, step, ids,
      [&](uint32_t shard, const Pull& pull) { return checkpointed.Answer(shard, pull); },
      kPageBytes);
  const TableExport table_export{spec.seed};
  const ExportFile file{out, step, spec.job_id, spec.model, ExportMetadata(spec)};
  EPS_ASSIGN_OR_RETURN(ModelDigests digests,
                       ExportModel(layout, &pieces, table_export, out.empty() ? nullptr : &file));
  std::printf("exported step %lld of job '%s' (%s, %lld parameters) to %s\nparams_sha256 %s\n",
              static_cast<long long>(step.value()), spec.job_id.c_str(), spec.model.c_str(),
              static_cast<long long>(layout.NumParameters()),
              out.empty() ? "(no safetensors)" : out.c_str(), digests.params_sha256.c_str());
  if (!tensors) return std::vector<ExportedTensor>{};
  // The tensors torch.load reads hold the tables laid out whole; the larger ones stay in their
  // table files (TableExport).
  EPS_ASSIGN_OR_RETURN(ModelChunks chunks, checkpointed.Chunks());
  ModelTables tables;
  for (uint32_t t = 0; t < layout.sparse.size(); ++t) {
    if (!table_export.Dense(layout.tensors[layout.sparse[t]])) continue;
    StoredRows& rows = tables[layout.sparse[t]];
    const size_t dim = static_cast<size_t>(layout.tensors[layout.sparse[t]].shape[1]);
    EPS_RETURN_IF_ERROR(pieces.RowsOf(t, [&](uint64_t id, const float* values) {
      rows.ids.push_back(id);
      rows.values.insert(rows.values.end(), values, values + dim);
      return OkStatus();
    }));
  }
  return ModelTensors(layout, chunks, tables, table_export);
}

// Whether an export leaves a table to a table file (TableExport): the job's tensors say, or,
// without the job's stores, the safetensors metadata.
bool LeavesATableFile(const std::optional<StoredJob>& stored,
                      const std::map<std::string, std::string>& meta) {
  if (!stored) return meta.count("table_files") > 0;
  const TableExport e;
  return std::any_of(stored->job.tensors.begin(), stored->job.tensors.end(),
                     [&](const TensorSpec& t) { return t.sparse && !e.Dense(t); });
}

Status Export(const std::string& stores, Step wanted) {
  std::optional<StoredJob> stored;
  if (!stores.empty()) {
    EPS_ASSIGN_OR_RETURN(StoredJob s, ReadStoredJob(stores));
    stored = std::move(s);
  }
  std::vector<ExportedTensor> tensors;
  std::map<std::string, std::string> meta;
  if (!FLAGS_safetensors.empty()) {
    EPS_ASSIGN_OR_RETURN(tensors, ReadSafetensors(FLAGS_safetensors, &meta));
  } else {
    EPS_ASSIGN_OR_RETURN(tensors,
                         FromCheckpoints(stores, stored->job, FLAGS_out, wanted,
                                         !FLAGS_pt_out.empty() || !FLAGS_script_out.empty()));
  }
  if (!FLAGS_pt_out.empty()) {
    EPS_RETURN_IF_ERROR(WriteStateDictPt(FLAGS_pt_out, tensors));
    std::printf("state dict (torch.load) written to %s\n", FLAGS_pt_out.c_str());
  }
  if (FLAGS_script_out.empty()) return OkStatus();
  if (LeavesATableFile(stored, meta)) {
    // A scripted module holds every tensor it has: a table no host need hold has no place in it.
    std::printf(
        "--script_out skipped: a sparse table is left to a table file (larger than 2 GiB, or of "
        "unbounded keys): load the module's other weights from model.safetensors or model.pt, its "
        "table with elasticps.load_tables\n");
    return OkStatus();
  }
  std::string script = stored ? stored->script : "";
  if (!FLAGS_script_model.empty()) {
    std::ifstream in(FLAGS_script_model, std::ios::binary);
    if (!in) return NotFound("--script_model " + FLAGS_script_model + ": cannot open the file");
    script.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string pinned = stored ? stored->job.spec.model_sha256 : "";
  if (script.empty()) {
    if (!pinned.empty())
      return NotFound(
          "--script_out: the store holds no copy of the job's TorchScript file; "
          "name it with --script_model");
    std::printf("--script_out skipped: the job's model is a built-in one, not TorchScript\n");
    return OkStatus();
  }
  Sha256 sha;
  sha.Update(script.data(), script.size());
  const std::string got = sha.HexDigest();
  if (!pinned.empty() && got != pinned) {
    return InvalidArgument("the TorchScript file has SHA-256 " + got + ", the job trained " +
                           pinned);
  }
  EPS_RETURN_IF_ERROR(WriteScriptedModel(FLAGS_script_out, script, tensors));
  std::printf("scripted model (torch.jit.load) written to %s\n", FLAGS_script_out.c_str());
  return OkStatus();
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "export_model --stores=RUN_DIR/store --out=FILE.safetensors [--step=N] [--pt_out=FILE.pt] "
      "[--script_out=FILE.pt]\n"
      "       export_model --safetensors=RUN_DIR/model.safetensors [--stores=RUN_DIR/store] "
      "--pt_out=FILE.pt [--script_out=FILE.pt]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const bool from_checkpoints = FLAGS_safetensors.empty();
  const char* wrong = nullptr;
  if (from_checkpoints && FLAGS_stores.empty()) {
    wrong = "--stores is required (or convert a file with --safetensors)";
  } else if (FLAGS_out.empty() && FLAGS_pt_out.empty() && FLAGS_script_out.empty()) {
    wrong = "name at least one of --out, --pt_out and --script_out";
  } else if (!from_checkpoints && !FLAGS_out.empty()) {
    wrong = "--out writes a safetensors file from checkpoints: not with --safetensors";
  }
  if (wrong != nullptr) {
    std::fprintf(stderr, "export_model: %s\n%s\n", wrong, gflags::ProgramUsage());
    return 2;
  }
  const eps::Status st = eps::Export(FLAGS_stores, eps::Step(FLAGS_step));
  if (!st.ok()) {
    std::fprintf(stderr, "export_model: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
