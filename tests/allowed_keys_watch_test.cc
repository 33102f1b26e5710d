// Tests for AllowedKeysWatch (schema/allowed_keys_watch.h): a key removed from
// the allowed keys stops being admitted once the reload interval has passed
// (a fake clock, no sleeps), the server's own key and messages without a key
// always are, and an unreadable set keeps the last one read.
#include "schema/allowed_keys_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "schema/curve.h"
#include "tests/temp_dir.h"

namespace eps {
namespace {

using std::chrono::milliseconds;

std::string NewPublicKey() {
  auto keys = GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys->public_key;
}

TEST(AllowedKeysWatch, RemovedKeyIsRefusedAfterTheReloadInterval) {
  TempDir dir;
  const std::string a = NewPublicKey(), b = NewPublicKey(), own = NewPublicKey();
  std::ofstream(dir.path() + "/a.pub") << a << "\n";
  std::ofstream(dir.path() + "/b.pub") << b << "\n";
  FakeClock clock;
  auto watch = AllowedKeysWatch::Open({dir.path(), {own}, milliseconds(1000)}, &clock);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  EXPECT_TRUE(watch->Admits(a));
  EXPECT_TRUE(watch->Admits(b));
  EXPECT_TRUE(watch->Admits(own));
  EXPECT_FALSE(watch->Admits(NewPublicKey()));

  ASSERT_EQ(unlink((dir.path() + "/a.pub").c_str()), 0);
  clock.Advance(milliseconds(999));
  EXPECT_TRUE(watch->Admits(a)) << "re-read before the interval";
  clock.Advance(milliseconds(1));
  EXPECT_FALSE(watch->Admits(a));
  EXPECT_TRUE(watch->Admits(b));
  EXPECT_TRUE(watch->Admits(own));
  EXPECT_EQ(watch->refused(), 2u);

  // Re-admitted when its key comes back.
  std::ofstream(dir.path() + "/a.pub") << a << "\n";
  clock.Advance(milliseconds(1000));
  EXPECT_TRUE(watch->Admits(a));
}

TEST(AllowedKeysWatch, AKeyAddedSinceTheLastReadIsAdmittedAtOnce) {
  TempDir dir;
  const std::string a = NewPublicKey(), added = NewPublicKey();
  std::ofstream(dir.path() + "/a.pub") << a << "\n";
  FakeClock clock;
  auto watch = AllowedKeysWatch::Open({dir.path(), {}, milliseconds(1000)}, &clock);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  std::ofstream(dir.path() + "/added.pub") << added << "\n";
  EXPECT_TRUE(watch->Admits(added)) << "the handshake admitted it: the watch must too";
}

TEST(AllowedKeysWatch, AServerWatchStartsWhileAKeyFileIsHalfWritten) {
  TempDir dir;
  const std::string key = NewPublicKey();
  std::ofstream(dir.path() + "/half.pub") << key.substr(0, 20);
  auto server = GenerateCurveKeyPair();
  ASSERT_TRUE(server.ok());
  CurveOptions curve;
  curve.keys = *server;
  FakeClock clock;
  auto watch = AllowedKeysWatch::ForServer(curve, dir.path(), &clock);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_TRUE(watch->has_value());
  EXPECT_TRUE((*watch)->Admits(server->public_key));
  std::ofstream(dir.path() + "/half.pub") << key << "\n";
  EXPECT_TRUE((*watch)->Admits(key));
  EXPECT_FALSE((*watch)->Admits(NewPublicKey()));
}

TEST(AllowedKeysWatch, MessagesWithoutAUserIdAreAdmitted) {
  TempDir dir;
  std::ofstream(dir.path() + "/a.pub") << NewPublicKey() << "\n";
  FakeClock clock;
  auto watch = AllowedKeysWatch::Open({dir.path(), {}, milliseconds(1000)}, &clock);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  EXPECT_TRUE(watch->Admits(""));
}

TEST(AllowedKeysWatch, UnreadableKeysKeepTheLastSet) {
  TempDir dir;
  const std::string file = dir.path() + "/allowed", a = NewPublicKey();
  std::ofstream(file) << a << "\n";
  FakeClock clock;
  auto watch = AllowedKeysWatch::Open({file, {}, milliseconds(1000)}, &clock);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  std::ofstream(file) << "not a key\n";
  clock.Advance(milliseconds(1000));
  EXPECT_TRUE(watch->Admits(a));
  ASSERT_EQ(unlink(file.c_str()), 0);
  clock.Advance(milliseconds(1000));
  EXPECT_TRUE(watch->Admits(a));
}

TEST(AllowedKeysWatch, OpenFailsOnUnreadableKeys) {
  FakeClock clock;
  auto watch = AllowedKeysWatch::Open({"/nonexistent/eps-keys", {}, milliseconds(1000)}, &clock);
  EXPECT_FALSE(watch.ok());
}

}  // namespace
}  // namespace eps
