#include "elastic/metrics_csv.h"

#include <sys/stat.h>

#include <cstdio>
#include <map>

#include "common/format.h"

namespace eps {
StatusOr<std::unique_ptr<MetricsCsv>> MetricsCsv::Open(const std::string& path,
                                                       uint64_t samples_per_step) {
  struct stat st;
  const bool fresh = ::stat(path.c_str(), &st) != 0 || st.st_size == 0;
  EPS_ASSIGN_OR_RETURN(auto file, JsonLinesFile::Open(path));
  if (fresh) EPS_RETURN_IF_ERROR(file->Append(kHeader));
  return std::unique_ptr<MetricsCsv>(new MetricsCsv(std::move(file), samples_per_step));
}

Status MetricsCsv::OnEvent(const JobEvent& event, double wall_seconds) {
  if (const auto* completed = std::get_if<JobEvent::StepCompleted>(&event.what)) {
    EPS_RETURN_IF_ERROR(WritePending());
    Row row;
    row.step = event.step ? event.step->value() + 1 : 0;
    row.completed = *completed;
    row.wall = wall_seconds;
    if (last_wall_ && wall_seconds > *last_wall_)
      row.samples_per_s = double(samples_per_step_) / (wall_seconds - *last_wall_);
    last_wall_ = wall_seconds;
    pending_ = std::move(row);
    return OkStatus();
  }
  if (const auto* evaluated = std::get_if<JobEvent::Evaluated>(&event.what)) {
    if (pending_ && event.step && event.step->value() == pending_->step) {
      pending_->evaluated = *evaluated;
      return WritePending();
    }
    return OkStatus();
  }
  if (std::holds_alternative<JobEvent::JobFinished>(event.what) ||
      std::holds_alternative<JobEvent::JobFailed>(event.what) ||
      std::holds_alternative<JobEvent::RollingBack>(event.what) ||
      std::holds_alternative<JobEvent::StartingOver>(event.what)) {
    last_wall_.reset();  // the next step's rate would include the pause
    return WritePending();
  }
  return OkStatus();
}

Status MetricsCsv::WritePending() {
  if (!pending_) return OkStatus();
  const Row row = std::move(*pending_);
  pending_.reset();
  const JobEvent::StepCompleted& c = row.completed;
  std::string line = std::to_string(row.step) + "," + StrFormat("%.6f", c.epoch) + "," +
                     (c.has_loss ? StrFormat("%.9g", c.loss) : "") + "," + StrFormat("%.9g", c.lr) + ",";
  if (row.evaluated) {
    line += StrFormat("%.6f", row.evaluated->accuracy) + "," + StrFormat("%.9g", row.evaluated->loss);
  } else {
    line += ",";
  }
  line += "," + (row.samples_per_s >= 0 ? StrFormat("%.1f", row.samples_per_s) : "") + ",";
  std::map<WorkerId, uint32_t> vws;  // by worker id
  for (const WorkerRange& r : c.ranges) vws[r.worker] += r.hi - r.lo;
  line += std::to_string(vws.size()) + ",";
  for (const auto& [worker, n] : vws) {
    if (line.back() != ',') line += " ";
    line += "w" + std::to_string(worker.value()) + ":" + std::to_string(n);
  }
  line += "," + StrFormat("%.3f", row.wall);
  return file_->Append(line);
}

}  // namespace eps
