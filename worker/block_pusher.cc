#include "worker/block_pusher.h"

#include <algorithm>

#include "schema/shm_rows.h"

namespace eps {
namespace {

// Where the partial's encoding starts in a push region.
size_t EncodedAt(size_t flat_size) {
  return ShmRegion::kHeaderBytes + Aligned(flat_size * sizeof(float));
}

// Where the room for sparse rows starts in a push region.
size_t RowsAt(size_t flat_size, WireDType grad_wire) {
  size_t bytes = EncodedAt(flat_size);
  if (grad_wire != WireDType::kFP32) bytes += flat_size * WireDTypeSize(grad_wire);
  return Aligned(bytes);
}

}  // namespace

FlatGradientLayout::FlatGradientLayout(const Layout& layout, std::vector<char> frozen_tensors,
                                       uint32_t virtual_workers)
    : offset(layout.tensors.size(), 0),
      frozen(std::move(frozen_tensors)),
      first_chunk(layout.tensors.size() + 1, 0) {
  frozen.resize(layout.tensors.size(), 0);
  for (const Chunk& c : layout.chunks) first_chunk[c.tensor + 1] = c.id.value() + 1;
  for (size_t i = 1; i < first_chunk.size(); ++i)  // a tensor without chunks (sparse) is empty
    first_chunk[i] = std::max(first_chunk[i], first_chunk[i - 1]);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    if ((t.kind == TensorKind::kParameter && !frozen[i] && !t.sparse) ||
        t.kind == TensorKind::kLoss) {
      offset[i] = size;
      size += static_cast<size_t>(t.numel());
    }
  }
  // The tree over V leaves is log2(TreeWidth(V)) levels deep (at least one node is held).
  const int levels = std::max(1, __builtin_ctz(TreeWidth(std::max(virtual_workers, 1u))));
  pool = VectorPool<float>::Create(static_cast<size_t>(levels) * size * sizeof(float));
}

size_t BlockPusher::RegionBytes(size_t flat_size, WireDType grad_wire, bool rows) {
  return RowsAt(flat_size, grad_wire) + (rows ? kShmRowsBytes : 0);
}

BlockPusher::BlockPusher(const Job& job, Epoch epoch, Step step, const Block& block)
    : job_(job),
      epoch_(epoch),
      step_(step),
      block_(block),
      reducer_(block, job.virtual_workers, job.flat->size, job.grad_wire, job.flat->pool),
      shm_to_(job.client->ShmPushTargets()) {
  for (uint32_t t : job_.layout->sparse) {
    rows_.emplace_back(block, job.virtual_workers,
                       static_cast<size_t>(job_.layout->tensors[t].shape[1]), job.grad_wire);
  }
  const size_t n = job_.flat->size;
  const bool compressed = job_.grad_wire != WireDType::kFP32;
  if (std::find(shm_to_.begin(), shm_to_.end(), 1) != shm_to_.end()) {
    region_ = job_.client->TakePushRegion();
  }
  if (region_ == nullptr) {
    std::fill(shm_to_.begin(), shm_to_.end(), 0);
    sum_.reset(new float[n]);
    if (compressed) encoded_.reset(new uint16_t[n]);
    return;
  }
  uint8_t* base = region_->data();
  sum_ =
      std::shared_ptr<float[]>(region_, reinterpret_cast<float*>(base + ShmRegion::kHeaderBytes));
  if (compressed) {
    encoded_ =
        std::shared_ptr<uint16_t[]>(region_, reinterpret_cast<uint16_t*>(base + EncodedAt(n)));
  }
}

Status BlockPusher::AddVW(uint32_t v, const ModelRunner::Gradients& grads, float loss) {
  const Layout& layout = *job_.layout;
  std::vector<TreePiece> pieces;  // the flat gradient's, where libtorch left them
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    if (t.kind == TensorKind::kParameter && !job_.flat->frozen[i] && !t.sparse) {
      pieces.push_back({job_.flat->offset[i], grads.data[i], static_cast<size_t>(t.numel())});
    } else if (t.kind == TensorKind::kLoss) {
      pieces.push_back({job_.flat->offset[i], &loss, 1});
    }
  }
  EPS_RETURN_IF_ERROR(AddRows(v, grads));
  return reducer_.Add(Block{v, 1}, std::move(pieces));
}

Status BlockPusher::AddRows(uint32_t v, const ModelRunner::Gradients& grads) {
  std::vector<uint64_t> ids;
  for (size_t t = 0; t < rows_.size(); ++t) {
    const uint32_t i = job_.layout->sparse[t];
    const SparseGradient g = i < grads.sparse.size() ? grads.sparse[i] : SparseGradient{};
    ids.assign(g.ids, g.ids + g.rows);  // non-negative: the embedding's own indices
    EPS_RETURN_IF_ERROR(
        rows_[t].Add(Block{v, 1}, ids.data(), ids.size(), g.values, g.rows * rows_[t].dim()));
  }
  return OkStatus();
}

StatusOr<std::vector<std::vector<SparseRowBytes>>> BlockPusher::TakeRows() {
  const uint32_t shards = static_cast<uint32_t>(job_.client->num_shards());
  std::vector<std::vector<SparseRowBytes>> out(shards);
  for (size_t t = 0; t < rows_.size(); ++t) {
    EPS_ASSIGN_OR_RETURN(SparseRows all, rows_[t].TakeResult());
    const size_t dim = rows_[t].dim(), n = all.ids.size();
    std::vector<uint32_t> shard_of(n);
    std::vector<size_t> count(shards, 0);
    for (size_t r = 0; r < n; ++r)
      ++count[shard_of[r] = job_.layout->ShardOfRow(all.ids[r]).value()];
    // Each shard's rows sized once; the result itself where one shard holds every row.
    std::vector<std::shared_ptr<SparseRows>> by_shard(shards);
    for (auto& rows : by_shard) rows = std::make_shared<SparseRows>();
    const auto whole = std::find(count.begin(), count.end(), n);
    if (whole != count.end()) {
      *by_shard[static_cast<size_t>(whole - count.begin())] = std::move(all);
    } else {
      for (uint32_t s = 0; s < shards; ++s) {
        by_shard[s]->ids.reserve(count[s]);
        by_shard[s]->values.reserve(count[s] * dim);
      }
      for (size_t r = 0; r < n; ++r) {
        SparseRows& to = *by_shard[shard_of[r]];
        to.ids.push_back(all.ids[r]);
        to.values.insert(to.values.end(), all.values.begin() + r * dim,
                         all.values.begin() + (r + 1) * dim);
      }
    }
    for (uint32_t s = 0; s < shards; ++s) {
      const std::shared_ptr<SparseRows>& held = by_shard[s];
      SparseRowBytes b;
      b.table = static_cast<uint32_t>(t);
      b.rows = static_cast<uint32_t>(held->ids.size());
      b.ids = {ChunkId(0), held->ids.data(), held->ids.size() * sizeof(uint64_t), held};
      b.values = {ChunkId(0), held->values.data(), held->values.size() * sizeof(float), held};
      out[s].push_back(std::move(b));
    }
  }
  return out;
}

Status BlockPusher::StartLastVW(uint32_t last) {
  EPS_ASSIGN_OR_RETURN(TreeFinisher f, reducer_.Finish(Block{last, 1}));
  finisher_.emplace(std::move(f));
  last_ = last;
  return OkStatus();
}

Status BlockPusher::TensorReady(size_t i, const float* grad) {
  // Frozen tensors are never reported by the runner; kept out. A sparse table's rows come with
  // Finish.
  if (job_.flat->frozen[i] || job_.layout->tensors[i].sparse) return OkStatus();
  const size_t at = job_.flat->offset[i];
  for (uint32_t id = job_.flat->first_chunk[i]; id < job_.flat->first_chunk[i + 1]; ++id) {
    const Chunk& c = job_.layout->chunks[id];
    finisher_->Add(at + c.offset, c.numel, grad + c.offset, sum_.get() + at + c.offset);
    unsent_.push_back(id);
    unsent_bytes_ += c.numel * WireDTypeSize(job_.grad_wire);
    if (eager_ && unsent_bytes_ >= kEagerPushBytes) EPS_RETURN_IF_ERROR(PushReady({}));
  }
  return OkStatus();
}

Status BlockPusher::Finish(float loss, const BufferCopies& vw0_buffers,
                           const ModelRunner::Gradients& last) {
  const size_t at = job_.flat->offset.back();  // the layout ends with the loss, in one chunk
  finisher_->Add(at, 1, &loss, sum_.get() + at);
  unsent_.push_back(static_cast<uint32_t>(job_.layout->chunks.size() - 1));
  if (rows_.empty()) return PushReady(vw0_buffers);
  EPS_RETURN_IF_ERROR(AddRows(last_, last));
  EPS_ASSIGN_OR_RETURN(auto rows, TakeRows());
  return PushReady(vw0_buffers, std::move(rows));
}

// Pushes every ready chunk not sent yet, in the gradient wire dtype (the
// finisher has rounded the partial to it, so encoding loses nothing); with
// `vw0_buffers` the buffer chunks too. The partial's chunks go in the
// message, or, to a shard in shm_to_, stay in region_ and the message says
// where; buffers always go in the message.
Status BlockPusher::PushReady(const BufferCopies& vw0_buffers,
                              std::vector<std::vector<SparseRowBytes>> rows) {
  const Layout& layout = *job_.layout;
  const WireDType wire = job_.grad_wire;
  std::vector<Push> pushes(job_.client->num_shards(), Push{epoch_, step_, block_, {}});
  for (uint32_t id : unsent_) {
    const Chunk& c = layout.chunks[id];
    Push& push = pushes[c.shard.value()];
    const size_t at = job_.flat->offset[c.tensor] + c.offset;
    const void* bytes = sum_.get() + at;
    std::shared_ptr<const void> owner = sum_;
    if (wire != WireDType::kFP32) {
      EncodeWire(wire, sum_.get() + at, c.numel, encoded_.get() + at);
      bytes = encoded_.get() + at;
      owner = encoded_;
    }
    if (shm_to_[c.shard.value()]) {
      const uint64_t offset = static_cast<const uint8_t*>(bytes) - region_->data();
      push.shm_chunks.push_back({c.id, offset, layout.WireBytes(c, wire)});
    } else {
      push.chunks.push_back({c.id, bytes, layout.WireBytes(c, wire), std::move(owner)});
    }
  }
  unsent_.clear();
  unsent_bytes_ = 0;
  for (const Chunk& c : layout.chunks) {  // with VW 0's buffers: the block's last push only
    if (vw0_buffers.empty()) break;
    if (layout.tensors[c.tensor].kind != TensorKind::kBuffer) continue;
    const auto& b = vw0_buffers[c.tensor];
    const size_t elem = DTypeSize(layout.tensors[c.tensor].dtype);
    pushes[c.shard.value()].chunks.push_back(
        {c.id, b->data() + c.offset * elem, layout.ChunkBytes(c), b});
  }
  uint64_t rows_at = RowsAt(job_.flat->size, wire);  // the region's room for the rows
  for (size_t s = 0; s < pushes.size(); ++s) {
    Push& push = pushes[s];
    if (s < rows.size()) push.sparse = std::move(rows[s]);
    if (shm_to_[s] && !push.sparse.empty())
      (void)PlaceRows(region_->data(), region_->ref(), &rows_at, &push.sparse);  // else inline
    if (!push.shm_chunks.empty() || AnyInShm(push.sparse)) push.shm = region_->ref();
    EPS_RETURN_IF_ERROR(job_.client->SendPush(s, std::move(push)));
  }
  return OkStatus();
}

}  // namespace eps
