// Threads that never take the process's stop signals.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "common/cpus.h"
#include "common/status.h"

namespace eps {

// Starts `fn` on a thread with SIGTERM and SIGINT blocked from its first
// instruction (a thread inherits its creator's mask), so they reach the
// thread that watches the stop flag; bound to HelperThreadCpus() (if set)
// before `fn` runs. Internal if the thread cannot start.
template <class Fn>
StatusOr<std::thread> StartThreadWithoutStopSignals(Fn&& fn) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  StatusOr<std::thread> thread = Internal("no thread");
  try {
    thread = std::thread([cpus = HelperThreadCpus(), fn = std::forward<Fn>(fn)]() mutable {
      if (!cpus.empty()) (void)PinThisThread(cpus);  // checked when they were set
      fn();
    });
  } catch (const std::system_error& e) {
    thread = Internal(std::string("cannot start a thread: ") + e.what());
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return thread;
}

}  // namespace eps
