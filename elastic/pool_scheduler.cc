#include "elastic/pool_scheduler.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/files.h"
#include "schema/curve.h"

namespace eps {

StatusOr<std::vector<PoolJobConfig>> ReadJobsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read the jobs file " + path);
  std::vector<PoolJobConfig> jobs;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = path + ":" + std::to_string(n);
    std::istringstream fields(line.substr(0, line.find('#')));
    PoolJobConfig job;
    std::string token_file, key_file, extra;
    if (!(fields >> job.id)) continue;  // blank or a comment
    if (!(fields >> job.coordinator >> token_file) || ((fields >> key_file) && (fields >> extra))) {
      return InvalidArgument(where +
                             ": expected 'ID COORDINATOR_ENDPOINT TOKEN_FILE [SERVER_KEY_FILE]' "
                             "(TOKEN_FILE '-' for none)");
    }
    if (!key_file.empty()) {
      auto key = ReadCurvePublicKey(key_file);
      if (!key.ok()) return key.status().WithContext(where);
      job.server_key = *key;
    }
    auto token = ReadTokenFile(token_file == "-" ? "" : token_file);
    if (!token.ok()) return token.status().WithContext(where);
    job.token = *token;
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) return InvalidArgument("the jobs file " + path + " names no job");
  return jobs;
}

StatusOr<PoolScheduler> PoolScheduler::Create(std::vector<PoolJobConfig> jobs,
                                              PoolSchedulerOptions options, const Clock* clock) {
  std::set<std::string> ids;
  for (const PoolJobConfig& j : jobs) {
    if (j.id.empty()) return InvalidArgument("a job without an id");
    if (!ids.insert(j.id).second) return InvalidArgument("job '" + j.id + "' is named twice");
  }
  return PoolScheduler(std::move(jobs), options, clock);
}

PoolScheduler::PoolScheduler(std::vector<PoolJobConfig> jobs, PoolSchedulerOptions options,
                             const Clock* clock)
    : jobs_(std::move(jobs)), options_(options), clock_(clock) {}

const PoolJobConfig* PoolScheduler::FindJob(const std::string& id) const {
  for (const PoolJobConfig& j : jobs_) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

PoolAssign PoolScheduler::AssignmentOf(const std::string& host) const {
  auto it = target_.find(host);
  const PoolJobConfig* job = it == target_.end() ? nullptr : FindJob(it->second);
  if (job == nullptr) return PoolAssign{};
  return PoolAssign{job->id, job->coordinator, job->token, job->server_key};
}

PoolAssign PoolScheduler::OnRequest(const PoolRequest& request) {
  auto [it, fresh] = members_.try_emplace(request.host);
  Member& m = it->second;
  if (fresh) m.id = WorkerId(next_id_++);
  m.device_kind = request.device_kind;
  m.job = request.job;
  m.last_seen = clock_->Now();
  auto ended = views_.find(request.ended);
  if (ended != views_.end() && ended->second.ran && !ended->second.over) {
    ended->second.over = true;
    for (auto& [host, job] : target_) {
      if (job == request.ended) job.clear();
    }
  }
  // Until a round placed it, a worker keeps the job it is in.
  if (target_.find(request.host) == target_.end() && !request.job.empty() &&
      FindJob(request.job) != nullptr) {
    target_[request.host] = request.job;
  }
  return AssignmentOf(request.host);
}

void PoolScheduler::OnJobInfo(const std::string& job, const JobInfoReply& info) {
  if (FindJob(job) == nullptr) return;
  JobView& v = views_[job];
  v.ran = true;
  v.silent = 0;
  v.info = info;
  v.over = v.over || (info.steps > 0 && info.step >= info.steps);  // an ended job stays ended
}

void PoolScheduler::OnJobSilent(const std::string& job) {
  auto it = views_.find(job);
  if (it != views_.end() && it->second.ran && ++it->second.silent >= kSilentRounds)
    it->second.over = true;
}

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

StatusOr<std::vector<SchedulerDecision>> PoolScheduler::Round() {
  const auto now = clock_->Now();
  for (auto it = members_.begin(); it != members_.end();) {
    if (now - it->second.last_seen > options_.worker_timeout) {
      target_.erase(it->first);
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<PoolWorker> pool;
  std::map<WorkerId, std::string> current;
  std::map<WorkerId, std::string> host_of;
  std::set<std::string> kinds;
  for (const auto& [host, m] : members_) {
    kinds.insert(m.device_kind);
    host_of[m.id] = host;
    // What it was told last counts as where it is: a worker on its way (leaving
    // one job, attaching to another) is not decided about again.
    auto t = target_.find(host);
    const std::string& job = t != target_.end() ? t->second : m.job;
    if (!job.empty()) current[m.id] = job;
  }

  std::vector<SchedulerJob> jobs;
  std::map<std::string, double> speed;  // by host: from the job it is in
  for (const PoolJobConfig& config : jobs_) {
    auto v = views_.find(config.id);
    if (v == views_.end() || !v->second.ran || v->second.over) continue;
    const JobInfoReply& info = v->second.info;
    SchedulerJob j;
    j.id = config.id;
    j.virtual_workers = info.virtual_workers;
    j.batch_per_vw = std::max<uint32_t>(info.batch_per_vw, 1);
    j.min_workers = std::max<uint32_t>(info.min_workers, 1);
    j.max_vws_per_worker = info.max_vws_per_worker;
    std::map<std::string, double> fastest;  // measured seconds per VW by kind
    for (const WorkerSpeed& w : info.workers) {
      if (w.seconds_per_vw <= 0) continue;
      auto [f, fresh] = fastest.try_emplace(w.device_kind, w.seconds_per_vw);
      if (!fresh) f->second = std::min(f->second, w.seconds_per_vw);
    }
    std::vector<double> measured;
    for (const auto& [kind, s] : fastest) measured.push_back(s);
    const double fallback = measured.empty() ? 1.0 : Median(measured);
    for (const std::string& kind : kinds) {
      auto f = fastest.find(kind);
      j.seconds_per_vw[kind] = f == fastest.end() ? fallback : f->second;
    }
    if (j.seconds_per_vw.empty()) j.seconds_per_vw["cpu"] = fallback;
    for (const WorkerSpeed& w : info.workers) {
      auto m = members_.find(w.host);
      if (m == members_.end() || m->second.job != config.id || w.seconds_per_vw <= 0) continue;
      speed[w.host] = j.seconds_per_vw[m->second.device_kind] / w.seconds_per_vw;
    }
    const int64_t remaining = info.steps > info.step ? info.steps - info.step : 1;
    j.weight = 1.0 / (double(remaining) * j.virtual_workers * j.batch_per_vw);
    jobs.push_back(std::move(j));
  }
  for (const auto& [host, m] : members_) {
    auto s = speed.find(host);
    pool.push_back(PoolWorker{m.id, m.device_kind, s == speed.end() ? 1.0 : s->second});
  }

  EPS_ASSIGN_OR_RETURN(ScheduleResult result, Schedule(jobs, pool, current, options_.policy));
  target_.clear();
  for (const auto& [id, host] : host_of) {
    auto a = result.allocation.find(id);
    target_[host] = a == result.allocation.end() ? "" : a->second;
  }
  return std::move(result.decisions);
}

bool PoolScheduler::JobOver(const std::string& job) const {
  auto v = views_.find(job);
  return v != views_.end() && v->second.over;
}

bool PoolScheduler::AllJobsOver() const {
  for (const PoolJobConfig& j : jobs_) {
    if (!JobOver(j.id)) return false;
  }
  return true;
}

std::string PoolScheduler::HostOf(WorkerId id) const {
  for (const auto& [host, m] : members_) {
    if (m.id == id) return host;
  }
  return "worker " + std::to_string(id.value());
}

std::string PoolScheduler::AllocationString() const {
  std::map<std::string, std::vector<std::string>> by_job;
  for (const auto& [host, m] : members_) {
    auto t = target_.find(host);
    by_job[t == target_.end() ? "" : t->second].push_back(host);
  }
  std::ostringstream os;
  bool first = true;
  for (const PoolJobConfig& j : jobs_) {
    os << (first ? "" : " | ") << j.id << ":";
    first = false;
    for (const std::string& h : by_job[j.id]) os << " " << h;
    if (by_job[j.id].empty()) os << " -";
  }
  os << " | idle:";
  for (const std::string& h : by_job[""]) os << " " << h;
  if (by_job[""].empty()) os << " -";
  return os.str();
}

}  // namespace eps
