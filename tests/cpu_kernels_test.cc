#include "common/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace eps {
namespace {

TEST(CpuKernels, NamedSetsAreFoundAndOthersRefusedWithTheNames) {
  auto v3 = FindCpuKernelSet("x86-64-v3");
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  EXPECT_EQ(v3->openblas_core, "Haswell");
  EXPECT_EQ(v3->aten_capability, "avx2");
  EXPECT_EQ(v3->onednn_isa, "AVX2");
  EXPECT_EQ(v3->mkl_cbwr, "AVX2");
  EXPECT_FALSE(v3->native());
  EXPECT_TRUE(FindCpuKernelSet(kDefaultCpuKernels).ok());
  auto native = FindCpuKernelSet("native");
  ASSERT_TRUE(native.ok());
  EXPECT_TRUE(native->native());
  auto bad = FindCpuKernelSet("haswell");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("x86-64-v4"), std::string::npos) << bad.status().message();
}

TEST(CpuKernels, ReportNamesTheSetWhenEveryReadableLibraryRunsIt) {
  const CpuKernelSet v3 = *FindCpuKernelSet("x86-64-v3");
  EXPECT_EQ(CpuKernelsReport(v3, {"Haswell", "avx2", "avx2"}), "x86-64-v3");
  // A library that cannot tell (oneDNN linked in statically) does not make it another set.
  EXPECT_EQ(CpuKernelsReport(v3, {"Haswell", "avx2", "?"}), "x86-64-v3");
}

TEST(CpuKernels, ReportSaysWhatRunsInsteadOfTheSet) {
  const CpuKernelSet v3 = *FindCpuKernelSet("x86-64-v3");
  const std::string r = CpuKernelsReport(v3, {"Nehalem", "avx2", "avx2"});
  EXPECT_NE(r, "x86-64-v3");
  EXPECT_NE(r.find("openblas Nehalem instead of Haswell"), std::string::npos) << r;
  const std::string not_applied = CpuKernelsReport(v3, {"Haswell", "avx2", "avx2"}, "it lacks avx2");
  EXPECT_NE(not_applied, "x86-64-v3");
  EXPECT_NE(not_applied.find("it lacks avx2"), std::string::npos) << not_applied;
}

TEST(CpuKernels, NativeReportsDescribeTheHostSoThatTwoHostsCanBeCompared) {
  const CpuKernelSet native = *FindCpuKernelSet("native");
  const std::string a = CpuKernelsReport(native, {"Cooperlake", "avx2", "avx512_core_bf16"});
  const std::string b = CpuKernelsReport(native, {"Haswell", "avx2", "avx2"});
  EXPECT_EQ(a, "native: openblas Cooperlake, aten avx2, onednn avx512_core_bf16");
  EXPECT_NE(a, b);
}

TEST(CpuKernels, AnEnvironmentThatSelectsTheSetNeedsNoNewExecution) {
  const CpuKernelSet v3 = *FindCpuKernelSet("x86-64-v3");
  if (!MissingCpuFeature(v3).empty()) GTEST_SKIP() << "this CPU cannot run x86-64-v3";
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  setenv("ATEN_CPU_CAPABILITY", "avx2", 1);
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  setenv("MKL_CBWR", "AVX2", 1);
  setenv(kCpuKernelsEnv, "x86-64-v3", 1);
  // An argv that could not execute: reaching exec would fail the call.
  EXPECT_TRUE(ApplyCpuKernels(v3, {"/nonexistent"}).ok());
  EXPECT_EQ(CpuKernelsFromEnvironment(), "x86-64-v3");
  unsetenv(kCpuKernelsEnv);
}

TEST(CpuKernels, NativeLeavesAnEnvironmentNoSetChoseAlone) {
  unsetenv(kCpuKernelsEnv);
  setenv("OPENBLAS_CORETYPE", "Sandybridge", 1);
  EXPECT_TRUE(ApplyCpuKernels(*FindCpuKernelSet("native"), {"/nonexistent"}).ok());
  EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), "Sandybridge");
  unsetenv("OPENBLAS_CORETYPE");
}

TEST(CpuKernels, ASetThisCpuCannotRunIsRefusedWithItsMissingFeature) {
  CpuKernelSet impossible = *FindCpuKernelSet("x86-64-v3");
  impossible.cpu_features = {"no-such-feature"};
  EXPECT_EQ(MissingCpuFeature(impossible), "no-such-feature");
  Status st = ApplyCpuKernels(impossible, {"/nonexistent"});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("no-such-feature"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace eps
