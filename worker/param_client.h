// The worker's parameter client: pulls w(t) from every shard into the model
// and pushes block partials to them, over one ShardLink per shard.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/layout.h"
#include "common/pull_groups.h"
#include "common/shm.h"
#include "common/status.h"
#include "common/wire.h"
#include "models/model_runner.h"
#include "schema/messages.h"
#include "worker/coordinator_session.h"
#include "worker/shard_link.h"
#include "worker/step_times.h"

namespace eps {

struct ParameterClientOptions {
  std::string token;                             // the job's secret
  std::chrono::milliseconds rpc_timeout{60000};  // longest wait for one shard's message
  bool shm = true;                               // offer shared-memory regions (WorkerOptions::shm)
  WireDType weight_wire = WireDType::kFP32;      // parameters are pulled in this dtype
  size_t push_region_bytes = 0;  // a block partial's region (BlockPusher::RegionBytes)
  CurveOptions curve;            // the links' CURVE settings (WorkerOptions::curve)
  // By tensor: frozen (--freeze, common/transfer.h FrozenTensors). Never
  // pulled: the model holds the values every shard holds from its creation
  // (the seed's, or --init_from's), and no step changes them.
  std::vector<char> frozen{};
  uint64_t seed = 0;  // the job's: the sparse tables' initial rows (common/row_init.h)
  // Lookup tables (ModelRunner::Lookup): the memory their rows may take
  // between two versions (ModelRunner::TableHeldBytes); past it, the rows go
  // back before the next version's are written.
  uint64_t lookup_resident_bytes = uint64_t{1} << 30;
};

// By sparse table (Layout::sparse): row ids, ascending and distinct.
using TableRows = std::vector<std::vector<uint64_t>>;

// Pulls and pushes for one worker, over a link per shard.
//
// Pulls: a pull of version t is one Pull message per pull group and shard
// (parameter chunks in backward order, in groups of about kEagerPushBytes,
// then the buffers; no frozen chunk), each naming the link's shared-memory region when there
// is one: a shard on this host writes the reply there, one elsewhere answers
// inline. Prefetch() sends them before they are due (before a step's last
// VW); PullInto() takes the replies into the model, checking that every chunk
// of the layout came once, where it was asked for, with its size.
//
// Sparse tables (TensorSpec::sparse): the model holds each whole, every row
// at the version held_ names; SetModel writes their initial rows (the shards'
// InitialRow), and a pull of version t asks every shard, in one more Pull,
// for the rows changed since the version held (at t; the changed rows only),
// writing them into the model. A pull of a version older than the one held (a
// rollback) writes the initial rows again and asks for every changed row.
// A table the model looks up by its batches' rows (ModelRunner::Lookup) is
// not held: the rows WantRows names (those the coming compute reads) are
// pulled by id at each version (a SparseRead with ids), and PullInto makes
// sure every one of them is in the model at its version, pulling those a
// prefetch did not ask for (a plan other than the one guessed). The rows the
// model has of other versions are never read; once they exceed
// lookup_resident_bytes, they go back before the next version's rows are
// written.
// A table the model loaded from --init_from (its init_report) is seeded: its
// version 0 is the file's rows, which SetModel leaves in the model, the
// initial push sends to the shards (those not bit-equal to InitialRow, which
// the shards then store), and a pull from scratch asks for again (since -1).
//
// Pushes: SendPush() counts a push as outstanding on its link, AwaitPushes()
// collects every acknowledgement (taking the replies of a prefetch that come
// meanwhile into the model). A shard that has answered a pull through shared
// memory gets block partials from push regions (TakePushRegion); one that
// refuses such a push gets them inline for good.
//
// Threads: the worker's main thread owns the object, except SendPush(),
// TakePushRegion's regions' contents and counts()' pushes and push bytes, used by the
// reducing thread while it pushes a step's blocks (the main thread does not
// push meanwhile; TaskThread::Wait() hands them back).
class ParameterClient {
 public:
  // `layout` and `*stop` outlive the client. Connects nothing yet: Reconnect().
  ParameterClient(ParameterClientOptions options, zmq::context_t* context,
                  const std::atomic<bool>* stop, const Layout* layout,
                  const std::vector<std::string>& shard_addresses);

  size_t num_shards() const { return links_.size(); }
  const std::string& address(size_t shard) const { return links_[shard].address; }

  // Fresh sockets and regions to every shard, dropping a pull in flight and
  // the push regions of a step not fully acknowledged (ShardLink::Reconnect).
  [[nodiscard]] Status Reconnect();
  // After a re-registration: shard s now serves at `address` (Reconnect() to use it).
  void MoveShard(size_t s, std::string address) { links_[s].address = std::move(address); }
  // After the layout's shard map changed (a re-registration named a new one):
  // links to the new map's shards (`shard_addresses` by id, "" for a gap),
  // pulls grouped by the new owners, fresh sockets. The model, the rows held
  // and the counts stay. ProtocolError: not one address per id of the map.
  [[nodiscard]] Status Remap(const std::vector<std::string>& shard_addresses);

  // The model pulls write into and the initial push reads (not owned). A new
  // model holds its initial values until a pull writes into it; its sparse
  // tables get their initial rows here (the model's Write's errors).
  [[nodiscard]] Status SetModel(ModelRunner* model);
  bool model_holds_initial_values() const { return model_initial_; }

  // The timeline of the plan the next pulls serve (StepPlan::timeline): every
  // pull carries it, and a pull in flight of another timeline is dropped, not
  // taken (docs/design.md, "Timelines").
  void SetTimeline(uint64_t timeline) { timeline_ = timeline; }

  // Asks every shard for `version` now, before it is due: a shard answers each
  // pull group as soon as its chunks are stepped, so most bytes of w(t+1)
  // travel during the last VW's backward, and are in the model by the time
  // PullInto(version) asks for them.
  [[nodiscard]] Status Prefetch(Step version) {
    return StartPull(version, /*prefetch=*/true, wanted_);
  }
  // Pulls `version` from every shard into the model: takes the prefetched
  // replies when they are of that version, drops them (fresh sockets) when
  // not. While `session` runs a plan ahead, its answer is taken as soon as it
  // comes: the coordinator may instead give this worker VWs of the very step
  // the pull waits for (a crashed worker's), which it would wait for in vain.
  [[nodiscard]] Status PullInto(Step version, CoordinatorSession* session);
  // The rows of the lookup tables (by sparse table; others' ignored) the
  // coming compute reads: the next pull asks for them, and PullInto pulls
  // those it did not have. Of the tables held whole, the rows the coming
  // compute touches (warms()): a prefetch names them, for the shards to bring
  // them into memory while the worker computes (SparseTable::Warm). Nothing to
  // call without either.
  void WantRows(TableRows rows) { wanted_ = std::move(rows); }
  // Whether the model looks any sparse table up by rows.
  bool looks_up() const { return std::find(lookup_.begin(), lookup_.end(), 1) != lookup_.end(); }
  // Whether the model holds a sparse table whole and names the rows a batch touches
  // (ModelRunner::NamesHeldTableRows).
  bool warms() const { return warms_; }
  // Whether WantRows is to be told the rows of each plan.
  bool wants_rows() const { return looks_up() || warms(); }

  // Sends a push to shard s (nothing for an empty one, but the initial values') and counts it
  // outstanding.
  [[nodiscard]] Status SendPush(size_t s, Push push);
  // Collects every outstanding push reply; then the push regions of the step
  // may be written again. A pull reply's error met meanwhile does not end
  // this call: PullInto returns it. The error of a refused push otherwise.
  [[nodiscard]] Status AwaitPushes();
  // Pushes the model's values (the job's initial parameters) to every shard
  // and waits for the replies; a pull in flight is dropped first.
  [[nodiscard]] Status PushInitialValues();

  // By shard: block partials go to it from a push region.
  std::vector<char> ShmPushTargets() const;
  // A region for a block partial, not written by anybody else until the
  // step's pushes are all acknowledged (AwaitPushes) or dropped with the
  // sockets; reused, so that neither side faults its pages in again. Null if
  // none can be made (the block is pushed through the socket).
  std::shared_ptr<ShmRegion> TakePushRegion();

  const TransferCounts& counts() const { return counts_; }

 private:
  // Where each chunk goes in its shard's pull region, where its sparse rows may go (after the
  // chunks, kShmRowsBytes of room; 0: the layout has no sparse table), and each region's size.
  struct PullRegions {
    std::vector<uint64_t> offset;   // by chunk
    std::vector<uint64_t> rows_at;  // by shard
    std::vector<uint64_t> size;     // by shard
  };
  // A pull of one version sent to every shard, its replies being taken.
  struct PullInFlight {
    Step version;
    uint64_t timeline;
    bool prefetch;                   // sent before it was due (Prefetch)
    std::vector<size_t> answers;     // by shard: replies not yet taken
    std::vector<char> expired;       // by shard: a prefetched group waited too long at the shard
    std::vector<char> pulled_again;  // by shard: what did not come was asked for again
    Status failed;  // a reply taken while the pushes were acknowledged failed: PullInto returns it
    std::vector<char> rows_pulled;  // by shard: its sparse rows came (no sparse table: all true)
    bool reset_tables = false;      // the pull asks for every changed row: initial rows first
    TableRows wanted{};             // the lookup tables' rows it asks for
    // By shard: its part of `wanted`, and of a prefetch's warm rows.
    std::vector<TableRows> asked{};
    bool rows_only = false;          // no chunk: the lookup rows a first pull did not ask for
    bool memory_checked = false;     // its first lookup rows found the rows held of another version
  };

  static PullRegions PullRegionsOf(const Layout& layout, WireDType weight_wire);
  TensorKind KindOf(const Chunk& c) const { return layout_->tensors[c.tensor].kind; }
  size_t PulledBytes(const Chunk& c) const;
  std::vector<std::vector<std::vector<ChunkId>>> PullGroups() const;
  // A pull of `version` asking for the lookup tables' rows `rows`; with
  // rows_only, of nothing else (every chunk is then taken as pulled).
  Status StartPull(Step version, bool prefetch, const TableRows& rows, bool rows_only = false);
  // Takes every reply of the pull in flight into the model.
  Status AwaitPull(CoordinatorSession* session);
  // Unavailable once the connection to a shard was lost after a request still
  // owed a reply was sent (a shard that ended never answers, nor does its
  // restarted successor answer what it was not asked): the plan is given up at
  // once, not after rpc_timeout. A loss before the requests (a shard restarted
  // while the job was held) is not one: they went to the successor. Checked
  // every kStopCheck while replies are awaited.
  Status RepliesCanCome();
  StatusOr<Channel::Incoming> ReceivePulled(size_t s, CoordinatorSession* session);
  Status TakePullReply(size_t s, Channel::Incoming in);
  std::vector<ChunkId> NotPulled(size_t s) const;
  Pull MakePull(size_t s, Step version, std::vector<ChunkId> chunks) const;
  // The pull from shard s of the sparse tables' rows: changed since the versions held, and
  // the lookup tables' rows asked of it.
  Pull MakeRowsPull(size_t s, Step version) const;
  // Writes the rows of a lookup table pulled from shard s: those asked of it, in order.
  Status WriteLookedUpRows(size_t s, const SparseRowBytes& r);
  // Writes the sparse tables' initial rows into the model (held_: 0): of every
  // table, or of those --init_from did not seed (their rows are the file's).
  Status WriteInitialRows(bool seeded_too);
  // Pushes the rows of the seeded tables that are not their initializer's to
  // their shards (step -1, pages of rows alone) and waits for the replies.
  Status PushSeededRows();
  // The sparse rows of a pull reply from shard s into the model, from the message or the pull's
  // region (their data pointed there first).
  Status WritePulledRows(size_t s, std::vector<SparseRowBytes>* rows);
  Status WritePulled(size_t s, const PullReply& reply);
  Status WritePulledChunk(size_t s, ChunkId id, const void* data, size_t size);
  void ReleasePushRegions();

  // Constant after construction.
  const ParameterClientOptions options_;
  zmq::context_t* const context_;
  const std::atomic<bool>* const stop_;
  const Layout* const layout_;
  // Links to the shards (`shard_addresses` by id) and the pull regions and
  // groups of the layout's shard map (the constructor's, and Remap's).
  void SetLinks(const std::vector<std::string>& shard_addresses);

  // From the layout's shard map (Remap makes them again).
  PullRegions pull_regions_;
  std::vector<std::vector<std::vector<ChunkId>>> pull_groups_;  // by shard: each pull's chunks

  std::vector<ShardLink> links_;  // by shard
  ModelRunner* model_ = nullptr;
  bool model_initial_ = true;
  std::optional<PullInFlight> pulling_;
  uint64_t timeline_ = 0;       // SetTimeline
  std::vector<char> pulled_;    // by chunk: came in the pull in flight
  std::vector<Step> held_;      // by sparse table: the version the model's rows are at
  std::vector<char> seeded_;    // by sparse table: --init_from loaded it (SetModel)
  std::vector<char> lookup_;    // by sparse table: the model looks it up by rows (SetModel)
  bool warms_ = false;          // (SetModel)
  TableRows wanted_;            // WantRows
  TableRows present_;           // by lookup table: the rows the model has at present_version_
  Step present_version_{-1};
  std::vector<float> decoded_;  // a pulled chunk decoded from the weight wire dtype
  // Regions of block partials: named by pushes not all acknowledged yet, and free for the next
  // blocks.
  std::vector<std::shared_ptr<ShmRegion>> push_regions_used_, push_regions_free_;
  TransferCounts counts_;  // .pushes written by whichever thread pushes (see above)
};

}  // namespace eps
