// export_model: writes a job's model from its stores, on demand, while the job
// runs or after it stopped or crashed, without any of its processes.
//
//   export_model --stores=RUN_DIR/store --out=model.safetensors [--step=N]
//
// Reads the job record from the coordinator's store (STORES/coordinator) and
// checkpoint `step` (default: the newest one every shard holds) from each
// shard's store (STORES/shard<N>), opened read-only, so running processes are
// not disturbed. Writes the safetensors file described in elastic/model_export.h
// and prints the step and the params_sha256, which equals result.json's for
// the job's final step.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/layout.h"
#include "elastic/model_export.h"
#include "server/shard_state.h"
#include "storage/state_store.h"

DEFINE_string(
    stores, "",
    "The job's store directory: coordinator/ and shard<N>/ in it (local.sh: RUN_DIR/store)");
DEFINE_string(out, "", "The safetensors file to write");
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

Status Export(const std::string& stores, const std::string& out, Step wanted) {
  EPS_ASSIGN_OR_RETURN(auto coordinator, OpenReadOnly(stores + "/coordinator", "", "coordinator"));
  auto record = coordinator->Get(kJobKey);
  if (!record.ok()) {
    return record.status().WithContext(
        "the coordinator's store holds no job record yet (the job never started)");
  }
  EPS_ASSIGN_OR_RETURN(ShardConfig job, DecodeStoredJob(*record));
  const JobSpec& spec = job.spec;
  EPS_ASSIGN_OR_RETURN(Layout layout, MakeLayout(job.tensors, spec.num_shards, spec.chunk_elems));

  std::vector<std::unique_ptr<StateStore>> shards;
  std::vector<std::vector<Step>> held;
  for (uint32_t s = 0; s < spec.num_shards; ++s) {
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
      for (size_t s = 0; s < held.size(); ++s)
        what += "; shard " + std::to_string(s) + " holds " + Join(held[s]);
      return NotFound("no checkpoint is held by every shard" + what);
    }
    step = *common.rbegin();
  }

  ModelChunks chunks;
  for (uint32_t s = 0; s < spec.num_shards; ++s) {
    auto checkpoint = shards[s]->ReadCheckpoint(step);
    if (!checkpoint.ok()) {
      return checkpoint.status().WithContext("shard " + std::to_string(s) + " holds steps " +
                                             Join(held[s]));
    }
    ShardState state{ShardId(s)};
    EPS_RETURN_IF_ERROR(
        state.Restore(std::move(checkpoint).value()).WithContext("shard " + std::to_string(s)));
    EPS_ASSIGN_OR_RETURN(PullReply pulled, state.HandlePull(Pull{step, {}}));
    for (ChunkBytes& c : pulled.chunks) chunks[c.chunk.value()] = std::move(c);
  }
  EPS_ASSIGN_OR_RETURN(ModelDigests digests, DigestModel(layout, chunks));
  EPS_RETURN_IF_ERROR(
      WriteSafetensors(out, layout, chunks, step, spec.job_id, spec.model, digests));
  std::printf("exported step %lld of job '%s' (%s, %lld parameters) to %s\nparams_sha256 %s\n",
              static_cast<long long>(step.value()), spec.job_id.c_str(), spec.model.c_str(),
              static_cast<long long>(layout.NumParameters()), out.c_str(),
              digests.params_sha256.c_str());
  return OkStatus();
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage("export_model --stores=RUN_DIR/store --out=FILE.safetensors [--step=N]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (FLAGS_stores.empty() || FLAGS_out.empty()) {
    std::fprintf(stderr, "export_model: --stores and --out are required\n%s\n",
                 gflags::ProgramUsage());
    return 2;
  }
  const eps::Status st = eps::Export(FLAGS_stores, FLAGS_out, eps::Step(FLAGS_step));
  if (!st.ok()) {
    std::fprintf(stderr, "export_model: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
