// ps_transfer: the parameter server's data path, measured through real shard
// processes (build/bin/shard) and against raw ZeroMQ moving the same bytes.
//
// This program plays the coordinator (a ROUTER that answers RegisterShard with
// a ShardConfig for a synthetic layout: one fp32 parameter tensor of --elems
// elements plus the loss pseudo-tensor, plain SGD) and the workers (one thread
// and one ZeroMQ context per client, speaking Envelopes through schema/Channel,
// so the codec and the shard's service loop are the real ones). It starts the
// server processes itself and stops them (Shutdown, then SIGKILL after a
// bounded wait).
//
//   --mode=transfer  S shards, C clients, V = C (one VW per client). Per step a
//       client pulls version t from every shard, then pushes block [c, c+1) of
//       every chunk (and the loss) for step t; the shard completes the step when
//       every client's block is in, applies SGD and serves version t+1. Against
//       it, raw ZeroMQ: S echo servers (processes) and a DEALER per client that
//       sends the same chunk bytes to each server as one multipart message of the
//       same frames (4 MiB at the default chunk size, zero-copy from one buffer)
//       and receives a reply of the same frames (zero-copy from a preallocated
//       buffer, as the shard answers pulls). Both run in the same process
//       lifetime, in alternating rounds, so noise hits both alike.
//   --mode=share  one client hosting --vws_per_client VWs, as a worker runs them:
//       pull w(t) and copy it into the model, then for each VW a busy loop of
//       --compute_ms (the stand-in for forward/backward), a copy of the gradient
//       into a flat buffer and the tree reduction of the block, then one push per
//       aligned block. Step time minus the compute is the parameter server's
//       share (its copies on the worker included).
//   --mode=raw_server  internal: the raw ZeroMQ echo server started by transfer.
//
// Prints a human-readable table and, for scripts/bench.sh, one JSON object per
// measured configuration on a line of its own ({"mode":"transfer",...}: the only
// stdout lines that start with '{'). Times are medians over the
// measured steps of every client; this never fails on timing.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench/child_process.h"
#include "bench/ps_transfer.h"
#include "common/layout.h"
#include "common/memory.h"
#include "common/pull_groups.h"
#include "common/status.h"
#include "common/tree.h"
#include "common/wire.h"
#include "schema/channel.h"
#include "schema/curve.h"
#include "schema/messages.h"

DEFINE_string(mode, "transfer", "transfer | share | raw_server (internal)");
DEFINE_string(shard_bin, "", "The shard binary (default: 'shard' next to this program)");
DEFINE_uint32(shards, 1, "Server shards (and raw echo servers in transfer mode)");
DEFINE_int32(shard_threads, 1, "Each shard's --threads: the cores its optimizer is cut over");
DEFINE_uint32(clients, 1, "Client threads, each with its own ZeroMQ context (transfer mode)");
DEFINE_int64(elems, 10000000, "fp32 elements of the synthetic parameter tensor");
DEFINE_int64(chunk_elems, 1 << 20, "Largest chunk, in elements (1<<20 = 4 MiB frames)");
DEFINE_uint32(vws_per_client, 8, "share mode: VWs the one client hosts");
DEFINE_double(compute_ms, 10, "share mode: simulated compute per VW (busy loop), ms");
DEFINE_bool(pipelined, true,
            "Push one chunk a message and ask for w(t+1) before the pushes, in the worker's pull "
            "groups, as a worker's last VW and prefetch do (false: one push and one pull a shard)");
DEFINE_int32(warmup, 2, "Unmeasured steps (per kind) before the measured ones");
DEFINE_int32(rounds, 3, "transfer: alternating rounds of raw and PS steps");
DEFINE_int32(iters, 5, "Measured steps per round (transfer) or in all (share)");
DEFINE_string(wire_dtype, "fp32",
              "fp32, bf16 or fp16: the job's gradient and weight wire dtype (the raw "
              "baseline always moves the fp32 bytes)");
DEFINE_string(log_dir, "", "Folder for the servers' logs (empty: discard them)");
DEFINE_int32(timeout_s, 60, "Deadline of every wait (registration, replies, exits)");
// raw_server mode (set by transfer mode when it starts the echo servers)
DEFINE_string(coordinator, "", "raw_server: the endpoint to register with");
DEFINE_uint32(shard_id, 0, "raw_server: its id");
DEFINE_bool(curve, false,
            "transfer: the ElasticPS path (shards and clients) over CURVE (encrypted, "
            "docs/security.md); the raw ZeroMQ baseline stays plain. Compare with a run without");
DEFINE_string(curve_dir, "", "raw_server (internal): the bench's keys, to register over CURVE");

namespace eps {
namespace {

using ps_transfer::BenchCurve;
using ps_transfer::Clock;
using ps_transfer::MakeBenchCurve;
using ps_transfer::MsSince;
using ps_transfer::PrintShare;
using ps_transfer::PrintTransfer;
using ps_transfer::ReportMemoryCost;
using ps_transfer::ReportCipherCost;
using ps_transfer::Setup;
using ps_transfer::StepTimes;
using std::chrono::milliseconds;

// Where a server process's output goes.
std::string LogOf(const std::string& name) {
  return FLAGS_log_dir.empty() ? "/dev/null" : FLAGS_log_dir + "/" + name + ".log";
}

// Raw echo servers register with this id offset so one ROUTER tells them from shards.
constexpr uint32_t kRawIdBase = 1000;

// ---- a barrier for the client threads (C++17 has none) ----------------------

class Barrier {
 public:
  explicit Barrier(size_t n) : n_(n) {}
  // False when the deadline passed first.
  bool Wait(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, timeout, [&] { return generation_ != gen; });
  }

 private:
  const size_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t arrived_ = 0;
  uint64_t generation_ = 0;
};

// ---- the raw ZeroMQ echo server ---------------------------------------------

void NoFree(void*, void*) {}

int RunRawServer() {
  zmq::context_t context(1);
  Channel::Options control_options;
  if (!FLAGS_curve_dir.empty()) {
    auto curve = LoadCurveOptions(FLAGS_curve_dir + "/server.key", FLAGS_curve_dir + "/server.pub");
    if (!curve.ok()) {
      std::fprintf(stderr, "raw_server: %s\n", curve.status().ToString().c_str());
      return 1;
    }
    control_options.curve = *curve;
  }
  auto control = Channel::Connect(&context, FLAGS_coordinator, control_options);
  if (!control.ok()) {
    std::fprintf(stderr, "raw_server: %s\n", control.status().ToString().c_str());
    return 1;
  }
  zmq::socket_t data(context, zmq::socket_type::router);
  data.set(zmq::sockopt::sndhwm, 0);
  data.set(zmq::sockopt::rcvhwm, 0);
  data.set(zmq::sockopt::linger, 0);
  data.bind("tcp://127.0.0.1:*");
  const std::string endpoint = data.get(zmq::sockopt::last_endpoint);
  Status st = (*control)->Send(
      Envelope{"", RegisterShard{ShardId(kRawIdBase + FLAGS_shard_id), endpoint, Step(-1)}});
  if (!st.ok()) {
    std::fprintf(stderr, "raw_server: %s\n", st.ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> reply_bytes;  // the "stored parameters" replies point into
  std::vector<zmq::message_t> parts;
  const auto idle_limit = std::chrono::seconds(FLAGS_timeout_s * 10);
  auto last_activity = Clock::now();
  for (;;) {
    zmq::pollitem_t items[] = {{static_cast<void*>(data), 0, ZMQ_POLLIN, 0},
                               {static_cast<void*>((*control)->socket()), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, milliseconds(1000));
    if (items[1].revents & ZMQ_POLLIN) {
      auto in = (*control)->TryReceive();
      if (in.ok() && in->envelope.ok() && std::holds_alternative<Shutdown>(in->envelope->body))
        return 0;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      last_activity = Clock::now();
      parts.clear();
      do {
        parts.emplace_back();
        if (!data.recv(parts.back(), zmq::recv_flags::dontwait)) {
          parts.pop_back();
          break;
        }
      } while (parts.back().more());
      if (parts.size() < 2) continue;
      size_t total = 0;
      for (size_t i = 1; i < parts.size(); ++i) total += parts[i].size();
      if (reply_bytes.size() < total) reply_bytes.assign(total, 1);
      data.send(parts[0], zmq::send_flags::sndmore);
      size_t off = 0;
      for (size_t i = 1; i < parts.size(); ++i) {
        zmq::message_t m(reply_bytes.data() + off, parts[i].size(), &NoFree, nullptr);
        off += parts[i].size();
        data.send(m, i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } else if (Clock::now() - last_activity > idle_limit) {
      return 3;  // orphaned: the parent died without a Shutdown (PDEATHSIG covers the rest)
    }
  }
}

// ---- the synthetic job ---------------------------------------------------------

std::vector<TensorSpec> Tensors(const Setup& s) {
  TensorSpec w;
  w.name = "w";
  w.kind = TensorKind::kParameter;
  w.dtype = DType::kFloat32;
  w.shape = {s.elems};
  return {w, LossTensor()};
}

ShardConfig MakeConfig(const Setup& s) {
  ShardConfig config;
  config.spec.job_id = "ps_transfer";
  config.spec.model = "synthetic";
  config.spec.virtual_workers = s.V();
  config.spec.batch_per_vw = 1;
  config.spec.steps = s.total_steps;
  config.spec.chunk_elems = s.chunk_elems;
  config.spec.num_shards = s.shards;
  config.spec.optimizer.kind = "sgd";
  config.spec.optimizer.lr = 1e-3;
  config.spec.grad_wire_dtype = s.wire;
  config.spec.weight_wire_dtype = s.wire;
  config.tensors = Tensors(s);
  return config;
}

// One client: a worker's data path against the shards, and the raw baseline.
class Client {
 public:
  Client(const Setup& setup, uint32_t index, const std::vector<std::string>& shard_addrs,
         const std::vector<std::string>& raw_addrs, const Layout& layout)
      : setup_(setup), index_(index), layout_(layout), context_(1) {
    for (const std::string& a : shard_addrs) shard_addrs_.push_back(a);
    for (const std::string& a : raw_addrs) raw_addrs_.push_back(a);
    const size_t flat = static_cast<size_t>(setup_.elems) + 1;  // parameters, then the loss
    gradient_ = std::make_shared<std::vector<float>>(flat, 1e-3f);
    (*gradient_)[setup_.elems] = 0.5f;
    model_.assign(static_cast<size_t>(setup_.elems), 0.25f);
  }

  Status Connect() {
    Channel::Options co;
    co.curve = setup_.curve;
    for (const std::string& a : shard_addrs_) {
      EPS_ASSIGN_OR_RETURN(auto ch, Channel::Connect(&context_, a, co));
      shards_.push_back(std::move(ch));
    }
    for (const std::string& a : raw_addrs_) {
      raw_.emplace_back(context_, zmq::socket_type::dealer);
      raw_.back().set(zmq::sockopt::sndhwm, 0);
      raw_.back().set(zmq::sockopt::rcvhwm, 0);
      raw_.back().set(zmq::sockopt::linger, 0);
      raw_.back().connect(a);
    }
    return OkStatus();
  }

  // Client 0 pushes the initial values (step -1); retried while a shard has no
  // layout yet (its ShardConfig may still be in flight: no message says when it lands).
  Status PushInitialValues(Clock::time_point deadline) {
    auto values = std::make_shared<std::vector<float>>(model_);
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      for (;;) {
        Push push{Epoch(0), Step(-1), Block{0, 1},
                  ChunksOf(s, values, sizeof(float), /*with_loss=*/false)};
        EPS_RETURN_IF_ERROR(shards_[s]->Send(Envelope{"", std::move(push)}));
        Status st = AwaitReply(s).status();
        if (st.ok()) break;
        if (st.code() != StatusCode::kUnavailable || Clock::now() > deadline)
          return st.WithContext("initial push");
        std::this_thread::sleep_for(
            milliseconds(20));  // bounded retry back-off, not a readiness poll
      }
    }
    return OkStatus();
  }

  // One step of the parameter-server path: pull w(t), compute, push the blocks.
  Status PsStep(int64_t t, StepTimes* times) {
    const Step step(t);
    auto t0 = Clock::now();
    EPS_RETURN_IF_ERROR(AwaitPulled(step));
    const double pull_ms = MsSince(t0);
    double compute_ms = 0, worker_ms = 0, tree_ms = 0, push_ms = 0;
    const uint32_t lo = index_ * setup_.vws_per_client, hi = lo + setup_.vws_per_client;
    for (const Block& block : AlignedBlocks(lo, hi)) {
      std::shared_ptr<std::vector<float>> sum = gradient_;
      if (setup_.worker_copies) {
        TreeReducer reducer(block, setup_.V(), gradient_->size(), setup_.wire);
        for (uint32_t v = block.lo; v < block.hi(); ++v) {
          auto c0 = Clock::now();
          if (setup_.compute_ms > 0) {
            const auto end = c0 + std::chrono::duration<double, std::milli>(setup_.compute_ms);
            while (Clock::now() < end) {
            }
          }
          compute_ms += MsSince(c0);
          auto w0 = Clock::now();
          std::vector<float> flat(gradient_->size());  // FlatGradient(): one copy per VW
          std::memcpy(flat.data(), gradient_->data(), flat.size() * sizeof(float));
          auto r0 = Clock::now();
          EPS_RETURN_IF_ERROR(reducer.Add(Block{v, 1}, std::move(flat)));
          tree_ms += MsSince(r0);
          worker_ms += MsSince(w0);
        }
        auto w0 = Clock::now();
        sum = std::make_shared<std::vector<float>>(reducer.TakeResult());
        worker_ms += MsSince(w0);
      }
      std::shared_ptr<std::vector<uint16_t>>
          encoded;  // the partial in the wire dtype, as worker.cc's PushBlock
      if (setup_.wire != WireDType::kFP32) {
        auto w0 = Clock::now();
        encoded = std::make_shared<std::vector<uint16_t>>(sum->size());
        EncodeWire(setup_.wire, sum->data(), sum->size(), encoded->data());
        worker_ms += MsSince(w0);
      }
      auto p0 = Clock::now();
      if (setup_.pipelined && pulling_ != t + 1) EPS_RETURN_IF_ERROR(SendPulls(Step(t + 1)));
      for (uint32_t s = 0; s < shards_.size(); ++s) {
        std::vector<ChunkBytes> chunks =
            encoded ? ChunksOf(s, encoded, sizeof(uint16_t), /*with_loss=*/true)
                    : ChunksOf(s, sum, sizeof(float), /*with_loss=*/true);
        if (!setup_.pipelined) {
          EPS_RETURN_IF_ERROR(SendPush(s, Push{Epoch(0), step, block, std::move(chunks)}));
          continue;
        }
        // One chunk a message, the last parameter chunk first (backward's order), the loss last.
        std::reverse(chunks.begin(), chunks.end());
        std::stable_partition(chunks.begin(), chunks.end(), [&](const ChunkBytes& c) {
          return layout_.tensors[layout_.chunks[c.chunk.value()].tensor].kind != TensorKind::kLoss;
        });
        for (ChunkBytes& c : chunks)
          EPS_RETURN_IF_ERROR(SendPush(s, Push{Epoch(0), step, block, {std::move(c)}}));
      }
      push_ms += MsSince(p0);
    }
    auto p0 = Clock::now();
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      while (outstanding_[s] > 0) EPS_RETURN_IF_ERROR(ReceiveOne(s));
    }
    push_ms += MsSince(p0);
    if (times != nullptr) {
      times->Add(pull_ms, compute_ms, worker_ms, push_ms);
      times->tree.push_back(tree_ms);
    }
    return OkStatus();
  }

  // Pulls version `v` of every shard's chunks: one request a shard, or with --pipelined one a
  // chunk group of the worker's (PullGroupsOf), each answered once its chunks are stepped. The
  // replies are taken by ReceiveOne.
  Status SendPulls(Step v) {
    pulling_ = v.value();
    pulled_.assign(shards_.size(), 0);
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      for (const std::vector<ChunkId>& group : pull_groups_[s]) {
        EPS_RETURN_IF_ERROR(shards_[s]->Send(Envelope{"", eps::Pull{v, group, setup_.wire}}));
        ++pull_answers_[s];
      }
    }
    return OkStatus();
  }

  // Waits for version `v`, asked for now unless a prefetch asked for it already.
  Status AwaitPulled(Step v) {
    if (pulling_ != v.value()) EPS_RETURN_IF_ERROR(SendPulls(v));
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      while (pull_answers_[s] > 0) EPS_RETURN_IF_ERROR(ReceiveOne(s));
      if (pulled_[s] != pulled_per_shard_[s]) return ProtocolError("a pull reply lacks chunks");
    }
    pulling_ = -1;
    return OkStatus();
  }

  Status SendPush(uint32_t s, Push push) {
    EPS_RETURN_IF_ERROR(shards_[s]->Send(Envelope{"", std::move(push)}));
    ++outstanding_[s];
    return OkStatus();
  }

  // Takes shard s's next reply: a push's, or a pull's, whose chunks go into the model.
  Status ReceiveOne(uint32_t s) {
    EPS_ASSIGN_OR_RETURN(Envelope reply, AwaitReply(s));
    if (std::holds_alternative<PushReply>(reply.body) && outstanding_[s] > 0) {
      --outstanding_[s];
      return OkStatus();
    }
    auto* pulled = std::get_if<PullReply>(&reply.body);
    if (pulled == nullptr || pulled->version.value() != pulling_ || pull_answers_[s] == 0)
      return Internal("a shard answered with something else");
    --pull_answers_[s];
    for (const ChunkBytes& cb : pulled->chunks) {
      if (cb.chunk.value() >= layout_.chunks.size())
        return ProtocolError("pulled an unknown chunk");
      const Chunk& c = layout_.chunks[cb.chunk.value()];
      if (cb.size != layout_.WireBytes(c, setup_.wire)) {
        return ProtocolError("pulled chunk of the wrong size");
      }
      // PullInto(): a copy, or the decoding from the wire dtype, which the worker always does.
      if (setup_.worker_copies || setup_.wire != WireDType::kFP32) {
        DecodeWire(setup_.wire, cb.data, static_cast<size_t>(c.numel), model_.data() + c.offset);
      }
      ++pulled_[s];
    }
    return OkStatus();
  }

  // One raw round trip: each server gets the bytes of its shard's chunks as the
  // same frames, zero-copy, and answers with frames of the same sizes.
  Status RawStep(StepTimes* times) {
    auto t0 = Clock::now();
    for (uint32_t s = 0; s < raw_.size(); ++s) {
      const std::vector<ChunkBytes> chunks =
          ChunksOf(s, gradient_, sizeof(float), /*with_loss=*/false);
      for (size_t i = 0; i < chunks.size(); ++i) {
        zmq::message_t m(const_cast<void*>(chunks[i].data), chunks[i].size, &NoFree, nullptr);
        raw_[s].send(m, i + 1 < chunks.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
    for (uint32_t s = 0; s < raw_.size(); ++s) {
      zmq::pollitem_t item{static_cast<void*>(raw_[s]), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, milliseconds(FLAGS_timeout_s * 1000)) == 0)
        return DeadlineExceeded("raw reply");
      size_t bytes = 0;
      zmq::message_t m;
      do {
        if (!raw_[s].recv(m, zmq::recv_flags::none)) return Internal("raw receive");
        bytes += m.size();
      } while (m.more());
      if (bytes == 0) return ProtocolError("empty raw reply");
    }
    if (times != nullptr) times->Add(0, 0, 0, MsSince(t0));
    return OkStatus();
  }

  void CountPulledChunks() {
    pulled_per_shard_.assign(shards_.size(), 0);
    for (const Chunk& c : layout_.chunks) {
      if (layout_.tensors[c.tensor].kind != TensorKind::kLoss) ++pulled_per_shard_[c.shard.value()];
    }
    outstanding_.assign(shards_.size(), 0);
    pull_answers_.assign(shards_.size(), 0);
    pull_groups_ = PullGroupsOf(layout_, setup_.wire, {});
    if (!setup_.pipelined) {
      for (auto& groups : pull_groups_) groups.assign(1, {});  // one request: every chunk
    }
  }

 private:
  // The chunks of `shard` in `flat`, the parameters then the loss in elements of `elem` bytes.
  template <class T>
  std::vector<ChunkBytes> ChunksOf(uint32_t shard, const std::shared_ptr<std::vector<T>>& flat,
                                   size_t elem, bool with_loss) const {
    std::vector<ChunkBytes> out;
    const auto* base = reinterpret_cast<const uint8_t*>(flat->data());
    for (const Chunk& c : layout_.chunks) {
      if (c.shard.value() != shard) continue;
      const bool loss = layout_.tensors[c.tensor].kind == TensorKind::kLoss;
      if (loss && !with_loss) continue;
      const size_t at = static_cast<size_t>(loss ? setup_.elems : c.offset) * elem;
      out.push_back(ChunkBytes{c.id, base + at, static_cast<size_t>(c.numel) * elem, flat});
    }
    return out;
  }

  StatusOr<Envelope> AwaitReply(uint32_t s) {
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in,
                         shards_[s]->Receive(milliseconds(FLAGS_timeout_s * 1000)));
    if (!in.envelope.ok()) return in.envelope.status();
    if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) return err->ToStatus();
    return std::move(in.envelope).value();
  }

  const Setup setup_;
  const uint32_t index_;
  const Layout& layout_;
  zmq::context_t context_;
  std::vector<std::string> shard_addrs_, raw_addrs_;
  std::vector<std::unique_ptr<Channel>> shards_;
  std::vector<zmq::socket_t> raw_;
  std::shared_ptr<std::vector<float>> gradient_;  // what every VW "computes"
  std::vector<float> model_;
  std::vector<size_t> pulled_per_shard_;
  std::vector<int> outstanding_;                                // pushes not answered yet, by shard
  std::vector<std::vector<std::vector<ChunkId>>> pull_groups_;  // by shard: a pull's requests
  int64_t pulling_ = -1;           // the version asked for and not yet taken whole (-1: none)
  std::vector<int> pull_answers_;  // by shard: pull requests not answered yet
  std::vector<size_t> pulled_;     // by shard: chunks of `pulling_` taken
};

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// The coordinator's side: starts the servers, configures the shards, runs the
// clients, stops everything.
class Bench {
 public:
  explicit Bench(Setup setup) : setup_(setup), context_(1) {}
  ~Bench() {
    Reap(&children_, Clock::now());
    if (!curve_dir_.empty()) std::system(("rm -rf '" + curve_dir_ + "'").c_str());
  }

  Status Start(bool with_raw) {
    if (FLAGS_curve) {
      EPS_ASSIGN_OR_RETURN(BenchCurve curve, MakeBenchCurve());
      curve_dir_ = curve.dir;
      server_curve_ = curve.server;
      setup_.curve = curve.client;
    }
    Channel::Options co;
    co.curve = server_curve_;
    EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Bind(&context_, "tcp://127.0.0.1:0", co));
    const std::string shard_bin = FLAGS_shard_bin.empty() ? SelfDir() + "/shard" : FLAGS_shard_bin;
    const std::string self = SelfDir() + "/ps_transfer";
    if (access(shard_bin.c_str(), X_OK) != 0) return NotFound(shard_bin + " is not an executable");
    const std::string coord = "--coordinator=" + coordinator_->endpoint();
    for (uint32_t s = 0; s < setup_.shards; ++s) {
      const std::string id = "--shard_id=" + std::to_string(s);
      const std::string pull_wait = "--pull_wait_ms=" + std::to_string(FLAGS_timeout_s * 1000);
      const std::string shard = "shard" + std::to_string(s), raw = "raw" + std::to_string(s);
      std::vector<std::string> args = {shard_bin, coord, id, pull_wait,
                                       "--threads=" + std::to_string(FLAGS_shard_threads)};
      if (!curve_dir_.empty()) {
        args.push_back("--curve_secret_key=" + curve_dir_ + "/server.key");
        args.push_back("--allowed_keys=" + curve_dir_ + "/client.pub");
      }
      EPS_ASSIGN_OR_RETURN(Child c, Spawn(args, shard, LogOf(shard)));
      children_.push_back(c);
      if (with_raw) {
        EPS_ASSIGN_OR_RETURN(Child r, Spawn({self, "--mode=raw_server", coord, id,
                                             "--timeout_s=" + std::to_string(FLAGS_timeout_s),
                                             "--curve_dir=" + curve_dir_},
                                            raw, LogOf(raw)));
        children_.push_back(r);
      }
    }
    const size_t expected = setup_.shards * (with_raw ? 2 : 1);
    shard_peers_.assign(setup_.shards, "");
    shard_addrs_.assign(setup_.shards, "");
    raw_peers_.assign(with_raw ? setup_.shards : 0, "");
    raw_addrs_.assign(with_raw ? setup_.shards : 0, "");
    const auto deadline = Clock::now() + std::chrono::seconds(FLAGS_timeout_s);
    for (size_t got = 0; got < expected;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        return DeadlineExceeded("the servers did not register in time (see --log_dir)");
      auto in = coordinator_->Receive(left);
      if (!in.ok()) {
        if (in.status().code() == StatusCode::kDeadlineExceeded) continue;
        return in.status();
      }
      if (!in->envelope.ok()) return in->envelope.status().WithContext("a server's registration");
      auto* reg = std::get_if<RegisterShard>(&in->envelope->body);
      if (reg == nullptr)
        return Internal(std::string("unexpected ") + BodyName(in->envelope->body));
      const uint32_t id = reg->shard.value();
      if (id >= kRawIdBase && id - kRawIdBase < raw_peers_.size()) {
        raw_peers_[id - kRawIdBase] = in->peer;
        raw_addrs_[id - kRawIdBase] = reg->address;
      } else if (id < setup_.shards) {
        shard_peers_[id] = in->peer;
        shard_addrs_[id] = reg->address;
        EPS_RETURN_IF_ERROR(coordinator_->SendTo(in->peer, Envelope{"", MakeConfig(setup_)}));
      } else {
        return Internal("registration of unknown server " + std::to_string(id));
      }
      ++got;
    }
    EPS_ASSIGN_OR_RETURN(layout_, MakeLayout(Tensors(setup_), setup_.shards, setup_.chunk_elems));
    return OkStatus();
  }

  // Runs `body(client, barrier)` on one thread per client while this thread
  // serves the coordinator's socket (StepDone reports, errors from the shards).
  template <class Body>
  Status RunClients(Body body) {
    std::vector<std::unique_ptr<Client>> clients;
    for (uint32_t c = 0; c < setup_.clients; ++c) {
      clients.push_back(std::make_unique<Client>(setup_, c, shard_addrs_, raw_addrs_, layout_));
    }
    Barrier barrier(setup_.clients);
    std::vector<Status> results(setup_.clients);
    std::atomic<uint32_t> finished{0};
    std::vector<std::thread> threads;
    for (uint32_t c = 0; c < setup_.clients; ++c) {
      threads.emplace_back([&, c] {
        Client& cl = *clients[c];
        Status st = cl.Connect();
        if (st.ok()) {
          cl.CountPulledChunks();
          st = body(c, cl, barrier);
        }
        results[c] = st;
        finished.fetch_add(1);
      });
    }
    Status shard_error;
    while (finished.load() < setup_.clients) {
      auto in = coordinator_->Receive(milliseconds(100));
      if (!in.ok() || !in->envelope.ok()) continue;
      if (auto* err = std::get_if<ErrorReply>(&in->envelope->body)) shard_error = err->ToStatus();
    }
    for (std::thread& t : threads) t.join();
    EPS_RETURN_IF_ERROR(shard_error.WithContext("a shard"));
    for (uint32_t c = 0; c < setup_.clients; ++c) {
      EPS_RETURN_IF_ERROR(results[c].WithContext("client " + std::to_string(c)));
    }
    return OkStatus();
  }

  void Stop() {
    for (const std::string& p : shard_peers_) {
      if (!p.empty()) (void)coordinator_->SendTo(p, Envelope{"", Shutdown{"benchmark done"}});
    }
    for (const std::string& p : raw_peers_) {
      if (!p.empty()) (void)coordinator_->SendTo(p, Envelope{"", Shutdown{"benchmark done"}});
    }
    Reap(&children_, Clock::now() + std::chrono::seconds(FLAGS_timeout_s));
  }

 private:
  Setup setup_;
  zmq::context_t context_;
  std::string curve_dir_;      // with --curve: the keys
  CurveOptions server_curve_;  // with --curve: the coordinator's
  std::unique_ptr<Channel> coordinator_;
  std::vector<Child> children_;
  std::vector<std::string> shard_peers_, shard_addrs_, raw_peers_, raw_addrs_;
  Layout layout_;
};

// The first step is version 0 (the initial values): client 0 pushes them.
Status Initialize(uint32_t c, Client& client, Barrier& barrier) {
  const auto deadline = Clock::now() + std::chrono::seconds(FLAGS_timeout_s);
  if (c == 0) EPS_RETURN_IF_ERROR(client.PushInitialValues(deadline));
  if (!barrier.Wait(milliseconds(FLAGS_timeout_s * 1000)))
    return DeadlineExceeded("clients out of step");
  return OkStatus();
}

// What both modes take from the flags; false (with a line on stderr) when
// --wire_dtype names no wire dtype.
bool SetupFromFlags(Setup* setup) {
  auto wire = ParseWireDType(FLAGS_wire_dtype);
  if (!wire.ok()) {
    std::fprintf(stderr, "ps_transfer: --wire_dtype: %s\n", wire.status().ToString().c_str());
    return false;
  }
  setup->wire = *wire;
  setup->shards = FLAGS_shards;
  setup->elems = FLAGS_elems;
  setup->chunk_elems = FLAGS_chunk_elems;
  setup->pipelined = FLAGS_pipelined;
  return true;
}

int RunTransfer() {
  Setup setup;
  if (!SetupFromFlags(&setup)) return 2;
  setup.clients = FLAGS_clients;
  setup.vws_per_client = 1;
  setup.total_steps = int64_t{FLAGS_rounds} * (FLAGS_iters + FLAGS_warmup) + 1;
  Bench bench(setup);
  Status st = bench.Start(/*with_raw=*/true);
  std::mutex mu;
  StepTimes ps, raw;
  if (st.ok()) {
    st = bench.RunClients([&](uint32_t c, Client& client, Barrier& barrier) -> Status {
      EPS_RETURN_IF_ERROR(Initialize(c, client, barrier));
      StepTimes my_ps, my_raw;
      int64_t t = 0;
      const milliseconds wait(FLAGS_timeout_s * 1000);
      for (int r = 0; r < FLAGS_rounds; ++r) {
        if (!barrier.Wait(wait)) return DeadlineExceeded("clients out of step");
        for (int i = 0; i < FLAGS_warmup + FLAGS_iters; ++i) {
          EPS_RETURN_IF_ERROR(client.RawStep(i < FLAGS_warmup ? nullptr : &my_raw));
        }
        if (!barrier.Wait(wait)) return DeadlineExceeded("clients out of step");
        for (int i = 0; i < FLAGS_warmup + FLAGS_iters; ++i, ++t) {
          EPS_RETURN_IF_ERROR(client.PsStep(t, i < FLAGS_warmup ? nullptr : &my_ps));
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      ps.Append(my_ps);
      raw.Append(my_raw);
      return OkStatus();
    });
  }
  bench.Stop();
  if (!st.ok()) {
    std::fprintf(stderr, "ps_transfer: %s\n", st.ToString().c_str());
    return 1;
  }
  PrintTransfer(setup, ps, raw, FLAGS_curve);
  ReportMemoryCost(static_cast<size_t>(FLAGS_elems) * sizeof(float));
  if (FLAGS_curve) {
    ReportCipherCost(static_cast<size_t>(FLAGS_elems) * sizeof(float),
                     static_cast<size_t>(setup.chunk_elems) * sizeof(float));
  }
  return 0;
}

int RunShare() {
  Setup setup;
  if (!SetupFromFlags(&setup)) return 2;
  setup.clients = 1;
  setup.vws_per_client = FLAGS_vws_per_client;
  setup.total_steps = FLAGS_warmup + FLAGS_iters + 1;
  setup.worker_copies = true;
  setup.compute_ms = FLAGS_compute_ms;
  Bench bench(setup);
  Status st = bench.Start(/*with_raw=*/false);
  StepTimes times;
  if (st.ok()) {
    st = bench.RunClients([&](uint32_t c, Client& client, Barrier& barrier) -> Status {
      EPS_RETURN_IF_ERROR(Initialize(c, client, barrier));
      for (int i = 0; i < FLAGS_warmup + FLAGS_iters; ++i) {
        EPS_RETURN_IF_ERROR(client.PsStep(i, i < FLAGS_warmup ? nullptr : &times));
      }
      return OkStatus();
    });
  }
  bench.Stop();
  if (!st.ok()) {
    std::fprintf(stderr, "ps_transfer: %s\n", st.ToString().c_str());
    return 1;
  }
  PrintShare(setup, times);
  ReportMemoryCost(static_cast<size_t>(FLAGS_elems) * sizeof(float));
  return 0;
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "ps_transfer --mode=transfer|share [--shards=S --clients=C --elems=N ...]");
  // As the workers it stands in for (and the shards it starts) do; MALLOC_ARENA_MAX from the
  // environment still applies.
  eps::KeepFreedMemory();
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::signal(SIGPIPE, SIG_IGN);
  if (FLAGS_shards < 1 || FLAGS_clients < 1 || FLAGS_elems < 1 || FLAGS_chunk_elems < 1 ||
      FLAGS_iters < 1 || FLAGS_rounds < 1 || FLAGS_warmup < 0 || FLAGS_vws_per_client < 1 ||
      FLAGS_timeout_s < 1) {
    std::fprintf(stderr, "ps_transfer: counts and sizes must be positive\n");
    return 2;
  }
  if (FLAGS_mode == "raw_server") return eps::RunRawServer();
  if (FLAGS_mode == "transfer") return eps::RunTransfer();
  if (FLAGS_mode == "share") return eps::RunShare();
  std::fprintf(stderr, "ps_transfer: unknown --mode '%s'\n", FLAGS_mode.c_str());
  return 2;
}
