// What bench/ps_transfer_main.cc shares with its --curve set-up
// (ps_transfer_curve.cc) and its tables (ps_transfer_report.cc): the synthetic
// job's shape, the step times the clients collect and the functions that print
// them. Internal to the ps_transfer program.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "schema/curve.h"

namespace eps {
namespace ps_transfer {

using Clock = std::chrono::steady_clock;

inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The synthetic job: one fp32 parameter tensor of `elems` elements and the loss.
struct Setup {
  uint32_t shards = 1;
  uint32_t clients = 1;
  uint32_t vws_per_client = 1;
  int64_t elems = 0;
  int64_t chunk_elems = 0;
  int64_t total_steps = 0;
  bool worker_copies = false;         // share mode: copy as worker/worker.cc does
  bool pipelined = true;              // --pipelined: chunk by chunk, w(t+1) asked for first
  WireDType wire = WireDType::kFP32;  // gradients pushed and weights pulled in this dtype
  double compute_ms = 0;
  CurveOptions curve;  // the clients' (off: plain TCP)
  uint32_t V() const { return clients * vws_per_client; }
};

// Milliseconds per measured step, one entry per step and client.
struct StepTimes {
  std::vector<double> pull, compute, worker, push, total;  // ms per measured step
  std::vector<double> tree;  // share mode: the part of `worker` spent in TreeReducer::Add
  void Add(double pl, double c, double w, double ps) {
    pull.push_back(pl);
    compute.push_back(c);
    worker.push_back(w);
    push.push_back(ps);
    total.push_back(pl + c + w + ps);
  }
  void Append(const StepTimes& o) {
    for (auto [mine, theirs] : {std::pair{&pull, &o.pull},
                                {&compute, &o.compute},
                                {&worker, &o.worker},
                                {&push, &o.push},
                                {&total, &o.total}}) {
      mine->insert(mine->end(), theirs->begin(), theirs->end());
    }
  }
};

// The median of `xs` (0 when empty).
double Median(std::vector<double> xs);

// With --curve: a key pair for the servers (the shards, the bench's coordinator;
// also the raw servers' registrations) and one for the clients, written to a
// fresh temporary folder (server.key/.pub, client.key/.pub) that the caller
// removes. The shards check the clients' key (their ZAP handlers); the bench's
// coordinator runs none (the handler would bring glog's flags, whose --log_dir
// clashes with the program's), so it admits any CURVE client: a benchmark.
struct BenchCurve {
  std::string dir;
  CurveOptions server;  // the coordinator's
  CurveOptions client;  // the clients'
};
StatusOr<BenchCurve> MakeBenchCurve();

// The cipher alone, on one core: libsodium's crypto_box_afternm (XSalsa20-
// Poly1305, what ZeroMQ's CURVE runs on every frame it sends and receives)
// sealing and opening `bytes` in frames of `frame_bytes`, warm buffers, the
// best of 3 of each; prints both rates and the cipher's CPU time for one
// push + pull of `bytes` (each way sealed once and opened once), the floor of
// CURVE's cost over the plain path.
void ReportCipherCost(size_t bytes, size_t frame_bytes);

// The tables (and their JSON lines, for scripts/bench.sh) of --mode=transfer
// (`curve`: the PS path ran over CURVE) and of --mode=share.
void PrintTransfer(const Setup& setup, const StepTimes& ps, const StepTimes& raw, bool curve);
void PrintShare(const Setup& setup, const StepTimes& times);

// Copies `bytes` into a warm buffer and into freshly mapped pages (as a new
// receive buffer or a new std::vector above glibc's mmap threshold gets them);
// prints the best of 3 of each. Explains most of the figures of both modes.
void ReportMemoryCost(size_t bytes);

}  // namespace ps_transfer
}  // namespace eps
