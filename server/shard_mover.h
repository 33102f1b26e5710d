// A shard's side of a move between shard maps (docs/design.md, "Elastic
// shards"): the chunks and the row partitions of the sparse tables a Reshard
// gives this shard and the map it serves gives another are asked of their
// holders, directly (MoveRequest, one page of about `page_bytes` of values or
// rows at a time per holder), each blob checked against
// the CRC-32 its holder computed, and staged until the shard commits the move
// (ShardState::AdoptMap with Take()) or drops it.
//
// Owned by the shard's event loop, which polls its sockets: not thread-safe.
// It opens one DEALER per holder, with the shard's own CURVE options (every
// server of a job serves with the same key pair, so each admits the others).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/layout.h"
#include "schema/channel.h"
#include "schema/messages.h"
#include "server/shard_state.h"
#include "storage/state_store.h"

namespace eps {

// zlib's CRC-32 of `size` bytes: what a MoveBlob carries.
uint32_t MoveCrc32(const void* data, size_t size);

// A holder's answer to a MoveRequest: the chunks' blobs at the version `state`
// serves (ShardState::ExportChunks, shared, not copied) and the sparse tables'
// rows of the partitions asked (ShardState::ExportPartitions), each blob with
// its CRC-32. FailedPrecondition: the request is of another version;
// InvalidArgument: a chunk or a partition is not this shard's.
StatusOr<MoveReply> AnswerMoveRequest(ShardState& state, const MoveRequest& request);

class ShardMover {
 public:
  struct Options {
    ShardId shard;
    std::string token;               // the job's, on every request
    Channel::Options channel;        // how to reach the other shards
    uint64_t page_bytes = 32 << 20;  // chunk values per MoveRequest (their slots come too)
    // Row partitions in the first MoveRequest of rows; the next ones ask for as
    // many as the rows of the previous took page_bytes (at most 8 times more).
    uint32_t page_partitions = 64;
    std::chrono::milliseconds reply_wait{60000};  // per request
  };
  ShardMover(Options options, zmq::context_t* context)
      : options_(std::move(options)), context_(context) {}

  // Starts the move `reshard` describes from `current`, the layout this shard
  // serves at version reshard.step: asks each holder for its first page. Any
  // move begun before is dropped. InvalidArgument: the map is not newer than
  // current's or not one of its chunks, or names a holder without an address.
  // A move that gains nothing is staged at once.
  Status Start(const Reshard& reshard, const Layout& current);

  bool active() const { return reshard_.has_value(); }
  // Every chunk gained is here, checked.
  bool staged() const { return active() && !failure_ && pending_ == 0; }
  // Why the move cannot go on (a holder's error, a bad CRC, a reply past its wait).
  const std::optional<Status>& failure() const { return failure_; }
  const Reshard& reshard() const { return *reshard_; }
  // The map the move leaves (the layout's at Start).
  const ShardMap& from() const { return from_; }
  uint64_t bytes_in() const { return bytes_in_; }

  // The sockets it waits on, for the loop's poll (pointers valid until the next call that
  // changes the move).
  void AppendPollItems(std::vector<zmq::pollitem_t>* items);
  // Reads every reply that arrived, asks for the next pages, and fails the move on a
  // reply past its wait.
  void Poll();
  // Until the first reply's deadline (max() when none is awaited).
  std::chrono::milliseconds NextTimeout() const;

  // The staged blobs (checkpoint blobs of the gained chunks), for AdoptMap; the move ends.
  std::vector<Blob> Take();
  void Drop();

  // ---- durably staged (with a store) ----
  // A staged move is written to the shard's store (keys "move", "move/names",
  // "move/blob/<name>", one synced batch) before the shard says it is ready, so
  // that a shard restarted after the coordinator committed the move can still
  // take its part without its holders (who may have dropped theirs).
  Status Persist(StateStore* store) const;
  // The move a store holds staged, restaged here (active and staged, no holder
  // asked). False when the store holds none; DataLoss for a damaged one.
  StatusOr<bool> Recover(const StateStore& store);
  // Removes the staged move from the store (after the move's checkpoint landed,
  // or when the move is abandoned). OK when there is none.
  static Status Forget(StateStore* store);

 private:
  struct Holder {
    ShardId shard;
    std::unique_ptr<Channel> channel;
    struct Page {
      std::vector<ChunkId> chunks;
      std::vector<uint32_t> partitions;  // rows of every sparse table in them
    };
    std::vector<Page> pages;  // of chunks
    size_t next = 0;          // the page of chunks to ask for next
    // The row partitions gained from this holder, asked for after the chunks,
    // `page_partitions` at a time: a number that follows the bytes the rows
    // of the previous page took (their sizes are not known beforehand).
    std::vector<uint32_t> partitions;
    size_t partitions_asked = 0;
    size_t page_partitions = 0;
    Page asked;  // awaited while waiting
    bool waiting = false;
    std::chrono::steady_clock::time_point deadline;
  };
  Status Ask(Holder& h);
  Status OnReply(Holder& h, const Envelope& reply);
  void Fail(const Status& st);

  const Options options_;
  zmq::context_t* const context_;
  std::optional<Reshard> reshard_;
  size_t tables_ = 0;  // the layout's sparse tables
  ShardMap from_;
  std::vector<Holder> holders_;
  size_t pending_ = 0;  // holders not done
  std::vector<Blob> staged_;
  uint64_t bytes_in_ = 0;
  std::optional<Status> failure_;
};

}  // namespace eps
