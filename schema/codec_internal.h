// Internal to the codec (schema/codec.cc, schema/codec_status.cc); not part of
// the public API: include schema/codec.h instead. Holds what the codec's
// translation units share: the Reader that validates a received envelope's
// fields against DecodeLimits and the frames, and the job status conversions.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "schema/codec.h"
#include "schema/elasticps.capnp.h"

namespace eps {
namespace codec_internal {

// Reads the fields of one received envelope, checking text and list sizes
// against the limits and chunk references against the frames (each frame is
// referenced once). One per Decode call; not thread-safe.
class Reader {
 public:
  Reader(const std::vector<Frame>& frames, const DecodeLimits& limits)
      : frames_(frames), limits_(limits), used_(frames.size(), false),
        header_bytes_(frames.empty() ? 0 : frames[0].size) {}

  Status Text(capnp::Text::Reader t, std::string* out) {
    if (t.size() > limits_.max_text)
      return ProtocolError("text field longer than " + std::to_string(limits_.max_text));
    // A NUL inside a text would make it read differently as bytes (the token
    // check) and as a C string: one of them would be a different value.
    if (std::memchr(t.begin(), '\0', t.size()) != nullptr)
      return ProtocolError("text field with a NUL byte");
    out->assign(t.begin(), t.size());
    return OkStatus();
  }

  template <class L>
  Status ListSize(const L& list, const char* what) {
    if (list.size() > limits_.max_list) return ProtocolError(std::string(what) + " list too long");
    // Every element of every list of the schema takes at least a byte of the
    // envelope (an encoder writes structs at their schema's size); a list of
    // zero-sized elements would make a few bytes decode into millions of values.
    if (list.size() > header_bytes_) {
      return ProtocolError(std::string(what) + " list longer than its message could hold");
    }
    return OkStatus();
  }

  // The map's owners as they are; ShardMap::Validate checks them against a layout.
  Status Map(wire::ShardMap::Reader in, ShardMap* out) {
    EPS_RETURN_IF_ERROR(ListSize(in.getChunkOwners(), "chunk owners"));
    EPS_RETURN_IF_ERROR(ListSize(in.getPartitionOwners(), "partition owners"));
    out->generation = in.getGeneration();
    out->chunk_owner.clear();
    out->partition_owner.clear();
    for (uint16_t s : in.getChunkOwners()) out->chunk_owner.push_back(ShardId(s));
    for (uint16_t s : in.getPartitionOwners()) out->partition_owner.push_back(ShardId(s));
    return OkStatus();
  }

  Status Tensors(capnp::List<wire::TensorSpec>::Reader in, std::vector<TensorSpec>* out) {
    EPS_RETURN_IF_ERROR(ListSize(in, "tensors"));
    out->clear();
    for (auto t : in) {
      TensorSpec spec;
      EPS_RETURN_IF_ERROR(Text(t.getName(), &spec.name));
      if (t.getKind() > static_cast<uint8_t>(TensorKind::kLoss))
        return ProtocolError("unknown tensor kind");
      if (t.getDtype() > static_cast<uint8_t>(DType::kInt64)) return ProtocolError("unknown dtype");
      spec.kind = static_cast<TensorKind>(t.getKind());
      spec.dtype = static_cast<DType>(t.getDtype());
      spec.sparse = t.getSparse();
      if (t.getShape().size() > 8)
        return ProtocolError("tensor " + spec.name + " has more than 8 dimensions");
      for (int64_t d : t.getShape()) spec.shape.push_back(d);
      out->push_back(std::move(spec));
    }
    return OkStatus();
  }

  // One field of a job spec (see EPS_PUT_FIELD in codec.cc). A number or a bool is
  // taken as it is; T is deduced from both arguments, so a C++ field whose type
  // differs from its capnp field's matches no overload and does not compile.
  template <class T>
  Status Get(T in, T* out) {
    *out = in;
    return OkStatus();
  }
  Status Get(capnp::Text::Reader in, std::string* out) { return Text(in, out); }
  Status Get(uint8_t in, WireDType* out) {
    StatusOr<WireDType> dtype = WireDTypeFromCode(in);
    if (!dtype.ok()) return ProtocolError(dtype.status().message());
    *out = *dtype;
    return OkStatus();
  }

#define EPS_GET_FIELD(type, name, default_value, Capnp, flag, role) \
  EPS_RETURN_IF_ERROR(Get(in.get##Capnp(), &s->name));

  Status Get(wire::OptimizerSpec::Reader in, OptimizerSpec* s) {
    EPS_OPTIMIZER_SPEC_FIELDS(EPS_GET_FIELD)
    return OkStatus();
  }

  Status Spec(wire::JobSpec::Reader in, JobSpec* s) {
    EPS_JOB_SPEC_FIELDS(EPS_GET_FIELD)
    return OkStatus();
  }

#undef EPS_GET_FIELD

  Status Chunks(capnp::List<wire::ChunkRef>::Reader in, std::vector<ChunkBytes>* out) {
    EPS_RETURN_IF_ERROR(ListSize(in, "chunks"));
    out->clear();
    for (auto ref : in) {
      const size_t frame = size_t{ref.getFrame()} + 1;  // frame 0 is the envelope
      if (frame >= frames_.size()) {
        return ProtocolError("chunk " + std::to_string(ref.getChunk()) + " names missing frame " +
                             std::to_string(ref.getFrame()));
      }
      if (used_[frame])
        return ProtocolError("frame " + std::to_string(ref.getFrame()) + " referenced twice");
      used_[frame] = true;
      const Frame& f = frames_[frame];
      out->push_back({ChunkId(ref.getChunk()), f.data, f.size, f.owner});
    }
    return OkStatus();
  }

  Status ShmChunks(capnp::List<wire::ShmChunk>::Reader in, std::vector<ShmChunk>* out) {
    EPS_RETURN_IF_ERROR(ListSize(in, "shared-memory chunks"));
    out->clear();
    for (auto c : in) out->push_back({ChunkId(c.getChunk()), c.getOffset(), c.getSize()});
    return OkStatus();
  }

  // Sparse rows: each names two frames, the ids (8 bytes a row) and the values
  // (a multiple of 4 bytes a row; the table's dim is checked by the receiver), or
  // offsets in a shared-memory region (null data: the receiver points them there).
  Status SparseRows(capnp::List<wire::SparseRowsRef>::Reader in,
                    std::vector<SparseRowBytes>* out) {
    EPS_RETURN_IF_ERROR(ListSize(in, "sparse rows"));
    out->clear();
    for (auto ref : in) {
      SparseRowBytes rows;
      rows.table = ref.getTable();
      rows.rows = ref.getRows();
      Frame ids, values;
      if (ref.getInShm()) {
        rows.in_shm = true;
        rows.ids_offset = ref.getIdsOffset();
        rows.values_offset = ref.getValuesOffset();
        ids.size = size_t{rows.rows} * sizeof(uint64_t);
        values.size = ref.getValuesBytes();
      } else {
        EPS_RETURN_IF_ERROR(ByteFrame(ref.getIdsFrame(), &ids));
        EPS_RETURN_IF_ERROR(ByteFrame(ref.getValuesFrame(), &values));
      }
      if (ids.size != uint64_t{rows.rows} * sizeof(uint64_t))
        return ProtocolError("sparse rows whose ids frame does not hold one id a row");
      if (values.size % sizeof(float) != 0 || (rows.rows == 0) != (values.size == 0) ||
          (rows.rows > 0 && values.size / sizeof(float) % rows.rows != 0))
        return ProtocolError("sparse rows whose values frame does not hold whole rows");
      rows.ids = {ChunkId(0), ids.data, ids.size, ids.owner};
      rows.values = {ChunkId(0), values.data, values.size, values.owner};
      out->push_back(std::move(rows));
    }
    return OkStatus();
  }

  // Sparse reads: one of a table looked up by rows, or one by version with warm rows, names a
  // frame of its ids (8 bytes a row; their order and range are checked by the receiver).
  Status SparseReads(capnp::List<wire::SparseRead>::Reader in, std::vector<SparseRead>* out) {
    EPS_RETURN_IF_ERROR(ListSize(in, "sparse reads"));
    out->clear();
    for (auto ref : in) {
      SparseRead read{ref.getTable(), Step(ref.getSince())};
      read.lookup = ref.getLookup();
      read.from_row = ref.getFromRow();
      read.max_rows = ref.getMaxRows();
      if (read.lookup && (read.from_row != 0 || read.max_rows != 0))
        return ProtocolError("a sparse lookup in pages");
      if (read.lookup || ref.getRows() != 0) {
        read.rows = ref.getRows();
        Frame ids;
        EPS_RETURN_IF_ERROR(ByteFrame(ref.getIdsFrame(), &ids));
        if (ids.size != uint64_t{read.rows} * sizeof(uint64_t))
          return ProtocolError("a sparse read whose ids frame does not hold one id a row");
        read.ids = {ChunkId(0), ids.data, ids.size, ids.owner};
      }
      out->push_back(std::move(read));
    }
    return OkStatus();
  }

  // The byte frame `frame` (0 = the first after the envelope), taken once.
  Status ByteFrame(uint32_t frame, Frame* out) {
    const size_t i = size_t{frame} + 1;  // frame 0 is the envelope
    if (i >= frames_.size()) return ProtocolError("names missing frame " + std::to_string(frame));
    if (used_[i]) return ProtocolError("frame " + std::to_string(frame) + " referenced twice");
    used_[i] = true;
    *out = frames_[i];
    return OkStatus();
  }

  // Every byte frame must belong to some chunk: stray frames mean a confused peer.
  Status AllFramesUsed() const {
    for (size_t i = 1; i < used_.size(); ++i) {
      if (!used_[i])
        return ProtocolError("frame " + std::to_string(i - 1) + " is not referenced by any chunk");
    }
    return OkStatus();
  }

 private:
  const std::vector<Frame>& frames_;
  const DecodeLimits& limits_;
  std::vector<bool> used_;
  const size_t header_bytes_;  // of the envelope (frame 0)
};

// JobStatusReply both ways (codec_status.cc).
Status DecodeJobStatus(wire::JobStatusReply::Reader in, Reader& r, JobStatusReply* m);
void SetJobStatus(wire::JobStatusReply::Builder o, const JobStatusReply& m);

void SetMap(wire::ShardMap::Builder out, const ShardMap& map);

// Sparse rows and reads (codec_rows.cc): their byte frames go after `frames`' last.
void SetSparseRows(capnp::List<wire::SparseRowsRef>::Builder out,
                   const std::vector<SparseRowBytes>& rows, std::vector<Frame>* frames);
void SetSparseReads(capnp::List<wire::SparseRead>::Builder out,
                    const std::vector<SparseRead>& reads, std::vector<Frame>* frames);

// The move messages both ways (codec_move.cc): Reshard, ReshardReady,
// MoveRequest, MoveReply. Byte frames go after `frames`' last.
Status DecodeMoveBody(wire::Envelope::Body::Reader in, Reader& r, Body* body);
void EncodeMoveBody(const Reshard& m, wire::Envelope::Body::Builder out,
                    std::vector<Frame>* frames);
void EncodeMoveBody(const ReshardReady& m, wire::Envelope::Body::Builder out,
                    std::vector<Frame>* frames);
void EncodeMoveBody(const MoveRequest& m, wire::Envelope::Body::Builder out,
                    std::vector<Frame>* frames);
void EncodeMoveBody(const MoveReply& m, wire::Envelope::Body::Builder out,
                    std::vector<Frame>* frames);

}  // namespace codec_internal
}  // namespace eps
