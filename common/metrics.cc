#include "common/metrics.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace eps {
namespace {

// C++17 has no fetch_add for atomic<double>: one compare-exchange loop, which
// without contention succeeds at once.
void AtomicAdd(std::atomic<double>* a, double delta) {
  double old = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

[[maybe_unused]] bool ValidName(const std::string& name, bool colons) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colons && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

[[maybe_unused]] bool ValidLabels(const Labels& labels, bool histogram) {
  for (const auto& [name, value] : labels) {
    if (!ValidName(name, /*colons=*/false) || name.rfind("__", 0) == 0) return false;
    if (histogram && name == "le") return false;
  }
  return true;
}

// As Prometheus (Go's ParseFloat) reads it: integers up to 2^53 in plain
// digits, NaN and infinities spelled its way, anything else the shortest text
// that reads back as the same double, in %g style (0.0001, 1e-05) as Prometheus' clients
// write bucket bounds.
void AppendNumber(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
  } else if (v == std::floor(v) && std::fabs(v) <= 9007199254740992.0) {
    char buf[32];
    const int n = std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    out->append(buf, static_cast<size_t>(n));
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
    out->append(buf, r.ptr);
  }
}

void AppendEscaped(const std::string& s, bool quotes, std::string* out) {
  for (const char c : s) {
    switch (c) {
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '"':
        *out += quotes ? "\\\"" : "\"";
        break;
      default:
        *out += c;
    }
  }
}

// {a="x",b="y"} (nothing without labels), with `le` last when given.
void AppendLabels(const Labels& labels, const std::string* le, std::string* out) {
  if (labels.empty() && le == nullptr) return;
  *out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) *out += ',';
    first = false;
    *out += name;
    *out += "=\"";
    AppendEscaped(value, /*quotes=*/true, out);
    *out += '"';
  }
  if (le != nullptr) {
    if (!first) *out += ',';
    *out += "le=\"";
    *out += *le;
    *out += '"';
  }
  *out += '}';
}

void AppendSample(const std::string& name, const char* suffix, const Labels& labels,
                  const std::string* le, double value, std::string* out) {
  *out += name;
  *out += suffix;
  AppendLabels(labels, le, out);
  *out += ' ';
  AppendNumber(value, out);
  *out += '\n';
}

}  // namespace

void Counter::Add(double delta) {
  assert(delta >= 0);
  if (!(delta >= 0)) return;  // a counter never goes down (nor becomes NaN)
  AtomicAdd(&value_, delta);
}

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  assert(std::is_sorted(bounds_.begin(), bounds_.end()));
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // The first bucket whose bound is >= v; NaN goes to +Inf only, as in Prometheus' clients.
  const size_t i = std::isnan(v) ? bounds_.size()
                                 : static_cast<size_t>(
                                       std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                       bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t Histogram::cumulative_count(size_t i) const {
  assert(i <= bounds_.size());
  uint64_t n = 0;
  for (size_t b = 0; b <= i && b <= bounds_.size(); ++b)
    n += buckets_[b].load(std::memory_order_relaxed);
  return n;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  assert(start > 0 && factor > 1 && count >= 1);
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(std::max(count, 0)));
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

Metrics::Series& Metrics::Find(const std::string& name, const std::string& help, Type type,
                               const Labels& labels) {
  assert(ValidName(name, /*colons=*/true));
  assert(ValidLabels(labels, type == Type::kHistogram));
  // Caller holds mu_.
  auto [it, created] = families_.try_emplace(name);
  Family& family = it->second;
  if (created) {
    family.type = type;
    family.help = help;
  }
  assert(family.type == type);
  Series& series = family.series[labels];
  series.rendered = true;
  return series;
}

// A type mismatch is a bug (asserted in Find); without asserts the caller still
// gets a valid object of its type, which is then never rendered.
Counter& Metrics::GetCounter(const std::string& name, const std::string& help,
                             const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = Find(name, help, Type::kCounter, labels);
  if (s.counter == nullptr) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Metrics::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = Find(name, help, Type::kGauge, labels);
  if (s.gauge == nullptr) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Metrics::GetHistogram(const std::string& name, const std::string& help,
                                 const std::vector<double>& bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = Find(name, help, Type::kHistogram, labels);
  if (s.histogram == nullptr) s.histogram = std::make_unique<Histogram>(bounds);
  return *s.histogram;
}

void Metrics::Remove(const std::string& name, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto family = families_.find(name);
  if (family == families_.end()) return;
  auto series = family->second.series.find(labels);
  if (series != family->second.series.end()) series->second.rendered = false;
}

void Metrics::RemoveAllBut(const std::string& name, const std::vector<Labels>& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  auto family = families_.find(name);
  if (family == families_.end()) return;
  for (auto& [labels, series] : family->second.series) {
    if (std::find(keep.begin(), keep.end(), labels) == keep.end()) series.rendered = false;
  }
}

std::string Metrics::Render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) {
    const bool any = std::any_of(family.series.begin(), family.series.end(),
                                 [](const auto& s) { return s.second.rendered; });
    if (!any) continue;
    out += "# HELP ";
    out += name;
    out += ' ';
    AppendEscaped(family.help, /*quotes=*/false, &out);
    out += "\n# TYPE ";
    out += name;
    switch (family.type) {
      case Type::kCounter:
        out += " counter\n";
        break;
      case Type::kGauge:
        out += " gauge\n";
        break;
      case Type::kHistogram:
        out += " histogram\n";
        break;
    }
    for (const auto& [labels, series] : family.series) {
      if (!series.rendered) continue;
      switch (family.type) {
        case Type::kCounter:
          if (series.counter) AppendSample(name, "", labels, nullptr, series.counter->value(), &out);
          break;
        case Type::kGauge:
          if (series.gauge) AppendSample(name, "", labels, nullptr, series.gauge->value(), &out);
          break;
        case Type::kHistogram: {
          if (!series.histogram) break;
          const Histogram& h = *series.histogram;
          // Cumulative from one read of each bucket, so that the buckets only
          // grow and _count equals +Inf's while other threads observe.
          uint64_t cumulative = 0;
          std::string le;
          for (size_t i = 0; i <= h.bounds().size(); ++i) {
            cumulative += h.buckets_[i].load(std::memory_order_relaxed);
            le.clear();
            AppendNumber(i < h.bounds().size() ? h.bounds()[i] : INFINITY, &le);
            AppendSample(name, "_bucket", labels, &le, static_cast<double>(cumulative), &out);
          }
          AppendSample(name, "_sum", labels, nullptr, h.sum(), &out);
          AppendSample(name, "_count", labels, nullptr, static_cast<double>(cumulative), &out);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace eps
