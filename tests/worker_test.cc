// The worker in one process with a small model of the test's own, against
// real shards and a real coordinator on loopback sockets (port 0): the
// trained parameters' digest is the same on one worker as on several, when a
// worker leaves mid-job, and when the coordinator restarts and every worker
// registers again under a new id. No libtorch: this runs in the sanitizer
// build too.
#include "worker/worker.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/digest.h"
#include "common/metrics.h"
#include "elastic/coordinator.h"
#include "elastic/model_file_server.h"
#include "schema/channel.h"
#include "server/shard.h"
#include "tests/zip_files.h"

namespace eps {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";
constexpr int kClasses = 10, kFeatures = 16;
constexpr milliseconds kHeartbeatTimeout(
    1000);  // the coordinator's  // a feature: the mean of a 7x7 block of pixels

// A linear model with a squared loss and a BatchNorm-like running mean:
// deterministic, a few hundred parameters, and cheap. Its "dropout" scales
// each feature by a factor drawn from the step's seed, so a VW run with the
// wrong random stream changes the bits. Gradients are handed over as
// ModelRunner says: GradReady from inside TrainStep, last parameter first;
// TakeGradients gives memory it never writes again.
class FakeModel final : public ModelRunner {
 public:
  // `*steps` counts TrainStep calls; the one numbered `stall_at` first calls
  // `stall` (standing in for a process stopped by the OS, a long GC pause).
  FakeModel(const ModelOptions& o, std::atomic<int64_t>* steps, int64_t stall_at,
            std::function<void()> stall)
      : steps_(steps), stall_at_(stall_at), stall_(std::move(stall)) {
    tensors_ = {{"w", TensorKind::kParameter, DType::kFloat32, {kClasses, kFeatures}},
                {"b", TensorKind::kParameter, DType::kFloat32, {kClasses}},
                {"running_mean", TensorKind::kBuffer, DType::kFloat32, {kFeatures}}};
    uint64_t x = o.init_seed * 0x9E3779B97F4A7C15ull + 1;
    for (const TensorSpec& t : tensors_) {
      std::vector<float> v(t.numel());
      for (float& f : v)
        f = t.kind == TensorKind::kParameter ? float(Next(&x) % 2001) / 1e4f - 0.1f : 0;
      values_.push_back(std::move(v));
    }
    FreshGradients();
  }

  const std::vector<TensorSpec>& Tensors() const override { return tensors_; }
  const void* Data(size_t i) const override { return values_[i].data(); }
  Status Write(size_t i, size_t byte_offset, const void* src, size_t bytes) override {
    std::memcpy(reinterpret_cast<uint8_t*>(values_[i].data()) + byte_offset, src, bytes);
    return OkStatus();
  }
  const float* GradData(size_t i) const override { return (*grads_)[i].data(); }

  StatusOr<float> TrainStep(const Dataset& data, const std::vector<int64_t>& indices,
                            uint64_t rng_seed, const GradReady& ready) override {
    if (indices.empty()) return InvalidArgument("no samples");
    if (steps_->load() == stall_at_) stall_();
    FreshGradients();
    std::vector<float>& gw = (*grads_)[0];
    std::vector<float>& gb = (*grads_)[1];
    std::vector<float> mean(kFeatures, 0);
    double loss = 0;
    for (int64_t idx : indices) {
      if (idx < 0 || idx >= data.size) return InvalidArgument("index out of range");
      std::vector<float> x = Features(data, idx);
      for (int k = 0; k < kFeatures; ++k) {
        uint64_t r = rng_seed ^ (uint64_t(k) << 32) ^ uint64_t(idx);
        x[k] *= 0.9f + float(Next(&r) % 3) * 0.1f;
        mean[k] += x[k] / indices.size();
      }
      for (int c = 0; c < kClasses; ++c) {
        const float err = Logit(x, c) - (data.ClassOf(idx) == c ? 1.f : 0.f);
        loss += 0.5 * err * err / indices.size();
        gb[c] += err / indices.size();
        for (int k = 0; k < kFeatures; ++k) gw[c * kFeatures + k] += err * x[k] / indices.size();
      }
    }
    for (int k = 0; k < kFeatures; ++k) values_[2][k] = 0.9f * values_[2][k] + 0.1f * mean[k];
    if (ready) {
      ready(1);
      ready(0);
    }
    ++*steps_;
    return float(loss);
  }

  StatusOr<Gradients> TakeGradients() override {
    Gradients out{{(*grads_)[0].data(), (*grads_)[1].data()}, grads_};
    FreshGradients();
    return out;
  }

  StatusOr<EvalStats> Evaluate(const Dataset& data, int64_t lo, int64_t hi, int64_t) override {
    EvalStats stats;
    for (int64_t i = lo; i < hi; ++i) {
      const std::vector<float> x = Features(data, i);
      int best = 0;
      for (int c = 1; c < kClasses; ++c) best = Logit(x, c) > Logit(x, best) ? c : best;
      stats.correct += best == data.ClassOf(i);
      stats.loss_sum += std::abs(Logit(x, int(data.ClassOf(i))) - 1);
      ++stats.count;
    }
    return stats;
  }

 private:
  static uint64_t Next(uint64_t* x) {  // splitmix64
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static std::vector<float> Features(const Dataset& d, int64_t i) {
    std::vector<float> x(kFeatures, 0);
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) x[(r / 7) * 4 + c / 7] += static_cast<const float*>(d.features)[(i * 28 + r) * 28 + c] / 49.f;
    }
    return x;
  }
  float Logit(const std::vector<float>& x, int c) const {
    float z = values_[1][c];
    for (int k = 0; k < kFeatures; ++k) z += values_[0][c * kFeatures + k] * x[k];
    return z;
  }
  void FreshGradients() {
    grads_ = std::make_shared<std::vector<std::vector<float>>>(std::vector<std::vector<float>>{
        std::vector<float>(kClasses * kFeatures, 0), std::vector<float>(kClasses, 0)});
  }

  std::vector<TensorSpec> tensors_;
  std::vector<std::vector<float>> values_;
  std::shared_ptr<std::vector<std::vector<float>>> grads_;
  std::atomic<int64_t>* const steps_;
  const int64_t stall_at_;
  const std::function<void()> stall_;
};

// How a test worker runs.
struct WorkerSetup {
  milliseconds heartbeat_interval{50};
  int64_t stall_at = -1;  // FakeModel's
  std::function<void()> stall;
  Metrics* metrics = nullptr;  // WorkerOptions::metrics
  std::string machine;  // the host it reports is "<machine>:<pid>" (empty: one of its own)
  Status model_error;   // not OK: the model factory fails so
  std::string model_cache_dir;  // WorkerOptions::model_cache_dir (empty: none)
};

// A job in this process: a coordinator, shards and workers, each on a thread of its own.
class Job {
 public:
  explicit Job(int64_t steps, uint32_t shards = 2) : dir_(MakeTempDir()) {
    spec_.job_id = "worker_test";
    spec_.model = "fake";
    spec_.data_dir = kDataDir;
    spec_.virtual_workers = 8;
    spec_.batch_per_vw = 8;
    spec_.seed = 3;
    spec_.steps = steps;
    spec_.train_limit = 512;
    spec_.test_limit = 100;
    spec_.chunk_elems = 64;  // several chunks per tensor and shard
    spec_.num_shards = shards;
    spec_.eval_batch = 50;
    spec_.optimizer.lr = 0.05;
    spec_.optimizer.momentum = 0.9;
  }

  ~Job() {
    for (auto& w : workers_) w->stop = true;
    coordinator_stop_ = true;
    shard_stop_ = true;
    for (auto& w : workers_) {
      if (w->done.valid()) (void)w->done.wait_for(seconds(30));
    }
    if (coordinator_done_.valid()) (void)coordinator_done_.wait_for(seconds(30));
    for (auto& done : shard_done_) (void)done.wait_for(seconds(30));
    coordinator_.reset();
    shards_.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Status StartCoordinator() {
    CoordinatorOptions co;
    co.spec = spec_;
    co.bind = endpoint_.empty() ? "tcp://127.0.0.1:0" : endpoint_;
    co.token = "secret";
    co.run_dir = dir_;
    co.store_path = dir_ + "/coordinator.db";
    co.heartbeat_timeout = kHeartbeatTimeout;
    co.progress_every = seconds(60);
    if (!model_file.empty()) co.spec.model = model_file;
    if (max_message_bytes > 0) co.max_message_bytes = max_message_bytes;
    co.workers = min_workers;
    co.replan_threshold = replan_threshold;
    EPS_ASSIGN_OR_RETURN(coordinator_, Coordinator::Open(co, &context_));
    endpoint_ = coordinator_->endpoint();
    coordinator_stop_ = false;
    coordinator_done_ =
        std::async(std::launch::async, [this] { return coordinator_->Run(&coordinator_stop_); });
    return OkStatus();
  }

  Status StartShards() {
    for (uint32_t s = 0; s < spec_.num_shards; ++s) {
      ShardOptions so;
      so.shard = ShardId(s);
      so.coordinator = endpoint_;
      so.token = "secret";
      so.register_every = milliseconds(100);
      so.metrics = shard_metrics;
      EPS_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::Open(so, &context_));
      Shard* raw = shard.get();
      shards_.push_back(std::move(shard));
      shard_done_.push_back(
          std::async(std::launch::async, [this, raw] { return raw->Run(&shard_stop_); }));
    }
    return OkStatus();
  }

  // The coordinator started next: a TorchScript file for --model (the
  // FakeModel ignores it; the workers record what they got), its
  // --max_message_mb in bytes (0: the default), its --workers.
  std::string model_file;
  int64_t max_message_bytes = 0;
  uint32_t min_workers = 1;
  double replan_threshold = 0.25;  // CoordinatorOptions'
  const std::string& endpoint() const { return endpoint_; }
  const std::string& dir() const { return dir_; }
  zmq::context_t* context() { return &context_; }

  struct RunningWorker {
    std::atomic<bool> stop{false};
    std::string script_seen;              // ModelOptions::script, as the model factory got it last
    std::atomic<int64_t> model_steps{0};  // TrainStep calls on its models
    std::string report;
    std::future<Status> done;
  };

  StatusOr<RunningWorker*> StartWorker(const WorkerSetup& setup = {}) {
    auto w = std::make_unique<RunningWorker>();
    WorkerOptions wo;
    wo.coordinator = endpoint_;
    wo.token = "secret";
    // One host name per worker: the coordinator takes a registration from the
    // same host and pid for a repeat of the first.
    wo.host = setup.machine.empty() ? "worker_test/" + std::to_string(workers_.size())
                                    : setup.machine + ":" + std::to_string(getpid());
    wo.device_kind = "cpu";
    wo.heartbeat_interval = setup.heartbeat_interval;
    wo.plan_timeout = seconds(60);
    wo.rpc_timeout = seconds(60);
    w->report = dir_ + "/worker" + std::to_string(workers_.size()) + ".json";
    wo.report_file = w->report;
    wo.metrics = setup.metrics;
    wo.model_cache_dir = setup.model_cache_dir;
    std::atomic<int64_t>* steps = &w->model_steps;
    std::string* script_seen = &w->script_seen;
    wo.model_factory = [steps, setup, script_seen](
                           const ModelOptions& o) -> StatusOr<std::unique_ptr<ModelRunner>> {
      *script_seen = o.script;
      if (!setup.model_error.ok()) return setup.model_error;
      return std::unique_ptr<ModelRunner>(new FakeModel(o, steps, setup.stall_at, setup.stall));
    };
    EPS_ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, Worker::Open(wo, &context_));
    RunningWorker* raw = w.get();
    w->done = std::async(std::launch::async,
                         [raw, worker = std::move(worker)]() { return worker->Run(&raw->stop); });
    workers_.push_back(std::move(w));
    return raw;
  }

  // Waits (bounded) for the coordinator to finish the job; its result.json then.
  StatusOr<nlohmann::json> Finish() {
    if (coordinator_done_.wait_for(seconds(240)) != std::future_status::ready) {
      return DeadlineExceeded("the job did not finish");
    }
    EPS_RETURN_IF_ERROR(coordinator_done_.get());
    for (auto& w : workers_) {
      if (w->done.valid() && w->done.wait_for(seconds(60)) != std::future_status::ready) {
        return DeadlineExceeded("a worker did not stop");
      }
    }
    std::ifstream in(dir_ + "/result.json");
    return nlohmann::json::parse(in);
  }

  // Where the shards started next keep their metrics (null: none).
  Metrics* shard_metrics = nullptr;

  // The coordinator's events so far (docs/events.md), of `kind` only.
  std::vector<nlohmann::json> Events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir_ + "/events.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j["event"] == kind) out.push_back(std::move(j));
    }
    return out;
  }

  static nlohmann::json Report(const RunningWorker& w) {
    std::ifstream in(w.report);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

 private:
  static std::string MakeTempDir() {
    char tmpl[] = "/tmp/eps-worker-test-XXXXXX";
    return mkdtemp(tmpl);
  }

  const std::string dir_;
  JobSpec spec_;
  zmq::context_t context_{1};
  std::string endpoint_;
  std::unique_ptr<Coordinator> coordinator_;
  volatile bool coordinator_stop_ = false;
  std::future<Status> coordinator_done_;
  std::vector<std::unique_ptr<Shard>> shards_;
  volatile bool shard_stop_ = false;
  std::vector<std::future<Status>> shard_done_;
  std::vector<std::unique_ptr<RunningWorker>> workers_;
};

bool HaveData() {
  struct stat st;
  return ::stat((std::string(kDataDir) + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

// Waits (bounded) until `done()`.
template <class F>
bool Eventually(F done, seconds timeout = seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

// The digest of the undisturbed job of `steps` steps on one worker, computed once.
const std::string& ReferenceDigest(int64_t steps) {
  static std::map<int64_t, std::string> digests;
  std::string& digest = digests[steps];
  if (digest.empty()) {
    Job job(steps);
    EXPECT_TRUE(job.StartCoordinator().ok());
    EXPECT_TRUE(job.StartShards().ok());
    auto w = job.StartWorker();
    EXPECT_TRUE(w.ok());
    auto result = job.Finish();
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    if (result.ok()) digest = (*result)["params_sha256"];
    const nlohmann::json report = Job::Report(**w);
    EXPECT_EQ(report["outcome"], "done");
    EXPECT_EQ(report["train_plans"], steps);
    EXPECT_EQ(report["worker_ids"].size(), 1u);
  }
  return digest;
}

constexpr int64_t kSteps = 60;

TEST(Worker, OpenRefusesOptionsItCannotRunWith) {
  zmq::context_t context(1);
  WorkerOptions o;
  o.coordinator = "tcp://127.0.0.1:1";
  o.device_kind = "cpu";
  EXPECT_EQ(Worker::Open(o, &context).status().code(), StatusCode::kInvalidArgument);  // no model
  o.model_factory = [](const ModelOptions&) -> StatusOr<std::unique_ptr<ModelRunner>> {
    return Internal("unused");
  };
  EXPECT_TRUE(Worker::Open(o, &context).ok());
  o.device_kind.clear();
  EXPECT_EQ(Worker::Open(o, &context).status().code(), StatusCode::kInvalidArgument);
  o.device_kind = "cpu";
  o.slowdown = 0.5;
  EXPECT_EQ(Worker::Open(o, &context).status().code(), StatusCode::kInvalidArgument);
}

TEST(Worker, SeveralWorkersTrainTheBitsOfOne) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  const std::string reference = ReferenceDigest(kSteps);
  ASSERT_FALSE(reference.empty());
  Job job(kSteps);
  ASSERT_TRUE(job.StartCoordinator().ok());
  ASSERT_TRUE(job.StartShards().ok());
  std::vector<Job::RunningWorker*> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(*job.StartWorker());
  auto result = job.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)["params_sha256"], reference);
  int64_t plans = 0;
  for (auto* w : workers) {
    const nlohmann::json report = Job::Report(*w);
    EXPECT_EQ(report["outcome"], "done");
    plans += report["train_plans"].get<int64_t>();
  }
  EXPECT_GE(plans, kSteps);  // every worker computed a share of some steps
}

// The model file travels in FetchModel chunks (the coordinator's messages are
// bounded well below its size), lands in the host cache, and a second worker
// of the host reads it there; the coordinator refuses bad requests and serves on.
TEST(Worker, AModelFileOverTheMessageLimitComesInChunksAndASecondWorkerOfTheHostFetchesNothing) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  Job job(/*steps=*/4, /*shards=*/1);
  std::string payload(700'000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 + (i >> 9));
  const std::string file = testing_zip::FakeTorchScript(payload);
  job.model_file = job.dir() + "/net.pt";
  std::ofstream(job.model_file, std::ios::binary) << file;
  job.max_message_bytes = 192 << 10;  // chunks of 128 KiB
  job.min_workers = 2;
  ASSERT_TRUE(job.StartCoordinator().ok());
  ASSERT_TRUE(job.StartShards().ok());
  WorkerSetup setup;
  setup.model_cache_dir = job.dir() + "/host-cache";
  auto* first = *job.StartWorker(setup);
  ASSERT_TRUE(Eventually([&] { return job.Events("worker_ready").size() == 1; }));

  // A peer of its own: refused until it registers, then answered chunk by chunk.
  auto peer = Channel::Connect(job.context(), job.endpoint()).value();
  const auto call = [&](Body body) -> StatusOr<Envelope> {
    EPS_RETURN_IF_ERROR(peer->Send(Envelope{"secret", std::move(body)}));
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, peer->Receive(seconds(20)));
    EPS_ASSIGN_OR_RETURN(Envelope e, std::move(in.envelope));
    if (const auto* err = std::get_if<ErrorReply>(&e.body)) return err->ToStatus();
    return e;
  };
  auto unregistered = call(FetchModel{std::string(64, 'a'), 0, 10});
  EXPECT_EQ(unregistered.status().code(), StatusCode::kFailedPrecondition);
  auto registered = call(RegisterWorker{"worker_test/peer", 1, "cpu"});
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  const auto& reply = std::get<RegisterWorkerReply>(registered->body);
  EXPECT_TRUE(reply.model_bytes.empty()) << "no model inside the registration reply";
  EXPECT_EQ(reply.model_size, file.size());
  EXPECT_EQ(reply.fetch_chunk_bytes, uint64_t{128} << 10);
  const std::string sha = reply.spec.model_sha256;
  EXPECT_EQ(call(FetchModel{std::string(64, 'a'), 0, 10}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(call(FetchModel{sha, file.size(), 10}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(call(FetchModel{sha, 0, (128 << 10) + 1}).status().code(),
            StatusCode::kInvalidArgument);
  auto chunk = call(FetchModel{sha, file.size() - 100, 128 << 10});  // served on: the tail
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  const auto& bytes = std::get<FetchModelReply>(chunk->body);
  EXPECT_EQ(std::string(static_cast<const char*>(bytes.data), bytes.size),
            file.substr(file.size() - 100));

  auto* second = *job.StartWorker(setup);
  auto result = job.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(first->script_seen, file);
  EXPECT_EQ(second->script_seen, file);
  const nlohmann::json a = Job::Report(*first), b = Job::Report(*second);
  EXPECT_EQ(a["model_bytes_fetched"], file.size());
  EXPECT_EQ(a["model_files"][0]["chunks"], (file.size() + (128 << 10) - 1) / (128 << 10));
  EXPECT_EQ(a["model_files"][0]["cache"], "miss");
  EXPECT_EQ(b["model_bytes_fetched"], 0);
  EXPECT_EQ(b["model_files"][0]["cache"], "hit");
}

// A coordinator that forgets the worker in the middle of a fetch (it
// restarted): the worker registers again and fetches the file anew.
TEST(Worker, AFetchTheCoordinatorForgotRegistersAgainAndGetsTheFile) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  zmq::context_t context;
  Channel::Options co;
  co.token = "secret";
  auto router = Channel::Bind(&context, "tcp://127.0.0.1:0", co).value();
  const auto file =
      std::make_shared<const std::string>(testing_zip::FakeTorchScript(std::string(300'000, 'p')));
  Sha256 hash;
  hash.Update(file->data(), file->size());
  const std::string sha = hash.HexDigest();
  constexpr uint64_t kChunk = 64 << 10;
  auto files = ModelFileServer::Open(kChunk).value();
  files->Add(sha, file->data(), file->size(), file);
  JobSpec spec;
  spec.job_id = "forgetful";
  spec.model = "/models/net.pt";
  spec.model_sha256 = sha;
  spec.data_dir = kDataDir;
  spec.virtual_workers = 2;
  spec.batch_per_vw = 4;
  spec.train_limit = 64;
  spec.test_limit = -1;
  spec.chunk_elems = 64;
  spec.num_shards = 1;
  std::atomic<bool> done{false};
  std::atomic<int> registrations{0}, refused{0};
  // The coordinator: the first registration's fetch is refused past 128 KiB, as by a
  // coordinator that restarted; a step request is answered "stop".
  std::thread coordinator([&] {
    while (!done) {
      auto in = router->Receive(milliseconds(20));
      if (!in.ok() || !in->envelope.ok()) continue;
      const Body& body = in->envelope->body;
      Body answer;
      if (std::holds_alternative<RegisterWorker>(body)) {
        RegisterWorkerReply r{WorkerId(uint32_t(registrations++)), spec, {"tcp://127.0.0.1:9"}};
        r.model_size = file->size();
        r.fetch_chunk_bytes = kChunk;
        answer = r;
      } else if (const auto* fetch = std::get_if<FetchModel>(&body)) {
        if (registrations == 1 && fetch->offset >= 2 * kChunk) {
          ++refused;
          answer = ErrorReply{StatusCode::kFailedPrecondition,
                              "FetchModel from a peer that is no "
                              "registered worker: register first"};
        } else {
          answer = files->Serve(*fetch).value();
        }
      } else if (std::holds_alternative<StepRequest>(body) || std::holds_alternative<Leave>(body)) {
        answer = StepPlan{PlanKind::kStop, Step(0), Epoch(0), 0, 0, 0, 0};
      } else {
        continue;  // heartbeats
      }
      (void)router->SendTo(in->peer, Envelope{"", std::move(answer)});
    }
  });
  const std::string dir = std::filesystem::temp_directory_path() / "eps-forgetful-XXXXXX";
  std::string made = dir;
  ASSERT_NE(mkdtemp(made.data()), nullptr);
  WorkerOptions wo;
  wo.coordinator = router->endpoint();
  wo.token = "secret";
  wo.host = "worker_test/forgetful";
  wo.device_kind = "cpu";
  wo.heartbeat_interval = milliseconds(50);
  wo.report_file = made + "/report.json";
  wo.model_cache_dir = made + "/cache";
  std::atomic<int64_t> steps{0};
  std::string script_seen;
  wo.model_factory = [&](const ModelOptions& o) -> StatusOr<std::unique_ptr<ModelRunner>> {
    script_seen = o.script;
    return std::unique_ptr<ModelRunner>(new FakeModel(o, &steps, -1, {}));
  };
  auto worker = Worker::Open(wo, &context).value();
  const std::atomic<bool> stop{false};
  const Status st = worker->Run(&stop);
  done = true;
  coordinator.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(registrations.load(), 2);
  EXPECT_EQ(script_seen, *file);
  std::ifstream in(wo.report_file);
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(report["outcome"], "done");
  EXPECT_EQ(report["worker_ids"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(report["reregistrations"], 1);
  EXPECT_EQ(report["model_bytes_fetched"], file->size());
  EXPECT_EQ(report["model_files"][0]["cache"], "miss");
  std::filesystem::remove_all(made);
}

TEST(Worker, AWorkerThatLeavesMidJobChangesNoBit) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  const std::string reference = ReferenceDigest(kSteps);
  Job job(kSteps);
  // No re-plan by speed: one that found the leaver slow at its first report (a sanitizer build
  // on a busy machine) gave it no VW for the next 50 of the 60 steps, and it never left mid-job.
  job.replan_threshold = 0.99;
  ASSERT_TRUE(job.StartCoordinator().ok());
  ASSERT_TRUE(job.StartShards().ok());
  Job::RunningWorker* stays = *job.StartWorker();
  Job::RunningWorker* leaves = *job.StartWorker();
  ASSERT_TRUE(Eventually([&] { return leaves->model_steps >= 40; }));
  leaves->stop = true;  // as SIGTERM does
  ASSERT_EQ(leaves->done.wait_for(seconds(30)), std::future_status::ready);
  EXPECT_TRUE(leaves->done.get().ok());
  auto result = job.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)["params_sha256"], reference);
  EXPECT_EQ(Job::Report(*leaves)["outcome"], "left");
  EXPECT_EQ(Job::Report(*stays)["outcome"], "done");
}

TEST(Worker, AWorkerDeclaredDeadRegistersAgainAndChangesNoBit) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  const std::string reference = ReferenceDigest(kSteps);
  Job job(kSteps);
  ASSERT_TRUE(job.StartCoordinator().ok());
  ASSERT_TRUE(job.StartShards().ok());
  Job::RunningWorker* steady = *job.StartWorker();
  // The other worker beats only when it registers, and stalls in the middle
  // of a VW until the steady one has run two more steps' worth of VWs, which
  // the barrier allows only once the coordinator declared it dead and moved
  // its VWs. Its next request is then refused, and it joins again under a
  // new id, with the model and data it has.
  WorkerSetup stalls;
  stalls.heartbeat_interval = std::chrono::minutes(10);
  stalls.stall_at = 30;
  bool moved = false;
  stalls.stall = [steady, &moved] {
    const int64_t from = steady->model_steps;
    moved = Eventually([&] { return steady->model_steps >= from + 16; }, seconds(60));
  };
  Job::RunningWorker* stalled = *job.StartWorker(stalls);
  auto result = job.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(moved);
  EXPECT_EQ((*result)["params_sha256"], reference);
  const nlohmann::json report = Job::Report(*stalled);
  EXPECT_EQ(report["outcome"], "done");
  EXPECT_GE(report["reregistrations"].get<int64_t>(), 1);
  EXPECT_GE(report["worker_ids"].size(), 2u);
  EXPECT_GT(report["train_plans"].get<int64_t>(), 0);
}

TEST(Worker, MetricsCountTheVwsPlansAndBytesTheWorkerAndTheShardsSaw) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  constexpr int64_t kShortJob = 12;
  Metrics worker_metrics, shard_metrics;  // outlive the job
  auto job = std::make_unique<Job>(kShortJob);
  job->shard_metrics = &shard_metrics;
  ASSERT_TRUE(job->StartCoordinator().ok());
  ASSERT_TRUE(job->StartShards().ok());
  WorkerSetup setup;
  setup.metrics = &worker_metrics;
  Job::RunningWorker* w = *job->StartWorker(setup);
  auto result = job->Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const nlohmann::json report = Job::Report(*w);
  ASSERT_EQ(report["outcome"], "done");
  ASSERT_EQ(report["worker_ids"].size(), 1u);
  const Labels labels{{"host", "worker_test/0"},
                      {"worker", "w" + std::to_string(report["worker_ids"][0].get<int64_t>())}};
  auto with = [&](const std::string& name, const std::string& value) {
    Labels l = labels;
    l[name] = value;
    return l;
  };
  auto counter = [&](const std::string& name, const Labels& l) {
    return worker_metrics.GetCounter(name, "", l).value();
  };
  EXPECT_GT(w->model_steps, 0);
  EXPECT_EQ(counter("eps_worker_vws_total", labels), w->model_steps.load());
  EXPECT_EQ(worker_metrics.GetHistogram("eps_worker_vw_seconds", "", {}, labels).count(),
            static_cast<uint64_t>(w->model_steps.load()));
  EXPECT_EQ(counter("eps_worker_plans_total", with("kind", "train")), kShortJob);
  EXPECT_EQ(counter("eps_worker_plans_total", with("kind", "init")), 1);
  EXPECT_GE(counter("eps_worker_plans_total", with("kind", "eval")), 1);  // at the end at least
  EXPECT_EQ(worker_metrics.GetHistogram("eps_worker_pull_seconds", "", {}, labels).count(),
            static_cast<uint64_t>(kShortJob));
  EXPECT_EQ(worker_metrics.GetHistogram("eps_worker_push_wait_seconds", "", {}, labels).count(),
            static_cast<uint64_t>(kShortJob));
  EXPECT_EQ(worker_metrics.GetGauge("eps_worker_vws", "", labels).value(), 0);  // stopped
  Labels info = with("device", "cpu");
  info["device_kind"] = "cpu";
  EXPECT_EQ(worker_metrics.GetGauge("eps_worker_info", "", info).value(), 1);
  // What the worker pushed, the shards read; they also answered the coordinator's final pull.
  double shard_in = 0, shard_out = 0;
  for (const char* s : {"0", "1"}) {
    shard_in += shard_metrics.GetCounter("eps_shard_push_bytes_total", "", {{"shard", s}}).value();
    shard_out += shard_metrics.GetCounter("eps_shard_pull_bytes_total", "", {{"shard", s}}).value();
  }
  const double pushed = counter("eps_worker_push_bytes_total", labels);
  const double pulled = counter("eps_worker_pull_bytes_total", labels);
  EXPECT_GT(pushed, 0);
  EXPECT_EQ(pushed, shard_in);
  EXPECT_GT(pulled, 0);
  EXPECT_LT(pulled, shard_out);
  // Once the worker is gone its series are no longer rendered.
  job.reset();
  EXPECT_EQ(worker_metrics.Render(), "");
}

TEST(Worker, AWorkerOutOfMemoryLeavesWithAHostFaultAndItsHostIsBackedOffAfterTwo) {
  if (!HaveData()) GTEST_SKIP() << "no Fashion-MNIST in " << kDataDir;
  const std::string reference = ReferenceDigest(kSteps);
  Job job(kSteps);
  ASSERT_TRUE(job.StartCoordinator().ok());
  ASSERT_TRUE(job.StartShards().ok());
  WorkerSetup oom;
  oom.machine = "small-host";
  oom.model_error = ResourceExhausted("MakeModel(fake): out of memory");
  for (int i = 0; i < 2; ++i) {
    Job::RunningWorker* w = *job.StartWorker(oom);
    ASSERT_EQ(w->done.wait_for(seconds(60)), std::future_status::ready);
    EXPECT_EQ(w->done.get().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(Job::Report(*w)["outcome"], "failed");
  }
  ASSERT_TRUE(Eventually([&] { return job.Events("host_backed_off").size() == 1; }, seconds(30)));
  EXPECT_EQ(job.Events("host_backed_off")[0]["host"], "small-host");
  const std::vector<nlohmann::json> left = job.Events("worker_left");
  ASSERT_EQ(left.size(), 2u);
  for (const auto& e : left) EXPECT_EQ(e["host_fault"], true) << e.dump();
  // The third is refused at registration; the job is not failed, and a good host finishes it.
  Job::RunningWorker* refused = *job.StartWorker(oom);
  ASSERT_EQ(refused->done.wait_for(seconds(60)), std::future_status::ready);
  EXPECT_EQ(refused->done.get().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Job::Report(*refused)["worker_ids"].empty());
  (void)*job.StartWorker();
  auto result = job.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)["params_sha256"], reference);
  EXPECT_TRUE(job.Events("job_failed").empty());
}

}  // namespace
}  // namespace eps
