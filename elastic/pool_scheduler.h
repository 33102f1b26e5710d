// The inter-job scheduler process's decisions, as a pure state machine (the
// process, elastic/scheduler_main.cc, is its I/O shell): a pool of workers
// (idle GPUs, serving nodes lent to training) shared by several running jobs.
//
// Pool workers poll (OnRequest): who they are and which job they train now;
// the answer is the job they should train. Coordinators answer JobInfo
// (OnJobInfo): the job's needs and its workers' measured seconds per VW.
// Round() turns that into a SchedulerJob per running job and calls the greedy
// policy of elastic/scheduler.h (the simulator calls the same Schedule()):
//  * seconds per VW of a device kind on a job: the fastest measured worker of
//    that kind in the job (a slowed worker is that kind at a lower speed); a
//    kind not measured on the job takes the job's median over measured kinds;
//    a job with no measurement at all counts 1 s per VW, like every other
//    unmeasured job, until its workers report;
//  * a worker's speed: its kind's seconds on its current job over its own;
//  * weights: 1 / remaining samples, so a job close to its end gets the
//    workers it can use (shortest remaining first, as in the simulator).
// A worker whose answer names another job than its current one leaves its job
// gracefully (at a VW boundary; its VWs move at the next step) and attaches
// to the new one; an empty answer means stay idle and ask again. A job ends
// when a worker says its coordinator told it so, when it reports its last
// step, or when its coordinator stops answering after it ran (it finished, or
// crashed); its workers are freed. A job that never answered yet is not
// scheduled.
//
// Not thread-safe; no I/O; time from an injected Clock.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "elastic/scheduler.h"
#include "schema/messages.h"

namespace eps {

// A job the scheduler serves: its id and where its coordinator is.
struct PoolJobConfig {
  std::string id;
  std::string coordinator;  // endpoint
  std::string token;        // the job's token
  std::string server_key;   // its servers' CURVE public key (Z85); empty: no CURVE
};

// Reads a jobs file: one job per line, "ID COORDINATOR_ENDPOINT TOKEN_FILE
// [SERVER_KEY_FILE]" (the last: the job's servers' CURVE public key),
// blank lines and '#' comments skipped; token files are read (an empty
// TOKEN_FILE field is written "-": no token). InvalidArgument names the line.
StatusOr<std::vector<PoolJobConfig>> ReadJobsFile(const std::string& path);

struct PoolSchedulerOptions {
  std::chrono::milliseconds worker_timeout{5000};  // a worker silent this long has left the pool
  SchedulerOptions policy;
};

class PoolScheduler {
 public:
  // InvalidArgument for an empty or duplicate job id.
  static StatusOr<PoolScheduler> Create(std::vector<PoolJobConfig> jobs,
                                        PoolSchedulerOptions options, const Clock* clock);

  // A pool worker's poll; the answer names the job it should train. A poll
  // that names a job it saw end (`ended`, once the job ran) ends that job at
  // once: its workers are idle until the next round places them.
  PoolAssign OnRequest(const PoolRequest& request);
  // The job's coordinator answered JobInfo.
  void OnJobInfo(const std::string& job, const JobInfoReply& info);
  // The job's coordinator did not answer: a job that ran has ended once it
  // stays silent kSilentRounds rounds in a row (a restarting coordinator is
  // back within a round or two).
  void OnJobSilent(const std::string& job);
  static constexpr int kSilentRounds = 3;

  // Decides who trains what from now on; the decisions carry their reasons.
  StatusOr<std::vector<SchedulerDecision>> Round();

  const std::vector<PoolJobConfig>& jobs() const { return jobs_; }
  // The job has run and ended (then it is not asked again).
  bool JobOver(const std::string& job) const;
  // Every job has run and ended.
  bool AllJobsOver() const;
  // The pool worker behind an id of the decisions ("hostname:pid").
  std::string HostOf(WorkerId id) const;
  // Pool workers heard from within the worker timeout (as of the last round).
  size_t members() const { return members_.size(); }
  // e.g. "job-a: node1:17 node2:40 | job-b: node3:9 | idle: -".
  std::string AllocationString() const;

 private:
  struct Member {
    WorkerId id;
    std::string device_kind;
    std::string job;  // as it last reported
    Clock::time_point last_seen;
  };
  struct JobView {
    bool ran = false;   // answered at least once
    bool over = false;  // stopped answering after it ran, or reached its last step
    int silent = 0;     // rounds in a row without an answer
    JobInfoReply info;
  };

  PoolScheduler(std::vector<PoolJobConfig> jobs, PoolSchedulerOptions options, const Clock* clock);
  const PoolJobConfig* FindJob(const std::string& id) const;
  PoolAssign AssignmentOf(const std::string& host) const;

  std::vector<PoolJobConfig> jobs_;
  PoolSchedulerOptions options_;
  const Clock* clock_;
  std::map<std::string, Member> members_;  // by host
  uint32_t next_id_ = 0;
  std::map<std::string, JobView> views_;       // by job id
  std::map<std::string, std::string> target_;  // host -> job it should train ("" idle)
};

}  // namespace eps
