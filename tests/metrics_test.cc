#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace eps {
namespace {

// The value of the sample `series` in a rendering ("": none).
std::string ValueOf(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = text.rfind("\n" + prefix);
  if (at == std::string::npos) return "";
  at += 1 + prefix.size();
  return text.substr(at, text.find('\n', at) - at);
}

TEST(Metrics, EmptyRegistryRendersNothing) {
  Metrics metrics;
  EXPECT_EQ(metrics.Render(), "");
}

TEST(Metrics, CounterRendersHelpTypeAndIntegerValue) {
  Metrics metrics;
  Counter& c = metrics.GetCounter("eps_things_total", "Things done.");
  c.Add();
  c.Add(41);
  EXPECT_EQ(c.value(), 42);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_things_total Things done.\n"
            "# TYPE eps_things_total counter\n"
            "eps_things_total 42\n");
}

TEST(Metrics, GetReturnsTheSameSeriesAndKeepsTheFirstHelp) {
  Metrics metrics;
  Counter& a = metrics.GetCounter("eps_x_total", "First.");
  Counter& b = metrics.GetCounter("eps_x_total", "Second.");
  EXPECT_EQ(&a, &b);
  a.Add(2);
  EXPECT_EQ(b.value(), 2);
  EXPECT_NE(metrics.Render().find("# HELP eps_x_total First.\n"), std::string::npos);
}

TEST(Metrics, GaugeGoesBothWaysAndRendersFractionsAndSpecialValues) {
  Metrics metrics;
  Gauge& g = metrics.GetGauge("eps_level", "A level.", {{"k", "a"}});
  g.Set(3);
  g.Add(-3.5);
  EXPECT_EQ(g.value(), -0.5);
  metrics.GetGauge("eps_level", "A level.", {{"k", "b"}}).Set(0.1);
  metrics.GetGauge("eps_level", "A level.", {{"k", "c"}}).Set(std::nan(""));
  metrics.GetGauge("eps_level", "A level.", {{"k", "d"}})
      .Set(std::numeric_limits<double>::infinity());
  metrics.GetGauge("eps_level", "A level.", {{"k", "e"}})
      .Set(-std::numeric_limits<double>::infinity());
  metrics.GetGauge("eps_level", "A level.", {{"k", "f"}}).Set(1e300);
  metrics.GetGauge("eps_level", "A level.", {{"k", "g"}}).Set(1234567890123.0);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_level A level.\n"
            "# TYPE eps_level gauge\n"
            "eps_level{k=\"a\"} -0.5\n"
            "eps_level{k=\"b\"} 0.1\n"
            "eps_level{k=\"c\"} NaN\n"
            "eps_level{k=\"d\"} +Inf\n"
            "eps_level{k=\"e\"} -Inf\n"
            "eps_level{k=\"f\"} 1e+300\n"
            "eps_level{k=\"g\"} 1234567890123\n");
}

TEST(Metrics, HistogramRendersCumulativeBucketsInfSumAndCount) {
  Metrics metrics;
  Histogram& h =
      metrics.GetHistogram("eps_wait_seconds", "Waits.", {0.5, 1, 2.5}, {{"shard", "0"}});
  h.Observe(0.25);
  h.Observe(0.5);  // on a bound: counted in it (le)
  h.Observe(2);
  h.Observe(10);
  EXPECT_EQ(h.cumulative_count(0), 2u);
  EXPECT_EQ(h.cumulative_count(3), 4u);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_wait_seconds Waits.\n"
            "# TYPE eps_wait_seconds histogram\n"
            "eps_wait_seconds_bucket{shard=\"0\",le=\"0.5\"} 2\n"
            "eps_wait_seconds_bucket{shard=\"0\",le=\"1\"} 2\n"
            "eps_wait_seconds_bucket{shard=\"0\",le=\"2.5\"} 3\n"
            "eps_wait_seconds_bucket{shard=\"0\",le=\"+Inf\"} 4\n"
            "eps_wait_seconds_sum{shard=\"0\"} 12.75\n"
            "eps_wait_seconds_count{shard=\"0\"} 4\n");
}

TEST(Metrics, HistogramWithoutLabelsAndNaNGoesToInfOnly) {
  Metrics metrics;
  Histogram& h = metrics.GetHistogram("eps_x_seconds", "X.", {1});
  h.Observe(std::nan(""));
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_x_seconds X.\n"
            "# TYPE eps_x_seconds histogram\n"
            "eps_x_seconds_bucket{le=\"1\"} 0\n"
            "eps_x_seconds_bucket{le=\"+Inf\"} 1\n"
            "eps_x_seconds_sum NaN\n"
            "eps_x_seconds_count 1\n");
}

TEST(Metrics, ExponentialBucketsMultiply) {
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
  EXPECT_EQ(ExponentialBuckets(1, 2, 3), (std::vector<double>{1, 2, 4}));
}

TEST(Metrics, LabelsRenderInNameOrderWithValuesEscaped) {
  Metrics metrics;
  metrics
      .GetCounter("eps_events_total", "Events.",
                  {{"zone", "a\\b"}, {"host", "say \"hi\""}, {"note", "two\nlines"}})
      .Add(1);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_events_total Events.\n"
            "# TYPE eps_events_total counter\n"
            "eps_events_total{host=\"say \\\"hi\\\"\",note=\"two\\nlines\",zone=\"a\\\\b\"} 1\n");
}

TEST(Metrics, HelpEscapesBackslashAndNewlineButNotQuotes) {
  Metrics metrics;
  metrics.GetGauge("eps_g", "A \"quoted\" back\\slash\nand a line.");
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_g A \"quoted\" back\\\\slash\\nand a line.\n"
            "# TYPE eps_g gauge\n"
            "eps_g 0\n");
}

TEST(Metrics, FamiliesRenderInNameOrder) {
  Metrics metrics;
  metrics.GetGauge("eps_b", "B.").Set(2);
  metrics.GetCounter("eps_a_total", "A.").Add(1);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_a_total A.\n"
            "# TYPE eps_a_total counter\n"
            "eps_a_total 1\n"
            "# HELP eps_b B.\n"
            "# TYPE eps_b gauge\n"
            "eps_b 2\n");
}

TEST(Metrics, RemovedSeriesIsNotRenderedButStaysUsableAndComesBack) {
  Metrics metrics;
  Gauge& w1 = metrics.GetGauge("eps_vws", "VWs.", {{"worker", "w1"}});
  Gauge& w2 = metrics.GetGauge("eps_vws", "VWs.", {{"worker", "w2"}});
  w1.Set(4);
  w2.Set(6);
  metrics.Remove("eps_vws", {{"worker", "w1"}});
  metrics.Remove("eps_vws", {{"worker", "w9"}});  // not there: nothing happens
  metrics.Remove("eps_none", {});
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_vws VWs.\n"
            "# TYPE eps_vws gauge\n"
            "eps_vws{worker=\"w2\"} 6\n");
  w1.Set(5);  // the reference stays valid
  metrics.Remove("eps_vws", {{"worker", "w2"}});
  EXPECT_EQ(metrics.Render(), "");  // a family without series has no HELP or TYPE either
  EXPECT_EQ(&metrics.GetGauge("eps_vws", "VWs.", {{"worker", "w1"}}), &w1);
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_vws VWs.\n"
            "# TYPE eps_vws gauge\n"
            "eps_vws{worker=\"w1\"} 5\n");
}

TEST(Metrics, RemoveAllButKeepsOnlyTheListedSeries) {
  Metrics metrics;
  for (const char* w : {"w1", "w2", "w3"}) metrics.GetCounter("eps_n_total", "N.", {{"worker", w}});
  metrics.GetCounter("eps_other_total", "O.", {{"worker", "w1"}});
  metrics.RemoveAllBut("eps_n_total", {{{"worker", "w2"}}});
  EXPECT_EQ(metrics.Render(),
            "# HELP eps_n_total N.\n"
            "# TYPE eps_n_total counter\n"
            "eps_n_total{worker=\"w2\"} 0\n"
            "# HELP eps_other_total O.\n"
            "# TYPE eps_other_total counter\n"
            "eps_other_total{worker=\"w1\"} 0\n");
}

TEST(Metrics, ConcurrentUpdatesWhileRenderingSumExactly) {
  Metrics metrics;
  constexpr int kThreads = 4;
  constexpr int kUpdates = 20000;
  Counter& c = metrics.GetCounter("eps_c_total", "C.");
  Gauge& g = metrics.GetGauge("eps_g", "G.");
  Histogram& h = metrics.GetHistogram("eps_h_seconds", "H.", {0.5, 1.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Series looked up from many threads too, while others update and render.
      Counter& mine = metrics.GetCounter("eps_per_thread_total", "P.",
                                         {{"thread", std::to_string(t)}});
      for (int i = 0; i < kUpdates; ++i) {
        c.Add(2);
        g.Add(1);
        h.Observe(i % 2);  // 0 and 1: half in each of the first two buckets
        mine.Add();
      }
    });
  }
  // Render while they run: every rendering parses as whole lines and its
  // histogram count equals its +Inf bucket.
  for (int i = 0; i < 50; ++i) {
    const std::string text = metrics.Render();
    ASSERT_TRUE(text.empty() || text.back() == '\n');
    const std::string inf = ValueOf(text, "eps_h_seconds_bucket{le=\"+Inf\"}");
    EXPECT_EQ(inf, ValueOf(text, "eps_h_seconds_count"));
    EXPECT_FALSE(inf.empty());
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.value(), 2.0 * kThreads * kUpdates);
  EXPECT_EQ(g.value(), 1.0 * kThreads * kUpdates);
  EXPECT_EQ(h.count(), uint64_t{kThreads} * kUpdates);
  EXPECT_EQ(h.cumulative_count(0), uint64_t{kThreads} * kUpdates / 2);
  EXPECT_EQ(h.sum(), 1.0 * kThreads * kUpdates / 2);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("eps_c_total 160000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("eps_h_seconds_bucket{le=\"0.5\"} 40000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("eps_h_seconds_bucket{le=\"1.5\"} 80000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("eps_h_seconds_count 80000\n"), std::string::npos) << text;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_NE(text.find("eps_per_thread_total{thread=\"" + std::to_string(t) + "\"} 20000\n"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace eps
