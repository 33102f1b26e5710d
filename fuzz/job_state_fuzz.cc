// libFuzzer target: the coordinator's handling of a message, from an unknown
// peer or a known one, against a live JobState (elastic/job_state.h) with a
// FakeClock. The job has its shard registered and one worker that reported
// its model before the first message. Dispatch is the coordinator's OnMessage
// (elastic/coordinator.cc), which lives with its sockets in the coordinator:
// Dispatch below does what it does with the state, message kind by message
// kind, and must follow it.
//
// Input: messages one after another, each a byte (bits 0-1: the sender, an
// unknown peer, the shard, or a worker; bit 2: then Tick; bits 3-7: advance the
// clock by that many 250 ms first), a byte (how many frames, 1 to 8) and the
// frames (fuzz/fuzz_input.h).
#include <cstdint>
#include <map>
#include <string>

#include "elastic/job_state.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_jobs.h"

namespace {

using namespace eps;

class Coordinator {
 public:
  Coordinator() : state_(fuzz::FuzzSpec(), Options(), &clock_), shard_peers_(1) {}

  static JobStateOptions Options() {
    JobStateOptions o;
    o.heartbeat_timeout = std::chrono::seconds(3);
    o.startup_timeout = std::chrono::seconds(5);
    o.step_timeout = std::chrono::seconds(10);
    return o;
  }

  // The shard registers, a worker registers and reports its model.
  void SetUp() {
    Envelope shard{"", RegisterShard{ShardId(0), "tcp://shard0", Step(-1), Step(-1), ""}};
    Dispatch("shard", shard);
    Envelope worker{"", RegisterWorker{"host:1", 1, "cpu", ""}};
    Dispatch("worker", worker);
    StepRequest model{WorkerId(0), Step(-1), fuzz::FuzzTensors(), 100, 10};
    Envelope request{"", model};
    Dispatch("worker", request);
    state_.Tick();
    (void)state_.TakeOutgoing();
    (void)state_.TakeEvents();
  }

  // OnMessage's dispatch, less the replies (the status they carry is dropped).
  void Dispatch(const std::string& peer, Envelope& envelope) {
    Body& body = envelope.body;
    Status st;
    if (auto* m = std::get_if<RegisterShard>(&body)) {
      const bool new_peer =
          m->shard.value() >= shard_peers_.size() || shard_peers_[m->shard.value()] != peer;
      st = state_.OnShardRegistered(m->shard, m->address, m->durable_step, m->version, new_peer);
      if (st.ok()) shard_peers_[m->shard.value()] = peer;
    } else if (auto* m = std::get_if<RegisterWorker>(&body)) {
      const WorkerId id = state_.OnWorkerRegistered(m->host, m->pid, m->device_kind);
      worker_peers_[id] = peer;
    } else if (std::get_if<JobStatusRequest>(&body)) {
      (void)state_.StatusReport();
    } else if (std::get_if<JobInfo>(&body)) {
      (void)state_.Info();
    } else if (auto* m = std::get_if<StepRequest>(&body)) {
      if (IsPeerOf(m->worker, peer)) st = state_.OnStepRequest(*m);
    } else if (auto* m = std::get_if<Heartbeat>(&body)) {
      st = state_.OnHeartbeat(m->worker);
    } else if (auto* m = std::get_if<Leave>(&body)) {
      if (IsPeerOf(m->worker, peer)) st = state_.OnLeave(m->worker, m->reason, m->host_fault);
    } else if (auto* m = std::get_if<StepDone>(&body)) {
      if (m->shard.value() < shard_peers_.size() && shard_peers_[m->shard.value()] == peer)
        st = state_.OnStepDone(m->shard, *m);
    } else if (auto* m = std::get_if<RollbackDone>(&body)) {
      if (m->shard.value() < shard_peers_.size() && shard_peers_[m->shard.value()] == peer)
        st = state_.OnRollbackDone(*m);
    } else if (auto* m = std::get_if<EvalResult>(&body)) {
      if (IsPeerOf(m->worker, peer)) st = state_.OnEvalResult(*m);
    } else if (auto* m = std::get_if<ErrorReply>(&body)) {
      if (shard_peers_[0] == peer) {
        state_.OnJobError(m->message);
      } else {
        for (auto it = worker_peers_.rbegin(); it != worker_peers_.rend(); ++it) {
          if (it->second == peer) {
            state_.OnWorkerError(it->first, m->ToStatus());
            break;
          }
        }
      }
    }
    (void)st;
  }

  void AfterMessage(uint8_t how) {
    clock_.Advance(std::chrono::milliseconds(250) * (how >> 3));
    if (how & 4) state_.Tick();
    if (state_.phase() == JobState::Phase::kFinalizing) state_.OnResultWritten(std::string("x"));
    (void)state_.TakeOutgoing();
    (void)state_.TakeEvents();
    (void)state_.AssignmentString();
    (void)state_.Summary();
  }

 private:
  bool IsPeerOf(WorkerId worker, const std::string& peer) const {
    auto it = worker_peers_.find(worker);
    return it != worker_peers_.end() && it->second == peer;
  }

  FakeClock clock_;
  JobState state_;
  std::vector<std::string> shard_peers_;
  std::map<WorkerId, std::string> worker_peers_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Coordinator c;
  c.SetUp();
  fuzz::Input input(data, size);
  static const char* const kPeers[] = {"stranger", "shard", "worker", "worker2"};
  for (int messages = 0; !input.empty() && messages < 16; ++messages) {
    const uint8_t how = input.Byte();
    const size_t frames = 1 + input.Byte() % 8;
    std::vector<Frame> wire;
    for (size_t i = 0; i < frames && !input.empty(); ++i) wire.push_back(input.NextFrame());
    auto envelope = Decode(wire);
    if (envelope.ok()) c.Dispatch(kPeers[how & 3], *envelope);
    c.AfterMessage(how);
  }
  return 0;
}
