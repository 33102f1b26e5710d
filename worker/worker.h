// A worker process: hosts the virtual workers the coordinator assigns to it and
// runs them one after another on one model copy.
//
// It needs only the coordinator's address (and the job token): registration
// returns the job spec and the shard addresses; the worker builds the model,
// loads the data, and then asks the coordinator for a plan for every step
// (running the likely one while the answer comes, see below).
// For a train plan over VWs [lo, hi) of step t it pulls w(t) and the step's
// buffers, runs each VW on its own microbatch with its own random streams
// (asking for w(t+1) before the last one: a shard answers each group of chunks
// as soon as they are stepped, so those bytes travel while backward still runs),
// pre-sums every aligned block of its range along the canonical tree and pushes
// one partial per block to each shard (VW 0's buffers ride with VW 0's block).
// Pushes are not awaited one by one: replies are collected at the end of the
// step, so sending overlaps the next VW's compute. A block's last VW hands its
// gradients over from backward hooks: its part of the tree is finished tensor by
// tensor and pushed once enough is ready, so the last layers' gradients travel
// (and the shards step them) while the first layers' backward still runs.
// After a train plan the worker does not wait for the next one: it sends the
// request and runs step t+1 over the same VWs (the coordinator moves VWs only
// when membership or speeds change) while the answer comes, and takes the
// answer before its first push of that step. An answer that plans otherwise
// (other VWs, an evaluation, a stop) drops what ran ahead: nothing of it was
// pushed, and the answer is carried out instead.
//
// Elasticity: from registration on, a heartbeat thread with its own socket
// tells the coordinator every `heartbeat_interval` that this worker lives, also
// while a long VW computes. When `*stop` turns true (a signal), the worker
// abandons the VWs it has not pushed yet (blocks already pushed stay pushed),
// sends Leave, waits briefly for the ack and returns OK; it notices the flag
// within a VW's backward (ModelOptions::cancel) and within 10 ms in every wait. When the coordinator answers a
// step request with Aborted or NotFound (it declared this worker dead, or has
// forgotten it), or refuses a heartbeat that way while the worker waits for a
// plan (a restarted coordinator never answers the request it forgot), the
// worker registers again under a new id, within about one heartbeat interval,
// and carries on with the model and data it already has.
//
// Where the parts live, and the threads:
//   worker.cc               the plan loop, train (VW blocks) and evaluate; Run()'s
//                           thread (the main thread) computes and owns the rest
//   coordinator_session.h   registration, re-registration, leave, step requests,
//                           the plan run ahead (main thread)
//   heartbeat.h             the heartbeat thread and its socket
//   param_client.h          pulls and pushes over one ShardLink (shard_link.h)
//                           per shard (main thread; the reducing thread pushes)
//   block_pusher.h          a block's partial, summed and pushed on the
//                           reducing thread (a TaskThread, common/task_thread.h)
//   step_times.h            where the time goes; the end-of-run JSON report
//   wait.h                  waits with a deadline that watch the stop flag
// Run() is called from one thread; the heartbeat and reducing threads are
// started and joined inside it. The caller should let the thread that calls
// Run() receive the signals that set `*stop` (the helper threads block
// SIGTERM and SIGINT).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "common/cpu_kernels.h"
#include "common/status.h"
#include "models/model_runner.h"
#include "schema/channel.h"

namespace eps {

class Metrics;

// Makes the job's model: the worker calls it once the job spec is known, and
// again when the job starts over from its initial values. Production workers
// use ModelRunner::Create (libtorch, models/model_runner.cc); a test may hand
// in a model of its own.
using ModelFactory = std::function<StatusOr<std::unique_ptr<ModelRunner>>(const ModelOptions&)>;

struct WorkerOptions {
  std::string coordinator;  // the coordinator's endpoint
  std::string token;        // the job's secret
  // CURVE (docs/security.md): this worker's key pair and the job's servers' public key
  // (the coordinator and the shards share one); off without a key.
  CurveOptions curve;
  std::string host;                                // reported to the coordinator, for logs
  std::chrono::milliseconds plan_timeout{600000};  // longest wait for the next plan
  // Longest wait for the coordinator to answer a registration (a line in the
  // log every 10 s meanwhile).
  std::chrono::milliseconds register_timeout{120000};
  std::chrono::milliseconds rpc_timeout{60000};  // longest wait for a shard's reply
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds leave_timeout{2000};  // longest wait for the ack of a Leave
  ModelFactory model_factory;                     // required
  // "cpu", or "cuda:N" in a build against a CUDA libtorch: handed to the model factory.
  std::string device = "cpu";
  // The kind of `device` this worker reports when it registers (DeviceKind in
  // models/model_runner.h: "cpu" or "cuda:<GPU name>"); the coordinator
  // refuses a kind other than the first worker's unless the job allows mixed
  // devices. Required.
  std::string device_kind;
  // The CPU kernel set this process runs (common/cpu_kernels.h: what main()
  // applied before anything computed), and the report of what is in effect
  // (CpuKernelsReport), which the worker gives when it registers. A job of
  // another set makes Run leave at once and return OK with
  // wants_cpu_kernels() set: main() then executes the worker again with that
  // set's environment.
  std::string cpu_kernels_set = kDefaultCpuKernels;
  std::string cpu_kernels = kDefaultCpuKernels;
  // Cores this worker may use (0: the job's intra-op thread count). Fewer than
  // the job's count is refused once the spec is known, since the bits depend on
  // that count; more is accepted, and the extra cores stay unused.
  int threads = 0;
  // A testing and demo aid standing in for slower hardware: after each VW's
  // compute the worker idles (slowdown - 1) times that compute time (on the
  // CPU the compute's CPU time, so a core shared with other processes does
  // not multiply the slowdown). 1: off.
  // It changes timing only, never bits.
  double slowdown = 1.0;
  // Move tensor bytes through shared memory (common/shm.h) with the shards on
  // this host: each pull offers a region that a shard on the same host writes
  // w(t+1) into instead of sending it through the socket (one elsewhere
  // answers inline), and once a shard has answered a pull that way, the block
  // partials are pushed to it from regions too (the message names where they
  // are). Changes timing, never bits.
  bool shm = true;
  // The host's cache of model files (worker/model_fetch.h): the TorchScript
  // model and --init_from files, keyed by SHA-256, so that a re-attach or a
  // second worker of the host fetches nothing from the coordinator. Empty: no
  // cache. A directory that cannot be created or written is a warning: the
  // worker fetches the files and keeps them in memory only.
  std::string model_cache_dir;
  // The cache's bound: past it, the files used least recently go (0: none).
  uint64_t model_cache_bytes = 0;
  // FetchModel requests in flight at once while a file is fetched.
  int model_fetch_in_flight = 4;
  // Where Run() writes the worker's report (worker/step_times.h: times, counts,
  // the ids it held, how it ended) as JSON when it returns. Empty: nowhere.
  std::string report_file;
  // Where the worker keeps its eps_worker_* series (docs/metrics.md; null:
  // none kept). It must outlive the worker; serving it is the caller's
  // (common/metrics_server.h).
  Metrics* metrics = nullptr;
  // The scrape target serving `metrics` ("host:port"), told to the coordinator
  // at registration; empty: none.
  std::string metrics_address;
  // Set (with Run's `*stop`) when the worker leaves to wait parked, not to exit (eps_worker's
  // SIGUSR1): its Leave says so ("SIGUSR1" instead of "SIGTERM").
  const std::atomic<bool>* parking = nullptr;
};

class Worker {
 public:
  // InvalidArgument for a missing coordinator address, model factory or
  // device kind, threads < 0, a slowdown below 1, or a heartbeat interval
  // that is not positive.
  static StatusOr<std::unique_ptr<Worker>> Open(const WorkerOptions& options,
                                                zmq::context_t* context);
  virtual ~Worker() = default;
  // Runs until the coordinator says stop (OK), `*stop` turns true and the
  // worker has left the job (OK), or something fails. `*stop` is read from
  // this thread only; set it from a signal handler or another thread.
  virtual Status Run(const std::atomic<bool>* stop) = 0;
  // After Run failed: no coordinator answered a registration within
  // register_timeout (it ended, or the address is wrong). eps_worker then
  // exits 3 (docs/operations.md).
  virtual bool unreachable() const = 0;
  // After Run failed: the coordinator refused this worker for its host: its
  // data files (their fingerprint differs from the job's, data/fingerprint.h)
  // or its CPU kernels (not the job's). eps_worker then exits 5.
  virtual bool host_refused() const = 0;
  // After Run returned OK: the worker left the job (asked to, by `*stop`), which goes on
  // without it; false: the job is over.
  virtual bool left() const = 0;
  // After Run returned OK: the job runs this CPU kernel set, not
  // options.cpu_kernels_set; the worker left before it did any work (empty:
  // it did not).
  virtual std::string wants_cpu_kernels() const = 0;
};

}  // namespace eps
