#include "server/shard.h"

#include <glog/logging.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/format.h"
#include "common/metrics.h"
#include "common/rejections.h"
#include "schema/allowed_keys_watch.h"
#include "schema/channel.h"
#include "server/checkpoint_writer.h"
#include "server/shard_metrics.h"
#include "server/shard_mover.h"
#include "server/shard_state.h"
#include "storage/state_store.h"

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

// How often a refusal from the coordinator that does not stop the shard is logged, at most.
constexpr std::chrono::seconds kRefusalLogEvery(60);

size_t BytesOf(const std::vector<ChunkBytes>& chunks, const std::vector<ShmChunk>& shm_chunks,
               const std::vector<SparseRowBytes>& sparse) {
  size_t n = 0;
  for (const ChunkBytes& c : chunks) n += c.size;
  for (const ShmChunk& c : shm_chunks) n += c.size;
  for (const SparseRowBytes& r : sparse) n += r.ids.size + r.values.size;
  return n;
}

// The sparse tables' directory beside the shard's store (empty: memory only).
ShardTablesOptions TablesOptions(const ShardOptions& o) {
  ShardTablesOptions t;
  t.dir = o.store_path.empty() ? o.sparse_dir : o.store_path + ".sparse";
  // One more than the store keeps: a table's checkpoint is written before the state's, so the
  // state's newest but one is still a table's while the newest is being written.
  t.keep_checkpoints = o.keep_checkpoints + 1;
  return t;
}

ShardMover::Options MoverOptions(const ShardOptions& options) {
  ShardMover::Options o;
  o.shard = options.shard;
  o.token = options.token;
  o.channel.curve = options.curve;  // every server of the job serves with the same key pair
  return o;
}

class ShardImpl final : public Shard {
 public:
  ShardImpl(ShardOptions options, std::unique_ptr<Channel> workers,
            std::unique_ptr<Channel> coordinator, std::unique_ptr<ParallelFor> parallel,
            zmq::context_t* context)
      : options_(std::move(options)),
        workers_(std::move(workers)),
        coordinator_(std::move(coordinator)),
        parallel_(std::move(parallel)),
        state_(options_.shard, parallel_.get(), TablesOptions(options_)),
        own_metrics_(options_.metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
        metrics_(options_.metrics != nullptr ? options_.metrics : own_metrics_.get(),
                 options_.shard),
        rejections_(RejectionsOptions(), &clock_),
        mover_(MoverOptions(options_), context) {
    metrics_.version.Set(-1);
    metrics_.durable_step.Set(-1);
  }

  ~ShardImpl() override {
    writer_.reset();  // its thread writes to wake_fd_
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  const std::string& endpoint() const override { return workers_->endpoint(); }
  Step restored_version() const override { return restored_; }
  std::vector<SparseTable::Stats> TableStats() const override { return state_.TableStats(); }

  Status OpenKeys() {
    EPS_ASSIGN_OR_RETURN(
        keys_, AllowedKeysWatch::ForServer(options_.curve, options_.allowed_keys, &clock_));
    return OkStatus();
  }

  // Opens the store if there is one yet, and restores its newest checkpoint.
  Status OpenStore() {
    if (options_.store_path.empty()) return OkStatus();
    StoreOptions o = StoreOptionsFor(options_.job_id);
    o.create_if_missing = !options_.job_id.empty();
    auto store = StateStore::Open(o);
    if (store.status().code() == StatusCode::kNotFound && options_.job_id.empty()) {
      LOG(INFO) << "no store at " << options_.store_path
                << " yet: it is created once the coordinator names the job";
      return OkStatus();
    }
    if (!store.ok()) return store.status();
    return AttachStore(std::move(store).value());
  }

  Status Run(const volatile bool* stop) override {
    EPS_RETURN_IF_ERROR(Register());
    LOG(INFO) << "shard " << options_.shard << " serving on " << endpoint() << ", coordinator "
              << coordinator_->endpoint();
    while (!*stop && !done_) {
      std::vector<zmq::pollitem_t> items = {
          {static_cast<void*>(workers_->socket()), 0, ZMQ_POLLIN, 0},
          {static_cast<void*>(coordinator_->socket()), 0, ZMQ_POLLIN, 0},
          {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
      if (wake_fd_ < 0) items.pop_back();
      mover_.AppendPollItems(&items);  // the holders' replies of a move in progress
      try {
        zmq::poll(items.data(), items.size(), std::min(NextTimeout(), mover_.NextTimeout()));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return Internal(std::string("poll failed: ") + e.what());
      }
      if (items[1].revents & ZMQ_POLLIN) EPS_RETURN_IF_ERROR(OnCoordinatorMessage());
      if (items[0].revents & ZMQ_POLLIN) OnWorkerMessage();
      if (wake_fd_ >= 0 && (items[2].revents & ZMQ_POLLIN)) OnCheckpointsWritten(/*report=*/true);
      mover_.Poll();
      MaybeReportMove();
      ExpirePulls();
      workers_->CountConnections();
      if (auto summary = rejections_.TakeSummary()) LOG(WARNING) << *summary;
      if (!done_ && Clock::now() >= next_register_) {
        Status st = Register();
        if (!st.ok())
          LOG(WARNING) << "could not re-register with the coordinator: " << st.ToString();
      }
    }
    FinishCheckpoints();
    if (!done_) return Aborted("stopped by a signal");
    return fatal_;
  }

 private:
  struct WaitingPull {
    std::string peer;
    Pull pull;
    Clock::time_point deadline;
  };

  RejectionOptions RejectionsOptions() const {
    RejectionOptions r;
    r.metrics = options_.metrics != nullptr ? options_.metrics : own_metrics_.get();
    r.labels = metrics_.labels;
    return r;
  }

  StoreOptions StoreOptionsFor(const std::string& job_id) const {
    StoreOptions o;
    o.path = options_.store_path;
    o.job_id = job_id;
    o.owner = "shard/" + std::to_string(options_.shard.value());
    o.keep_checkpoints = options_.keep_checkpoints;
    return o;
  }

  Status AttachStore(std::unique_ptr<StateStore> store) {
    store_ = std::move(store);
    store_->RetainFrom(Step(-1));  // keep every checkpoint until the coordinator names the floor
    EPS_ASSIGN_OR_RETURN(std::vector<Step> held, store_->ListCheckpoints());
    if (!held.empty()) {
      auto checkpoint = store_->LatestCheckpoint();
      if (!checkpoint.ok())
        return checkpoint.status().WithContext("restoring from store " + store_->path());
      EPS_RETURN_IF_ERROR(state_.Restore(std::move(checkpoint).value())
                              .WithContext("restoring from store " + store_->path()));
      durable_step_ = checkpoint->step;  // restored, not written: no times
      restored_ = checkpoint->step;
      metrics_.durable_step.Set(durable_step_.value());
      metrics_.version.Set(state_.version().value());
      LOG(INFO) << "restored version " << restored_ << " of job '" << store_->job_id()
                << "' from store " << store_->path() << " (" << state_.chunks().size()
                << " chunks)";
    }
    // A move staged before a restart: the coordinator commits or abandons it.
    EPS_ASSIGN_OR_RETURN(move_reported_, mover_.Recover(*store_));
    if (move_reported_) {
      LOG(INFO) << "a staged move to shard map generation " << mover_.reshard().map.generation
                << " is held in the store";
    }
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
    writer_ = std::make_unique<CheckpointWriter>(store_.get(), wake_fd_);
    return OkStatus();
  }

  // Registers, and then again every register_every as a beacon: a restarted
  // coordinator learns this shard and the version it serves from it, and the
  // coordinator that knows the shard on this connection takes it as a no-op.
  Status Register() {
    next_register_ = Clock::now() + options_.register_every;
    return SendToCoordinator(RegisterShard{options_.shard, endpoint(), durable_step_,
                                           state_.version(), options_.metrics_address});
  }

  template <class M>
  Status SendToCoordinator(M message) {
    return coordinator_->Send(Envelope{options_.token, std::move(message)});
  }

  void Reply(const std::string& peer, Body body) {
    Status st = workers_->SendTo(peer, Envelope{options_.token, std::move(body)});
    if (!st.ok()) LOG(WARNING) << "reply lost: " << st.ToString();
  }
  void ReplyError(const std::string& peer, const Status& st) {
    Reply(peer, ErrorReply{st.code(), st.message()});
  }

  // A pull that names a shared-memory region of a worker on this host gets its
  // bytes there (common/shm.h), others, and those the shard cannot map, inline.
  void ReplyToPull(const std::string& peer, const Pull& pull, PullReply reply) {
    if (pull.shm.has_value()) {
      Status st = MoveIntoShm(pull, &shm_, &reply);
      if (!st.ok() && inline_pulls_++ % 1000 == 0) {
        LOG(INFO) << "answered a pull that named shared memory inline (" << inline_pulls_
                  << " so far): " << st.ToString();
      }
    }
    const size_t bytes = BytesOf(reply.chunks, reply.shm_chunks, reply.sparse);
    bytes_out_ += bytes;
    metrics_.pull_bytes.Add(static_cast<double>(bytes));
    metrics_.pulls.Add();
    Reply(peer, std::move(reply));
  }

  // Until the next beacon or the first waiting pull's deadline, whichever comes first.
  std::chrono::milliseconds NextTimeout() const {
    Clock::time_point next = next_register_;
    if (!waiting_.empty()) next = std::min(next, waiting_.front().deadline);
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()));
  }

  // Stops the shard with `st`, telling the coordinator why.
  void Refuse(const Status& st) {
    LOG(ERROR) << "refusing the job config: " << st.ToString();
    (void)SendToCoordinator(ErrorReply{
        st.code(), "shard " + std::to_string(options_.shard.value()) + ": " + st.message()});
    fatal_ = st;
    done_ = true;
  }

  // A job whose chunks would not fit the socket's frame limit is refused at once, not by
  // ZeroMQ dropping its workers' connections later. Its chunks are known with its tensors.
  Status CheckFrameLimit(const ShardConfig& config) const {
    int64_t largest = 0;
    for (const TensorSpec& t : config.tensors) largest = std::max(largest, t.numel());
    const int64_t elems = std::min(config.spec.chunk_elems, largest);
    const int64_t needed = LargestLegitFrame(elems);
    if (options_.max_message_bytes < 0 || needed <= options_.max_message_bytes) return OkStatus();
    return FailedPrecondition(StrFormat(
        "the job's chunks of up to %lld elements make frames of up to %lld bytes, more than this "
        "shard's --max_message_mb allows (%lld bytes): raise it or lower --chunk_elems",
        static_cast<long long>(elems), static_cast<long long>(needed),
        static_cast<long long>(options_.max_message_bytes)));
  }

  // The store must belong to the coordinator's job; a missing one is created now.
  Status CheckStoreFor(const ShardConfig& config) {
    if (options_.store_path.empty()) return OkStatus();
    if (store_ == nullptr) {
      EPS_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> store,
                           StateStore::Open(StoreOptionsFor(config.spec.job_id)));
      return AttachStore(std::move(store));
    }
    if (store_->job_id() != config.spec.job_id) {
      return FailedPrecondition("store " + store_->path() + " belongs to job '" + store_->job_id() +
                                "', the coordinator runs job '" + config.spec.job_id + "'");
    }
    return OkStatus();
  }

  Status OnCoordinatorMessage() {
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, coordinator_->TryReceive());
    if (!in.envelope.ok()) {
      LOG(WARNING) << "dropped a bad message from the coordinator: "
                   << in.envelope.status().ToString();
      return OkStatus();
    }
    Body& body = in.envelope->body;
    if (auto* config = std::get_if<ShardConfig>(&body)) {
      Status st = CheckFrameLimit(*config);
      if (st.ok()) st = CommitOrDropMove(*config);
      if (st.ok()) st = CheckStoreFor(*config);
      if (st.ok()) {
        st = state_.Configure(*config);
        if (!st.ok() && restored_.value() >= 0) {
          st = st.WithContext("the state restored from store " + store_->path() +
                              " does not fit the job");
        }
      }
      if (!st.ok()) {
        Refuse(st);
      } else {
        if (state_.has_layout())
          LOG(INFO) << "configured: " << state_.chunks().size() << " chunks on this shard";
        state_.EnterTimeline(config->timeline);
        AnswerWaitingPulls();  // those of an abandoned timeline are refused now
      }
    } else if (auto* reshard = std::get_if<Reshard>(&body)) {
      OnReshard(*reshard);
    } else if (auto* rollback = std::get_if<Rollback>(&body)) {
      mover_.Drop();  // a move in progress is abandoned
      if (store_ != nullptr) {
        Status forgot = ShardMover::Forget(store_.get());
        if (!forgot.ok()) LOG(WARNING) << "a staged move stays in the store: " << forgot.ToString();
      }
      OnRollback(*rollback);
    } else if (auto* retain = std::get_if<Retain>(&body)) {
      if (store_ != nullptr) store_->RetainFrom(retain->from_step);
      state_.RetainTablesFrom(retain->from_step);
    } else if (auto* shutdown = std::get_if<Shutdown>(&body)) {
      LOG(INFO) << "shutdown: " << shutdown->reason << " (" << state_.duplicates()
                << " duplicate contributions dropped)";
      done_ = true;
    } else if (auto* err = std::get_if<ErrorReply>(&body)) {
      OnCoordinatorError(err->ToStatus());
    } else {
      LOG(WARNING) << "unexpected " << BodyName(body) << " from the coordinator";
    }
    return OkStatus();
  }

  // A config this shard can never serve (an id outside the job, a wrong token)
  // or a message of this shard the coordinator cannot read (ProtocolError)
  // stops it. Any other refusal passes: a restarted coordinator that does not
  // know this shard yet (NotFound) learns it from the next beacon, and a
  // refusal during a rollback or a restart (Aborted, Unavailable) is transient.
  void OnCoordinatorError(const Status& st) {
    switch (st.code()) {
      case StatusCode::kInvalidArgument:
      case StatusCode::kFailedPrecondition:
      case StatusCode::kProtocolError:  // the coordinator could not read this shard's message
      case StatusCode::kUnauthenticated:
        LOG(ERROR) << "coordinator refused this shard: " << st.ToString();
        fatal_ = st;
        done_ = true;
        return;
      default:
        break;
    }
    ++refusals_unlogged_;
    const auto now = Clock::now();
    if (last_refusal_log_.has_value() && now - *last_refusal_log_ < kRefusalLogEvery) return;
    LOG(WARNING) << "the coordinator refused a message from this shard (" << refusals_unlogged_
                 << (refusals_unlogged_ == 1 ? " refusal" : " refusals")
                 << " since the last note): " << st.ToString()
                 << "; serving on, registering again every " << options_.register_every.count()
                 << " ms";
    last_refusal_log_ = now;
    refusals_unlogged_ = 0;
  }

  void OnWorkerMessage() {
    auto received = workers_->TryReceive();
    if (!received.ok()) return;
    Channel::Incoming& in = *received;
    const Status admitted =
        AdmitIncoming(in, keys_ ? &*keys_ : nullptr, &rejections_, " from a worker");
    if (!admitted.ok()) return ReplyError(in.peer, admitted);
    Body& body = in.envelope->body;
    if (auto* push = std::get_if<Push>(&body)) {
      // Bytes in a worker's shared memory are read in place, before the reply lets the worker write
      // there again.
      Status readable =
          options_.refuse_shm_pushes && push->shm.has_value()
              ? Unimplemented("refusing pushes in shared memory (--refuse_shm_pushes)")
              : ResolveShm(&shm_, push);
      auto outcome =
          readable.ok() ? state_.HandlePush(*push) : StatusOr<ShardState::PushOutcome>(readable);
      if (!outcome.ok()) {
        if (rejections_.Record(in.peer, RejectReason::kRefused))
          LOG(WARNING) << "refused push for step " << push->step << " block "
                     << push->block.ToString() << ": " << outcome.status().ToString();
        metrics_.pushes_refused.Add();
        ReplyError(in.peer, outcome.status());
        return;
      }
      CountPush(*push, outcome->reply);
      if (outcome->reply.duplicates > 0) {
        LOG(INFO) << "dropped " << outcome->reply.duplicates
                  << " duplicate chunk contributions for step " << push->step << " block "
                  << push->block.ToString();
      }
      // A step this push completed answers the pulls waiting for it before the push: the workers
      // wait for those bytes, the acknowledgement only releases the pusher's region.
      if (outcome->completed) AnswerWaitingPulls();
      Reply(in.peer, outcome->reply);
      if (outcome->completed) {
        OnStepCompleted(*outcome->completed);
      } else if (outcome->finalized) {
        AnswerWaitingPulls();  // pulls of the step in progress whose chunks this push made final
      }
    } else if (auto* pull = std::get_if<Pull>(&body)) {
      auto reply = state_.Answer(*pull);
      if (reply.ok()) {
        ReplyToPull(in.peer, *pull, std::move(reply).value());
      } else if (reply.status().code() == StatusCode::kUnavailable) {
        Status room = RoomToWait(in.peer);
        if (!room.ok()) {
          if (rejections_.Record(in.peer, RejectReason::kOverLimit))
            LOG(WARNING) << "refused a pull: " << room.message();
          ReplyError(in.peer, room);
          return;
        }
        waiting_.push_back({in.peer, std::move(*pull), Clock::now() + options_.pull_wait});
        state_.WarmSparse(waiting_.back().pull);
      } else {
        ReplyError(in.peer, reply.status());
      }
    } else if (auto* move = std::get_if<MoveRequest>(&body)) {
      auto reply = AnswerMoveRequest(state_, *move);
      if (reply.ok()) {
        Reply(in.peer, std::move(reply).value());
      } else {
        ReplyError(in.peer, reply.status());
      }
    } else {
      const Status st = InvalidArgument(std::string("a shard does not serve ") + BodyName(body));
      if (rejections_.Record(in.peer, RejectReason::kUnserved))
        LOG(WARNING) << "refused a message: " << st.message();
      ReplyError(in.peer, st);
    }
  }

  // Whether one more pull of `peer` may wait for its version: a peer cannot make the shard
  // hold pulls without bound (each holds its request until answered or expired).
  Status RoomToWait(const std::string& peer) const {
    if (waiting_.size() >= options_.max_waiting_pulls)
      return ResourceExhausted(StrFormat("%zu pulls already wait at this shard", waiting_.size()));
    const size_t of_peer = static_cast<size_t>(std::count_if(
        waiting_.begin(), waiting_.end(), [&](const WaitingPull& w) { return w.peer == peer; }));
    if (of_peer >= options_.max_waiting_pulls_per_peer)
      return ResourceExhausted(
          StrFormat("%zu pulls of this peer already wait at this shard", of_peer));
    return OkStatus();
  }

  // A push read whole (ResolveShm made its shared-memory chunks chunks of it).
  void CountPush(const Push& push, const PushReply& reply) {
    const size_t bytes = BytesOf(push.chunks, push.shm_chunks, push.sparse);
    bytes_in_ += bytes;
    metrics_.push_bytes.Add(static_cast<double>(bytes));
    if (reply.accepted > 0) {
      metrics_.pushes_accepted.Add();
      // The step's clock starts at its first contribution (not at the initial values').
      if (push.step.value() >= 0 && push.step != step_started_of_) {
        step_started_of_ = push.step;
        step_started_ = Clock::now();
      }
    } else {
      metrics_.pushes_duplicate.Add();
    }
  }

  // After the waiting pulls of the version are answered (the caller does that first).
  void OnStepCompleted(StepDone done) {
    VLOG(1) << "step " << done.step << " done";
    if (done.step.value() >= 0 && done.step == step_started_of_)
      metrics_.step_seconds.Observe(SecondsSince(step_started_));
    metrics_.version.Set(state_.version().value());
    MaybeCheckpoint();     // before the next push can step a chunk of the next step
    PublishTableStats();
    done.durable_step = durable_step_;
    done.checkpoint_error = checkpoint_error_;
    done.checkpoint_blocking_ms = durable_blocking_ms_;
    done.checkpoint_write_ms = durable_write_ms_;
    done.bytes_in = bytes_in_;
    done.bytes_out = bytes_out_;
    Status st = SendToCoordinator(std::move(done));
    if (!st.ok()) LOG(WARNING) << "could not report a step: " << st.ToString();
  }

  void PublishTableStats() { metrics_.PublishTables(state_.TableStats()); }

  // Hands a snapshot of the version served to the writer when one is due (or `force`d).
  void MaybeCheckpoint(bool force = false) {
    if (writer_ == nullptr) return;
    if (!force && (options_.checkpoint_every <= 0 ||
                   state_.version().value() % options_.checkpoint_every != 0))
      return;
    const Clock::time_point start = Clock::now();
    // The tables' checkpoint first (synced, on this thread: only the rows changed since the last
    // one), so that the state's checkpoint of this step, once durable, always finds it.
    Status tables = state_.CheckpointTables();
    auto snapshot = tables.ok() ? state_.Snapshot() : StatusOr<ShardSnapshot>(tables);
    Status st = snapshot.ok() ? writer_->Enqueue(std::move(snapshot).value(), options_.store_wait)
                              : snapshot.status();
    if (st.ok()) snapshot_ms_[state_.version().value()] = SecondsSince(start) * 1e3;
    if (!st.ok()) {
      checkpoint_error_ =
          "checkpoint of step " + std::to_string(state_.version().value()) + ": " + st.ToString();
      LOG(ERROR) << checkpoint_error_;
      metrics_.checkpoint_failures.Add();
    }
  }

  // Takes the writer's results; with `report`, tells the coordinator the new
  // durable step (or the error) in a StepDone for the step completed last.
  void OnCheckpointsWritten(bool report) {
    uint64_t count = 0;
    if (read(wake_fd_, &count, sizeof count) < 0 && errno != EAGAIN)
      PLOG(WARNING) << "eventfd read";
    std::vector<CheckpointWriter::Result> results = writer_->TakeResults();
    if (results.empty()) return;
    for (CheckpointWriter::Result& r : results) {
      const auto blocked = snapshot_ms_.find(r.step.value());
      const double blocking_ms = blocked != snapshot_ms_.end() ? blocked->second : 0;
      if (blocked != snapshot_ms_.end()) snapshot_ms_.erase(blocked);
      if (r.status.ok()) {
        durable_step_ = r.step;
        durable_blocking_ms_ = blocking_ms;
        durable_write_ms_ = r.seconds * 1e3;
        checkpoint_error_.clear();
        LOG(INFO) << "checkpoint of step " << r.step << " is durable";
        metrics_.checkpoint_seconds.Observe(r.seconds);
      } else {
        checkpoint_error_ =
            "checkpoint of step " + std::to_string(r.step.value()) + ": " + r.status.ToString();
        LOG(ERROR) << checkpoint_error_ << " (serving on from memory)";
        metrics_.checkpoint_failures.Add();
      }
    }
    metrics_.durable_step.Set(durable_step_.value());
    if (!report) return;
    const Step step(state_.version().value() - 1);
    StepDone done{options_.shard, step, false, 0.0f, durable_step_, checkpoint_error_};
    done.checkpoint_blocking_ms = durable_blocking_ms_;
    done.checkpoint_write_ms = durable_write_ms_;
    done.lr = state_.LearningRateOf(step);
    done.bytes_in = bytes_in_;
    done.bytes_out = bytes_out_;
    Status st = SendToCoordinator(std::move(done));
    if (!st.ok()) LOG(WARNING) << "could not report the durable step: " << st.ToString();
  }

  void OnRollback(const Rollback& rollback) {
    const Step step = rollback.step;
    state_.EnterTimeline(rollback.timeline);  // the pulls waiting now are refused below
    const Status st = RollBack(step);
    if (st.ok()) {
      LOG(INFO) << "rolled back to version " << state_.version()
                << (store_ != nullptr ? " from store " + store_->path()
                                      : std::string(" (no store: empty)"));
    } else {
      LOG(WARNING) << "rollback to step " << step << " refused: " << st.ToString();
    }
    metrics_.version.Set(state_.version().value());
    metrics_.durable_step.Set(durable_step_.value());
    step_started_of_ = Step(-1);  // a step in progress is abandoned
    RollbackDone done{options_.shard, step,      state_.version(),
                      durable_step_,  st.code(), st.message()};
    Status sent = SendToCoordinator(std::move(done));
    if (!sent.ok()) LOG(WARNING) << "could not answer the rollback: " << sent.ToString();
    AnswerWaitingPulls();
  }

  // ---- moves between shard maps (docs/design.md, "Elastic shards") ----

  // Stages this shard's part of the move (server/shard_mover.h) and holds the
  // step durably; MaybeReportMove answers once both are done.
  void OnReshard(const Reshard& reshard) {
    mover_.Drop();
    move_reported_ = move_persisted_ = false;
    ready_after_ = Clock::now() + options_.move_stall;
    // A shard that holds nothing yet (one added) takes the move at any version.
    const bool holds = !state_.chunks().empty() || state_.version().value() >= 0;
    Status st =
        !state_.has_layout() ? FailedPrecondition("a move before the job's model is known")
        : holds && state_.version() != reshard.step
            ? FailedPrecondition("a move at version " + std::to_string(reshard.step.value()) +
                                 ", this shard serves " + std::to_string(state_.version().value()))
            : mover_.Start(reshard, state_.layout());
    if (!st.ok()) {
      (void)SendToCoordinator(
          ReshardReady{options_.shard, reshard.map.generation, st.code(), st.message(), 0});
      move_reported_ = true;
      return;
    }
    if (holds && durable_step_ < reshard.step) MaybeCheckpoint(/*force=*/true);
    MaybeReportMove();
  }

  void MaybeReportMove() {
    if (!mover_.active() || move_reported_) return;
    const Reshard& r = mover_.reshard();
    Status st = mover_.failure().value_or(OkStatus());
    const bool undurable =
        writer_ != nullptr && state_.version().value() >= 0 && durable_step_ < r.step;
    if (st.ok() && (!mover_.staged() || undurable)) return;
    if (st.ok() && store_ != nullptr && !move_persisted_) {
      st = mover_.Persist(store_.get());  // before it says ready
      move_persisted_ = true;
    }
    if (st.ok() && Clock::now() < ready_after_) return;  // options_.move_stall
    Status sent = SendToCoordinator(
        ReshardReady{options_.shard, r.map.generation, st.code(), st.message(), mover_.bytes_in()});
    if (!sent.ok()) LOG(WARNING) << "could not answer the move: " << sent.ToString();
    move_reported_ = true;
  }

  // A config naming the map of the move staged commits it (the shard takes
  // the map, checkpoints the version under it, and says so); one naming another
  // map while a move is staged abandons it.
  Status CommitOrDropMove(const ShardConfig& config) {
    if (!mover_.active()) return OkStatus();
    if (!config.map || config.map->generation != mover_.reshard().map.generation) {
      mover_.Drop();
      return store_ != nullptr ? ShardMover::Forget(store_.get()) : OkStatus();
    }
    const uint64_t bytes = mover_.bytes_in();
    const Step step = mover_.reshard().step;
    // A shard restarted holding nothing but the staged move: the map it leaves first.
    if (!state_.has_layout()) {
      EPS_RETURN_IF_ERROR(CheckStoreFor(config));
      EPS_RETURN_IF_ERROR(state_.Configure(
          ShardConfig{config.spec, config.tensors, config.timeline, mover_.from()}));
    }
    // Restored from the move's own checkpoint (a restart after it landed): taken already.
    const bool taken = state_.layout().map == *config.map;
    Status st = taken             ? OkStatus()
                : mover_.staged() ? state_.AdoptMap(*config.map, step, mover_.Take())
                                  : FailedPrecondition("a move committed before it was staged");
    mover_.Drop();
    if (st.ok() && !taken) {
      LOG(INFO) << "took shard map generation " << config.map->generation << " at version " << step
                << ": " << state_.chunks().size() << " chunks, " << bytes << " bytes moved in";
      metrics_.version.Set(step.value());
      // The move's checkpoint, durable before the staged move goes: a restart finds one or the
      // other.
      MaybeCheckpoint(/*force=*/true);
      if (writer_ != nullptr) {
        st = writer_->Flush(options_.store_wait);
        OnCheckpointsWritten(/*report=*/true);
        if (st.ok() && durable_step_ < step) st = Unavailable(checkpoint_error_);
      }
    }
    if (st.ok() && store_ != nullptr) st = ShardMover::Forget(store_.get());
    (void)SendToCoordinator(ReshardReady{options_.shard, config.map->generation, st.code(),
                                         st.message(), bytes, /*committed=*/true});
    return st;
  }

  // To a step's checkpoint; to step -1 (no step every shard holds), back to
  // before the initial values, dropping every checkpoint.
  Status RollBack(Step step) {
    if (store_ == nullptr) {
      if (step.value() >= 0) {
        return FailedPrecondition("shard " + std::to_string(options_.shard.value()) +
                                  " has no store to roll back from");
      }
      return state_.Clear();
    }
    // Checkpoints in flight belong to the abandoned future: let them land, the
    // rollback deletes them.
    EPS_RETURN_IF_ERROR(writer_->Flush(options_.store_wait));
    OnCheckpointsWritten(/*report=*/false);
    if (step.value() < 0) {
      EPS_RETURN_IF_ERROR(store_->DropCheckpointsAfter(step));
      EPS_RETURN_IF_ERROR(state_.Clear());
    } else {
      EPS_RETURN_IF_ERROR(state_.RollbackTo(*store_, step));
    }
    durable_step_ = step;
    durable_blocking_ms_ = durable_write_ms_ = 0;
    return OkStatus();
  }

  // Waits (bounded) for pending checkpoints before the shard stops.
  void FinishCheckpoints() {
    if (writer_ == nullptr) return;
    Status st = writer_->Flush(options_.store_wait);
    if (!st.ok()) LOG(ERROR) << "stopping with a checkpoint unwritten: " << st.ToString();
    OnCheckpointsWritten(/*report=*/false);
    LOG(INFO) << "newest durable step: " << durable_step_;
  }

  // Answers the pulls that were waiting for a version that is now there (or gone).
  void AnswerWaitingPulls() {
    std::deque<WaitingPull> still;
    for (WaitingPull& w : waiting_) {
      auto reply = state_.Answer(w.pull);
      if (reply.ok()) {
        ReplyToPull(w.peer, w.pull, std::move(reply).value());
      } else if (reply.status().code() == StatusCode::kUnavailable) {
        still.push_back(std::move(w));
      } else {
        ReplyError(w.peer, reply.status());
      }
    }
    waiting_.swap(still);
  }

  void ExpirePulls() {
    const auto now = Clock::now();
    while (!waiting_.empty() && waiting_.front().deadline <= now) {
      ReplyError(
          waiting_.front().peer,
          DeadlineExceeded("version " + std::to_string(waiting_.front().pull.version.value()) +
                           " did not arrive in time"));
      waiting_.pop_front();
    }
  }

  const ShardOptions options_;
  std::unique_ptr<Channel> workers_;
  std::unique_ptr<Channel> coordinator_;
  const std::unique_ptr<ParallelFor> parallel_;  // the optimizer's threads; before state_
  ShardState state_;
  std::deque<WaitingPull> waiting_;  // ordered by deadline (all share one wait)
  ShmMappings shm_;           // the regions of the workers on this host that pulls and pushes named
  int64_t inline_pulls_ = 0;  // pulls that named shared memory, answered inline
  bool done_ = false;
  Status fatal_;
  Clock::time_point next_register_;                    // the next beacon
  std::optional<Clock::time_point> last_refusal_log_;  // when a passing refusal was last logged
  int64_t refusals_unlogged_ = 0;                      // passing refusals since then

  std::unique_ptr<StateStore> store_;         // null: memory only (or not created yet)
  std::unique_ptr<CheckpointWriter> writer_;  // with store_; destroyed before it
  int wake_fd_ = -1;                          // the writer's eventfd
  Step restored_{-1};
  Step durable_step_{-1};         // newest checkpoint written (or restored, or rolled back to)
  double durable_blocking_ms_ = 0, durable_write_ms_ = 0;  // its snapshot and write (0: not written here)
  std::map<int64_t, double> snapshot_ms_;  // by step: the snapshots queued, how long each stopped the loop
  std::string checkpoint_error_;  // why the newest checkpoint attempt failed

  const std::unique_ptr<Metrics> own_metrics_;  // when the options name no registry
  ShardMetrics metrics_;
  uint64_t bytes_in_ = 0;   // of the pushes read (eps_shard_push_bytes_total)
  uint64_t bytes_out_ = 0;  // of the pull replies sent (eps_shard_pull_bytes_total)
  Step step_started_of_{-1};         // the step whose first contribution came at step_started_
  Clock::time_point step_started_;
  SteadyClock clock_;       // the rejections'
  Rejections rejections_;  // of worker messages; after metrics_ and clock_
  std::optional<AllowedKeysWatch> keys_;  // with CURVE: revocation of open connections
  ShardMover mover_;                      // a move between shard maps in progress
  bool move_reported_ = false;            // its ReshardReady went out
  bool move_persisted_ = false;           // ... and its staged part is in the store
  Clock::time_point ready_after_;         // ... not before (options_.move_stall)
};

}  // namespace

StatusOr<std::unique_ptr<Shard>> Shard::Open(const ShardOptions& options, zmq::context_t* context) {
  if (options.coordinator.empty())
    return InvalidArgument("a shard needs the coordinator's address");
  if (options.checkpoint_every < 0) return InvalidArgument("checkpoint_every must be >= 0");
  if (options.checkpoint_every > 0 && options.store_path.empty()) {
    return InvalidArgument("checkpoint_every needs a store");
  }
  if (options.threads < 1) {
    return InvalidArgument("a shard needs at least 1 thread, got " +
                           std::to_string(options.threads));
  }
  if (options.register_every.count() <= 0)
    return InvalidArgument("register_every must be positive");
  Channel::Options co;
  co.curve = options.curve;
  Channel::Options wo = co;  // the workers' side, bounded
  wo.send_hwm = wo.receive_hwm = options.socket_hwm;
  wo.max_message_bytes = options.max_message_bytes;
  wo.token = options.token;
  wo.metrics = options.metrics;
  wo.labels = {{"shard", std::to_string(options.shard.value())}};
  EPS_ASSIGN_OR_RETURN(auto workers, Channel::Bind(context, options.bind, wo));
  EPS_ASSIGN_OR_RETURN(auto coordinator, Channel::Connect(context, options.coordinator, co));
  EPS_ASSIGN_OR_RETURN(auto parallel, ParallelFor::Start(options.threads));
  auto shard = std::make_unique<ShardImpl>(options, std::move(workers), std::move(coordinator),
                                           std::move(parallel), context);
  EPS_RETURN_IF_ERROR(shard->OpenStore());
  EPS_RETURN_IF_ERROR(shard->OpenKeys());
  return std::unique_ptr<Shard>(std::move(shard));
}

}  // namespace eps
