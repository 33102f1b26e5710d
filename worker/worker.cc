#include "worker/worker.h"

#include <glog/logging.h>

#include <algorithm>
#include <new>
#include <optional>
#include <tuple>

#include "common/clock.h"
#include "common/digest.h"
#include "common/layout.h"
#include "common/task_thread.h"
#include "common/transfer.h"
#include "common/tree.h"
#include "data/fingerprint.h"
#include "data/job_data.h"
#include "data/model_input.h"
#include "data/text.h"
#include "schema/channel.h"
#include "worker/block_pusher.h"
#include "worker/coordinator_session.h"
#include "worker/model_fetch.h"
#include "worker/model_reads.h"
#include "worker/param_client.h"
#include "worker/sampler.h"
#include "worker/slowdown.h"
#include "worker/step_times.h"
#include "worker/wait.h"
#include "worker/worker_metrics.h"

namespace eps {
namespace {

using Duration = std::chrono::steady_clock::duration;

// The reasons a worker stopped by a signal gives in its Leave: to exit, or to wait parked.
constexpr char kStopReason[] = "SIGTERM", kParkReason[] = "SIGUSR1";
// Re-registrations in a row, without a plan in between, before the worker gives up.
constexpr int kMaxReregistrations = 3;

// Errors from a shard that end the current plan, not the worker: the shard
// refused a step it has rolled back from, a version is gone or late, or the
// shard is down (restarting). The plan goes back to the coordinator.
bool AbandonsPlan(const Status& st) {
  switch (st.code()) {
    case StatusCode::kAborted:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:  // a push in shared memory the shard cannot read: push inline
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
      return true;
    default:
      return false;
  }
}

// Adds the time since the last lap to the counter named.
struct Laps {
  void operator()(Duration* into) {
    const auto now = std::chrono::steady_clock::now();
    *into += now - mark;
    mark = now;
  }
  std::chrono::steady_clock::time_point mark = std::chrono::steady_clock::now();
};

// Times a worker asks for its model files, registering again between tries.
constexpr int kFetchAttempts = 3;

class WorkerImpl final : public Worker {
 public:
  WorkerImpl(WorkerOptions options, zmq::context_t* context, std::unique_ptr<Channel> coordinator)
      : options_(std::move(options)),
        context_(context),
        slowdown_(options_.slowdown, options_.device == "cpu"),
        coordinator_(std::move(coordinator)),
        metrics_(options_.metrics, options_.host, options_.device, options_.device_kind) {}

  Status Run(const std::atomic<bool>* stop) override {
    stop_ = stop;
    session_ =
        std::make_unique<CoordinatorSession>(options_, context_, std::move(coordinator_), stop);
    Status st = RunUntilDone();
    unreachable_ = !st.ok() && session_->unanswered();
    if (unreachable_) outcome_ = "unreachable";
    if (st.code() == StatusCode::kPermissionDenied) outcome_ = "refused";  // its CURVE key
    if (!options_.report_file.empty()) {
      WorkerReport report{options_.host,
                          options_.device,
                          options_.device_kind,
                          session_->ids(),
                          st.ok() || unreachable_ || outcome_ == "refused" ? outcome_ : "failed",
                          st,
                          times_,
                          TransferCounts{},
                          warnings_,
                          init_report_};
      report.cpu_kernels = options_.cpu_kernels;
      report.model_files = model_files_;
      if (model_ != nullptr) NameSparseTables(*model_, &report);
      if (client_ != nullptr) report.counts = client_->counts();
      Status written = WriteReport(options_.report_file, report);
      if (!written.ok()) LOG(WARNING) << written.ToString();
    }
    session_.reset();  // stops the heartbeats
    return st;
  }

  bool unreachable() const override { return unreachable_; }
  bool host_refused() const override { return host_refused_; }
  bool left() const override { return outcome_ == "left"; }
  std::string wants_cpu_kernels() const override { return wants_cpu_kernels_; }

 private:
  bool stopping() const { return stop_->load(); }

  Status RunUntilDone() {
    StatusOr<RegisterWorkerReply> registered = session_->Register();
    if (!registered.ok()) {
      if (!stopping()) return registered.status();
      LOG(INFO) << "stopped before the coordinator registered this worker";
      outcome_ = "left";
      return OkStatus();
    }
    spec_ = registered->spec;
    model_script_ = std::move(registered->model_bytes);
    init_file_ = std::move(registered->init_bytes);
    vocab_bytes_ = std::move(registered->vocab);
    metrics_.SetWorker(session_->id());
    if (spec_.cpu_kernels != options_.cpu_kernels_set) {
      // Only a program that has not loaded its libraries yet can choose their kernels: main()
      // executes this worker again with the job's set, and it registers anew.
      LOG(INFO) << "job '" << spec_.job_id << "' runs the CPU kernels " << spec_.cpu_kernels
                << ", this worker " << options_.cpu_kernels_set << ": leaving to apply them";
      wants_cpu_kernels_ = spec_.cpu_kernels;
      outcome_ = "left";
      return session_->Leave("to run again with the job's CPU kernels " + spec_.cpu_kernels);
    }
    Status st = CheckThreads();
    if (!st.ok()) {
      // This worker's configuration, not the job, is at fault: leave, do not fail the job.
      (void)session_->Leave(st.message(), /*host_fault=*/true);
      return st;
    }
    st = FetchModelFiles(*registered);
    // A coordinator that restarted meanwhile forgot this worker (FailedPrecondition) or
    // never answers what the old one was asked (DeadlineExceeded): register again and go
    // on with the files still missing.
    for (int attempt = 1; attempt < kFetchAttempts && !stopping() &&
                          (st.code() == StatusCode::kFailedPrecondition ||
                           st.code() == StatusCode::kDeadlineExceeded);
         ++attempt) {
      LOG(WARNING) << "getting the model files: " << st.ToString() << "; registering again";
      EPS_RETURN_IF_ERROR(session_->Renew());
      StatusOr<RegisterWorkerReply> again = session_->Register();
      if (!again.ok()) return again.status();
      ++times_.reregistrations;
      metrics_.SetWorker(session_->id());
      if (!SameComputation(again->spec, spec_)) {
        return FailedPrecondition("registered again, but the coordinator now runs another job ('" +
                                  again->spec.job_id + "', model " + again->spec.model + ")");
      }
      registered = std::move(again);
      st = FetchModelFiles(*registered);
    }
    if (stopping()) return Leave();
    if (!st.ok()) {
      // Bytes that are not the job's file (the coordinator's file changed) or a
      // file it does not serve are the job's fault; a timeout or no memory, this host's.
      const StatusCode code = st.code();
      if (code == StatusCode::kDataLoss || code == StatusCode::kNotFound ||
          code == StatusCode::kInvalidArgument) {
        (void)session_->Send(ErrorReply{code, "worker " + session_->name() + ": " + st.message()});
      } else {
        (void)session_->Leave("cannot get the model files: " + st.ToString(),
                              /*host_fault=*/true);
      }
      return st;
    }
    // A set-up failure that is the job's own (an unknown model, a layout it cannot have: every
    // worker would fail the same) is told to the coordinator, which fails the job. One of this
    // host's (data it cannot read, a device that is not there) takes only this worker out: it
    // leaves, and the job goes on without it.
    bool jobs_fault = false;
    try {
      st = Setup(*registered, &jobs_fault);
    } catch (const std::bad_alloc&) {  // the data set or the buffers do not fit on this host
      st = ResourceExhausted("out of memory while setting up the model and the data");
    }
    if (stopping()) return Leave();
    if (!st.ok()) {
      if (jobs_fault) {
        (void)session_->Send(
            ErrorReply{st.code(), "worker " + session_->name() + ": " + st.message()});
      } else {
        (void)session_->Leave("cannot run on this host: " + st.ToString(), /*host_fault=*/true);
      }
      return st;
    }
    return Loop();
  }

  Status Leave() {
    outcome_ = "left";
    metrics_.PlanVws(0);
    const bool parks = options_.parking != nullptr && options_.parking->load();
    return session_->Leave(parks ? kParkReason : kStopReason);
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

  // The model files the registration reply names by size (spec_.model_sha256, spec_.init_sha256),
  // from the host's cache or fetched from the coordinator in chunks (worker/model_fetch.h). A reply
  // that carries the bytes inline (a coordinator from before FetchModel) needs nothing.
  Status FetchModelFiles(const RegisterWorkerReply& reply) {
    const bool model = model_script_.empty() && reply.model_size > 0;
    const bool init = init_file_.empty() && reply.init_size > 0;
    if (!model && !init) return OkStatus();
    if (cache_ == nullptr && !options_.model_cache_dir.empty() && !cache_tried_) {
      cache_tried_ = true;
      auto cache = ModelCache::Open(options_.model_cache_dir, options_.model_cache_bytes);
      if (cache.ok()) {
        cache_ = std::move(cache).value();
      } else {
        const std::string warning =
            cache.status().message() + ": model files are fetched and kept in memory only";
        LOG(WARNING) << warning;
        warnings_.push_back(warning);
      }
    }
    FetchOptions fo;
    fo.chunk_bytes = reply.fetch_chunk_bytes;
    fo.max_in_flight = options_.model_fetch_in_flight;
    fo.reply_timeout = options_.rpc_timeout;
    fo.token = options_.token;
    for (auto [wanted, what, sha256, size, into] :
         {std::tuple{model, "model", &spec_.model_sha256, reply.model_size, &model_script_},
          {init, "init_from", &spec_.init_sha256, reply.init_size, &init_file_}}) {
      if (!wanted) continue;
      EPS_ASSIGN_OR_RETURN(FetchedFile file, FetchModelFile(session_->channel(), what, *sha256,
                                                            size, cache_.get(), fo, *stop_));
      const ModelFileReport& r = file.report;
      LOG(INFO) << "the " << what << " file (" << r.size << " bytes): "
                << (r.cache == "hit" ? "from the model cache"
                                     : std::to_string(r.fetched_bytes) + " bytes fetched in " +
                                           std::to_string(r.chunks) + " chunks")
                << " in " << static_cast<int64_t>(r.ms) << " ms (cache " << r.cache << ")";
      if (!r.warning.empty()) warnings_.push_back(r.warning);
      model_files_.push_back(r);
      *into = std::move(file.bytes);
    }
    // Every file the job has was checked against its hash (from the cache or fetched).
    files_hashed_ = (model_script_.empty() || model) && (init_file_.empty() || init);
    return OkStatus();
  }

  // The job's model with its initial values (a function of the seed and the
  // --init_from file), handed to the client.
  Status NewModel() {
    // Fetched files were hashed as they came (worker/model_fetch.h); inline ones are hashed here.
    if (!files_hashed_) {
      EPS_RETURN_IF_ERROR(
          CheckPinned(model_script_, spec_.model_sha256, "model file", "model_sha256"));
      EPS_RETURN_IF_ERROR(
          CheckPinned(init_file_, spec_.init_sha256, "--init_from file", "init_sha256"));
      files_hashed_ = true;
    }
    ModelOptions mo;
    mo.model = spec_.model;
    mo.sizes = sizes_;
    // Lent to the factory and taken back, not copied: a file may be gigabytes.
    mo.script = std::move(model_script_);
    mo.freeze = freeze_;
    mo.init_file = std::move(init_file_);
    struct TakeBack {  // also when the factory throws (std::bad_alloc)
      ModelOptions& mo;
      std::string &script, &init;
      ~TakeBack() {
        script = std::move(mo.script);
        init = std::move(mo.init_file);
      }
    };
    mo.reinit = reinit_;
    mo.init_allow_mismatch = spec_.init_allow_mismatch;
    mo.init_seed = spec_.seed;
    mo.threads = static_cast<int>(spec_.threads);
    mo.device = options_.device;
    mo.sparse_tables = spec_.sparse_optimizer != "exact";
    mo.lookup_table_bytes = LookupTableBytes();
    mo.cancel = stop_;  // asked to leave: the VW's backward stops at once
    StatusOr<std::unique_ptr<ModelRunner>> made = [&] {
      TakeBack take_back{mo, model_script_, init_file_};
      return options_.model_factory(mo);
    }();
    EPS_ASSIGN_OR_RETURN(model_, std::move(made));
    if (model_ == nullptr) return Internal("the model factory returned no model");
    const InitReport& init = model_->init_report();
    if (!init_file_.empty()) {
      LOG(INFO) << "--init_from: " << init.loaded.size() << " tensors loaded, " << init.reinit.size()
                << " started afresh (--reinit), " << init.skipped.size() << " kept their fresh values"
                << " (not in the file, or another shape or dtype), " << init.unused.size()
                << " of the file's unused";
    }
    init_report_ = init;
    if (client_ != nullptr) EPS_RETURN_IF_ERROR(client_->SetModel(model_.get()));
    return OkStatus();
  }

  // `*jobs_fault` (on an error): the job is at fault, not this host.
  Status Setup(const RegisterWorkerReply& registered, bool* jobs_fault) {
    sizes_ = ZooSizesOf(spec_);
    for (auto [selection, pattern, flag] :
         {std::tuple{&freeze_, &spec_.freeze, "--freeze"}, {&reinit_, &spec_.reinit, "--reinit"}}) {
      StatusOr<TensorSelection> compiled = TensorSelection::Compile(*pattern, flag);
      if (!compiled.ok()) {
        *jobs_fault = true;
        return compiled.status();
      }
      *selection = std::move(compiled).value();
    }
    if (!vocab_bytes_.empty()) {  // text data: tokenized with the coordinator's vocabulary
      StatusOr<Vocabulary> vocab = Vocabulary::Parse(vocab_bytes_);
      if (!vocab.ok()) {
        *jobs_fault = true;
        return vocab.status().WithContext("the coordinator's vocabulary");
      }
      sizes_.num_classes = static_cast<uint32_t>(vocab->labels().size());
      vocab_ = std::make_shared<const Vocabulary>(std::move(vocab).value());
    }
    if (Status st = NewModel(); !st.ok()) {
      // An unknown model is the job's; a device that is missing (FailedPrecondition,
      // Internal) or memory the model does not fit in (ResourceExhausted) is this host's.
      *jobs_fault = st.code() == StatusCode::kInvalidArgument;
      return st;
    }
    EPS_ASSIGN_OR_RETURN(JobData data, OpenJobData(spec_, vocab_));
    train_ = std::move(data.train);
    test_ = std::move(data.test);
    data_fingerprint_ = std::move(data.fingerprint);
    if (IsBuiltinModel(spec_.model)) {
      if (Status st = CheckModelInputFor(spec_.model, sizes_, train_); !st.ok()) {
        *jobs_fault = true;  // every worker would fail the same
        return st.WithContext("the training set");
      }
    }
    if (train_.size < 1) return InvalidArgument("the training set is empty");
    // The model against the data, before the job accepts this worker's model.
    StatusOr<std::string> warning = model_->DryRun(train_);
    if (!warning.ok()) {
      *jobs_fault = warning.status().code() == StatusCode::kInvalidArgument;
      return warning.status().WithContext("the model's dry run on the training data");
    }
    if (!warning->empty()) {
      LOG(WARNING) << *warning;
      warnings_.push_back(*warning);
    }
    sampler_ = std::make_unique<Sampler>(spec_.seed, train_.size, spec_.virtual_workers,
                                         spec_.batch_per_vw);
    std::vector<TensorSpec> tensors = model_->Tensors();
    tensors.push_back(LossTensor());
    StatusOr<Layout> layout = MakeLayout(tensors, spec_.num_shards, spec_.chunk_elems);
    Status mapped =
        layout.ok() && registered.map ? layout->SetShardMap(*registered.map) : OkStatus();
    if (!layout.ok() || !mapped.ok()) {
      *jobs_fault = true;
      return layout.ok() ? mapped : layout.status();
    }
    layout_ = std::move(layout).value();
    if (registered.shard_addresses.size() != layout_.num_shards) {
      return ProtocolError("shard address list does not match the job");
    }
    std::vector<char> frozen = FrozenTensors(layout_.tensors, freeze_);
    flat_ = std::make_unique<FlatGradientLayout>(layout_, frozen, spec_.virtual_workers);
    ParameterClientOptions po;
    po.token = options_.token;
    po.rpc_timeout = options_.rpc_timeout;
    po.curve = options_.curve;
    po.shm = options_.shm;
    po.weight_wire = spec_.weight_wire_dtype;
    po.push_region_bytes =
        BlockPusher::RegionBytes(flat_->size, spec_.grad_wire_dtype, !layout_.sparse.empty());
    po.frozen = std::move(frozen);
    po.seed = spec_.seed;
    po.lookup_resident_bytes = LookupTableBytes();
    client_ = std::make_unique<ParameterClient>(po, context_, stop_, &layout_,
                                                registered.shard_addresses);
    EPS_RETURN_IF_ERROR(client_->SetModel(model_.get()));
    EPS_RETURN_IF_ERROR(client_->Reconnect());
    EPS_ASSIGN_OR_RETURN(reducing_, TaskThread::Start("eps-reduce"));
    return OkStatus();
  }

  // After the coordinator forgot this worker: a new id for the same job; the
  // model and the data stay, the shard sockets are fresh (a shard may have moved).
  Status Reregister() {
    EPS_ASSIGN_OR_RETURN(RegisterWorkerReply r, session_->Register());
    ++times_.reregistrations;
    metrics_.SetWorker(session_->id());
    if (!SameComputation(r.spec, spec_)) {
      return FailedPrecondition("registered again, but the coordinator now runs another job ('" +
                                r.spec.job_id + "', model " + r.spec.model + ")");
    }
    spec_ = r.spec;
    if (r.map && !(*r.map == layout_.map)) {  // the shards moved state (docs/design.md)
      LOG(INFO) << "shard map " << r.map->generation << ": " << r.map->Shards().size() << " shards";
      EPS_RETURN_IF_ERROR(layout_.SetShardMap(*r.map));
      return client_->Remap(r.shard_addresses);
    }
    if (r.shard_addresses.size() != client_->num_shards())
      return ProtocolError("shard address list does not match the job");
    for (size_t s = 0; s < client_->num_shards(); ++s) {
      if (r.shard_addresses[s] == client_->address(s)) continue;
      LOG(INFO) << "shard " << s << " moved to " << r.shard_addresses[s];
      client_->MoveShard(s, r.shard_addresses[s]);
    }
    return client_->Reconnect();
  }

  // Waits for the coordinator's answer to the step request sent last. Only the
  // wait for a train plan is a train plan's time: the wait for an evaluation or
  // for the stop (the job's final pull and export) is not.
  StatusOr<Envelope> AwaitPlan() {
    const auto asked = std::chrono::steady_clock::now();
    StatusOr<Envelope> reply = session_->AwaitPlan();
    const auto* plan = reply.ok() ? std::get_if<StepPlan>(&reply->body) : nullptr;
    if (plan != nullptr && plan->kind == PlanKind::kTrain)
      times_.plan += std::chrono::steady_clock::now() - asked;
    return reply;
  }

  // Runs `guess` before the coordinator has answered the step request just sent, and returns
  // that answer; `*ran` holds the outcome when the answer is `guess` itself (the plan has run),
  // and stays empty when the guess was dropped (no push of it was sent).
  StatusOr<Envelope> RunAhead(const StepPlan& guess, std::optional<Status>* ran) {
    session_->RunAhead(&guess);
    Status st = Train(guess);
    if (!session_->running_ahead()) {
      ++times_.ahead;
      *ran = std::move(st);
      return Envelope{options_.token, guess};
    }
    session_->RunAhead(nullptr);
    ++times_.dropped;
    VLOG(1) << "dropped the run ahead of step " << guess.step << ": " << st.ToString();
    // Replies to the dropped run's pulls must not be taken for the next plan's.
    EPS_RETURN_IF_ERROR(client_->Reconnect());
    std::optional<StatusOr<Envelope>> overruled = session_->TakeOverruled();
    if (overruled.has_value()) return std::move(*overruled);
    if (stopping()) return Stopped();
    return AwaitPlan();
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
      if (stopping()) return Leave();
      if (Status st = DataUnchanged(); !st.ok()) {
        (void)session_->Leave("cannot run on this host: " + st.ToString(), /*host_fault=*/true);
        return st;
      }
      StepRequest request{session_->id(), done, {}, 0, 0, abandoned, seconds_per_vw_};
      abandoned = false;
      seconds_per_vw_ = 0;
      if (report_model) {
        request.tensors = model_->Tensors();
        request.train_samples = train_.size;
        request.test_samples = test_.size;
        request.data_fingerprint = data_fingerprint_;
      }
      EPS_RETURN_IF_ERROR(session_->Send(std::move(request)));
      std::optional<Status> ran;  // the answer's plan ran ahead of it, with this outcome
      StatusOr<Envelope> reply = guess.has_value() ? RunAhead(*guess, &ran) : AwaitPlan();
      guess.reset();
      if (!reply.ok()) {
        if (stopping()) return Leave();
        const StatusCode code = reply.status().code();
        if (code == StatusCode::kFailedPrecondition &&
            (reply.status().message().rfind(kDataMismatch, 0) == 0 ||
             reply.status().message().rfind(kCpuKernelsMismatch, 0) == 0)) {
          LOG(ERROR) << "the coordinator refused this worker for its host: "
                     << reply.status().message();
          host_refused_ = true;
        }
        if (code != StatusCode::kAborted && code != StatusCode::kNotFound) return reply.status();
        // The coordinator declared this worker dead or forgot it: join again under a new id.
        if (++reregistrations > kMaxReregistrations) {
          return Unavailable("the coordinator keeps refusing this worker: " +
                             reply.status().ToString());
        }
        LOG(WARNING) << "the coordinator dropped worker " << session_->id() << " ("
                     << reply.status().ToString() << "): registering again";
        Status st = Reregister();
        if (stopping()) return Leave();
        EPS_RETURN_IF_ERROR(st);
        done = Step(-1);
        report_model = true;
        continue;
      }
      report_model = false;
      reregistrations = 0;
      auto* plan = std::get_if<StepPlan>(&reply->body);
      if (plan == nullptr) {
        return ProtocolError(std::string("step request answered with ") + BodyName(reply->body));
      }
      Status st;
      metrics_.Plan(plan->kind);
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
                             0,
                             plan->timeline};
          }
          break;
        case PlanKind::kEval:
          st = Evaluate(*plan);
          break;
        case PlanKind::kStop:
          LOG(INFO) << "the job is over; " << Summary(times_, client_->counts());
          outcome_ = "done";
          metrics_.PlanVws(0);
          return OkStatus();
      }
      metrics_.Transferred(client_->counts());  // the reducing thread is idle between plans
      if (stopping()) return Leave();
      if (!st.ok() && AbandonsPlan(st)) {
        LOG(WARNING) << "gave up the plan for step " << plan->step << ": " << st.ToString();
        abandoned = true;
        ++times_.abandoned;
        EPS_RETURN_IF_ERROR(client_->Reconnect());
        continue;
      }
      EPS_RETURN_IF_ERROR(st);
    }
  }

  // The data files are still the ones opened (a changed file under a mapping
  // would read garbage or SIGBUS): FailedPrecondition naming the file otherwise.
  Status DataUnchanged() const {
    EPS_RETURN_IF_ERROR(train_.CheckUnchanged());
    return test_.CheckUnchanged();
  }

  Status PushInitialValues() {
    // The job starts over (a shard lost its state before any common checkpoint).
    if (!client_->model_holds_initial_values()) EPS_RETURN_IF_ERROR(NewModel());
    return client_->PushInitialValues();
  }

  // Runs the block's VWs; the compute thread only computes. On the reducing thread, each VW's
  // gradients but the last one's go into the block's tree while the next VW computes, and the last
  // one's finish the tree and go out tensor by tensor as its backward produces them, while the next
  // block (if any) computes. Train() waits for the reducing thread once, at the end.
  // `last_grads` takes the last VW's gradients, which the reducing thread's tasks read: Train
  // keeps them until it has drained that thread, whatever returns early.
  Status TrainBlock(const StepPlan& plan, const Block& block, const BufferCopies& step_buffers,
                    BufferCopies* vw0_buffers, ModelRunner::Gradients* last_grads, Laps& lap) {
    const uint32_t last = block.hi() - 1;
    const Step next(plan.step.value() + 1);
    // Used by the reducing thread only, from the tasks posted below (after a
    // failed task it skips the rest, so none of them sees an unstarted last VW).
    const BlockPusher::Job job{&layout_, flat_.get(), spec_.virtual_workers, spec_.grad_wire_dtype,
                               client_.get()};
    auto pusher = std::make_shared<BlockPusher>(job, plan.epoch, plan.step, block);
    // The last VW's parameter i is final in GradData(i), which holds it until
    // the next TrainStep, and after it in the gradients taken then.
    const ModelRunner::GradReady push_as_ready = [&](size_t i) {
      reducing_->Post(
          [pusher, i, grad = model_->GradData(i)] { return pusher->TensorReady(i, grad); });
    };
    const ModelRunner::GradReady after_backward;  // VWs before the last: gradients taken after it
    std::vector<int64_t> indices;
    float last_loss = 0;
    for (uint32_t v = block.lo; v <= last; ++v) {
      if (stopping()) return Stopped();  // abandon the rest: blocks already pushed stay pushed
      const bool is_last = v == last;
      // Ahead of the plan the answer is taken as soon as it has come, and, when
      // earlier VWs of the block ran meanwhile, waited for before the last one,
      // whose backward pushes. A block of one VW computes ahead all the same,
      // without pushing from backward until the answer has confirmed the plan.
      lap(&times_.copies);
      EPS_RETURN_IF_ERROR(session_->ConfirmPlan(/*wait=*/is_last && v != block.lo));
      lap(&times_.plan);
      if (v != plan.vw_lo) EPS_RETURN_IF_ERROR(RestoreBuffers(model_.get(), step_buffers));
      sampler_->Indices(VirtualWorkerId(v), plan.step, &indices);
      // No chunk of w(t+1) can step before the last VW's backward, unless the pulls name the next
      // plan's rows (the shards bring them into memory meanwhile). The reducing thread sends them
      // while this VW computes (the acknowledgements, the pull sockets' other use, wait for it).
      if (client_->wants_rows() ? v == plan.vw_lo : is_last && block.hi() == plan.vw_hi) {
        if (client_->wants_rows()) EPS_RETURN_IF_ERROR(WantPlanRows(plan.vw_lo, plan.vw_hi, next));
        reducing_->Post([client = client_.get(), next] { return client->Prefetch(next); });
      }
      if (is_last) {  // after the earlier VWs' leaves: the tasks run in order
        pusher->set_eager(!session_->running_ahead());
        reducing_->Post([pusher, last] { return pusher->StartLastVW(last); });
      }
      lap(&times_.copies);
      const auto vw_start = std::chrono::steady_clock::now();
      const Duration slowdown_from = slowdown_.Start();
      EPS_ASSIGN_OR_RETURN(
          float loss,
          model_->TrainStep(train_, indices, StreamSeed(spec_.seed, v, plan.step.value()),
                            is_last ? push_as_ready : after_backward));
      slowdown_.After(slowdown_from, *stop_);
      lap(&times_.compute);
      metrics_.Vw(SecondsSince(vw_start));
      if (v == 0) *vw0_buffers = SnapshotBuffers(layout_, *model_);
      EPS_ASSIGN_OR_RETURN(ModelRunner::Gradients grads, model_->TakeGradients());
      if (is_last) {
        last_loss = loss;
        *last_grads = std::move(grads);
      } else {
        reducing_->Post(
            [pusher, v, grads = std::move(grads), loss] { return pusher->AddVW(v, grads, loss); });
      }
    }
    lap(&times_.copies);
    EPS_RETURN_IF_ERROR(session_->ConfirmPlan(/*wait=*/true));  // before the block's first push
    lap(&times_.plan);
    // The block's last task: it holds the last VW's gradients until the tasks before it read them.
    reducing_->Post([pusher, grads = std::move(*last_grads), last_loss,
                     buffers = block.lo == 0 ? *vw0_buffers : BufferCopies{}] {
      return pusher->Finish(last_loss, buffers, grads);
    });
    return OkStatus();
  }

  Status Train(const StepPlan& plan) {
    if (plan.vw_hi > spec_.virtual_workers) return InvalidArgument("plan names VWs beyond V");
    metrics_.PlanVws(plan.vw_hi - plan.vw_lo);
    client_->SetTimeline(plan.timeline);
    Laps lap;
    const auto pull_start = std::chrono::steady_clock::now();
    if (client_->looks_up()) EPS_RETURN_IF_ERROR(WantPlanRows(plan.vw_lo, plan.vw_hi, plan.step));
    EPS_RETURN_IF_ERROR(client_->PullInto(plan.step, session_.get()));
    lap(&times_.pull);
    metrics_.Pull(SecondsSince(pull_start));
    const BufferCopies step_buffers = SnapshotBuffers(layout_, *model_);
    BufferCopies vw0_buffers;
    const auto compute_before = times_.compute;
    ModelRunner::Gradients last_grads;  // outlives the drain below (TrainBlock)
    struct Drain {  // the reducing thread's tasks use the model's gradients: none outlives Train
      TaskThread& reducing;
      ~Drain() { (void)reducing.Wait(); }  // an early return reports its own error
    } drain{*reducing_};
    for (const Block& block : AlignedBlocks(plan.vw_lo, plan.vw_hi)) {
      EPS_RETURN_IF_ERROR(TrainBlock(plan, block, step_buffers, &vw0_buffers, &last_grads, lap));
    }
    EPS_RETURN_IF_ERROR(reducing_->Wait());
    // While the shards step: the rows of the step after next, which the next plan's first VW asks
    // for (a guess, as the prefetch's: the same VWs; a failure shows there).
    if (client_->wants_rows())
      (void)PlanRowsOf(plan.vw_lo, plan.vw_hi, Step(plan.step.value() + 2));
    lap(&times_.copies);
    const auto push_wait_start = std::chrono::steady_clock::now();
    EPS_RETURN_IF_ERROR(client_->AwaitPushes());
    lap(&times_.push_wait);
    metrics_.PushWait(SecondsSince(push_wait_start));
    ++times_.steps;
    // Reported with the next step request (the coordinator sizes VW ranges by speed); not the first
    // plan, which runs libtorch's one-time initialization and would make this worker look slow.
    if (warmed_up_) {
      const double compute = std::chrono::duration<double>(times_.compute - compute_before).count();
      seconds_per_vw_ = compute / (plan.vw_hi - plan.vw_lo);
      ++times_.timed;
    } else {
      times_.plan = times_.pull = times_.compute = times_.copies = times_.push_wait = {};
    }
    warmed_up_ = true;
    return OkStatus();
  }

  Status Evaluate(const StepPlan& plan) {
    client_->SetTimeline(plan.timeline);
    const int64_t lo = std::min(plan.eval_lo, test_.size), hi = std::min(plan.eval_hi, test_.size);
    if (client_->looks_up()) {
      EPS_ASSIGN_OR_RETURN(TableRows rows, RangeRowsRead(*model_, layout_, test_, lo, hi));
      client_->WantRows(std::move(rows));
    }
    EPS_RETURN_IF_ERROR(client_->PullInto(plan.step, nullptr));
    EPS_ASSIGN_OR_RETURN(EvalStats stats, model_->Evaluate(test_, lo, hi, spec_.eval_batch));
    return session_->Send(EvalResult{session_->id(), plan.step, plan.eval_lo, plan.eval_hi,
                                     stats.correct, stats.loss_sum});
  }

  // The lookup tables' rows of a train plan, and its warm rows, for the next pull (WantRows).
  StatusOr<TableRows> PlanRowsOf(uint32_t lo, uint32_t hi, Step step) {
    return plan_rows_.Of(*model_, layout_, *sampler_, train_, lo, hi, step, client_->warms());
  }
  Status WantPlanRows(uint32_t lo, uint32_t hi, Step step) {
    EPS_ASSIGN_OR_RETURN(TableRows rows, PlanRowsOf(lo, hi, step));
    client_->WantRows(std::move(rows));
    return OkStatus();
  }
  // --worker_table_mb: a sparse table of more bytes is looked up by rows, and they may hold so
  // many bytes between two versions.
  uint64_t LookupTableBytes() const {
    return (spec_.worker_table_mb == 0 ? uint64_t{1024} : spec_.worker_table_mb) << 20;
  }

  const WorkerOptions options_;  // constant after construction, as are the two below
  zmq::context_t* const context_;
  const Slowdown slowdown_;

  // Owned by the thread that calls Run().
  std::unique_ptr<Channel> coordinator_;  // until Run() hands it to the session
  const std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<CoordinatorSession> session_;
  // For the report: "done", "left", "failed", "unreachable", "refused" (its CURVE key).
  std::string outcome_ = "failed";
  bool unreachable_ = false;  // see Worker::unreachable()
  bool host_refused_ = false;      // see Worker::host_refused()
  std::string wants_cpu_kernels_;  // see Worker::wants_cpu_kernels()
  StepTimes times_;
  double seconds_per_vw_ = 0;  // measured in the last train plan, reported with the next request
  bool warmed_up_ = false;     // a train plan ran before (the first one is not timed)
  JobSpec spec_;
  std::string model_script_;           // the job's TorchScript file (empty: a built-in model)
  std::string vocab_bytes_;            // text data: the coordinator's vocabulary (data/text.h)
  std::string init_file_;              // the --init_from file (empty: none; docs/models.md)
  std::unique_ptr<ModelCache> cache_;  // the host's model cache (null: none)
  bool cache_tried_ = false;           // ModelCache::Open was called (it warns once)
  bool files_hashed_ = false;          // model_script_ and init_file_ match the spec's hashes
  std::vector<ModelFileReport> model_files_;  // where each model file came from, for the report
  TensorSelection freeze_, reinit_;    // the spec's --freeze and --reinit
  InitReport init_report_;             // what the model took from init_file_
  std::shared_ptr<const Vocabulary> vocab_;  // vocab_bytes_ parsed (null: not text)
  ZooSizes sizes_;                     // the sized models' sizes (ZooSizesOf + num_classes)
  std::vector<std::string> warnings_;  // for the report
  std::unique_ptr<ModelRunner> model_;
  Dataset train_, test_;
  std::string data_fingerprint_;  // of train_'s and test_'s files (data/fingerprint.h)
  std::unique_ptr<Sampler> sampler_;
  PlanRows plan_rows_;  // the lookup tables' rows of the last train plans asked for
  Layout layout_;
  std::unique_ptr<FlatGradientLayout> flat_;
  std::unique_ptr<ParameterClient> client_;  // over layout_ and model_
  std::unique_ptr<TaskThread> reducing_;     // sums and pushes block partials (BlockPusher)
  WorkerMetrics metrics_;
};

}  // namespace

StatusOr<std::unique_ptr<Worker>> Worker::Open(const WorkerOptions& options,
                                               zmq::context_t* context) {
  if (options.coordinator.empty())
    return InvalidArgument("a worker needs the coordinator's address");
  if (!options.model_factory) return InvalidArgument("a worker needs a model factory");
  if (options.device_kind.empty()) return InvalidArgument("a worker needs its device kind");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0 (0: the job's count)");
  if (!(options.slowdown >= 1.0)) return InvalidArgument("the slowdown must be at least 1");
  if (options.heartbeat_interval.count() <= 0)
    return InvalidArgument("the heartbeat interval must be positive");
  if (options.curve.enabled() && options.curve.server_key.empty())
    return InvalidArgument("a worker with a CURVE key needs the servers' public key");
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Connect(context, options.coordinator,
                                                      CoordinatorChannelOptions(options)));
  return std::unique_ptr<Worker>(new WorkerImpl(options, context, std::move(channel)));
}

}  // namespace eps
