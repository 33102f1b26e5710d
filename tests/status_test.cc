// Tests for Status and StatusOr (common/status.h): every code has its name and
// helper, and a StatusOr used wrongly (the value of an error, an error made
// from OK) aborts in every build, not only where assert is compiled in.
#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace eps {
namespace {

TEST(Status, EveryCodeHasItsOwnName) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(kLastStatusCode); ++c) {
    const std::string name = StatusCodeName(static_cast<StatusCode>(c));
    EXPECT_NE(name, "UNKNOWN") << "code " << c;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
  }
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(static_cast<int>(kLastStatusCode) + 1)),
               "UNKNOWN");
}

TEST(Status, NewCodesKeepTheNumbersBeforeThemAndComeLast) {
  // The numbers travel in ErrorReply and RollbackDone: they never change.
  EXPECT_EQ(static_cast<int>(StatusCode::kDataLoss), 10);
  EXPECT_EQ(static_cast<int>(StatusCode::kInternal), 11);
  EXPECT_EQ(static_cast<int>(StatusCode::kProtocolError), 12);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnimplemented), 13);
  EXPECT_EQ(static_cast<int>(StatusCode::kPermissionDenied), 14);
  EXPECT_EQ(kLastStatusCode, StatusCode::kPermissionDenied);
}

TEST(Status, HelpersGiveTheirCodesAndToStringNamesThem) {
  EXPECT_EQ(ProtocolError("a chunk names a missing frame").code(), StatusCode::kProtocolError);
  EXPECT_EQ(Unimplemented("cannot map the region").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(PermissionDenied("key refused").ToString(), "PERMISSION_DENIED: key refused");
  EXPECT_EQ(ProtocolError("bad").ToString(), "PROTOCOL_ERROR: bad");
  EXPECT_EQ(Unimplemented("no shm").ToString(), "UNIMPLEMENTED: no shm");
  EXPECT_EQ(Unimplemented("no shm").WithContext("shard 2").ToString(),
            "UNIMPLEMENTED: shard 2: no shm");
  EXPECT_EQ(OkStatus().ToString(), "OK");
}

TEST(StatusOr, HoldsAValueOrAnError) {
  StatusOr<std::unique_ptr<int>> value(std::make_unique<int>(7));
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(**value, 7);
  std::unique_ptr<int> moved = std::move(value).value();
  EXPECT_EQ(*moved, 7);

  StatusOr<int> error(ProtocolError("garbage"));
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), StatusCode::kProtocolError);
}

TEST(StatusOrDeathTest, TheValueOfAnErrorAbortsAndSaysWhy) {
  StatusOr<std::string> error(NotFound("no such chunk"));
  EXPECT_DEATH((void)error.value(), "value\\(\\) of an error: NOT_FOUND: no such chunk");
  EXPECT_DEATH((void)error->size(), "NOT_FOUND: no such chunk");
  EXPECT_DEATH((void)*error, "NOT_FOUND: no such chunk");
  const StatusOr<std::string>& const_error = error;
  EXPECT_DEATH((void)const_error.value(), "NOT_FOUND");
  EXPECT_DEATH((void)std::move(error).value(), "NOT_FOUND");
}

TEST(StatusOrDeathTest, AnErrorMadeFromOkAborts) {
  EXPECT_DEATH(StatusOr<int>{OkStatus()}, "StatusOr made from an OK status");
}

}  // namespace
}  // namespace eps
