// sparse_table_bench: rows of a shard's sparse table (server/sparse_table.h) looked up and
// stepped per second, with the table in memory and with the table 10x its memory budget
// (most rows in RocksDB). Prints a table; never fails on timing.
//
//   build/bin/sparse_table_bench [--rows=200000] [--dim=32] [--batch_rows=1800] [--steps=200]
//
// Each case first touches every row once (steps of 20,000 rows) and checkpoints, so that the
// spilling case starts with its rows in the store; then each measured step reads the step's
// rows (a pull) and pushes them from one block of V = 8 VWs and applies the step (Adam). Ids:
// uniform over the table, or skewed (row = rows * u^3, u uniform: a few hot rows, as hashed
// categorical ids are).
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "server/sparse_table.h"

DEFINE_uint64(rows, 200000, "rows in the table");
DEFINE_uint64(dim, 32, "row width");
DEFINE_uint64(batch_rows, 1800, "distinct rows a step touches");
DEFINE_uint64(steps, 200, "measured steps per case");

namespace eps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// SplitMix64: the bench's ids, the same on every run.
uint64_t Next(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<uint64_t> StepIds(uint64_t* rng, uint64_t rows, size_t n, bool skewed) {
  std::set<uint64_t> ids;
  while (ids.size() < n) {
    const double u = static_cast<double>(Next(rng) >> 11) * 0x1p-53;
    const double x = skewed ? u * u * u : u;
    ids.insert(std::min<uint64_t>(rows - 1, static_cast<uint64_t>(x * static_cast<double>(rows))));
  }
  return {ids.begin(), ids.end()};
}

struct Result {
  double lookups_per_s = 0;
  double stepped_per_s = 0;
  double store_reads_per_step = 0;
  double evictions_per_step = 0;
  size_t budget_rows = 0;
};

Status Run(const std::string& dir, size_t memory_bytes, bool skewed, Result* r) {
  std::filesystem::remove_all(dir);
  SparseTableOptions o;
  o.dim = FLAGS_dim;
  o.num_vws = 8;
  o.optimizer.kind = SparseOptimizerOptions::Kind::kAdam;
  o.memory_bytes = memory_bytes;
  o.path = dir;
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> t, SparseTable::Open(o));
  r->budget_rows = memory_bytes / t->RowBytes();
  const Block all{0, 8};
  std::vector<float> grads;
  // Touch every row once, then checkpoint.
  for (uint64_t lo = 0; lo < FLAGS_rows; lo += 20000) {
    std::vector<uint64_t> ids;
    for (uint64_t id = lo; id < std::min<uint64_t>(FLAGS_rows, lo + 20000); ++id) ids.push_back(id);
    grads.assign(ids.size() * o.dim, 0.001f);
    EPS_RETURN_IF_ERROR(
        t->Push(t->version(), all, ids.data(), ids.size(), grads.data(), grads.size()));
    EPS_RETURN_IF_ERROR(t->ApplyStep(0.01));
  }
  EPS_RETURN_IF_ERROR(t->Checkpoint());

  uint64_t rng = skewed ? 2 : 1;
  std::vector<std::vector<uint64_t>> steps;
  for (uint64_t s = 0; s < FLAGS_steps; ++s) {
    steps.push_back(StepIds(&rng, FLAGS_rows, FLAGS_batch_rows, skewed));
  }
  const SparseTable::Stats before = t->stats();
  double read_s = 0, step_s = 0;
  std::vector<float> out(FLAGS_batch_rows * o.dim);
  grads.assign(FLAGS_batch_rows * o.dim, 0.001f);
  SparseTable::StepRows changed;  // as a shard steps: the rows' both versions handed over
  for (const std::vector<uint64_t>& ids : steps) {
    const auto t0 = Clock::now();
    EPS_RETURN_IF_ERROR(t->Read(ids.data(), ids.size(), out.data()));
    const auto t1 = Clock::now();
    EPS_RETURN_IF_ERROR(
        t->Push(t->version(), all, ids.data(), ids.size(), grads.data(), ids.size() * o.dim));
    EPS_RETURN_IF_ERROR(t->ApplyStep(0.01, &changed));
    const auto t2 = Clock::now();
    read_s += Seconds(t0, t1);
    step_s += Seconds(t1, t2);
  }
  const SparseTable::Stats after = t->stats();
  const double rows = static_cast<double>(FLAGS_steps * FLAGS_batch_rows);
  r->lookups_per_s = rows / read_s;
  r->stepped_per_s = rows / step_s;
  r->store_reads_per_step =
      static_cast<double>(after.store_reads - before.store_reads) / FLAGS_steps;
  r->evictions_per_step = static_cast<double>(after.evictions - before.evictions) / FLAGS_steps;
  t.reset();
  std::filesystem::remove_all(dir);
  return OkStatus();
}

}  // namespace
}  // namespace eps

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_rows == 0 || FLAGS_dim == 0 || FLAGS_batch_rows == 0 || FLAGS_batch_rows > FLAGS_rows) {
    std::fprintf(stderr, "need rows >= batch_rows >= 1 and dim >= 1\n");
    return 2;
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sparse_table_bench_" + std::to_string(getpid())))
          .string();
  // Row bytes as the table counts them (Adam: weights and two moments, plus bookkeeping).
  eps::SparseTableOptions probe;
  probe.dim = FLAGS_dim;
  probe.num_vws = 8;
  probe.optimizer.kind = eps::SparseOptimizerOptions::Kind::kAdam;
  auto table = eps::SparseTable::Open(probe);
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
    return 1;
  }
  const size_t table_bytes = FLAGS_rows * (*table)->RowBytes();
  std::printf("sparse table: %llu rows of %llu floats, Adam, %llu rows a step, %llu steps\n",
              static_cast<unsigned long long>(FLAGS_rows),
              static_cast<unsigned long long>(FLAGS_dim),
              static_cast<unsigned long long>(FLAGS_batch_rows),
              static_cast<unsigned long long>(FLAGS_steps));
  std::printf("%-22s %-8s %12s %14s %14s %12s %12s\n", "case", "ids", "budget rows", "lookups/s",
              "stepped/s", "reads/step", "evict/step");
  struct Case {
    const char* name;
    size_t memory;
  };
  for (const Case& c :
       {Case{"in memory", table_bytes * 2}, Case{"table 10x memory", table_bytes / 10}}) {
    for (bool skewed : {false, true}) {
      eps::Result r;
      eps::Status s = eps::Run(dir, c.memory, skewed, &r);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, s.ToString().c_str());
        std::filesystem::remove_all(dir);
        return 1;
      }
      std::printf("%-22s %-8s %12zu %14.0f %14.0f %12.0f %12.0f\n", c.name,
                  skewed ? "skewed" : "uniform", r.budget_rows, r.lookups_per_s, r.stepped_per_s,
                  r.store_reads_per_step, r.evictions_per_step);
    }
  }
  return 0;
}
