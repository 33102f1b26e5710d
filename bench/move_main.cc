// move_bench: what moving state between running shards costs (issue #39,
// docs/design.md "Elastic shards"), against raw ZeroMQ moving the same bytes in
// the same run.
//
// Three shards run in this process, each on its own thread with its own fake
// coordinator (this program). A model of --mb MiB of fp32 parameters (one
// tensor, chunks of --chunk_elems) under Adam is spread over shards 0 and 1,
// given its initial values and one step (so every chunk has its two Adam slots:
// the state is 3x the parameters). Then, --reps times, the shards move to the
// other map: {0,1} -> {0,1,2} (shard 2 takes a third of the state) and back.
// Timed: from the Reshard sent to every shard's ReshardReady ("transfer": the
// holders' pages, CRC-32 on both ends, the receivers' copies), and from the
// committing ShardConfig to every shard's answer ("commit": AdoptMap; no store,
// so no checkpoint). Baseline: the same bytes from a DEALER to a ROUTER in
// frames of 32 MiB, each copied out as the mover stages it. Prints one line per
// move and a table of medians.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/layout.h"
#include "common/memory.h"
#include "common/shard_map.h"
#include "schema/channel.h"
#include "server/shard.h"

DEFINE_int64(mb, 256, "MiB of fp32 parameters in the model (under Adam the state is 3x)");
DEFINE_int64(chunk_elems, 1 << 20, "elements per chunk");
DEFINE_int32(reps, 4, "moves (alternately to three shards and back to two)");

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr auto kWait = std::chrono::seconds(120);

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct RunningShard {
  std::unique_ptr<Channel> coordinator;  // this program, the shard's coordinator
  std::string peer;                      // the shard's routing id there
  std::string address;
  std::unique_ptr<Shard> shard;
  std::thread thread;
  volatile bool stop = false;
  Status status;
  std::unique_ptr<Channel> client;  // as a worker

  // The next message of type M from the shard.
  template <class M>
  StatusOr<M> Next() {
    const auto deadline = Clock::now() + kWait;
    while (Clock::now() < deadline) {
      auto in = coordinator->Receive(milliseconds(1000));
      if (!in.ok() || !in->envelope.ok()) continue;
      peer = in->peer;
      if (auto* m = std::get_if<M>(&in->envelope->body)) return *m;
    }
    return DeadlineExceeded("no answer from the shard");
  }
  Status Tell(Body body) { return coordinator->SendTo(peer, Envelope{"", std::move(body)}); }
  Status Push(const eps::Push& push) {
    for (int i = 0; i < 1000; ++i) {
      auto reply = Call(client.get(), Envelope{"", push}, kWait);
      if (reply.ok())
        return std::holds_alternative<PushReply>(reply->body)
                   ? OkStatus()
                   : Internal(std::string("push answered ") + BodyName(reply->body));
      if (reply.status().code() != StatusCode::kUnavailable) return reply.status();
      std::this_thread::sleep_for(milliseconds(10));  // not configured yet
    }
    return DeadlineExceeded("the shard never took the push");
  }
};

Status Start(zmq::context_t* context, uint32_t id, RunningShard* s) {
  EPS_ASSIGN_OR_RETURN(s->coordinator, Channel::Bind(context, "tcp://127.0.0.1:0"));
  ShardOptions o;
  o.shard = ShardId(id);
  o.coordinator = s->coordinator->endpoint();
  o.max_message_bytes = -1;
  EPS_ASSIGN_OR_RETURN(s->shard, Shard::Open(o, context));
  s->thread = std::thread([s] { s->status = s->shard->Run(&s->stop); });
  EPS_ASSIGN_OR_RETURN(RegisterShard reg, s->Next<RegisterShard>());
  s->address = reg.address;
  EPS_ASSIGN_OR_RETURN(s->client, Channel::Connect(context, s->address));
  return OkStatus();
}

// Chunk `c`'s values for `step` (-1: the initial values): any floats do.
Push PushOf(const Layout& layout, ShardId shard, int step) {
  Push p;
  p.epoch = Epoch(1);
  p.step = Step(step);
  p.block = Block{0, 1};
  for (const Chunk& c : layout.chunks) {
    if (c.shard != shard) continue;
    if (step < 0 && layout.tensors[c.tensor].kind == TensorKind::kLoss) continue;
    auto v = std::make_shared<std::vector<float>>(static_cast<size_t>(c.numel),
                                                  0.001f * static_cast<float>(c.id.value() + 1));
    p.chunks.push_back({c.id, v->data(), v->size() * sizeof(float), v});
  }
  return p;
}

// Seconds to move `bytes` from a DEALER to a ROUTER in frames of 32 MiB, each copied out.
StatusOr<double> RawSeconds(zmq::context_t* context, uint64_t bytes) {
  zmq::socket_t router(*context, zmq::socket_type::router),
      dealer(*context, zmq::socket_type::dealer);
  router.bind("tcp://127.0.0.1:*");
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  const size_t frame = size_t{32} << 20;
  std::vector<char> source(frame, 1);
  const auto start = Clock::now();
  std::thread sender([&] {
    for (uint64_t sent = 0; sent < bytes; sent += frame)
      dealer.send(zmq::buffer(source.data(), std::min<uint64_t>(frame, bytes - sent)));
  });
  std::string staged;
  for (uint64_t got = 0; got < bytes;) {
    zmq::message_t id, body;
    if (!router.recv(id) || !router.recv(body)) return Internal("raw receive failed");
    staged.assign(static_cast<const char*>(body.data()), body.size());
    got += body.size();
  }
  sender.join();
  return Since(start);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Status Run() {
  zmq::context_t context(2);
  const int64_t elems = FLAGS_mb << 18;
  std::vector<TensorSpec> tensors = {{"w", TensorKind::kParameter, DType::kFloat32, {elems}},
                                     LossTensor()};
  JobSpec spec;
  spec.job_id = "move-bench";
  spec.model = "mlp";
  spec.virtual_workers = 1;
  spec.batch_per_vw = 1;
  spec.steps = 100;
  spec.optimizer.kind = "adam";
  spec.optimizer.lr = 0.001;
  spec.chunk_elems = FLAGS_chunk_elems;
  spec.num_shards = 2;
  EPS_ASSIGN_OR_RETURN(Layout layout, MakeLayout(tensors, 2, FLAGS_chunk_elems));

  std::vector<RunningShard> shards(3);
  for (uint32_t s = 0; s < 3; ++s) EPS_RETURN_IF_ERROR(Start(&context, s, &shards[s]));
  for (auto& s : shards) EPS_RETURN_IF_ERROR(s.Tell(ShardConfig{spec, tensors, 1, layout.map}));
  for (uint32_t s = 0; s < 2; ++s) {
    EPS_RETURN_IF_ERROR(shards[s].Push(PushOf(layout, ShardId(s), -1)));
    EPS_RETURN_IF_ERROR(shards[s].Push(PushOf(layout, ShardId(s), 0)));
  }
  const std::vector<std::string> addresses = {shards[0].address, shards[1].address,
                                              shards[2].address};
  std::printf("model: %lld MiB of fp32 parameters in %zu chunks, Adam (state %lld MiB)\n",
              static_cast<long long>(FLAGS_mb), layout.chunks.size() - 1,
              static_cast<long long>(3 * FLAGS_mb));
  std::vector<double> transfer_rate, raw_rate, commit_s;
  ShardMap map = layout.map;
  for (int rep = 0; rep < FLAGS_reps; ++rep) {
    const bool grow = rep % 2 == 0;
    std::vector<ShardId> to = {ShardId(0), ShardId(1)};
    if (grow) to.push_back(ShardId(2));
    EPS_ASSIGN_OR_RETURN(ShardMap next, Rebalance(map, layout.ChunkSizes(), to));
    const auto start = Clock::now();
    for (auto& s : shards) EPS_RETURN_IF_ERROR(s.Tell(Reshard{next, Step(1), addresses}));
    uint64_t moved = 0;
    for (auto& s : shards) {
      EPS_ASSIGN_OR_RETURN(ReshardReady ready, s.Next<ReshardReady>());
      EPS_RETURN_IF_ERROR(ready.ToStatus());
      moved += ready.bytes_in;
    }
    const double transfer = Since(start);
    const auto commit = Clock::now();
    for (auto& s : shards) EPS_RETURN_IF_ERROR(s.Tell(ShardConfig{spec, tensors, 1, next}));
    for (auto& s : shards) {
      EPS_ASSIGN_OR_RETURN(ReshardReady took, s.Next<ReshardReady>());
      EPS_RETURN_IF_ERROR(took.ToStatus());
    }
    commit_s.push_back(Since(commit));
    map = next;
    EPS_ASSIGN_OR_RETURN(double raw, RawSeconds(&context, moved));
    const double mib = static_cast<double>(moved) / (1 << 20);
    transfer_rate.push_back(mib / transfer);
    raw_rate.push_back(mib / raw);
    std::printf(
        "move %d (%s): %.0f MiB in %.3f s (%.0f MiB/s), commit %.3f s; raw ZeroMQ %.3f s "
        "(%.0f MiB/s)\n",
        rep + 1, grow ? "2 -> 3 shards" : "3 -> 2 shards", mib, transfer, mib / transfer,
        commit_s.back(), raw, mib / raw);
  }
  std::printf("\n| figure | median |\n|---|---|\n");
  std::printf("| move, MiB/s (transfer: pages, CRC-32 both ends, staging) | %.0f |\n",
              Median(transfer_rate));
  std::printf("| raw ZeroMQ, same bytes, MiB/s | %.0f |\n", Median(raw_rate));
  std::printf("| move / raw | %.2f |\n", Median(transfer_rate) / Median(raw_rate));
  std::printf("| commit (AdoptMap on every shard), s | %.3f |\n", Median(commit_s));
  for (auto& s : shards) {
    (void)s.Tell(Shutdown{"bench over"});
    s.thread.join();
  }
  return OkStatus();
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = false;
  FLAGS_minloglevel = 2;
  eps::KeepFreedMemory();
  eps::Status st = eps::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "move_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
