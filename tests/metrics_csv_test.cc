// RUN_DIR/metrics.csv (elastic/metrics_csv.h): one row per completed step, made
// of the coordinator's events; the row of an evaluated step carries the test
// accuracy; a reopened file keeps its rows and gets no second header.
#include "elastic/metrics_csv.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace eps {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

JobEvent Completed(int64_t step, float loss, std::vector<WorkerRange> ranges) {
  JobEvent::StepCompleted c;
  c.has_loss = true;
  c.loss = loss;
  c.lr = 0.05;
  c.epoch = 0.25 * double(step + 1);
  c.ranges = std::move(ranges);
  return JobEvent{Clock::time_point{}, Step(step), c};
}

JobEvent At(int64_t step, JobEvent::What what) {
  return JobEvent{Clock::time_point{}, Step(step), std::move(what)};
}

class MetricsCsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/metrics_csv_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/metrics.csv";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(MetricsCsvTest, OneRowPerStepWithTheEvaluationOnItsStepsRow) {
  auto csv = MetricsCsv::Open(path_, 64);
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  const WorkerId w0(0), w2(2);
  ASSERT_TRUE((*csv)->OnEvent(Completed(0, 2.5f, {{w0, 0, 8}}), 100.0).ok());
  ASSERT_TRUE((*csv)->OnEvent(At(0, JobEvent::RangeConfirmed{w0, 0, 8}), 100.1).ok());
  ASSERT_TRUE((*csv)->OnEvent(Completed(1, 1.25f, {{w0, 0, 4}, {w2, 4, 8}}), 100.5).ok());
  EXPECT_EQ(Lines(path_).size(), 2u) << "step 1's row waits: an evaluation may follow";
  ASSERT_TRUE((*csv)->OnEvent(At(2, JobEvent::Evaluated{0.875, 0.4}), 100.9).ok());
  ASSERT_TRUE((*csv)->OnEvent(Completed(2, 1.0f, {{w2, 0, 2}, {w0, 2, 4}, {w2, 4, 8}}), 101.5).ok());
  ASSERT_TRUE((*csv)->OnEvent(At(3, JobEvent::JobFinished{}), 101.6).ok());
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], MetricsCsv::kHeader);
  EXPECT_EQ(lines[1], "1,0.250000,2.5,0.05,,,,1,w0:8,100.000") << "no rate for the first step";
  EXPECT_EQ(lines[2], "2,0.500000,1.25,0.05,0.875000,0.4,128.0,2,w0:4 w2:4,100.500");
  EXPECT_EQ(lines[3], "3,0.750000,1,0.05,,,64.0,2,w0:2 w2:6,101.500") << "VWs by worker";
}

TEST_F(MetricsCsvTest, AReopenedFileKeepsItsRowsAndGetsNoSecondHeader) {
  {
    auto csv = MetricsCsv::Open(path_, 64);
    ASSERT_TRUE(csv.ok());
    ASSERT_TRUE((*csv)->OnEvent(Completed(0, 2.5f, {}), 1.0).ok());
    ASSERT_TRUE((*csv)->OnEvent(At(1, JobEvent::JobFailed{StatusCode::kAborted, "stopped"}), 1.5).ok());
  }
  auto csv = MetricsCsv::Open(path_, 64);
  ASSERT_TRUE(csv.ok());
  ASSERT_TRUE((*csv)->OnEvent(Completed(1, 2.0f, {}), 9.0).ok());
  ASSERT_TRUE((*csv)->OnEvent(At(2, JobEvent::JobFinished{}), 9.5).ok());
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], MetricsCsv::kHeader);
  EXPECT_EQ(lines[1].substr(0, 2), "1,");
  EXPECT_EQ(lines[2].substr(0, 2), "2,");
}

TEST_F(MetricsCsvTest, AFolderThatCannotHoldTheFileIsAnError) {
  EXPECT_FALSE(MetricsCsv::Open(dir_ + "/missing/metrics.csv", 64).ok());
}

}  // namespace
}  // namespace eps
