#include "server/shard_state.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>

#include "common/transfer.h"
#include "schema/codec.h"

namespace eps {
namespace {

// Whether no snapshot holds `slot` any more (the checkpoint writer let go of it). The
// fence orders the writer thread's reads of it, before it released its reference, before
// the writes that follow here.
bool HeldAlone(const std::shared_ptr<std::vector<float>>& slot) {
  if (slot.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

// The bytes of `v` in a message, owned by the message.
template <class T>
ChunkBytes Owned(std::vector<T> v) {
  auto held = std::make_shared<std::vector<T>>(std::move(v));
  return {ChunkId(0), held->data(), held->size() * sizeof(T), held};
}

constexpr uint64_t kDefaultShardMemoryMb = 256;

}  // namespace

ShardState::Value ShardState::CopyOf(const void* data, size_t bytes) const {
  std::vector<float> v = floats_->Take((bytes + 3) / 4);
  if (bytes % 4 != 0) v.back() = 0;  // the last unit's bytes past `bytes`
  std::memcpy(v.data(), data, bytes);
  return floats_->Share(std::move(v));
}

void ShardState::SizePools() {
  size_t floats = 0, halves = 0;
  const bool compressed = spec_->weight_wire_dtype != WireDType::kFP32;
  for (ChunkId id : mine_) {
    if (KindOf(id) == TensorKind::kLoss) continue;
    floats += BytesOf(id);
    if (compressed && KindOf(id) == TensorKind::kParameter)
      halves += layout_->chunks[id.value()].numel * sizeof(uint16_t);
  }
  floats_->set_max_bytes(floats);
  halves_->set_max_bytes(halves);
}

Status ShardState::Configure(const ShardConfig& config) {
  if (spec_ && !(*spec_ == config.spec))
    return FailedPrecondition("shard already serves another job spec");
  if (config.spec.virtual_workers == 0)
    return InvalidArgument("virtual_workers must be at least 1");
  EPS_ASSIGN_OR_RETURN(OptimizerOptions opts,
                       OptimizerOptionsFromSpec(config.spec.optimizer, config.spec.steps));
  if (config.tensors.empty()) {  // a spare shard may register before the job's model is known
    if (!spec_) {
      spec_ = config.spec;
      optimizer_ = opts;
    }
    return OkStatus();
  }
  // A shard outside the map holds nothing yet (a shard added, before its move).
  if (!config.map && shard_.value() >= config.spec.num_shards) {
    return InvalidArgument("shard id " + std::to_string(shard_.value()) + " but the job has " +
                           std::to_string(config.spec.num_shards) + " shards");
  }
  EPS_ASSIGN_OR_RETURN(Layout layout,
                       MakeLayout(config.tensors, config.spec.num_shards, config.spec.chunk_elems));
  if (config.map) {
    EPS_RETURN_IF_ERROR(
        layout.SetShardMap(*config.map).WithContext("the shard map of the job config"));
  }
  if (layout_) {
    if (layout_->tensors != layout.tensors)
      return FailedPrecondition("shard already holds a different model layout");
    if (layout_->map == layout.map) return OkStatus();
    // A spare (docs/design.md, "Elastic shards") holds nothing under either map: it follows
    // the job's map as moves between other shards change it.
    const auto holds_in = [&](const ShardMap& m) {
      return std::find(m.chunk_owner.begin(), m.chunk_owner.end(), shard_) != m.chunk_owner.end() ||
             std::find(m.partition_owner.begin(), m.partition_owner.end(), shard_) !=
                 m.partition_owner.end();
    };
    if (holds_in(layout_->map) || holds_in(layout.map))
      return FailedPrecondition("shard already holds another shard map");
    // The chunks' owners with it: a move this spare takes later asks them for its chunks.
    return layout_->SetShardMap(std::move(layout.map));
  }
  EPS_ASSIGN_OR_RETURN(TensorSelection freeze,
                       TensorSelection::Compile(config.spec.freeze, "--freeze"));
  const std::vector<char> frozen_tensors = FrozenTensors(layout.tensors, freeze);
  spec_ = config.spec;
  optimizer_ = opts;
  layout_ = std::move(layout);
  frozen_.assign(layout_->chunks.size(), 0);
  for (const Chunk& c : layout_->chunks) frozen_[c.id.value()] = frozen_tensors[c.tensor];
  mine_ = layout_->ChunksOf(shard_);
  SizePools();
  slots_.clear();
  slots_.resize(layout_->chunks.size());
  ResetBarrier();
  return open_tables_ ? SyncTables() : OkStatus();
}

namespace {

SparseOptimizerOptions SparseOptimizerOf(const OptimizerOptions& optimizer) {
  SparseOptimizerOptions o;
  switch (optimizer.kind) {
    case OptimizerKind::kSgd:
      o.kind = SparseOptimizerOptions::Kind::kSgd;
      break;
    case OptimizerKind::kAdam:
      o.kind = SparseOptimizerOptions::Kind::kAdam;
      break;
    case OptimizerKind::kAdamW:
      o.kind = SparseOptimizerOptions::Kind::kAdamW;
      break;
    case OptimizerKind::kAdagrad:
      o.kind = SparseOptimizerOptions::Kind::kAdagrad;
      break;
  }
  o.momentum = optimizer.momentum;
  o.dampening = optimizer.dampening;
  o.nesterov = optimizer.nesterov;
  o.weight_decay = optimizer.weight_decay;
  o.beta1 = optimizer.beta1;
  o.beta2 = optimizer.beta2;
  o.eps = optimizer.eps;
  return o;
}

}  // namespace

SparseTableOptions ShardTableOptions(const JobSpec& spec, const OptimizerOptions& optimizer,
                                     const Layout& layout, size_t table,
                                     const ShardTablesOptions& tables) {
  const TensorSpec& tensor = layout.tensors[layout.sparse[table]];
  const uint64_t mb = spec.shard_memory_mb > 0 ? spec.shard_memory_mb : kDefaultShardMemoryMb;
  SparseTableOptions o;
  o.table_id = static_cast<uint32_t>(table);
  o.dim = static_cast<size_t>(tensor.shape[1]);
  o.num_vws = spec.virtual_workers;
  o.seed = spec.seed;
  o.optimizer = SparseOptimizerOf(optimizer);
  o.memory_bytes = static_cast<size_t>((mb << 20) / layout.sparse.size());
  if (!tables.dir.empty()) o.path = tables.dir + "/table-" + std::to_string(table);
  o.keep_checkpoints = tables.keep_checkpoints;
  o.grad_rounding = spec.grad_wire_dtype;
  return o;
}

Status ShardState::SyncTables() {
  if (!layout_) return OkStatus();
  const size_t n = layout_->sparse.size();
  if (tables_.empty() && n > 0) {
    for (size_t t = 0; t < n; ++t) {
      auto table =
          SparseTable::Open(ShardTableOptions(*spec_, optimizer_, *layout_, t, tables_options_));
      if (!table.ok()) {
        tables_.clear();
        return table.status().WithContext("sparse table " +
                                          layout_->tensors[layout_->sparse[t]].name);
      }
      tables_.push_back(std::move(table).value());
    }
  }
  // Before the initial values the tables are empty (-1: every checkpoint dropped, step 0's seeded
  // rows too; the initial values seed them again).
  const Step want = version_.value() < 0 ? Step(-1) : version_;
  for (size_t t = 0; t < tables_.size(); ++t) {
    Status st = tables_[t]->RollbackTo(want);  // also drops pushes of a step in progress
    if (st.code() == StatusCode::kNotFound) {
      return DataLoss("sparse table " + layout_->tensors[layout_->sparse[t]].name +
                      " holds no checkpoint of step " + std::to_string(want.value()) +
                      ", which the shard's state is at");
    }
    EPS_RETURN_IF_ERROR(st);
  }
  step_rows_.clear();  // the previous version is not kept across a restore
  return OkStatus();
}

Status ShardState::CheckRowIds(const TensorSpec& t, const void* bytes, uint32_t rows) const {
  const auto* ids = static_cast<const uint8_t*>(bytes);
  uint64_t prev = 0;
  for (uint32_t i = 0; i < rows; ++i) {
    uint64_t id;
    std::memcpy(&id, ids + i * sizeof(uint64_t), sizeof id);
    if (i > 0 && id <= prev)
      return InvalidArgument("sparse rows of table " + t.name + " are not strictly ascending");
    if (id >= t.RowBound()) {
      return InvalidArgument("row " + std::to_string(id) + " is beyond table " + t.name + "'s " +
                             std::to_string(t.RowBound()) + " rows");
    }
    if (layout_->ShardOfRow(id) != shard_) {
      return InvalidArgument("row " + std::to_string(id) + " of table " + t.name +
                             " belongs to shard " +
                             std::to_string(layout_->ShardOfRow(id).value()));
    }
    prev = id;
  }
  return OkStatus();
}

Status ShardState::ValidateSparse(const Push& push) const {
  if (push.sparse.empty()) return OkStatus();
  std::vector<char> seen(tables_.size(), 0);
  for (const SparseRowBytes& r : push.sparse) {
    if (r.table >= tables_.size()) {
      return InvalidArgument("sparse table " + std::to_string(r.table) +
                             " does not exist (the "
                             "model has " +
                             std::to_string(tables_.size()) + ")");
    }
    if (seen[r.table]++) {
      return InvalidArgument("sparse table " + std::to_string(r.table) +
                             " appears twice in one push");
    }
    const TensorSpec& t = layout_->tensors[layout_->sparse[r.table]];
    const uint64_t dim = static_cast<uint64_t>(t.shape[1]);
    if (r.ids.size != uint64_t{r.rows} * sizeof(uint64_t) ||
        r.values.size != uint64_t{r.rows} * dim * sizeof(float)) {
      return InvalidArgument("sparse rows of table " + t.name + " do not hold " +
                             std::to_string(r.rows) + " ids and rows of " + std::to_string(dim));
    }
    EPS_RETURN_IF_ERROR(CheckRowIds(t, r.ids.data, r.rows));
  }
  return OkStatus();
}

Status ShardState::StepTables() {
  const double lr = LearningRateOf(version_);
  std::vector<SparseTable::StepRows> changed = std::move(spare_rows_);
  changed.resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t)
    EPS_RETURN_IF_ERROR(tables_[t]->ApplyStep(lr, &changed[t]));
  spare_rows_ = std::move(step_rows_);
  step_rows_ = std::move(changed);
  return OkStatus();
}

size_t ShardState::PushBytesOf(ChunkId id, Step step) const {
  if (step.value() < 0 || KindOf(id) == TensorKind::kBuffer) return BytesOf(id);
  return layout_->WireBytes(layout_->chunks[id.value()], spec_->grad_wire_dtype);
}

ShardState::WireValue ShardState::EncodeForPulls(ChunkId id,
                                                 const std::vector<float>& value) const {
  const WireDType wire = spec_->weight_wire_dtype;
  if (wire == WireDType::kFP32 || KindOf(id) != TensorKind::kParameter) return nullptr;
  std::vector<uint16_t> encoded = halves_->Take(value.size());
  EncodeWire(wire, value.data(), value.size(), encoded.data());
  return halves_->Share(std::move(encoded));
}

void ShardState::Publish(ChunkId id, Value value, WireValue wire) {
  ChunkSlot& s = slots_[id.value()];
  s.previous = std::move(s.current);
  s.current = std::move(value);
  s.previous_wire = std::move(s.current_wire);
  s.current_wire = std::move(wire);
}

void ShardState::Publish(ChunkId id, Value value) {
  WireValue wire = EncodeForPulls(id, *value);
  Publish(id, std::move(value), std::move(wire));
}

void ShardState::ResetBarrier() {
  const uint32_t v = spec_->virtual_workers;
  for (ChunkId id : mine_) {
    ChunkSlot& s = slots_[id.value()];
    s.vw0_buffer.reset();
    s.next.reset();
    s.next_wire.reset();
    s.reducer.reset();
    if (Frozen(id)) {  // final at once: the next version's value is this one's
      s.next = s.current;
      s.next_wire = s.current_wire;
    } else if (KindOf(id) != TensorKind::kBuffer) {
      s.reducer = std::make_unique<TreeReducer>(Block{0, TreeWidth(v)}, v,
                                                layout_->chunks[id.value()].numel,
                                                spec_->grad_wire_dtype, floats_);
    }
  }
}

Status ShardState::ValidatePush(const Push& push) const {
  std::set<uint32_t> seen;
  for (const ChunkBytes& c : push.chunks) {
    if (c.chunk.value() >= layout_->chunks.size()) {
      return InvalidArgument("unknown chunk " + std::to_string(c.chunk.value()));
    }
    if (layout_->chunks[c.chunk.value()].shard != shard_) {
      return InvalidArgument("chunk " + std::to_string(c.chunk.value()) + " belongs to shard " +
                             std::to_string(layout_->chunks[c.chunk.value()].shard.value()));
    }
    if (!seen.insert(c.chunk.value()).second) {
      return InvalidArgument("chunk " + std::to_string(c.chunk.value()) +
                             " appears twice in one push");
    }
    if (c.size != PushBytesOf(c.chunk, push.step)) {
      return InvalidArgument("chunk " + std::to_string(c.chunk.value()) + " has " +
                             std::to_string(c.size) + " bytes, expected " +
                             std::to_string(PushBytesOf(c.chunk, push.step)));
    }
    if (push.step.value() >= 0 && KindOf(c.chunk) == TensorKind::kBuffer && push.block.lo != 0) {
      return InvalidArgument("buffers come only with the block holding VW 0");
    }
    if (push.step.value() >= 0 && Frozen(c.chunk)) {
      return InvalidArgument("chunk " + std::to_string(c.chunk.value()) + " of tensor '" +
                             layout_->tensors[layout_->chunks[c.chunk.value()].tensor].name +
                             "' is frozen (--freeze): it takes no gradient");
    }
  }
  if (push.step.value() >= 0 && !IsTreeNode(push.block, spec_->virtual_workers)) {
    return InvalidArgument("block " + push.block.ToString() + " is not a node of the tree over " +
                           std::to_string(spec_->virtual_workers) + " VWs");
  }
  return OkStatus();
}

StatusOr<ShardState::PushOutcome> ShardState::HandlePush(const Push& push) {
  if (!layout_) return Unavailable("shard has no model layout yet");
  EPS_RETURN_IF_ERROR(ValidatePush(push));
  EPS_RETURN_IF_ERROR(ValidateSparse(push));
  if (push.step.value() < 0) return HandleInit(push);
  PushOutcome out;
  out.reply.step = push.step;
  if (version_.value() < 0) return Unavailable("shard has no initial values yet");
  if (push.step < version_) {  // a late or repeated contribution to a finished step
    out.reply.duplicates = static_cast<uint32_t>(push.chunks.size() + push.sparse.size());
    duplicates_ += out.reply.duplicates;
    return out;
  }
  if (push.step > version_) {
    return Aborted("push for step " + std::to_string(push.step.value()) +
                   " but the shard is at step " + std::to_string(version_.value()));
  }
  for (const ChunkBytes& c : push.chunks) {
    ChunkSlot& s = slots_[c.chunk.value()];
    if (KindOf(c.chunk) == TensorKind::kBuffer) {
      if (s.vw0_buffer) {
        ++out.reply.duplicates;
      } else {
        s.vw0_buffer = CopyOf(c.data, c.size);
        ++out.reply.accepted;
        out.finalized = true;
      }
      continue;
    }
    if (s.next) {  // stepped already: its sum was complete
      ++out.reply.duplicates;
      continue;
    }
    if (const float* sum = WholeSum(push.block, c, *s.reducer)) {
      ++out.reply.accepted;
      StepChunk(c.chunk, sum);
      out.finalized = true;
      continue;
    }
    Status st = s.reducer->AddWire(push.block, c.data, s.reducer->num_elements());
    if (st.code() == StatusCode::kAlreadyExists) {
      ++out.reply.duplicates;
    } else if (!st.ok()) {
      return st;  // cannot happen after ValidatePush; reported rather than assumed
    } else {
      ++out.reply.accepted;
      // Stepped at once, while the other chunks of the step are still on their way.
      if (KindOf(c.chunk) == TensorKind::kParameter && s.reducer->complete()) {
        StepChunk(c.chunk);
        out.finalized = true;
      }
    }
  }
  for (const SparseRowBytes& r : push.sparse) {
    std::vector<uint64_t> ids(r.rows);
    if (r.rows > 0) std::memcpy(ids.data(), r.ids.data, r.ids.size);
    Status st = tables_[r.table]->Push(push.step, push.block, ids.data(), ids.size(),
                                       static_cast<const float*>(r.values.data),
                                       r.values.size / sizeof(float));
    if (st.code() == StatusCode::kAlreadyExists) {
      ++out.reply.duplicates;
    } else if (!st.ok()) {
      return st;  // a table refusing what ValidateSparse let through: reported, not assumed
    } else {
      ++out.reply.accepted;
    }
  }
  duplicates_ += out.reply.duplicates;
  if (BarrierComplete()) {
    EPS_RETURN_IF_ERROR(StepTables());
    out.completed = ApplyStep();
  }
  return out;
}

StatusOr<ShardState::PushOutcome> ShardState::HandleInit(const Push& push) {
  PushOutcome out;
  out.reply.step = push.step;
  for (const SparseRowBytes& r : push.sparse) {  // rows seeded by --init_from
    if (version_.value() >= 0) {
      ++out.reply.duplicates;
      continue;
    }
    std::vector<uint64_t> ids(r.rows);
    if (r.rows > 0) std::memcpy(ids.data(), r.ids.data, r.ids.size);
    EPS_RETURN_IF_ERROR(tables_[r.table]
                            ->Seed(ids.data(), ids.size(), static_cast<const float*>(r.values.data),
                                   r.values.size / sizeof(float))
                            .WithContext(layout_->tensors[layout_->sparse[r.table]].name));
    ++out.reply.accepted;
  }
  for (const ChunkBytes& c : push.chunks) {
    ChunkSlot& s = slots_[c.chunk.value()];
    if (version_.value() >= 0 || s.current || KindOf(c.chunk) == TensorKind::kLoss) {
      ++out.reply.duplicates;
      continue;
    }
    s.current = CopyOf(c.data, c.size);
    ++out.reply.accepted;
  }
  duplicates_ += out.reply.duplicates;
  // A worker sends its seeded rows before its chunks, each push acknowledged: only a push
  // without rows completes the initial values, so that they hold every seeded row.
  if (version_.value() >= 0 || !push.sparse.empty()) return out;
  for (ChunkId id : mine_) {
    if (KindOf(id) != TensorKind::kLoss && !slots_[id.value()].current) return out;
  }
  for (ChunkId id : mine_) {
    if (KindOf(id) != TensorKind::kLoss)
      Publish(id, std::move(slots_[id.value()].current));  // no previous yet
  }
  version_ = Step(0);
  ResetBarrier();  // the frozen chunks' next values are their initial ones
  out.completed = StepDone{shard_, Step(-1), false, 0.0f, Step(-1), ""};
  return out;
}

bool ShardState::BarrierComplete() const {
  for (const auto& table : tables_) {
    if (!table->StepComplete()) return false;
  }
  for (ChunkId id : mine_) {
    const ChunkSlot& s = slots_[id.value()];
    switch (KindOf(id)) {
      case TensorKind::kParameter:
        if (!s.next) return false;
        break;
      case TensorKind::kBuffer:
        if (!s.vw0_buffer) return false;
        break;
      case TensorKind::kLoss:
        if (!s.reducer->complete()) return false;
        break;
    }
  }
  return true;
}

const float* ShardState::WholeSum(const Block& block, const ChunkBytes& c,
                                  const TreeReducer& reducer) const {
  const bool aligned = reinterpret_cast<uintptr_t>(c.data) % alignof(float) == 0;
  if (KindOf(c.chunk) != TensorKind::kParameter || spec_->grad_wire_dtype != WireDType::kFP32 ||
      !(block == reducer.root()) || reducer.counted() != 0 || !aligned)
    return nullptr;
  return static_cast<const float*>(c.data);
}

void ShardState::StepChunk(ChunkId id, const float* sum) {
  ChunkSlot& s = slots_[id.value()];
  loaded_ = Step(-1);  // the state leaves the checkpoint it was loaded from
  // The tree's sum becomes the next version in place: no copy of w(t), no pass for sum / V.
  // A sum pushed whole is read where it lies, and the next version written to a new buffer.
  auto next = floats_->Share(sum != nullptr ? floats_->Take(s.reducer->num_elements())
                                            : s.reducer->TakeResult());
  if (sum == nullptr) sum = next->data();
  // The slots are stepped in place unless a snapshot still holds them: then into new ones,
  // read from the held ones (the same bits).
  auto& held = s.optimizer_slots;
  const bool shared = (held[0] && !HeldAlone(held[0])) || (held[1] && !HeldAlone(held[1]));
  OptimizerState state;
  state.initialized = s.optimizer_initialized;
  SlotsBefore before;
  for (int k = 0; k < 2; ++k) {
    if (!held[k]) continue;
    std::vector<float>& slot = k == 0 ? state.slot0 : state.slot1;
    if (shared) {
      (k == 0 ? before.slot0 : before.slot1) = held[k]->data();
      slot = floats_->Take(held[k]->size());
    } else {
      slot = std::move(*held[k]);
    }
  }
  ApplyOptimizer(optimizer_, version_.value(), s.current->data(), sum,
                 static_cast<float>(spec_->virtual_workers), next->data(), next->size(), &state,
                 parallel_, shared ? &before : nullptr);
  s.optimizer_initialized = state.initialized;
  for (int k = 0; k < 2; ++k) {
    std::vector<float>& slot = k == 0 ? state.slot0 : state.slot1;
    if (slot.empty()) continue;
    if (held[k] && !shared) {
      *held[k] = std::move(slot);
    } else {
      held[k] = floats_->Share(std::move(slot));
    }
  }
  s.next_wire = EncodeForPulls(id, *next);
  s.next = std::move(next);
}

double ShardState::LearningRateOf(Step step) const {
  if (!spec_.has_value() || step.value() < 0) return 0;
  return LearningRate(optimizer_, step.value());
}

StepDone ShardState::ApplyStep() {
  StepDone done{shard_, version_, false, 0.0f, Step(-1), ""};
  done.lr = LearningRateOf(version_);  // the rate StepChunk applied to every chunk
  const float v = static_cast<float>(spec_->virtual_workers);
  for (ChunkId id : mine_) {
    ChunkSlot& s = slots_[id.value()];
    switch (KindOf(id)) {
      case TensorKind::kParameter:
        Publish(id, std::move(s.next),
                std::move(s.next_wire));  // stepped when its sum was complete
        break;
      case TensorKind::kBuffer:
        Publish(id, std::move(s.vw0_buffer));
        break;
      case TensorKind::kLoss: {
        std::vector<float> sum = s.reducer->TakeResult();
        done.has_loss = true;
        done.loss = sum[0] / v;
        break;
      }
    }
  }
  version_ = Step(version_.value() + 1);
  ResetBarrier();
  return done;
}

StatusOr<PullReply> ShardState::HandlePull(const Pull& pull) const {
  if (!layout_ || version_.value() < 0 || pull.version.value() > version_.value() + 1) {
    return Unavailable("version " + std::to_string(pull.version.value()) + " is not ready");
  }
  const bool previous = pull.version.value() == version_.value() - 1;
  const bool next = pull.version.value() == version_.value() + 1;  // the step in progress
  if (pull.version != version_ && !previous && !next) {
    return FailedPrecondition("version " + std::to_string(pull.version.value()) +
                              " is gone; the shard serves " + std::to_string(version_.value()));
  }
  if (pull.dtype != WireDType::kFP32 && pull.dtype != spec_->weight_wire_dtype) {
    return InvalidArgument(std::string("pulls in ") + WireDTypeName(pull.dtype) +
                           ": the job's weights travel in " +
                           WireDTypeName(spec_->weight_wire_dtype) + " or fp32");
  }
  PullReply reply;
  reply.version = pull.version;
  const std::vector<ChunkId>& wanted = pull.chunks.empty() ? mine_ : pull.chunks;
  for (ChunkId id : wanted) {
    if (id.value() >= layout_->chunks.size() || layout_->chunks[id.value()].shard != shard_) {
      return InvalidArgument("chunk " + std::to_string(id.value()) + " is not on this shard");
    }
    if (KindOf(id) == TensorKind::kLoss) continue;  // the loss has no value to pull
    const ChunkSlot& s = slots_[id.value()];
    // Of the step in progress, a parameter chunk stepped already, and VW 0's
    // buffers once pushed, are final: their bits can only be these.
    const Value& stepped = KindOf(id) == TensorKind::kBuffer ? s.vw0_buffer : s.next;
    if (next && !stepped) {
      return Unavailable("chunk " + std::to_string(id.value()) + " of version " +
                         std::to_string(pull.version.value()) + " is not stepped yet");
    }
    if (pull.dtype != WireDType::kFP32 && KindOf(id) == TensorKind::kParameter) {
      const WireValue& w = previous ? s.previous_wire : next ? s.next_wire : s.current_wire;
      if (!w)
        return FailedPrecondition("version " + std::to_string(pull.version.value()) + " is gone");
      reply.chunks.push_back({id, w->data(), w->size() * sizeof(uint16_t), w});
      continue;
    }
    const Value& v = previous ? s.previous : next ? stepped : s.current;
    if (!v)
      return FailedPrecondition("version " + std::to_string(pull.version.value()) + " is gone");
    reply.chunks.push_back({id, v->data(), BytesOf(id), v});
  }
  return reply;
}

StatusOr<PullReply> ShardState::HandleSparsePull(const Pull& pull) {
  if (!layout_ || version_.value() < 0 || pull.version.value() > version_.value()) {
    return Unavailable("version " + std::to_string(pull.version.value()) + " is not ready");
  }
  const bool previous = pull.version.value() == version_.value() - 1;
  const bool stepped = step_rows_.size() == tables_.size();  // the step that made version_
  if (pull.version != version_ && (!previous || !stepped)) {
    return FailedPrecondition("version " + std::to_string(pull.version.value()) +
                              " of the sparse tables is gone; the shard serves " +
                              std::to_string(version_.value()));
  }
  PullReply reply;
  reply.version = pull.version;
  for (const SparseRead& read : pull.sparse) {
    if (read.table >= tables_.size())
      return InvalidArgument("sparse table " + std::to_string(read.table) + " does not exist");
    if (read.since.value() < -1) return InvalidArgument("a sparse read since a version below -1");
    SparseTable& table = *tables_[read.table];
    const size_t dim = static_cast<size_t>(layout_->tensors[layout_->sparse[read.table]].shape[1]);
    std::vector<uint64_t> ids;
    std::vector<float> values;
    bool scanned = false;  // values come with the ids
    const size_t max_rows = read.max_rows == 0 ? SIZE_MAX : read.max_rows;
    if (read.lookup) {  // the rows a worker's batches read (untouched ones at their initial values)
      EPS_ASSIGN_OR_RETURN(ids, ReadIds(read));
    } else if (read.since.value() == -1) {  // every stored row: a scan, which leaves the cache be
      EPS_RETURN_IF_ERROR(table.ReadStored(read.from_row, max_rows, &ids, &values));
      scanned = true;
    } else if (stepped && !previous && read.since.value() == version_.value() - 1) {
      // The rows the last step changed, as it left them: no row looked up again, nor copied here
      // (lent, header).
      const SparseTable::StepRows& last = step_rows_[read.table];
      const size_t first = static_cast<size_t>(
          std::lower_bound(last.ids.begin(), last.ids.end(), read.from_row) - last.ids.begin());
      const size_t n = std::min(max_rows, last.ids.size() - first);
      SparseRowBytes lent;
      lent.table = read.table;
      lent.rows = static_cast<uint32_t>(n);
      lent.ids = {ChunkId(0), last.ids.data() + first, n * sizeof(uint64_t), nullptr};
      lent.values = {ChunkId(0), last.after.data() + first * dim, n * dim * sizeof(float), nullptr};
      reply.sparse.push_back(lent);
      continue;
    } else if (read.since < pull.version) {
      EPS_ASSIGN_OR_RETURN(ids, table.ChangedSince(read.since, read.from_row, max_rows));
    }
    if (!scanned) {
      values.resize(ids.size() * dim);
      EPS_RETURN_IF_ERROR(table.Read(ids.data(), ids.size(), values.data()));
    }
    // Of the previous version too: rows the last step changed come back at their old
    // values, and any other row is the same in both versions.
    if (previous) {
      const SparseTable::StepRows& old = step_rows_[read.table];
      size_t j = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        while (j < old.ids.size() && old.ids[j] < ids[i]) ++j;
        if (j < old.ids.size() && old.ids[j] == ids[i])
          std::memcpy(&values[i * dim], &old.before[j * dim], dim * sizeof(float));
      }
    }
    SparseRowBytes rows;
    rows.table = read.table;
    rows.rows = static_cast<uint32_t>(ids.size());
    rows.ids = Owned(std::move(ids));
    rows.values = Owned(std::move(values));
    reply.sparse.push_back(std::move(rows));
  }
  return reply;
}

StatusOr<std::vector<uint64_t>> ShardState::ReadIds(const SparseRead& read) const {
  if (read.ids.size != uint64_t{read.rows} * sizeof(uint64_t))
    return InvalidArgument("a sparse lookup's ids do not hold " + std::to_string(read.rows));
  EPS_RETURN_IF_ERROR(
      CheckRowIds(layout_->tensors[layout_->sparse[read.table]], read.ids.data, read.rows));
  std::vector<uint64_t> ids(read.rows);
  if (read.rows > 0) std::memcpy(ids.data(), read.ids.data, read.ids.size);
  return ids;
}

void ShardState::WarmSparse(const Pull& pull) {
  if (!layout_ || version_.value() < 0 || pull.version.value() != version_.value() + 1) return;
  for (const SparseRead& read : pull.sparse) {
    if (read.rows == 0 || read.table >= tables_.size()) continue;
    StatusOr<std::vector<uint64_t>> ids = ReadIds(read);  // malformed: its answer refuses it
    if (ids.ok()) (void)tables_[read.table]->Warm(ids->data(), ids->size());
  }
}

// ---- durable state --------------------------------------------------------------

Status ShardState::CheckpointTables() {
  for (auto& table : tables_) EPS_RETURN_IF_ERROR(table->Checkpoint());
  return OkStatus();
}

void ShardState::RetainTablesFrom(Step step) {
  for (auto& table : tables_) table->RetainFrom(step);
}

std::vector<SparseTable::Stats> ShardState::TableStats() const {
  std::vector<SparseTable::Stats> out;
  for (const auto& table : tables_) out.push_back(table->stats());
  return out;
}

}  // namespace eps
