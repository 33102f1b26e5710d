// RUN_DIR/metrics.csv: the training curve of a job, one row per completed step
// (docs/operations.md, "Training curves"), made of the coordinator's events:
//
//   step,epoch,loss,lr,test_accuracy,test_loss,samples_per_s,workers,vws_per_worker,wall_time
//
// step, epoch, loss, lr, test_accuracy and test_loss are the same bits in every
// placement; samples_per_s, workers, vws_per_worker and wall_time describe the
// placement: workers and vws_per_worker count the VWs each worker's confirmed
// computation covered in the step. The row of a step the test set is evaluated at waits for the
// evaluation. A restarted coordinator appends to the file; a step replayed after
// a rollback appears again. Not thread-safe: the coordinator's loop owns it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/jsonl.h"
#include "common/status.h"
#include "elastic/job_event.h"

namespace eps {

class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "step,epoch,loss,lr,test_accuracy,test_loss,samples_per_s,workers,vws_per_worker,wall_time";
  // Opens `path` for appending; writes the header into a new or empty file.
  [[nodiscard]] static StatusOr<std::unique_ptr<MetricsCsv>> Open(const std::string& path,
                                                                  uint64_t samples_per_step);
  // Every event of the job, in order, with its wall-clock time (unix seconds).
  // Unavailable on the first write error (the caller logs it; the job goes on).
  Status OnEvent(const JobEvent& event, double wall_seconds);

 private:
  struct Row {
    int64_t step = 0;  // steps done
    JobEvent::StepCompleted completed;
    std::optional<JobEvent::Evaluated> evaluated;
    double samples_per_s = -1;  // -1: unknown (no step completed before it)
    double wall = 0;
  };
  MetricsCsv(std::unique_ptr<JsonLinesFile> file, uint64_t samples_per_step)
      : file_(std::move(file)), samples_per_step_(samples_per_step) {}
  Status WritePending();

  const std::unique_ptr<JsonLinesFile> file_;  // appends whole lines
  const uint64_t samples_per_step_;
  std::optional<Row> pending_;      // written at the next step, evaluation or end
  std::optional<double> last_wall_;  // when the previous step completed
};

}  // namespace eps
