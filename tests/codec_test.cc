// Tests for the wire codec (schema/codec.h): every message kind survives
// Encode -> Decode with all its fields, chunk bytes are never copied, and any
// malformed input (garbage, bit flips, truncation, bad frame references, limits)
// gives a ProtocolError instead of a crash. Every field of the job spec's field
// lists (schema/messages.h) is compared, carried and has its capnp field.
//
// Envelopes Encode cannot produce (another protocol version, an unknown union
// tag, a frame named twice) are made by editing an encoded envelope with Cap'n
// Proto's schema-less AnyStruct API; each edit first checks that it found the
// field it expects, so a layout change fails the test instead of passing it.
#include "schema/codec.h"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "schema/elasticps.capnp.h"  // generated, in the build tree
#include "fuzz/fuzz_input.h"
#include "tests/sample_messages.h"

namespace eps {
namespace {

using samples::EveryMessageKind;
using samples::FullSpec;
using samples::FullTensors;
using samples::MakeChunk;

// ---- comparing values ------------------------------------------------------

void ExpectSameSpec(const JobSpec& a, const JobSpec& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.data_dir, b.data_dir);
  EXPECT_EQ(a.virtual_workers, b.virtual_workers);
  EXPECT_EQ(a.batch_per_vw, b.batch_per_vw);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.train_limit, b.train_limit);
  EXPECT_EQ(a.test_limit, b.test_limit);
  EXPECT_EQ(a.chunk_elems, b.chunk_elems);
  EXPECT_EQ(a.num_shards, b.num_shards);
  EXPECT_EQ(a.eval_batch, b.eval_batch);
  EXPECT_EQ(a.allow_mixed_devices, b.allow_mixed_devices);
  EXPECT_EQ(a.grad_wire_dtype, b.grad_wire_dtype);
  EXPECT_EQ(a.weight_wire_dtype, b.weight_wire_dtype);
  const OptimizerSpec& p = a.optimizer;
  const OptimizerSpec& q = b.optimizer;
  EXPECT_EQ(p.kind, q.kind);
  EXPECT_EQ(p.lr, q.lr);
  EXPECT_EQ(p.momentum, q.momentum);
  EXPECT_EQ(p.dampening, q.dampening);
  EXPECT_EQ(p.nesterov, q.nesterov);
  EXPECT_EQ(p.weight_decay, q.weight_decay);
  EXPECT_EQ(p.beta1, q.beta1);
  EXPECT_EQ(p.beta2, q.beta2);
  EXPECT_EQ(p.eps, q.eps);
  EXPECT_EQ(p.schedule, q.schedule);
  EXPECT_EQ(p.step_size, q.step_size);
  EXPECT_EQ(p.gamma, q.gamma);
  EXPECT_EQ(p.warmup_steps, q.warmup_steps);
  EXPECT_EQ(p.min_lr, q.min_lr);
}

void ExpectSameStatus(const JobStatusReply& a, const JobStatusReply& b) {
  EXPECT_EQ(std::tie(a.job_id, a.model, a.phase, a.paused, a.step, a.steps, a.epoch, a.has_loss,
                     a.loss, a.lr, a.samples_per_s, a.eta_s, a.elapsed_s, a.virtual_workers,
                     a.batch_per_vw, a.assignment_epoch, a.evaluated, a.test_accuracy, a.events,
                     a.rejected_messages, a.hold_from, a.map_generation, a.resharding),
            std::tie(b.job_id, b.model, b.phase, b.paused, b.step, b.steps, b.epoch, b.has_loss,
                     b.loss, b.lr, b.samples_per_s, b.eta_s, b.elapsed_s, b.virtual_workers,
                     b.batch_per_vw, b.assignment_epoch, b.evaluated, b.test_accuracy, b.events,
                     b.rejected_messages, b.hold_from, b.map_generation, b.resharding));
  ASSERT_EQ(a.workers.size(), b.workers.size());
  for (size_t i = 0; i < a.workers.size(); ++i) {
    const WorkerStatus& p = a.workers[i];
    const WorkerStatus& q = b.workers[i];
    EXPECT_EQ(std::tie(p.worker, p.host, p.pid, p.device_kind, p.state, p.vw_lo, p.vw_hi,
                       p.seconds_per_vw, p.since_heartbeat_s, p.steps_contributed,
                       p.metrics_address),
              std::tie(q.worker, q.host, q.pid, q.device_kind, q.state, q.vw_lo, q.vw_hi,
                       q.seconds_per_vw, q.since_heartbeat_s, q.steps_contributed,
                       q.metrics_address));
  }
  ASSERT_EQ(a.shards.size(), b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    const ShardStatus& p = a.shards[i];
    const ShardStatus& q = b.shards[i];
    EXPECT_EQ(std::tie(p.shard, p.address, p.registered, p.version, p.durable_step,
                       p.since_checkpoint_s, p.bytes_in, p.bytes_out, p.metrics_address, p.role),
              std::tie(q.shard, q.address, q.registered, q.version, q.durable_step,
                       q.since_checkpoint_s, q.bytes_in, q.bytes_out, q.metrics_address, q.role));
  }
}

void ExpectSameChunks(const std::vector<ChunkBytes>& sent, const std::vector<ChunkBytes>& got) {
  ASSERT_EQ(sent.size(), got.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].chunk, got[i].chunk);
    ASSERT_EQ(sent[i].size, got[i].size);
    if (sent[i].size > 0) {
      EXPECT_EQ(std::memcmp(sent[i].data, got[i].data, sent[i].size), 0) << "chunk " << i;
    }
    EXPECT_NE(got[i].owner, nullptr) << "decoded chunk " << i << " keeps nothing alive";
  }
}

void ExpectSameShmChunks(const std::vector<ShmChunk>& sent, const std::vector<ShmChunk>& got) {
  ASSERT_EQ(sent.size(), got.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].chunk, got[i].chunk);
    EXPECT_EQ(sent[i].offset, got[i].offset);
    EXPECT_EQ(sent[i].size, got[i].size);
  }
}

void ExpectSameBody(const Body& sent, const Body& got) {
  ASSERT_EQ(sent.index(), got.index()) << BodyName(sent) << " came back as " << BodyName(got);
  std::visit(
      [&](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        const T& b = std::get<T>(got);
        if constexpr (std::is_same_v<T, ErrorReply>) {
          EXPECT_EQ(a.code, b.code);
          EXPECT_EQ(a.message, b.message);
        } else if constexpr (std::is_same_v<T, RegisterWorker>) {
          EXPECT_EQ(a.host, b.host);
          EXPECT_EQ(a.pid, b.pid);
          EXPECT_EQ(a.device_kind, b.device_kind);
          EXPECT_EQ(a.metrics_address, b.metrics_address);
        } else if constexpr (std::is_same_v<T, RegisterWorkerReply>) {
          EXPECT_EQ(a.worker, b.worker);
          ExpectSameSpec(a.spec, b.spec);
          EXPECT_EQ(a.shard_addresses, b.shard_addresses);
          EXPECT_EQ(a.model_bytes, b.model_bytes);
          EXPECT_EQ(a.init_bytes, b.init_bytes);
          EXPECT_EQ(a.vocab, b.vocab);
          EXPECT_EQ(a.model_size, b.model_size);
          EXPECT_EQ(a.init_size, b.init_size);
          EXPECT_EQ(a.fetch_chunk_bytes, b.fetch_chunk_bytes);
          EXPECT_EQ(a.map, b.map);
        } else if constexpr (std::is_same_v<T, RegisterShard>) {
          EXPECT_EQ(a.shard, b.shard);
          EXPECT_EQ(a.address, b.address);
          EXPECT_EQ(a.durable_step, b.durable_step);
          EXPECT_EQ(a.version, b.version);
          EXPECT_EQ(a.metrics_address, b.metrics_address);
        } else if constexpr (std::is_same_v<T, ShardConfig>) {
          ExpectSameSpec(a.spec, b.spec);
          EXPECT_EQ(a.tensors, b.tensors);
          EXPECT_EQ(a.timeline, b.timeline);
          EXPECT_EQ(a.map.has_value(), b.map.has_value());
          if (a.map && b.map) {
            EXPECT_TRUE(*a.map == *b.map);
          }
        } else if constexpr (std::is_same_v<T, StepRequest>) {
          EXPECT_EQ(a.worker, b.worker);
          EXPECT_EQ(a.done_step, b.done_step);
          EXPECT_EQ(a.tensors, b.tensors);
          EXPECT_EQ(a.train_samples, b.train_samples);
          EXPECT_EQ(a.test_samples, b.test_samples);
          EXPECT_EQ(a.abandoned, b.abandoned);
          EXPECT_EQ(a.seconds_per_vw, b.seconds_per_vw);
          EXPECT_EQ(a.data_fingerprint, b.data_fingerprint);
        } else if constexpr (std::is_same_v<T, StepPlan>) {
          EXPECT_EQ(a.kind, b.kind);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.epoch, b.epoch);
          EXPECT_EQ(a.timeline, b.timeline);
          EXPECT_EQ(a.vw_lo, b.vw_lo);
          EXPECT_EQ(a.vw_hi, b.vw_hi);
          EXPECT_EQ(a.eval_lo, b.eval_lo);
          EXPECT_EQ(a.eval_hi, b.eval_hi);
        } else if constexpr (std::is_same_v<T, StepDone>) {
          EXPECT_EQ(a.shard, b.shard);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.has_loss, b.has_loss);
          EXPECT_EQ(a.loss, b.loss);
          EXPECT_EQ(a.durable_step, b.durable_step);
          EXPECT_EQ(a.checkpoint_error, b.checkpoint_error);
          EXPECT_EQ(a.lr, b.lr);
          EXPECT_EQ(a.bytes_in, b.bytes_in);
          EXPECT_EQ(a.bytes_out, b.bytes_out);
          EXPECT_EQ(a.checkpoint_blocking_ms, b.checkpoint_blocking_ms);
          EXPECT_EQ(a.checkpoint_write_ms, b.checkpoint_write_ms);
        } else if constexpr (std::is_same_v<T, Push>) {
          EXPECT_EQ(a.epoch, b.epoch);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.block, b.block);
          ExpectSameChunks(a.chunks, b.chunks);
          EXPECT_EQ(a.shm, b.shm);
          ExpectSameShmChunks(a.shm_chunks, b.shm_chunks);
        } else if constexpr (std::is_same_v<T, PushReply>) {
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.accepted, b.accepted);
          EXPECT_EQ(a.duplicates, b.duplicates);
        } else if constexpr (std::is_same_v<T, Pull>) {
          EXPECT_EQ(a.version, b.version);
          EXPECT_EQ(a.chunks, b.chunks);
          EXPECT_EQ(a.dtype, b.dtype);
          EXPECT_EQ(a.shm, b.shm);
          EXPECT_EQ(a.shm_offsets, b.shm_offsets);
          EXPECT_EQ(a.optimizer_digest, b.optimizer_digest);
          EXPECT_EQ(a.timeline, b.timeline);
        } else if constexpr (std::is_same_v<T, PullReply>) {
          EXPECT_EQ(a.version, b.version);
          ExpectSameChunks(a.chunks, b.chunks);
          ExpectSameShmChunks(a.shm_chunks, b.shm_chunks);
          EXPECT_EQ(a.optimizer_digest, b.optimizer_digest);
        } else if constexpr (std::is_same_v<T, EvalResult>) {
          EXPECT_EQ(a.worker, b.worker);
          EXPECT_EQ(a.version, b.version);
          EXPECT_EQ(a.lo, b.lo);
          EXPECT_EQ(a.hi, b.hi);
          EXPECT_EQ(a.correct, b.correct);
          EXPECT_EQ(a.loss_sum, b.loss_sum);
        } else if constexpr (std::is_same_v<T, Shutdown>) {
          EXPECT_EQ(a.reason, b.reason);
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          EXPECT_EQ(a.worker, b.worker);
        } else if constexpr (std::is_same_v<T, Leave>) {
          EXPECT_EQ(a.worker, b.worker);
          EXPECT_EQ(a.reason, b.reason);
          EXPECT_EQ(a.host_fault, b.host_fault);
        } else if constexpr (std::is_same_v<T, Rollback>) {
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.timeline, b.timeline);
        } else if constexpr (std::is_same_v<T, RollbackDone>) {
          EXPECT_EQ(a.shard, b.shard);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.version, b.version);
          EXPECT_EQ(a.durable_step, b.durable_step);
          EXPECT_EQ(a.code, b.code);
          EXPECT_EQ(a.message, b.message);
        } else if constexpr (std::is_same_v<T, Retain>) {
          EXPECT_EQ(a.from_step, b.from_step);
        } else if constexpr (std::is_same_v<T, PoolRequest>) {
          EXPECT_EQ(a.host, b.host);
          EXPECT_EQ(a.device_kind, b.device_kind);
          EXPECT_EQ(a.job, b.job);
          EXPECT_EQ(a.ended, b.ended);
        } else if constexpr (std::is_same_v<T, PoolAssign>) {
          EXPECT_EQ(a.job, b.job);
          EXPECT_EQ(a.coordinator, b.coordinator);
          EXPECT_EQ(a.token, b.token);
          EXPECT_EQ(a.server_key, b.server_key);
        } else if constexpr (std::is_same_v<T, JobInfo>) {
        } else if constexpr (std::is_same_v<T, JobInfoReply>) {
          EXPECT_EQ(a.job_id, b.job_id);
          EXPECT_EQ(a.virtual_workers, b.virtual_workers);
          EXPECT_EQ(a.batch_per_vw, b.batch_per_vw);
          EXPECT_EQ(a.min_workers, b.min_workers);
          EXPECT_EQ(a.max_vws_per_worker, b.max_vws_per_worker);
          EXPECT_EQ(a.steps, b.steps);
          EXPECT_EQ(a.step, b.step);
          ASSERT_EQ(a.workers.size(), b.workers.size());
          for (size_t i = 0; i < a.workers.size(); ++i) {
            EXPECT_EQ(a.workers[i].host, b.workers[i].host);
            EXPECT_EQ(a.workers[i].device_kind, b.workers[i].device_kind);
            EXPECT_EQ(a.workers[i].seconds_per_vw, b.workers[i].seconds_per_vw);
          }
        } else if constexpr (std::is_same_v<T, JobStatusRequest>) {
          EXPECT_EQ(a.recent_events, b.recent_events);
        } else if constexpr (std::is_same_v<T, JobStatusReply>) {
          ExpectSameStatus(a, b);
        } else if constexpr (std::is_same_v<T, JobControl>) {
          EXPECT_EQ(a.hold, b.hold);
          EXPECT_EQ(a.from_step, b.from_step);
          EXPECT_EQ(a.remove_shard, b.remove_shard);
        } else if constexpr (std::is_same_v<T, FetchModel>) {
          EXPECT_EQ(a.sha256, b.sha256);
          EXPECT_EQ(a.offset, b.offset);
          EXPECT_EQ(a.length, b.length);
        } else if constexpr (std::is_same_v<T, FetchModelReply>) {
          EXPECT_EQ(a.sha256, b.sha256);
          EXPECT_EQ(a.offset, b.offset);
          EXPECT_EQ(a.file_size, b.file_size);
          ASSERT_EQ(a.size, b.size);
          EXPECT_EQ(0, std::memcmp(a.data, b.data, a.size));
        } else if constexpr (std::is_same_v<T, Reshard>) {
          EXPECT_TRUE(a.map == b.map);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.addresses, b.addresses);
        } else if constexpr (std::is_same_v<T, ReshardReady>) {
          EXPECT_EQ(a.shard, b.shard);
          EXPECT_EQ(a.generation, b.generation);
          EXPECT_EQ(a.code, b.code);
          EXPECT_EQ(a.message, b.message);
          EXPECT_EQ(a.bytes_in, b.bytes_in);
          EXPECT_EQ(a.committed, b.committed);
        } else if constexpr (std::is_same_v<T, MoveRequest>) {
          EXPECT_EQ(a.generation, b.generation);
          EXPECT_EQ(a.step, b.step);
          EXPECT_EQ(a.chunks, b.chunks);
          EXPECT_EQ(a.partitions, b.partitions);
        } else if constexpr (std::is_same_v<T, MoveReply>) {
          EXPECT_EQ(a.generation, b.generation);
          EXPECT_EQ(a.step, b.step);
          ASSERT_EQ(a.blobs.size(), b.blobs.size());
          for (size_t i = 0; i < a.blobs.size(); ++i) {
            EXPECT_EQ(a.blobs[i].name, b.blobs[i].name);
            EXPECT_EQ(a.blobs[i].crc32, b.blobs[i].crc32);
            ASSERT_EQ(a.blobs[i].size, b.blobs[i].size);
            EXPECT_EQ(0, std::memcmp(a.blobs[i].data, b.blobs[i].data, a.blobs[i].size));
          }
        } else {
          static_assert(!sizeof(T), "a Body alternative has no comparison");
        }
      },
      sent);
}

const std::vector<ChunkBytes>* ChunksOf(const Body& body) {
  if (const auto* p = std::get_if<Push>(&body)) return &p->chunks;
  if (const auto* p = std::get_if<PullReply>(&body)) return &p->chunks;
  return nullptr;
}

// ---- frames as a peer would deliver them -------------------------------------

// A frame whose bytes live in their own heap block of exactly the frame's size,
// starting `misalign` bytes into an 8-aligned allocation, so ASan sees any read
// past the end and the decoder sees unaligned headers.
Frame OwnedFrame(const void* data, size_t size, size_t misalign = 0) {
  auto block = std::shared_ptr<uint8_t[]>(new uint8_t[size + misalign]);
  if (size > 0) std::memcpy(block.get() + misalign, data, size);
  const uint8_t* start = block.get() + misalign;
  return Frame{start, size, std::shared_ptr<const void>(block, start)};
}

std::vector<Frame> CopyFrames(const std::vector<Frame>& frames, size_t header_misalign = 0) {
  std::vector<Frame> out;
  for (size_t i = 0; i < frames.size(); ++i) {
    out.push_back(OwnedFrame(frames[i].data, frames[i].size, i == 0 ? header_misalign : 0));
  }
  return out;
}

std::vector<Frame> EncodeOrDie(const Envelope& e) {
  auto frames = Encode(e);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  return frames.ok() ? std::move(frames).value() : std::vector<Frame>{};
}

void ExpectInvalid(const std::vector<Frame>& frames, const std::string& message_part,
                   const DecodeLimits& limits = DecodeLimits()) {
  auto decoded = Decode(frames, limits);
  ASSERT_FALSE(decoded.ok()) << "decoded a malformed message as " << BodyName(decoded->body);
  // A peer that sends it broke the protocol.
  EXPECT_EQ(decoded.status().code(), StatusCode::kProtocolError) << decoded.status().ToString();
  EXPECT_NE(decoded.status().message().find(message_part), std::string::npos)
      << "'" << decoded.status().message() << "' does not mention '" << message_part << "'";
}

// An encoded envelope opened for editing with the schema-less API.
class RawEnvelope {
 public:
  explicit RawEnvelope(const Frame& head) {
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(head.size / sizeof(capnp::word));
    std::memcpy(words.begin(), head.data, head.size);
    capnp::FlatArrayMessageReader reader(words);
    message_.getRoot<capnp::AnyPointer>().set(reader.getRoot<capnp::AnyPointer>());
  }
  capnp::AnyStruct::Builder root() { return message_.getRoot<capnp::AnyStruct>(); }
  // Envelope field `version` (UInt16 at data byte 0) and the body's union tag (UInt16 at byte 2).
  uint16_t Get16(size_t byte) {
    auto data = root().getDataSection();
    return static_cast<uint16_t>(data[byte] | (data[byte + 1] << 8));
  }
  void Set16(size_t byte, uint16_t v) {
    auto data = root().getDataSection();
    data[byte] = static_cast<uint8_t>(v);
    data[byte + 1] = static_cast<uint8_t>(v >> 8);
  }
  // The body struct (pointer 1 of the envelope; pointer 0 is the token).
  capnp::AnyStruct::Builder body() {
    return root().getPointerSection()[1].getAs<capnp::AnyStruct>();
  }
  Frame Flat() {
    auto flat = std::make_shared<kj::Array<capnp::word>>(capnp::messageToFlatArray(message_));
    return Frame{flat->begin(), flat->size() * sizeof(capnp::word), flat};
  }

 private:
  capnp::MallocMessageBuilder message_;
};

constexpr uint16_t kShutdownTag = 13;  // Envelope.body: shutdown @15 is the 14th member (tag 13)
constexpr uint16_t kPushTag = 8;       // push @10

// ---- round trips ------------------------------------------------------------

TEST(Codec, EveryMessageKindRoundTripsWithAllFields) {
  const std::vector<Envelope> messages = EveryMessageKind();
  ASSERT_EQ(messages.size(), std::variant_size_v<Body>);
  for (const Envelope& sent : messages) {
    SCOPED_TRACE(BodyName(sent.body));
    const std::vector<Frame> frames = EncodeOrDie(sent);
    ASSERT_FALSE(frames.empty());
    const auto* chunks = ChunksOf(sent.body);
    const bool file_bytes = std::holds_alternative<FetchModelReply>(sent.body);
    const auto* moved = std::get_if<MoveReply>(&sent.body);
    EXPECT_EQ(frames.size(), 1 + (chunks ? chunks->size() : 0) + (file_bytes ? 1 : 0) +
                                 (moved ? moved->blobs.size() : 0));

    // As encoded, and as a peer delivers it: fresh buffers, the header unaligned.
    for (size_t misalign : {0, 1, 3, 4, 7}) {
      const std::vector<Frame> wire = CopyFrames(frames, misalign);
      auto got = Decode(wire);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->token, sent.token);
      ExpectSameBody(sent.body, got->body);
      if (const auto* got_chunks = ChunksOf(got->body)) {
        // Received chunks point into their frames, in order: never a copy.
        for (size_t i = 0; i < got_chunks->size(); ++i) {
          EXPECT_EQ((*got_chunks)[i].data, wire[i + 1].data) << "chunk " << i;
          EXPECT_EQ((*got_chunks)[i].owner, wire[i + 1].owner) << "chunk " << i;
        }
      }
      if (const auto* got_file = std::get_if<FetchModelReply>(&got->body)) {
        EXPECT_EQ(got_file->data, wire[1].data) << "file bytes are never copied";
      }
      if (const auto* got_moved = std::get_if<MoveReply>(&got->body)) {
        for (size_t i = 0; i < got_moved->blobs.size(); ++i)
          EXPECT_EQ(got_moved->blobs[i].data, wire[i + 1].data) << "moved bytes are never copied";
      }
    }
  }
}

TEST(Codec, RegisterShardVersionDefaultsToMinusOneAndZeroSurvives) {
  // -1 is the schema default: it goes on the wire as zero bits, as from a sender without the field.
  for (int64_t version : {int64_t{-1}, int64_t{0}, int64_t{1} << 40}) {
    SCOPED_TRACE(version);
    const std::vector<Frame> frames =
        EncodeOrDie({"t", RegisterShard{ShardId(1), "tcp://h:1", Step(-1), Step(version)}});
    RawEnvelope raw(frames[0]);
    auto data = raw.body().getDataSection();
    ASSERT_GE(data.size(), 24u);  // shard, durableStep, version: one word each
    bool zero = true;
    for (size_t i = 16; i < 24; ++i) zero = zero && data[i] == 0;
    EXPECT_EQ(zero, version == -1);
    auto got = Decode(frames);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(std::get<RegisterShard>(got->body).version, Step(version));
  }
}

TEST(Codec, RegisterWorkerFromASenderWithoutDeviceKindMeansCpu) {
  // Workers from before the field existed ran on CPU only.
  const std::vector<Frame> frames = EncodeOrDie({"t", RegisterWorker{"h", 7, "cuda:NVIDIA H200"}});
  RawEnvelope raw(frames[0]);
  auto pointers = raw.body().getPointerSection();
  ASSERT_EQ(pointers.size(), 4u) << "RegisterWorker holds host, deviceKind, metricsAddress, cpuKernels";
  ASSERT_STREQ(pointers[1].getAs<capnp::Text>().cStr(), "cuda:NVIDIA H200") << "deviceKind moved";
  pointers[1].clear();
  auto got = Decode({raw.Flat()});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::get<RegisterWorker>(got->body).device_kind, "cpu");
  EXPECT_EQ(std::get<RegisterWorker>(got->body).host, "h");
}

TEST(Codec, JobSpecAllowMixedDevicesIsFalseByDefaultAndSurvivesFalse) {
  JobSpec spec = FullSpec();
  spec.allow_mixed_devices = false;
  auto got = Decode(EncodeOrDie({"t", ShardConfig{spec, {}}}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(std::get<ShardConfig>(got->body).spec.allow_mixed_devices);
  EXPECT_FALSE(JobSpec().allow_mixed_devices);
}

TEST(Codec, WireDTypesDefaultToFP32AndUnknownCodesAreInvalid) {
  EXPECT_EQ(JobSpec().grad_wire_dtype, WireDType::kFP32);
  EXPECT_EQ(JobSpec().weight_wire_dtype, WireDType::kFP32);
  EXPECT_EQ(Pull().dtype, WireDType::kFP32);
  // Pull: version (Int64) at data byte 0, dtype (UInt8) at byte 8.
  RawEnvelope pull(EncodeOrDie({"t", Pull{Step(3), {}, WireDType::kFP16}})[0]);
  ASSERT_EQ(pull.body().getDataSection()[8], 2);
  pull.body().getDataSection()[8] = 9;
  ExpectInvalid({pull.Flat()}, "wire dtype");
  // JobSpec (inside ShardConfig): the byte that differs between two specs that
  // differ only in the gradient dtype is that field; an unknown code there is refused.
  JobSpec spec = FullSpec();
  spec.grad_wire_dtype = WireDType::kFP32;
  RawEnvelope config(EncodeOrDie({"t", ShardConfig{spec, {}}})[0]);
  spec.grad_wire_dtype = WireDType::kFP16;
  RawEnvelope other(EncodeOrDie({"t", ShardConfig{spec, {}}})[0]);
  auto data = config.body().getPointerSection()[0].getAs<capnp::AnyStruct>().getDataSection();
  auto other_data = other.body().getPointerSection()[0].getAs<capnp::AnyStruct>().getDataSection();
  ASSERT_EQ(data.size(), other_data.size());
  int differing = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != other_data[i]) {
      data[i] = 7;
      ++differing;
    }
  }
  ASSERT_EQ(differing, 1);
  ExpectInvalid({config.Flat()}, "wire dtype");
}

// ---- the job spec's field lists ---------------------------------------------

// A value other than `v`, of its type.
std::string Other(const std::string& v) { return v + "x"; }
bool Other(bool v) { return !v; }
double Other(double v) { return v + 0.5; }
template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
T Other(T v) {
  return static_cast<T>(v + 7);
}
WireDType Other(WireDType v) { return v == WireDType::kBF16 ? WireDType::kFP16 : WireDType::kBF16; }
OptimizerSpec Other(const OptimizerSpec& v) {
  OptimizerSpec o = v;
  o.kind = Other(o.kind);
  return o;
}

// One spec per field (and per optimizer field), each differing from the default
// in that field only, named after it.
std::vector<std::pair<std::string, JobSpec>> OneFieldChanged() {
  std::vector<std::pair<std::string, JobSpec>> out;
#define EPS_CHANGE_ONE(type, name, default_value, Capnp, flag, role) \
  out.emplace_back(#name, JobSpec());                                \
  out.back().second.name = Other(out.back().second.name);
  EPS_JOB_SPEC_FIELDS(EPS_CHANGE_ONE)
#undef EPS_CHANGE_ONE
#define EPS_CHANGE_ONE(type, name, default_value, Capnp, flag, role) \
  out.emplace_back("optimizer." #name, JobSpec());                   \
  out.back().second.optimizer.name = Other(out.back().second.optimizer.name);
  EPS_OPTIMIZER_SPEC_FIELDS(EPS_CHANGE_ONE)
#undef EPS_CHANGE_ONE
  return out;
}

TEST(JobSpecFields, EveryFieldIsComparedAndCarriedByTheCodec) {
  const auto changed = OneFieldChanged();
  ASSERT_GT(changed.size(), 30u);
  for (const auto& [name, spec] : changed) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(spec == JobSpec()) << "operator== misses the field";
    auto got = Decode(EncodeOrDie({"t", ShardConfig{spec, {}}}));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(std::get<ShardConfig>(got->body).spec == spec) << "the codec drops the field";
  }
}

// The capnp structs have exactly the fields of the lists: a capnp field the list
// lacks would never be carried (the compiler checks the other direction).
TEST(JobSpecFields, TheCapnpStructsHaveExactlyTheListedFields) {
  auto expect_same_fields = [](capnp::StructSchema schema, std::vector<std::string> listed) {
    std::vector<std::string> in_capnp;
    for (auto field : schema.getFields()) in_capnp.push_back(field.getProto().getName().cStr());
    for (std::string& name : listed) name[0] = static_cast<char>(std::tolower(name[0]));
    std::sort(in_capnp.begin(), in_capnp.end());
    std::sort(listed.begin(), listed.end());
    EXPECT_EQ(in_capnp, listed);
  };
#define EPS_CAPNP_NAME(type, name, default_value, Capnp, flag, role) #Capnp,
  expect_same_fields(capnp::Schema::from<wire::JobSpec>(), {EPS_JOB_SPEC_FIELDS(EPS_CAPNP_NAME)});
  expect_same_fields(capnp::Schema::from<wire::OptimizerSpec>(),
                     {EPS_OPTIMIZER_SPEC_FIELDS(EPS_CAPNP_NAME)});
#undef EPS_CAPNP_NAME
}

TEST(JobSpecFields, SameComputationComparesExactlyTheFieldsThatFixWhatAWorkerComputes) {
  const std::set<std::string> computation = {
      "job_id",     "model",           "data_dir",         "virtual_workers", "batch_per_vw",
      "seed",       "threads",         "train_limit",      "test_limit",      "chunk_elems",
      "num_shards", "grad_wire_dtype", "weight_wire_dtype", "model_sha256",    "train_data",
      "train_labels", "test_data",     "test_labels",      "data_format",     "label_column",
      "init_sha256",  "reinit",        "freeze",           "init_allow_mismatch", "text_column",
      "seq_len",      "vocab_size",    "model_dim",        "model_layers",    "model_heads",
      "model_depth",  "cpu_kernels",   "sparse_optimizer", "hash_buckets"};
  EXPECT_TRUE(SameComputation(JobSpec(), JobSpec()));
  for (const auto& [name, spec] : OneFieldChanged()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(SameComputation(JobSpec(), spec), computation.count(name) == 0);
    EXPECT_EQ(SameComputation(spec, JobSpec()), computation.count(name) == 0);
  }
}

// ---- status codes in ErrorReply and RollbackDone -----------------------------

TEST(Codec, EveryStatusCodeCrossesTheWireInErrorReplyAndRollbackDone) {
  for (int c = 1; c <= static_cast<int>(kLastStatusCode); ++c) {
    const auto code = static_cast<StatusCode>(c);
    SCOPED_TRACE(StatusCodeName(code));
    auto error = Decode(EncodeOrDie({"t", ErrorReply{code, "why"}}));
    ASSERT_TRUE(error.ok()) << error.status().ToString();
    EXPECT_EQ(std::get<ErrorReply>(error->body).ToStatus().code(), code);
    EXPECT_EQ(std::get<ErrorReply>(error->body).message, "why");
    RollbackDone done;
    done.code = code;
    auto rollback = Decode(EncodeOrDie({"t", done}));
    ASSERT_TRUE(rollback.ok()) << rollback.status().ToString();
    EXPECT_EQ(std::get<RollbackDone>(rollback->body).code, code);
  }
  // The codes added last, by name: a peer's protocol violation and "do it another way".
  for (StatusCode code : {StatusCode::kProtocolError, StatusCode::kUnimplemented}) {
    auto error = Decode(EncodeOrDie({"t", ErrorReply{code, "x"}}));
    ASSERT_TRUE(error.ok()) << error.status().ToString();
    EXPECT_EQ(std::get<ErrorReply>(error->body).code, code);
  }
}

TEST(Codec, EncodeHandsChunkBytesThroughWithoutCopying) {
  Push push;
  push.block = Block{0, 1};
  push.chunks = {MakeChunk(4, 8 << 20, 9), MakeChunk(5, 1 << 20, 10), MakeChunk(6, 16, 11)};
  const std::vector<Frame> frames = EncodeOrDie({"t", push});
  ASSERT_EQ(frames.size(), 4u);
  for (size_t i = 0; i < push.chunks.size(); ++i) {
    EXPECT_EQ(frames[i + 1].data, push.chunks[i].data);
    EXPECT_EQ(frames[i + 1].size, push.chunks[i].size);
    EXPECT_EQ(frames[i + 1].owner, push.chunks[i].owner);
  }
  auto got = Decode(frames);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& chunks = std::get<Push>(got->body).chunks;
  ASSERT_EQ(chunks.size(), 3u);
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].data, push.chunks[i].data);
    EXPECT_EQ(chunks[i].chunk, push.chunks[i].chunk);
  }
  // The header owns its bytes: it outlives the Envelope it was encoded from.
  EXPECT_NE(frames[0].owner, nullptr);
  EXPECT_EQ(frames[0].size % 8, 0u);
}

// ---- malformed input ---------------------------------------------------------

TEST(Codec, EmptyFrameListIsInvalid) { ExpectInvalid({}, "empty"); }

TEST(Codec, HeaderThatIsNotWholeWordsIsInvalid) {
  std::vector<Frame> frames = EncodeOrDie({"t", Shutdown{"bye"}});
  for (size_t size : {size_t{0}, size_t{1}, size_t{7}, frames[0].size - 4, frames[0].size + 3}) {
    std::vector<uint8_t> bytes(size, 0);
    if (size > 0) std::memcpy(bytes.data(), frames[0].data, std::min(size, frames[0].size));
    ExpectInvalid({OwnedFrame(bytes.data(), bytes.size())}, "words");
  }
}

// fuzz/corpus/decode/crash-list-amplification, found by fuzz/decode_fuzz.cc:
// a 676-byte input whose lists name far more elements than its bytes can
// hold (zero-sized list elements), which decoded into hundreds of thousands of
// default values. A list longer than its message's bytes is refused.
TEST(Codec, ListsLongerThanTheirMessageAreRefused) {
  const std::vector<uint8_t> input = {
      0xa0, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00,
      0x00, 0x00, 0x42, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x06, 0x00, 0x74,
      0x6f, 0x6b, 0x2d, 0x6a, 0x73, 0x74, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x3f,
      0x29, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99,
      0xa9, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0x89, 0x40, 0x33, 0x33, 0x33, 0x33, 0x33,
      0x73, 0x52, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3e, 0x40, 0x08, 0x00, 0x00, 0x00,
      0x20, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x33, 0x33, 0x33,
      0x33, 0x33, 0x33, 0xed, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x15, 0x00,
      0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x15,
      0x00, 0x00, 0x00, 0x4a, 0x00, 0x00, 0x00, 0x19, 0x00, 0x00, 0x00, 0xd0, 0x3f, 0x28, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x31, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x31,
      0x00, 0x61, 0x61, 0x22, 0x61, 0x61, 0x00, 0x31, 0x00, 0x61, 0x61, 0x32, 0x00, 0x00, 0x00,
      0x31, 0x00, 0x61, 0x61, 0x42, 0x61, 0x61, 0x61, 0x05, 0x61, 0x00, 0x00, 0x11, 0x00, 0x00,
      0x00, 0x05, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x23, 0x40, 0x03, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x1d, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00, 0x1d, 0x00, 0x00, 0x00,
      0x3a, 0x00, 0x00, 0x00, 0x1d, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x1d, 0x00, 0x00,
      0x00, 0x0a, 0x00, 0x00, 0x00, 0x6e, 0x6f, 0x64, 0x65, 0x37, 0x00, 0x00, 0x00, 0x63, 0x70,
      0x75, 0x00, 0x00, 0x00, 0x00, 0x00, 0x72, 0x65, 0x61, 0x64, 0x79, 0x00, 0x00, 0x00, 0x6e,
      0x6f, 0x64, 0x65, 0x37, 0x3a, 0x31, 0x00, 0x6e, 0x6f, 0x64, 0x65, 0x38, 0x00, 0x00, 0x00,
      0x63, 0x75, 0x64, 0x61, 0x3a, 0x58, 0x00, 0x00, 0x64, 0x65, 0x61, 0x64, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x06, 0x00,
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x04, 0x40, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x25, 0x00, 0x00, 0x00, 0x52, 0x00, 0x00, 0x00, 0x29, 0x00,
      0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0xbf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x04, 0x40, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x25, 0x00, 0x00, 0x00, 0x52, 0x00, 0x00, 0x00, 0x29, 0x00,
      0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0xbf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x0a, 0x00,
      0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x74, 0x63, 0x70, 0x3a, 0x2f,
      0x2f, 0x6e, 0x3a, 0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6e, 0x3a, 0x32, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0xca, 0x00, 0x00, 0x00, 0x11, 0x00,
      0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x6b, 0x69, 0x6e, 0x64, 0x22, 0x3a, 0x22,
      0x77, 0x6f, 0x72, 0x6b, 0x65, 0x72, 0x5f, 0x6a, 0x6f, 0x69, 0x6e, 0x65, 0x64, 0x22, 0x7d,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00,
  };
  fuzz::Input in(input.data(), input.size());
  auto decoded = Decode(in.Frames());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kProtocolError) << decoded.status().ToString();
  EXPECT_NE(decoded.status().message().find("longer than its message could hold"), std::string::npos)
      << decoded.status().ToString();
}

TEST(Codec, OtherProtocolVersionIsRefused) {
  const std::vector<Frame> frames = EncodeOrDie({"t", Shutdown{"bye"}});
  RawEnvelope raw(frames[0]);
  ASSERT_EQ(raw.Get16(0), 1) << "the version field moved";
  ASSERT_EQ(raw.Get16(2), kShutdownTag) << "the union tag moved";
  for (uint16_t version : {0, 2, 0xffff}) {
    raw.Set16(0, version);
    ExpectInvalid({raw.Flat()}, "protocol version");
  }
  raw.Set16(0, 1);  // the edit itself is harmless
  auto ok = Decode({raw.Flat()});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::get<Shutdown>(ok->body).reason, "bye");
}

TEST(Codec, UnknownMessageKindIsRefused) {
  const std::vector<Frame> frames = EncodeOrDie({"t", Shutdown{"bye"}});
  RawEnvelope raw(frames[0]);
  ASSERT_EQ(raw.Get16(2), kShutdownTag);
  // The first tag past the last kind this build knows, and far ones.
  for (uint16_t tag :
       {static_cast<uint16_t>(std::variant_size_v<Body>), uint16_t{99}, uint16_t{0xffff}}) {
    raw.Set16(2, tag);
    ExpectInvalid({raw.Flat()}, "unknown message kind");
  }
}

TEST(Codec, UnknownEnumValuesAndInvertedRangesAreRefused) {
  auto tensors = FullTensors();
  tensors[0].kind = static_cast<TensorKind>(3);
  ExpectInvalid(EncodeOrDie({"t", ShardConfig{FullSpec(), tensors}}), "tensor kind");
  tensors = FullTensors();
  tensors[1].dtype = static_cast<DType>(2);
  ExpectInvalid(EncodeOrDie({"t", StepRequest{WorkerId(1), Step(0), tensors}}), "dtype");
  tensors = FullTensors();
  tensors[2].shape = std::vector<int64_t>(9, 1);
  ExpectInvalid(EncodeOrDie({"t", StepRequest{WorkerId(1), Step(0), tensors}}), "dimensions");

  StepPlan plan;
  plan.kind = static_cast<PlanKind>(5);
  ExpectInvalid(EncodeOrDie({"t", plan}), "plan kind");
  plan.kind = PlanKind::kTrain;
  plan.vw_lo = 4;
  plan.vw_hi = 3;
  ExpectInvalid(EncodeOrDie({"t", plan}), "inverted");
  plan.vw_lo = 0;
  plan.eval_lo = 10;
  plan.eval_hi = 9;
  ExpectInvalid(EncodeOrDie({"t", plan}), "inverted");

  const auto unknown = static_cast<StatusCode>(static_cast<int>(kLastStatusCode) + 1);
  ExpectInvalid(EncodeOrDie({"t", ErrorReply{unknown, "x"}}), "error code");
  RollbackDone done;
  done.code = unknown;
  ExpectInvalid(EncodeOrDie({"t", done}), "rollback status code");
  // An error that says OK would turn into a successful Call without a reply.
  ExpectInvalid(EncodeOrDie({"t", ErrorReply{StatusCode::kOk, "x"}}), "error code");
}

TEST(Codec, ChunkNamingAMissingFrameIsInvalid) {
  Push push;
  push.chunks = {MakeChunk(1, 1000, 1), MakeChunk(2, 1000, 2)};
  std::vector<Frame> frames = EncodeOrDie({"t", push});
  ASSERT_EQ(frames.size(), 3u);
  frames.pop_back();
  ExpectInvalid(frames, "missing frame");
  frames.resize(1);
  ExpectInvalid(frames, "missing frame");
}

// A server's job token is checked before the body: a message with another
// token is Unauthenticated even where its body could never decode (here a
// chunk names a frame that is missing), and only the right one reaches the body.
TEST(Codec, AnExpectedTokenIsCheckedBeforeTheBodyIsDecoded) {
  Push push;
  push.chunks = {MakeChunk(1, 1000, 1)};
  std::vector<Frame> frames = EncodeOrDie({"secret", push});
  frames.resize(1);
  EXPECT_EQ(Decode(frames, DecodeLimits(), "other").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Decode(frames, DecodeLimits(), "secre").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Decode(frames, DecodeLimits(), "secret").status().code(), StatusCode::kProtocolError);
  EXPECT_EQ(Decode(frames).status().code(), StatusCode::kProtocolError);  // no token expected
  const std::vector<Frame> whole = EncodeOrDie({"secret", push});
  auto ok = Decode(whole, DecodeLimits(), "secret");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->token, "secret");
  EXPECT_EQ(Decode(EncodeOrDie({"", push}), DecodeLimits(), "secret").status().code(),
            StatusCode::kUnauthenticated);
}

// Found by fuzz_decode: a token "t\0..." decoded as "t" but failed the check for "t".
TEST(Codec, ATextWithANulByteIsRefused) {
  const std::vector<Frame> frames = EncodeOrDie({"tokXyz", Shutdown{"byeXyz"}});
  for (int field : {0, 1}) {  // the envelope's token, then a text of the body
    RawEnvelope raw(frames[0]);
    capnp::AnyPointer::Builder text =
        field == 0 ? raw.root().getPointerSection()[0] : raw.body().getPointerSection()[0];
    auto bytes = text.getAs<capnp::Data>();
    ASSERT_EQ(bytes[3], 'X');
    bytes[3] = '\0';
    ExpectInvalid({raw.Flat()}, "NUL byte");
    if (field == 0) {
      EXPECT_EQ(Decode({raw.Flat()}, DecodeLimits(), "tok").status().code(),
                StatusCode::kUnauthenticated);
    }
  }
}

TEST(Codec, TokenEqualsComparesWholeTokens) {
  EXPECT_TRUE(TokenEquals("", ""));
  EXPECT_TRUE(TokenEquals("tok", "tok"));
  EXPECT_FALSE(TokenEquals("Tok", "tok"));
  EXPECT_FALSE(TokenEquals("toK", "tok"));
  EXPECT_FALSE(TokenEquals("to", "tok"));
  EXPECT_FALSE(TokenEquals(std::string_view("to\0", 3), "tok"));
  EXPECT_FALSE(TokenEquals(std::string_view("tok\0", 4), "tok"));
  EXPECT_FALSE(TokenEquals("", "tok"));
  EXPECT_FALSE(TokenEquals("tok", ""));
}

TEST(Codec, FrameReferencedTwiceIsInvalid) {
  Push push;
  push.chunks = {MakeChunk(0xA1B2, 64, 1), MakeChunk(0xA1B3, 64, 2)};
  const std::vector<Frame> frames = EncodeOrDie({"t", push});
  RawEnvelope raw(frames[0]);
  ASSERT_EQ(raw.Get16(2), kPushTag);
  // Push.chunks is pointer 0 of the Push; ChunkRef is {chunk: UInt32, frame: UInt32}.
  auto refs =
      raw.body().getPointerSection()[0].getAs<capnp::AnyList>().as<capnp::List<capnp::AnyStruct>>();
  ASSERT_EQ(refs.size(), 2u);
  auto second = refs[1].getDataSection();
  ASSERT_EQ(second[0] | (second[1] << 8), 0xA1B3) << "ChunkRef.chunk moved";
  ASSERT_EQ(second[4], 1) << "ChunkRef.frame moved";
  second[4] = 0;  // both chunks now name frame 0
  std::vector<Frame> edited = frames;
  edited[0] = raw.Flat();
  ExpectInvalid(edited, "referenced twice");
  // Referencing each frame once is fine, and an extra frame no chunk names is not.
  second[4] = 1;
  edited[0] = raw.Flat();
  ASSERT_TRUE(Decode(edited).ok());
}

TEST(Codec, FrameNoChunkReferencesIsInvalid) {
  Push push;
  push.chunks = {MakeChunk(1, 1000, 1)};
  std::vector<Frame> frames = EncodeOrDie({"t", push});
  frames.push_back(OwnedFrame("extra", 5));
  ExpectInvalid(frames, "not referenced");

  std::vector<Frame> shutdown = EncodeOrDie({"t", Shutdown{"bye"}});
  shutdown.push_back(OwnedFrame("", 0));
  ExpectInvalid(shutdown, "not referenced");
}

TEST(Codec, DecodeLimitsAreEnforced) {
  const Envelope config{"t", ShardConfig{FullSpec(), FullTensors()}};
  const std::vector<Frame> frames = EncodeOrDie(config);
  DecodeLimits limits;
  limits.max_header_bytes = frames[0].size;
  EXPECT_TRUE(Decode(frames, limits).ok());
  limits.max_header_bytes = frames[0].size - 8;
  ExpectInvalid(frames, "larger than the limit", limits);

  // Text: the token and text deep inside a message.
  limits = DecodeLimits();
  limits.max_text = 10;
  EXPECT_TRUE(Decode(EncodeOrDie({"0123456789", Shutdown{"0123456789"}}), limits).ok());
  ExpectInvalid(EncodeOrDie({"0123456789a", Shutdown{"x"}}), "text", limits);
  ExpectInvalid(EncodeOrDie({"t", Shutdown{"0123456789a"}}), "text", limits);
  ExpectInvalid(
      EncodeOrDie({"t", RegisterWorkerReply{WorkerId(1), JobSpec(), {"tcp://127.0.0.1:1"}}}),
      "text", limits);
  JobSpec spec;
  spec.optimizer.schedule = "cosine-with-restarts";
  ExpectInvalid(EncodeOrDie({"t", ShardConfig{spec, {}}}), "text", limits);
  auto tensors = FullTensors();
  tensors[0].name = "a.very.long.tensor.name";
  spec = JobSpec();
  spec.optimizer.schedule = "step";
  ExpectInvalid(EncodeOrDie({"t", ShardConfig{spec, tensors}}), "text", limits);

  // Lists.
  limits = DecodeLimits();
  limits.max_list = 2;
  EXPECT_TRUE(Decode(EncodeOrDie({"t", Pull{Step(0), {ChunkId(1), ChunkId(2)}}}), limits).ok());
  ExpectInvalid(EncodeOrDie({"t", Pull{Step(0), {ChunkId(1), ChunkId(2), ChunkId(3)}}}), "too long",
                limits);
  ExpectInvalid(EncodeOrDie({"t", StepRequest{WorkerId(1), Step(0), FullTensors()}}), "too long",
                limits);
  ExpectInvalid(EncodeOrDie({"t", RegisterWorkerReply{WorkerId(1), JobSpec(), {"a", "b", "c"}}}),
                "too long", limits);

  // Frames.
  Push push;
  push.chunks = {MakeChunk(1, 10, 1), MakeChunk(2, 10, 2)};
  limits = DecodeLimits();
  limits.max_frames = 3;
  EXPECT_TRUE(Decode(EncodeOrDie({"t", push}), limits).ok());
  push.chunks.push_back(MakeChunk(3, 10, 3));
  ExpectInvalid(EncodeOrDie({"t", push}), "too many frames", limits);
  limits.max_list = 2;
  limits.max_frames = 100;
  ExpectInvalid(EncodeOrDie({"t", push}), "too long", limits);
}

// Every answer to hostile bytes is ProtocolError; nothing crashes, nothing
// reads outside the frames (ASan), nothing reads unaligned words (UBSan).
void ExpectDecodeSurvives(const std::vector<Frame>& frames, int* accepted) {
  auto got = Decode(frames);
  if (got.ok()) {
    ++*accepted;
    EXPECT_LT(got->body.index(), std::variant_size_v<Body>);
  } else {
    EXPECT_EQ(got.status().code(), StatusCode::kProtocolError) << got.status().ToString();
    EXPECT_FALSE(got.status().message().empty());
  }
}

TEST(Codec, APullIntoSharedMemoryNamesOneOffsetPerChunk) {
  const ShmRegionRef region{4242, 17, 99, 1 << 20};
  ExpectInvalid(
      EncodeOrDie({"t", Pull{Step(1), {ChunkId(1), ChunkId(2)}, WireDType::kFP32, region, {64}}}),
      "one offset per chunk");
  EXPECT_TRUE(
      Decode(EncodeOrDie({"t", Pull{Step(1), {ChunkId(1)}, WireDType::kFP32, region, {64}}})).ok());
}

TEST(Codec, APushNamesSharedMemoryChunksOnlyWithARegion) {
  Push push{Epoch(1), Step(3), Block{0, 2}, {}, std::nullopt, {{ChunkId(1), 64, 16}}};
  ExpectInvalid(EncodeOrDie({"t", push}), "without a region");
  push.shm = ShmRegionRef{4242, 17, 99, 1 << 20};
  EXPECT_TRUE(Decode(EncodeOrDie({"t", push})).ok());
}

// Sparse rows travel as two frames a table (ids, values), and a pull of rows names no chunk.
TEST(Codec, SparseRowsRoundTripAndMalformedOnesAreProtocolErrors) {
  auto ids = std::make_shared<std::vector<uint64_t>>(std::vector<uint64_t>{3, 9, 1ull << 40});
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  SparseRowBytes rows;
  rows.table = 2;
  rows.rows = 3;
  rows.ids = {ChunkId(0), ids->data(), ids->size() * 8, ids};
  rows.values = {ChunkId(0), values->data(), values->size() * 4, values};
  Push push{Epoch(1), Step(3), Block{0, 2}, {MakeChunk(1, 8, 7)}};
  push.sparse = {rows};
  auto got = Decode(EncodeOrDie({"t", push}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Push& back = std::get<Push>(got->body);
  ASSERT_EQ(back.sparse.size(), 1u);
  EXPECT_EQ(back.sparse[0].table, 2u);
  EXPECT_EQ(back.sparse[0].rows, 3u);
  ASSERT_EQ(back.sparse[0].ids.size, 24u);
  EXPECT_EQ(std::memcmp(back.sparse[0].ids.data, ids->data(), 24), 0);
  EXPECT_EQ(std::memcmp(back.sparse[0].values.data, values->data(), 24), 0);
  EXPECT_EQ(back.chunks.size(), 1u);

  PullReply reply{Step(4), {}};
  reply.sparse = {rows};
  got = Decode(EncodeOrDie({"t", reply}));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::get<PullReply>(got->body).sparse.size(), 1u);

  Pull pull{Step(4), {}};
  pull.sparse = {{0, Step(2)}, {1, Step(0)}};
  got = Decode(EncodeOrDie({"t", pull}));
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(std::get<Pull>(got->body).sparse.size(), 2u);
  EXPECT_EQ(std::get<Pull>(got->body).sparse[0].since, Step(2));
  pull.chunks = {ChunkId(1)};
  ExpectInvalid(EncodeOrDie({"t", pull}), "names chunks");

  rows.rows = 2;  // three ids in the frame
  push.sparse = {rows};
  ExpectInvalid(EncodeOrDie({"t", push}), "one id a row");
  rows.rows = 4;
  rows.ids = {ChunkId(0), ids->data(), 0, ids};
  rows.rows = 0;  // no ids, but values
  push.sparse = {rows};
  ExpectInvalid(EncodeOrDie({"t", push}), "whole rows");
}

// Rows in a shared-memory region travel as offsets and sizes, their data left to the receiver;
// a pull names a region for its rows only with sparse reads and where the rows may go.
TEST(Codec, SparseRowsInSharedMemoryTravelAsOffsetsAndAPullNamesTheirRoom) {
  SparseRowBytes rows;
  rows.table = 1;
  rows.rows = 3;
  rows.in_shm = true;
  rows.ids = {ChunkId(0), nullptr, 24, nullptr};
  rows.values = {ChunkId(0), nullptr, 36, nullptr};
  rows.ids_offset = 4096;
  rows.values_offset = 4160;
  PullReply reply{Step(4), {}};
  reply.sparse = {rows};
  auto got = Decode(EncodeOrDie({"t", reply}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const SparseRowBytes& back = std::get<PullReply>(got->body).sparse.at(0);
  EXPECT_TRUE(back.in_shm);
  EXPECT_EQ(back.ids_offset, 4096u);
  EXPECT_EQ(back.values_offset, 4160u);
  EXPECT_EQ(back.ids.size, 24u);
  EXPECT_EQ(back.values.size, 36u);
  EXPECT_EQ(back.ids.data, nullptr);
  EXPECT_EQ(back.values.data, nullptr);
  rows.values.size = 10;  // not whole rows
  reply.sparse = {rows};
  ExpectInvalid(EncodeOrDie({"t", reply}), "whole rows");

  const ShmRegionRef region{4242, 17, 99, 1 << 20};
  Pull pull{Step(4), {}, WireDType::kFP32, region, {}};
  pull.sparse = {{0, Step(2)}};
  pull.shm_rows_at = 1024;
  got = Decode(EncodeOrDie({"t", pull}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::get<Pull>(got->body).shm_rows_at, 1024u);
  EXPECT_EQ(std::get<Pull>(got->body).shm, region);
  pull.shm_rows_at = 0;  // a region for rows, but not where they go
  ExpectInvalid(EncodeOrDie({"t", pull}), "without both");
  pull.shm_rows_at = 1024;
  pull.shm.reset();  // where they go, but no region
  ExpectInvalid(EncodeOrDie({"t", pull}), "without both");
}

TEST(Codec, ALookupByRowsAndAPageOfRowsRoundTripAndAWrongFrameIsAProtocolError) {
  auto ids = std::make_shared<std::vector<uint64_t>>(std::vector<uint64_t>{3, 70, 1ull << 33});
  Pull pull{Step(5), {}};
  SparseRead lookup{1, Step(0)};
  lookup.lookup = true;
  lookup.rows = 3;
  lookup.ids = {ChunkId(0), ids->data(), 24, ids};
  SparseRead page{0, Step(4)};
  page.from_row = uint64_t{1} << 40;
  page.max_rows = 4096;
  pull.sparse = {page, lookup};
  auto got = Decode(EncodeOrDie({"t", pull}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const Pull& back = std::get<Pull>(got->body);
  ASSERT_EQ(back.sparse.size(), 2u);
  EXPECT_FALSE(back.sparse[0].lookup);
  EXPECT_EQ(back.sparse[0].since, Step(4));
  EXPECT_EQ(back.sparse[0].from_row, uint64_t{1} << 40);
  EXPECT_EQ(back.sparse[0].max_rows, 4096u);
  EXPECT_TRUE(back.sparse[1].lookup);
  EXPECT_EQ(back.sparse[1].table, 1u);
  ASSERT_EQ(back.sparse[1].rows, 3u);
  ASSERT_EQ(back.sparse[1].ids.size, 24u);
  EXPECT_EQ(std::memcmp(back.sparse[1].ids.data, ids->data(), 24), 0);
  pull.sparse[1].max_rows = 8;  // a lookup names its rows: it has no pages
  ExpectInvalid(EncodeOrDie({"t", pull}), "in pages");
  pull.sparse[1].max_rows = 0;
  pull.sparse[1].rows = 2;  // three ids in the frame
  ExpectInvalid(EncodeOrDie({"t", pull}), "one id a row");
  // A read by version with warm rows (a held table's next plan): the ids come along.
  pull.sparse[1].rows = 3;
  pull.sparse[1].lookup = false;
  got = Decode(EncodeOrDie({"t", pull}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const SparseRead& warm = std::get<Pull>(got->body).sparse[1];
  EXPECT_FALSE(warm.lookup);
  ASSERT_EQ(warm.rows, 3u);
  ASSERT_EQ(warm.ids.size, 24u);
  EXPECT_EQ(std::memcmp(warm.ids.data, ids->data(), 24), 0);
  pull.sparse[1].rows = 4;
  ExpectInvalid(EncodeOrDie({"t", pull}), "one id a row");
}

TEST(Codec, AnOptimizerDigestRoundTripsAndOneOfAnotherSizeIsAProtocolError) {
  Pull pull{Step(7), {}};
  pull.optimizer_digest = true;
  auto got = Decode(EncodeOrDie({"t", pull}));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(std::get<Pull>(got->body).optimizer_digest);
  PullReply reply{Step(7), {}};
  reply.optimizer_digest = std::string(32, '\x5a');
  got = Decode(EncodeOrDie({"t", reply}));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::get<PullReply>(got->body).optimizer_digest, std::string(32, '\x5a'));
  reply.optimizer_digest = "short";
  ExpectInvalid(EncodeOrDie({"t", reply}), "optimizer digest");
}

TEST(CodecFuzz, RandomBytesGiveStatusNotCrash) {
  std::mt19937_64 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const size_t words = rng() % 48;
    std::vector<uint8_t> bytes(words * 8 + (trial % 5 == 0 ? rng() % 8 : 0));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (trial % 2 == 0 && words >= 1) {
      // A plausible segment table (one segment filling the rest), so the garbage
      // reaches Cap'n Proto's pointer checks and the decoder's field checks.
      const uint32_t zero = 0, rest = static_cast<uint32_t>(words - 1);
      std::memcpy(bytes.data(), &zero, 4);
      std::memcpy(bytes.data() + 4, &rest, 4);
    }
    std::vector<Frame> frames{OwnedFrame(bytes.data(), bytes.size(), rng() % 8)};
    static const uint8_t kPayload[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (uint64_t extra = rng() % 3; extra > 0; --extra)
      frames.push_back(OwnedFrame(kPayload, rng() % 16));
    ExpectDecodeSurvives(frames, &accepted);
  }
  EXPECT_LT(accepted, 4000) << "random bytes should not all decode";
}

TEST(CodecFuzz, BitFlipsOfValidMessagesGiveStatusNotCrash) {
  std::mt19937_64 rng(99);
  int accepted = 0;
  for (const Envelope& e : EveryMessageKind()) {
    const std::vector<Frame> frames = EncodeOrDie(e);
    const auto* head = static_cast<const uint8_t*>(frames[0].data);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint8_t> bytes(head, head + frames[0].size);
      for (uint64_t flips = 1 + rng() % 4; flips > 0; --flips)
        bytes[rng() % bytes.size()] ^= 1u << (rng() % 8);
      std::vector<Frame> wire = frames;
      wire[0] = OwnedFrame(bytes.data(), bytes.size(), rng() % 8);
      ExpectDecodeSurvives(wire, &accepted);
    }
  }
  EXPECT_GT(accepted, 0) << "flips in payload bytes should leave some messages decodable";
}

TEST(CodecFuzz, EveryTruncationOfValidMessagesIsInvalid) {
  std::mt19937_64 rng(5);
  for (const Envelope& e : EveryMessageKind()) {
    SCOPED_TRACE(BodyName(e.body));
    const std::vector<Frame> frames = EncodeOrDie(e);
    for (size_t size = 0; size < frames[0].size; ++size) {
      std::vector<Frame> wire = frames;
      wire[0] = OwnedFrame(frames[0].data, size, rng() % 8);
      auto got = Decode(wire);
      ASSERT_FALSE(got.ok()) << "header truncated to " << size << " of " << frames[0].size
                             << " bytes decoded";
      EXPECT_EQ(got.status().code(), StatusCode::kProtocolError);
    }
  }
}

}  // namespace
}  // namespace eps
