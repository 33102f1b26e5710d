// The cluster simulator (elastic/simulator.h): tiny traces whose JCTs are worked
// out by hand, the example trace (elastic beats FIFO), trace and cluster parsing.
// Runs under ASan + UBSan.
#include "elastic/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace eps {
namespace {

SimulationResult Simulated(const std::string& csv, const std::string& cluster, Policy policy,
                           double rescale_s) {
  auto trace = ParseTrace(csv);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  auto c = ParseCluster(cluster);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  SimulatorOptions o;
  o.policy = policy;
  o.rescale_s = rescale_s;
  auto r = Simulate(*trace, *c, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimulationResult{};
}

// j1: 100 steps of V = 2 at 1 s per VW step, asks for 2 GPUs; j2 arrives at
// t = 10 with 50 steps and asks for 1.
constexpr char kTwoJobs[] =
    "# two jobs on two GPUs\n"
    "arrival_s,job_id,steps,v,batch_per_vw,gpus,t_A\n"
    "0,j1,100,2,1,2,1\n"
    "10,j2,50,2,1,1,1\n";

TEST(Simulator, FifoQueuesTheSecondJobBehindTheFirst) {
  // j1: one VW per GPU, 1 s per step, done at 100. j2 starts then on 1 GPU with
  // both VWs, 2 s per step: done at 200. JCTs 100 and 190.
  const SimulationResult r = Simulated(kTwoJobs, "A:2", Policy::kFifo, 0);
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_DOUBLE_EQ(r.jobs[0].finish_s, 100);
  EXPECT_DOUBLE_EQ(r.jobs[1].start_s, 100);
  EXPECT_DOUBLE_EQ(r.jobs[1].finish_s, 200);
  EXPECT_DOUBLE_EQ(r.avg_jct_s, 145);
  EXPECT_DOUBLE_EQ(r.makespan_s, 200);
  // GPU-seconds held: 2 x 100 + 1 x 100 over 2 GPUs x 200 s.
  EXPECT_DOUBLE_EQ(r.busy_gpu_fraction, 0.75);
}

TEST(Simulator, FifoPaysTheStartCost) {
  // Each start stalls 10 s: j1 done at 110; j2 starts at 110, done at 110 + 10 + 100.
  const SimulationResult r = Simulated(kTwoJobs, "A:2", Policy::kFifo, 10);
  EXPECT_DOUBLE_EQ(r.jobs[0].finish_s, 110);
  EXPECT_DOUBLE_EQ(r.jobs[1].finish_s, 220);
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (110 + 210) / 2.0);
  EXPECT_DOUBLE_EQ(r.makespan_s, 220);
}

TEST(Simulator, ElasticRunsTheShorterJobFirstOnEveryGpu) {
  // At t = 10, j1 has 90 steps left, j2 50: j2 weighs more per sample and takes
  // both GPUs (1 s per step): done at 60. j1 resumes at 60 with 90 steps: 150.
  for (Policy p : {Policy::kElasticHomo, Policy::kElasticHetero}) {
    const SimulationResult r = Simulated(kTwoJobs, "A:2", p, 0);
    ASSERT_EQ(r.jobs.size(), 2u);
    EXPECT_DOUBLE_EQ(r.jobs[1].start_s, 10) << PolicyName(p);
    EXPECT_DOUBLE_EQ(r.jobs[1].finish_s, 60) << PolicyName(p);
    EXPECT_DOUBLE_EQ(r.jobs[0].finish_s, 150) << PolicyName(p);
    EXPECT_DOUBLE_EQ(r.avg_jct_s, 100) << PolicyName(p);
    EXPECT_DOUBLE_EQ(r.makespan_s, 150) << PolicyName(p);
    EXPECT_EQ(r.jobs[0].reallocations, 2u);  // paused at 10, resumed at 60
    EXPECT_EQ(r.moves, 2u);                  // both GPUs taken from j1
  }
}

TEST(Simulator, HeterogeneousPlacementUsesTheSlowGpuToo) {
  // V = 3, 1 s per VW step on A and 2 s on B, one GPU of each, 5 s to (re)start.
  // fifo and elastic-homo: 3 VWs on the A: 3 s per step, 305 s. elastic-hetero:
  // 2 VWs on A and 1 on B: 2 s per step, 205 s.
  const std::string csv = "arrival_s,job_id,steps,v,batch_per_vw,gpus,t_A,t_B\n0,j,100,3,1,1,1,2\n";
  EXPECT_DOUBLE_EQ(Simulated(csv, "A:1,B:1", Policy::kFifo, 5).jobs[0].finish_s, 305);
  EXPECT_DOUBLE_EQ(Simulated(csv, "A:1,B:1", Policy::kElasticHomo, 5).jobs[0].finish_s, 305);
  EXPECT_DOUBLE_EQ(Simulated(csv, "A:1,B:1", Policy::kElasticHetero, 5).jobs[0].finish_s, 205);
  // A job that cannot use B runs on A alone, whatever the policy.
  const std::string a_only =
      "arrival_s,job_id,steps,v,batch_per_vw,gpus,t_A,t_B\n0,j,100,3,1,1,1,\n";
  EXPECT_DOUBLE_EQ(Simulated(a_only, "A:1,B:1", Policy::kElasticHetero, 5).jobs[0].finish_s, 305);
}

TEST(Simulator, ElasticHeteroBeatsFifoOnTheExampleTrace) {
  const std::vector<TraceJob> trace = GenerateTrace({});  // examples/traces/small.csv
  ASSERT_EQ(trace.size(), 30u);
  auto cluster = ParseCluster("A100:4,V100:8,T4:8");
  ASSERT_TRUE(cluster.ok());
  std::vector<SimulationResult> results;
  for (Policy p : {Policy::kFifo, Policy::kElasticHomo, Policy::kElasticHetero}) {
    SimulatorOptions o;
    o.policy = p;
    auto r = Simulate(trace, *cluster, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    results.push_back(*r);
  }
  const SimulationResult &fifo = results[0], &homo = results[1], &hetero = results[2];
  EXPECT_LE(hetero.makespan_s, fifo.makespan_s);
  EXPECT_LT(hetero.avg_jct_s, fifo.avg_jct_s);
  EXPECT_LE(hetero.avg_jct_s, homo.avg_jct_s);
  for (const SimulationResult& r : results) {
    for (const JobResult& j : r.jobs) {
      EXPECT_GE(j.start_s, j.arrival_s);
      EXPECT_GT(j.finish_s, j.start_s);
    }
  }
  const std::string table = FormatTable(results);
  EXPECT_NE(table.find("elastic-hetero"), std::string::npos);
  EXPECT_NE(table.find("1.00x"), std::string::npos) << table;  // fifo against itself
  const std::string csv = FormatCsv(results), jobs_csv = FormatJobsCsv(results);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_EQ(std::count(jobs_csv.begin(), jobs_csv.end(), '\n'), 1 + 3 * 30);
  // Deterministic.
  SimulatorOptions o;
  auto again = Simulate(trace, *cluster, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->avg_jct_s, hetero.avg_jct_s);
  EXPECT_EQ(again->makespan_s, hetero.makespan_s);
}

TEST(Simulator, TheExampleTraceIsTheGeneratorsOutput) {
  // Compiled from the source tree (ctest runs in the build's tests folder; a
  // relative __FILE__, as ccache's base_dir makes it, is relative to that folder).
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind("tests/")) + "examples/traces/small.csv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  const TraceGenOptions defaults;
  EXPECT_EQ(text.str(), FormatTrace(GenerateTrace(defaults), DescribeTraceGen(defaults)));
  auto parsed = ParseTrace(text.str());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->size(), 30u);
  EXPECT_EQ(FormatTrace(*parsed, DescribeTraceGen(defaults)), text.str());  // round trip
}

TEST(Simulator, RefusesTracesThatCannotRun) {
  const std::string b_only = "arrival_s,job_id,steps,v,batch_per_vw,gpus,t_B\n0,j,100,3,1,1,1\n";
  auto trace = ParseTrace(b_only);
  ASSERT_TRUE(trace.ok());
  auto r = Simulate(*trace, *ParseCluster("A:4"), {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // fifo: 4 GPUs of one type asked, the largest type has 2.
  trace = ParseTrace("arrival_s,job_id,steps,v,batch_per_vw,gpus,t_A\n0,j,100,8,1,4,1\n");
  ASSERT_TRUE(trace.ok());
  SimulatorOptions fifo;
  fifo.policy = Policy::kFifo;
  EXPECT_FALSE(Simulate(*trace, *ParseCluster("A:2"), fifo).ok());
  EXPECT_TRUE(Simulate(*trace, *ParseCluster("A:2"), {}).ok());  // elastic: runs on 2
}

TEST(TraceParsing, RejectsMalformedLines) {
  const std::string header = "arrival_s,job_id,steps,v,batch_per_vw,gpus,t_A\n";
  EXPECT_TRUE(ParseTrace(header + "0,j,1,1,1,1,1\n").ok());
  EXPECT_FALSE(ParseTrace("").ok());                                             // no header
  EXPECT_FALSE(ParseTrace("arrival_s,job_id,steps,v,batch_per_vw,t_A\n").ok());  // no gpus column
  EXPECT_FALSE(
      ParseTrace("arrival_s,job_id,steps,v,batch_per_vw,gpus,speed\n").ok());  // unknown column
  EXPECT_FALSE(ParseTrace(header + "0,j,1,1,1,1\n").ok());                     // a field short
  EXPECT_FALSE(ParseTrace(header + "x,j,1,1,1,1,1\n").ok());
  EXPECT_FALSE(ParseTrace(header + "0,j,0,1,1,1,1\n").ok());                 // no steps
  EXPECT_FALSE(ParseTrace(header + "0,j,1,0,1,1,1\n").ok());                 // V = 0
  EXPECT_FALSE(ParseTrace(header + "0,j,1,1,1,1,-1\n").ok());                // negative time
  EXPECT_FALSE(ParseTrace(header + "0,j,1,1,1,1,\n").ok());                  // runs nowhere
  EXPECT_FALSE(ParseTrace(header + "0,j,1,1,1,1,1\n5,j,1,1,1,1,1\n").ok());  // duplicate id
  auto bad = ParseTrace(header + "0,j,1,1,1,1,1\n0,k,1,1,1,1,nan\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
}

TEST(ClusterParsing, ReadsTypeCounts) {
  auto c = ParseCluster("A100:4,V100:8");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->types.size(), 2u);
  EXPECT_EQ(c->types[1].first, "V100");
  EXPECT_EQ(c->types[1].second, 8u);
  EXPECT_EQ(FormatCluster(*c), "A100:4,V100:8");
  for (const char* bad : {"", "A100", "A100:0", ":3", "A100:4,A100:2", "A100:x"}) {
    EXPECT_FALSE(ParseCluster(bad).ok()) << bad;
  }
  EXPECT_EQ(ParsePolicy("elastic-homo").value(), Policy::kElasticHomo);
  EXPECT_FALSE(ParsePolicy("lifo").ok());
}

}  // namespace
}  // namespace eps
