#include "schema/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/digest.h"
#include "schema/codec_internal.h"
#include "schema/elasticps.capnp.h"

namespace eps {
namespace {

using codec_internal::DecodeJobStatus;
using codec_internal::DecodeMoveBody;
using codec_internal::EncodeMoveBody;
using codec_internal::Reader;
using codec_internal::SetJobStatus;
using codec_internal::SetMap;
using codec_internal::SetSparseReads;
using codec_internal::SetSparseRows;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// ---- encoding -------------------------------------------------------------

void SetTensors(capnp::List<wire::TensorSpec>::Builder out,
                const std::vector<TensorSpec>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = out[i];
    t.setName(tensors[i].name);
    t.setKind(static_cast<uint8_t>(tensors[i].kind));
    t.setDtype(static_cast<uint8_t>(tensors[i].dtype));
    t.setSparse(tensors[i].sparse);
    auto shape = t.initShape(tensors[i].shape.size());
    for (size_t d = 0; d < tensors[i].shape.size(); ++d) shape.set(d, tensors[i].shape[d]);
  }
}

// ---- the job spec's fields (the lists in messages.h) ----------------------
//
// EPS_PUT_FIELD writes one field with Put and EPS_GET_FIELD reads it with
// Reader::Get; the overloads pick the conversion by the field's C++ type. Put
// gets the capnp field's setter and initializer as generic lambdas of the
// builder, so that each is compiled only where an overload calls it (a number
// has no initializer; a struct is initialized, not set).

template <class T, class B, class Set, class Init>
void Put(const T& v, B& out, Set set, Init) {
  set(out, v);  // numbers, bools, text
}

template <class B, class Set, class Init>
void Put(const WireDType& v, B& out, Set set, Init) {
  set(out, static_cast<uint8_t>(v));
}

void SetOptimizer(wire::OptimizerSpec::Builder out, const OptimizerSpec& s);

template <class B, class Set, class Init>
void Put(const OptimizerSpec& v, B& out, Set, Init init) {
  SetOptimizer(init(out), v);
}

#define EPS_PUT_FIELD(type, name, default_value, Capnp, flag, role) \
  Put(                                                              \
      s.name, out, [](auto& o, const auto& v) { o.set##Capnp(v); }, \
      [](auto& o) { return o.init##Capnp(); });

void SetOptimizer(wire::OptimizerSpec::Builder out, const OptimizerSpec& s) {
  EPS_OPTIMIZER_SPEC_FIELDS(EPS_PUT_FIELD)
}

void SetSpec(wire::JobSpec::Builder out, const JobSpec& s) { EPS_JOB_SPEC_FIELDS(EPS_PUT_FIELD) }

#undef EPS_PUT_FIELD

// Appends the chunks as frames and records their references.
void SetChunks(capnp::List<wire::ChunkRef>::Builder out, const std::vector<ChunkBytes>& chunks,
               std::vector<Frame>* frames) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    out[i].setChunk(chunks[i].chunk.value());
    out[i].setFrame(static_cast<uint32_t>(frames->size() - 1));
    frames->push_back({chunks[i].data, chunks[i].size, chunks[i].owner});
  }
}

void SetShmRef(wire::ShmRegionRef::Builder out, const ShmRegionRef& ref) {
  out.setPid(ref.pid);
  out.setFd(ref.fd);
  out.setToken(ref.token);
  out.setSize(ref.size);
}

void SetShmChunks(capnp::List<wire::ShmChunk>::Builder out, const std::vector<ShmChunk>& chunks) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    out[i].setChunk(chunks[i].chunk.value());
    out[i].setOffset(chunks[i].offset);
    out[i].setSize(chunks[i].size);
  }
}

// ---- decoding -------------------------------------------------------------

ShmRegionRef ReadShmRef(wire::ShmRegionRef::Reader in) {
  return ShmRegionRef{in.getPid(), in.getFd(), in.getToken(), in.getSize()};
}


Status DecodeBody(wire::Envelope::Reader env, Reader& r, Body* body) {
  using W = wire::Envelope::Body;
  auto b = env.getBody();
  switch (b.which()) {
    case W::ERROR: {
      ErrorReply m;
      auto in = b.getError();
      // kOk is no error: Call() would turn it into a success without a reply body.
      if (in.getCode() == static_cast<uint16_t>(StatusCode::kOk) ||
          in.getCode() > static_cast<uint16_t>(kLastStatusCode)) {
        return ProtocolError("unknown error code " + std::to_string(in.getCode()));
      }
      m.code = static_cast<StatusCode>(in.getCode());
      EPS_RETURN_IF_ERROR(r.Text(in.getMessage(), &m.message));
      *body = std::move(m);
      return OkStatus();
    }
    case W::REGISTER_WORKER: {
      RegisterWorker m;
      auto in = b.getRegisterWorker();
      EPS_RETURN_IF_ERROR(r.Text(in.getHost(), &m.host));
      m.pid = in.getPid();
      EPS_RETURN_IF_ERROR(r.Text(in.getDeviceKind(), &m.device_kind));
      EPS_RETURN_IF_ERROR(r.Text(in.getMetricsAddress(), &m.metrics_address));
      EPS_RETURN_IF_ERROR(r.Text(in.getCpuKernels(), &m.cpu_kernels));
      *body = std::move(m);
      return OkStatus();
    }
    case W::REGISTER_WORKER_REPLY: {
      RegisterWorkerReply m;
      auto in = b.getRegisterWorkerReply();
      m.worker = WorkerId(in.getWorker());
      EPS_RETURN_IF_ERROR(r.Spec(in.getSpec(), &m.spec));
      EPS_RETURN_IF_ERROR(r.ListSize(in.getShardAddresses(), "shard addresses"));
      for (auto a : in.getShardAddresses()) {
        std::string s;
        EPS_RETURN_IF_ERROR(r.Text(a, &s));
        m.shard_addresses.push_back(std::move(s));
      }
      const auto bytes = [](capnp::Data::Reader d) {
        return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
      };
      m.model_bytes = bytes(in.getModelBytes());
      m.init_bytes = bytes(in.getInitBytes());
      m.vocab = bytes(in.getVocab());
      m.model_size = in.getModelSize();
      m.init_size = in.getInitSize();
      if (in.hasMap()) EPS_RETURN_IF_ERROR(r.Map(in.getMap(), &m.map.emplace()));
      m.fetch_chunk_bytes = in.getFetchChunkBytes();
      if (m.model_size > kMaxModelBytes || m.init_size > kMaxModelBytes)
        return ProtocolError("model file size over the limit");
      *body = std::move(m);
      return OkStatus();
    }
    case W::REGISTER_SHARD: {
      RegisterShard m;
      auto in = b.getRegisterShard();
      m.shard = ShardId(in.getShard());
      EPS_RETURN_IF_ERROR(r.Text(in.getAddress(), &m.address));
      m.durable_step = Step(in.getDurableStep());
      m.version = Step(in.getVersion());
      EPS_RETURN_IF_ERROR(r.Text(in.getMetricsAddress(), &m.metrics_address));
      *body = std::move(m);
      return OkStatus();
    }
    case W::SHARD_CONFIG: {
      ShardConfig m;
      auto in = b.getShardConfig();
      EPS_RETURN_IF_ERROR(r.Spec(in.getSpec(), &m.spec));
      EPS_RETURN_IF_ERROR(r.Tensors(in.getTensors(), &m.tensors));
      m.timeline = in.getTimeline();
      if (in.hasMap()) EPS_RETURN_IF_ERROR(r.Map(in.getMap(), &m.map.emplace()));
      *body = std::move(m);
      return OkStatus();
    }
    case W::STEP_REQUEST: {
      StepRequest m;
      auto in = b.getStepRequest();
      m.worker = WorkerId(in.getWorker());
      m.done_step = Step(in.getDoneStep());
      EPS_RETURN_IF_ERROR(r.Tensors(in.getTensors(), &m.tensors));
      m.train_samples = in.getTrainSamples();
      m.test_samples = in.getTestSamples();
      m.abandoned = in.getAbandoned();
      m.seconds_per_vw = in.getSecondsPerVw();
      EPS_RETURN_IF_ERROR(r.Text(in.getDataFingerprint(), &m.data_fingerprint));
      if (!(m.seconds_per_vw >= 0) || m.seconds_per_vw > 1e6)
        return ProtocolError("bad seconds_per_vw");
      *body = std::move(m);
      return OkStatus();
    }
    case W::STEP_PLAN: {
      StepPlan m;
      auto in = b.getStepPlan();
      const auto kind = static_cast<uint16_t>(in.getKind());
      if (kind > static_cast<uint16_t>(PlanKind::kStop)) return ProtocolError("unknown plan kind");
      m.kind = static_cast<PlanKind>(kind);
      m.step = Step(in.getStep());
      m.epoch = Epoch(in.getEpoch());
      m.vw_lo = in.getVwLo();
      m.vw_hi = in.getVwHi();
      m.eval_lo = in.getEvalLo();
      m.eval_hi = in.getEvalHi();
      m.timeline = in.getTimeline();
      if (m.vw_lo > m.vw_hi || m.eval_lo > m.eval_hi)
        return ProtocolError("plan with an inverted range");
      *body = m;
      return OkStatus();
    }
    case W::STEP_DONE: {
      StepDone m;
      auto in = b.getStepDone();
      m.shard = ShardId(in.getShard());
      m.step = Step(in.getStep());
      m.has_loss = in.getHasLoss();
      m.loss = in.getLoss();
      m.durable_step = Step(in.getDurableStep());
      EPS_RETURN_IF_ERROR(r.Text(in.getCheckpointError(), &m.checkpoint_error));
      m.lr = in.getLr();
      if (!std::isfinite(m.lr)) return ProtocolError("a step's learning rate must be finite");
      m.bytes_in = in.getBytesIn();
      m.bytes_out = in.getBytesOut();
      m.checkpoint_blocking_ms = in.getCheckpointBlockingMs();
      m.checkpoint_write_ms = in.getCheckpointWriteMs();
      if (!(m.checkpoint_blocking_ms >= 0) || !(m.checkpoint_write_ms >= 0) ||
          !std::isfinite(m.checkpoint_blocking_ms) || !std::isfinite(m.checkpoint_write_ms))
        return ProtocolError("a checkpoint's times must be finite and not negative");
      *body = std::move(m);
      return OkStatus();
    }
    case W::PUSH: {
      Push m;
      auto in = b.getPush();
      m.epoch = Epoch(in.getEpoch());
      m.step = Step(in.getStep());
      m.block = Block{in.getBlockLo(), in.getBlockSize()};
      EPS_RETURN_IF_ERROR(r.Chunks(in.getChunks(), &m.chunks));
      if (in.hasShm()) m.shm = ReadShmRef(in.getShm());
      EPS_RETURN_IF_ERROR(r.ShmChunks(in.getShmChunks(), &m.shm_chunks));
      if (!m.shm.has_value() && !m.shm_chunks.empty()) {
        return ProtocolError("shared-memory chunks in a push without a region");
      }
      EPS_RETURN_IF_ERROR(r.SparseRows(in.getSparse(), &m.sparse));
      *body = std::move(m);
      return OkStatus();
    }
    case W::PUSH_REPLY: {
      PushReply m;
      auto in = b.getPushReply();
      m.step = Step(in.getStep());
      m.accepted = in.getAccepted();
      m.duplicates = in.getDuplicates();
      *body = m;
      return OkStatus();
    }
    case W::PULL: {
      Pull m;
      auto in = b.getPull();
      m.version = Step(in.getVersion());
      EPS_RETURN_IF_ERROR(r.ListSize(in.getChunks(), "pull chunks"));
      for (uint32_t c : in.getChunks()) m.chunks.push_back(ChunkId(c));
      EPS_RETURN_IF_ERROR(r.Get(in.getDtype(), &m.dtype));
      if (in.hasShm()) {
        m.shm = ReadShmRef(in.getShm());
        if (in.getShmOffsets().size() != m.chunks.size()) {
          return ProtocolError("a pull into shared memory names one offset per chunk");
        }
        for (uint64_t o : in.getShmOffsets()) m.shm_offsets.push_back(o);
      } else if (in.getShmOffsets().size() != 0) {
        return ProtocolError("shared-memory offsets in a pull without a region");
      }
      EPS_RETURN_IF_ERROR(r.SparseReads(in.getSparse(), &m.sparse));
      m.shm_rows_at = in.getShmRowsAt();
      if (!m.sparse.empty() && !m.chunks.empty())
        return ProtocolError("a pull of sparse rows names chunks");
      if ((m.shm_rows_at != 0) != (!m.sparse.empty() && m.shm.has_value()))
        return ProtocolError("a pull names a region for sparse rows without both");
      m.optimizer_digest = in.getOptimizerDigest();
      m.timeline = in.getTimeline();
      *body = std::move(m);
      return OkStatus();
    }
    case W::PULL_REPLY: {
      PullReply m;
      auto in = b.getPullReply();
      m.version = Step(in.getVersion());
      EPS_RETURN_IF_ERROR(r.Chunks(in.getChunks(), &m.chunks));
      EPS_RETURN_IF_ERROR(r.ShmChunks(in.getShmChunks(), &m.shm_chunks));
      EPS_RETURN_IF_ERROR(r.SparseRows(in.getSparse(), &m.sparse));
      if (in.hasOptimizerDigest()) {
        const auto digest = in.getOptimizerDigest();
        if (digest.size() != 0 && digest.size() != SetDigest::kBytes)
          return ProtocolError("an optimizer digest of " + std::to_string(digest.size()) + " bytes");
        m.optimizer_digest.assign(reinterpret_cast<const char*>(digest.begin()), digest.size());
      }
      *body = std::move(m);
      return OkStatus();
    }
    case W::EVAL_RESULT: {
      EvalResult m;
      auto in = b.getEvalResult();
      m.worker = WorkerId(in.getWorker());
      m.version = Step(in.getVersion());
      m.lo = in.getLo();
      m.hi = in.getHi();
      m.correct = in.getCorrect();
      m.loss_sum = in.getLossSum();
      *body = m;
      return OkStatus();
    }
    case W::SHUTDOWN: {
      Shutdown m;
      EPS_RETURN_IF_ERROR(r.Text(b.getShutdown().getReason(), &m.reason));
      *body = std::move(m);
      return OkStatus();
    }
    case W::HEARTBEAT: {
      *body = Heartbeat{WorkerId(b.getHeartbeat().getWorker())};
      return OkStatus();
    }
    case W::LEAVE: {
      Leave m;
      m.worker = WorkerId(b.getLeave().getWorker());
      EPS_RETURN_IF_ERROR(r.Text(b.getLeave().getReason(), &m.reason));
      m.host_fault = b.getLeave().getHostFault();
      *body = std::move(m);
      return OkStatus();
    }
    case W::ROLLBACK: {
      *body = Rollback{Step(b.getRollback().getStep()), b.getRollback().getTimeline()};
      return OkStatus();
    }
    case W::ROLLBACK_DONE: {
      RollbackDone m;
      auto in = b.getRollbackDone();
      if (in.getCode() > static_cast<uint16_t>(kLastStatusCode)) {
        return ProtocolError("unknown rollback status code " + std::to_string(in.getCode()));
      }
      m.shard = ShardId(in.getShard());
      m.step = Step(in.getStep());
      m.version = Step(in.getVersion());
      m.durable_step = Step(in.getDurableStep());
      m.code = static_cast<StatusCode>(in.getCode());
      EPS_RETURN_IF_ERROR(r.Text(in.getMessage(), &m.message));
      *body = std::move(m);
      return OkStatus();
    }
    case W::RETAIN: {
      *body = Retain{Step(b.getRetain().getFromStep())};
      return OkStatus();
    }
    case W::POOL_REQUEST: {
      PoolRequest m;
      auto in = b.getPoolRequest();
      EPS_RETURN_IF_ERROR(r.Text(in.getHost(), &m.host));
      EPS_RETURN_IF_ERROR(r.Text(in.getDeviceKind(), &m.device_kind));
      EPS_RETURN_IF_ERROR(r.Text(in.getJob(), &m.job));
      EPS_RETURN_IF_ERROR(r.Text(in.getEnded(), &m.ended));
      *body = std::move(m);
      return OkStatus();
    }
    case W::POOL_ASSIGN: {
      PoolAssign m;
      auto in = b.getPoolAssign();
      EPS_RETURN_IF_ERROR(r.Text(in.getJob(), &m.job));
      EPS_RETURN_IF_ERROR(r.Text(in.getCoordinator(), &m.coordinator));
      EPS_RETURN_IF_ERROR(r.Text(in.getToken(), &m.token));
      EPS_RETURN_IF_ERROR(r.Text(in.getServerKey(), &m.server_key));
      *body = std::move(m);
      return OkStatus();
    }
    case W::JOB_INFO:
      *body = JobInfo{};
      return OkStatus();
    case W::JOB_INFO_REPLY: {
      JobInfoReply m;
      auto in = b.getJobInfoReply();
      EPS_RETURN_IF_ERROR(r.Text(in.getJobId(), &m.job_id));
      m.virtual_workers = in.getVirtualWorkers();
      m.batch_per_vw = in.getBatchPerVw();
      m.min_workers = in.getMinWorkers();
      m.max_vws_per_worker = in.getMaxVwsPerWorker();
      m.steps = in.getSteps();
      m.step = in.getStep();
      EPS_RETURN_IF_ERROR(r.ListSize(in.getWorkers(), "workers"));
      for (auto w : in.getWorkers()) {
        WorkerSpeed speed;
        EPS_RETURN_IF_ERROR(r.Text(w.getHost(), &speed.host));
        EPS_RETURN_IF_ERROR(r.Text(w.getDeviceKind(), &speed.device_kind));
        speed.seconds_per_vw = w.getSecondsPerVw();
        if (!std::isfinite(speed.seconds_per_vw) || speed.seconds_per_vw < 0) {
          return ProtocolError("a worker's seconds per VW must be finite and >= 0");
        }
        m.workers.push_back(std::move(speed));
      }
      *body = std::move(m);
      return OkStatus();
    }
    case W::JOB_STATUS_REQUEST:
      *body = JobStatusRequest{b.getJobStatusRequest().getRecentEvents()};
      return OkStatus();
    case W::JOB_STATUS_REPLY: {
      JobStatusReply m;
      EPS_RETURN_IF_ERROR(DecodeJobStatus(b.getJobStatusReply(), r, &m));
      *body = std::move(m);
      return OkStatus();
    }
    case W::JOB_CONTROL: {
      auto in = b.getJobControl();
      JobControl m{in.getHold(), in.getFromStep()};
      if (in.getRemoveShard() >= 0) {
        if (static_cast<uint32_t>(in.getRemoveShard()) >= kMaxShardId)
          return ProtocolError("jobControl: shard id out of range");
        m.remove_shard = ShardId(static_cast<uint32_t>(in.getRemoveShard()));
      }
      *body = m;
      return OkStatus();
    }
    case W::FETCH_MODEL: {
      FetchModel m;
      auto in = b.getFetchModel();
      EPS_RETURN_IF_ERROR(r.Text(in.getSha256(), &m.sha256));
      m.offset = in.getOffset();
      m.length = in.getLength();
      *body = std::move(m);
      return OkStatus();
    }
    case W::FETCH_MODEL_REPLY: {
      FetchModelReply m;
      auto in = b.getFetchModelReply();
      EPS_RETURN_IF_ERROR(r.Text(in.getSha256(), &m.sha256));
      m.offset = in.getOffset();
      m.file_size = in.getFileSize();
      Frame f;
      EPS_RETURN_IF_ERROR(r.ByteFrame(in.getFrame(), &f));
      m.data = f.data;
      m.size = f.size;
      m.owner = f.owner;
      if (m.offset > m.file_size || m.size > m.file_size - m.offset)
        return ProtocolError("file bytes beyond the file's size");
      *body = std::move(m);
      return OkStatus();
    }
    case W::RESHARD:
    case W::RESHARD_READY:
    case W::MOVE_REQUEST:
    case W::MOVE_REPLY:
      return DecodeMoveBody(b, r, body);
  }
  return ProtocolError("unknown message kind " + std::to_string(static_cast<int>(b.which())));
}

}  // namespace

const char* BodyName(const Body& body) {
  static const char* const kNames[] = {"error",           "registerWorker", "registerWorkerReply",
                                       "registerShard",   "shardConfig",    "stepRequest",
                                       "stepPlan",        "stepDone",       "push",
                                       "pushReply",       "pull",           "pullReply",
                                       "evalResult",      "shutdown",       "heartbeat",
                                       "leave",           "rollback",       "rollbackDone",
                                       "retain",          "poolRequest",    "poolAssign",
                                       "jobInfo",         "jobInfoReply",   "jobStatusRequest",
                                       "jobStatusReply",  "jobControl",     "fetchModel",
                                       "fetchModelReply", "reshard",        "reshardReady",
                                       "moveRequest",     "moveReply"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == std::variant_size_v<Body>);
  return kNames[body.index()];
}

StatusOr<std::vector<Frame>> Encode(const Envelope& envelope) {
  auto message = std::make_shared<capnp::MallocMessageBuilder>();
  auto env = message->initRoot<wire::Envelope>();
  env.setVersion(wire::PROTOCOL_VERSION);
  env.setToken(envelope.token);
  std::vector<Frame> frames(1);
  auto b = env.initBody();
  std::visit(Overloaded{
                 [&](const ErrorReply& m) {
                   auto o = b.initError();
                   o.setCode(static_cast<uint16_t>(m.code));
                   o.setMessage(m.message);
                 },
                 [&](const RegisterWorker& m) {
                   auto o = b.initRegisterWorker();
                   o.setHost(m.host);
                   o.setPid(m.pid);
                   o.setDeviceKind(m.device_kind);
                   o.setMetricsAddress(m.metrics_address);
                   o.setCpuKernels(m.cpu_kernels);
                 },
                 [&](const RegisterWorkerReply& m) {
                   auto o = b.initRegisterWorkerReply();
                   o.setWorker(m.worker.value());
                   SetSpec(o.initSpec(), m.spec);
                   auto a = o.initShardAddresses(m.shard_addresses.size());
                   for (size_t i = 0; i < m.shard_addresses.size(); ++i)
                     a.set(i, m.shard_addresses[i]);
                   const auto data = [](const std::string& s) {
                     return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
                   };
                   o.setModelBytes(data(m.model_bytes));
                   o.setInitBytes(data(m.init_bytes));
                   o.setVocab(data(m.vocab));
                   o.setModelSize(m.model_size);
                   o.setInitSize(m.init_size);
                   o.setFetchChunkBytes(m.fetch_chunk_bytes);
                   if (m.map) SetMap(o.initMap(), *m.map);
                 },
                 [&](const RegisterShard& m) {
                   auto o = b.initRegisterShard();
                   o.setShard(m.shard.value());
                   o.setAddress(m.address);
                   o.setDurableStep(m.durable_step.value());
                   o.setVersion(m.version.value());
                   o.setMetricsAddress(m.metrics_address);
                 },
                 [&](const ShardConfig& m) {
                   auto o = b.initShardConfig();
                   SetSpec(o.initSpec(), m.spec);
                   SetTensors(o.initTensors(m.tensors.size()), m.tensors);
                   o.setTimeline(m.timeline);
                   if (m.map) SetMap(o.initMap(), *m.map);
                 },
                 [&](const StepRequest& m) {
                   auto o = b.initStepRequest();
                   o.setWorker(m.worker.value());
                   o.setDoneStep(m.done_step.value());
                   SetTensors(o.initTensors(m.tensors.size()), m.tensors);
                   o.setTrainSamples(m.train_samples);
                   o.setTestSamples(m.test_samples);
                   o.setAbandoned(m.abandoned);
                   o.setSecondsPerVw(m.seconds_per_vw);
                   o.setDataFingerprint(m.data_fingerprint);
                 },
                 [&](const StepPlan& m) {
                   auto o = b.initStepPlan();
                   o.setKind(static_cast<wire::StepPlan::Kind>(m.kind));
                   o.setStep(m.step.value());
                   o.setEpoch(m.epoch.value());
                   o.setVwLo(m.vw_lo);
                   o.setVwHi(m.vw_hi);
                   o.setEvalLo(m.eval_lo);
                   o.setEvalHi(m.eval_hi);
                   o.setTimeline(m.timeline);
                 },
                 [&](const StepDone& m) {
                   auto o = b.initStepDone();
                   o.setShard(m.shard.value());
                   o.setStep(m.step.value());
                   o.setHasLoss(m.has_loss);
                   o.setLoss(m.loss);
                   o.setDurableStep(m.durable_step.value());
                   o.setCheckpointError(m.checkpoint_error);
                   o.setLr(m.lr);
                   o.setBytesIn(m.bytes_in);
                   o.setBytesOut(m.bytes_out);
                   o.setCheckpointBlockingMs(m.checkpoint_blocking_ms);
                   o.setCheckpointWriteMs(m.checkpoint_write_ms);
                 },
                 [&](const Push& m) {
                   auto o = b.initPush();
                   o.setEpoch(m.epoch.value());
                   o.setStep(m.step.value());
                   o.setBlockLo(m.block.lo);
                   o.setBlockSize(m.block.size);
                   SetChunks(o.initChunks(m.chunks.size()), m.chunks, &frames);
                   if (m.shm.has_value()) SetShmRef(o.initShm(), *m.shm);
                   SetShmChunks(o.initShmChunks(m.shm_chunks.size()), m.shm_chunks);
                   SetSparseRows(o.initSparse(m.sparse.size()), m.sparse, &frames);
                 },
                 [&](const PushReply& m) {
                   auto o = b.initPushReply();
                   o.setStep(m.step.value());
                   o.setAccepted(m.accepted);
                   o.setDuplicates(m.duplicates);
                 },
                 [&](const Pull& m) {
                   auto o = b.initPull();
                   o.setVersion(m.version.value());
                   o.setDtype(static_cast<uint8_t>(m.dtype));
                   auto c = o.initChunks(m.chunks.size());
                   for (size_t i = 0; i < m.chunks.size(); ++i) c.set(i, m.chunks[i].value());
                   if (m.shm.has_value()) {
                     SetShmRef(o.initShm(), *m.shm);
                     auto offsets = o.initShmOffsets(m.shm_offsets.size());
                     for (size_t i = 0; i < m.shm_offsets.size(); ++i)
                       offsets.set(i, m.shm_offsets[i]);
                   }
                   SetSparseReads(o.initSparse(m.sparse.size()), m.sparse, &frames);
                   o.setOptimizerDigest(m.optimizer_digest);
                   o.setTimeline(m.timeline);
                   o.setShmRowsAt(m.shm_rows_at);
                 },
                 [&](const PullReply& m) {
                   auto o = b.initPullReply();
                   o.setVersion(m.version.value());
                   SetChunks(o.initChunks(m.chunks.size()), m.chunks, &frames);
                   SetShmChunks(o.initShmChunks(m.shm_chunks.size()), m.shm_chunks);
                   SetSparseRows(o.initSparse(m.sparse.size()), m.sparse, &frames);
                   if (!m.optimizer_digest.empty()) {
                     o.setOptimizerDigest(kj::arrayPtr(
                         reinterpret_cast<const capnp::byte*>(m.optimizer_digest.data()),
                         m.optimizer_digest.size()));
                   }
                 },
                 [&](const EvalResult& m) {
                   auto o = b.initEvalResult();
                   o.setWorker(m.worker.value());
                   o.setVersion(m.version.value());
                   o.setLo(m.lo);
                   o.setHi(m.hi);
                   o.setCorrect(m.correct);
                   o.setLossSum(m.loss_sum);
                 },
                 [&](const Shutdown& m) { b.initShutdown().setReason(m.reason); },
                 [&](const Heartbeat& m) { b.initHeartbeat().setWorker(m.worker.value()); },
                 [&](const Leave& m) {
                   auto o = b.initLeave();
                   o.setWorker(m.worker.value());
                   o.setReason(m.reason);
                   o.setHostFault(m.host_fault);
                 },
                 [&](const Rollback& m) {
                   auto o = b.initRollback();
                   o.setStep(m.step.value());
                   o.setTimeline(m.timeline);
                 },
                 [&](const RollbackDone& m) {
                   auto o = b.initRollbackDone();
                   o.setShard(m.shard.value());
                   o.setStep(m.step.value());
                   o.setVersion(m.version.value());
                   o.setDurableStep(m.durable_step.value());
                   o.setCode(static_cast<uint16_t>(m.code));
                   o.setMessage(m.message);
                 },
                 [&](const Retain& m) { b.initRetain().setFromStep(m.from_step.value()); },
                 [&](const PoolRequest& m) {
                   auto o = b.initPoolRequest();
                   o.setHost(m.host);
                   o.setDeviceKind(m.device_kind);
                   o.setJob(m.job);
                   o.setEnded(m.ended);
                 },
                 [&](const PoolAssign& m) {
                   auto o = b.initPoolAssign();
                   o.setJob(m.job);
                   o.setCoordinator(m.coordinator);
                   o.setToken(m.token);
                   o.setServerKey(m.server_key);
                 },
                 [&](const JobInfo&) { b.initJobInfo(); },
                 [&](const JobInfoReply& m) {
                   auto o = b.initJobInfoReply();
                   o.setJobId(m.job_id);
                   o.setVirtualWorkers(m.virtual_workers);
                   o.setBatchPerVw(m.batch_per_vw);
                   o.setMinWorkers(m.min_workers);
                   o.setMaxVwsPerWorker(m.max_vws_per_worker);
                   o.setSteps(m.steps);
                   o.setStep(m.step);
                   auto ws = o.initWorkers(static_cast<unsigned>(m.workers.size()));
                   for (size_t i = 0; i < m.workers.size(); ++i) {
                     ws[i].setHost(m.workers[i].host);
                     ws[i].setDeviceKind(m.workers[i].device_kind);
                     ws[i].setSecondsPerVw(m.workers[i].seconds_per_vw);
                   }
                 },
                 [&](const JobStatusRequest& m) {
                   b.initJobStatusRequest().setRecentEvents(m.recent_events);
                 },
                 [&](const JobStatusReply& m) { SetJobStatus(b.initJobStatusReply(), m); },
                 [&](const JobControl& m) {
                   auto o = b.initJobControl();
                   o.setHold(m.hold);
                   o.setFromStep(m.from_step);
                   if (m.remove_shard)
                     o.setRemoveShard(static_cast<int32_t>(m.remove_shard->value()));
                 },
                 [&](const FetchModel& m) {
                   auto o = b.initFetchModel();
                   o.setSha256(m.sha256);
                   o.setOffset(m.offset);
                   o.setLength(m.length);
                 },
                 [&](const FetchModelReply& m) {
                   auto o = b.initFetchModelReply();
                   o.setSha256(m.sha256);
                   o.setOffset(m.offset);
                   o.setFileSize(m.file_size);
                   o.setFrame(static_cast<uint32_t>(frames.size() - 1));
                   frames.push_back({m.data, m.size, m.owner});
                 },
                 [&](const Reshard& m) { EncodeMoveBody(m, b, &frames); },
                 [&](const ReshardReady& m) { EncodeMoveBody(m, b, &frames); },
                 [&](const MoveRequest& m) { EncodeMoveBody(m, b, &frames); },
                 [&](const MoveReply& m) { EncodeMoveBody(m, b, &frames); },
             },
             envelope.body);
  auto flat = std::make_shared<kj::Array<capnp::word>>(capnp::messageToFlatArray(*message));
  frames[0] = Frame{flat->begin(), flat->size() * sizeof(capnp::word), flat};
  return frames;
}

bool TokenEquals(std::string_view got, std::string_view want) {
  unsigned char diff = got.size() != want.size() ? 1 : 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(want[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : '\0');
  }
  return diff == 0;
}

StatusOr<Envelope> Decode(const std::vector<Frame>& frames, const DecodeLimits& limits,
                          const std::string& expected_token) {
  if (frames.empty()) return ProtocolError("empty message");
  if (frames.size() > limits.max_frames) return ProtocolError("too many frames");
  const Frame& head = frames[0];
  if (head.size == 0 || head.size % sizeof(capnp::word) != 0) {
    return ProtocolError("envelope of " + std::to_string(head.size) +
                         " bytes is not a whole number of words");
  }
  if (head.size > limits.max_header_bytes) return ProtocolError("envelope larger than the limit");
  // Cap'n Proto reads words in place; copy the (small) envelope only if misaligned.
  kj::Array<capnp::word> aligned;
  kj::ArrayPtr<const capnp::word> words;
  if (reinterpret_cast<uintptr_t>(head.data) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(head.size / sizeof(capnp::word));
    std::memcpy(aligned.begin(), head.data, head.size);
    words = aligned.asPtr();
  } else {
    words = kj::ArrayPtr<const capnp::word>(static_cast<const capnp::word*>(head.data),
                                            head.size / sizeof(capnp::word));
  }
  Envelope out;
  Status status;
  kj::Maybe<kj::Exception> exception = kj::runCatchingExceptions([&]() {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = limits.max_header_bytes / sizeof(capnp::word) * 4;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(words, options);
    auto env = reader.getRoot<wire::Envelope>();
    if (env.getVersion() != wire::PROTOCOL_VERSION) {
      status = ProtocolError("protocol version " + std::to_string(env.getVersion()) +
                             ", this build speaks " + std::to_string(wire::PROTOCOL_VERSION));
      return;
    }
    const capnp::Text::Reader token = env.getToken();
    if (!expected_token.empty() &&
        !TokenEquals(std::string_view(token.begin(), token.size()), expected_token)) {
      status = Unauthenticated("wrong job token");
      return;
    }
    Reader r(frames, limits);
    status = r.Text(token, &out.token);
    if (status.ok()) status = DecodeBody(env, r, &out.body);
    if (status.ok()) status = r.AllFramesUsed();
  });
  KJ_IF_MAYBE (e, exception) {
    return ProtocolError(std::string("malformed envelope: ") + e->getDescription().cStr());
  }
  if (!status.ok()) return status;
  return out;
}

}  // namespace eps
