// A parameter-server shard process: owns its slice of every tensor (chunks of the
// layout assigned to its id), runs the step barrier over virtual workers and
// serves versioned pulls.
//
// It binds a ROUTER for workers, connects to the coordinator, registers its id,
// address and the version it serves, and learns the job spec and the model
// layout from it. It registers again every `register_every` (a beacon, which
// the coordinator that knows the shard ignores), so that a restarted
// coordinator learns every shard without restarting any. It reports every
// completed step (with the step's loss if it owns the loss chunk) to the
// coordinator and exits when the coordinator sends Shutdown, or refuses the
// shard for good (an ErrorReply InvalidArgument, FailedPrecondition or
// Unauthenticated: a config it can never serve; ProtocolError: a message of
// this shard the coordinator cannot read). Other error replies from the
// coordinator (NotFound from a restarted one, Aborted, Unavailable) are logged
// at most once a minute and the shard serves on. Bad messages from workers get
// an ErrorReply and a log line; nothing from them stops the service.
// Run() owns the sockets and the state: one thread, no locks.
//
// Durable state (docs/design.md, "Durable state"): with a store, the shard restores
// the store's newest checkpoint when it opens (values, optimizer state,
// buffers, version), before it serves, and says so in RegisterShard. Every
// `checkpoint_every` steps (each version that is a multiple of it, version 0
// included) it takes a snapshot of its state, which shares the immutable
// values and copies the optimizer state, and hands it to a background thread
// that writes the checkpoint: training waits for the disk only when two
// checkpoints are already pending. StepDone reports the newest durable step;
// a write error is logged and reported there while the shard keeps serving
// from memory. The store keeps the newest `keep_checkpoints` and every
// checkpoint from the step the coordinator names in Retain on (the newest step
// every shard holds durably, which the job may roll back to); all of them
// until the coordinator has named one. On Rollback{step} it loads that
// checkpoint and answers RollbackDone. A store of another job or shard, or a
// corrupt one, stops the shard with the error.
//
// Metrics (docs/metrics.md, "Shards"): with a registry in the options the
// shard keeps its eps_shard_* and eps_checkpoint_* series there, labelled
// shard="<id>"; serving them is the caller's (common/metrics_server.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/ids.h"
#include "common/status.h"
#include "schema/curve.h"
#include "server/sparse_table.h"

namespace eps {

class Metrics;

struct ShardOptions {
  ShardId shard;
  std::string bind = "tcp://127.0.0.1:0";  // where workers reach this shard
  std::string coordinator;                 // the coordinator's endpoint
  std::string token;                       // the job's secret; empty: none required
  // CURVE (docs/security.md): the shard's key pair serves the workers and connects to the
  // coordinator (server_key); off without a key. The context needs a ZapHandler.
  CurveOptions curve;
  // With curve: the allowed keys (as the ZapHandler's), re-read at most once a second; a
  // message from a key no longer among them is refused (revocation of open connections).
  std::string allowed_keys;
  // Limits of the workers' socket (docs/security.md, "Bounded resources"). The largest frame
  // it accepts (-1: any): a job whose largest legit frame (LargestLegitFrame of its largest
  // chunk, schema/channel.h) is larger is refused when its config with tensors comes.
  int64_t max_message_bytes = 64 << 20;
  int socket_hwm = 1000;                       // messages queued per peer each way (0: unbounded)
  // Pulls parked for a later version, per peer (a worker's prefetch parks up to kMaxPullGroups,
  // worker/param_client.h), and in all (512 such workers).
  size_t max_waiting_pulls_per_peer = 64;
  size_t max_waiting_pulls = 16384;
  std::chrono::milliseconds pull_wait{30000};  // how long a pull may wait for its version
  std::chrono::milliseconds register_every{1000};  // between beacons (RegisterShard again); > 0
  // A testing aid: refuse every push that names shared memory with
  // Unimplemented, as a shard that cannot map the worker's regions would (the
  // worker then pushes to it through the socket). Pull replies through shared
  // memory are unchanged.
  bool refuse_shm_pushes = false;
  // A testing aid: a shard that staged its part of a move (durably, with a
  // store) waits this long before it says so (ReshardReady): a window in which
  // a test kills a process mid-move. 0: none.
  std::chrono::milliseconds move_stall{0};
  // Threads the optimizer's elements are cut over (the event loop's and threads - 1 helpers):
  // the cores the shard is given. Never changes a bit (common/parallel_for.h). >= 1.
  int threads = 1;

  // Durable state. Empty store_path: memory only (nothing below applies).
  std::string store_path;  // the shard's RocksDB directory, owned by "shard/<id>"
  // The job, to create or check the store before the coordinator names it.
  // Empty: an existing store is opened for its own job and checked against the
  // coordinator's; a missing one is created when the coordinator names the job.
  std::string job_id;
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: none; >0 needs a store)
  // Where the sparse tables (server/shard_state.h) keep the rows beyond the
  // job's --shard_memory_mb when there is no store (with one: beside it, at
  // store_path + ".sparse", where their checkpoints go too). Empty, and no
  // store: in memory only, and a step that would overflow the budget fails.
  std::string sparse_dir;
  int keep_checkpoints = 2;      // the newest N checkpoints are kept
  // The longest wait for the background writer: for room for a new checkpoint,
  // before a rollback, and for pending checkpoints when the shard stops.
  std::chrono::milliseconds store_wait{600000};

  // Where the shard keeps its metrics (null: none kept). It must outlive the
  // shard; the shard's series stay in it.
  Metrics* metrics = nullptr;
  // The scrape target serving `metrics` ("host:port"), told to the coordinator
  // at registration; empty: none.
  std::string metrics_address;
};

class Shard {
 public:
  // Binds, connects, and opens and restores the store if there is one.
  static StatusOr<std::unique_ptr<Shard>> Open(const ShardOptions& options,
                                               zmq::context_t* context);
  virtual ~Shard() = default;
  // The endpoint workers connect to, with the real port.
  virtual const std::string& endpoint() const = 0;
  // The version restored from the store at Open (-1: none).
  virtual Step restored_version() const = 0;
  // Serves until the coordinator says Shutdown (OK), or the job's config is
  // invalid or the coordinator refuses the shard for good (the error). `stop` set by a signal
  // handler ends it early (Aborted). Either way it first waits (up to store_wait) for pending
  // checkpoints.
  virtual Status Run(const volatile bool* stop) = 0;
  // Each sparse table's statistics, by table id (not while Run runs: it owns the state).
  virtual std::vector<SparseTable::Stats> TableStats() const = 0;
};

}  // namespace eps
