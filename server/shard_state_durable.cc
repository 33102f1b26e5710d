// ShardState's durable side: snapshots for checkpoints, loading a checkpoint
// (Restore, RollbackTo, export_model's Load), starting over (Clear), and chunks
// moving between shards (ExportChunks, AdoptMap), which travel as checkpoint
// blobs. The checkpoint's format is here: its metadata and its blobs' names.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "common/memory.h"
#include "schema/codec.h"
#include "server/shard_state.h"

namespace eps {
namespace {

// Checkpoint metadata: this header line, then the job config as an encoded
// ShardConfig envelope (the wire codec, so no second serializer to maintain).
constexpr char kMetadataFormat[] = "eps-shard-checkpoint 1 shard=%" SCNu32 "\n";

std::string ValueBlob(ChunkId id) { return "value/" + std::to_string(id.value()); }
std::string SlotBlob(int slot, ChunkId id) {
  return "slot" + std::to_string(slot) + "/" + std::to_string(id.value());
}

StatusOr<std::string> EncodeMetadata(ShardId shard, const ShardConfig& config) {
  char header[64];
  std::snprintf(header, sizeof header, kMetadataFormat, shard.value());
  EPS_ASSIGN_OR_RETURN(std::vector<Frame> frames, Encode(Envelope{"", config}));
  std::string out = header;
  out.append(static_cast<const char*>(frames[0].data), frames[0].size);
  return out;
}

Status DecodeMetadata(const std::string& metadata, ShardId* shard, ShardConfig* config) {
  const size_t eol = metadata.find('\n');
  uint32_t id = 0;
  char check[64];
  if (eol == std::string::npos || eol >= 48 ||
      std::sscanf(metadata.substr(0, eol + 1).c_str(), kMetadataFormat, &id) != 1) {
    return DataLoss("checkpoint metadata has no shard header");
  }
  std::snprintf(check, sizeof check, kMetadataFormat, id);
  if (metadata.compare(0, eol + 1, check) != 0)
    return DataLoss("checkpoint metadata has a malformed shard header");
  auto frame = std::make_shared<std::string>(metadata.substr(eol + 1));
  auto envelope = Decode({Frame{frame->data(), frame->size(), frame}});
  if (!envelope.ok())
    return DataLoss("checkpoint metadata holds no job config: " + envelope.status().message());
  auto* c = std::get_if<ShardConfig>(&envelope->body);
  if (c == nullptr)
    return DataLoss("checkpoint metadata holds a " + std::string(BodyName(envelope->body)));
  *shard = ShardId(id);
  *config = std::move(*c);
  return OkStatus();
}

}  // namespace

// A checkpoint's (or a move's) blobs by name, each taken at most once.
class ShardState::BlobSet {
 public:
  // `what` names where they come from in errors.
  static StatusOr<BlobSet> Of(std::vector<Blob>& blobs, std::string what) {
    BlobSet set;
    set.what_ = std::move(what);
    for (Blob& b : blobs) {
      if (!set.by_name_.emplace(b.name, &b).second)
        return DataLoss(set.what_ + " holds blob '" + b.name + "' twice");
    }
    return set;
  }
  // The blob `name`, which must hold `bytes` bytes.
  StatusOr<Blob*> Take(const std::string& name, size_t bytes) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return DataLoss(what_ + " lacks blob '" + name + "'");
    if (it->second->bytes.size() != bytes) {
      return DataLoss("blob '" + name + "' of " + what_ + " has " +
                      std::to_string(it->second->bytes.size()) + " bytes, the layout says " +
                      std::to_string(bytes));
    }
    ++used_;
    return it->second;
  }
  // Every blob whose name starts with `prefix`, in name order.
  std::vector<Blob*> TakePrefix(const std::string& prefix) {
    std::vector<Blob*> out;
    for (auto& [name, blob] : by_name_) {
      if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(blob);
    }
    std::sort(out.begin(), out.end(),
              [](const Blob* a, const Blob* b) { return a->name < b->name; });
    used_ += out.size();
    return out;
  }
  // DataLoss when a blob was not taken.
  Status AllTaken() const {
    if (used_ == by_name_.size()) return OkStatus();
    return DataLoss(what_ + " holds " + std::to_string(by_name_.size() - used_) +
                    " blobs this shard's layout has no place for");
  }

 private:
  std::string what_;
  std::unordered_map<std::string, Blob*> by_name_;
  size_t used_ = 0;
};

void ShardState::AppendChunkBlobs(ChunkId id, std::vector<BlobRef>* out) const {
  const TensorKind kind = KindOf(id);
  if (kind == TensorKind::kLoss) return;
  const ChunkSlot& s = slots_[id.value()];
  out->push_back({ValueBlob(id), s.current->data(), BytesOf(id), s.current});
  if (kind != TensorKind::kParameter || !s.optimizer_initialized) return;
  for (int k = 0; k < 2; ++k) {
    const std::shared_ptr<std::vector<float>>& v = s.optimizer_slots[k];
    if (v && !v->empty())
      out->push_back({SlotBlob(k, id), v->data(), v->size() * sizeof(float), v});
  }
}

Status ShardState::LoadChunk(ChunkId id, BlobSet& blobs, bool initialized, ChunkSlot* s) const {
  const TensorKind kind = KindOf(id);
  if (kind == TensorKind::kLoss) return OkStatus();
  EPS_ASSIGN_OR_RETURN(Blob * value, blobs.Take(ValueBlob(id), BytesOf(id)));
  s->current = CopyOf(value->bytes.data(), value->bytes.size());
  s->current_wire = EncodeForPulls(id, *s->current);
  // Released at once: the next copy can land on these pages, already faulted in.
  std::string().swap(value->bytes);
  if (kind != TensorKind::kParameter || Frozen(id)) return OkStatus();
  s->optimizer_initialized = initialized;
  if (!initialized) return OkStatus();
  const size_t n = static_cast<size_t>(layout_->chunks[id.value()].numel);
  for (int k = 0; k < NumOptimizerSlots(optimizer_); ++k) {
    EPS_ASSIGN_OR_RETURN(Blob * slot, blobs.Take(SlotBlob(k, id), n * sizeof(float)));
    auto dst = std::make_shared<std::vector<float>>(HugeVector<float>(n));
    std::memcpy(dst->data(), slot->bytes.data(), slot->bytes.size());
    std::string().swap(slot->bytes);
    s->optimizer_slots[k] = std::move(dst);
  }
  return OkStatus();
}

StatusOr<ShardSnapshot> ShardState::Snapshot() const {
  if (!layout_ || version_.value() < 0)
    return FailedPrecondition("no version to snapshot before the initial values");
  ShardSnapshot out;
  out.version = version_;
  EPS_ASSIGN_OR_RETURN(
      out.metadata, EncodeMetadata(shard_, ShardConfig{*spec_, layout_->tensors, 0, layout_->map}));
  for (ChunkId id : mine_) AppendChunkBlobs(id, &out.blobs);
  return out;
}

StatusOr<std::unique_ptr<ShardState>> ShardState::Load(Checkpoint&& checkpoint) const {
  const std::string what = "checkpoint of step " + std::to_string(checkpoint.step.value());
  if (checkpoint.step.value() < 0) return DataLoss(what + " has a negative step");
  ShardId shard;
  ShardConfig config;
  EPS_RETURN_IF_ERROR(DecodeMetadata(checkpoint.metadata, &shard, &config).WithContext(what));
  if (shard != shard_) {
    return FailedPrecondition(what + " belongs to shard " + std::to_string(shard.value()) +
                              ", this is shard " + std::to_string(shard_.value()));
  }
  if (config.tensors.empty()) return DataLoss(what + " has no model");
  if (spec_ && !(*spec_ == config.spec))
    return FailedPrecondition(what + " is of another job spec than this shard's");
  if (layout_ && layout_->tensors != config.tensors) {
    return FailedPrecondition(what + " holds another model layout than this shard's");
  }
  auto next = std::make_unique<ShardState>(shard_, parallel_);
  next->open_tables_ = false;  // this state's tables follow once it is taken (SyncTables)
  Status st = next->Configure(config);
  if (!st.ok()) return DataLoss(what + " holds a job config this shard refuses: " + st.message());

  EPS_ASSIGN_OR_RETURN(BlobSet blobs, BlobSet::Of(checkpoint.blobs, what));
  // The optimizer runs on every parameter chunk not frozen at every step: its state exists
  // exactly after step 0.
  const bool initialized = checkpoint.step.value() > 0;
  for (ChunkId id : next->mine_) {
    EPS_RETURN_IF_ERROR(next->LoadChunk(id, blobs, initialized, &next->slots_[id.value()]));
  }
  EPS_RETURN_IF_ERROR(blobs.AllTaken());
  next->version_ = checkpoint.step;
  next->loaded_ = checkpoint.step;
  next->ResetBarrier();  // the frozen chunks' next values are the restored ones
  return next;
}

StatusOr<std::vector<BlobRef>> ShardState::ExportChunks(const std::vector<ChunkId>& chunks) const {
  if (!layout_ || version_.value() < 0)
    return FailedPrecondition("no version to move before the initial values");
  std::vector<BlobRef> out;
  for (ChunkId id : chunks) {
    if (id.value() >= layout_->chunks.size() || layout_->chunks[id.value()].shard != shard_) {
      return InvalidArgument("chunk " + std::to_string(id.value()) + " is not shard " +
                             std::to_string(shard_.value()) + "'s");
    }
    AppendChunkBlobs(id, &out);
  }
  return out;
}

StatusOr<std::vector<BlobRef>> ShardState::ExportPartitions(
    const std::vector<uint32_t>& partitions) {
  std::vector<BlobRef> out;
  if (partitions.empty()) return out;
  if (!layout_ || version_.value() < 0)
    return FailedPrecondition("no version to move before the initial values");
  std::vector<char> asked(kRowPartitions, 0);
  for (uint32_t p : partitions) {
    if (p >= kRowPartitions || layout_->map.partition_owner[p] != shard_) {
      return InvalidArgument("row partition " + std::to_string(p) + " is not shard " +
                             std::to_string(shard_.value()) + "'s");
    }
    asked[p] = 1;
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    auto rows = std::make_shared<std::string>();
    EPS_RETURN_IF_ERROR(tables_[t]->ExportRows(
        [&](uint64_t row) { return asked[RowPartition(row)] != 0; }, rows.get()));
    out.push_back({"rows/" + std::to_string(t) + "/" + std::to_string(partitions.front()),
                   rows->data(), rows->size(), rows});
  }
  return out;
}

Status ShardState::AdoptMap(const ShardMap& map, Step version, std::vector<Blob> gained) {
  if (!layout_) return FailedPrecondition("no layout to move chunks of");
  if (map.generation <= layout_->map.generation) {
    return FailedPrecondition("shard map generation " + std::to_string(map.generation) +
                              " is not newer than " + std::to_string(layout_->map.generation));
  }
  if (version.value() < 0) return InvalidArgument("chunks move only at a version");
  if (version_.value() >= 0 && version_ != version) {
    return FailedPrecondition("the move is of version " + std::to_string(version.value()) +
                              ", the shard serves " + std::to_string(version_.value()));
  }
  // Between steps only: a contribution to the step in progress would be dropped with its
  // barrier, acknowledged and lost.
  for (ChunkId id : mine_) {
    const ChunkSlot& s = slots_[id.value()];
    const bool stepped_early = s.next != nullptr && !Frozen(id);
    if ((s.reducer && s.reducer->counted() > 0) || stepped_early || s.vw0_buffer)
      return FailedPrecondition("a move while step " + std::to_string(version_.value()) +
                                " has pushes counted");
  }
  Layout next = *layout_;
  EPS_RETURN_IF_ERROR(next.SetShardMap(map));
  // The gained chunks' state is loaded beside the state, which changes only once all of it
  // is there: all or nothing.
  EPS_ASSIGN_OR_RETURN(BlobSet blobs, BlobSet::Of(gained, "the move to generation " +
                                                              std::to_string(map.generation)));
  std::vector<std::pair<ChunkId, ChunkSlot>> adopted;
  for (const Chunk& c : next.chunks) {
    if (c.shard != shard_ || layout_->chunks[c.id.value()].shard == shard_) continue;
    adopted.emplace_back(c.id, ChunkSlot{});
    EPS_RETURN_IF_ERROR(LoadChunk(c.id, blobs, version.value() > 0, &adopted.back().second));
  }
  std::vector<std::string> rows(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    for (const Blob* b : blobs.TakePrefix("rows/" + std::to_string(t) + "/")) rows[t] += b->bytes;
  }
  EPS_RETURN_IF_ERROR(blobs.AllTaken());
  // The tables' rows: each validates its whole part before it changes.
  const ShardId me = shard_;
  const bool rows_move = next.map.partition_owner != layout_->map.partition_owner;
  for (size_t t = 0; rows_move && t < tables_.size(); ++t) {
    EPS_RETURN_IF_ERROR(
        tables_[t]
            ->Move(
                version, [&](uint64_t row) { return next.map.OwnerOfRow(row) != me; }, rows[t])
            .WithContext("sparse table " + layout_->tensors[layout_->sparse[t]].name));
  }
  step_rows_.clear();  // no pull of the version before the move comes after it
  for (ChunkId id : mine_) {
    if (next.chunks[id.value()].shard != shard_) slots_[id.value()] = ChunkSlot{};
  }
  for (auto& [id, slot] : adopted) slots_[id.value()] = std::move(slot);
  layout_ = std::move(next);
  mine_ = layout_->ChunksOf(shard_);
  SizePools();
  version_ = version;
  loaded_ = Step(-1);
  ResetBarrier();
  return OkStatus();
}

void ShardState::TakeFrom(ShardState&& other) {
  spec_ = std::move(other.spec_);
  layout_ = std::move(other.layout_);
  optimizer_ = other.optimizer_;
  mine_ = std::move(other.mine_);
  frozen_ = std::move(other.frozen_);
  slots_ = std::move(other.slots_);
  version_ = other.version_;
  loaded_ = other.loaded_;
  SizePools();
}

Status ShardState::Restore(Checkpoint checkpoint) {
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<ShardState> next, Load(std::move(checkpoint)));
  TakeFrom(std::move(*next));
  return SyncTables();
}

Status ShardState::Clear() {
  version_ = Step(-1);
  loaded_ = Step(-1);
  slots_.clear();
  if (!layout_) return OkStatus();
  slots_.resize(layout_->chunks.size());
  ResetBarrier();
  return SyncTables();
}

Status ShardState::RollbackTo(StateStore& store, Step step) {
  const auto not_held = [&] {
    return InvalidArgument("shard " + std::to_string(shard_.value()) +
                           " holds no checkpoint of step " + std::to_string(step.value()));
  };
  if (loaded_ == step && version_ == step) {
    // The checkpoint's bits are the state's (no chunk stepped since it was loaded, no
    // previous version kept): only the step in progress goes.
    EPS_ASSIGN_OR_RETURN(std::vector<Step> held, store.ListCheckpoints());
    if (!std::binary_search(held.begin(), held.end(), step)) return not_held();
    EPS_RETURN_IF_ERROR(store.DropCheckpointsAfter(step));
    ResetBarrier();
    return SyncTables();
  }
  auto checkpoint = store.ReadCheckpoint(step);
  if (checkpoint.status().code() == StatusCode::kNotFound) return not_held();
  if (!checkpoint.ok()) return checkpoint.status();
  EPS_ASSIGN_OR_RETURN(std::unique_ptr<ShardState> next, Load(std::move(checkpoint).value()));
  EPS_RETURN_IF_ERROR(store.DropCheckpointsAfter(step));
  TakeFrom(std::move(*next));
  return SyncTables();
}

}  // namespace eps
