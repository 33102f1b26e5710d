// Child processes of a benchmark program (ps_transfer starts real shard
// processes): started with their output to a log file and killed if this
// program dies, waited for with a deadline through a pidfd.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

// A process Spawn started.
struct Child {
  pid_t pid = -1;
  int pidfd = -1;  // -1 if the kernel has no pidfd_open: Reap cannot wait then
  std::string name;
};

// Starts args[0] (a path) with args, stdout and stderr to `log` (truncated),
// SIGKILLed when this process dies. Internal when it cannot.
[[nodiscard]] StatusOr<Child> Spawn(const std::vector<std::string>& args, const std::string& name,
                                    const std::string& log);

// Waits until `deadline` for every child to exit, then SIGKILLs the rest and
// reaps all. Returns how many did not exit with status 0 (each is reported on stderr).
int Reap(std::vector<Child>* children, std::chrono::steady_clock::time_point deadline);

}  // namespace eps
