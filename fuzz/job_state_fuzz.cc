// libFuzzer target: the coordinator's handling of a message, from an unknown
// peer or a known one, against a live JobState (elastic/job_state.h) with a
// FakeClock. The job has its shard registered and one worker that reported
// its model before the first message. Each message goes through the
// coordinator's own dispatch (DispatchMessage, elastic/coordinator_dispatch.h);
// what it would send back is dropped.
//
// Input: messages one after another, each a byte (bits 0-1: the sender, an
// unknown peer, the shard, or a worker; bit 2: then Tick; bits 3-7: advance the
// clock by that many 250 ms first), a byte (how many frames, 1 to 8) and the
// frames (fuzz/fuzz_input.h).
#include <cstdint>
#include <string>

#include "elastic/coordinator_dispatch.h"
#include "elastic/job_state.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_jobs.h"

namespace {

using namespace eps;

class Coordinator {
 public:
  Coordinator() : state_(fuzz::FuzzSpec(), Options(), &clock_) {}

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

  // The coordinator's dispatch, less the replies (a status report is built all the same).
  void Dispatch(const std::string& peer, const Envelope& envelope) {
    const Dispatched d = DispatchMessage(peer, envelope.body, &state_, &peers_);
    if (d.status_report) (void)state_.StatusReport();
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
  FakeClock clock_;
  JobState state_;
  CoordinatorPeers peers_;
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
