// The codec of the move messages (docs/design.md, "Elastic shards"): Reshard,
// ReshardReady, MoveRequest and MoveReply, whose blobs travel in frames of
// their own. Internal to the codec: see schema/codec_internal.h.
#include <string>

#include "schema/codec_internal.h"

namespace eps {
namespace codec_internal {

void SetMap(wire::ShardMap::Builder out, const ShardMap& map) {
  out.setGeneration(map.generation);
  auto chunks = out.initChunkOwners(map.chunk_owner.size());
  for (size_t i = 0; i < map.chunk_owner.size(); ++i)
    chunks.set(i, static_cast<uint16_t>(map.chunk_owner[i].value()));
  auto partitions = out.initPartitionOwners(map.partition_owner.size());
  for (size_t i = 0; i < map.partition_owner.size(); ++i)
    partitions.set(i, static_cast<uint16_t>(map.partition_owner[i].value()));
}

Status DecodeMoveBody(wire::Envelope::Body::Reader b, Reader& r, Body* body) {
  using W = wire::Envelope::Body;
  switch (b.which()) {
    case W::RESHARD: {
      Reshard m;
      auto in = b.getReshard();
      EPS_RETURN_IF_ERROR(r.Map(in.getMap(), &m.map));
      m.step = Step(in.getStep());
      EPS_RETURN_IF_ERROR(r.ListSize(in.getAddresses(), "shard addresses"));
      for (auto a : in.getAddresses()) {
        EPS_RETURN_IF_ERROR(r.Text(a, &m.addresses.emplace_back()));
      }
      *body = std::move(m);
      return OkStatus();
    }
    case W::RESHARD_READY: {
      ReshardReady m;
      auto in = b.getReshardReady();
      if (in.getCode() > static_cast<uint16_t>(kLastStatusCode))
        return ProtocolError("unknown reshard status code " + std::to_string(in.getCode()));
      m.shard = ShardId(in.getShard());
      m.generation = in.getGeneration();
      m.code = static_cast<StatusCode>(in.getCode());
      EPS_RETURN_IF_ERROR(r.Text(in.getMessage(), &m.message));
      m.bytes_in = in.getBytesIn();
      m.committed = in.getCommitted();
      *body = std::move(m);
      return OkStatus();
    }
    case W::MOVE_REQUEST: {
      MoveRequest m;
      auto in = b.getMoveRequest();
      m.generation = in.getGeneration();
      m.step = Step(in.getStep());
      EPS_RETURN_IF_ERROR(r.ListSize(in.getChunks(), "move chunks"));
      for (uint32_t c : in.getChunks()) m.chunks.push_back(ChunkId(c));
      EPS_RETURN_IF_ERROR(r.ListSize(in.getPartitions(), "move partitions"));
      for (uint16_t p : in.getPartitions()) {
        if (p >= kRowPartitions) return ProtocolError("moveRequest: a row partition out of range");
        m.partitions.push_back(p);
      }
      *body = std::move(m);
      return OkStatus();
    }
    case W::MOVE_REPLY: {
      MoveReply m;
      auto in = b.getMoveReply();
      m.generation = in.getGeneration();
      m.step = Step(in.getStep());
      EPS_RETURN_IF_ERROR(r.ListSize(in.getBlobs(), "move blobs"));
      for (auto blob : in.getBlobs()) {
        MoveBlob& out = m.blobs.emplace_back();
        EPS_RETURN_IF_ERROR(r.Text(blob.getName(), &out.name));
        Frame f;
        EPS_RETURN_IF_ERROR(r.ByteFrame(blob.getFrame(), &f));
        out.data = f.data;
        out.size = f.size;
        out.owner = f.owner;
        out.crc32 = blob.getCrc32();
      }
      *body = std::move(m);
      return OkStatus();
    }
    default:
      return ProtocolError("not a move message");
  }
}

void EncodeMoveBody(const Reshard& m, wire::Envelope::Body::Builder b, std::vector<Frame>*) {
  auto o = b.initReshard();
  SetMap(o.initMap(), m.map);
  o.setStep(m.step.value());
  auto a = o.initAddresses(m.addresses.size());
  for (size_t i = 0; i < m.addresses.size(); ++i) a.set(i, m.addresses[i]);
}

void EncodeMoveBody(const ReshardReady& m, wire::Envelope::Body::Builder b, std::vector<Frame>*) {
  auto o = b.initReshardReady();
  o.setShard(m.shard.value());
  o.setGeneration(m.generation);
  o.setCode(static_cast<uint16_t>(m.code));
  o.setMessage(m.message);
  o.setBytesIn(m.bytes_in);
  o.setCommitted(m.committed);
}

void EncodeMoveBody(const MoveRequest& m, wire::Envelope::Body::Builder b, std::vector<Frame>*) {
  auto o = b.initMoveRequest();
  o.setGeneration(m.generation);
  o.setStep(m.step.value());
  auto c = o.initChunks(m.chunks.size());
  for (size_t i = 0; i < m.chunks.size(); ++i) c.set(i, m.chunks[i].value());
  auto p = o.initPartitions(m.partitions.size());
  for (size_t i = 0; i < m.partitions.size(); ++i) p.set(i, static_cast<uint16_t>(m.partitions[i]));
}

void EncodeMoveBody(const MoveReply& m, wire::Envelope::Body::Builder b,
                    std::vector<Frame>* frames) {
  auto o = b.initMoveReply();
  o.setGeneration(m.generation);
  o.setStep(m.step.value());
  auto blobs = o.initBlobs(m.blobs.size());
  for (size_t i = 0; i < m.blobs.size(); ++i) {
    blobs[i].setName(m.blobs[i].name);
    blobs[i].setFrame(static_cast<uint32_t>(frames->size() - 1));
    blobs[i].setCrc32(m.blobs[i].crc32);
    frames->push_back({m.blobs[i].data, m.blobs[i].size, m.blobs[i].owner});
  }
}

}  // namespace codec_internal
}  // namespace eps
