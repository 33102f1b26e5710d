#include "worker/worker.h"

#include <glog/logging.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "common/layout.h"
#include "common/shm.h"
#include "common/task_thread.h"
#include "common/threads.h"
#include "common/tree.h"
#include "common/wire.h"
#include "schema/channel.h"
#include "worker/model_runner.h"
#include "worker/sampler.h"

namespace eps {
namespace {

using Bytes = std::shared_ptr<std::vector<uint8_t>>;
using std::chrono::milliseconds;

// Longest slice of any wait between two looks at the stop flag.
constexpr milliseconds kStopCheck(100);
// The reason a worker stopped by a signal gives in its Leave.
constexpr char kStopReason[] = "SIGTERM";
// Re-registrations in a row, without a plan in between, before the worker gives up.
constexpr int kMaxReregistrations = 3;
constexpr milliseconds kRegisterRepeat(
    2000);  // an unanswered registration is sent again after this

// Sends Heartbeat{worker} to the coordinator every `interval` from its own
// thread and DEALER socket (a ZeroMQ socket belongs to one thread), until
// Stop(), and logs the error replies it gets (the coordinator answers a beat
// only when it does not know the worker). A refusal that says the coordinator
// does not know the worker (Aborted, NotFound) sets refused(), which the main
// thread watches while it waits for a plan: a restarted coordinator has
// forgotten the request and will never answer it. SetWorker(), refused() may
// be called from any thread; Stop() from the thread that owns the object.
class Heartbeater {
 public:
  static StatusOr<std::unique_ptr<Heartbeater>> Start(zmq::context_t* context,
                                                      const std::string& endpoint,
                                                      std::string token, milliseconds interval,
                                                      WorkerId worker) {
    EPS_ASSIGN_OR_RETURN(auto channel, Connect(context, endpoint));
    std::unique_ptr<Heartbeater> hb(
        new Heartbeater(context, endpoint, std::move(token), interval, worker));
    Heartbeater* raw = hb.get();
    EPS_ASSIGN_OR_RETURN(
        hb->thread_, StartThreadWithoutStopSignals(
                         [raw, ch = std::move(channel)]() mutable { raw->Loop(std::move(ch)); }));
    return hb;
  }

  ~Heartbeater() { Stop(); }

  // Beats for `worker` from now on (after a re-registration), on a fresh
  // socket, and clears refused(): what the old socket still receives answers
  // beats from before the registration.
  void SetWorker(WorkerId worker) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker_ = worker;
      ++registration_;  // also with the same id: a restarted coordinator may give it again
      refused_ = false;
    }
    cv_.notify_all();
  }

  // The coordinator refused a beat of the current registration as unknown or dead.
  bool refused() const { return refused_.load(); }

  // Stops beating and joins the thread; returns within about one send.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Heartbeater(zmq::context_t* context, std::string endpoint, std::string token,
              milliseconds interval, WorkerId worker)
      : context_(context),
        endpoint_(std::move(endpoint)),
        token_(std::move(token)),
        interval_(interval),
        worker_(worker) {}

  static StatusOr<std::unique_ptr<Channel>> Connect(zmq::context_t* context,
                                                    const std::string& endpoint) {
    Channel::Options co;
    co.linger_ms = 0;  // a beat not sent by the time we exit is worthless
    return Channel::Connect(context, endpoint, co);
  }

  void Loop(std::unique_ptr<Channel> channel) {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t beating = registration_;  // every beat on `channel` was sent after this registration
    int64_t refusals = 0;              // error replies on `channel`
    while (!stop_) {
      const WorkerId worker = worker_;
      const uint64_t registration = registration_;
      lock.unlock();
      if (registration != beating) {
        // Refusals of beats sent before the registration still in flight go with the old socket.
        auto fresh = Connect(context_, endpoint_);
        if (fresh.ok()) {
          channel = std::move(fresh).value();
        } else {
          LOG(WARNING) << "heartbeat: no fresh socket for worker " << worker << ": "
                       << fresh.status().ToString();
        }
        beating = registration;
        refusals = 0;
      }
      // Replies to earlier beats first: only errors come back.
      while (true) {
        StatusOr<Channel::Incoming> in = channel->TryReceive();
        if (!in.ok()) break;
        if (!in->envelope.ok()) {
          LOG(WARNING) << "heartbeat: bad reply from the coordinator: "
                       << in->envelope.status().ToString();
        } else if (auto* err = std::get_if<ErrorReply>(&in->envelope->body)) {
          // Logged once per registration and then every 20th.
          if (refusals++ % 20 == 0) {
            LOG(WARNING) << "the coordinator refused a heartbeat (" << refusals << " since worker "
                         << worker << " began): " << err->ToStatus().ToString();
          }
          if (err->code == StatusCode::kAborted || err->code == StatusCode::kNotFound) {
            std::lock_guard<std::mutex> guard(mu_);
            if (registration_ == registration)
              refused_ = true;  // not if SetWorker() came meanwhile
          }
        } else {
          LOG(WARNING) << "heartbeat: unexpected " << BodyName(in->envelope->body)
                       << " from the coordinator";
        }
      }
      Status st = channel->Send(Envelope{token_, Heartbeat{worker}});
      if (!st.ok()) LOG(WARNING) << "heartbeat not sent: " << st.ToString();
      lock.lock();
      cv_.wait_for(lock, interval_, [&] { return stop_ || registration_ != registration; });
    }
  }

  zmq::context_t* const context_;
  const std::string endpoint_;
  const std::string token_;
  const milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  WorkerId worker_;                   // GUARDED_BY(mu_)
  uint64_t registration_ = 0;         // GUARDED_BY(mu_); SetWorker() calls so far
  bool stop_ = false;                 // GUARDED_BY(mu_)
  std::atomic<bool> refused_{false};  // written under mu_, read without it
  std::thread thread_;
};

// The fields of a job spec that fix what a worker computes: a re-registration
// must give the same ones, or the model and data this worker holds are wrong.
bool SameJob(const JobSpec& a, const JobSpec& b) {
  return a.job_id == b.job_id && a.model == b.model && a.data_dir == b.data_dir &&
         a.virtual_workers == b.virtual_workers && a.batch_per_vw == b.batch_per_vw &&
         a.seed == b.seed && a.threads == b.threads && a.train_limit == b.train_limit &&
         a.test_limit == b.test_limit && a.chunk_elems == b.chunk_elems &&
         a.num_shards == b.num_shards && a.grad_wire_dtype == b.grad_wire_dtype &&
         a.weight_wire_dtype == b.weight_wire_dtype;
}

class WorkerImpl final : public Worker {
 public:
  WorkerImpl(WorkerOptions options, std::string device_kind, zmq::context_t* context,
             std::unique_ptr<Channel> coordinator)
      : options_(std::move(options)),
        device_kind_(std::move(device_kind)),
        context_(context),
        coordinator_(std::move(coordinator)) {}

  Status Run(const std::atomic<bool>* stop) override {
    stop_ = stop;
    Status st = RunUntilDone();
    if (heartbeat_) heartbeat_->Stop();
    return st;
  }

 private:
  using Duration = std::chrono::steady_clock::duration;
  bool stopping() const { return stop_->load(); }
  static Status Stopped() { return Aborted("stopped by a signal"); }

  Status RunUntilDone() {
    StatusOr<RegisterWorkerReply> registered = Register();
    if (!registered.ok()) {
      if (!stopping()) return registered.status();
      LOG(INFO) << "stopped before the coordinator registered this worker";
      return OkStatus();
    }
    Adopt(*registered);
    EPS_ASSIGN_OR_RETURN(heartbeat_,
                         Heartbeater::Start(context_, options_.coordinator, options_.token,
                                            options_.heartbeat_interval, id_));
    Status st = CheckThreads();
    if (!st.ok()) {
      // This worker's configuration, not the job, is at fault: leave, do not fail the job.
      (void)LeaveJob(st.message());
      return st;
    }
    st = Setup();
    if (stopping()) return LeaveJob(kStopReason);
    if (!st.ok()) {
      // A job this worker cannot run (unknown model, unreadable data): tell the coordinator.
      (void)coordinator_->Send(
          Envelope{options_.token, ErrorReply{st.code(), "worker " + host_ + ": " + st.message()}});
      return st;
    }
    return Loop();
  }

  // ---- coordinator ----------------------------------------------------------

  // Waits up to `timeout` until one of `channels` has a message, and returns
  // the lowest such index, looking at the stop flag at least every
  // kStopCheck: Stopped() once it is set. With `until_refused`, also Aborted
  // once the heartbeat thread saw this worker refused.
  StatusOr<size_t> AwaitAny(const std::vector<Channel*>& channels, milliseconds timeout,
                            bool until_refused = false) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (stopping()) return Stopped();
      if (until_refused && heartbeat_ != nullptr && heartbeat_->refused()) {
        return Aborted("the coordinator refuses the heartbeats of worker " +
                       std::to_string(id_.value()) + ": it no longer knows this worker");
      }
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return DeadlineExceeded("no message within " + std::to_string(timeout.count()) + " ms");
      StatusOr<size_t> ready = AwaitReadable(channels, std::min(left, kStopCheck));
      if (ready.ok()) return ready;
      // DeadlineExceeded: this slice is over; Aborted: a signal interrupted the poll.
      const StatusCode code = ready.status().code();
      if (code != StatusCode::kDeadlineExceeded && code != StatusCode::kAborted)
        return ready.status();
    }
  }

  // AwaitAny on one channel, then its message.
  StatusOr<Channel::Incoming> Receive(Channel* channel, milliseconds timeout,
                                      bool until_refused = false) const {
    EPS_RETURN_IF_ERROR(AwaitAny({channel}, timeout, until_refused).status());
    return channel->TryReceive();
  }

  // Call() with a wait that stops with the stop flag. An ErrorReply comes back as its Status.
  // With `until_refused` (a plan request), the wait also ends, Aborted, once
  // the coordinator refuses this worker's heartbeats: a restarted coordinator
  // never answers a request it has forgotten.
  StatusOr<Envelope> CallCoordinator(Body body, milliseconds timeout, bool until_refused = false) {
    EPS_RETURN_IF_ERROR(coordinator_->Send(Envelope{options_.token, std::move(body)}));
    return AwaitCoordinator(timeout, until_refused);
  }

  // The coordinator's answer to the request sent last: the second half of CallCoordinator().
  StatusOr<Envelope> AwaitCoordinator(milliseconds timeout, bool until_refused) {
    StatusOr<Channel::Incoming> received = Receive(coordinator_.get(), timeout, until_refused);
    if (until_refused && !received.ok() && received.status().code() == StatusCode::kAborted &&
        !stopping()) {
      // Abandoned: a late answer must not be taken for the next call's.
      EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Connect(context_, options_.coordinator));
    }
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, std::move(received));
    if (!in.envelope.ok())
      return in.envelope.status().WithContext("bad reply from the coordinator");
    if (const auto* err = std::get_if<ErrorReply>(&in.envelope->body)) return err->ToStatus();
    return std::move(in.envelope).value();
  }

  // While this worker runs a plan ahead of the coordinator's answer (ahead_),
  // takes that answer: with `wait`, waiting for it (before the plan's first
  // push); without, only if it has come (or the heartbeats were refused). The
  // plan guessed right: ahead_ clears and the plan goes on. Otherwise the
  // answer is kept in overruled_ for Loop() and the plan ends, Aborted.
  Status ConfirmPlan(bool wait) {
    if (ahead_ == nullptr) return OkStatus();
    if (!wait && !heartbeat_->refused() &&
        !AwaitReadable({coordinator_.get()}, milliseconds(0)).ok()) {
      return OkStatus();
    }
    StatusOr<Envelope> answer = AwaitCoordinator(options_.plan_timeout, /*until_refused=*/true);
    if (answer.ok()) {
      const auto* plan = std::get_if<StepPlan>(&answer->body);
      if (plan != nullptr && *plan == *ahead_) {
        ahead_ = nullptr;
        return OkStatus();
      }
    }
    overruled_ = std::move(answer);
    return Aborted("the coordinator planned otherwise");
  }

  // Registers, repeating the request every kRegisterRepeat on a fresh
  // connection while no answer comes (up to register_timeout in all): a
  // coordinator that restarts meanwhile forgets the request, and one that is
  // merely slow (shards still starting) gives the same process the same id.
  StatusOr<RegisterWorkerReply> Register() {
    const auto deadline = std::chrono::steady_clock::now() + options_.register_timeout;
    StatusOr<Envelope> reply = DeadlineExceeded("");
    for (;;) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      reply = CallCoordinator(RegisterWorker{options_.host, uint32_t(getpid()), device_kind_},
                              std::min(left, kRegisterRepeat));
      if (reply.status().code() != StatusCode::kDeadlineExceeded) break;
      // A late answer to this request must not be taken for the next call's.
      EPS_ASSIGN_OR_RETURN(coordinator_, Channel::Connect(context_, options_.coordinator));
    }
    if (!reply.ok()) {
      return reply.status().code() == StatusCode::kDeadlineExceeded
                 ? DeadlineExceeded("the coordinator at " + options_.coordinator +
                                    " did not answer the registration within " +
                                    std::to_string(options_.register_timeout.count()) + " ms")
                 : reply.status();
    }
    auto* r = std::get_if<RegisterWorkerReply>(&reply->body);
    if (r == nullptr)
      return Internal(std::string("registration answered with ") + BodyName(reply->body));
    return std::move(*r);
  }

  void Adopt(const RegisterWorkerReply& r) {
    id_ = r.worker;
    spec_ = r.spec;
    shard_addresses_ = r.shard_addresses;
    host_ = options_.host + "/w" + std::to_string(id_.value());
    LOG(INFO) << "registered as worker " << id_ << " of job '" << spec_.job_id << "' ("
              << spec_.model << ", V=" << spec_.virtual_workers << ", " << shard_addresses_.size()
              << " shards) on " << options_.device << " (" << device_kind_ << ")";
  }

  // After the coordinator forgot this worker: a new id for the same job; the
  // model and the data stay, the shard sockets are fresh (a shard may have moved).
  Status Reregister() {
    EPS_ASSIGN_OR_RETURN(RegisterWorkerReply r, Register());
    if (!SameJob(r.spec, spec_) || r.shard_addresses.size() != shards_.size()) {
      return FailedPrecondition("registered again, but the coordinator now runs another job ('" +
                                r.spec.job_id + "', model " + r.spec.model + ")");
    }
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (r.shard_addresses[s] == shard_addresses_[s]) continue;
      LOG(INFO) << "shard " << s << " moved to " << r.shard_addresses[s];
    }
    Adopt(r);
    EPS_RETURN_IF_ERROR(ReconnectShards());
    heartbeat_->SetWorker(id_);
    return OkStatus();
  }

  // Tells the coordinator this worker leaves, waits up to leave_timeout for
  // the ack (a stop plan), and returns OK: leaving is normal, and what was not
  // pushed is recomputed by others.
  Status LeaveJob(const std::string& reason) {
    LOG(INFO) << "worker " << id_ << " leaves the job (" << reason << ")"
              << (stopping() ? "; VWs not pushed yet are abandoned" : "");
    if (heartbeat_) heartbeat_->Stop();
    Status st = coordinator_->Send(Envelope{options_.token, Leave{id_, reason}});
    if (!st.ok()) {
      LOG(WARNING) << "could not tell the coordinator: " << st.ToString();
      return OkStatus();
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.leave_timeout;
    while (true) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        LOG(WARNING) << "the coordinator did not acknowledge the leave within "
                     << options_.leave_timeout.count() << " ms";
        return OkStatus();
      }
      StatusOr<Channel::Incoming> in = coordinator_->Receive(left);
      if (!in.ok()) {
        if (in.status().code() == StatusCode::kAborted) continue;  // a signal interrupted the poll
        if (in.status().code() != StatusCode::kDeadlineExceeded) {
          LOG(WARNING) << "waiting for the leave's ack: " << in.status().ToString();
          return OkStatus();
        }
        continue;
      }
      if (!in->envelope.ok()) continue;
      if (auto* err = std::get_if<ErrorReply>(&in->envelope->body)) {
        LOG(WARNING) << "the coordinator answered the leave with " << err->ToStatus().ToString();
        return OkStatus();
      }
      auto* plan = std::get_if<StepPlan>(&in->envelope->body);
      if (plan != nullptr && plan->kind == PlanKind::kStop) {
        LOG(INFO) << "the coordinator acknowledged the leave";
        return OkStatus();
      }
      // Anything else answers an earlier request (a plan sent before the Leave arrived): skip it.
    }
  }

  // The spec's intra-op thread count fixes the bits: a worker allowed fewer
  // cores cannot run this job.
  Status CheckThreads() const {
    const int job = static_cast<int>(spec_.threads);
    if (options_.threads == 0 || options_.threads == job) return OkStatus();
    if (options_.threads < job) {
      return InvalidArgument("this worker may use " + std::to_string(options_.threads) +
                             " threads, but job '" + spec_.job_id + "' computes with " +
                             std::to_string(job) +
                             " intra-op threads (the bits depend on that count): allow at least " +
                             std::to_string(job));
    }
    LOG(INFO) << "this worker may use " << options_.threads << " threads; job '" << spec_.job_id
              << "' computes with " << job << " intra-op threads, so " << options_.threads - job
              << " cores stay unused";
    return OkStatus();
  }

  // The job's model with its initial values (a function of the seed).
  StatusOr<std::unique_ptr<ModelRunner>> NewModel() const {
    ModelOptions mo;
    mo.model = spec_.model;
    mo.init_seed = spec_.seed;
    mo.threads = static_cast<int>(spec_.threads);
    mo.device = options_.device;
    return ModelRunner::Create(mo);
  }

  Status Setup() {
    EPS_ASSIGN_OR_RETURN(model_, NewModel());
    const std::string dir = spec_.data_dir + "/";
    EPS_ASSIGN_OR_RETURN(train_,
                         ReadIdxDataset(dir + "train-images-idx3-ubyte.gz",
                                        dir + "train-labels-idx1-ubyte.gz", spec_.train_limit));
    if (spec_.test_limit >= 0) {
      EPS_ASSIGN_OR_RETURN(test_,
                           ReadIdxDataset(dir + "t10k-images-idx3-ubyte.gz",
                                          dir + "t10k-labels-idx1-ubyte.gz", spec_.test_limit));
    }
    if (train_.size < 1) return InvalidArgument("the training set is empty");
    sampler_ = std::make_unique<Sampler>(spec_.seed, train_.size, spec_.virtual_workers,
                                         spec_.batch_per_vw);
    std::vector<TensorSpec> tensors = model_->Tensors();
    tensors.push_back(LossTensor());
    EPS_ASSIGN_OR_RETURN(layout_, MakeLayout(tensors, spec_.num_shards, spec_.chunk_elems));
    if (shard_addresses_.size() != layout_.num_shards)
      return Internal("shard address list does not match the job");
    // Flat gradient vector: parameters in layout order, then the loss.
    flat_offset_.assign(layout_.tensors.size(), 0);
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind == TensorKind::kParameter || t.kind == TensorKind::kLoss) {
        flat_offset_[i] = flat_size_;
        flat_size_ += static_cast<size_t>(t.numel());
      }
    }
    // Each chunk's place in its shard's shared-memory region, in the dtype it is pulled in.
    shm_offset_.assign(layout_.chunks.size(), 0);
    shm_size_.assign(layout_.num_shards, ShmRegion::kHeaderBytes);
    for (const Chunk& c : layout_.chunks) {
      if (KindOf(c) == TensorKind::kLoss) continue;
      uint64_t& end = shm_size_[c.shard.value()];
      shm_offset_[c.id.value()] = end;
      end += Aligned(PulledBytes(c));
    }
    // A block partial's region: the fp32 sum, then its encoding in the gradient wire dtype, if
    // compressed.
    push_encoded_at_ = ShmRegion::kHeaderBytes + Aligned(flat_size_ * sizeof(float));
    push_region_size_ = push_encoded_at_;
    if (spec_.grad_wire_dtype != WireDType::kFP32) {
      push_region_size_ += flat_size_ * WireDTypeSize(spec_.grad_wire_dtype);
    }
    shards_.resize(shard_addresses_.size());
    pullers_.resize(shard_addresses_.size());
    pull_regions_.resize(shard_addresses_.size());
    shm_pushes_.assign(shard_addresses_.size(), 0);
    shm_refused_.assign(shard_addresses_.size(), 0);
    outstanding_.assign(shards_.size(), 0);
    EPS_RETURN_IF_ERROR(ReconnectShards());
    pull_groups_ = PullGroups();
    EPS_ASSIGN_OR_RETURN(reducing_, TaskThread::Start("eps-reduce"));
    return OkStatus();
  }

  // Errors from a shard that end the current plan, not the worker: the shard
  // refused a step it has rolled back from, a version is gone or late, or the
  // shard is down (restarting). The plan goes back to the coordinator.
  static bool AbandonsPlan(const Status& st) {
    switch (st.code()) {
      case StatusCode::kAborted:
      case StatusCode::kFailedPrecondition:
      case StatusCode::kDeadlineExceeded:
      case StatusCode::kUnavailable:
        return true;
      default:
        return false;
    }
  }

  // Fresh sockets to every shard: replies to an abandoned plan (or an unused
  // prefetch) must not be taken for the next plan's.
  Status ReconnectShards() {
    pulling_.reset();
    ReleasePushRegions();
    for (size_t s = 0; s < shards_.size(); ++s) {
      EPS_ASSIGN_OR_RETURN(shards_[s], Channel::Connect(context_, shard_addresses_[s]));
      EPS_ASSIGN_OR_RETURN(pullers_[s], Channel::Connect(context_, shard_addresses_[s]));
      outstanding_[s] = 0;
      shm_pushes_[s] =
          0;  // the shard may have moved: pushes wait for a pull answered through shared memory
      // A fresh region with the fresh socket: a shard may still answer the old one's pulls into the
      // old one.
      pull_regions_[s].reset();
      if (!options_.shm) continue;
      auto region = ShmRegion::Create(shm_size_[s]);
      if (region.ok()) {
        pull_regions_[s] = std::move(region).value();
      } else {
        LOG(WARNING) << "no shared memory for the pulls from shard " << s
                     << " (pulling through the socket): " << region.status().ToString();
      }
    }
    return OkStatus();
  }

  // By shard, the chunks each pull asks for: parameter chunks in backward
  // order (the layout's, reversed), cut into groups of at least
  // kEagerPushBytes as the last VW's pushes are, so that a group is stepped,
  // and answered, about when one of those pushes arrives; then the buffer
  // chunks, final only with VW 0's last push, in a group of their own.
  std::vector<std::vector<std::vector<ChunkId>>> PullGroups() const {
    std::vector<std::vector<std::vector<ChunkId>>> out(layout_.num_shards);
    for (size_t s = 0; s < out.size(); ++s) {
      std::vector<ChunkId> group, buffers;
      size_t bytes = 0;
      for (auto c = layout_.chunks.rbegin(); c != layout_.chunks.rend(); ++c) {
        if (c->shard.value() != s || KindOf(*c) == TensorKind::kLoss) continue;
        if (KindOf(*c) == TensorKind::kBuffer) {
          buffers.push_back(c->id);
          continue;
        }
        group.push_back(c->id);
        bytes += layout_.WireBytes(*c, spec_.weight_wire_dtype);
        if (bytes < kEagerPushBytes) continue;
        out[s].push_back(std::move(group));
        group.clear();
        bytes = 0;
      }
      for (std::vector<ChunkId>* rest : {&group, &buffers}) {
        if (!rest->empty()) out[s].push_back(std::move(*rest));
      }
    }
    return out;
  }

  // Runs `guess` before the coordinator has answered the step request just
  // sent, and returns that answer; `*ran` holds the outcome when the answer
  // is `guess` itself (the plan has run), and stays empty when the guess was
  // dropped (no push of it was sent).
  StatusOr<Envelope> RunAhead(const StepPlan& guess, std::optional<Status>* ran) {
    ahead_ = &guess;
    Status st = Train(guess);
    if (ahead_ == nullptr) {
      ++times_.ahead;
      *ran = std::move(st);
      return Envelope{options_.token, guess};
    }
    ahead_ = nullptr;
    ++times_.dropped;
    VLOG(1) << "dropped the run ahead of step " << guess.step << ": " << st.ToString();
    // Replies to the dropped run's pulls must not be taken for the next plan's.
    EPS_RETURN_IF_ERROR(ReconnectShards());
    if (!overruled_.has_value()) {
      if (stopping()) return Stopped();
      return AwaitPlan();
    }
    StatusOr<Envelope> answer = std::move(*overruled_);
    overruled_.reset();
    return answer;
  }

  // Waits for the coordinator's answer to the step request sent last.
  StatusOr<Envelope> AwaitPlan() {
    const auto asked = std::chrono::steady_clock::now();
    StatusOr<Envelope> reply = AwaitCoordinator(options_.plan_timeout, /*until_refused=*/true);
    times_.plan += std::chrono::steady_clock::now() - asked;
    return reply;
  }

  Status Loop() {
    Step done{-1};
    bool abandoned = false;    // the previous plan was given up
    bool report_model = true;  // the coordinator needs the model from every worker id
    int reregistrations = 0;   // in a row, without a plan in between
    // The plan this worker expects next: after step t over VWs [lo, hi),
    // step t+1 over the same VWs (the coordinator moves VWs only when
    // membership or speeds change). It runs while the request is answered.
    std::optional<StepPlan> guess;
    while (true) {
      if (stopping()) return LeaveJob(kStopReason);
      StepRequest request{id_, done, {}, 0, 0, abandoned, seconds_per_vw_};
      abandoned = false;
      seconds_per_vw_ = 0;
      if (report_model) {
        request.tensors = model_->Tensors();
        request.train_samples = train_.size;
        request.test_samples = test_.size;
      }
      EPS_RETURN_IF_ERROR(coordinator_->Send(Envelope{options_.token, std::move(request)}));
      std::optional<Status> ran;  // the answer's plan ran ahead of it, with this outcome
      StatusOr<Envelope> reply = guess.has_value() ? RunAhead(*guess, &ran) : AwaitPlan();
      guess.reset();
      if (!reply.ok()) {
        if (stopping()) return LeaveJob(kStopReason);
        const StatusCode code = reply.status().code();
        if (code != StatusCode::kAborted && code != StatusCode::kNotFound) return reply.status();
        // The coordinator declared this worker dead or forgot it: join again under a new id.
        if (++reregistrations > kMaxReregistrations) {
          return Unavailable("the coordinator keeps refusing this worker: " +
                             reply.status().ToString());
        }
        LOG(WARNING) << "the coordinator dropped worker " << id_ << " ("
                     << reply.status().ToString() << "): registering again";
        Status st = Reregister();
        if (stopping()) return LeaveJob(kStopReason);
        EPS_RETURN_IF_ERROR(st);
        done = Step(-1);
        report_model = true;
        continue;
      }
      report_model = false;
      reregistrations = 0;
      auto* plan = std::get_if<StepPlan>(&reply->body);
      if (plan == nullptr)
        return Internal(std::string("step request answered with ") + BodyName(reply->body));
      Status st;
      switch (plan->kind) {
        case PlanKind::kWait:
          break;
        case PlanKind::kInit:
          st = PushInitialValues();
          break;
        case PlanKind::kTrain:
          st = ran.has_value() ? *ran : Train(*plan);
          if (!st.ok()) break;
          done = plan->step;
          if (plan->step.value() + 1 < spec_.steps) {
            guess = StepPlan{PlanKind::kTrain,
                             Step(plan->step.value() + 1),
                             plan->epoch,
                             plan->vw_lo,
                             plan->vw_hi,
                             0,
                             0};
          }
          break;
        case PlanKind::kEval:
          st = Evaluate(*plan);
          break;
        case PlanKind::kStop:
          LOG(INFO) << "the job is over; " << times_.ToString();
          return OkStatus();
      }
      if (stopping()) return LeaveJob(kStopReason);
      if (!st.ok() && AbandonsPlan(st)) {
        LOG(WARNING) << "gave up the plan for step " << plan->step << ": " << st.ToString();
        abandoned = true;
        EPS_RETURN_IF_ERROR(ReconnectShards());
        continue;
      }
      EPS_RETURN_IF_ERROR(st);
    }
  }

  // ---- shards ---------------------------------------------------------------

  TensorKind KindOf(const Chunk& c) const { return layout_.tensors[c.tensor].kind; }

  // `bytes` rounded up to a cache line: where the next thing starts in a shared-memory region.
  static uint64_t Aligned(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

  Status SendPush(size_t shard, Push push) {
    if (push.chunks.empty() && push.shm_chunks.empty()) return OkStatus();
    ++(push.shm_chunks.empty() ? times_.inline_pushes : times_.shm_pushes);
    EPS_RETURN_IF_ERROR(shards_[shard]->Send(Envelope{options_.token, std::move(push)}));
    ++outstanding_[shard];
    return OkStatus();
  }

  // Collects every outstanding push reply. The replies to a pull in flight
  // (w(t+1), prefetched before the step's last VW) that come meanwhile go into
  // the model at once: the compute thread has nothing else to do, and the
  // next step's PullInto then finds less to take. A pull reply's error does
  // not end this step: PullInto returns it.
  Status AwaitPushes() {
    std::vector<Channel*> watch;
    std::vector<std::pair<bool, size_t>> watched;  // by watched channel: (a push socket, its shard)
    while (true) {
      watch.clear();
      watched.clear();
      for (size_t s = 0; s < shards_.size(); ++s) {
        if (outstanding_[s] == 0) continue;
        watch.push_back(shards_[s].get());
        watched.emplace_back(true, s);
      }
      if (watch.empty()) {
        ReleasePushRegions();
        return OkStatus();
      }
      for (size_t s = 0; pulling_.has_value() && pulling_->failed.ok() && s < pullers_.size();
           ++s) {
        if (pulling_->answers[s] == 0) continue;
        watch.push_back(pullers_[s].get());
        watched.emplace_back(false, s);
      }
      // Each message may wait rpc_timeout, as each reply did when they were awaited one by one.
      EPS_ASSIGN_OR_RETURN(const size_t ready, AwaitAny(watch, options_.rpc_timeout));
      EPS_ASSIGN_OR_RETURN(Channel::Incoming in, watch[ready]->TryReceive());
      const auto [push, s] = watched[ready];
      if (!push) {
        Status st = TakePullReply(s, std::move(in));
        if (!st.ok()) pulling_->failed = std::move(st);
        continue;
      }
      --outstanding_[s];
      if (!in.envelope.ok())
        return in.envelope.status().WithContext("bad reply from shard " + std::to_string(s));
      if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
        if (err->code == StatusCode::kFailedPrecondition && shm_pushes_[s]) {
          // The shard cannot map this worker's regions after all (the plan is abandoned and pushed
          // again).
          LOG(WARNING) << "shard " << s << " cannot read pushes in shared memory (" << err->message
                       << "): pushing to it through the socket from now on";
          shm_refused_[s] = 1;
          shm_pushes_[s] = 0;
        }
        return err->ToStatus().WithContext("shard " + std::to_string(s));
      }
      if (!std::holds_alternative<PushReply>(in.envelope->body)) {
        return Internal(std::string("shard ") + std::to_string(s) + " answered a push with " +
                        BodyName(in.envelope->body));
      }
    }
  }

  // Asks every shard for `version` now, before this step's last VW: a shard
  // answers each pull group as soon as its chunks are stepped, so most bytes
  // of w(t+1) travel during the last VW's backward, and are in the model by
  // the time PullInto(version) asks for them.
  Status Prefetch(Step version) { return StartPull(version, /*prefetch=*/true); }

  // Shard s's answer to a pull. Ahead of the plan, the coordinator's answer
  // is taken as soon as it comes: the shard answers once the step's chunks are
  // stepped, and the coordinator may instead give this worker VWs of that very
  // step (a crashed worker's), which that pull would wait for in vain.
  StatusOr<Channel::Incoming> ReceivePulled(size_t s) {
    Channel* shard = pullers_[s].get();
    while (ahead_ != nullptr) {
      if (stopping()) return Stopped();
      StatusOr<size_t> ready = AwaitReadable({shard, coordinator_.get()}, kStopCheck);
      if (ready.ok() && *ready == 0) break;
      const StatusCode code = ready.status().code();
      if (!ready.ok() && code != StatusCode::kDeadlineExceeded && code != StatusCode::kAborted)
        return ready.status();
      EPS_RETURN_IF_ERROR(ConfirmPlan(/*wait=*/false));
    }
    return Receive(shard, options_.rpc_timeout);
  }

  // Sends every shard one pull of `version` per pull group; their replies
  // are then taken by TakePullReply, from PullInto or, for a prefetch,
  // already while the step's pushes are acknowledged (AwaitPushes).
  Status StartPull(Step version, bool prefetch) {
    pulling_ = PullInFlight{version,
                            prefetch,
                            std::vector<size_t>(pullers_.size()),
                            std::vector<char>(pullers_.size(), 0),
                            std::vector<char>(pullers_.size(), 0),
                            OkStatus()};
    pulled_.assign(layout_.chunks.size(), 0);
    for (size_t s = 0; s < pullers_.size(); ++s) {
      for (const std::vector<ChunkId>& group : pull_groups_[s]) {
        EPS_RETURN_IF_ERROR(
            pullers_[s]->Send(Envelope{options_.token, MakePull(s, version, group)}));
        ++pulling_->answers[s];
      }
    }
    return OkStatus();
  }

  // Pulls version `version` from every shard into the model; parameters in the
  // job's weight wire dtype. Takes the prefetched replies when they are of
  // that version; drops them (fresh sockets) when they are not. Checks that
  // every chunk came.
  Status PullInto(Step version) {
    if (pulling_.has_value() && pulling_->version != version)
      EPS_RETURN_IF_ERROR(ReconnectShards());
    if (!pulling_.has_value()) EPS_RETURN_IF_ERROR(StartPull(version, /*prefetch=*/false));
    EPS_RETURN_IF_ERROR(pulling_->failed);
    for (size_t s = 0; s < pullers_.size(); ++s) {
      while (pulling_->answers[s] > 0) {
        EPS_ASSIGN_OR_RETURN(Channel::Incoming in, ReceivePulled(s));
        EPS_RETURN_IF_ERROR(TakePullReply(s, std::move(in)));
      }
      const std::vector<ChunkId> missing = NotPulled(s);
      if (!missing.empty()) {
        return DataLoss("shard " + std::to_string(s) + " did not send chunk " +
                        std::to_string(missing[0].value()));
      }
    }
    pulling_.reset();
    return OkStatus();
  }

  // Takes one of shard s's answers to the pull in flight into the model. A
  // prefetched pull may have waited at the shard longer than it may (a slow
  // step): once every group is answered, what did not come is asked for
  // again, now that it is due.
  Status TakePullReply(size_t s, Channel::Incoming in) {
    PullInFlight& p = *pulling_;
    const std::string from = "shard " + std::to_string(s);
    --p.answers[s];
    if (!in.envelope.ok()) return in.envelope.status().WithContext("bad pull reply from " + from);
    if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
      const bool late =
          err->code == StatusCode::kDeadlineExceeded || err->code == StatusCode::kUnavailable;
      if (!p.prefetch || p.pulled_again[s] || !late)
        return err->ToStatus().WithContext("pull from " + from);
      p.expired[s] = 1;
    } else {
      auto* reply = std::get_if<PullReply>(&in.envelope->body);
      if (reply == nullptr || reply->version != p.version)
        return Internal(from + " answered a pull with something else");
      EPS_RETURN_IF_ERROR(WritePulled(s, *reply).WithContext("pull from " + from));
    }
    if (p.answers[s] == 0 && p.expired[s] && !p.pulled_again[s]) {
      LOG(INFO) << "the prefetched pull of version " << p.version << " expired at " << from
                << ": pulling again";
      EPS_RETURN_IF_ERROR(
          pullers_[s]->Send(Envelope{options_.token, MakePull(s, p.version, NotPulled(s))}));
      p.pulled_again[s] = 1;
      p.answers[s] = 1;
    }
    return OkStatus();
  }

  // Shard s's chunks that the pull being taken has not brought yet.
  std::vector<ChunkId> NotPulled(size_t s) const {
    std::vector<ChunkId> out;
    for (const auto& group : pull_groups_[s]) {
      for (ChunkId id : group) {
        if (!pulled_[id.value()]) out.push_back(id);
      }
    }
    return out;
  }

  // A pull of `chunks` from shard s, naming the shard's shared-memory region, if any, and each
  // chunk's place in it.
  Pull MakePull(size_t s, Step version, std::vector<ChunkId> chunks) const {
    Pull pull{version, std::move(chunks), spec_.weight_wire_dtype, std::nullopt, {}};
    if (const ShmRegion* region = pull_regions_[s].get()) {
      pull.shm = region->ref();
      for (ChunkId c : pull.chunks) pull.shm_offsets.push_back(shm_offset_[c.value()]);
    }
    return pull;
  }

  // The bytes of a chunk as pulled: a parameter in the weight wire dtype, anything else as it is.
  size_t PulledBytes(const Chunk& c) const {
    const bool encoded =
        spec_.weight_wire_dtype != WireDType::kFP32 && KindOf(c) == TensorKind::kParameter;
    return layout_.WireBytes(c, encoded ? spec_.weight_wire_dtype : WireDType::kFP32);
  }

  // Writes the chunks of a pull reply from shard s into the model, from the
  // message or from the pull's shared-memory region, and marks them in pulled_.
  Status WritePulled(size_t s, const PullReply& reply) {
    for (const ChunkBytes& cb : reply.chunks)
      EPS_RETURN_IF_ERROR(WritePulledChunk(s, cb.chunk, cb.data, cb.size));
    if (reply.shm_chunks.empty()) {
      ++times_.inline_replies;
      return OkStatus();
    }
    const ShmRegion* region = pull_regions_[s].get();
    if (region == nullptr) return DataLoss("a pull reply in shared memory that no pull named");
    for (const ShmChunk& c : reply.shm_chunks) {
      if (c.chunk.value() >= layout_.chunks.size() || c.offset != shm_offset_[c.chunk.value()]) {
        return DataLoss("pulled chunk " + std::to_string(c.chunk.value()) +
                        " is not where the pull asked for it");
      }
      EPS_RETURN_IF_ERROR(WritePulledChunk(s, c.chunk, region->data() + c.offset, c.size));
    }
    ++times_.shm_replies;
    shm_pushes_[s] = !shm_refused_[s];  // the shard can map this worker's regions
    return OkStatus();
  }

  // Writes one pulled chunk of shard s into the model, decoding a parameter
  // from the weight wire dtype.
  Status WritePulledChunk(size_t s, ChunkId id, const void* data, size_t size) {
    if (id.value() >= layout_.chunks.size()) return DataLoss("pulled an unknown chunk");
    const Chunk& c = layout_.chunks[id.value()];
    if (c.shard.value() != s || size != PulledBytes(c) || KindOf(c) == TensorKind::kLoss ||
        pulled_[id.value()]) {
      return DataLoss("pulled chunk " + std::to_string(id.value()) + " does not match the layout");
    }
    pulled_[id.value()] = 1;
    holds_initial_values_ = false;
    const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
    const WireDType wire = spec_.weight_wire_dtype;
    if (wire == WireDType::kFP32 || KindOf(c) != TensorKind::kParameter) {
      return model_->Write(c.tensor, c.offset * elem, data, size);
    }
    decoded_.resize(c.numel);
    DecodeWire(wire, data, decoded_.size(), decoded_.data());
    return model_->Write(c.tensor, c.offset * elem, decoded_.data(),
                         decoded_.size() * sizeof(float));
  }

  Status PushInitialValues() {
    // A prefetch (of a step >= 1) is of no use once the job starts over, and
    // its replies must not be written into the model the pushes below read.
    if (pulling_.has_value()) EPS_RETURN_IF_ERROR(ReconnectShards());
    if (!holds_initial_values_) {  // the job starts over (a shard lost its state before any common
                                   // checkpoint)
      EPS_ASSIGN_OR_RETURN(model_, NewModel());
      holds_initial_values_ = true;
    }
    for (size_t s = 0; s < shards_.size(); ++s) {
      Push push{Epoch(0), Step(-1), Block{0, 1}, {}};
      for (const Chunk& c : layout_.chunks) {
        if (c.shard.value() != s || KindOf(c) == TensorKind::kLoss) continue;
        const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
        push.chunks.push_back(
            {c.id, static_cast<const uint8_t*>(model_->Data(c.tensor)) + c.offset * elem,
             layout_.ChunkBytes(c), nullptr});
      }
      EPS_RETURN_IF_ERROR(SendPush(s, std::move(push)));
    }
    // The chunks point into the model: wait for the replies before it changes.
    EPS_RETURN_IF_ERROR(AwaitPushes());
    LOG(INFO) << "pushed the initial parameters";
    return OkStatus();
  }

  // ---- training -------------------------------------------------------------

  // Copies of the buffer tensors (BatchNorm statistics), by tensor index.
  std::vector<Bytes> SnapshotBuffers() {
    std::vector<Bytes> out(layout_.tensors.size());
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind != TensorKind::kBuffer) continue;
      const size_t n = t.numel() * DTypeSize(t.dtype);
      const auto* p = static_cast<const uint8_t*>(model_->Data(i));
      out[i] = std::make_shared<std::vector<uint8_t>>(p, p + n);
    }
    return out;
  }

  Status RestoreBuffers(const std::vector<Bytes>& saved) {
    for (size_t i = 0; i < saved.size(); ++i) {
      if (saved[i]) EPS_RETURN_IF_ERROR(model_->Write(i, 0, saved[i]->data(), saved[i]->size()));
    }
    return OkStatus();
  }

  // The VW's contribution: its gradients in flat layout order, then its loss.
  // Reads only `grads` and the layout: runs on the reducing thread.
  std::vector<float> FlatGradient(const ModelRunner::Gradients& grads, float loss) const {
    std::vector<float> flat(flat_size_);
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind == TensorKind::kParameter) {
        std::memcpy(flat.data() + flat_offset_[i], grads.data[i], t.numel() * sizeof(float));
      } else if (t.kind == TensorKind::kLoss) {
        flat[flat_offset_[i]] = loss;
      }
    }
    return flat;
  }

  // A block's partial on its way to the shards. Its value fills in tensor by
  // tensor while the block's last VW runs backward (TreeFinisher), and the
  // chunks of the tensors ready so far leave as soon as they are worth a push
  // of their own: sending and the shards' optimizer overlap the rest of
  // backward (the first layers, the costliest, come last).
  struct OutgoingBlock {
    Block block;
    std::shared_ptr<float[]> sum;         // the partial in flat layout, fp32
    std::shared_ptr<uint16_t[]> encoded;  // the same in the gradient wire dtype, if compressed
    std::shared_ptr<ShmRegion> region;    // holding `sum` and `encoded`, or null (on the heap)
    std::vector<char> shm_to;  // by shard: push from `region` (the message names the bytes)
    std::vector<char> ready;   // by tensor: its part of the partial is final
    std::vector<char> sent;    // by chunk
    size_t unsent_bytes = 0;   // ready, not sent
    bool eager = true;         // pushes from backward; not ahead of an unconfirmed plan
  };

  // Bytes of ready chunks worth a push of their own before backward ends.
  static constexpr size_t kEagerPushBytes = 256 << 10;

  // Runs on the compute thread: it owns the region pool and the shard flags read here.
  OutgoingBlock StartBlock(const Block& block) {
    OutgoingBlock out{block,
                      nullptr,
                      nullptr,
                      nullptr,
                      shm_pushes_,
                      std::vector<char>(layout_.tensors.size(), 0),
                      std::vector<char>(layout_.chunks.size(), 0)};
    const bool compressed = spec_.grad_wire_dtype != WireDType::kFP32;
    if (std::find(out.shm_to.begin(), out.shm_to.end(), 1) != out.shm_to.end())
      out.region = TakePushRegion();
    if (out.region == nullptr) {
      std::fill(out.shm_to.begin(), out.shm_to.end(), 0);
      out.sum.reset(new float[flat_size_]);
      if (compressed) out.encoded.reset(new uint16_t[flat_size_]);
      return out;
    }
    uint8_t* base = out.region->data();
    out.sum = std::shared_ptr<float[]>(out.region,
                                       reinterpret_cast<float*>(base + ShmRegion::kHeaderBytes));
    if (compressed) {
      out.encoded = std::shared_ptr<uint16_t[]>(
          out.region, reinterpret_cast<uint16_t*>(base + push_encoded_at_));
    }
    return out;
  }

  // The regions of the blocks pushed so far become the ones the next blocks
  // reuse (those left unused are dropped: the plan's range shrank) once every
  // push is answered (a shard reads a push's region before it answers). A push
  // not answered yet may still be read, maybe after this worker gave it up:
  // with one outstanding, the regions are dropped instead, never written again.
  void ReleasePushRegions() {
    if (push_regions_used_.empty()) return;
    if (std::all_of(outstanding_.begin(), outstanding_.end(), [](int n) { return n == 0; })) {
      push_regions_free_ = std::move(push_regions_used_);
    }
    push_regions_used_.clear();
  }

  // A region for a block partial, written by nobody else until the step's
  // pushes are all acknowledged (AwaitPushes gives it back) or dropped with
  // the sockets; reused, so that neither side faults its pages in again.
  // Null if none can be made (the block is pushed through the socket).
  std::shared_ptr<ShmRegion> TakePushRegion() {
    std::shared_ptr<ShmRegion> region;
    if (!push_regions_free_.empty()) {
      region = std::move(push_regions_free_.back());
      push_regions_free_.pop_back();
    } else {
      auto made = ShmRegion::Create(push_region_size_);
      if (!made.ok()) {
        LOG_EVERY_N(WARNING, 100) << "no shared memory for a push (pushing through the socket): "
                                  << made.status().ToString();
        return nullptr;
      }
      region = std::move(made).value();
    }
    push_regions_used_.push_back(region);
    return region;
  }

  // Tensor i's part of the partial is final: pushes the chunks ready so far once they are worth it.
  Status TensorReady(const StepPlan& plan, OutgoingBlock& out, size_t i) {
    out.ready[i] = 1;
    out.unsent_bytes += layout_.tensors[i].numel() * WireDTypeSize(spec_.grad_wire_dtype);
    if (!out.eager || out.unsent_bytes < kEagerPushBytes) return OkStatus();
    return PushReady(plan, out, {});
  }

  // Pushes every ready chunk not sent yet, in the gradient wire dtype (the
  // finisher has rounded the partial to it, so encoding loses nothing); with
  // `vw0_buffers` (the block holds VW 0, and its partial is complete) the
  // buffer chunks too. The partial's chunks go in the message, or, to a shard
  // in out.shm_to, stay in out.region and the message says where; buffers
  // always go in the message.
  Status PushReady(const StepPlan& plan, OutgoingBlock& out,
                   const std::vector<Bytes>& vw0_buffers) {
    const WireDType wire = spec_.grad_wire_dtype;
    for (size_t s = 0; s < shards_.size(); ++s) {
      Push push{plan.epoch, plan.step, out.block, {}};
      for (const Chunk& c : layout_.chunks) {
        if (c.shard.value() != s || out.sent[c.id.value()]) continue;
        if (KindOf(c) == TensorKind::kBuffer) {
          if (vw0_buffers.empty()) continue;
          const Bytes& b = vw0_buffers[c.tensor];
          const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
          push.chunks.push_back({c.id, b->data() + c.offset * elem, layout_.ChunkBytes(c), b});
        } else {
          if (!out.ready[c.tensor]) continue;
          const size_t at = flat_offset_[c.tensor] + c.offset;
          const void* bytes = out.sum.get() + at;
          std::shared_ptr<const void> owner = out.sum;
          if (wire != WireDType::kFP32) {
            EncodeWire(wire, out.sum.get() + at, c.numel, out.encoded.get() + at);
            bytes = out.encoded.get() + at;
            owner = out.encoded;
          }
          if (out.shm_to[s]) {
            const uint64_t offset = static_cast<const uint8_t*>(bytes) - out.region->data();
            push.shm_chunks.push_back({c.id, offset, layout_.WireBytes(c, wire)});
          } else {
            push.chunks.push_back({c.id, bytes, layout_.WireBytes(c, wire), std::move(owner)});
          }
        }
        out.sent[c.id.value()] = 1;
      }
      if (!push.shm_chunks.empty()) push.shm = out.region->ref();
      EPS_RETURN_IF_ERROR(SendPush(s, std::move(push)));
    }
    out.unsent_bytes = 0;
    return OkStatus();
  }

  // What the reducing thread's tasks for one block use. They hold it, so the
  // compute thread goes on to the next block while they finish this one.
  struct BlockWork {
    BlockWork(const Block& block, uint32_t virtual_workers, size_t flat_size, WireDType wire,
              OutgoingBlock outgoing)
        : reducer(block, virtual_workers, flat_size, wire), out(std::move(outgoing)) {}
    TreeReducer reducer;
    std::optional<TreeFinisher>
        finisher;  // the tree's last node: the last VW, added tensor by tensor
    OutgoingBlock out;
    float last_loss = 0;
  };

  // Runs the block's VWs; the compute thread only computes. On the reducing
  // thread, each VW's gradients but the last one's go into the block's tree
  // while the next VW computes, and the last one's finish the tree and go out
  // tensor by tensor as its backward produces them, while the next block (if
  // any) computes. Train() waits for the reducing thread once, at the end.
  Status TrainBlock(const StepPlan& plan, const Block& block,
                    const std::vector<Bytes>& step_buffers, std::vector<Bytes>* vw0_buffers,
                    const std::function<void(Duration*)>& lap) {
    const uint32_t last = block.hi() - 1;
    // Used by the reducing thread only, from the tasks posted below (after a
    // failed task it skips the rest, so none of them sees an empty finisher).
    auto work = std::make_shared<BlockWork>(block, spec_.virtual_workers, flat_size_,
                                            spec_.grad_wire_dtype, StartBlock(block));
    // The last VW's parameter i is final in GradData(i), which holds it until
    // the next TrainStep, and after it in the gradients taken then.
    const ModelRunner::GradReady push_as_ready = [&](size_t i) {
      reducing_->Post([this, &plan, work, i, grad = model_->GradData(i)] {
        work->finisher->Add(flat_offset_[i], layout_.tensors[i].numel(), grad,
                            work->out.sum.get() + flat_offset_[i]);
        return TensorReady(plan, work->out, i);
      });
    };
    const ModelRunner::GradReady
        after_backward;  // VWs before the last: their gradients are taken after it
    std::vector<int64_t> indices;
    ModelRunner::Gradients last_grads;
    for (uint32_t v = block.lo; v <= last; ++v) {
      if (stopping()) return Stopped();  // abandon the rest: blocks already pushed stay pushed
      const bool is_last = v == last;
      // Ahead of the plan the answer is taken as soon as it has come, and, when
      // earlier VWs of the block ran meanwhile, waited for before the last one,
      // whose backward pushes. A block of one VW computes ahead all the same,
      // without pushing from backward until the answer has confirmed the plan.
      lap(&times_.copies);
      EPS_RETURN_IF_ERROR(ConfirmPlan(/*wait=*/is_last && v != block.lo));
      lap(&times_.plan);
      if (v != plan.vw_lo) EPS_RETURN_IF_ERROR(RestoreBuffers(step_buffers));
      sampler_->Indices(VirtualWorkerId(v), plan.step, &indices);
      if (is_last && block.hi() == plan.vw_hi) {
        // No chunk of w(t+1) can step before this VW's backward: the pulls need not wait at the
        // shards longer.
        EPS_RETURN_IF_ERROR(Prefetch(Step(plan.step.value() + 1)));
      }
      if (is_last) {  // after the earlier VWs' leaves: the tasks run in order
        work->out.eager = ahead_ == nullptr;
        reducing_->Post([work, last] {
          EPS_ASSIGN_OR_RETURN(TreeFinisher f, work->reducer.Finish(Block{last, 1}));
          work->finisher.emplace(std::move(f));
          return OkStatus();
        });
      }
      lap(&times_.copies);
      const Slowdown slowdown = StartSlowdown();
      EPS_ASSIGN_OR_RETURN(
          float loss,
          model_->TrainStep(train_, indices, StreamSeed(spec_.seed, v, plan.step.value()),
                            is_last ? push_as_ready : after_backward));
      SlowDown(slowdown);
      lap(&times_.compute);
      if (v == 0) *vw0_buffers = SnapshotBuffers();
      EPS_ASSIGN_OR_RETURN(ModelRunner::Gradients grads, model_->TakeGradients());
      if (is_last) {
        work->last_loss = loss;
        last_grads = std::move(grads);
      } else {
        reducing_->Post([this, work, v, grads = std::move(grads), loss] {
          return work->reducer.Add(Block{v, 1}, FlatGradient(grads, loss));
        });
      }
    }
    lap(&times_.copies);
    EPS_RETURN_IF_ERROR(ConfirmPlan(/*wait=*/true));  // before the block's first push
    lap(&times_.plan);
    // The last task of the block: it holds the last VW's gradients until the tasks before it have
    // read them.
    reducing_->Post(
        [this, &plan, work, grads = std::move(last_grads), loss_at = flat_offset_.back(),
         buffers = block.lo == 0 ? *vw0_buffers
                                 : std::vector<Bytes>{}] {  // the layout ends with the loss
          work->finisher->Add(loss_at, 1, &work->last_loss, work->out.sum.get() + loss_at);
          work->out.ready.back() = 1;
          return PushReady(plan, work->out, buffers);
        });
    return OkStatus();
  }

  Status Train(const StepPlan& plan) {
    if (plan.vw_hi > spec_.virtual_workers) return InvalidArgument("plan names VWs beyond V");
    auto mark = std::chrono::steady_clock::now();
    const std::function<void(Duration*)> lap = [&mark](Duration* into) {
      const auto now = std::chrono::steady_clock::now();
      *into += now - mark;
      mark = now;
    };
    EPS_RETURN_IF_ERROR(PullInto(plan.step));
    lap(&times_.pull);
    const std::vector<Bytes> step_buffers = SnapshotBuffers();
    std::vector<Bytes> vw0_buffers;
    const auto compute_before = times_.compute;
    struct Drain {  // the reducing thread's tasks use `plan`: none outlives this call
      TaskThread& reducing;
      ~Drain() { (void)reducing.Wait(); }  // an early return reports its own error
    } drain{*reducing_};
    for (const Block& block : AlignedBlocks(plan.vw_lo, plan.vw_hi)) {
      EPS_RETURN_IF_ERROR(TrainBlock(plan, block, step_buffers, &vw0_buffers, lap));
    }
    EPS_RETURN_IF_ERROR(reducing_->Wait());
    lap(&times_.copies);
    EPS_RETURN_IF_ERROR(AwaitPushes());
    lap(&times_.push_wait);
    ++times_.steps;
    // Reported with the next step request: the coordinator sizes VW ranges by speed. The first
    // plan runs libtorch's one-time initialization and would make this worker look slow.
    if (warmed_up_) {
      const double compute = std::chrono::duration<double>(times_.compute - compute_before).count();
      seconds_per_vw_ = compute / (plan.vw_hi - plan.vw_lo);
    }
    warmed_up_ = true;
    return OkStatus();
  }

  // CPU time this thread has used.
  static std::chrono::steady_clock::duration ThreadCpuTime() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }

  // When a VW's compute began, on the clock --slowdown measures it by: on the CPU the
  // thread's CPU time (a core shared with other processes must not multiply the
  // slowdown), on a GPU the wall time (this thread mostly waits). Not read without a slowdown.
  struct Slowdown {
    std::chrono::steady_clock::duration started{0};
  };
  Slowdown StartSlowdown() const {
    if (options_.slowdown <= 1.0) return {};
    return {options_.device == "cpu" ? ThreadCpuTime()
                                     : std::chrono::steady_clock::now().time_since_epoch()};
  }

  // Idles (slowdown - 1) x the compute begun at `since`, in slices that watch the stop flag.
  void SlowDown(const Slowdown& since) {
    if (options_.slowdown <= 1.0) return;
    const auto compute = StartSlowdown().started - since.started;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           compute * (options_.slowdown - 1));
    while (!stopping()) {
      const auto left = until - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, kStopCheck));
    }
  }

  Status Evaluate(const StepPlan& plan) {
    EPS_RETURN_IF_ERROR(PullInto(plan.step));
    const int64_t lo = std::min(plan.eval_lo, test_.size), hi = std::min(plan.eval_hi, test_.size);
    EPS_ASSIGN_OR_RETURN(EvalStats stats, model_->Evaluate(test_, lo, hi, spec_.eval_batch));
    return coordinator_->Send(Envelope{
        options_.token,
        EvalResult{id_, plan.step, plan.eval_lo, plan.eval_hi, stats.correct, stats.loss_sum}});
  }

  // Where a worker's time goes, summed over its train plans; logged when the job ends.
  struct Times {
    Duration plan{
        0};  // waiting for the coordinator's next plan (the other workers, the shards' barrier)
    Duration pull{0};       // pulling w(t) into the model
    Duration compute{0};    // the VWs' forward and backward (and any --slowdown)
    Duration copies{0};     // sampling, taking gradients, waiting for the reducing thread to finish
                            // and push the partial
    Duration push_wait{0};  // waiting for the shards to acknowledge the pushes
    int64_t steps = 0;
    int64_t ahead =
        0;  // train plans run ahead of the coordinator's answer (they are among `steps`)
    int64_t dropped = 0;         // runs ahead the answer overruled
    int64_t shm_replies = 0;     // pull replies whose bytes came through shared memory
    int64_t inline_replies = 0;  // pull replies whose bytes came in the message
    int64_t shm_pushes =
        0;  // pushes that named bytes in shared memory (written by the reducing thread)
    int64_t inline_pushes = 0;  // pushes with all their bytes in the message (likewise)
    std::string ToString() const {
      auto ms = [this](Duration d) {
        const double total_ms = std::chrono::duration<double, std::milli>(d).count();
        return std::to_string(total_ms / double(std::max<int64_t>(steps, 1)));
      };
      return "ms per train plan over " + std::to_string(steps) + ": plan wait " + ms(plan) +
             ", pull " + ms(pull) + ", compute " + ms(compute) + ", copies " + ms(copies) +
             ", push wait " + ms(push_wait) + "; " + std::to_string(ahead) +
             " run ahead of their plan, " + std::to_string(dropped) + " runs ahead dropped; " +
             std::to_string(shm_replies) + " pull replies through shared memory, " +
             std::to_string(inline_replies) + " inline; " + std::to_string(shm_pushes) +
             " pushes through shared memory, " + std::to_string(inline_pushes) + " inline";
    }
  };
  Times times_;
  double seconds_per_vw_ = 0;  // measured in the last train plan, reported with the next request
  bool warmed_up_ = false;     // a train plan ran before (the first one is not timed)
  const WorkerOptions options_;
  const std::string device_kind_;  // reported when registering: "cpu" or "cuda:<GPU name>"
  zmq::context_t* const context_;
  std::unique_ptr<Channel> coordinator_;
  const std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<Heartbeater> heartbeat_;  // from registration on
  // The plan Train() runs ahead of the coordinator's answer (RunAhead's
  // guess), until ConfirmPlan() takes the answer; nothing is pushed before.
  const StepPlan* ahead_ = nullptr;
  std::optional<StatusOr<Envelope>>
      overruled_;  // the answer that overruled a run ahead, for Loop()

  WorkerId id_;
  std::string host_;
  JobSpec spec_;
  std::vector<std::string> shard_addresses_;
  std::unique_ptr<ModelRunner> model_;
  bool holds_initial_values_ = true;  // nothing was pulled into model_ yet
  Dataset train_, test_;
  std::unique_ptr<Sampler> sampler_;
  Layout layout_;
  std::vector<size_t> flat_offset_;       // by tensor: start in the flat gradient vector
  std::vector<float> decoded_;            // a pulled chunk decoded from the weight wire dtype
  std::unique_ptr<TaskThread> reducing_;  // adds each VW's gradients into its block's tree
  size_t flat_size_ = 0;
  std::vector<std::unique_ptr<Channel>> shards_;  // by shard: pushes and their replies
  std::vector<std::unique_ptr<Channel>>
      pullers_;  // by shard: pulls and their replies (answered out of push order)
  std::vector<std::unique_ptr<ShmRegion>>
      pull_regions_;                  // by shard: where it may write pull replies (or null)
  std::vector<uint64_t> shm_offset_;  // by chunk: its place in its shard's region
  std::vector<uint64_t> shm_size_;    // by shard: its region's size
  std::vector<char> shm_pushes_;  // by shard: it answered a pull through shared memory, so it can
                                  // read pushes there
  std::vector<char>
      shm_refused_;  // by shard: it refused a push in shared memory: through the socket for good
  size_t push_region_size_ = 0;  // a block partial's region (StartBlock)
  size_t push_encoded_at_ = 0;   // where the partial's encoding starts in it
  // Regions of block partials: named by pushes not all acknowledged yet, and free for the next
  // blocks.
  std::vector<std::shared_ptr<ShmRegion>> push_regions_used_, push_regions_free_;
  std::vector<std::vector<std::vector<ChunkId>>>
      pull_groups_;               // by shard: the chunks of each pull (PullGroups)
  std::vector<int> outstanding_;  // push replies not yet collected, by shard
  // A pull of one version sent to every shard, its replies being taken.
  struct PullInFlight {
    Step version;
    bool prefetch;                   // sent before it was due (Prefetch)
    std::vector<size_t> answers;     // by shard: replies not yet taken
    std::vector<char> expired;       // by shard: a prefetched group waited too long at the shard
    std::vector<char> pulled_again;  // by shard: what did not come was asked for again
    Status failed;  // a reply taken while the pushes were acknowledged failed: PullInto returns it
  };
  std::optional<PullInFlight> pulling_;
  std::vector<char> pulled_;  // by chunk: came in the pull in flight
};

}  // namespace

StatusOr<std::unique_ptr<Worker>> Worker::Open(const WorkerOptions& options,
                                               zmq::context_t* context) {
  if (options.coordinator.empty())
    return InvalidArgument("a worker needs the coordinator's address");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0 (0: the job's count)");
  if (options.heartbeat_interval.count() <= 0)
    return InvalidArgument("the heartbeat interval must be positive");
  EPS_ASSIGN_OR_RETURN(std::string device_kind, DeviceKind(options.device));
  if (!options.reported_device_kind.empty()) device_kind = options.reported_device_kind;
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Connect(context, options.coordinator));
  return std::unique_ptr<Worker>(
      new WorkerImpl(options, std::move(device_kind), context, std::move(channel)));
}

}  // namespace eps
