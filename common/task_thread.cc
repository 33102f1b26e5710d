#include "common/task_thread.h"

#include <pthread.h>

#include <utility>

#include "common/threads.h"

namespace eps {

StatusOr<std::unique_ptr<TaskThread>> TaskThread::Start(const std::string& name) {
  std::unique_ptr<TaskThread> t(new TaskThread());
  EPS_ASSIGN_OR_RETURN(t->thread_,
                       StartThreadWithoutStopSignals([raw = t.get(), name = name.substr(0, 15)] {
                         pthread_setname_np(pthread_self(), name.c_str());
                         raw->Run();
                       }));
  return t;
}

TaskThread::~TaskThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TaskThread::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
}

Status TaskThread::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return queue_.empty() && !running_; });
  return std::exchange(error_, OkStatus());
}

void TaskThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [this] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit_, and everything posted has run
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !error_.ok();
    running_ = true;
    lock.unlock();
    Status st = skip ? OkStatus() : task();
    task = nullptr;  // what the task held goes on this thread, outside the lock
    lock.lock();
    running_ = false;
    if (error_.ok() && !st.ok()) error_ = std::move(st);
    changed_.notify_all();
  }
}

}  // namespace eps
