// InferenceServer (serve/server.h) over real HTTP on loopback port 0, with a
// fake model: the V1 paths and bodies, every bad request a 4xx JSON reason
// after which the next good one is answered, batching of concurrent requests,
// 503 on a full queue, a swap between batches, and the drain.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "serve/server.h"

namespace eps {
namespace {

using json = nlohmann::json;
constexpr auto kWait = std::chrono::seconds(20);

// Two "classes": each instance's sum plus `offset`, and 0. Predict waits for
// `gate` (when set), so that a test can hold a batch while requests queue.
class FakeModel final : public ServedModel {
 public:
  explicit FakeModel(float offset, std::vector<int64_t> shape = {2}) : offset_(offset) {
    input_.sample_shape = std::move(shape);
  }
  const ModelInput& input() const override { return input_; }
  StatusOr<BatchOutputs> Predict(const Instances& batch) override {
    if (!entered_once_.exchange(true)) entered_.set_value();
    if (gate_.valid() && gate_.wait_for(kWait) != std::future_status::ready)
      return Internal("the test never opened the gate");
    BatchOutputs out;
    out.rows = batch.count;
    out.row_shape = {2};
    const int64_t elems = input_.SampleElems();
    for (int64_t i = 0; i < batch.count; ++i) {
      float sum = offset_;
      for (int64_t e = 0; e < elems; ++e) sum += batch.floats[i * elems + e];
      if (sum < -1000) return InvalidArgument("the fake model refuses sums below -1000");
      out.values.insert(out.values.end(), {sum, 0});
      out.probabilities.insert(out.probabilities.end(), {sum, 0});
    }
    batches_.push_back(batch.count);
    return out;
  }
  std::shared_future<void> gate_;
  std::promise<void> entered_;  // set when the first batch reaches the model
  std::atomic<bool> entered_once_{false};
  std::vector<int64_t> batches_;  // the inference thread's; read once it is idle

 private:
  ModelInput input_;
  const float offset_;
};

std::shared_ptr<const LoadedModel> Loaded(std::shared_ptr<FakeModel> model, std::string sha) {
  auto l = std::make_shared<LoadedModel>();
  l->model = std::move(model);
  l->file = "fake.pt";
  l->sha256 = std::move(sha);
  l->metadata = {{"job_id", "fake"}};
  return l;
}

class HttpServing : public ::testing::Test {
 protected:
  void Start(BatchQueueOptions batching, size_t max_body = 1 << 20) {
    InferenceServerOptions o;
    o.name = "m";
    o.batching = batching;
    o.max_body_bytes = max_body;
    o.request_timeout = std::chrono::milliseconds(30000);
    o.give_back_file = give_back_file_;
    o.events_file = events_file_;
    auto s = InferenceServer::Start(o, Loaded(model_, "a"), &metrics_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Result Predict(const std::string& body, const std::string& name = "m") {
    return Client().Post(("/v1/models/" + name + ":predict").c_str(), body, "application/json");
  }
  // Waits (bounded) until `depth` requests are queued.
  bool QueueReaches(int depth) {
    Gauge& g = metrics_.GetGauge("eps_serve_queue_depth", "");
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (g.value() < depth) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  Metrics metrics_;
  std::string give_back_file_;
  std::string events_file_;
  std::shared_ptr<FakeModel> model_ = std::make_shared<FakeModel>(0.5f);
  std::unique_ptr<InferenceServer> server_;
};

TEST_F(HttpServing, AnswersV1PredictStatusHealthAndMetrics) {
  Start(BatchQueueOptions{});
  auto r = Predict(R"({"instances": [[1, 2], [3, 4.25]]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body),
            json::parse(R"({"predictions": [{"class": 0, "probabilities": [3.5, 0]},
                                            {"class": 0, "probabilities": [7.75, 0]}]})"));
  auto status = Client().Get("/v1/models/m");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  const json s = json::parse(status->body);
  EXPECT_EQ(s["ready"], true);
  EXPECT_EQ(s["sha256"], "a");
  EXPECT_EQ(s["job_id"], "fake");
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("eps_serve_requests_total{code=\"200\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("eps_serve_batch_instances_count 1"), std::string::npos);
}

TEST_F(HttpServing, BadRequestsGetA4xxReasonAndTheNextGoodOneIsAnswered) {
  Start(BatchQueueOptions{}, /*max_body=*/4096);
  const struct {
    std::string path, body;
    int status;
    std::string reason;
  } cases[] = {
      {"/v1/models/m:predict", "{\"instances\": [[1, 2]", 400, "not JSON"},
      {"/v1/models/m:predict", "{\"instances\": [[1, 2, 3]]}", 400, "shape [3]"},
      {"/v1/models/m:predict", "{\"instances\": [[-5000, 0]]}", 400, "refuses sums"},
      {"/v1/models/other:predict", "{\"instances\": [[1, 2]]}", 404, "no model 'other'"},
      {"/v1/models/m:explain", "{}", 404, "no such path"},
      {"/v1/models/m:predict", "{\"instances\": [[" + std::string(5000, '1') + ", 2]]}", 413,
       "--max_body_mb"},
  };
  for (const auto& c : cases) {
    auto r = Client().Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.status) << c.path << " " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_NE(j["error"].get<std::string>().find(c.reason), std::string::npos) << r->body;
    auto good = Predict(R"({"instances": [[1, 2]]})");
    ASSERT_TRUE(good);
    EXPECT_EQ(good->status, 200) << good->body;
  }
}

TEST_F(HttpServing, ConcurrentRequestsShareABatchAndOneTheModelRefusesFailsAlone) {
  std::promise<void> gate;
  model_->gate_ = gate.get_future().share();
  BatchQueueOptions b;
  b.max_batch = 8;
  b.max_delay = std::chrono::milliseconds(0);
  Start(b);
  // The first request holds the inference thread at the gate; three more queue.
  std::future<void> entered = model_->entered_.get_future();
  auto first =
      std::async(std::launch::async, [&] { return Predict(R"({"instances": [[1, 1]]})"); });
  ASSERT_EQ(entered.wait_for(kWait), std::future_status::ready);
  std::vector<std::future<httplib::Result>> rest;
  const char* bodies[] = {R"({"instances": [[1, 2], [2, 2]]})", R"({"instances": [[-5000, 0]]})",
                          R"({"instances": [[3, 3]]})"};
  for (const char* body : bodies)
    rest.push_back(std::async(std::launch::async, [this, body] { return Predict(body); }));
  ASSERT_TRUE(QueueReaches(3));
  gate.set_value();
  auto r0 = first.get();
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->status, 200);
  std::vector<httplib::Result> got;
  for (auto& f : rest) got.push_back(f.get());
  ASSERT_TRUE(got[0] && got[1] && got[2]);
  EXPECT_EQ(got[0]->status, 200) << got[0]->body;
  EXPECT_EQ(got[1]->status, 400) << got[1]->body;
  EXPECT_EQ(got[2]->status, 200) << got[2]->body;
  EXPECT_EQ(json::parse(got[2]->body)["predictions"][0]["probabilities"][0], 6.5);
  server_->Drain();
  // Batch 1 (the first request), then the three together (4 instances) which
  // failed, then each alone: 2 and 1 answered (the refused one records none;
  // the three arrived in any order).
  ASSERT_EQ(model_->batches_.size(), 3u);
  EXPECT_EQ(model_->batches_[0], 1);
  EXPECT_EQ(model_->batches_[1] + model_->batches_[2], 3);
}

TEST_F(HttpServing, TheLoadEndpointAnswersAsSoonAsARequestArrivesOrAtItsDeadline) {
  std::promise<void> gate;
  model_->gate_ = gate.get_future().share();
  Start(BatchQueueOptions{});
  // Nothing inside: the wait runs to its deadline and says 0.
  const auto before = std::chrono::steady_clock::now();
  auto idle = Client().Get("/v1/load?wait_ms=150");
  ASSERT_TRUE(idle);
  EXPECT_EQ(idle->status, 200);
  EXPECT_EQ(json::parse(idle->body)["in_flight"], 0);
  EXPECT_GE(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(150));
  // A wait of up to 10 s answers once a predict request is inside (held at the model's gate).
  auto waiting =
      std::async(std::launch::async, [&] { return Client().Get("/v1/load?wait_ms=10000"); });
  std::future<void> entered = model_->entered_.get_future();
  auto request =
      std::async(std::launch::async, [&] { return Predict(R"({"instances": [[1, 1]]})"); });
  ASSERT_EQ(entered.wait_for(kWait), std::future_status::ready);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto woke = waiting.get();
  ASSERT_TRUE(woke);
  EXPECT_EQ(json::parse(woke->body)["in_flight"], 1);
  gate.set_value();
  ASSERT_TRUE(request.get());
  // That request has come and gone: a wait naming the count seen before it answers at once, one
  // naming the count after it runs to its deadline.
  const auto gone_before = std::chrono::steady_clock::now();
  auto gone = Client().Get("/v1/load?arrived_above=0&wait_ms=10000");
  ASSERT_TRUE(gone);
  EXPECT_EQ(json::parse(gone->body)["in_flight"], 0);
  EXPECT_EQ(json::parse(gone->body)["arrived"], 1);
  EXPECT_LT(std::chrono::steady_clock::now() - gone_before, std::chrono::seconds(5));
  const auto quiet_before = std::chrono::steady_clock::now();
  auto quiet = Client().Get("/v1/load?arrived_above=1&wait_ms=150");
  ASSERT_TRUE(quiet);
  EXPECT_EQ(json::parse(quiet->body)["arrived"], 1);
  EXPECT_GE(std::chrono::steady_clock::now() - quiet_before, std::chrono::milliseconds(150));
  for (const char* bad : {"/v1/load?wait_ms=-1", "/v1/load?wait_ms=10001", "/v1/load?in_flight=0",
                          "/v1/load?in_flight=x", "/v1/load?arrived_above=-1"}) {
    auto r = Client().Get(bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
  }
}

// The exit status of child `pid` within 10 s, or -1.
int WaitChild(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// With a give-back file, the first request to arrive claims it and signals the lent worker it
// names, and the events file says so, stamped with its arrival; later requests find none; a file
// that names no worker (another process, another signal, other text) is not claimed, and the
// server serves on.
TEST_F(HttpServing, TheFirstRequestSignalsTheLentWorkerOfTheGiveBackFile) {
  char dir[] = "/tmp/eps-give-back-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  give_back_file_ = std::string(dir) + "/give-back";
  events_file_ = std::string(dir) + "/events.jsonl";
  // Two processes: one whose executable is named worker (a copy of sleep), and a sleep.
  const std::string worker_exe = std::string(dir) + "/worker";
  std::filesystem::copy_file("/bin/sleep", worker_exe);
  std::filesystem::permissions(worker_exe, std::filesystem::perms::owner_all);
  auto spawn = [](const std::string& exe) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl(exe.c_str(), "sleep", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  const pid_t worker = spawn(worker_exe), other = spawn("/bin/sleep");
  ASSERT_GT(worker, 0);
  ASSERT_GT(other, 0);
  // Bounded: until both run their own executable.
  for (int i = 0; i < 500; ++i) {
    std::error_code e1, e2;
    if (std::filesystem::read_symlink("/proc/" + std::to_string(worker) + "/exe", e1).filename() ==
            "worker" &&
        std::filesystem::read_symlink("/proc/" + std::to_string(other) + "/exe", e2).filename() ==
            "sleep")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Start(BatchQueueOptions{});
  Counter& give_backs = metrics_.GetCounter("eps_serve_give_backs_total", "");
  ASSERT_TRUE(Predict(R"({"instances": [[1, 1]]})"));  // no file: nothing to do
  EXPECT_EQ(give_backs.value(), 0);
  std::ofstream(give_back_file_) << worker << " " << SIGTERM << "\n";
  const double sent = WallSeconds();
  auto first = Predict(R"({"instances": [[1, 1]]})");
  const double answered = WallSeconds();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  const int status = WaitChild(worker);
  if (status == -1) kill(worker, SIGKILL), waitpid(worker, nullptr, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(give_backs.value(), 1);
  EXPECT_NE(access(give_back_file_.c_str(), F_OK), 0);  // claimed
  EXPECT_EQ(access((give_back_file_ + ".taken").c_str(), F_OK), 0);
  ASSERT_TRUE(Predict(R"({"instances": [[1, 1]]})"));
  EXPECT_EQ(give_backs.value(), 1);
  // Files that name no worker are left for the agent's probe (not claimed), and the server
  // serves on.
  for (const std::string& bad :
       {std::string("garbage\n"), std::string("1 15\n"), std::to_string(worker) + " 9\n",
        std::to_string(other) + " 15\n"}) {
    std::ofstream(give_back_file_) << bad;
    auto r = Predict(R"({"instances": [[1, 1]]})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << bad;
    EXPECT_EQ(access(give_back_file_.c_str(), F_OK), 0) << bad;
  }
  EXPECT_EQ(give_backs.value(), 1);
  EXPECT_EQ(waitpid(other, nullptr, WNOHANG), 0);  // not signalled: still there
  std::ifstream events(events_file_);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(events, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 1u);  // the one signal
  EXPECT_EQ(lines[0]["event"], "gave_back");
  EXPECT_EQ(lines[0]["pid"], worker);
  EXPECT_EQ(lines[0]["signal"], SIGTERM);
  EXPECT_GE(lines[0]["t"].get<double>(), sent);
  EXPECT_LE(lines[0]["t"].get<double>(), answered);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  std::filesystem::remove_all(dir);
}

TEST_F(HttpServing, AnEventsFileThatCannotBeOpenedIsRefusedAtStart) {
  InferenceServerOptions o;
  o.name = "m";
  o.events_file = "/nonexistent-eps-dir/events.jsonl";
  auto s = InferenceServer::Start(o, Loaded(model_, "a"), &metrics_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--events_file"), std::string::npos) << s.status().ToString();
}

TEST_F(HttpServing, AFullQueueAnswers503AndTheDrainAnswersEveryQueuedRequest) {
  BatchQueueOptions b;
  b.max_batch = 100;
  b.max_delay = std::chrono::milliseconds(60000);  // only the drain ends the wait
  b.max_queue = 3;
  Start(b);
  std::vector<std::future<httplib::Result>> queued;
  for (int i = 0; i < 3; ++i)
    queued.push_back(
        std::async(std::launch::async, [this] { return Predict(R"({"instances": [[1, 2]]})"); }));
  ASSERT_TRUE(QueueReaches(3));
  auto full = Predict(R"({"instances": [[1, 2]]})");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 503);
  EXPECT_NE(full->body.find("queue is full"), std::string::npos);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server_->Drain(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (auto& f : queued) {
    auto r = f.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(model_->batches_, std::vector<int64_t>{3});
  auto after = Predict(R"({"instances": [[1, 2]]})");
  EXPECT_FALSE(after && after->status == 200);  // nothing serves after the drain
}

TEST_F(HttpServing, ASwapServesTheNewModelFromTheNextBatchAndRefusesAnotherInput) {
  Start(BatchQueueOptions{});
  auto before = Predict(R"({"instances": [[1, 2]]})");
  ASSERT_TRUE(before);
  EXPECT_EQ(json::parse(before->body)["predictions"][0]["probabilities"][0], 3.5);
  EXPECT_EQ(before->get_header_value("X-Model-Version"), "1");
  ASSERT_TRUE(server_->Swap(Loaded(std::make_shared<FakeModel>(100.0f), "b")).ok());
  auto after = Predict(R"({"instances": [[1, 2]]})");
  ASSERT_TRUE(after);
  EXPECT_EQ(json::parse(after->body)["predictions"][0]["probabilities"][0], 103);
  EXPECT_EQ(after->get_header_value("X-Model-Version"), "2");
  const Status other =
      server_->Swap(Loaded(std::make_shared<FakeModel>(0, std::vector<int64_t>{3}), "c"));
  EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(server_->model()->sha256, "b");
}

}  // namespace
}  // namespace eps
