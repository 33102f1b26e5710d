#include "common/jsonl.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace eps {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class JsonLines : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/eps-jsonl-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/events.jsonl";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(JsonLines, AppendsOneObjectPerLineAndAReopenAppendsAfterThem) {
  {
    auto f = JsonLinesFile::Open(path_);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(R"({"event":"a"})").ok());
    ASSERT_TRUE((*f)->Append(R"({"event":"b"})").ok());
  }
  auto f = JsonLinesFile::Open(path_);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(R"({"event":"c"})").ok());
  EXPECT_EQ(Read(path_), "{\"event\":\"a\"}\n{\"event\":\"b\"}\n{\"event\":\"c\"}\n");
}

TEST_F(JsonLines, ATornLastLineIsEndedSoTheNextLineIsWhole) {
  std::ofstream(path_) << "{\"event\":\"a\"}\n{\"event\":\"b";  // its writer was killed mid-line
  auto f = JsonLinesFile::Open(path_);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(R"({"event":"c"})").ok());
  EXPECT_EQ(Read(path_), "{\"event\":\"a\"}\n{\"event\":\"b\n{\"event\":\"c\"}\n");
}

TEST_F(JsonLines, AFolderThatIsNotThereIsUnavailable) {
  EXPECT_EQ(JsonLinesFile::Open(dir_ + "/missing/events.jsonl").status().code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace eps
