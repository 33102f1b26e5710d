#include "worker/param_client.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "common/row_init.h"
#include "schema/shm_rows.h"
#include "worker/wait.h"

namespace eps {
namespace {

TensorKind KindIn(const Layout& layout, const Chunk& c) { return layout.tensors[c.tensor].kind; }

// The bytes of a chunk as pulled: a parameter in the weight wire dtype, anything else as it is.
size_t PulledBytesIn(const Layout& layout, WireDType weight_wire, const Chunk& c) {
  const bool encoded =
      weight_wire != WireDType::kFP32 && KindIn(layout, c) == TensorKind::kParameter;
  return layout.WireBytes(c, encoded ? weight_wire : WireDType::kFP32);
}

}  // namespace

ParameterClient::ParameterClient(ParameterClientOptions options, zmq::context_t* context,
                                 const std::atomic<bool>* stop, const Layout* layout,
                                 const std::vector<std::string>& shard_addresses)
    : options_(std::move(options)), context_(context), stop_(stop), layout_(layout) {
  SetLinks(shard_addresses);
}

void ParameterClient::SetLinks(const std::vector<std::string>& shard_addresses) {
  pull_regions_ = PullRegionsOf(*layout_, options_.weight_wire);
  pull_groups_ = PullGroupsOf(*layout_, options_.weight_wire, options_.frozen);
  links_.clear();
  for (size_t s = 0; s < shard_addresses.size(); ++s) links_.emplace_back(s, shard_addresses[s]);
}

Status ParameterClient::Remap(const std::vector<std::string>& shard_addresses) {
  if (shard_addresses.size() != layout_->num_shards)
    return ProtocolError("the shard address list does not match the shard map");
  pulling_.reset();
  for (ShardLink& link : links_) link.outstanding = 0;  // no plan is in flight
  ReleasePushRegions();
  SetLinks(shard_addresses);
  return Reconnect();
}

size_t ParameterClient::PulledBytes(const Chunk& c) const {
  return PulledBytesIn(*layout_, options_.weight_wire, c);
}

Status ParameterClient::SetModel(ModelRunner* model) {
  model_ = model;
  model_initial_ = true;
  // A table --init_from loaded holds the file's rows, which are its version 0 (the shards get
  // them with the initial values): they stay.
  seeded_.assign(layout_->sparse.size(), 0);
  lookup_.assign(layout_->sparse.size(), 0);
  const std::vector<std::string>& loaded = model->init_report().loaded;
  for (size_t t = 0; t < layout_->sparse.size(); ++t) {
    const std::string& name = layout_->tensors[layout_->sparse[t]].name;
    seeded_[t] = std::find(loaded.begin(), loaded.end(), name) != loaded.end();
    lookup_[t] = model->Lookup(layout_->sparse[t]);
  }
  warms_ =
      model->NamesHeldTableRows() && std::find(lookup_.begin(), lookup_.end(), 0) != lookup_.end();
  present_.assign(layout_->sparse.size(), {});
  present_version_ = Step(-1);
  return WriteInitialRows(/*seeded_too=*/false);
}

Status ParameterClient::WriteInitialRows(bool seeded_too) {
  held_.assign(layout_->sparse.size(), Step(0));
  std::vector<float> rows;
  for (size_t t = 0; t < layout_->sparse.size(); ++t) {
    if ((seeded_[t] && !seeded_too) || lookup_[t]) continue;  // a lookup table's rows: pulled
    const uint32_t i = layout_->sparse[t];
    const TensorSpec& spec = layout_->tensors[i];
    const size_t n = static_cast<size_t>(spec.shape[0]), dim = static_cast<size_t>(spec.shape[1]);
    constexpr size_t kRowsAWrite = 4096;
    for (size_t lo = 0; lo < n; lo += kRowsAWrite) {
      const size_t hi = std::min(n, lo + kRowsAWrite);
      rows.resize((hi - lo) * dim);
      for (size_t r = lo; r < hi; ++r) {
        InitialRow(RowInitializer{}, options_.seed, static_cast<uint32_t>(t), r,
                   &rows[(r - lo) * dim], dim);
      }
      EPS_RETURN_IF_ERROR(
          model_->Write(i, lo * dim * sizeof(float), rows.data(), rows.size() * sizeof(float)));
    }
  }
  return OkStatus();
}

Pull ParameterClient::MakeRowsPull(size_t s, Step version) const {
  Pull pull{version, {}, WireDType::kFP32, std::nullopt, {}};
  pull.timeline = pulling_->timeline;
  if (const ShmRegion* region = links_[s].pull_region.get()) {
    pull.shm = region->ref();
    pull.shm_rows_at = pull_regions_.rows_at[s];
  }
  for (size_t t = 0; t < held_.size(); ++t) {
    // From scratch: every stored row (since -1), the seeded ones too.
    const Step from_scratch(seeded_[t] ? -1 : 0);
    SparseRead read{static_cast<uint32_t>(t), pulling_->reset_tables ? from_scratch : held_[t]};
    // A lookup's rows; a held table's are the rows a prefetch's plan touches (warm rows).
    if (!pulling_->asked[s][t].empty() || lookup_[t]) {
      auto ids = std::make_shared<std::vector<uint64_t>>(pulling_->asked[s][t]);
      read.lookup = lookup_[t];
      read.rows = static_cast<uint32_t>(ids->size());
      read.ids = {ChunkId(0), ids->data(), ids->size() * sizeof(uint64_t), ids};
    }
    pull.sparse.push_back(std::move(read));
  }
  return pull;
}

Status ParameterClient::WriteLookedUpRows(size_t s, const SparseRowBytes& r) {
  PullInFlight& p = *pulling_;
  const uint32_t i = layout_->sparse[r.table];
  const TensorSpec& spec = layout_->tensors[i];
  const std::vector<uint64_t>& asked = p.asked[s][r.table];
  if (r.rows != asked.size() ||
      (r.rows > 0 && std::memcmp(r.ids.data, asked.data(), r.ids.size) != 0)) {
    return ProtocolError("shard " + std::to_string(s) + " answered a lookup of table " + spec.name +
                         " with other rows than it was asked for");
  }
  if (!p.memory_checked && present_version_ != p.version) {
    // The first rows of another version: the rows held are of no version any more (a pull
    // dropped half-way leaves some of each), and their memory may go back.
    p.memory_checked = true;
    for (std::vector<uint64_t>& present : present_) present.clear();
    present_version_ = Step(-1);
    size_t held = 0;
    for (size_t t = 0; t < lookup_.size(); ++t)
      held += lookup_[t] ? model_->TableHeldBytes(layout_->sparse[t]) : 0;
    if (held > options_.lookup_resident_bytes) {
      for (size_t t = 0; t < lookup_.size(); ++t) {
        if (lookup_[t]) EPS_RETURN_IF_ERROR(model_->DropTableRows(layout_->sparse[t]));
      }
    }
  }
  EPS_RETURN_IF_ERROR(
      model_->WriteTableRows(i, asked.data(), static_cast<const float*>(r.values.data), r.rows));
  counts_.lookup_rows += r.rows;
  return OkStatus();
}

// Rows of the sparse tables from shard s: each table once, ids ascending and
// the shard's own, values of whole rows.
Status ParameterClient::WritePulledRows(size_t s, std::vector<SparseRowBytes>* in) {
  PullInFlight& p = *pulling_;
  const std::vector<SparseRowBytes>& rows = *in;
  if (p.rows_pulled[s] || rows.size() != held_.size())
    return ProtocolError("sparse rows that no pull asked for");
  if (AnyInShm(rows)) {  // in the region the pull named, after its chunks' places
    ShardLink& link = links_[s];
    if (link.pull_region == nullptr)
      return ProtocolError("sparse rows in shared memory that no pull named");
    const ShmRegion& region = *link.pull_region;
    Status at = PointRows(region.data(), region.ref(), pull_regions_.rows_at[s], in);
    if (!at.ok()) return ProtocolError(at.message());
    link.shm_pushes = !link.shm_refused;  // the shard can map this worker's regions
  }
  if (p.reset_tables) {  // the first rows of a pull from scratch: the initial rows under them
    EPS_RETURN_IF_ERROR(WriteInitialRows(/*seeded_too=*/true));
    p.reset_tables = false;
  }
  p.rows_pulled[s] = 1;
  for (size_t t = 0; t < rows.size(); ++t) {
    const SparseRowBytes& r = rows[t];
    const uint32_t i = layout_->sparse[t];
    const TensorSpec& spec = layout_->tensors[i];
    const uint64_t dim = static_cast<uint64_t>(spec.shape[1]);
    if (r.table != t || r.values.size != uint64_t{r.rows} * dim * sizeof(float))
      return ProtocolError("sparse rows of table " + spec.name + " do not match the layout");
    const auto bytes = static_cast<int64_t>(r.ids.size + r.values.size);
    counts_.pull_bytes += bytes;
    (r.in_shm ? counts_.shm_row_bytes_pulled : counts_.inline_row_bytes_pulled) += bytes;
    if (lookup_[t]) {
      EPS_RETURN_IF_ERROR(WriteLookedUpRows(s, r));
      continue;
    }
    const auto* ids = static_cast<const uint8_t*>(r.ids.data);
    const auto* values = static_cast<const float*>(r.values.data);
    for (uint32_t k = 0; k < r.rows; ++k) {
      uint64_t id;
      std::memcpy(&id, ids + k * sizeof(uint64_t), sizeof id);
      if (id >= spec.RowBound() || layout_->ShardOfRow(id).value() != s) {
        return ProtocolError("pulled row " + std::to_string(id) + " of table " + spec.name +
                             " is not shard " + std::to_string(s) + "'s");
      }
      EPS_RETURN_IF_ERROR(
          model_->Write(i, id * dim * sizeof(float), values + k * dim, dim * sizeof(float)));
    }
  }
  model_initial_ = false;
  return OkStatus();
}

ParameterClient::PullRegions ParameterClient::PullRegionsOf(const Layout& layout,
                                                            WireDType weight_wire) {
  PullRegions r{std::vector<uint64_t>(layout.chunks.size(), 0),
                std::vector<uint64_t>(layout.num_shards, 0),
                std::vector<uint64_t>(layout.num_shards, ShmRegion::kHeaderBytes)};
  for (const Chunk& c : layout.chunks) {
    if (KindIn(layout, c) == TensorKind::kLoss) continue;
    uint64_t& end = r.size[c.shard.value()];
    r.offset[c.id.value()] = end;
    end += Aligned(PulledBytesIn(layout, weight_wire, c));
  }
  if (layout.sparse.empty()) return r;
  for (size_t s = 0; s < r.size.size(); ++s) {
    r.rows_at[s] = r.size[s];
    r.size[s] += kShmRowsBytes;
  }
  return r;
}

Status ParameterClient::Reconnect() {
  pulling_.reset();
  ReleasePushRegions();
  for (ShardLink& link : links_) {
    EPS_RETURN_IF_ERROR(link.Reconnect(context_, options_.shm ? pull_regions_.size[link.index] : 0,
                                       options_.curve));
  }
  return OkStatus();
}

Status ParameterClient::SendPush(size_t s, Push push) {
  // The initial values go to every shard, also one that holds none of them (only the loss, or
  // only sparse rows): its empty push gives it version 0 all the same.
  if (!links_[s].member() || (push.chunks.empty() && push.shm_chunks.empty() &&
                              push.sparse.empty() && push.step.value() >= 0))
    return OkStatus();
  ++(push.shm_chunks.empty() && !AnyInShm(push.sparse) ? counts_.inline_pushes
                                                       : counts_.shm_pushes);
  for (const ChunkBytes& c : push.chunks) counts_.push_bytes += static_cast<int64_t>(c.size);
  for (const ShmChunk& c : push.shm_chunks) counts_.push_bytes += static_cast<int64_t>(c.size);
  for (const SparseRowBytes& r : push.sparse) {
    const auto bytes = static_cast<int64_t>(r.ids.size + r.values.size);
    counts_.push_bytes += bytes;
    (r.in_shm ? counts_.shm_row_bytes_pushed : counts_.inline_row_bytes_pushed) += bytes;
  }
  if (links_[s].outstanding == 0) links_[s].push_disconnects = links_[s].pushes->Disconnects();
  EPS_RETURN_IF_ERROR(links_[s].pushes->Send(Envelope{options_.token, std::move(push)}));
  ++links_[s].outstanding;
  return OkStatus();
}

Status ParameterClient::RepliesCanCome() {
  for (ShardLink& link : links_) {
    const bool pushes_owed =
        link.outstanding > 0 && link.pushes->Disconnects() > link.push_disconnects;
    const bool pulls_owed = pulling_.has_value() && pulling_->answers[link.index] > 0 &&
                            link.pulls->Disconnects() > link.pull_disconnects;
    if (pushes_owed || pulls_owed) {
      return Unavailable("the connection to shard " + std::to_string(link.index) +
                         " was lost while it owed replies (it ended or restarted)");
    }
  }
  return OkStatus();
}

Status ParameterClient::AwaitPushes() {
  std::vector<Channel*> watch;
  std::vector<std::pair<bool, size_t>> watched;  // by watched channel: (a push socket, its shard)
  while (true) {
    watch.clear();
    watched.clear();
    for (ShardLink& link : links_) {
      if (link.outstanding == 0) continue;
      watch.push_back(link.pushes.get());
      watched.emplace_back(true, link.index);
    }
    if (watch.empty()) {
      ReleasePushRegions();
      return OkStatus();
    }
    for (size_t s = 0; pulling_.has_value() && pulling_->failed.ok() && s < links_.size(); ++s) {
      if (pulling_->answers[s] == 0) continue;
      watch.push_back(links_[s].pulls.get());
      watched.emplace_back(false, s);
    }
    // Each message may wait rpc_timeout, as each reply did when they were awaited one by one.
    EPS_ASSIGN_OR_RETURN(const size_t ready, AwaitAny(watch, options_.rpc_timeout, *stop_,
                                                      [this] { return RepliesCanCome(); }));
    EPS_ASSIGN_OR_RETURN(Channel::Incoming in, watch[ready]->TryReceive());
    const auto [push, s] = watched[ready];
    if (!push) {
      Status st = TakePullReply(s, std::move(in));
      if (!st.ok()) pulling_->failed = std::move(st);
      continue;
    }
    ShardLink& link = links_[s];
    --link.outstanding;
    if (!in.envelope.ok()) {
      return in.envelope.status().WithContext("bad reply from shard " + std::to_string(s));
    }
    if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
      if (err->code == StatusCode::kUnimplemented && link.shm_pushes) {
        // The shard cannot map this worker's regions after all (the plan is
        // abandoned and pushed again).
        LOG(WARNING) << "shard " << s << " cannot read pushes in shared memory (" << err->message
                     << "): pushing to it through the socket from now on";
        link.shm_refused = true;
        ++counts_.shm_push_refusals;
        link.shm_pushes = false;
      }
      return err->ToStatus().WithContext("shard " + std::to_string(s));
    }
    if (!std::holds_alternative<PushReply>(in.envelope->body)) {
      return ProtocolError(std::string("shard ") + std::to_string(s) + " answered a push with " +
                           BodyName(in.envelope->body));
    }
  }
}

Status ParameterClient::StartPull(Step version, bool prefetch, const TableRows& wanted,
                                  bool rows_only) {
  const size_t n = links_.size();
  pulling_ = PullInFlight{version,
                          timeline_,
                          prefetch,
                          std::vector<size_t>(n),
                          std::vector<char>(n, 0),
                          std::vector<char>(n, 0),
                          OkStatus(),
                          {},
                          false};
  pulled_.assign(layout_->chunks.size(), rows_only ? 1 : 0);
  // The sparse tables' rows: none to ask for at the version held, and all of them again after a
  // rollback to before it; the lookup tables' rows asked for, each of its shard.
  bool rows = false;
  for (size_t t = 0; t < held_.size(); ++t) {
    if (lookup_[t]) continue;
    rows = rows || held_[t] != version;
    pulling_->reset_tables = pulling_->reset_tables || held_[t] > version;
  }
  PullInFlight& p = *pulling_;
  p.rows_only = rows_only;
  p.wanted.assign(held_.size(), {});
  p.asked.assign(n, TableRows(held_.size()));
  for (size_t t = 0; t < held_.size() && t < wanted.size(); ++t) {
    // A held table's rows are a prefetch's warm rows, sent with its read of the changed rows.
    if (!lookup_[t] && !(prefetch && warms_)) continue;
    for (uint64_t id : wanted[t]) p.asked[layout_->ShardOfRow(id).value()][t].push_back(id);
    if (!lookup_[t]) continue;
    p.wanted[t] = wanted[t];
    rows = rows || !wanted[t].empty();
  }
  pulling_->rows_pulled.assign(n, rows ? 0 : 1);
  for (size_t s = 0; s < n; ++s) {
    if (!links_[s].member()) {  // a gap in the shard map: it holds nothing
      pulling_->rows_pulled[s] = 1;
      continue;
    }
    links_[s].pull_disconnects = links_[s].pulls->Disconnects();
    for (const std::vector<ChunkId>& group : pull_groups_[s]) {
      if (rows_only) break;
      EPS_RETURN_IF_ERROR(
          links_[s].pulls->Send(Envelope{options_.token, MakePull(s, version, group)}));
      ++pulling_->answers[s];
    }
    if (!rows) continue;
    EPS_RETURN_IF_ERROR(links_[s].pulls->Send(Envelope{options_.token, MakeRowsPull(s, version)}));
    ++pulling_->answers[s];
  }
  return OkStatus();
}

StatusOr<Channel::Incoming> ParameterClient::ReceivePulled(size_t s, CoordinatorSession* session) {
  Channel* shard = links_[s].pulls.get();
  while (session != nullptr && session->running_ahead()) {
    if (stop_->load()) return Stopped();
    EPS_RETURN_IF_ERROR(RepliesCanCome());
    StatusOr<size_t> ready = AwaitReadable({shard, session->channel()}, kStopCheck);
    if (ready.ok() && *ready == 0) break;
    const StatusCode code = ready.status().code();
    if (!ready.ok() && code != StatusCode::kDeadlineExceeded && code != StatusCode::kAborted) {
      return ready.status();
    }
    EPS_RETURN_IF_ERROR(session->ConfirmPlan(/*wait=*/false));
  }
  return ReceiveOrStop(shard, options_.rpc_timeout, *stop_, [this] { return RepliesCanCome(); });
}

Status ParameterClient::PullInto(Step version, CoordinatorSession* session) {
  if (pulling_.has_value() && (pulling_->version != version || pulling_->timeline != timeline_))
    EPS_RETURN_IF_ERROR(Reconnect());
  if (!pulling_.has_value()) EPS_RETURN_IF_ERROR(StartPull(version, /*prefetch=*/false, wanted_));
  EPS_RETURN_IF_ERROR(AwaitPull(session));
  // The lookup tables' rows the compute reads that the pull did not ask for (a prefetch for
  // another plan than the one that came).
  TableRows missing(held_.size());
  bool any = false;
  for (size_t t = 0; t < held_.size() && t < wanted_.size(); ++t) {
    if (!lookup_[t]) continue;
    std::set_difference(wanted_[t].begin(), wanted_[t].end(), present_[t].begin(),
                        present_[t].end(), std::back_inserter(missing[t]));
    any = any || !missing[t].empty();
  }
  if (!any) return OkStatus();
  ++counts_.lookup_repulls;
  EPS_RETURN_IF_ERROR(StartPull(version, /*prefetch=*/false, missing, /*rows_only=*/true));
  return AwaitPull(session);
}

Status ParameterClient::AwaitPull(CoordinatorSession* session) {
  const Step version = pulling_->version;
  EPS_RETURN_IF_ERROR(pulling_->failed);
  for (size_t s = 0; s < links_.size(); ++s) {
    while (pulling_->answers[s] > 0) {
      EPS_ASSIGN_OR_RETURN(Channel::Incoming in, ReceivePulled(s, session));
      EPS_RETURN_IF_ERROR(TakePullReply(s, std::move(in)));
    }
    const std::vector<ChunkId> missing = NotPulled(s);
    if (!missing.empty()) {
      return ProtocolError("shard " + std::to_string(s) + " did not send chunk " +
                           std::to_string(missing[0].value()));
    }
    if (!pulling_->rows_pulled[s])
      return ProtocolError("shard " + std::to_string(s) + " did not send its sparse rows");
  }
  held_.assign(held_.size(), version);
  for (size_t t = 0; t < held_.size(); ++t) {
    if (!lookup_[t]) continue;
    std::vector<uint64_t>& present = present_[t];
    if (pulling_->rows_only && present_version_ == version) {
      std::vector<uint64_t> both;
      std::set_union(present.begin(), present.end(), pulling_->wanted[t].begin(),
                     pulling_->wanted[t].end(), std::back_inserter(both));
      present = std::move(both);
    } else {
      present = std::move(pulling_->wanted[t]);
    }
  }
  present_version_ = version;
  pulling_.reset();
  return OkStatus();
}

// A prefetched pull may have waited at the shard longer than it may (a slow
// step): once every group is answered, what did not come is asked for again,
// now that it is due.
Status ParameterClient::TakePullReply(size_t s, Channel::Incoming in) {
  PullInFlight& p = *pulling_;
  const std::string from = "shard " + std::to_string(s);
  --p.answers[s];
  if (!in.envelope.ok()) return in.envelope.status().WithContext("bad pull reply from " + from);
  if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
    const bool late =
        err->code == StatusCode::kDeadlineExceeded || err->code == StatusCode::kUnavailable;
    if (!p.prefetch || p.pulled_again[s] || !late) {
      return err->ToStatus().WithContext("pull from " + from);
    }
    p.expired[s] = 1;
  } else {
    auto* reply = std::get_if<PullReply>(&in.envelope->body);
    if (reply == nullptr || reply->version != p.version) {
      return ProtocolError(from + " answered a pull with something else");
    }
    EPS_RETURN_IF_ERROR(WritePulled(s, *reply).WithContext("pull from " + from));
    if (!reply->sparse.empty())
      EPS_RETURN_IF_ERROR(WritePulledRows(s, &reply->sparse).WithContext("pull from " + from));
  }
  if (p.answers[s] == 0 && p.expired[s] && !p.pulled_again[s]) {
    LOG(INFO) << "the prefetched pull of version " << p.version << " expired at " << from
              << ": pulling again";
    p.pulled_again[s] = 1;
    ++counts_.prefetches_pulled_again;
    const std::vector<ChunkId> missing = NotPulled(s);
    links_[s].pull_disconnects = links_[s].pulls->Disconnects();  // nothing owed until now
    if (!missing.empty()) {
      EPS_RETURN_IF_ERROR(
          links_[s].pulls->Send(Envelope{options_.token, MakePull(s, p.version, missing)}));
      ++p.answers[s];
    }
    if (!p.rows_pulled[s]) {
      EPS_RETURN_IF_ERROR(
          links_[s].pulls->Send(Envelope{options_.token, MakeRowsPull(s, p.version)}));
      ++p.answers[s];
    }
  }
  return OkStatus();
}

std::vector<ChunkId> ParameterClient::NotPulled(size_t s) const {
  std::vector<ChunkId> out;
  for (const auto& group : pull_groups_[s]) {
    for (ChunkId id : group) {
      if (!pulled_[id.value()]) out.push_back(id);
    }
  }
  return out;
}

// A pull of `chunks` from shard s, naming the link's shared-memory region, if
// any, and each chunk's place in it.
Pull ParameterClient::MakePull(size_t s, Step version, std::vector<ChunkId> chunks) const {
  Pull pull{version, std::move(chunks), options_.weight_wire, std::nullopt, {}};
  pull.timeline = pulling_->timeline;
  if (const ShmRegion* region = links_[s].pull_region.get()) {
    pull.shm = region->ref();
    for (ChunkId c : pull.chunks) pull.shm_offsets.push_back(pull_regions_.offset[c.value()]);
  }
  return pull;
}

// Writes the chunks of a pull reply from shard s into the model, from the
// message or from the pull's shared-memory region, and marks them in pulled_.
Status ParameterClient::WritePulled(size_t s, const PullReply& reply) {
  for (const ChunkBytes& cb : reply.chunks) {
    EPS_RETURN_IF_ERROR(WritePulledChunk(s, cb.chunk, cb.data, cb.size));
    counts_.pull_bytes += static_cast<int64_t>(cb.size);
  }
  if (reply.shm_chunks.empty()) {
    ++(AnyInShm(reply.sparse) ? counts_.shm_replies : counts_.inline_replies);
    return OkStatus();
  }
  ShardLink& link = links_[s];
  const ShmRegion* region = link.pull_region.get();
  if (region == nullptr) return ProtocolError("a pull reply in shared memory that no pull named");
  for (const ShmChunk& c : reply.shm_chunks) {
    if (c.chunk.value() >= layout_->chunks.size() ||
        c.offset != pull_regions_.offset[c.chunk.value()]) {
      return ProtocolError("pulled chunk " + std::to_string(c.chunk.value()) +
                           " is not where the pull asked for it");
    }
    EPS_RETURN_IF_ERROR(WritePulledChunk(s, c.chunk, region->data() + c.offset, c.size));
    counts_.pull_bytes += static_cast<int64_t>(c.size);
  }
  ++counts_.shm_replies;
  link.shm_pushes = !link.shm_refused;  // the shard can map this worker's regions
  return OkStatus();
}

// Writes one pulled chunk of shard s into the model, decoding a parameter
// from the weight wire dtype.
Status ParameterClient::WritePulledChunk(size_t s, ChunkId id, const void* data, size_t size) {
  if (id.value() >= layout_->chunks.size()) return ProtocolError("pulled an unknown chunk");
  const Chunk& c = layout_->chunks[id.value()];
  if (c.shard.value() != s || size != PulledBytes(c) || KindOf(c) == TensorKind::kLoss ||
      pulled_[id.value()]) {
    return ProtocolError("pulled chunk " + std::to_string(id.value()) +
                         " does not match the layout");
  }
  pulled_[id.value()] = 1;
  model_initial_ = false;
  const size_t elem = DTypeSize(layout_->tensors[c.tensor].dtype);
  const WireDType wire = options_.weight_wire;
  if (wire == WireDType::kFP32 || KindOf(c) != TensorKind::kParameter) {
    return model_->Write(c.tensor, c.offset * elem, data, size);
  }
  decoded_.resize(c.numel);
  DecodeWire(wire, data, decoded_.size(), decoded_.data());
  return model_->Write(c.tensor, c.offset * elem, decoded_.data(), decoded_.size() * sizeof(float));
}

Status ParameterClient::PushInitialValues() {
  // A prefetch (of a step >= 1) is of no use once the job starts over, and
  // its replies must not be written into the model the pushes below read.
  if (pulling_.has_value()) EPS_RETURN_IF_ERROR(Reconnect());
  EPS_RETURN_IF_ERROR(PushSeededRows());
  for (size_t s = 0; s < links_.size(); ++s) {
    Push push{Epoch(0), Step(-1), Block{0, 1}, {}};
    for (const Chunk& c : layout_->chunks) {
      if (c.shard.value() != s || KindOf(c) == TensorKind::kLoss) continue;
      const size_t elem = DTypeSize(layout_->tensors[c.tensor].dtype);
      push.chunks.push_back({c.id,
                             static_cast<const uint8_t*>(model_->Data(c.tensor)) + c.offset * elem,
                             layout_->ChunkBytes(c), nullptr});
    }
    EPS_RETURN_IF_ERROR(SendPush(s, std::move(push)));
  }
  // The chunks point into the model: wait for the replies before it changes.
  EPS_RETURN_IF_ERROR(AwaitPushes());
  LOG(INFO) << "pushed the initial parameters";
  return OkStatus();
}

Status ParameterClient::PushSeededRows() {
  // Pages whose frames stay within what every shard takes: a dense chunk's bytes (4 an element)
  // plus 64 KiB (LargestLegitFrame), and at most 4 MiB.
  size_t page_bytes = 0;
  for (const Chunk& c : layout_->chunks) page_bytes = std::max(page_bytes, c.numel * sizeof(float));
  page_bytes = std::clamp<size_t>(page_bytes, 64 << 10, 4 << 20);
  constexpr size_t kPagesInFlight = 16;
  size_t in_flight = 0;
  size_t rows_sent = 0;
  std::vector<float> initial;
  for (size_t t = 0; t < layout_->sparse.size(); ++t) {
    if (!seeded_[t]) continue;
    const uint32_t i = layout_->sparse[t];
    const TensorSpec& spec = layout_->tensors[i];
    const size_t n = static_cast<size_t>(spec.shape[0]), dim = static_cast<size_t>(spec.shape[1]);
    const size_t page_rows =
        std::max<size_t>(1, page_bytes / std::max(dim * sizeof(float), sizeof(uint64_t)));
    const auto* model = static_cast<const float*>(model_->Data(i));
    std::vector<std::vector<uint64_t>> ids(links_.size());
    std::vector<std::vector<float>> values(links_.size());
    auto send = [&](size_t s) -> Status {
      Push page{Epoch(0), Step(-1), Block{0, 1}, {}};
      SparseRowBytes rows;
      rows.table = static_cast<uint32_t>(t);
      rows.rows = static_cast<uint32_t>(ids[s].size());
      auto held_ids = std::make_shared<std::vector<uint64_t>>(std::move(ids[s]));
      auto held_values = std::make_shared<std::vector<float>>(std::move(values[s]));
      rows.ids = {ChunkId(0), held_ids->data(), held_ids->size() * sizeof(uint64_t), held_ids};
      rows.values = {ChunkId(0), held_values->data(), held_values->size() * sizeof(float),
                     held_values};
      ids[s].clear();
      values[s].clear();
      page.sparse.push_back(std::move(rows));
      EPS_RETURN_IF_ERROR(SendPush(s, std::move(page)));
      if (++in_flight < kPagesInFlight) return OkStatus();
      in_flight = 0;
      return AwaitPushes();
    };
    // Only the rows that are not their initializer's: the others need no storing.
    initial.resize(dim);
    for (size_t r = 0; r < n; ++r) {
      InitialRow(RowInitializer{}, options_.seed, static_cast<uint32_t>(t), r, initial.data(), dim);
      const float* row = model + r * dim;
      if (std::memcmp(row, initial.data(), dim * sizeof(float)) == 0) continue;
      const size_t s = layout_->ShardOfRow(r).value();
      ids[s].push_back(r);
      values[s].insert(values[s].end(), row, row + dim);
      ++rows_sent;
      if (ids[s].size() == page_rows) EPS_RETURN_IF_ERROR(send(s));
    }
    for (size_t s = 0; s < links_.size(); ++s) {
      if (!ids[s].empty()) EPS_RETURN_IF_ERROR(send(s));
    }
  }
  // Every page acknowledged before any chunk: the push that completes a shard's initial values
  // comes after its rows.
  EPS_RETURN_IF_ERROR(AwaitPushes());
  if (rows_sent > 0) LOG(INFO) << "pushed " << rows_sent << " rows --init_from seeds";
  return OkStatus();
}

std::vector<char> ParameterClient::ShmPushTargets() const {
  std::vector<char> out;
  for (const ShardLink& link : links_) out.push_back(link.shm_pushes);
  return out;
}

// The regions of the blocks pushed so far become the ones the next blocks
// reuse (those left unused are dropped: the plan's range shrank) once every
// push is answered (a shard reads a push's region before it answers). A push
// not answered yet may still be read, maybe after this worker gave it up:
// with one outstanding, the regions are dropped instead, never written again.
void ParameterClient::ReleasePushRegions() {
  if (push_regions_used_.empty()) return;
  if (std::all_of(links_.begin(), links_.end(),
                  [](const ShardLink& l) { return l.outstanding == 0; })) {
    push_regions_free_ = std::move(push_regions_used_);
  }
  push_regions_used_.clear();
}

std::shared_ptr<ShmRegion> ParameterClient::TakePushRegion() {
  std::shared_ptr<ShmRegion> region;
  if (!push_regions_free_.empty()) {
    region = std::move(push_regions_free_.back());
    push_regions_free_.pop_back();
  } else {
    auto made = ShmRegion::Create(options_.push_region_bytes);
    if (!made.ok()) {
      LOG_EVERY_N(WARNING, 100) << "no shared memory for a push (pushing through the socket): "
                                << made.status().ToString();
      return nullptr;
    }
    region = std::move(made).value();
  }
  push_regions_used_.push_back(region);
  return region;
}

}  // namespace eps
