#include "worker/block_pusher.h"

#include <algorithm>
#include <cstring>

namespace eps {
namespace {

// Where the partial's encoding starts in a push region.
size_t EncodedAt(size_t flat_size) {
  return ShmRegion::kHeaderBytes + Aligned(flat_size * sizeof(float));
}

}  // namespace

FlatGradientLayout::FlatGradientLayout(const Layout& layout, std::vector<char> frozen_tensors)
    : offset(layout.tensors.size(), 0), frozen(std::move(frozen_tensors)) {
  frozen.resize(layout.tensors.size(), 0);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    if ((t.kind == TensorKind::kParameter && !frozen[i]) || t.kind == TensorKind::kLoss) {
      offset[i] = size;
      size += static_cast<size_t>(t.numel());
    }
  }
}

size_t BlockPusher::RegionBytes(size_t flat_size, WireDType grad_wire) {
  size_t bytes = EncodedAt(flat_size);
  if (grad_wire != WireDType::kFP32) bytes += flat_size * WireDTypeSize(grad_wire);
  return bytes;
}

BlockPusher::BlockPusher(const Job& job, Epoch epoch, Step step, const Block& block)
    : job_(job),
      epoch_(epoch),
      step_(step),
      block_(block),
      reducer_(block, job.virtual_workers, job.flat->size, job.grad_wire),
      shm_to_(job.client->ShmPushTargets()),
      ready_(job.layout->tensors.size(), 0),
      sent_(job.layout->chunks.size(), 0) {
  for (const Chunk& c : job_.layout->chunks) sent_[c.id.value()] = job_.flat->frozen[c.tensor];
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
  std::vector<float> flat(job_.flat->size);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    if (t.kind == TensorKind::kParameter && !job_.flat->frozen[i]) {
      std::memcpy(flat.data() + job_.flat->offset[i], grads.data[i], t.numel() * sizeof(float));
    } else if (t.kind == TensorKind::kLoss) {
      flat[job_.flat->offset[i]] = loss;
    }
  }
  return reducer_.Add(Block{v, 1}, std::move(flat));
}

Status BlockPusher::StartLastVW(uint32_t last) {
  EPS_ASSIGN_OR_RETURN(TreeFinisher f, reducer_.Finish(Block{last, 1}));
  finisher_.emplace(std::move(f));
  return OkStatus();
}

Status BlockPusher::TensorReady(size_t i, const float* grad) {
  if (job_.flat->frozen[i]) return OkStatus();  // never reported by the runner; kept out
  const size_t at = job_.flat->offset[i];
  const int64_t n = job_.layout->tensors[i].numel();
  finisher_->Add(at, n, grad, sum_.get() + at);
  ready_[i] = 1;
  unsent_bytes_ += n * WireDTypeSize(job_.grad_wire);
  if (!eager_ || unsent_bytes_ < kEagerPushBytes) return OkStatus();
  return PushReady({});
}

Status BlockPusher::Finish(float loss, const BufferCopies& vw0_buffers) {
  const size_t at = job_.flat->offset.back();  // the layout ends with the loss
  finisher_->Add(at, 1, &loss, sum_.get() + at);
  ready_.back() = 1;
  return PushReady(vw0_buffers);
}

// Pushes every ready chunk not sent yet, in the gradient wire dtype (the
// finisher has rounded the partial to it, so encoding loses nothing); with
// `vw0_buffers` the buffer chunks too. The partial's chunks go in the
// message, or, to a shard in shm_to_, stay in region_ and the message says
// where; buffers always go in the message.
Status BlockPusher::PushReady(const BufferCopies& vw0_buffers) {
  const Layout& layout = *job_.layout;
  const WireDType wire = job_.grad_wire;
  for (size_t s = 0; s < job_.client->num_shards(); ++s) {
    Push push{epoch_, step_, block_, {}};
    for (const Chunk& c : layout.chunks) {
      if (c.shard.value() != s || sent_[c.id.value()]) continue;
      if (layout.tensors[c.tensor].kind == TensorKind::kBuffer) {
        if (vw0_buffers.empty()) continue;
        const auto& b = vw0_buffers[c.tensor];
        const size_t elem = DTypeSize(layout.tensors[c.tensor].dtype);
        push.chunks.push_back({c.id, b->data() + c.offset * elem, layout.ChunkBytes(c), b});
      } else {
        if (!ready_[c.tensor]) continue;
        const size_t at = job_.flat->offset[c.tensor] + c.offset;
        const void* bytes = sum_.get() + at;
        std::shared_ptr<const void> owner = sum_;
        if (wire != WireDType::kFP32) {
          EncodeWire(wire, sum_.get() + at, c.numel, encoded_.get() + at);
          bytes = encoded_.get() + at;
          owner = encoded_;
        }
        if (shm_to_[s]) {
          const uint64_t offset = static_cast<const uint8_t*>(bytes) - region_->data();
          push.shm_chunks.push_back({c.id, offset, layout.WireBytes(c, wire)});
        } else {
          push.chunks.push_back({c.id, bytes, layout.WireBytes(c, wire), std::move(owner)});
        }
      }
      sent_[c.id.value()] = 1;
    }
    if (!push.shm_chunks.empty()) push.shm = region_->ref();
    EPS_RETURN_IF_ERROR(job_.client->SendPush(s, std::move(push)));
  }
  unsent_bytes_ = 0;
  return OkStatus();
}

}  // namespace eps
