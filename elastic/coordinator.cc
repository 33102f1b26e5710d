#include "elastic/coordinator.h"

#include <glog/logging.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/digest.h"
#include "common/files.h"
#include "common/layout.h"
#include "schema/channel.h"

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kDataFiles[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

struct WorkerInfo {
  WorkerId id;
  std::string peer;
  std::string host;
  uint32_t pid = 0;
  bool pending = false;  // a StepRequest waits for its plan
  Step done_step{-1};
  bool reported_model = false;
  uint32_t vw_lo = 0, vw_hi = 0;
};

struct ShardInfo {
  std::string peer;
  std::string address;
  Step done{-2};  // last StepDone (-1: initial values stored)
};

enum class Phase { kStarting, kInitializing, kTraining, kEvaluating, kFinished };

class CoordinatorImpl final : public Coordinator {
 public:
  CoordinatorImpl(CoordinatorOptions options, std::unique_ptr<Channel> channel, zmq::context_t* context)
      : options_(std::move(options)),
        spec_(options_.spec),
        channel_(std::move(channel)),
        context_(context),
        shards_(spec_.num_shards) {}

  const std::string& endpoint() const override { return channel_->endpoint(); }

  Status Run(const volatile bool* stop) override {
    started_ = Clock::now();
    last_progress_ = started_;
    phase_deadline_ = started_ + options_.startup_timeout;
    LOG(INFO) << "coordinator of job '" << spec_.job_id << "' on " << endpoint() << ": V=" << spec_.virtual_workers
              << " batch/VW=" << spec_.batch_per_vw << " model=" << spec_.model << " shards=" << spec_.num_shards
              << " workers=" << options_.workers;
    while (!*stop && phase_ != Phase::kFinished && fatal_.ok()) {
      auto in = channel_->Receive(std::chrono::milliseconds(200));
      if (in.ok()) {
        OnMessage(*in);
      } else if (in.status().code() != StatusCode::kDeadlineExceeded &&
                 in.status().code() != StatusCode::kAborted) {
        return in.status();
      }
      if (!fatal_.ok()) break;
      Advance();
      if (Clock::now() > phase_deadline_ && phase_ != Phase::kFinished) {
        fatal_ = DeadlineExceeded(WaitingFor());
      }
    }
    if (*stop && phase_ != Phase::kFinished) fatal_ = Aborted("stopped by a signal");
    Shutdown(fatal_.ok() ? "job finished" : fatal_.ToString());
    return fatal_;
  }

 private:
  // ---- messages -----------------------------------------------------------

  template <class M>
  void Send(const std::string& peer, M message) {
    Status st = channel_->SendTo(peer, Envelope{options_.token, std::move(message)});
    if (!st.ok()) LOG(WARNING) << "message lost: " << st.ToString();
  }
  void SendError(const std::string& peer, const Status& st) { Send(peer, ErrorReply{st.code(), st.message()}); }

  void OnMessage(Channel::Incoming& in) {
    if (!in.envelope.ok()) {
      LOG(WARNING) << "bad message: " << in.envelope.status().ToString();
      SendError(in.peer, in.envelope.status());
      return;
    }
    if (!options_.token.empty() && in.envelope->token != options_.token) {
      LOG(WARNING) << "refused a message with a wrong job token";
      SendError(in.peer, Unauthenticated("wrong job token"));
      return;
    }
    Body& body = in.envelope->body;
    if (auto* m = std::get_if<RegisterShard>(&body)) return OnRegisterShard(in.peer, *m);
    if (auto* m = std::get_if<RegisterWorker>(&body)) return OnRegisterWorker(in.peer, *m);
    if (auto* m = std::get_if<StepRequest>(&body)) return OnStepRequest(in.peer, *m);
    if (auto* m = std::get_if<StepDone>(&body)) return OnStepDone(in.peer, *m);
    if (auto* m = std::get_if<EvalResult>(&body)) return OnEvalResult(in.peer, *m);
    if (auto* m = std::get_if<ErrorReply>(&body)) {
      // Shards and workers report job-level errors (a bad spec) this way: the job cannot run.
      fatal_ = FailedPrecondition(m->message);
      LOG(ERROR) << "job cannot run: " << m->message;
      return;
    }
    SendError(in.peer, InvalidArgument(std::string("the coordinator does not serve ") + BodyName(body)));
  }

  void OnRegisterShard(const std::string& peer, const RegisterShard& m) {
    if (m.shard.value() >= shards_.size()) {
      SendError(peer, InvalidArgument("shard id " + std::to_string(m.shard.value()) + " but the job has " +
                                      std::to_string(shards_.size()) + " shards"));
      return;
    }
    ShardInfo& s = shards_[m.shard.value()];
    if (!s.peer.empty() && s.peer != peer) {
      SendError(peer, AlreadyExists("shard " + std::to_string(m.shard.value()) + " is already registered"));
      return;
    }
    s.peer = peer;
    s.address = m.address;
    LOG(INFO) << "shard " << m.shard << " registered at " << m.address;
    if (!tensors_.empty()) SendShardConfig(s);
  }

  bool AllShardsRegistered() const {
    for (const ShardInfo& s : shards_) {
      if (s.peer.empty()) return false;
    }
    return true;
  }

  void OnRegisterWorker(const std::string& peer, const RegisterWorker& m) {
    WorkerInfo w;
    w.id = WorkerId(next_worker_++);
    w.peer = peer;
    w.host = m.host;
    w.pid = m.pid;
    LOG(INFO) << "worker " << w.id << " registered from " << m.host << " pid " << m.pid;
    waiting_registrations_.push_back(w.id);
    workers_.emplace(w.id, std::move(w));
  }

  WorkerInfo* FindWorker(const std::string& peer, WorkerId id) {
    auto it = workers_.find(id);
    if (it == workers_.end() || it->second.peer != peer) {
      SendError(peer, NotFound("unknown worker " + std::to_string(id.value()) + ": register first"));
      return nullptr;
    }
    return &it->second;
  }

  void OnStepRequest(const std::string& peer, StepRequest& m) {
    WorkerInfo* w = FindWorker(peer, m.worker);
    if (w == nullptr) return;
    if (!w->reported_model) {
      Status st = AcceptModel(m);
      if (!st.ok()) {
        LOG(ERROR) << "worker " << w->id << ": " << st.ToString();
        SendError(peer, st);
        return;
      }
      w->reported_model = true;
    }
    w->pending = true;
    w->done_step = m.done_step;
  }

  // The first worker's model fixes the layout; later ones must agree.
  Status AcceptModel(const StepRequest& m) {
    if (m.tensors.empty()) return InvalidArgument("the first step request must carry the model's tensors");
    std::vector<TensorSpec> tensors = m.tensors;
    tensors.push_back(LossTensor());
    if (!tensors_.empty()) {
      if (tensors != tensors_) return FailedPrecondition("the worker's model differs from the job's");
      return OkStatus();
    }
    EPS_ASSIGN_OR_RETURN(layout_, MakeLayout(tensors, spec_.num_shards, spec_.chunk_elems));
    if (m.train_samples <= 0) return InvalidArgument("the worker loaded no training data");
    train_samples_ = m.train_samples;
    test_samples_ = spec_.test_limit < 0 ? 0 : m.test_samples;
    if (spec_.steps <= 0) {
      const double global_batch = static_cast<double>(spec_.virtual_workers) * spec_.batch_per_vw;
      spec_.steps = static_cast<int64_t>(std::floor(options_.epochs * train_samples_ / global_batch));
      if (spec_.steps <= 0) return InvalidArgument("--epochs gives no whole step");
    }
    tensors_ = std::move(tensors);
    LOG(INFO) << "model: " << layout_.NumParameters() << " parameters in " << layout_.chunks.size()
              << " chunks; " << spec_.steps << " steps; " << train_samples_ << " training and " << test_samples_
              << " test samples";
    for (ShardInfo& s : shards_) SendShardConfig(s);
    return OkStatus();
  }

  void SendShardConfig(const ShardInfo& s) {
    if (!s.peer.empty()) Send(s.peer, ShardConfig{spec_, tensors_});
  }

  void OnStepDone(const std::string& peer, const StepDone& m) {
    if (m.shard.value() >= shards_.size() || shards_[m.shard.value()].peer != peer) {
      SendError(peer, InvalidArgument("step report from an unknown shard"));
      return;
    }
    shards_[m.shard.value()].done = m.step;
    if (m.has_loss) losses_[m.step.value()] = m.loss;
  }

  void OnEvalResult(const std::string& peer, const EvalResult& m) {
    WorkerInfo* w = FindWorker(peer, m.worker);
    if (w == nullptr || phase_ != Phase::kEvaluating || m.version != eval_version_) return;
    auto it = eval_slices_.find(m.lo);
    if (it == eval_slices_.end() || it->second.hi != m.hi || it->second.done) return;
    it->second.done = true;
    eval_correct_ += m.correct;
    eval_loss_ += m.loss_sum;
  }

  // ---- the step clock -----------------------------------------------------

  Step MinShardDone() const {
    Step min{INT64_MAX};
    for (const ShardInfo& s : shards_) min = std::min(min, s.done);
    return min;
  }

  void Plan(WorkerInfo& w, StepPlan plan) {
    w.pending = false;
    Send(w.peer, plan);
  }

  void Advance() {
    // Registrations are answered once every shard is known (the reply carries their addresses).
    if (AllShardsRegistered() && !waiting_registrations_.empty()) {
      std::vector<std::string> addresses;
      for (const ShardInfo& s : shards_) addresses.push_back(s.address);
      for (WorkerId id : waiting_registrations_) {
        Send(workers_[id].peer, RegisterWorkerReply{id, spec_, addresses});
      }
      waiting_registrations_.clear();
    }
    switch (phase_) {
      case Phase::kStarting:
        if (!tensors_.empty() && AllShardsRegistered()) {
          // The first worker that reported its model pushes the initial values.
          for (auto& [id, w] : workers_) {
            if (w.pending && w.reported_model) {
              Plan(w, StepPlan{PlanKind::kInit, Step(-1), epoch_, 0, 0, 0, 0});
              phase_ = Phase::kInitializing;
              LOG(INFO) << "worker " << id << " initializes the parameters";
              break;
            }
          }
        }
        break;
      case Phase::kInitializing:
        if (MinShardDone().value() >= -1 && ReadyWorkers() >= options_.workers) {
          Assign();
          StartStep(Step(0));
        }
        break;
      case Phase::kTraining:
        if (MinShardDone() >= step_) {
          OnStepFinished();
        } else {
          DispatchTrain();
        }
        break;
      case Phase::kEvaluating:
        DispatchEval();
        if (EvalComplete()) FinishEval();
        break;
      case Phase::kFinished:
        break;
    }
    MaybeReportProgress(false);
  }

  uint32_t ReadyWorkers() const {
    uint32_t n = 0;
    for (const auto& [id, w] : workers_) n += w.reported_model ? 1 : 0;
    return n;
  }

  // Static membership: contiguous, near-equal ranges in worker-id order.
  void Assign() {
    std::vector<WorkerInfo*> live;
    for (auto& [id, w] : workers_) {
      if (w.reported_model) live.push_back(&w);
    }
    const uint32_t v = spec_.virtual_workers;
    const uint32_t n = static_cast<uint32_t>(live.size());
    uint32_t lo = 0;
    std::ostringstream ranges;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t count = v / n + (i < v % n ? 1 : 0);
      live[i]->vw_lo = lo;
      live[i]->vw_hi = lo + count;
      lo += count;
      ranges << (i ? ", " : "") << "w" << live[i]->id << ":[" << live[i]->vw_lo << "," << live[i]->vw_hi << ")";
    }
    epoch_ = Epoch(epoch_.value() + 1);
    assignment_ = ranges.str();
    LOG(INFO) << "assignment epoch " << epoch_ << ": " << assignment_;
  }

  void StartStep(Step t) {
    if (t.value() == 0) train_started_ = Clock::now();
    phase_ = Phase::kTraining;
    step_ = t;
    phase_deadline_ = Clock::now() + options_.step_timeout;
    DispatchTrain();
  }

  void DispatchTrain() {
    for (auto& [id, w] : workers_) {
      if (w.pending && w.done_step < step_ && w.vw_hi > w.vw_lo) {
        Plan(w, StepPlan{PlanKind::kTrain, step_, epoch_, w.vw_lo, w.vw_hi, 0, 0});
      }
    }
  }

  void OnStepFinished() {
    const Step next(step_.value() + 1);
    steps_done_ = next.value();
    if (next.value() >= spec_.steps) {
      if (test_samples_ > 0) return StartEval(next);
      return Finish();
    }
    if (options_.eval_every > 0 && next.value() % options_.eval_every == 0 && test_samples_ > 0) {
      return StartEval(next);
    }
    StartStep(next);
  }

  struct EvalSlice {
    int64_t hi = 0;
    bool given = false;
    bool done = false;
  };

  void StartEval(Step version) {
    phase_ = Phase::kEvaluating;
    eval_version_ = version;
    phase_deadline_ = Clock::now() + options_.step_timeout;
    eval_slices_.clear();
    eval_correct_ = 0;
    eval_loss_ = 0;
    const int64_t n = static_cast<int64_t>(std::max<size_t>(1, workers_.size()));
    const int64_t per = (test_samples_ + n - 1) / n;
    for (int64_t lo = 0; lo < test_samples_; lo += per) eval_slices_[lo] = {std::min(test_samples_, lo + per)};
    DispatchEval();
  }

  void DispatchEval() {
    for (auto& [id, w] : workers_) {
      if (!w.pending || !w.reported_model) continue;
      for (auto& [lo, slice] : eval_slices_) {
        if (!slice.given) {
          slice.given = true;
          Plan(w, StepPlan{PlanKind::kEval, eval_version_, epoch_, 0, 0, lo, slice.hi});
          break;
        }
      }
    }
  }

  bool EvalComplete() const {
    for (const auto& [lo, slice] : eval_slices_) {
      if (!slice.done) return false;
    }
    return true;
  }

  void FinishEval() {
    test_accuracy_ = double(eval_correct_) / double(test_samples_);
    test_loss_ = eval_loss_ / double(test_samples_);
    evaluated_ = true;
    std::printf("eval  step %lld: test accuracy %.4f, test loss %.4f\n", (long long)eval_version_.value(),
                test_accuracy_, test_loss_);
    std::fflush(stdout);
    if (eval_version_.value() >= spec_.steps) return Finish();
    StartStep(eval_version_);
  }

  void MaybeReportProgress(bool force) {
    const auto now = Clock::now();
    if (!force && now - last_progress_ < options_.progress_every) return;
    if (steps_done_ == 0 || losses_.empty()) return;
    last_progress_ = now;
    const double secs = std::chrono::duration<double>(now - train_started_).count();
    const double samples = double(steps_done_ - first_timed_step_) * spec_.virtual_workers * spec_.batch_per_vw;
    const double epoch = double(steps_done_) * spec_.virtual_workers * spec_.batch_per_vw / double(train_samples_);
    std::printf("step %lld/%lld  epoch %.2f  loss %.4f  samples/s %.0f  workers %zu %s\n", (long long)steps_done_,
                (long long)spec_.steps, epoch, losses_.rbegin()->second, secs > 0 ? samples / secs : 0.0,
                workers_.size(), assignment_.c_str());
    std::fflush(stdout);
  }

  // ---- the end ------------------------------------------------------------

  void Finish() {
    MaybeReportProgress(true);
    Status st = WriteResult();
    if (!st.ok()) {
      fatal_ = st;
      return;
    }
    phase_ = Phase::kFinished;
  }

  // Reads the final parameters from the shards and hashes them in layout order.
  Status WriteResult() {
    std::map<uint32_t, ChunkBytes> chunks;
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      EPS_ASSIGN_OR_RETURN(auto ch, Channel::Connect(context_, shards_[s].address));
      EPS_ASSIGN_OR_RETURN(Envelope reply, Call(ch.get(), Envelope{options_.token, Pull{Step(spec_.steps), {}}},
                                                std::chrono::milliseconds(30000)));
      auto* pulled = std::get_if<PullReply>(&reply.body);
      if (pulled == nullptr) return Internal("shard " + std::to_string(s) + " answered a pull with something else");
      for (ChunkBytes& c : pulled->chunks) chunks[c.chunk.value()] = c;
    }
    Sha256 params, buffers;
    for (const Chunk& c : layout_.chunks) {
      const TensorKind kind = layout_.tensors[c.tensor].kind;
      if (kind == TensorKind::kLoss) continue;
      auto it = chunks.find(c.id.value());
      if (it == chunks.end() || it->second.size != layout_.ChunkBytes(c)) {
        return DataLoss("chunk " + std::to_string(c.id.value()) + " missing from the final pull");
      }
      (kind == TensorKind::kParameter ? params : buffers).Update(it->second.data, it->second.size);
    }
    nlohmann::json j;
    j["job_id"] = spec_.job_id;
    j["steps"] = steps_done_;
    j["virtual_workers"] = spec_.virtual_workers;
    j["batch_per_vw"] = spec_.batch_per_vw;
    j["model"] = spec_.model;
    j["parameters"] = layout_.NumParameters();
    j["final_loss"] = losses_.empty() ? 0.0 : losses_.rbegin()->second;
    if (evaluated_) {
      j["test_accuracy"] = test_accuracy_;
      j["test_loss"] = test_loss_;
    }
    j["params_sha256"] = params.HexDigest();
    j["buffers_sha256"] = buffers.HexDigest();
    j["train_seconds"] = std::chrono::duration<double>(Clock::now() - train_started_).count();
    j["workers_seen"] = workers_.size();
    EPS_RETURN_IF_ERROR(WriteFileAtomically(options_.run_dir + "/result.json", j.dump(2) + "\n"));
    std::printf("result: steps %lld  final loss %.4f  test accuracy %s  params_sha256 %s\n",
                (long long)steps_done_, j["final_loss"].get<double>(),
                evaluated_ ? std::to_string(test_accuracy_).c_str() : "n/a",
                j["params_sha256"].get<std::string>().c_str());
    std::fflush(stdout);
    return OkStatus();
  }

  // Tells every worker to stop (now, or when it next asks, within a grace period)
  // and every shard to exit.
  void Shutdown(const std::string& reason) {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    size_t stopped = 0;
    while (true) {
      for (auto& [id, w] : workers_) {
        if (!w.pending) continue;
        Plan(w, StepPlan{PlanKind::kStop, Step(steps_done_), epoch_, 0, 0, 0, 0});
        ++stopped;
      }
      if (stopped >= workers_.size() || Clock::now() > deadline) break;
      auto in = channel_->Receive(std::chrono::milliseconds(100));
      if (in.ok()) OnMessage(*in);
    }
    for (ShardInfo& s : shards_) {
      if (!s.peer.empty()) Send(s.peer, eps::Shutdown{reason});
    }
  }

  std::string WaitingFor() const {
    std::ostringstream os;
    switch (phase_) {
      case Phase::kStarting:
      case Phase::kInitializing: {
        os << "the job did not start in time: ";
        uint32_t reg = 0;
        for (const ShardInfo& s : shards_) reg += s.peer.empty() ? 0 : 1;
        os << reg << "/" << shards_.size() << " shards registered, " << ReadyWorkers() << "/" << options_.workers
           << " workers ready";
        break;
      }
      case Phase::kTraining:
        os << "step " << step_ << " did not complete in time";
        break;
      case Phase::kEvaluating:
        os << "the evaluation of version " << eval_version_ << " did not complete in time";
        break;
      case Phase::kFinished:
        break;
    }
    return os.str();
  }

  const CoordinatorOptions options_;
  JobSpec spec_;
  std::unique_ptr<Channel> channel_;
  zmq::context_t* const context_;
  std::vector<ShardInfo> shards_;
  std::map<WorkerId, WorkerInfo> workers_;
  std::vector<WorkerId> waiting_registrations_;
  uint32_t next_worker_ = 0;
  std::vector<TensorSpec> tensors_;
  Layout layout_;
  int64_t train_samples_ = 0, test_samples_ = 0;

  Phase phase_ = Phase::kStarting;
  Epoch epoch_{0};
  std::string assignment_;
  Step step_{0};
  int64_t steps_done_ = 0;
  std::map<int64_t, float> losses_;  // step -> mean VW loss
  Clock::time_point started_, train_started_, last_progress_, phase_deadline_;
  int64_t first_timed_step_ = 0;

  Step eval_version_{0};
  std::map<int64_t, EvalSlice> eval_slices_;  // lo -> slice
  int64_t eval_correct_ = 0;
  double eval_loss_ = 0;
  bool evaluated_ = false;
  double test_accuracy_ = 0, test_loss_ = 0;
  Status fatal_;
};

}  // namespace

Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.virtual_workers < 1) return InvalidArgument("--virtual_workers must be at least 1");
  if (spec.virtual_workers > (1u << 20)) return InvalidArgument("--virtual_workers must be at most 2^20");
  if (spec.batch_per_vw < 1) return InvalidArgument("--batch_per_vw must be at least 1");
  if (spec.num_shards < 1) return InvalidArgument("--shards must be at least 1");
  if (spec.threads < 1) return InvalidArgument("--threads must be at least 1");
  if (spec.chunk_elems < 1) return InvalidArgument("--chunk_elems must be at least 1");
  if (spec.steps < 0) return InvalidArgument("--steps must not be negative");
  if (spec.model.empty()) return InvalidArgument("--model is required");
  if (spec.eval_batch < 1) return InvalidArgument("--eval_batch must be at least 1");
  for (const char* f : kDataFiles) {
    if (spec.test_limit < 0 && std::string(f).rfind("t10k", 0) == 0) continue;
    const std::string path = spec.data_dir + "/" + f;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return NotFound("data file " + path + " is missing (Debian package dataset-fashion-mnist, or --data_dir)");
    }
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options, zmq::context_t* context) {
  EPS_RETURN_IF_ERROR(ValidateJobSpec(options.spec));
  if (options.spec.steps == 0 && !(options.epochs > 0)) return InvalidArgument("set --steps or --epochs");
  if (options.workers < 1) return InvalidArgument("--workers must be at least 1");
  if (options.run_dir.empty()) return InvalidArgument("--run_dir is required");
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Bind(context, options.bind));
  return std::unique_ptr<Coordinator>(new CoordinatorImpl(options, std::move(channel), context));
}

}  // namespace eps
