// CPU kernel sets: which math kernels a CPU computation runs, fixed by the
// job so that its bits do not depend on the host's CPU generation or on its
// environment.
//
// OpenBLAS (matrix products), ATen (libtorch's vectorized operators), oneDNN
// (convolutions) and, in a libtorch built with it, MKL each pick their kernels
// by the CPU they find, and the kernels of two CPU generations sum in
// different orders: the same job gave four digests on one AVX-512 host, one
// per OpenBLAS core. Each library lets an environment variable choose instead
// (OPENBLAS_CORETYPE, read when the library loads; ATEN_CPU_CAPABILITY,
// ONEDNN_MAX_CPU_ISA and MKL_CBWR, read at first use). A kernel set names one value of each, and a program that computes sets
// them and executes itself again before anything loaded (ApplyCpuKernels).
//
// The sets are named after the x86-64 micro-architecture levels: x86-64-v3
// (AVX2 and FMA: every x86-64 server since Haswell, 2013; the default),
// x86-64-v4 (AVX-512) and x86-64-v2 (SSE4.2). `native` sets nothing: each host
// runs what its CPU and environment choose, and a job on it takes only workers
// that report the same kernels as its first.
//
// Thread-safe: the functions that read or write the environment are for
// main(), before the program starts threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eps {

inline constexpr char kDefaultCpuKernels[] = "x86-64-v3";
inline constexpr char kNativeCpuKernels[] = "native";
// Set by ApplyCpuKernels in the environment of the program it executes again:
// the set that environment selects.
inline constexpr char kCpuKernelsEnv[] = "EPS_CPU_KERNELS";
// How the coordinator's refusal of a worker whose kernels are not the job's
// begins (a FailedPrecondition): the worker's host cannot run the job.
inline constexpr char kCpuKernelsMismatch[] = "cpu kernels mismatch: ";

// One named set: the value each library is given.
struct CpuKernelSet {
  std::string name;             // "x86-64-v3"
  std::string openblas_core;    // OPENBLAS_CORETYPE, e.g. "Haswell" (empty: native)
  std::string aten_capability;  // ATEN_CPU_CAPABILITY, e.g. "avx2"
  std::string onednn_isa;       // ONEDNN_MAX_CPU_ISA, e.g. "AVX2"
  std::string mkl_cbwr;         // MKL_CBWR (MKL's reproducible code path), e.g. "AVX2"
  // The CPU features the kernels need (__builtin_cpu_supports names).
  std::vector<std::string> cpu_features;

  bool native() const { return openblas_core.empty(); }
};

// The set of that name; InvalidArgument (listing the names) for another.
[[nodiscard]] StatusOr<CpuKernelSet> FindCpuKernelSet(const std::string& name);

// The names FindCpuKernelSet knows, comma-separated (for flag help and errors).
std::string CpuKernelSetNames();

// The kernels in effect in this process, as each library reports them; a
// field is "?" when its library is not loaded or cannot tell (a libtorch with
// oneDNN linked in statically).
struct CpuKernelsInEffect {
  std::string openblas;  // openblas_get_corename(): "Haswell", "Cooperlake", ...
  std::string aten;      // "default", "avx2" or "avx512"
  std::string onednn;    // the effective ISA: "avx2", "avx512_core", ...

  // "openblas Haswell, aten avx2, onednn avx2".
  std::string Describe() const;
};

// OpenBLAS's and oneDNN's fields, found in the loaded libraries by name
// (no link to either); `aten` is left "?" (the libtorch adapter fills it in).
CpuKernelsInEffect ReadBlasAndDnnKernels();

// What a worker reports for `set` given what is in effect: the set's name when
// every readable field is the set's (`native`: "native: " + Describe()), else
// a sentence saying what runs instead and why.
std::string CpuKernelsReport(const CpuKernelSet& set, const CpuKernelsInEffect& in_effect,
                             const std::string& why_not_applied = "");

// The first of the set's CPU features this CPU lacks (empty: none; a
// non-x86-64 host lacks them all).
std::string MissingCpuFeature(const CpuKernelSet& set);

// For main(), before anything computes. Makes this process run `set`: when the
// environment does not select it yet, sets OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY,
// ONEDNN_MAX_CPU_ISA, MKL_CBWR and EPS_CPU_KERNELS and executes /proc/self/exe again
// with `argv` (it does not return then). Returns OK when the environment
// already selects it; `native` changes nothing. FailedPrecondition, with
// nothing changed, when this CPU cannot run the set (the process then runs
// its native kernels and says so when it reports); Internal if exec failed.
[[nodiscard]] Status ApplyCpuKernels(const CpuKernelSet& set,
                                     const std::vector<std::string>& argv);

// The variables that select `set` and their values, in a fixed order (none
// for `native`): what ApplyCpuKernels sets, and what another program (a
// Python process reproducing a job's numbers) needs.
std::vector<std::pair<std::string, std::string>> CpuKernelEnvironment(const CpuKernelSet& set);

// The set the environment says an earlier ApplyCpuKernels selected (empty:
// none).
std::string CpuKernelsFromEnvironment();

}  // namespace eps
