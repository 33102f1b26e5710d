#include "storage/spill_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/small_disk.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using Records = std::vector<std::pair<uint64_t, std::string>>;
using Read = std::vector<std::optional<std::string>>;

Read ReadOf(const SpillFile& f, const std::vector<uint64_t>& ids) {
  Read out;
  f.Read(ids, &out);
  return out;
}

std::string Record(uint64_t id, size_t bytes) {
  std::string r(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) r[i] = static_cast<char>((id * 131 + i) & 0xff);
  return r;
}

TEST(SpillFile, WritesReadsRewritesAndErasesRowsOfAnyLength) {
  TempDir dir;
  SpillFile f(dir.path());
  ASSERT_TRUE(f.Write({{1, "one"}, {2, "two"}, {3, ""}}, {}).ok());
  EXPECT_EQ(ReadOf(f, {1, 2, 3, 4}), (Read{"one", "two", "", std::nullopt}));
  // The same length in place, another length elsewhere; deletes come before puts.
  ASSERT_TRUE(f.Write({{1, "ONE"}, {2, "longer two"}, {5, "five"}}, {5, 3}).ok());
  EXPECT_EQ(ReadOf(f, {1, 2, 3, 5}), (Read{"ONE", "longer two", std::nullopt, "five"}));
  EXPECT_EQ(f.size(), 3u);
  f.Erase({1, 99});
  EXPECT_EQ(ReadOf(f, {1, 2}), (Read{std::nullopt, "longer two"}));
  f.Clear();
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(ReadOf(f, {2, 5}), (Read{std::nullopt, std::nullopt}));
}

TEST(SpillFile, RowsSurviveTheFilesGrowthAndFreedSlotsAreWrittenAgain) {
  TempDir dir;
  SpillFile f(dir.path());
  constexpr size_t kBytes = 424;  // a row of 32 floats with Adam's slots and its header
  Records rows;
  for (uint64_t id = 0; id < 20000; ++id) rows.emplace_back(id * 7, Record(id, kBytes));
  ASSERT_TRUE(f.Write(rows, {}).ok());  // some 8 MiB: the file grew (and moved) several times
  const uint64_t grown = f.file_bytes();
  EXPECT_GE(grown, 20000 * kBytes);
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : rows) ids.push_back(id);
  Read back = ReadOf(f, ids);
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(back[i], rows[i].second) << i;
  // Half of them leave, as many others come: into the freed slots, the files as they were.
  std::vector<uint64_t> gone(ids.begin(), ids.begin() + 10000);
  Records others;
  for (uint64_t id = 0; id < 10000; ++id) others.emplace_back(id * 7 + 1, Record(id + 5, kBytes));
  ASSERT_TRUE(f.Write(others, gone).ok());
  EXPECT_EQ(f.file_bytes(), grown);
  EXPECT_EQ(f.size(), 20000u);
  EXPECT_EQ(ReadOf(f, {0, 1, 7 * 10000})[0], std::nullopt);
  EXPECT_EQ(ReadOf(f, {1})[0], others[0].second);
  EXPECT_EQ(ReadOf(f, {7 * 10000})[0], rows[10000].second);
}

TEST(SpillFile, LeavesNothingInItsDirectory) {
  TempDir dir;
  {
    SpillFile f(dir.path());
    ASSERT_TRUE(f.Write({{1, Record(1, 424)}, {2, "x"}}, {}).ok());
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // unlinked while open
    EXPECT_EQ(ReadOf(f, {1})[0], Record(1, 424));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SpillFile, AMissingDirectoryIsAnError) {
  TempDir dir;
  SpillFile f(dir.Sub("none"));
  const Status st = f.Write({{1, "one"}}, {});
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(ReadOf(f, {1})[0], std::nullopt);
}

// A full disk fails the write that needs more space, with ResourceExhausted; the rows written
// before it stay readable, and freed slots take new rows.
TEST(SpillFile, AFullDiskIsResourceExhaustedAndKeepsTheRowsItHas) {
  TempDir dir;
  SmallDisk disk(dir, "3m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << disk.error();
  SpillFile f(disk.path());
  constexpr size_t kBytes = 64 << 10;
  Status st;
  uint64_t written = 0;
  for (; written < 1000 && st.ok(); ++written)
    st = f.Write({{written, Record(written, kBytes)}}, {});
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  const uint64_t kept = written - 1;  // the last write failed
  ASSERT_GT(kept, 0u);
  EXPECT_EQ(f.size(), kept);
  for (uint64_t id = 0; id < kept; ++id) ASSERT_EQ(ReadOf(f, {id})[0], Record(id, kBytes)) << id;
  EXPECT_EQ(ReadOf(f, {kept})[0], std::nullopt);
  f.Erase({0});
  ASSERT_TRUE(f.Write({{kept, Record(kept, kBytes)}}, {}).ok());
  EXPECT_EQ(ReadOf(f, {kept})[0], Record(kept, kBytes));
}

}  // namespace
}  // namespace eps
