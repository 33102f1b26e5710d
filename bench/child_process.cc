#include "bench/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace eps {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

StatusOr<Child> Spawn(const std::vector<std::string>& args, const std::string& name,
                      const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot open " + log + ": " + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {  // only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fd);
  Child c;
  c.pid = pid;
  c.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  c.name = name;
  return c;
}

// Waits until `deadline` for every child to exit, then SIGKILLs the rest; reaps all.
int Reap(std::vector<Child>* children, Clock::time_point deadline) {
  int failed = 0;
  for (Child& c : *children) {
    if (c.pid < 0) continue;
    if (c.pidfd >= 0) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd p{c.pidfd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left))) <= 0) kill(c.pid, SIGKILL);
      close(c.pidfd);
    } else {
      kill(c.pid, SIGKILL);  // no pidfd: no bounded wait to offer
    }
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      ++failed;
      std::fprintf(stderr, "%s (pid %d) ended with status %d\n", c.name.c_str(), c.pid, status);
    }
    c.pid = -1;
  }
  return failed;
}

}  // namespace eps
