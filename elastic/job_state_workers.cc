// JobState's side of the workers: registrations and their answers, heartbeats,
// leaves and errors, the faults counted against a machine, and which workers
// are live and ready. The rest of the state machine is in job_state.cc; the
// class and its contract are in job_state.h.
#include <algorithm>
#include <string>

#include "elastic/job_state.h"

namespace eps {

std::string MachineOf(const std::string& host, uint32_t pid) {
  const std::string suffix = ":" + std::to_string(pid);
  if (host.size() > suffix.size() &&
      host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return host.substr(0, host.size() - suffix.size());
  }
  return host;
}

Status CheckDeviceKind(const std::string& job_kind, const std::string& worker_kind,
                       bool allow_mixed) {
  if (job_kind.empty() || worker_kind == job_kind || allow_mixed) return OkStatus();
  return FailedPrecondition(
      "this worker computes on '" + worker_kind + "', the job's workers on '" + job_kind +
      "': the bits would then depend on placement; the job accepts that only when its "
      "coordinator runs with --allow_mixed_devices");
}

Status CheckCpuKernels(const std::string& job_kernels, const std::string& worker_kernels,
                       bool allow_mixed) {
  if (job_kernels.empty() || worker_kernels == job_kernels || allow_mixed) return OkStatus();
  return FailedPrecondition(
      std::string(kCpuKernelsMismatch) + "this worker runs the CPU kernels '" +
      (worker_kernels.empty() ? "(none reported)" : worker_kernels) + "', the job's are '" +
      job_kernels +
      "': the bits would then depend on placement; the job accepts that only when its "
      "coordinator runs with --allow_mixed_devices");
}

WorkerId JobState::OnWorkerRegistered(const std::string& host, uint32_t pid,
                                      const std::string& device_kind,
                                      const std::string& cpu_kernels) {
  // A worker whose registration went unanswered sends it again (the
  // coordinator may have restarted in between): the same process keeps its id
  // until it reported its model.
  for (auto& [known, w] : workers_) {
    if (!w.alive || w.ready || w.host != host || w.pid != pid) continue;
    w.last_seen = clock_->Now();
    if (std::find(unanswered_registrations_.begin(), unanswered_registrations_.end(), known) ==
        unanswered_registrations_.end()) {
      unanswered_registrations_.push_back(known);
    }
    Emit(JobEvent::WorkerReregistered{known, host}, CurrentStep());
    Advance();
    return known;
  }
  const WorkerId id(next_worker_++);
  const std::string machine = MachineOf(host, pid);
  ForgetNeverReadyDead();
  using Cause = JobEvent::WorkerRefused::Cause;
  Cause cause = Cause::kHostBackedOff;
  Status st = CheckHost(machine);
  if (st.ok()) {
    cause = Cause::kTooManyWorkers;
    st = CheckWorkerCount(machine);
  }
  if (st.ok()) {
    cause = Cause::kDeviceKind;
    st = CheckDeviceKind(device_kind_, device_kind, spec_.allow_mixed_devices);
  }
  if (!st.ok()) {
    Emit(JobEvent::WorkerRefused{id, host, device_kind, st.message(), cause}, CurrentStep());
    Send(id, ErrorReply{st.code(), st.message()});
    return id;
  }
  if (device_kind_.empty()) device_kind_ = device_kind;
  WorkerInfo& w = workers_[id];
  w.host = host;
  w.machine = machine;
  w.pid = pid;
  w.device_kind = device_kind;
  w.cpu_kernels = cpu_kernels;
  w.last_seen = clock_->Now();
  ++workers_joined_;
  Emit(JobEvent::WorkerJoined{id, host, pid, device_kind}, CurrentStep());
  unanswered_registrations_.push_back(id);
  Advance();
  return id;
}

Status JobState::CheckWorkerCount(const std::string& machine) const {
  uint32_t live = 0, on_machine = 0;
  for (const auto& [id, w] : workers_) {
    if (!w.alive) continue;
    ++live;
    on_machine += w.machine == machine ? 1 : 0;
  }
  const uint32_t per_machine = options_.max_workers_per_machine, all = options_.max_workers;
  if (per_machine > 0 && on_machine >= per_machine) {
    return ResourceExhausted("machine '" + machine + "' has " + std::to_string(on_machine) +
                             " live workers, the most the job takes from one machine "
                             "(coordinator --max_workers_per_host)");
  }
  if (all > 0 && live >= all) {
    return ResourceExhausted("the job has " + std::to_string(live) +
                             " live workers, the most it takes (coordinator --max_workers)");
  }
  return OkStatus();
}

// A worker that died before it reported its model never held work, a range or
// a plan: nothing refers to it but its entry and an unanswered registration.
void JobState::ForgetNeverReadyDead() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->second.alive || it->second.ready) {
      ++it;
      continue;
    }
    const WorkerId id = it->first;
    unanswered_registrations_.erase(
        std::remove(unanswered_registrations_.begin(), unanswered_registrations_.end(), id),
        unanswered_registrations_.end());
    it = workers_.erase(it);
  }
}

Status JobState::OnHeartbeat(WorkerId worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.alive) {
    return Aborted("worker " + std::to_string(worker.value()) + " is not a member: register again");
  }
  it->second.last_seen = clock_->Now();
  return OkStatus();
}

Status JobState::OnLeave(WorkerId worker, const std::string& reason, bool host_fault) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.alive)
    return OkStatus();  // already gone: the ack is the same
  std::vector<WorkerRange> moved = DeclareDead(worker);
  it->second.left = true;
  Emit(JobEvent::WorkerLeft{worker, reason, std::move(moved), host_fault}, CurrentStep());
  if (host_fault) CountHostFault(it->second.machine, reason);
  Send(worker, StepPlan{PlanKind::kStop, step_, epoch_, 0, 0, 0, 0});
  Advance();
  return OkStatus();
}

void JobState::OnWorkerError(WorkerId worker, const Status& error) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.alive) return;
  // The worker set itself up before it reported its model, so an accepted
  // model is another worker's (or the store's): this job can run.
  if (tensors_.empty()) return Fail(FailedPrecondition(error.message()));
  (void)OnLeave(worker, error.message(), /*host_fault=*/true);
}

void JobState::CountHostFault(const std::string& machine, const std::string& reason) {
  const auto now = clock_->Now();
  HostRecord& h = hosts_[machine];
  const auto since = std::max(h.last_failure, h.backed_off_until);
  if (h.failures > 0 && now - since > options_.host_failure_window) h.failures = 0;
  ++h.failures;
  h.last_failure = now;
  h.last_reason = reason;
  const uint32_t threshold = options_.host_failures_before_backoff;
  if (threshold == 0 || h.failures < threshold) return;
  // Doubling from the first back-off on, capped (and the shift kept small).
  std::chrono::milliseconds backoff = options_.host_backoff;
  for (uint32_t i = threshold; i < h.failures && backoff < options_.host_backoff_max; ++i)
    backoff *= 2;
  backoff = std::min(backoff, options_.host_backoff_max);
  h.backed_off_until = now + backoff;
  Emit(JobEvent::HostBackedOff{machine, h.failures, std::chrono::duration<double>(backoff).count(),
                               reason},
       CurrentStep());
}

Status JobState::CheckHost(const std::string& machine) const {
  auto it = hosts_.find(machine);
  if (it == hosts_.end()) return OkStatus();
  const HostRecord& h = it->second;
  const auto now = clock_->Now();
  if (now >= h.backed_off_until) return OkStatus();
  const auto wait = std::chrono::ceil<std::chrono::seconds>(h.backed_off_until - now);
  return FailedPrecondition(
      "host '" + machine + "' is backed off: " + std::to_string(h.failures) +
      " workers in a row could not set themselves up there (last: " + h.last_reason +
      "); it may register again in " + std::to_string(wait.count()) + " s");
}

void JobState::HostSucceeded(WorkerId w) {
  auto it = workers_.find(w);
  if (it == workers_.end()) return;
  auto h = hosts_.find(it->second.machine);
  if (h != hosts_.end()) h->second.failures = 0;
}

std::vector<WorkerRange> JobState::DeclareDead(WorkerId id) {
  WorkerInfo& w = workers_[id];
  w.alive = false;
  w.pending = false;
  speeds_.Forget(id);
  replan_gate_.Forget(id);
  std::vector<WorkerRange> moved;
  for (Work& item : work_) {
    if (item.holder == id || item.reserved == id) {
      if (item.holder == id) moved.push_back({id, item.lo, item.hi});
      item.holder.reset();
      item.reserved.reset();
    }
  }
  for (EvalSlice& s : eval_slices_) {
    if (s.holder == id && !s.done) s.holder.reset();
  }
  if (w.init_holder && phase_ == Phase::kInitializing)
    phase_ = Phase::kStarting;  // someone else initializes
  return moved;
}

bool JobState::HasLiveReadyWorker() const {
  for (const auto& [id, w] : workers_) {
    if (w.alive && w.ready) return true;
  }
  return false;
}

size_t JobState::live_workers() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w.alive ? 1 : 0;
  return n;
}

std::vector<WorkerId> JobState::ReadyWorkers() const {
  std::vector<WorkerId> live;
  for (const auto& [id, w] : workers_) {
    if (w.alive && w.ready) live.push_back(id);
  }
  return live;
}

void JobState::AnswerRegistrations() {
  // During a move the map is about to change: the reply names the one after it.
  if (unanswered_registrations_.empty() || !AllShardsRegistered() || move_) return;
  // The members' addresses by id ("" for a gap), and the map once the model is known.
  std::vector<std::string> addresses(members_.back() + 1);
  for (uint32_t s : members_) addresses[s] = shard_addresses_[s];
  for (WorkerId id : unanswered_registrations_) {
    WorkerInfo& w = workers_[id];
    if (!w.alive) continue;
    w.last_seen = clock_->Now();  // its heartbeats start now
    RegisterWorkerReply reply{id, spec_, addresses};
    if (!tensors_.empty()) reply.map = layout_.map;
    reply.vocab = options_.vocab;
    reply.model_size = options_.model_size;
    reply.init_size = options_.init_size;
    reply.fetch_chunk_bytes = options_.fetch_chunk_bytes;
    Send(id, std::move(reply));
  }
  unanswered_registrations_.clear();
}

}  // namespace eps
