// The shard's Prometheus series (docs/metrics.md, "Shards"), internal to the
// shard service (server/shard.cc).
#pragma once

#include <string>
#include <vector>

#include "common/ids.h"
#include "common/metrics.h"
#include "server/sparse_table.h"

namespace eps {

// The shard's series (docs/metrics.md, "Shards"), looked up once: an update is
// one atomic operation. Without a registry in the options they live in one of
// the shard's own that nobody serves.
struct ShardMetrics {
  ShardMetrics(Metrics* m, ShardId shard)
      : registry(m),
        labels{{"shard", std::to_string(shard.value())}},
        version(m->GetGauge("eps_shard_version", "The version the shard serves (-1: none yet).",
                            labels)),
        durable_step(m->GetGauge("eps_shard_durable_step",
                                 "The newest step the shard holds in a durable checkpoint "
                                 "(-1: none).",
                                 labels)),
        push_bytes(m->GetCounter("eps_shard_push_bytes_total",
                                 "Bytes of the pushes the shard read, inline or in shared memory.",
                                 labels)),
        pull_bytes(m->GetCounter("eps_shard_pull_bytes_total",
                                 "Parameter bytes the shard sent in pull replies, inline or in "
                                 "shared memory.",
                                 labels)),
        pushes_accepted(
            m->GetCounter("eps_shard_pushes_total", kPushesHelp, With("result", "accepted"))),
        pushes_duplicate(
            m->GetCounter("eps_shard_pushes_total", kPushesHelp, With("result", "duplicate"))),
        pushes_refused(
            m->GetCounter("eps_shard_pushes_total", kPushesHelp, With("result", "refused"))),
        pulls(m->GetCounter("eps_shard_pulls_total", "Pulls the shard answered with parameters.",
                            labels)),
        step_seconds(m->GetHistogram("eps_shard_step_seconds",
                                     "Seconds from a step's first push to the step applied.",
                                     ExponentialBuckets(0.001, 2, 16), labels)),
        checkpoint_seconds(m->GetHistogram("eps_checkpoint_duration_seconds",
                                           "Seconds the shard took to write a checkpoint.",
                                           ExponentialBuckets(0.01, 2, 14), labels)),
        checkpoint_failures(m->GetCounter("eps_checkpoint_failures_total",
                                          "Checkpoints the shard could not take or write.",
                                          labels)) {}

  static constexpr const char* kPushesHelp =
      "Blocks pushed to the shard: accepted (a contribution counted), duplicate (all of them "
      "counted before) or refused (answered with an error).";
  Labels With(const std::string& name, const std::string& value) const {
    Labels l = labels;
    l[name] = value;
    return l;
  }

  // The sparse tables' statistics as series labelled by table index (docs/metrics.md).
  void PublishTables(const std::vector<SparseTable::Stats>& stats);

  Metrics* const registry;
  const Labels labels;
  Gauge& version;
  Gauge& durable_step;
  Counter& push_bytes;
  Counter& pull_bytes;
  Counter& pushes_accepted;
  Counter& pushes_duplicate;
  Counter& pushes_refused;
  Counter& pulls;
  Histogram& step_seconds;
  Histogram& checkpoint_seconds;
  Counter& checkpoint_failures;

 private:
  // A sparse table's series, and its statistics as last published.
  struct TableSeries {
    SparseTable::Stats before;
    Gauge* cached;
    Gauge* spilled;
    Counter* stepped;
    Counter* evictions;
    Counter* store_reads;
    Counter* warm_reads;
    Counter* spill_writes;
  };
  std::vector<TableSeries> tables_;
};

}  // namespace eps
