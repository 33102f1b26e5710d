#include "elastic/coordinator.h"

#include <glog/logging.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/cpu_kernels.h"
#include "common/digest.h"
#include "common/files.h"
#include "common/jsonl.h"
#include "common/layout.h"
#include "common/rejections.h"
#include "common/transfer.h"
#include "common/wire.h"
#include "data/job_data.h"
#include "data/model_input.h"
#include "data/text.h"
#include "elastic/coordinator_dispatch.h"
#include "elastic/final_pull.h"
#include "elastic/job_event.h"
#include "elastic/job_metrics.h"
#include "elastic/job_state.h"
#include "elastic/metrics_csv.h"
#include "elastic/model_file_server.h"
#include "models/model_export.h"
#include "models/model_file.h"
#include "schema/allowed_keys_watch.h"
#include "schema/channel.h"
#include "server/optimizer.h"
#include "storage/state_store.h"

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kDataFiles[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

StatusOr<JobState::Resumed> ReadResumed(const StateStore& store, const std::string& job,
                                        const JobSpec& flags) {
  EPS_ASSIGN_OR_RETURN(ShardConfig config, DecodeStoredJob(job));
  JobSpec stored = config.spec;
  JobSpec given = flags;
  given.steps = stored.steps;  // resolved from --epochs when the job began
  if (!(stored == given)) {
    return FailedPrecondition("the store holds job '" + stored.job_id +
                              "' with another spec than these flags");
  }
  JobState::Resumed r;
  r.tensors = config.tensors;
  r.steps = stored.steps;
  r.map = config.map;
  try {
    EPS_ASSIGN_OR_RETURN(std::string samples, store.Get("samples"));
    auto j = nlohmann::json::parse(samples);
    r.train_samples = j.at("train").get<int64_t>();
    r.test_samples = j.at("test").get<int64_t>();
    auto next_worker = store.Get("next_worker");
    if (next_worker.ok()) r.next_worker = static_cast<uint32_t>(std::stoul(*next_worker));
    auto timeline = store.Get("timeline");
    if (timeline.ok()) r.timeline = std::stoull(*timeline);
    auto hold_from = store.Get("hold_from");
    if (hold_from.ok()) {
      const int64_t from = std::stoll(*hold_from);
      if (from >= 0) r.hold_from = Step(from);
    }
    auto removed = store.Get("removed_shards");
    if (removed.ok()) {
      for (uint32_t s : nlohmann::json::parse(*removed).get<std::vector<uint32_t>>())
        r.removed_shards.push_back(ShardId(s));
    }
    auto assignment = store.Get("assignment");
    if (assignment.ok()) {
      auto a = nlohmann::json::parse(*assignment);
      r.epoch = Epoch(a.at("epoch").get<uint64_t>());
      r.ranges = a.at("ranges").get<std::vector<std::pair<uint32_t, uint32_t>>>();
    }
  } catch (const std::exception& e) {  // json and stoul errors
    return DataLoss(std::string("the coordinator's store is damaged: ") + e.what());
  }
  return r;
}

// The largest model file the coordinator keeps in its store (a store value is
// bounded; export_model needs the file only for a scripted export).
constexpr uint64_t kMaxStoredModelBytes = uint64_t{1} << 30;

class CoordinatorImpl final : public Coordinator {
 public:
  CoordinatorImpl(CoordinatorOptions options, std::unique_ptr<Channel> channel,
                  zmq::context_t* context, std::unique_ptr<StateStore> store,
                  std::unique_ptr<JsonLinesFile> events, std::unique_ptr<MetricsCsv> csv,
                  const std::optional<JobState::Resumed>& resumed)
      : options_(std::move(options)),
        channel_(std::move(channel)),
        context_(context),
        store_(std::move(store)),
        events_(std::move(events)),
        csv_(std::move(csv)),
        state_(options_.spec, StateOptions(options_), &clock_),
        rejections_(RejectionsOptions(options_), &clock_) {
    if (options_.metrics) job_metrics_.emplace(options_.metrics);
    // Open checked max_message_bytes: the chunk is at least 64 KiB.
    files_ = std::move(ModelFileServer::Open(static_cast<uint64_t>(options_.max_message_bytes) -
                                             ModelFileServer::kEnvelopeRoom))
                 .value();
    for (const auto& [sha256, bytes] : {std::pair{options_.spec.model_sha256, options_.model_bytes},
                                        {options_.spec.init_sha256, options_.init_bytes}}) {
      if (bytes) files_->Add(sha256, bytes->data(), bytes->size(), bytes);
    }
    if (resumed) {
      state_.Resume(*resumed);
      persisted_job_ = true;
      persisted_epoch_ = resumed->epoch;
      persisted_next_worker_ = resumed->next_worker;
      persisted_hold_ = resumed->hold_from;
      persisted_timeline_ = resumed->timeline;
      if (resumed->map) persisted_map_ = resumed->map->generation;
    }
  }

  const std::string& endpoint() const override { return channel_->endpoint(); }

  Status OpenKeys() {
    EPS_ASSIGN_OR_RETURN(
        keys_, AllowedKeysWatch::ForServer(options_.curve, options_.allowed_keys, &clock_));
    return OkStatus();
  }

  Status Run(const volatile bool* stop) override {
    const JobSpec& spec = options_.spec;
    LOG(INFO) << "coordinator of job '" << spec.job_id << "' on " << endpoint()
              << ": V=" << spec.virtual_workers << " batch/VW=" << spec.batch_per_vw
              << " model=" << spec.model << " shards=" << spec.num_shards
              << " min workers=" << options_.workers;
    auto last_progress = Clock::now();
    auto last_publish = last_progress - kPublishEvery;
    Step last_printed_step{-1};
    std::optional<Clock::time_point> stop_deadline;
    bool signalled = false;
    while (!state_.done()) {
      auto in = channel_->Receive(std::chrono::milliseconds(100));
      if (in.ok()) {
        OnMessage(*in);
      } else if (in.status().code() != StatusCode::kDeadlineExceeded &&
                 in.status().code() != StatusCode::kAborted) {
        RecordEvents();
        return in.status();
      }
      if (*stop && !signalled) {
        signalled = true;
        state_.OnJobError("stopped by a signal");
      }
      if (auto summary = rejections_.TakeSummary()) LOG(WARNING) << *summary;
      state_.Tick();
      if (state_.phase() == JobState::Phase::kFinalizing) state_.OnResultWritten(WriteResult());
      Persist();  // before any plan of a new assignment leaves
      Flush();
      const auto now = Clock::now();
      if (now - last_progress >= options_.progress_every &&
          state_.phase() == JobState::Phase::kTraining && state_.step() != last_printed_step) {
        last_progress = now;
        last_printed_step = state_.step();
        state_.ReportProgress();
      }
      RecordEvents();
      if (now - last_publish >= kPublishEvery) {
        last_publish = now;
        Publish();
      }
      // Workers that never ask again (hung, or killed during the end) get a bounded grace.
      if (state_.phase() == JobState::Phase::kStopping) {
        if (!stop_deadline) stop_deadline = now + std::chrono::seconds(5);
        if (now > *stop_deadline) break;
      }
    }
    for (uint32_t s = 0; s < peers_.shards.size(); ++s) {  // after a forced stop too
      if (!state_.done() && !peers_.shards[s].empty())
        Send(peers_.shards[s], Shutdown{"coordinator exits"});
    }
    RecordEvents();
    Publish();
    return state_.fatal();
  }

 private:
  static RejectionOptions RejectionsOptions(const CoordinatorOptions& o) {
    RejectionOptions r;
    r.metrics = o.metrics;
    return r;
  }

  static JobStateOptions StateOptions(const CoordinatorOptions& o) {
    JobStateOptions s;
    s.min_workers = o.workers;
    s.eval_every = o.eval_every;
    s.epochs = o.epochs;
    s.heartbeat_timeout = o.heartbeat_timeout;
    s.startup_timeout = o.startup_timeout;
    s.step_timeout = o.step_timeout;
    s.planner = o.planner;
    s.replan_threshold = o.replan_threshold;
    s.replan_min_steps = o.replan_min_steps;
    s.replan_window = o.replan_window;
    s.probe_idle_after = o.probe_idle_after;
    s.host_failures_before_backoff = o.host_failures_before_backoff;
    s.host_backoff = o.host_backoff;
    s.max_workers_per_machine = o.max_workers_per_machine;
    s.max_workers = o.max_workers;
    s.data_fingerprint = o.data_fingerprint;
    s.host_backoff_max = std::max(s.host_backoff_max, o.host_backoff);
    s.model_size = o.model_bytes ? o.model_bytes->size() : 0;
    s.init_size = o.init_bytes ? o.init_bytes->size() : 0;
    s.fetch_chunk_bytes =
        static_cast<uint64_t>(o.max_message_bytes) - ModelFileServer::kEnvelopeRoom;
    s.vocab = o.vocab;
    return s;
  }

  // Prints each new event for people and appends it to events.jsonl.
  void RecordEvents() {
    std::vector<JobEvent> events = state_.TakeEvents();
    if (events.empty()) return;
    // The events carry the state machine's (steady) time: mapped to the wall clock here.
    const auto steady_now = clock_.Now();
    const double wall_now = WallSeconds();
    for (const JobEvent& e : events) {
      Print(EventText(e));
      const double wall = wall_now - std::chrono::duration<double>(steady_now - e.at).count();
      std::string json = EventJson(e, wall);
      Status st = events_->Append(json);
      if (!st.ok()) LOG(ERROR) << st.ToString();  // once; the job goes on
      if (!IsPerStep(e)) {
        recent_events_.push_back(std::move(json));
        if (recent_events_.size() > kRecentEvents) recent_events_.pop_front();
      }
      st = csv_->OnEvent(e, wall);
      if (!st.ok()) LOG(ERROR) << st.ToString();  // once
      if (job_metrics_) job_metrics_->OnEvent(e);
    }
  }

  // The job's status as `elasticps status` shows it, with the newest `events`.
  JobStatusReply StatusReport(size_t events) const {
    JobStatusReply r = state_.StatusReport();
    for (WorkerStatus& w : r.workers) {
      auto it = peers_.worker_metrics.find(w.worker);
      if (it != peers_.worker_metrics.end()) w.metrics_address = it->second;
    }
    for (ShardStatus& s : r.shards) s.metrics_address = peers_.shard_metrics[s.shard.value()];
    const size_t n = std::min(events, recent_events_.size());
    r.events.assign(recent_events_.end() - static_cast<std::ptrdiff_t>(n), recent_events_.end());
    r.rejected_messages = rejections_.total();
    return r;
  }

  // The metrics' gauges, and the scrape targets when they changed.
  void Publish() {
    if (!job_metrics_) return;
    const JobStatusReply status = StatusReport(0);
    job_metrics_->Publish(status);
    std::string targets = PrometheusTargets(status, options_.metrics_address);
    if (targets == written_targets_) return;
    const Status st =
        WriteFileAtomically(options_.run_dir + "/prometheus_targets.json", targets);
    if (!st.ok()) LOG(ERROR) << st.ToString();
    written_targets_ = std::move(targets);  // not retried: one error line, the job goes on
  }

  // The events of every step, which the status leaves out.
  static bool IsPerStep(const JobEvent& e) {
    return e.As<JobEvent::RangeConfirmed>() || e.As<JobEvent::StepCompleted>() ||
           e.As<JobEvent::CheckpointDurable>() || e.As<JobEvent::Progress>();
  }

  static void Print(const EventLine& line) {
    switch (line.sink) {
      case EventLine::Sink::kNone:
        break;
      case EventLine::Sink::kStdout:
        std::printf("%s\n", line.text.c_str());
        std::fflush(stdout);
        break;
      case EventLine::Sink::kVerbose:
        VLOG(1) << line.text;
        break;
      case EventLine::Sink::kInfo:
        LOG(INFO) << line.text;
        break;
      case EventLine::Sink::kWarning:
        LOG(WARNING) << line.text;
        break;
      case EventLine::Sink::kError:
        LOG(ERROR) << line.text;
        break;
    }
  }

  // Keeps in the store what a restarted coordinator needs: the job as the
  // shards got it, the data set sizes, and the current assignment. A write
  // error fails the job: a store that silently stops is worse than none.
  void Persist() {
    if (!store_) return;
    Status st;
    if (!persisted_job_ && !state_.tensors().empty()) {
      std::vector<std::pair<std::string, std::string>> record = {
          {kJobKey, EncodeStoredJob(state_.spec(), state_.tensors())},
          {"samples",
           nlohmann::json{{"train", state_.train_samples()}, {"test", state_.test_samples()}}
               .dump()}};
      // The TorchScript file, for export_model's scripted export (docs/models.md). A
      // store value is at most 4 GiB: a file near that size is not kept.
      if (options_.model_bytes && options_.model_bytes->size() <= kMaxStoredModelBytes) {
        record.emplace_back(kModelScriptKey, *options_.model_bytes);
      } else if (options_.model_bytes && !warned_unstored_model_) {
        warned_unstored_model_ = true;
        LOG(WARNING) << "the model file (" << options_.model_bytes->size()
                     << " bytes) is too large for the coordinator's store: export_model cannot "
                        "write model.script.pt from the store alone";
      }
      if (!options_.vocab.empty()) record.emplace_back(kVocabKey, options_.vocab);
      st = store_->PutAll(record);
      persisted_job_ = st.ok();
    }
    if (st.ok() && state_.epoch() != persisted_epoch_) {
      st = store_->Put("assignment", nlohmann::json{{"epoch", state_.epoch().value()},
                                                    {"ranges", state_.AssignmentRanges()}}
                                         .dump());
      if (st.ok()) persisted_epoch_ = state_.epoch();
    }
    // Before a registration reply names a worker id, the store knows the id is taken.
    if (st.ok() && state_.next_worker() != persisted_next_worker_) {
      st = store_->Put("next_worker", std::to_string(state_.next_worker()));
      if (st.ok()) persisted_next_worker_ = state_.next_worker();
    }
    // A restarted coordinator must not hand out plans of an abandoned timeline.
    if (st.ok() && state_.timeline() != persisted_timeline_) {
      st = store_->Put("timeline", std::to_string(state_.timeline()));
      if (st.ok()) persisted_timeline_ = state_.timeline();
    }
    // A hold outlives a restart of the coordinator.
    if (st.ok() && state_.hold_from() != persisted_hold_) {
      const std::optional<Step> hold = state_.hold_from();
      st = store_->Put("hold_from", std::to_string(hold ? hold->value() : -1));
      if (st.ok()) persisted_hold_ = hold;
    }
    // A new shard map is the commit point of a move (JobState, "Elastic
    // shards"): stored, with the shards it removed, before the configs that
    // name it leave.
    if (st.ok() && persisted_job_ && state_.layout().map.generation != persisted_map_) {
      const std::vector<uint32_t> removed(state_.removed_shards().begin(),
                                          state_.removed_shards().end());
      st = store_->PutAll(
          {{kJobKey, EncodeStoredJob(state_.spec(), state_.tensors(), state_.layout().map)},
           {"removed_shards", nlohmann::json(removed).dump()}});
      if (st.ok()) persisted_map_ = state_.layout().map.generation;
    }
    if (!st.ok()) state_.OnJobError("the coordinator's store: " + st.ToString());
  }

  void Send(const std::string& peer, Body body) {
    Status st = channel_->SendTo(peer, Envelope{options_.token, std::move(body)});
    if (!st.ok()) LOG(WARNING) << "message lost: " << st.ToString();
  }
  void SendError(const std::string& peer, const Status& st) {
    Send(peer, ErrorReply{st.code(), st.message()});
  }

  void Flush() {
    for (Outgoing& o : state_.TakeOutgoing()) {
      if (o.to == Outgoing::To::kShard) {
        if (o.id < peers_.shards.size() && !peers_.shards[o.id].empty())
          Send(peers_.shards[o.id], std::move(o.body));
        continue;
      }
      auto it = peers_.workers.find(WorkerId(o.id));
      if (it != peers_.workers.end()) Send(it->second, std::move(o.body));
    }
  }

  void OnMessage(Channel::Incoming& in) {
    const Status admitted = AdmitIncoming(in, keys_ ? &*keys_ : nullptr, &rejections_);
    if (!admitted.ok()) return SendError(in.peer, admitted);
    const Body& body = in.envelope->body;
    if (const auto* fetch = std::get_if<FetchModel>(&body)) return ServeFetch(in.peer, *fetch);
    Dispatched d = DispatchMessage(in.peer, body, &state_, &peers_);
    if (d.status_report) {
      const auto* request = std::get_if<JobStatusRequest>(&body);
      Send(in.peer, StatusReport(request != nullptr ? request->recent_events : 0));
    }
    if (d.reply) Send(in.peer, std::move(*d.reply));
    if (!d.dropped.ok()) LOG(WARNING) << "dropped an evaluation result: " << d.dropped.ToString();
    // A confused or hostile peer with the token: logged once and ignored.
    if (d.stray_error && !stray_error_logged_) {
      LOG(WARNING) << "ignored an error from a peer that is no shard or worker of the job: "
                   << std::get<ErrorReply>(body).ToStatus().ToString();
      stray_error_logged_ = true;
    }
    if (d.unserved && rejections_.Record(in.peer, RejectReason::kUnserved))
      LOG(WARNING) << "refused a message: " << d.error.message();
    if (!d.error.ok()) SendError(in.peer, d.error);
  }

  // A chunk of a model file, to a worker of the job (one registered under
  // this routing id); a bad request is answered with its error and logged at
  // most once a minute, and the coordinator serves on.
  void ServeFetch(const std::string& peer, const FetchModel& request) {
    bool known = false;
    for (const auto& [id, p] : peers_.workers) known = known || p == peer;
    StatusOr<FetchModelReply> reply =
        known ? files_->Serve(request)
              : FailedPrecondition(
                    "FetchModel from a peer that is no registered worker: register first");
    if (reply.ok()) {
      const uint64_t served = files_->bytes_served();
      if (served >= next_served_report_) {
        LOG(INFO) << "model files: " << served << " bytes served in " << files_->chunks_served()
                  << " chunks";
        next_served_report_ = served + (uint64_t{1} << 30);
      }
      return Send(peer, std::move(reply).value());
    }
    const auto now = clock_.Now();
    if (now >= next_fetch_warning_) {
      LOG(WARNING) << "refused a FetchModel: " << reply.status().ToString();
      next_fetch_warning_ = now + std::chrono::minutes(1);
    }
    SendError(peer, reply.status());
  }

  // Reads the final parameters from the shards in pages (FinalPull), hashes them in layout
  // order and writes model.safetensors as they come; writes result.json; returns the
  // parameters' digest.
  StatusOr<std::string> WriteResult() {
    const JobSpec& spec = state_.spec();
    const Layout& layout = state_.layout();
    const JobSummary summary = state_.Summary();
    const auto started = Clock::now();
    std::map<uint32_t, std::unique_ptr<Channel>> channels;
    for (uint32_t s : state_.shard_members()) {
      Channel::Options co;
      co.curve = options_.curve;
      EPS_ASSIGN_OR_RETURN(channels[s],
                           Channel::Connect(context_, state_.shard_addresses()[s], co));
    }
    FinalPull pull(
        layout, Step(summary.steps), state_.shard_members(),
        [&](uint32_t s, const Pull& p) -> StatusOr<PullReply> {
          EPS_ASSIGN_OR_RETURN(Envelope reply,
                               Call(channels.at(s).get(), Envelope{options_.token, p},
                                    std::chrono::milliseconds(30000)));
          auto* pulled = std::get_if<PullReply>(&reply.body);
          if (pulled == nullptr)
            return Internal(std::string("answered a pull with ") + BodyName(reply.body));
          return std::move(*pulled);
        },
        options_.final_pull_bytes);
    EPS_ASSIGN_OR_RETURN(const SetDigest optimizer, pull.OptimizerDigest());
    const ExportFile file{options_.run_dir + "/model.safetensors", Step(summary.steps), spec.job_id,
                          spec.model, ExportMetadata(spec)};
    auto digests = ExportModel(layout, &pull, TableExport{spec.seed}, &file);
    if (!digests.ok()) return digests.status().WithContext("the final pull");
    nlohmann::json j;
    j["job_id"] = spec.job_id;
    j["steps"] = summary.steps;
    j["virtual_workers"] = spec.virtual_workers;
    j["batch_per_vw"] = spec.batch_per_vw;
    j["model"] = spec.model;
    j["parameters"] = layout.NumParameters();
    j["grad_wire_dtype"] = WireDTypeName(spec.grad_wire_dtype);
    j["weight_wire_dtype"] = WireDTypeName(spec.weight_wire_dtype);
    j["cpu_kernels"] = state_.StatusReport().cpu_kernels;  // the set, or native's first worker's
    j["final_loss"] = summary.final_loss;
    if (summary.evaluated) {
      j["test_accuracy"] = summary.test_accuracy;
      j["test_loss"] = summary.test_loss;
    }
    j["params_sha256"] = digests->params_sha256;
    j["buffers_sha256"] = digests->buffers_sha256;
    j["optimizer_digest"] = optimizer.HexDigest();
    j["final_pull"] = {
        {"requests", pull.pages()},
        {"bytes", pull.bytes()},
        {"seconds", std::chrono::duration<double>(Clock::now() - started).count()}};
    j["train_seconds"] = summary.train_time.count();
    if (summary.steady_steps > 0 && summary.steady_time.count() > 0) {
      j["steady_samples_per_s"] = double(summary.steady_steps) * spec.virtual_workers *
                                  spec.batch_per_vw / summary.steady_time.count();
    }
    j["workers_seen"] = summary.workers_seen;
    // What the shards took in pushes and sent in pulls (their last step reports), and the
    // parameters --freeze kept out of both.
    uint64_t push_bytes = 0, pull_bytes = 0;
    for (const ShardStatus& s : state_.StatusReport().shards) {
      push_bytes += s.bytes_in;
      pull_bytes += s.bytes_out;
    }
    j["push_bytes"] = push_bytes;
    j["pull_bytes"] = pull_bytes;
    auto freeze = TensorSelection::Compile(spec.freeze, "--freeze");  // valid: Open checked it
    const std::vector<char> frozen =
        FrozenTensors(layout.tensors, freeze.ok() ? *freeze : TensorSelection());
    int64_t frozen_elements = 0;
    for (size_t t = 0; t < layout.tensors.size(); ++t)
      frozen_elements += frozen[t] ? layout.tensors[t].numel() : 0;
    j["frozen_parameters"] = frozen_elements;
    if (!options_.vocab.empty()) {
      j["truncated"] = {{"train", options_.truncated_train}, {"test", options_.truncated_test}};
    }
    EPS_RETURN_IF_ERROR(WriteFileAtomically(options_.run_dir + "/result.json", j.dump(2) + "\n"));
    if (store_) EPS_RETURN_IF_ERROR(store_->Put("done", j.dump()));
    state_.ReportProgress();  // the last progress line, before the result's
    return digests->params_sha256;
  }

  const CoordinatorOptions options_;
  std::unique_ptr<Channel> channel_;
  zmq::context_t* const context_;
  SteadyClock clock_;
  std::unique_ptr<StateStore> store_;  // null: the coordinator keeps nothing across restarts
  const std::unique_ptr<JsonLinesFile> events_;
  const std::unique_ptr<MetricsCsv> csv_;
  JobState state_;
  std::optional<JobMetrics> job_metrics_;  // when options_.metrics
  static constexpr auto kPublishEvery = std::chrono::milliseconds(250);
  static constexpr size_t kRecentEvents = 1000;
  std::deque<std::string> recent_events_;  // the newest lines of events.jsonl, less the
                                           // per-step ones
  std::string written_targets_;
  bool persisted_job_ = false;
  Epoch persisted_epoch_{0};
  uint32_t persisted_next_worker_ = 0;
  uint64_t persisted_timeline_ = 1;
  uint64_t persisted_map_ = 0;  // the generation of the shard map in the job record
  std::optional<Step> persisted_hold_;
  CoordinatorPeers peers_;
  std::unique_ptr<ModelFileServer> files_;  // the model files the workers fetch
  uint64_t next_served_report_ = 0;
  Clock::time_point next_fetch_warning_{};
  bool warned_unstored_model_ = false;
  bool stray_error_logged_ = false;
  Rejections rejections_;  // after clock_, which it reads
  std::optional<AllowedKeysWatch> keys_;  // with CURVE: revocation of open connections
};

}  // namespace

Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.virtual_workers < 1) return InvalidArgument("--virtual_workers must be at least 1");
  // The shards' check, now rather than once a worker's model is known (with --epochs the
  // steps are not known yet: the schedule's check against them waits for the shards).
  EPS_RETURN_IF_ERROR(OptimizerOptionsFromSpec(spec.optimizer, spec.steps > 0
                                                                   ? spec.steps
                                                                   : std::numeric_limits<int64_t>::max())
                          .status());
  if (spec.virtual_workers > (1u << 20))
    return InvalidArgument("--virtual_workers must be at most 2^20");
  if (spec.batch_per_vw < 1) return InvalidArgument("--batch_per_vw must be at least 1");
  if (spec.num_shards < 1) return InvalidArgument("--shards must be at least 1");
  if (spec.threads < 1) return InvalidArgument("--threads must be at least 1");
  if (spec.chunk_elems < 1) return InvalidArgument("--chunk_elems must be at least 1");
  if (spec.steps < 0) return InvalidArgument("--steps must not be negative");
  if (spec.model.empty()) return InvalidArgument("--model is required");
  if (spec.eval_batch < 1) return InvalidArgument("--eval_batch must be at least 1");
  if (Status st = FindCpuKernelSet(spec.cpu_kernels).status(); !st.ok())
    return InvalidArgument("--cpu_kernels: " + st.message());
  if (spec.sparse_optimizer != "lazy" && spec.sparse_optimizer != "exact")
    return InvalidArgument("--sparse_optimizer must be lazy or exact, not '" +
                           spec.sparse_optimizer + "'");
  if (spec.shard_memory_mb > (uint64_t{1} << 30))
    return InvalidArgument("--shard_memory_mb is beyond any host's memory");
  if (spec.worker_table_mb > (uint64_t{1} << 30))
    return InvalidArgument("--worker_table_mb is beyond any host's memory");
  EPS_RETURN_IF_ERROR(CheckZooSizes(spec.model, ZooSizesOf(spec)));
  EPS_RETURN_IF_ERROR(TensorSelection::Compile(spec.reinit, "--reinit").status());
  EPS_RETURN_IF_ERROR(TensorSelection::Compile(spec.freeze, "--freeze").status());
  for (const char* f : kDataFiles) {
    if (!spec.train_data.empty()) break;  // the user's files: CheckJobData
    if (spec.test_limit < 0 && std::string(f).rfind("t10k", 0) == 0) continue;
    const std::string path = spec.data_dir + "/" + f;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return NotFound("data file " + path +
                      " is missing (Debian package dataset-fashion-mnist, or --data_dir)");
    }
  }
  return OkStatus();
}

StatusOr<CheckedJobData> CheckJobData(const JobSpec& spec, const std::string& words_from) {
  CheckedJobData out;
  // Fashion-MNIST is the project's own: fingerprinted, not read.
  if (spec.train_data.empty()) {
    EPS_ASSIGN_OR_RETURN(out.fingerprint, FingerprintJobData(spec));
    return out;
  }
  ZooSizes sizes = ZooSizesOf(spec);
  std::shared_ptr<const Vocabulary> words;
  EPS_ASSIGN_OR_RETURN(std::string format, DataFormatOf(DataFilesOf(spec).train));
  if (IsTextFormat(format)) {
    EPS_ASSIGN_OR_RETURN(std::string bytes, BuildJobVocabulary(spec, words_from));
    EPS_ASSIGN_OR_RETURN(Vocabulary parsed, Vocabulary::Parse(bytes));
    sizes.num_classes = static_cast<uint32_t>(parsed.labels().size());
    words = std::make_shared<const Vocabulary>(std::move(parsed));
    out.vocab = std::move(bytes);
  }
  EPS_ASSIGN_OR_RETURN(JobData data, OpenJobData(spec, words));
  if (words != nullptr) {
    LOG(INFO) << "text data: a vocabulary of " << words->words().size() << " words and "
              << words->labels().size() << " labels; " << data.train.truncated << " of "
              << data.train.size << " training and " << data.test.truncated << " of "
              << data.test.size << " test samples truncated to --seq_len=" << spec.seq_len;
    out.truncated_train = data.train.truncated;
    out.truncated_test = data.test.truncated;
  }
  if (IsBuiltinModel(spec.model)) {
    EPS_RETURN_IF_ERROR(CheckModelInputFor(spec.model, sizes, data.train)
                            .WithContext("--train_data " + spec.train_data));
    if (data.test.size > 0) {
      EPS_RETURN_IF_ERROR(CheckModelInputFor(spec.model, sizes, data.test)
                              .WithContext("--test_data " + spec.test_data));
    }
  }
  out.fingerprint = data.fingerprint;
  return out;
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& given,
                                                         zmq::context_t* context) {
  EPS_RETURN_IF_ERROR(ValidateJobSpec(given.spec));
  CoordinatorOptions options = given;
  if (IsModelPath(options.spec.model)) {
    // Read once: every worker gets these bytes, whatever happens to the file later.
    EPS_ASSIGN_OR_RETURN(ModelFile file,
                         ReadModelFile(options.spec.model, options.spec.model_sha256));
    options.spec.model_sha256 = file.sha256;
    options.model_bytes = std::make_shared<const std::string>(std::move(file.bytes));
  } else if (!options.spec.model_sha256.empty()) {
    return InvalidArgument("--model_sha256 pins a TorchScript model file, but --model '" +
                           options.spec.model +
                           "' names a built-in model (a file's name contains '/' or ends in .pt)");
  }
  if (!options.init_from.empty()) {
    EPS_ASSIGN_OR_RETURN(ModelFile file,
                         ReadInitFile(options.init_from, options.spec.init_sha256));
    options.spec.init_sha256 = file.sha256;
    options.init_bytes = std::make_shared<const std::string>(std::move(file.bytes));
  } else if (!options.spec.init_sha256.empty() || !options.spec.reinit.empty() ||
             options.spec.init_allow_mismatch) {
    return InvalidArgument(
        "--init_sha256, --reinit and --init_allow_mismatch apply to the model --init_from names, "
        "and there is no --init_from");
  }
  if (options.max_message_bytes <
      int64_t{2} * static_cast<int64_t>(ModelFileServer::kEnvelopeRoom)) {
    return InvalidArgument(
        "--max_message_mb: a message of the coordinator must be allowed at least " +
        std::to_string(2 * ModelFileServer::kEnvelopeRoom) + " bytes, not " +
        std::to_string(options.max_message_bytes));
  }
  if (options.spec.steps == 0 && !(options.epochs > 0))
    return InvalidArgument("set --steps or --epochs");
  if (options.workers < 1) return InvalidArgument("--workers must be at least 1");
  if (options.run_dir.empty()) return InvalidArgument("--run_dir is required");
  std::unique_ptr<StateStore> store;
  std::optional<JobState::Resumed> resumed;
  std::string bind = options.bind;
  if (!options.store_path.empty()) {
    StoreOptions so;
    so.path = options.store_path;
    so.job_id = options.spec.job_id;
    so.owner = "coordinator";
    EPS_ASSIGN_OR_RETURN(store, StateStore::Open(so));
    if (store->Get("done").ok()) {
      return FailedPrecondition("job '" + options.spec.job_id + "' in " + options.store_path +
                                " is already complete (see result.json)");
    }
    auto job = store->Get(kJobKey);
    if (job.ok()) {
      EPS_ASSIGN_OR_RETURN(resumed, ReadResumed(*store, *job, options.spec));
      // The vocabulary the workers already tokenized with, whatever this start built.
      auto vocab = store->Get(kVocabKey);
      if (vocab.ok()) {
        options.vocab = *vocab;
      } else if (vocab.status().code() != StatusCode::kNotFound) {
        return vocab.status();
      }
      auto endpoint = store->Get("endpoint");
      if (endpoint.ok()) bind = *endpoint;  // peers reconnect to the address they know
    } else if (job.status().code() != StatusCode::kNotFound) {
      return job.status();
    }
  }
  // The vocabulary travels in the registration reply itself.
  if (options.vocab.size() + ModelFileServer::kEnvelopeRoom >
      static_cast<uint64_t>(options.max_message_bytes)) {
    return InvalidArgument(
        "the vocabulary (" + std::to_string(options.vocab.size()) +
        " bytes) does not fit in a registration reply of at most --max_message_mb (" +
        std::to_string(options.max_message_bytes) + " bytes): raise it");
  }
  EPS_ASSIGN_OR_RETURN(auto events, JsonLinesFile::Open(options.run_dir + "/events.jsonl"));
  // Next to the exported model: predict and evaluate tokenize as the workers did.
  if (!options.vocab.empty())
    EPS_RETURN_IF_ERROR(WriteFileAtomically(options.run_dir + "/vocab.json", options.vocab));
  EPS_ASSIGN_OR_RETURN(auto csv,
                       MetricsCsv::Open(options.run_dir + "/metrics.csv",
                                        uint64_t{options.spec.virtual_workers} *
                                            options.spec.batch_per_vw));
  Channel::Options co;
  co.curve = options.curve;
  co.send_hwm = co.receive_hwm = options.socket_hwm;
  co.max_message_bytes = LargestLegitFrame(/*chunk_elems=*/0, co.limits);  // no chunk comes here
  co.max_send_bytes = options.max_message_bytes;
  co.metrics = options.metrics;
  co.token = options.token;
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Bind(context, bind, co));
  if (store) EPS_RETURN_IF_ERROR(store->Put("endpoint", channel->endpoint()));
  auto coordinator =
      std::make_unique<CoordinatorImpl>(options, std::move(channel), context, std::move(store),
                                        std::move(events), std::move(csv), resumed);
  EPS_RETURN_IF_ERROR(coordinator->OpenKeys());
  return std::unique_ptr<Coordinator>(std::move(coordinator));
}

}  // namespace eps
