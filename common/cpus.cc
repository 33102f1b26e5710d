#include "common/cpus.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace eps {
namespace {

// A CPU number: digits only, below CPU_SETSIZE.
StatusOr<int> ParseCpu(const std::string& s, const std::string& list) {
  if (s.empty() || s.size() > 6 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("CPU list '" + list + "': '" + s + "' is not a CPU number");
  }
  const int cpu = std::stoi(s);
  if (cpu >= CPU_SETSIZE) {
    return InvalidArgument("CPU list '" + list + "': CPU " + s + " is beyond " +
                           std::to_string(CPU_SETSIZE - 1));
  }
  return cpu;
}

std::vector<int>& HelperCpus() {
  static std::vector<int> cpus;
  return cpus;
}

}  // namespace

StatusOr<std::vector<int>> ParseCpuList(const std::string& list) {
  if (list.empty()) return InvalidArgument("empty CPU list");
  std::vector<int> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string entry = list.substr(begin, end - begin);
    const size_t dash = entry.find('-');
    EPS_ASSIGN_OR_RETURN(int lo, ParseCpu(entry.substr(0, dash), list));
    int hi = lo;
    if (dash != std::string::npos) {
      EPS_ASSIGN_OR_RETURN(hi, ParseCpu(entry.substr(dash + 1), list));
      if (hi < lo)
        return InvalidArgument("CPU list '" + list + "': reversed range '" + entry + "'");
    }
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    begin = end + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

StatusOr<std::vector<int>> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return Internal(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

Status PinThisThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return InvalidArgument("no CPU to pin a thread to");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (err != 0) {
    return InvalidArgument("cannot pin a thread to CPUs " + FormatCpuList(cpus) + ": " +
                           std::strerror(err));
  }
  return OkStatus();
}

void SetHelperThreadCpus(std::vector<int> cpus) { HelperCpus() = std::move(cpus); }

const std::vector<int>& HelperThreadCpus() { return HelperCpus(); }

}  // namespace eps
