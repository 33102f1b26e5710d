#include "server/shard_mover.h"

#include <glog/logging.h>
#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>

#include "schema/codec.h"

namespace eps {

uint32_t MoveCrc32(const void* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt part = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, p, part);
    p += part;
    size -= part;
  }
  return static_cast<uint32_t>(crc);
}

StatusOr<MoveReply> AnswerMoveRequest(ShardState& state, const MoveRequest& request) {
  if (request.step != state.version()) {
    return FailedPrecondition("chunks of version " + std::to_string(request.step.value()) +
                              " asked for; this shard serves " +
                              std::to_string(state.version().value()));
  }
  EPS_ASSIGN_OR_RETURN(std::vector<BlobRef> blobs, state.ExportChunks(request.chunks));
  EPS_ASSIGN_OR_RETURN(std::vector<BlobRef> rows, state.ExportPartitions(request.partitions));
  for (BlobRef& b : rows) blobs.push_back(std::move(b));
  MoveReply reply{request.generation, request.step, {}};
  for (BlobRef& b : blobs) {
    const uint32_t crc = MoveCrc32(b.data, b.size);
    reply.blobs.push_back({std::move(b.name), b.data, b.size, std::move(b.owner), crc});
  }
  return reply;
}

Status ShardMover::Start(const Reshard& reshard, const Layout& current) {
  Drop();
  if (reshard.map.generation <= current.map.generation) {
    return InvalidArgument("a move to shard map generation " +
                           std::to_string(reshard.map.generation) + ", which is not newer than " +
                           std::to_string(current.map.generation));
  }
  EPS_RETURN_IF_ERROR(
      reshard.map.Validate(current.chunks.size()).WithContext("the map of the move"));
  // What this shard gains, by holder, in chunk order, cut into pages; then the row partitions
  // of the sparse tables (none without tables: their owners change nothing then).
  std::map<ShardId, Holder::Page> gains;
  for (const Chunk& c : current.chunks) {
    if (reshard.map.chunk_owner[c.id.value()] == options_.shard && c.shard != options_.shard)
      gains[c.shard].chunks.push_back(c.id);
  }
  for (uint32_t p = 0; p < kRowPartitions && !current.sparse.empty(); ++p) {
    const ShardId holder = current.map.partition_owner[p];
    if (reshard.map.partition_owner[p] == options_.shard && holder != options_.shard)
      gains[holder].partitions.push_back(p);
  }
  std::vector<Holder> holders;
  for (auto& [shard, gained] : gains) {
    if (shard.value() >= reshard.addresses.size() || reshard.addresses[shard.value()].empty()) {
      return InvalidArgument("the move names no address of shard " + std::to_string(shard.value()));
    }
    Holder h;
    h.shard = shard;
    uint64_t bytes = 0;
    for (ChunkId id : gained.chunks) {
      const uint64_t b = current.ChunkBytes(current.chunks[id.value()]);
      if (h.pages.empty() || bytes + b > options_.page_bytes) {
        h.pages.emplace_back();
        bytes = 0;
      }
      h.pages.back().chunks.push_back(id);
      bytes += b;
    }
    h.partitions = std::move(gained.partitions);
    h.page_partitions = std::max<uint32_t>(1, options_.page_partitions);
    EPS_ASSIGN_OR_RETURN(
        h.channel, Channel::Connect(context_, reshard.addresses[shard.value()], options_.channel));
    holders.push_back(std::move(h));
  }
  reshard_ = reshard;
  from_ = current.map;
  tables_ = current.sparse.size();
  holders_ = std::move(holders);
  pending_ = holders_.size();
  for (Holder& h : holders_) {
    Status st = Ask(h);
    if (!st.ok()) {
      Fail(st);
      break;
    }
  }
  return OkStatus();
}

Status ShardMover::Ask(Holder& h) {
  if (h.next < h.pages.size()) {
    h.asked = h.pages[h.next++];
  } else {
    const size_t n = std::min(h.page_partitions, h.partitions.size() - h.partitions_asked);
    const auto first = h.partitions.begin() + static_cast<std::ptrdiff_t>(h.partitions_asked);
    h.asked =
        Holder::Page{{}, std::vector<uint32_t>(first, first + static_cast<std::ptrdiff_t>(n))};
    h.partitions_asked += n;
  }
  MoveRequest request{reshard_->map.generation, reshard_->step, h.asked.chunks, h.asked.partitions};
  EPS_RETURN_IF_ERROR(h.channel->Send(Envelope{options_.token, std::move(request)})
                          .WithContext("asking shard " + std::to_string(h.shard.value())));
  h.waiting = true;
  h.deadline = std::chrono::steady_clock::now() + options_.reply_wait;
  return OkStatus();
}

Status ShardMover::OnReply(Holder& h, const Envelope& reply) {
  const std::string from = "shard " + std::to_string(h.shard.value());
  if (const auto* err = std::get_if<ErrorReply>(&reply.body))
    return err->ToStatus().WithContext(from + " refused to hand its chunks over");
  const auto* moved = std::get_if<MoveReply>(&reply.body);
  if (moved == nullptr)
    return ProtocolError(from + " answered a MoveRequest with a " + BodyName(reply.body));
  if (moved->generation != reshard_->map.generation || moved->step != reshard_->step)
    return ProtocolError(from + " answered for another move");
  const Holder::Page& page = h.asked;
  uint64_t row_bytes = 0;
  const std::set<ChunkId> asked(page.chunks.begin(), page.chunks.end());
  // A page's rows: one blob per table, "rows/<table>/<the page's first partition>".
  const std::string rows_suffix =
      page.partitions.empty() ? "" : "/" + std::to_string(page.partitions.front());
  for (const MoveBlob& b : moved->blobs) {
    const size_t slash = b.name.find('/');
    char* end = nullptr;
    const unsigned long id =
        slash == std::string::npos ? 0 : std::strtoul(b.name.c_str() + slash + 1, &end, 10);
    const bool rows = !rows_suffix.empty() && b.name.rfind("rows/", 0) == 0 && end != nullptr &&
                      id < tables_ && std::string(end) == rows_suffix;
    if (!rows && (slash == std::string::npos || end == nullptr || *end != '\0' ||
                  asked.count(ChunkId(static_cast<uint32_t>(id))) == 0)) {
      return ProtocolError(from + " sent blob '" + b.name + "', of nothing asked for");
    }
    if (MoveCrc32(b.data, b.size) != b.crc32)
      return DataLoss("blob '" + b.name + "' from " + from + " fails its CRC-32");
    staged_.push_back({b.name, std::string(static_cast<const char*>(b.data), b.size)});
    bytes_in_ += b.size;
    if (rows) row_bytes += b.size;
  }
  h.waiting = false;
  if (!page.partitions.empty()) {  // as many partitions next as would take page_bytes
    const double per = static_cast<double>(row_bytes) / static_cast<double>(page.partitions.size());
    const double fit = per > 0 ? static_cast<double>(options_.page_bytes) / per : kRowPartitions;
    h.page_partitions = static_cast<size_t>(
        std::clamp(fit, 1.0, 8.0 * static_cast<double>(page.partitions.size())));
  }
  if (h.next < h.pages.size() || h.partitions_asked < h.partitions.size()) return Ask(h);
  h.channel.reset();  // done with this holder
  --pending_;
  return OkStatus();
}

void ShardMover::AppendPollItems(std::vector<zmq::pollitem_t>* items) {
  if (!active() || failure_) return;
  for (Holder& h : holders_) {
    if (h.waiting) items->push_back({static_cast<void*>(h.channel->socket()), 0, ZMQ_POLLIN, 0});
  }
}

void ShardMover::Poll() {
  if (!active() || failure_) return;
  const auto now = std::chrono::steady_clock::now();
  for (Holder& h : holders_) {
    while (h.waiting && !failure_) {
      StatusOr<Channel::Incoming> in = h.channel->TryReceive();
      if (in.status().code() == StatusCode::kDeadlineExceeded) {
        if (now >= h.deadline) {
          Fail(DeadlineExceeded("shard " + std::to_string(h.shard.value()) +
                                " did not hand its chunks over within " +
                                std::to_string(options_.reply_wait.count()) + " ms"));
        }
        break;
      }
      Status st = in.ok() ? (in->envelope.ok() ? OnReply(h, *in->envelope) : in->envelope.status())
                          : in.status();
      if (!st.ok()) Fail(st);
    }
  }
}

std::chrono::milliseconds ShardMover::NextTimeout() const {
  auto next = std::chrono::steady_clock::time_point::max();
  if (active() && !failure_) {
    for (const Holder& h : holders_) {
      if (h.waiting) next = std::min(next, h.deadline);
    }
  }
  if (next == std::chrono::steady_clock::time_point::max()) return std::chrono::milliseconds::max();
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      next - std::chrono::steady_clock::now()));
}

void ShardMover::Fail(const Status& st) {
  LOG(WARNING) << "the move to shard map generation " << reshard_->map.generation
               << " failed: " << st.ToString();
  failure_ = st;
  holders_.clear();
  staged_.clear();
}

std::vector<Blob> ShardMover::Take() {
  std::vector<Blob> out = std::move(staged_);
  Drop();
  return out;
}

namespace {
constexpr char kMoveKey[] = "move";
constexpr char kNamesKey[] = "move/names";
constexpr char kFromKey[] = "move/from";  // the map the move leaves, as a Reshard's

StatusOr<std::string> EncodeReshard(const Reshard& r) {
  EPS_ASSIGN_OR_RETURN(std::vector<Frame> frames, Encode(Envelope{"", r}));
  return std::string(static_cast<const char*>(frames[0].data), frames[0].size);
}

StatusOr<Reshard> DecodeReshard(const StateStore& store, const char* key) {
  EPS_ASSIGN_OR_RETURN(std::string record, store.Get(key));
  auto frame = std::make_shared<std::string>(std::move(record));
  StatusOr<Envelope> envelope = Decode({Frame{frame->data(), frame->size(), frame}});
  const auto* reshard = envelope.ok() ? std::get_if<Reshard>(&envelope->body) : nullptr;
  if (reshard == nullptr) return DataLoss("the staged move in " + store.path() + " is damaged");
  return *reshard;
}
std::string BlobKey(const std::string& name) { return "move/blob/" + name; }

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t eol = s.find('\n', at);
    out.push_back(s.substr(at, eol - at));
    if (eol == std::string::npos) break;
    at = eol + 1;
  }
  return out;
}
}  // namespace

Status ShardMover::Persist(StateStore* store) const {
  if (!staged()) return FailedPrecondition("no staged move to persist");
  EPS_ASSIGN_OR_RETURN(std::string record, EncodeReshard(*reshard_));
  EPS_ASSIGN_OR_RETURN(std::string from, EncodeReshard(Reshard{from_, reshard_->step, {}}));
  std::vector<std::pair<std::string, std::string>> entries;
  std::string names;
  for (const Blob& b : staged_) {
    entries.emplace_back(BlobKey(b.name), b.bytes);
    names += b.name + "\n";
  }
  entries.emplace_back(kNamesKey, names);
  entries.emplace_back(kFromKey, from);
  entries.emplace_back(kMoveKey, record);
  return store->PutAll(entries);
}

StatusOr<bool> ShardMover::Recover(const StateStore& store) {
  StatusOr<Reshard> reshard = DecodeReshard(store, kMoveKey);
  if (reshard.status().code() == StatusCode::kNotFound) return false;
  EPS_RETURN_IF_ERROR(reshard.status());
  EPS_ASSIGN_OR_RETURN(Reshard from, DecodeReshard(store, kFromKey));
  EPS_ASSIGN_OR_RETURN(std::string names, store.Get(kNamesKey));
  std::vector<Blob> blobs;
  for (const std::string& name : SplitLines(names)) {
    EPS_ASSIGN_OR_RETURN(std::string bytes, store.Get(BlobKey(name)));
    blobs.push_back({name, std::move(bytes)});
  }
  Drop();
  reshard_ = std::move(reshard).value();
  from_ = std::move(from.map);
  staged_ = std::move(blobs);
  for (const Blob& b : staged_) bytes_in_ += b.bytes.size();
  return true;
}

Status ShardMover::Forget(StateStore* store) {
  StatusOr<std::string> names = store->Get(kNamesKey);
  if (names.status().code() == StatusCode::kNotFound) return store->Delete(kMoveKey);
  EPS_RETURN_IF_ERROR(names.status());
  // The record first: a store holding blobs without it holds no staged move.
  EPS_RETURN_IF_ERROR(store->Delete(kMoveKey));
  for (const std::string& name : SplitLines(*names))
    EPS_RETURN_IF_ERROR(store->Delete(BlobKey(name)));
  EPS_RETURN_IF_ERROR(store->Delete(kFromKey));
  return store->Delete(kNamesKey);
}

void ShardMover::Drop() {
  reshard_.reset();
  holders_.clear();
  staged_.clear();
  pending_ = 0;
  bytes_in_ = 0;
  failure_.reset();
}

}  // namespace eps
