// Prometheus metrics of one process: counters, gauges and histograms, each a
// series named by a metric name and a set of labels, rendered in Prometheus'
// text exposition format (version 0.0.4). docs/metrics.md lists every metric
// ElasticPS serves, with its unit and labels.
//
// The registry owns every series; a series reference stays valid for the
// registry's life, also after Remove() (it is then no longer rendered), so a
// hot path looks a series up once and then pays one atomic operation per
// update. Thread-safe: any thread may update series while another renders.
//
//   Metrics metrics;
//   Counter& pushed = metrics.GetCounter("eps_shard_push_bytes_total",
//                                        "Gradient bytes received in pushes.");
//   pushed.Add(n);
//   Gauge& spv = metrics.GetGauge("eps_worker_seconds_per_vw", "...", {{"worker", "w3"}});
//   std::string text = metrics.Render();
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace eps {

// Label name -> value. Names match [a-zA-Z_][a-zA-Z0-9_]*; values are any UTF-8
// (escaped when rendered).
using Labels = std::map<std::string, std::string>;

// Only goes up (or restarts at 0 with the process): Prometheus' rate() needs that.
class Counter {
 public:
  void Add(double delta = 1);  // delta >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in cumulative buckets with upper bounds `bounds`
// (ascending; +Inf is implied), plus their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i] (i == bounds().size(): all), the sum and the count.
  uint64_t cumulative_count(size_t i) const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  friend class Metrics;  // Render reads each bucket once

  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds start, start*factor, ... (count of them): for durations and sizes.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Metrics {
 public:
  Metrics() = default;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The series `name`{labels}, created on first use. Every series of one name
  // has the same type and help text (the first caller's); a name reused for
  // another type, or an invalid name, is a bug in this code (assert).
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // `bounds` are the first caller's for each series.
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});
  // Stops rendering series `name`{labels} (a worker that left): its reference
  // stays valid, and a later Get of it renders it again from its last value.
  void Remove(const std::string& name, const Labels& labels);
  // Stops rendering every series of `name` whose labels are not in `keep`.
  void RemoveAllBut(const std::string& name, const std::vector<Labels>& keep);

  // Every rendered series, families in name order, in the text format
  // (Content-Type: text/plain; version=0.0.4).
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    bool rendered = true;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, Series> series;
  };
  Series& Find(const std::string& name, const std::string& help, Type type, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;  // guarded by mu_
};

}  // namespace eps
