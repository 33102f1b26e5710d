// Tests for CPU lists and thread pinning (common/cpus.h) and for the helper
// threads' CPUs that StartThreadWithoutStopSignals applies (common/threads.h).
#include "common/cpus.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "common/threads.h"

namespace eps {
namespace {

TEST(CpuList, ParsesNumbersAndRangesSortedWithoutDuplicates) {
  struct Case {
    const char* list;
    std::vector<int> cpus;
  };
  for (const Case& c : {Case{"0", {0}}, Case{"0-3", {0, 1, 2, 3}}, Case{"6,0-2", {0, 1, 2, 6}},
                        Case{"1,1,0-1", {0, 1}}, Case{"5-5", {5}}, Case{"12,3", {3, 12}}}) {
    StatusOr<std::vector<int>> got = ParseCpuList(c.list);
    ASSERT_TRUE(got.ok()) << c.list << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.cpus) << c.list;
  }
}

TEST(CpuList, RefusesMalformedListsClearly) {
  for (const char* bad :
       {"", ",", "0,", ",1", "a", "-1", "1-", "3-1", "0-1-2", "1 ", " 1", "0x1", "99999999"}) {
    StatusOr<std::vector<int>> got = ParseCpuList(bad);
    ASSERT_FALSE(got.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseCpuList("3-1").status().message().find("reversed range"), std::string::npos);
  EXPECT_NE(ParseCpuList("100000").status().message().find("beyond"), std::string::npos);
}

TEST(CpuList, FormatsAsTheListItParses) {
  for (const std::vector<int>& cpus :
       {std::vector<int>{0}, {0, 1, 2, 3}, {0, 2, 4}, {1, 2, 5, 6, 7, 9}, {3, 12}}) {
    const std::string list = FormatCpuList(cpus);
    StatusOr<std::vector<int>> back = ParseCpuList(list);
    ASSERT_TRUE(back.ok()) << list;
    EXPECT_EQ(*back, cpus) << list;
  }
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 6}), "0-3,6");
}

TEST(Pinning, AThreadPinnedToOneCpuMayRunOnlyThere) {
  StatusOr<std::vector<int>> allowed = AllowedCpus();
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  ASSERT_FALSE(allowed->empty());
  const int last = allowed->back();
  std::thread t([&] {  // pins itself, leaving the test's main thread as it was
    ASSERT_TRUE(PinThisThread({last}).ok());
    StatusOr<std::vector<int>> now = AllowedCpus();
    ASSERT_TRUE(now.ok());
    EXPECT_EQ(*now, std::vector<int>{last});
  });
  t.join();
  EXPECT_EQ(*AllowedCpus(), *allowed) << "the main thread kept its CPUs";
  EXPECT_EQ(PinThisThread({}).code(), StatusCode::kInvalidArgument);
}

TEST(Pinning, HelperThreadsStartOnTheHelperCpus) {
  StatusOr<std::vector<int>> allowed = AllowedCpus();
  ASSERT_TRUE(allowed.ok());
  const std::vector<int> helpers = {allowed->front()};
  auto cpus_of_a_helper = [] {
    std::vector<int> seen;
    StatusOr<std::thread> t =
        StartThreadWithoutStopSignals([&seen] { seen = AllowedCpus().value(); });
    EXPECT_TRUE(t.ok());
    t->join();
    return seen;
  };
  SetHelperThreadCpus(helpers);
  EXPECT_EQ(cpus_of_a_helper(), helpers);
  SetHelperThreadCpus({});
  EXPECT_EQ(cpus_of_a_helper(), *allowed) << "unset: a helper inherits its creator's CPUs";
}

}  // namespace
}  // namespace eps
