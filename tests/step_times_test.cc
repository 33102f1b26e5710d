#include "worker/step_times.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace eps {
namespace {

WorkerReport SomeReport() {
  WorkerReport r;
  r.host = "h:1";
  r.device = "cpu";
  r.device_kind = "cpu";
  r.worker_ids = {WorkerId(1), WorkerId(4)};
  r.outcome = "done";
  r.times.steps = 5;  // the first not timed
  r.times.timed = 4;
  r.times.compute = std::chrono::milliseconds(40);
  r.times.plan = std::chrono::milliseconds(2);
  r.times.ahead = 3;
  r.times.dropped = 1;
  r.times.reregistrations = 1;
  r.counts.shm_replies = 5;
  r.counts.inline_pushes = 2;
  r.counts.prefetches_pulled_again = 1;
  return r;
}

TEST(WorkerReport, HoldsEveryFieldInMillisecondsPerTrainPlan) {
  const nlohmann::json j = nlohmann::json::parse(ReportJson(SomeReport()));
  EXPECT_EQ(j["host"], "h:1");
  EXPECT_EQ(j["worker_ids"], nlohmann::json::array({1, 4}));
  EXPECT_EQ(j["outcome"], "done");
  EXPECT_EQ(j["error"], "");
  EXPECT_EQ(j["train_plans"], 5);
  EXPECT_EQ(j["timed_plans"], 4);
  EXPECT_EQ(j["ran_ahead"], 3);
  EXPECT_EQ(j["ahead_dropped"], 1);
  EXPECT_EQ(j["reregistrations"], 1);
  EXPECT_DOUBLE_EQ(j["ms_per_train_plan"]["compute"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["ms_per_train_plan"]["plan_wait"].get<double>(), 0.5);
  EXPECT_EQ(j["pull_replies"]["shm"], 5);
  EXPECT_EQ(j["pushes"]["inline"], 2);
  EXPECT_EQ(j["prefetches_pulled_again"], 1);
  EXPECT_EQ(j["shm_push_refusals"], 0);
}

TEST(WorkerReport, CountsTheModelBytesFetchedOverEveryModelFile) {
  WorkerReport r = SomeReport();
  EXPECT_EQ(nlohmann::json::parse(ReportJson(r))["model_bytes_fetched"], 0);
  r.model_files = {
      {"model", std::string(64, 'a'), uint64_t{5} << 30, uint64_t{5} << 30, 1280, "miss", 812.5},
      {"init_from", std::string(64, 'b'), 4096, 0, 0, "hit", 0.25}};
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  EXPECT_EQ(j["model_bytes_fetched"].get<uint64_t>(), uint64_t{5} << 30);
  ASSERT_EQ(j["model_files"].size(), 2u);
  EXPECT_EQ(j["model_files"][0]["size"].get<uint64_t>(), uint64_t{5} << 30);
  EXPECT_EQ(j["model_files"][0]["chunks"], 1280);
  EXPECT_EQ(j["model_files"][1]["what"], "init_from");
  EXPECT_EQ(j["model_files"][1]["cache"], "hit");
  EXPECT_EQ(j["model_files"][1]["fetched_bytes"], 0);
}

// A model of three tables, the last one looked up by rows.
class TablesModel final : public ModelRunner {
 public:
  TablesModel() {
    tensors_ = {{"text.tok.weight", TensorKind::kParameter, DType::kFloat32, {1000, 16}},
                {"text.pos.weight", TensorKind::kParameter, DType::kFloat32, {48, 16}},
                {"emb.weight", TensorKind::kParameter, DType::kFloat32, {64, 8}}};
    tensors_[0].sparse = true;
    tensors_[2].sparse = true;
  }
  const std::vector<TensorSpec>& Tensors() const override { return tensors_; }
  const void* Data(size_t) const override { return nullptr; }
  Status Write(size_t, size_t, const void*, size_t) override { return OkStatus(); }
  StatusOr<float> TrainStep(const Dataset&, const std::vector<int64_t>&, uint64_t,
                            const GradReady&) override {
    return 0.0f;
  }
  const float* GradData(size_t) const override { return nullptr; }
  StatusOr<Gradients> TakeGradients() override { return Gradients{}; }
  StatusOr<EvalStats> Evaluate(const Dataset&, int64_t, int64_t, int64_t) override {
    return EvalStats{};
  }
  bool Lookup(size_t i) const override { return i == 2; }

 private:
  std::vector<TensorSpec> tensors_;
};

TEST(WorkerReport, ListsTheSparseTablesAndTheLookedUpOnesInTheModelsOrder) {
  WorkerReport r = SomeReport();
  EXPECT_EQ(nlohmann::json::parse(ReportJson(r))["sparse_tables"], nlohmann::json::array());
  NameSparseTables(TablesModel(), &r);
  r.counts.lookup_rows = 1234;
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  EXPECT_EQ(j["sparse_tables"], nlohmann::json::array({"text.tok.weight", "emb.weight"}));
  EXPECT_EQ(j["lookup_tables"], nlohmann::json::array({"emb.weight"}));
  EXPECT_EQ(j["lookup_rows"], 1234);
}

TEST(WorkerReport, AFailureCarriesItsStatus) {
  WorkerReport r = SomeReport();
  r.outcome = "failed";
  r.error = Unavailable("shard 0 is down");
  const nlohmann::json j = nlohmann::json::parse(ReportJson(r));
  EXPECT_NE(j["error"].get<std::string>().find("shard 0 is down"), std::string::npos);
}

TEST(WorkerReport, IsWrittenWholeOrNotAtAll) {
  char tmpl[] = "/tmp/eps-step-times-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/worker0.json";
  ASSERT_TRUE(WriteReport(path, SomeReport()).ok());
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["train_plans"], 5);
  EXPECT_GT(j["peak_rss_mb"].get<int64_t>(), 0);  // this test's own process
  EXPECT_EQ(j["nice"], getpriority(PRIO_PROCESS, 0));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // Written from a thread in the idle scheduling class (as lend.sh --worker-idle runs a worker),
  // the report says so.
  std::thread idle([&] {
    const sched_param none{};
    ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &none), 0);
    ASSERT_TRUE(WriteReport(path, SomeReport()).ok());
  });
  idle.join();
  std::ifstream again(path);
  EXPECT_EQ(nlohmann::json::parse(again)["scheduling"], "idle");
  EXPECT_EQ(WriteReport(dir + "/missing/worker0.json", SomeReport()).code(), StatusCode::kInternal);
  std::filesystem::remove_all(dir);
}

TEST(StepTimes, SummaryCountsWhatMovedThroughSharedMemory) {
  const WorkerReport r = SomeReport();
  const std::string s = Summary(r.times, r.counts);
  EXPECT_NE(s.find("over 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace eps
