#include "tools/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace eps {
namespace {

using Args = std::vector<std::string>;

TEST(FlagWithUnderscores, DashesInTheNameOnlyBecomeUnderscores) {
  EXPECT_EQ(FlagWithUnderscores("--run-dir=a-b/c-d"), "--run_dir=a-b/c-d");
  EXPECT_EQ(FlagWithUnderscores("--train-limit"), "--train_limit");
  EXPECT_EQ(FlagWithUnderscores("runs/my-job"), "runs/my-job");
  EXPECT_EQ(FlagWithUnderscores("-x"), "-x");
}

TEST(ParseTrainArgs, SplitsLauncherOptionsFromJobFlagsAndDefaultsServersAndWorkers) {
  auto t = ParseTrainArgs({"--job", "examples/mlp.flags", "--workers=3", "--metrics", "--steps=50",
                           "--checkpoint-every", "10", "--train-limit=640"},
                          "--job_id=mlp_demo\n--model=mlp\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->job_file, "examples/mlp.flags");
  EXPECT_EQ(t->run_dir, "runs/mlp_demo");  // the job file's id
  EXPECT_EQ(t->launcher_args,
            (Args{"--job", "examples/mlp.flags", "--run-dir", "runs/mlp_demo", "--servers", "1",
                  "--workers", "3", "--metrics", "--checkpoint-every", "10"}));
  EXPECT_EQ(t->job_flags, (Args{"--steps=50", "--train_limit=640"}));
}

TEST(ParseTrainArgs, WithoutAJobFileTheFlagsMakeTheJobInTheRunDir) {
  auto t = ParseTrainArgs({"--model=nets/my_model.pt", "--job-id=mine", "--run_dir=/tmp/r",
                           "--servers", "2"},
                          "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->job_file.empty());
  EXPECT_EQ(t->run_dir, "/tmp/r");
  EXPECT_EQ(t->launcher_args, (Args{"--job", "/tmp/r/job.flags", "--run-dir", "/tmp/r", "--servers",
                                    "2", "--workers", "2"}));
  EXPECT_EQ(t->job_flags, (Args{"--model=nets/my_model.pt", "--job_id=mine"}));
  auto defaulted = ParseTrainArgs({"--model=cnn", "--job_id=fm"}, "");
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ(defaulted->run_dir, "runs/fm");
}

TEST(ParseTrainArgs, BadArgumentsAreNamed) {
  auto no_job = ParseTrainArgs({"--steps=5"}, "");
  EXPECT_EQ(no_job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_job.status().message().find("--model"), std::string::npos);
  auto positional = ParseTrainArgs({"--model=mlp", "extra.flags"}, "");
  EXPECT_EQ(positional.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(positional.status().message().find("extra.flags"), std::string::npos);
  auto missing = ParseTrainArgs({"--model=mlp", "--workers"}, "");
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("--workers"), std::string::npos);
  auto flagfile = ParseTrainArgs({"--flagfile=x.flags"}, "");
  EXPECT_EQ(flagfile.status().code(), StatusCode::kInvalidArgument);
}

TEST(FindJobFileArg, FindsBothSpellings) {
  EXPECT_EQ(FindJobFileArg({"--workers", "2", "--job", "a.flags"}), "a.flags");
  EXPECT_EQ(FindJobFileArg({"--job=b.flags"}), "b.flags");
  EXPECT_EQ(FindJobFileArg({"--model=mlp"}), "");
}

}  // namespace
}  // namespace eps
