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
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/layout.h"
#include "models/model_export.h"
#include "models/torch_export.h"
#include "server/shard_state.h"
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

// The sparse tables at checkpoint `step`: each shard's stored rows from its
// tables' checkpoints (beside its store, STORES/shard<N>.sparse/, opened
// read-only). Empty for a job without tables.
StatusOr<ModelTables> TablesAt(const std::string& stores, const JobSpec& spec, const Layout& layout,
                               Step step) {
  ModelTables tables;
  if (layout.sparse.empty()) return tables;
  EPS_ASSIGN_OR_RETURN(OptimizerOptions optimizer,
                       OptimizerOptionsFromSpec(spec.optimizer, spec.steps));
  for (const ShardId id : layout.map.Shards()) {
    const uint32_t s = id.value();
    ShardTablesOptions dir;
    dir.dir = stores + "/shard" + std::to_string(s) + ".sparse";  // shard_main's, beside its store
    std::vector<SparseRowBytes> rows;
    for (size_t t = 0; t < layout.sparse.size(); ++t) {
      const SparseTableOptions o = ShardTableOptions(spec, optimizer, layout, t, dir);
      auto ids = std::make_shared<std::vector<uint64_t>>();
      auto values = std::make_shared<std::vector<float>>();
      EPS_RETURN_IF_ERROR(ScanTableCheckpoint(o, step,
                                              [&](uint64_t row, const float* weights) {
                                                ids->push_back(row);
                                                values->insert(values->end(), weights,
                                                               weights + o.dim);
                                              })
                              .WithContext("shard " + std::to_string(s) + "'s table " +
                                           layout.tensors[layout.sparse[t]].name));
      SparseRowBytes r;
      r.table = static_cast<uint32_t>(t);
      r.rows = static_cast<uint32_t>(ids->size());
      r.ids = {ChunkId(0), ids->data(), ids->size() * sizeof(uint64_t), ids};
      r.values = {ChunkId(0), values->data(), values->size() * sizeof(float), values};
      rows.push_back(std::move(r));
    }
    EPS_RETURN_IF_ERROR(AddTableRows(layout, rows, &tables));
  }
  EPS_RETURN_IF_ERROR(SortTableRows(layout, &tables));
  return tables;
}

// The model's tensors at checkpoint `wanted` of the stores (-1: the newest
// every shard holds); writes `out` (safetensors) when not empty.
// The shards are those of the job's newest shard map (the job record's,
// docs/design.md "Elastic shards"): a step from before its last change of
// shards is not whole in their stores, and is refused (a chunk is missing).
StatusOr<std::vector<ExportedTensor>> FromCheckpoints(const std::string& stores,
                                                      const ShardConfig& job,
                                                      const std::string& out, Step wanted) {
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

  ModelChunks chunks;
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
    EPS_ASSIGN_OR_RETURN(PullReply pulled, (*state)->HandlePull(Pull{step, {}}));
    for (ChunkBytes& c : pulled.chunks) chunks[c.chunk.value()] = std::move(c);
  }
  EPS_ASSIGN_OR_RETURN(ModelTables tables, TablesAt(stores, spec, layout, step));
  const TableExport table_export{spec.seed};
  HeldModel model(layout, chunks, tables);
  const ExportFile file{out, step, spec.job_id, spec.model, ExportMetadata(spec)};
  EPS_ASSIGN_OR_RETURN(ModelDigests digests,
                       ExportModel(layout, &model, table_export, out.empty() ? nullptr : &file));
  std::printf("exported step %lld of job '%s' (%s, %lld parameters) to %s\nparams_sha256 %s\n",
              static_cast<long long>(step.value()), spec.job_id.c_str(), spec.model.c_str(),
              static_cast<long long>(layout.NumParameters()),
              out.empty() ? "(no safetensors)" : out.c_str(), digests.params_sha256.c_str());
  return ModelTensors(layout, chunks, tables, table_export);
}

Status Export(const std::string& stores, Step wanted) {
  std::optional<StoredJob> stored;
  if (!stores.empty()) {
    EPS_ASSIGN_OR_RETURN(StoredJob s, ReadStoredJob(stores));
    stored = std::move(s);
  }
  std::vector<ExportedTensor> tensors;
  if (!FLAGS_safetensors.empty()) {
    EPS_ASSIGN_OR_RETURN(tensors, ReadSafetensors(FLAGS_safetensors, nullptr));
  } else {
    EPS_ASSIGN_OR_RETURN(tensors, FromCheckpoints(stores, stored->job, FLAGS_out, wanted));
  }
  if (!FLAGS_pt_out.empty()) {
    EPS_RETURN_IF_ERROR(WriteStateDictPt(FLAGS_pt_out, tensors));
    std::printf("state dict (torch.load) written to %s\n", FLAGS_pt_out.c_str());
  }
  if (FLAGS_script_out.empty()) return OkStatus();
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
