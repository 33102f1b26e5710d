#include "worker/step_times.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace eps {
namespace {

double MsPerStep(const StepTimes& t, StepTimes::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count() /
         double(std::max<int64_t>(t.timed, 1));
}

}  // namespace

std::string Summary(const StepTimes& t, const TransferCounts& c) {
  auto ms = [&t](StepTimes::Duration d) { return std::to_string(MsPerStep(t, d)); };
  return "ms per train plan over " + std::to_string(t.timed) + " (of " + std::to_string(t.steps) +
         ", the first not timed): plan wait " + ms(t.plan) +
         ", pull " + ms(t.pull) + ", compute " + ms(t.compute) + ", copies " + ms(t.copies) +
         ", push wait " + ms(t.push_wait) + "; " + std::to_string(t.ahead) +
         " run ahead of their plan, " + std::to_string(t.dropped) + " runs ahead dropped; " +
         std::to_string(c.shm_replies) + " pull replies through shared memory, " +
         std::to_string(c.inline_replies) + " inline; " + std::to_string(c.shm_pushes) +
         " pushes through shared memory, " + std::to_string(c.inline_pushes) + " inline";
}

std::string ReportJson(const WorkerReport& r) {
  const StepTimes& t = r.times;
  nlohmann::json ids = nlohmann::json::array();
  for (WorkerId id : r.worker_ids) ids.push_back(id.value());
  nlohmann::json j = {
      {"host", r.host},
      {"device", r.device},
      {"device_kind", r.device_kind},
      {"cpu_kernels", r.cpu_kernels},
      {"worker_ids", ids},
      {"outcome", r.outcome},
      {"error", r.error.ok() ? "" : r.error.ToString()},
      {"train_plans", t.steps},
      {"timed_plans", t.timed},
      {"ran_ahead", t.ahead},
      {"ahead_dropped", t.dropped},
      {"abandoned_plans", t.abandoned},
      {"reregistrations", t.reregistrations},
      {"ms_per_train_plan",
       {{"plan_wait", MsPerStep(t, t.plan)},
        {"pull", MsPerStep(t, t.pull)},
        {"compute", MsPerStep(t, t.compute)},
        {"copies", MsPerStep(t, t.copies)},
        {"push_wait", MsPerStep(t, t.push_wait)}}},
      {"pull_replies", {{"shm", r.counts.shm_replies}, {"inline", r.counts.inline_replies}}},
      {"pushes", {{"shm", r.counts.shm_pushes}, {"inline", r.counts.inline_pushes}}},
      {"prefetches_pulled_again", r.counts.prefetches_pulled_again},
      {"shm_push_refusals", r.counts.shm_push_refusals},
      {"warnings", r.warnings},
      {"sparse_tables", r.sparse_tables},
      {"lookup_tables", r.lookup_tables},
      {"lookup_rows", r.counts.lookup_rows},
      {"lookup_repulls", r.counts.lookup_repulls},
      {"sparse_row_bytes",
       {{"pulled",
         {{"shm", r.counts.shm_row_bytes_pulled}, {"inline", r.counts.inline_row_bytes_pulled}}},
        {"pushed",
         {{"shm", r.counts.shm_row_bytes_pushed}, {"inline", r.counts.inline_row_bytes_pushed}}}}},
      {"peak_rss_mb", r.peak_rss_kb / 1024},
      {"scheduling", r.scheduling},
      {"nice", r.nice},
  };
  uint64_t fetched = 0;
  nlohmann::json files = nlohmann::json::array();
  for (const ModelFileReport& f : r.model_files) {
    fetched += f.fetched_bytes;
    files.push_back({{"what", f.what},
                     {"sha256", f.sha256},
                     {"size", f.size},
                     {"fetched_bytes", f.fetched_bytes},
                     {"chunks", f.chunks},
                     {"cache", f.cache},
                     {"ms", f.ms},
                     {"warning", f.warning}});
  }
  j["model_bytes_fetched"] = fetched;
  j["model_files"] = files;
  if (!(r.init.loaded.empty() && r.init.reinit.empty() && r.init.skipped.empty())) {
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& [name, why] : r.init.skipped) skipped.push_back({{"name", name}, {"why", why}});
    j["init"] = {{"loaded", r.init.loaded},
                 {"reinit", r.init.reinit},
                 {"skipped", skipped},
                 {"unused", r.init.unused}};
  }
  return j.dump();
}

void NameSparseTables(const ModelRunner& model, WorkerReport* report) {
  const std::vector<TensorSpec>& tensors = model.Tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].sparse) report->sparse_tables.push_back(tensors[i].name);
    if (model.Lookup(i)) report->lookup_tables.push_back(tensors[i].name);
  }
}

Status WriteReport(const std::string& path, const WorkerReport& report) {
  const std::string tmp = path + ".tmp";
  WorkerReport r = report;
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) r.peak_rss_kb = usage.ru_maxrss;
  switch (sched_getscheduler(0)) {
    case SCHED_OTHER:
      r.scheduling = "other";
      break;
    case SCHED_BATCH:
      r.scheduling = "batch";
      break;
    case SCHED_IDLE:
      r.scheduling = "idle";
      break;
    default:
      r.scheduling = "realtime";
      break;
  }
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);
  if (errno == 0) r.nice = nice;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ReportJson(r) << "\n";
    out.close();
    if (!out) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Internal("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace eps
