#include "common/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

namespace eps {
namespace {

std::unique_ptr<MetricsServer> StartOrDie(const Metrics* metrics, int port = 0) {
  auto server = MetricsServer::Start({"127.0.0.1", port}, metrics);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

httplib::Client ClientOf(const MetricsServer& server) {
  httplib::Client client("127.0.0.1", server.port());
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  return client;
}

TEST(MetricsServer, ServesTheRenderedRegistryAtMetrics) {
  Metrics metrics;
  Counter& c = metrics.GetCounter("eps_test_total", "Test.", {{"shard", "0"}});
  c.Add(7);
  auto server = StartOrDie(&metrics);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));
  httplib::Client client = ClientOf(*server);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, metrics.Render());
  // Every scrape renders anew.
  c.Add(1);
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("eps_test_total{shard=\"0\"} 8\n"), std::string::npos) << res->body;
}

TEST(MetricsServer, AnswersOtherPathsAndMethodsWithAnError) {
  Metrics metrics;
  auto server = StartOrDie(&metrics);
  ASSERT_NE(server, nullptr);
  httplib::Client client = ClientOf(*server);
  auto res = client.Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/metrics/x");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_NE(res->status, 200);
}

TEST(MetricsServer, ASecondServerOnTheSamePortIsUnavailable) {
  Metrics metrics;
  auto first = StartOrDie(&metrics);
  ASSERT_NE(first, nullptr);
  auto second = MetricsServer::Start({"127.0.0.1", first->port()}, &metrics);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  // The first one serves on.
  httplib::Client client = ClientOf(*first);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsServer, RefusesBadOptions) {
  Metrics metrics;
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", 70000}, &metrics).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"127.0.0.1", 0}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({"192.0.2.1", 0}, &metrics).status().code(),
            StatusCode::kUnavailable);
}

TEST(MetricsServer, AnyInterfaceIsGivenAsTheHostName) {
  Metrics metrics;
  auto server = MetricsServer::Start({"0.0.0.0", 0}, &metrics);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ((*server)->address(), std::string(host) + ":" + std::to_string((*server)->port()));
}

TEST(MetricsServer, DestructorReturnsPromptlyAlsoRightAfterStartAndAfterAScrape) {
  Metrics metrics;
  for (int i = 0; i < 20; ++i) {  // the serving thread may not have started yet
    const auto start = std::chrono::steady_clock::now();
    StartOrDie(&metrics).reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  }
  auto server = StartOrDie(&metrics);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  {
    httplib::Client client = ClientOf(*server);
    ASSERT_TRUE(client.Get("/metrics"));
  }
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // The port is free again.
  auto again = MetricsServer::Start({"127.0.0.1", port}, &metrics);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

// Prometheus' own parser and linter accepts what Render writes, with every
// kind of series, escaped label values, special values and a removed series.
TEST(MetricsServer, PromtoolAcceptsAScrape) {
#ifndef EPS_PROMTOOL
  GTEST_SKIP() << "promtool was not found when this was configured (Debian's prometheus)";
#else
  Metrics metrics;
  metrics.GetCounter("eps_pushes_total", "Pushes.", {{"result", "accepted"}, {"shard", "0"}})
      .Add(12);
  metrics.GetCounter("eps_pushes_total", "Pushes.", {{"result", "refused"}, {"shard", "0"}});
  metrics.GetCounter("eps_bytes_total", "Bytes \"in\" \\ out\nover lines.").Add(1e15 + 0.5);
  metrics.GetGauge("eps_version", "Version.", {{"host", "a \"b\" \\c\nd"}}).Set(-1);
  metrics.GetGauge("eps_ratio", "Ratio.", {{"k", "nan"}}).Set(std::nan(""));
  metrics.GetGauge("eps_ratio", "Ratio.", {{"k", "inf"}})
      .Set(std::numeric_limits<double>::infinity());
  metrics.GetGauge("eps_ratio", "Ratio.", {{"k", "tiny"}}).Set(1.5e-300);
  metrics.GetGauge("eps_gone", "Gone.", {{"worker", "w1"}}).Set(1);
  metrics.Remove("eps_gone", {{"worker", "w1"}});
  Histogram& h = metrics.GetHistogram("eps_step_seconds", "Steps.",
                                      ExponentialBuckets(0.001, 2, 12), {{"shard", "0"}});
  for (double v : {0.0005, 0.003, 0.2, 100.0}) h.Observe(v);
  metrics.GetHistogram("eps_empty_seconds", "Nothing yet.", {1});
  auto server = StartOrDie(&metrics);
  ASSERT_NE(server, nullptr);
  httplib::Client client = ClientOf(*server);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  char tmpl[] = "/tmp/eps-promtool-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/scrape.txt";
  std::ofstream(path) << res->body;
  const std::string command =
      std::string(EPS_PROMTOOL) + " check metrics < " + path + " > " + dir + "/out.txt 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream out(dir + "/out.txt");
  const std::string said((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
      << "promtool check metrics: " << said << "\non:\n"
      << res->body;
  std::filesystem::remove_all(dir);
#endif
}

}  // namespace
}  // namespace eps
