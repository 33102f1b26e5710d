#include "worker/worker.h"

#include <glog/logging.h>
#include <unistd.h>

#include <cstring>

#include "common/layout.h"
#include "common/tree.h"
#include "schema/channel.h"
#include "worker/model_runner.h"
#include "worker/sampler.h"

namespace eps {
namespace {

using Bytes = std::shared_ptr<std::vector<uint8_t>>;

class WorkerImpl final : public Worker {
 public:
  WorkerImpl(WorkerOptions options, zmq::context_t* context, std::unique_ptr<Channel> coordinator)
      : options_(std::move(options)), context_(context), coordinator_(std::move(coordinator)) {}

  Status Run(const volatile bool* stop) override {
    stop_ = stop;
    EPS_RETURN_IF_ERROR(Register());
    Status st = Setup();
    if (!st.ok()) {
      // A job this worker cannot run (unknown model, unreadable data): tell the coordinator.
      (void)coordinator_->Send(Envelope{options_.token, ErrorReply{st.code(), "worker " + host_ + ": " + st.message()}});
      return st;
    }
    return Loop();
  }

 private:
  Status Register() {
    EPS_ASSIGN_OR_RETURN(Envelope reply,
                         Call(coordinator_.get(), Envelope{options_.token, RegisterWorker{options_.host, uint32_t(getpid())}},
                              options_.plan_timeout));
    auto* r = std::get_if<RegisterWorkerReply>(&reply.body);
    if (r == nullptr) return Internal(std::string("registration answered with ") + BodyName(reply.body));
    id_ = r->worker;
    spec_ = r->spec;
    shard_addresses_ = r->shard_addresses;
    host_ = options_.host + "/w" + std::to_string(id_.value());
    LOG(INFO) << "registered as worker " << id_ << " of job '" << spec_.job_id << "' (" << spec_.model
              << ", V=" << spec_.virtual_workers << ", " << shard_addresses_.size() << " shards)";
    return OkStatus();
  }

  Status Setup() {
    ModelOptions mo;
    mo.model = spec_.model;
    mo.init_seed = spec_.seed;
    mo.threads = static_cast<int>(spec_.threads);
    EPS_ASSIGN_OR_RETURN(model_, ModelRunner::Create(mo));
    const std::string dir = spec_.data_dir + "/";
    EPS_ASSIGN_OR_RETURN(train_, ReadIdxDataset(dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz",
                                                spec_.train_limit));
    if (spec_.test_limit >= 0) {
      EPS_ASSIGN_OR_RETURN(test_, ReadIdxDataset(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz",
                                                 spec_.test_limit));
    }
    if (train_.size < 1) return InvalidArgument("the training set is empty");
    sampler_ = std::make_unique<Sampler>(spec_.seed, train_.size, spec_.virtual_workers, spec_.batch_per_vw);
    std::vector<TensorSpec> tensors = model_->Tensors();
    tensors.push_back(LossTensor());
    EPS_ASSIGN_OR_RETURN(layout_, MakeLayout(tensors, spec_.num_shards, spec_.chunk_elems));
    if (shard_addresses_.size() != layout_.num_shards) return Internal("shard address list does not match the job");
    // Flat gradient vector: parameters in layout order, then the loss.
    flat_offset_.assign(layout_.tensors.size(), 0);
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind == TensorKind::kParameter || t.kind == TensorKind::kLoss) {
        flat_offset_[i] = flat_size_;
        flat_size_ += static_cast<size_t>(t.numel());
      }
    }
    for (const std::string& address : shard_addresses_) {
      EPS_ASSIGN_OR_RETURN(auto ch, Channel::Connect(context_, address));
      shards_.push_back(std::move(ch));
    }
    outstanding_.assign(shards_.size(), 0);
    return OkStatus();
  }

  Status Loop() {
    Step done{-1};
    bool first = true;
    while (true) {
      if (*stop_) return Aborted("stopped by a signal");
      StepRequest request{id_, done, {}, 0, 0};
      if (first) {
        request.tensors = model_->Tensors();
        request.train_samples = train_.size;
        request.test_samples = test_.size;
        first = false;
      }
      EPS_ASSIGN_OR_RETURN(Envelope reply, Call(coordinator_.get(), Envelope{options_.token, request},
                                                options_.plan_timeout));
      auto* plan = std::get_if<StepPlan>(&reply.body);
      if (plan == nullptr) return Internal(std::string("step request answered with ") + BodyName(reply.body));
      switch (plan->kind) {
        case PlanKind::kWait:
          break;
        case PlanKind::kInit:
          EPS_RETURN_IF_ERROR(PushInitialValues());
          break;
        case PlanKind::kTrain:
          EPS_RETURN_IF_ERROR(Train(*plan));
          done = plan->step;
          break;
        case PlanKind::kEval:
          EPS_RETURN_IF_ERROR(Evaluate(*plan));
          break;
        case PlanKind::kStop:
          LOG(INFO) << "the job is over";
          return OkStatus();
      }
    }
  }

  // ---- shards ---------------------------------------------------------------

  std::vector<ChunkBytes> ChunksFor(ShardId shard, const std::function<bool(const Chunk&)>& take,
                                    const std::function<ChunkBytes(const Chunk&)>& bytes) const {
    std::vector<ChunkBytes> out;
    for (const Chunk& c : layout_.chunks) {
      if (c.shard == shard && take(c)) out.push_back(bytes(c));
    }
    return out;
  }

  TensorKind KindOf(const Chunk& c) const { return layout_.tensors[c.tensor].kind; }

  Status SendPush(size_t shard, Push push) {
    if (push.chunks.empty()) return OkStatus();
    EPS_RETURN_IF_ERROR(shards_[shard]->Send(Envelope{options_.token, std::move(push)}));
    ++outstanding_[shard];
    return OkStatus();
  }

  // Collects every outstanding push reply.
  Status AwaitPushes() {
    for (size_t s = 0; s < shards_.size(); ++s) {
      while (outstanding_[s] > 0) {
        EPS_ASSIGN_OR_RETURN(Channel::Incoming in, shards_[s]->Receive(options_.rpc_timeout));
        --outstanding_[s];
        if (!in.envelope.ok()) return in.envelope.status().WithContext("bad reply from shard " + std::to_string(s));
        if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
          return err->ToStatus().WithContext("shard " + std::to_string(s));
        }
      }
    }
    return OkStatus();
  }

  // Pulls version `version` from every shard into the model.
  Status PullInto(Step version) {
    for (auto& ch : shards_) EPS_RETURN_IF_ERROR(ch->Send(Envelope{options_.token, Pull{version, {}}}));
    for (size_t s = 0; s < shards_.size(); ++s) {
      EPS_ASSIGN_OR_RETURN(Channel::Incoming in, shards_[s]->Receive(options_.rpc_timeout));
      if (!in.envelope.ok()) return in.envelope.status().WithContext("bad pull reply from shard " + std::to_string(s));
      if (auto* err = std::get_if<ErrorReply>(&in.envelope->body)) {
        return err->ToStatus().WithContext("pull from shard " + std::to_string(s));
      }
      auto* reply = std::get_if<PullReply>(&in.envelope->body);
      if (reply == nullptr || reply->version != version) return Internal("shard answered a pull with something else");
      for (const ChunkBytes& cb : reply->chunks) {
        if (cb.chunk.value() >= layout_.chunks.size()) return DataLoss("pulled an unknown chunk");
        const Chunk& c = layout_.chunks[cb.chunk.value()];
        if (c.shard.value() != s || cb.size != layout_.ChunkBytes(c) || KindOf(c) == TensorKind::kLoss) {
          return DataLoss("pulled chunk " + std::to_string(c.id.value()) + " does not match the layout");
        }
        const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
        std::memcpy(static_cast<uint8_t*>(model_->MutableData(c.tensor)) + c.offset * elem, cb.data, cb.size);
      }
    }
    return OkStatus();
  }

  Status PushInitialValues() {
    for (size_t s = 0; s < shards_.size(); ++s) {
      Push push{Epoch(0), Step(-1), Block{0, 1}, {}};
      push.chunks = ChunksFor(
          ShardId(s), [&](const Chunk& c) { return KindOf(c) != TensorKind::kLoss; },
          [&](const Chunk& c) {
            const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
            return ChunkBytes{c.id, static_cast<uint8_t*>(model_->MutableData(c.tensor)) + c.offset * elem,
                              layout_.ChunkBytes(c), nullptr};
          });
      EPS_RETURN_IF_ERROR(SendPush(s, std::move(push)));
    }
    // The chunks point into the model: wait for the replies before it changes.
    EPS_RETURN_IF_ERROR(AwaitPushes());
    LOG(INFO) << "pushed the initial parameters";
    return OkStatus();
  }

  // ---- training -------------------------------------------------------------

  // Copies of the buffer tensors (BatchNorm statistics), by tensor index.
  std::vector<Bytes> SnapshotBuffers() {
    std::vector<Bytes> out(layout_.tensors.size());
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind != TensorKind::kBuffer) continue;
      const size_t n = t.numel() * DTypeSize(t.dtype);
      const auto* p = static_cast<const uint8_t*>(model_->MutableData(i));
      out[i] = std::make_shared<std::vector<uint8_t>>(p, p + n);
    }
    return out;
  }

  void RestoreBuffers(const std::vector<Bytes>& saved) {
    for (size_t i = 0; i < saved.size(); ++i) {
      if (saved[i]) std::memcpy(model_->MutableData(i), saved[i]->data(), saved[i]->size());
    }
  }

  // The VW's contribution: its gradients in flat layout order, then its loss.
  std::vector<float> FlatGradient(float loss) const {
    std::vector<float> flat(flat_size_);
    for (size_t i = 0; i < layout_.tensors.size(); ++i) {
      const TensorSpec& t = layout_.tensors[i];
      if (t.kind == TensorKind::kParameter) {
        std::memcpy(flat.data() + flat_offset_[i], model_->GradData(i), t.numel() * sizeof(float));
      } else if (t.kind == TensorKind::kLoss) {
        flat[flat_offset_[i]] = loss;
      }
    }
    return flat;
  }

  Status PushBlock(const StepPlan& plan, const Block& block, std::vector<float> sum,
                   const std::vector<Bytes>& vw0_buffers) {
    auto owner = std::make_shared<std::vector<float>>(std::move(sum));
    for (size_t s = 0; s < shards_.size(); ++s) {
      Push push{plan.epoch, plan.step, block, {}};
      push.chunks = ChunksFor(
          ShardId(s), [&](const Chunk& c) { return KindOf(c) != TensorKind::kBuffer || block.lo == 0; },
          [&](const Chunk& c) {
            if (KindOf(c) == TensorKind::kBuffer) {
              const Bytes& b = vw0_buffers[c.tensor];
              const size_t elem = DTypeSize(layout_.tensors[c.tensor].dtype);
              return ChunkBytes{c.id, b->data() + c.offset * elem, layout_.ChunkBytes(c), b};
            }
            return ChunkBytes{c.id, owner->data() + flat_offset_[c.tensor] + c.offset, layout_.ChunkBytes(c), owner};
          });
      EPS_RETURN_IF_ERROR(SendPush(s, std::move(push)));
    }
    return OkStatus();
  }

  Status Train(const StepPlan& plan) {
    if (plan.vw_hi > spec_.virtual_workers) return InvalidArgument("plan names VWs beyond V");
    EPS_RETURN_IF_ERROR(PullInto(plan.step));
    const std::vector<Bytes> step_buffers = SnapshotBuffers();
    std::vector<Bytes> vw0_buffers;
    std::vector<int64_t> indices;
    for (const Block& block : AlignedBlocks(plan.vw_lo, plan.vw_hi)) {
      TreeReducer reducer(block, spec_.virtual_workers, flat_size_);
      for (uint32_t v = block.lo; v < block.hi(); ++v) {
        if (*stop_) return Aborted("stopped by a signal");
        if (v != plan.vw_lo) RestoreBuffers(step_buffers);
        sampler_->Indices(VirtualWorkerId(v), plan.step, &indices);
        EPS_ASSIGN_OR_RETURN(float loss,
                             model_->TrainStep(train_, indices, StreamSeed(spec_.seed, v, plan.step.value())));
        if (v == 0) vw0_buffers = SnapshotBuffers();
        EPS_RETURN_IF_ERROR(reducer.Add(Block{v, 1}, FlatGradient(loss)));
      }
      EPS_RETURN_IF_ERROR(PushBlock(plan, block, reducer.TakeResult(), vw0_buffers));
    }
    return AwaitPushes();
  }

  Status Evaluate(const StepPlan& plan) {
    EPS_RETURN_IF_ERROR(PullInto(plan.step));
    const int64_t lo = std::min(plan.eval_lo, test_.size), hi = std::min(plan.eval_hi, test_.size);
    EPS_ASSIGN_OR_RETURN(EvalStats stats, model_->Evaluate(test_, lo, hi, spec_.eval_batch));
    return coordinator_->Send(
        Envelope{options_.token, EvalResult{id_, plan.step, plan.eval_lo, plan.eval_hi, stats.correct, stats.loss_sum}});
  }

  const WorkerOptions options_;
  zmq::context_t* const context_;
  std::unique_ptr<Channel> coordinator_;
  const volatile bool* stop_ = nullptr;

  WorkerId id_;
  std::string host_;
  JobSpec spec_;
  std::vector<std::string> shard_addresses_;
  std::unique_ptr<ModelRunner> model_;
  Dataset train_, test_;
  std::unique_ptr<Sampler> sampler_;
  Layout layout_;
  std::vector<size_t> flat_offset_;  // by tensor: start in the flat gradient vector
  size_t flat_size_ = 0;
  std::vector<std::unique_ptr<Channel>> shards_;
  std::vector<int> outstanding_;  // push replies not yet collected, by shard
};

}  // namespace

StatusOr<std::unique_ptr<Worker>> Worker::Open(const WorkerOptions& options, zmq::context_t* context) {
  if (options.coordinator.empty()) return InvalidArgument("a worker needs the coordinator's address");
  EPS_ASSIGN_OR_RETURN(auto channel, Channel::Connect(context, options.coordinator));
  return std::unique_ptr<Worker>(new WorkerImpl(options, context, std::move(channel)));
}

}  // namespace eps
