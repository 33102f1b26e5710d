// One background thread that runs tasks in the order they were posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace eps {

// Runs posted tasks one at a time, in posting order, on a thread of its own
// (started with the stop signals blocked). A task's error is kept: Wait()
// returns the first one once every task posted before it has run, and the
// tasks posted after a failure are skipped until Wait() has reported it.
// Post and Wait are for one owning thread; the destructor waits for the tasks
// already posted, then joins.
class TaskThread {
 public:
  using Task = std::function<Status()>;

  // `name` (its first 15 characters) names the thread, for ps and perf.
  // Internal if the thread cannot start.
  [[nodiscard]] static StatusOr<std::unique_ptr<TaskThread>> Start(const std::string& name);
  ~TaskThread();
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  void Post(Task task);
  // Blocks until every task posted so far has run (or was skipped); returns
  // the first error among them and forgets it.
  [[nodiscard]] Status Wait();

 private:
  TaskThread() = default;
  void Run();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Task> queue_;  // guarded by mu_
  bool running_ = false;    // a task taken off the queue is running; guarded by mu_
  bool quit_ = false;       // guarded by mu_
  Status error_;            // the first failure since the last Wait(); guarded by mu_
  std::thread thread_;
};

}  // namespace eps
