#include "server/shard_metrics.h"

namespace eps {

void ShardMetrics::PublishTables(const std::vector<SparseTable::Stats>& stats) {
  Metrics* m = registry;
  while (tables_.size() < stats.size()) {  // the series of a table, looked up once
    const Labels l = With("table", std::to_string(tables_.size()));
    auto tier = [&](const char* name) {
      Labels tl = l;
      tl["tier"] = name;
      return &m->GetGauge("eps_shard_table_rows",
                          "Rows of a sparse table: in memory (cached), or changed and evicted to "
                          "the store since the last checkpoint (spilled).",
                          tl);
    };
    tables_.push_back(TableSeries{
        {},
        tier("cached"),
        tier("spilled"),
        &m->GetCounter("eps_shard_table_rows_stepped_total",
                       "Rows of a sparse table the shard stepped.", l),
        &m->GetCounter("eps_shard_table_evictions_total",
                       "Rows evicted from a sparse table's memory.", l),
        &m->GetCounter("eps_shard_table_store_reads_total",
                       "Rows of a sparse table looked up in its RocksDB store (found or not).", l),
        &m->GetCounter("eps_shard_table_warm_reads_total",
                       "Of the rows looked up in a sparse table's store, those read ahead of the "
                       "pull or step that needs them (the next plan's rows a worker named).",
                       l),
        &m->GetCounter("eps_shard_table_spill_writes_total",
                       "Rows of a sparse table written to its RocksDB spill tier (evicted "
                       "changed since the last checkpoint and since read back from there).",
                       l)});
  }
  for (size_t t = 0; t < stats.size(); ++t) {
    const SparseTable::Stats& now = stats[t];
    TableSeries& series = tables_[t];
    series.cached->Set(static_cast<double>(now.cached_rows));
    series.spilled->Set(static_cast<double>(now.spilled_rows));
    // The table's counts are since its Open: a rollback reopens none, so they only grow.
    auto grow = [](Counter* c, uint64_t was, uint64_t is) {
      if (is > was) c->Add(static_cast<double>(is - was));
    };
    grow(series.stepped, series.before.rows_stepped, now.rows_stepped);
    grow(series.evictions, series.before.evictions, now.evictions);
    grow(series.store_reads, series.before.store_reads, now.store_reads);
    grow(series.warm_reads, series.before.warm_reads, now.warm_reads);
    grow(series.spill_writes, series.before.spill_writes, now.spill_writes);
    series.before = now;
  }
}

}  // namespace eps
