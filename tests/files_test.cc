// The small file helpers (common/files.h): whole-file writes and reads, and
// TempFolder, a folder removed with everything in it when it goes.
#include "common/files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace eps {
namespace {

namespace fs = std::filesystem;

TEST(TempFolder, IsRemovedWithEverythingInItWhenItGoes) {
  std::string path;
  {
    auto folder = TempFolder::Create(fs::temp_directory_path().string(), "files-test");
    ASSERT_TRUE(folder.ok()) << folder.status().ToString();
    path = folder->path();
    ASSERT_TRUE(fs::is_directory(path));
    fs::create_directories(path + "/a/b");
    ASSERT_TRUE(WriteFileAtomically(path + "/a/b/c.txt", "rows\n").ok());
    auto back = ReadFileToString(path + "/a/b/c.txt");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, "rows\n");
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempFolder, AMovedFolderIsRemovedOnceByItsNewOwner) {
  auto made = TempFolder::Create(fs::temp_directory_path().string(), "files-test");
  ASSERT_TRUE(made.ok());
  const std::string path = made->path();
  {
    TempFolder moved(std::move(made).value());
    EXPECT_EQ(moved.path(), path);
    EXPECT_TRUE(fs::is_directory(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempFolder, ABaseThatIsNoFolderIsAnInternalErrorNamingIt) {
  auto folder = TempFolder::Create("/nonexistent-eps-base", "files-test");
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), StatusCode::kInternal);
  EXPECT_NE(folder.status().message().find("/nonexistent-eps-base"), std::string::npos);
}

// A streamed file (the exports' model and table files): nothing at `path` until Commit, a
// header rewritten in place, and no temporary file left by a writer dropped midway.
TEST(FileWriter, IsSeenWholeOnCommitWithAHeaderWrittenInPlace) {
  auto folder = TempFolder::Create(fs::temp_directory_path().string(), "files-test");
  ASSERT_TRUE(folder.ok());
  const std::string path = folder->path() + "/streamed";
  {
    auto w = FileWriter::Create(path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE(w->Append("????|", 5).ok());
    ASSERT_TRUE(w->Append("body", 4).ok());
    EXPECT_FALSE(fs::exists(path));
    ASSERT_TRUE(w->WriteAt(0, "HEAD", 4).ok());
    EXPECT_EQ(w->WriteAt(7, "xyz", 3).code(), StatusCode::kInvalidArgument);  // past the end
    ASSERT_TRUE(w->Append("!", 1).ok());
    EXPECT_EQ(w->size(), 10u);
    ASSERT_TRUE(w->Commit().ok());
    EXPECT_EQ(w->Append("late", 4).code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(*ReadFileToString(path), "HEAD|body!");
  {
    auto dropped = FileWriter::Create(folder->path() + "/dropped");
    ASSERT_TRUE(dropped.ok());
    ASSERT_TRUE(dropped->Append("half", 4).ok());
  }
  EXPECT_FALSE(fs::exists(folder->path() + "/dropped"));
  EXPECT_FALSE(fs::exists(folder->path() + "/dropped.tmp"));
  EXPECT_EQ(FileWriter::Create("/nonexistent-eps-base/f").status().code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace eps
