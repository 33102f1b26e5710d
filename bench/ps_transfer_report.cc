// ps_transfer's tables: what --mode=transfer and --mode=share print (see ps_transfer.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench/ps_transfer.h"

namespace eps {
namespace ps_transfer {

double Median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

void PrintTransfer(const Setup& setup, const StepTimes& ps, const StepTimes& raw, bool curve) {
  const double mb = static_cast<double>(setup.elems) * 4 / 1e6;
  const double raw_ms = Median(raw.total), ps_ms = Median(ps.total);
  std::printf(
      "transfer: %u shard(s), %u client(s), %.1f MB of fp32 pushed and pulled per client and step "
      "as %s, "
      "%lld-element chunks\n",
      setup.shards, setup.clients, mb, WireDTypeName(setup.wire),
      static_cast<long long>(setup.chunk_elems));
  std::printf("  %-22s %10s %10s %10s %10s\n", "path", "push ms", "pull ms", "total ms", "vs raw");
  std::printf("  %-22s %10s %10s %10.1f %10.2f\n", "raw ZeroMQ round trip", "-", "-", raw_ms, 1.0);
  std::printf("  %-22s %10.1f %10.1f %10.1f %10.2f\n",
              curve ? "ElasticPS over CURVE" : "ElasticPS push+pull", Median(ps.push),
              Median(ps.pull), ps_ms, ps_ms > 0 ? raw_ms / ps_ms : 0);
  std::printf(
      "{\"mode\":\"transfer\",\"curve\":%s,\"shards\":%u,\"clients\":%u,\"elems\":%lld,\"wire\":\"%"
      "s\","
      "\"raw_ms\":%.2f,\"ps_ms\":%.2f,\"push_ms\":%.2f,\"pull_ms\":%.2f,\"samples\":%zu}\n",
      curve ? "true" : "false", setup.shards, setup.clients,
      static_cast<long long>(setup.elems), WireDTypeName(setup.wire), raw_ms, ps_ms,
      Median(ps.push), Median(ps.pull), ps.total.size());
}

void PrintShare(const Setup& setup, const StepTimes& times) {
  const double step = Median(times.total), compute = Median(times.compute);
  std::printf("share: %lld parameters, V = %u in one worker, %.1f ms compute per VW, %u shard(s)\n",
              static_cast<long long>(setup.elems), setup.V(), setup.compute_ms, setup.shards);
  std::printf(
      "  step %.1f ms = pull %.1f + compute %.1f + worker copies %.1f (of which tree adds %.1f) + "
      "push %.1f;"
      " PS share %.1f %%\n",
      step, Median(times.pull), compute, Median(times.worker), Median(times.tree),
      Median(times.push), step > 0 ? 100 * (step - compute) / step : 0);
  std::printf(
      "{\"mode\":\"share\",\"shards\":%u,\"vws\":%u,\"elems\":%lld,\"wire\":\"%s\","
      "\"step_ms\":%.2f,\"compute_ms\":%.2f,\"pull_ms\":%.2f,\"worker_ms\":%.2f,"
      "\"tree_ms\":%.2f,\"push_ms\":%.2f,\"samples\":%zu}\n",
      setup.shards, setup.V(), static_cast<long long>(setup.elems), WireDTypeName(setup.wire), step,
      compute, Median(times.pull), Median(times.worker), Median(times.tree), Median(times.push),
      times.total.size());
}

void ReportMemoryCost(size_t bytes) {
  std::vector<uint8_t> src(bytes, 1), warm(bytes, 2);
  double warm_ms = 1e30, fresh_ms = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    std::memcpy(warm.data(), src.data(), bytes);
    warm_ms = std::min(warm_ms, MsSince(t0));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    t0 = Clock::now();
    std::memcpy(p, src.data(), bytes);
    fresh_ms = std::min(fresh_ms, MsSince(t0));
    munmap(p, bytes);
  }
  const double pages = static_cast<double>(bytes) / 4096;
  std::printf(
      "memory: memcpy of %.1f MB: %.1f ms into a warm buffer (%.1f GB/s), %.1f ms into fresh pages "
      "(%.2f us per 4 KiB page fault)\n",
      bytes / 1e6, warm_ms, bytes / warm_ms / 1e6, fresh_ms, (fresh_ms - warm_ms) * 1e3 / pages);
  std::printf("{\"mode\":\"memory\",\"bytes\":%zu,\"warm_ms\":%.2f,\"fresh_ms\":%.2f}\n", bytes,
              warm_ms, fresh_ms);
}

}  // namespace ps_transfer
}  // namespace eps
