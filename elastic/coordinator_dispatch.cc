#include "elastic/coordinator_dispatch.h"

#include <algorithm>

namespace eps {

Dispatched DispatchMessage(const std::string& peer, const Body& body, JobState* state,
                           CoordinatorPeers* peers) {
  Dispatched d;
  Status& st = d.error;
  if (auto* m = std::get_if<RegisterShard>(&body)) {
    const bool new_peer = !peers->IsShard(m->shard, peer);
    st = state->OnShardRegistered(m->shard, m->address, m->durable_step, m->version, new_peer);
    if (st.ok()) {
      peers->shards[m->shard.value()] = peer;
      peers->shard_metrics[m->shard.value()] = m->metrics_address;
    }
  } else if (auto* m = std::get_if<RegisterWorker>(&body)) {
    const WorkerId id = state->OnWorkerRegistered(m->host, m->pid, m->device_kind, m->cpu_kernels);
    peers->workers[id] = peer;
    peers->worker_metrics[id] = m->metrics_address;
  } else if (std::get_if<JobStatusRequest>(&body)) {
    d.status_report = true;
  } else if (auto* m = std::get_if<JobControl>(&body)) {
    st = m->remove_shard ? state->RemoveShard(*m->remove_shard)
         : m->hold       ? state->Hold(Step(m->from_step))
                         : state->Release();
    d.status_report = st.ok();  // the status after the change
  } else if (std::get_if<JobInfo>(&body)) {
    d.reply = state->Info();  // for the inter-job scheduler
  } else if (auto* m = std::get_if<StepRequest>(&body)) {
    if (peers->IsWorker(m->worker, peer))
      st = state->OnStepRequest(*m);
    else
      st = Aborted("unknown worker: register again");
  } else if (auto* m = std::get_if<Heartbeat>(&body)) {
    st = state->OnHeartbeat(m->worker);  // from the worker's heartbeat socket: errors go there
  } else if (auto* m = std::get_if<Leave>(&body)) {
    if (peers->IsWorker(m->worker, peer))
      st = state->OnLeave(m->worker, m->reason, m->host_fault);
    else
      d.reply = StepPlan{PlanKind::kStop, state->step(), state->epoch(), 0, 0, 0, 0};
  } else if (auto* m = std::get_if<StepDone>(&body)) {
    if (peers->IsShard(m->shard, peer)) {
      st = state->OnStepDone(m->shard, *m);
    } else {
      st = NotFound("step report from an unknown shard: register again");
    }
  } else if (auto* m = std::get_if<RollbackDone>(&body)) {
    if (peers->IsShard(m->shard, peer)) {
      st = state->OnRollbackDone(*m);
    } else {
      st = NotFound("rollback report from an unknown shard: register again");
    }
  } else if (auto* m = std::get_if<ReshardReady>(&body)) {
    if (peers->IsShard(m->shard, peer)) {
      st = state->OnReshardReady(*m);
    } else {
      st = NotFound("reshard report from an unknown shard: register again");
    }
  } else if (auto* m = std::get_if<EvalResult>(&body)) {
    // Never answered: the worker's next message is a step request awaiting its plan.
    d.dropped =
        peers->IsWorker(m->worker, peer) ? state->OnEvalResult(*m) : Aborted("unknown worker");
  } else if (auto* m = std::get_if<ErrorReply>(&body)) {
    if (std::find(peers->shards.begin(), peers->shards.end(), peer) != peers->shards.end()) {
      state->OnJobError(m->message);
      return d;
    }
    for (auto it = peers->workers.rbegin(); it != peers->workers.rend(); ++it) {
      if (it->second == peer) {
        state->OnWorkerError(it->first, m->ToStatus());
        return d;
      }
    }
    d.stray_error = true;
  } else {
    st = InvalidArgument(std::string("the coordinator does not serve ") + BodyName(body));
    d.unserved = true;
  }
  return d;
}

}  // namespace eps
