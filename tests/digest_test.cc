#include "common/digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace eps {
namespace {

TEST(Sha256, GivesTheStandardDigestOfAbc) {
  Sha256 h;
  h.Update("abc", 3);
  EXPECT_EQ(h.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

std::vector<std::string> Items(int n) {
  std::vector<std::string> items;
  for (int i = 0; i < n; ++i) items.push_back("item " + std::to_string(i * 7919));
  return items;
}

TEST(SetDigest, IsTheSameForEveryOrderAndEverySplitBetweenParties) {
  const std::vector<std::string> items = Items(50);
  SetDigest whole;
  for (const std::string& s : items) whole.AddItem({s});
  std::mt19937 rng(3);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::string> shuffled = items;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const int parties = 1 + round;
    std::vector<SetDigest> parts(parties);
    for (size_t i = 0; i < shuffled.size(); ++i) parts[rng() % parties].AddItem({shuffled[i]});
    SetDigest merged;
    for (const SetDigest& p : parts) {
      auto sent = SetDigest::FromBytes(p.Bytes());  // as a shard's reply carries it
      ASSERT_TRUE(sent.ok());
      merged.Merge(*sent);
    }
    EXPECT_EQ(merged.HexDigest(), whole.HexDigest()) << parties << " parties";
  }
}

TEST(SetDigest, ChangesWithAnyItemAndWithAnItemTwice) {
  const std::vector<std::string> items = Items(20);
  SetDigest base;
  for (const std::string& s : items) base.AddItem({s});
  SetDigest changed;
  for (size_t i = 0; i < items.size(); ++i) changed.AddItem({i == 7 ? items[i] + "x" : items[i]});
  EXPECT_NE(changed.HexDigest(), base.HexDigest());
  SetDigest twice = base;
  twice.AddItem({items[3]});
  EXPECT_NE(twice.HexDigest(), base.HexDigest());
  SetDigest missing;
  for (size_t i = 1; i < items.size(); ++i) missing.AddItem({items[i]});
  EXPECT_NE(missing.HexDigest(), base.HexDigest());
  // An item's parts are its bytes in order: ("ab", "c") is the item "abc".
  SetDigest a, b;
  a.AddItem({"ab", "c"});
  b.AddItem({"abc"});
  EXPECT_EQ(a.HexDigest(), b.HexDigest());
}

TEST(SetDigest, AddsWithCarriesModuloTwoToThe256) {
  // 0xff..ff + 1 wraps to 0.
  auto all_ones = SetDigest::FromBytes(std::string(32, '\xff'));
  auto one = SetDigest::FromBytes(std::string(31, '\0') + std::string(1, '\1'));
  ASSERT_TRUE(all_ones.ok() && one.ok());
  all_ones->Merge(*one);
  EXPECT_EQ(all_ones->Bytes(), std::string(32, '\0'));
  EXPECT_EQ(SetDigest::FromBytes("short").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
