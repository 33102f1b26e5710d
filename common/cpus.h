// CPU sets: parsing Linux CPU lists and pinning threads, so that a worker's
// compute thread keeps a core to itself while its helper threads (ZeroMQ I/O,
// reducing, heartbeats) run on others. Without it, on a host whose scheduler
// sees no shared cache between cores (a VM that exposes no cache topology),
// every thread the compute thread wakes is queued on the compute thread's own
// core and preempts it, while the other cores idle.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace eps {

// "0-3,6" -> {0, 1, 2, 3, 6}: comma-separated CPU numbers and inclusive
// ranges, sorted and without duplicates in the result. InvalidArgument for an
// empty list, a malformed entry, a reversed range or a CPU number this process
// cannot name (CPU_SETSIZE and up).
[[nodiscard]] StatusOr<std::vector<int>> ParseCpuList(const std::string& list);

// The inverse: {0, 1, 2, 3, 6} -> "0-3,6" (sorted, distinct input).
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs this thread may run on (sched_getaffinity), sorted.
[[nodiscard]] StatusOr<std::vector<int>> AllowedCpus();

// Binds the calling thread to `cpus` (threads it starts later inherit them).
// InvalidArgument for an empty set; the kernel's error otherwise (a CPU that
// is offline or outside the process's cpuset).
[[nodiscard]] Status PinThisThread(const std::vector<int>& cpus);

// The CPUs threads started by StartThreadWithoutStopSignals (common/threads.h)
// are bound to; empty (the default): they inherit their creator's. Set once,
// at startup, before the process starts threads.
void SetHelperThreadCpus(std::vector<int> cpus);
const std::vector<int>& HelperThreadCpus();

}  // namespace eps
