#include "common/cpu_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace eps {
namespace {

// The variables a set gives a value, in the order Describe lists the libraries.
constexpr const char* kVariables[] = {"OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY",
                                      "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"};
// Where ApplyCpuKernels keeps a variable's value from before it first set one
// (absent: it was unset), so that `native` can give it back.
std::string SavedName(const char* variable) { return std::string("EPS_NATIVE_") + variable; }

const std::vector<CpuKernelSet>& Sets() {
  static const std::vector<CpuKernelSet> sets = {
      {"x86-64-v2", "Nehalem", "default", "SSE41", "SSE4_2", {"sse4.2", "popcnt"}},
      {"x86-64-v3", "Haswell", "avx2", "AVX2", "AVX2", {"avx2", "fma", "bmi2"}},
      {"x86-64-v4",
       "SkylakeX",
       "avx512",
       "AVX512_CORE",
       "AVX512",
       {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}},
      {kNativeCpuKernels, "", "", "", "", {}},
  };
  return sets;
}

// What each library reports when it runs the set's kernels.
CpuKernelsInEffect Expected(const CpuKernelSet& set) {
  std::string onednn = set.onednn_isa;
  for (char& c : onednn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {set.openblas_core, set.aten_capability, onednn};
}

bool CpuSupports(const std::string& feature) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports takes string literals only.
  if (feature == "sse4.2") return __builtin_cpu_supports("sse4.2");
  if (feature == "popcnt") return __builtin_cpu_supports("popcnt");
  if (feature == "avx2") return __builtin_cpu_supports("avx2");
  if (feature == "fma") return __builtin_cpu_supports("fma");
  if (feature == "bmi2") return __builtin_cpu_supports("bmi2");
  if (feature == "avx512f") return __builtin_cpu_supports("avx512f");
  if (feature == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (feature == "avx512cd") return __builtin_cpu_supports("avx512cd");
  if (feature == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (feature == "avx512vl") return __builtin_cpu_supports("avx512vl");
#endif
  (void)feature;
  return false;
}

// oneDNN's dnnl_cpu_isa_t values (dnnl_types.h), by name.
std::string OneDnnIsaName(int isa) {
  switch (isa) {
    case 0x0: return "all";
    case 0x1: return "sse41";
    case 0x3: return "avx";
    case 0x7: return "avx2";
    case 0xf: return "avx512_mic";
    case 0x1f: return "avx512_mic_4ops";
    case 0x27: return "avx512_core";
    case 0x67: return "avx512_core_vnni";
    case 0xe7: return "avx512_core_bf16";
    case 0x3e7: return "avx512_core_amx";
    case 0x407: return "avx2_vnni";
  }
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%x", static_cast<unsigned>(isa));
  return hex;
}

const char* Get(const std::string& name) { return std::getenv(name.c_str()); }

}  // namespace

StatusOr<CpuKernelSet> FindCpuKernelSet(const std::string& name) {
  for (const CpuKernelSet& set : Sets()) {
    if (set.name == name) return set;
  }
  return InvalidArgument("unknown CPU kernel set '" + name + "' (have: " + CpuKernelSetNames() +
                         ")");
}

std::string CpuKernelSetNames() {
  std::string names;
  for (const CpuKernelSet& set : Sets()) names += (names.empty() ? "" : ", ") + set.name;
  return names;
}

std::string CpuKernelsInEffect::Describe() const {
  return "openblas " + openblas + ", aten " + aten + ", onednn " + onednn;
}

CpuKernelsInEffect ReadBlasAndDnnKernels() {
  CpuKernelsInEffect k{"?", "?", "?"};
  using CoreName = char* (*)();
  if (auto* f = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    const char* name = f();
    if (name != nullptr) k.openblas = name;
  }
  using EffectiveIsa = int (*)();
  if (auto* f = reinterpret_cast<EffectiveIsa>(dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa"))) {
    k.onednn = OneDnnIsaName(f());
  }
  return k;
}

std::string CpuKernelsReport(const CpuKernelSet& set, const CpuKernelsInEffect& in_effect,
                             const std::string& why_not_applied) {
  if (set.native()) return std::string(kNativeCpuKernels) + ": " + in_effect.Describe();
  if (!why_not_applied.empty()) {
    return in_effect.Describe() + " (" + set.name + " not applied: " + why_not_applied + ")";
  }
  const CpuKernelsInEffect want = Expected(set);
  std::vector<std::string> differ;
  auto check = [&](const char* library, const std::string& got, const std::string& wanted) {
    if (got != "?" && got != wanted) differ.push_back(std::string(library) + " " + got +
                                                      " instead of " + wanted);
  };
  check("openblas", in_effect.openblas, want.openblas);
  check("aten", in_effect.aten, want.aten);
  check("onednn", in_effect.onednn, want.onednn);
  if (differ.empty()) return set.name;
  std::string why;
  for (const std::string& d : differ) why += (why.empty() ? "" : ", ") + d;
  return in_effect.Describe() + " (" + set.name + " asked for, but " + why + ")";
}

std::string MissingCpuFeature(const CpuKernelSet& set) {
  for (const std::string& feature : set.cpu_features) {
    if (!CpuSupports(feature)) return feature;
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> CpuKernelEnvironment(const CpuKernelSet& set) {
  if (set.native()) return {};
  const std::string values[] = {set.openblas_core, set.aten_capability, set.onednn_isa,
                                set.mkl_cbwr};
  static_assert(std::size(values) == std::size(kVariables));
  std::vector<std::pair<std::string, std::string>> env;
  for (size_t i = 0; i < std::size(kVariables); ++i) env.emplace_back(kVariables[i], values[i]);
  return env;
}

std::string CpuKernelsFromEnvironment() {
  const char* v = std::getenv(kCpuKernelsEnv);
  return v == nullptr ? "" : v;
}

Status ApplyCpuKernels(const CpuKernelSet& set, const std::vector<std::string>& argv) {
  const bool ours = Get(kCpuKernelsEnv) != nullptr;
  if (set.native()) {
    if (!ours || CpuKernelsFromEnvironment() == kNativeCpuKernels) return OkStatus();
  } else {
    if (std::string missing = MissingCpuFeature(set); !missing.empty()) {
      return FailedPrecondition("this CPU cannot run the kernel set " + set.name + ": it lacks " +
                                missing);
    }
    bool selected = CpuKernelsFromEnvironment() == set.name;
    for (const auto& [variable, value] : CpuKernelEnvironment(set)) {
      const char* v = Get(variable);
      selected = selected && v != nullptr && value == v;
    }
    if (selected) return OkStatus();
  }
  for (size_t i = 0; i < std::size(kVariables); ++i) {
    const char* variable = kVariables[i];
    if (!ours) {  // keep the host's own values, for a later `native`
      if (const char* v = Get(variable)) setenv(SavedName(variable).c_str(), v, 1);
    }
    if (set.native()) {
      const char* saved = Get(SavedName(variable));
      if (saved != nullptr) {
        setenv(variable, saved, 1);
      } else {
        unsetenv(variable);
      }
    }
  }
  for (const auto& [variable, value] : CpuKernelEnvironment(set))
    setenv(variable.c_str(), value.c_str(), 1);
  setenv(kCpuKernelsEnv, set.name.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  execv("/proc/self/exe", args.data());
  return Internal("cannot execute this program again to apply the CPU kernel set " + set.name +
                  ": " + std::strerror(errno));
}

}  // namespace eps
