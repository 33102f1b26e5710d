#include "worker/pool_client.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/threads.h"
#include "schema/channel.h"

namespace eps {

using std::chrono::milliseconds;

namespace {

// Sleeps `total` in 50 ms slices, returning early once keep_waiting() is false.
template <class Pred>
void SleepWhile(milliseconds total, Pred keep_waiting) {
  for (auto waited = milliseconds(0); waited < total && keep_waiting();
       waited += milliseconds(50)) {
    std::this_thread::sleep_for(milliseconds(50));
  }
}

}  // namespace

PoolClient::PoolClient(zmq::context_t* context, std::string scheduler, std::string token,
                       PoolRequest self, milliseconds poll, CurveOptions curve)
    : context_(context),
      scheduler_(std::move(scheduler)),
      token_(std::move(token)),
      self_(std::move(self)),
      poll_(poll),
      curve_(std::move(curve)) {}

PoolClient::~PoolClient() { StopWatching(); }

// A fresh socket per poll: a late answer to an earlier poll is never taken
// for this one's (polls are seconds apart; the cost is one connect).
StatusOr<PoolAssign> PoolClient::Ask(const std::string& job, const std::string& ended) {
  Channel::Options options;
  options.linger_ms = 0;
  options.curve = curve_;
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Connect(context_, scheduler_, options));
  PoolRequest request = self_;
  request.job = job;
  request.ended = ended;
  EPS_ASSIGN_OR_RETURN(Envelope reply, Call(channel.get(), Envelope{token_, request},
                                            std::max(poll_, milliseconds(1000))));
  auto* assign = std::get_if<PoolAssign>(&reply.body);
  if (assign == nullptr)
    return Internal(std::string("the scheduler answered with ") + BodyName(reply.body));
  return std::move(*assign);
}

StatusOr<PoolAssign> PoolClient::NextJob(const std::atomic<bool>* stop, const std::string& ended) {
  bool told_idle = false;
  while (!*stop) {
    auto answer = Ask("", ended);
    if (answer.ok() && !answer->job.empty()) return answer;
    if (!answer.ok()) {
      const StatusCode code = answer.status().code();
      if (code != StatusCode::kDeadlineExceeded && code != StatusCode::kUnavailable) {
        return answer.status().WithContext("the scheduler at " + scheduler_);
      }
      LOG_EVERY_N(WARNING, 10) << "no answer from the scheduler at " << scheduler_ << ": "
                               << answer.status().ToString();
    } else if (!told_idle) {
      LOG(INFO) << "idle: the scheduler has no job for this worker yet";
      told_idle = true;
    }
    SleepWhile(poll_, [stop] { return !stop->load(); });
  }
  return Aborted("stopped by a signal");
}

Status PoolClient::Watch(const std::string& job, std::atomic<bool>* leave) {
  StopWatching();
  watching_ = true;
  EPS_ASSIGN_OR_RETURN(watcher_, StartThreadWithoutStopSignals([this, job, leave] {
                         while (watching_) {
                           SleepWhile(poll_, [this] { return watching_.load(); });
                           if (!watching_) return;
                           auto answer = Ask(job);
                           if (!answer.ok()) {
                             LOG_EVERY_N(WARNING, 10)
                                 << "no answer from the scheduler: " << answer.status().ToString();
                             continue;
                           }
                           if (answer->job != job) {
                             LOG(INFO)
                                 << "the scheduler moves this worker from job " << job << " to "
                                 << (answer->job.empty() ? "idle" : "job " + answer->job)
                                 << ": leaving at the next VW boundary";
                             *leave = true;
                             return;
                           }
                         }
                       }));
  return OkStatus();
}

void PoolClient::StopWatching() {
  watching_ = false;
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace eps
