// Sample values of every message kind, with every field set to something other
// than its default: the codec's round-trip test (codec_test.cc) and the fuzz
// targets' seed corpus (fuzz/write_corpus.cc) use them. Header-only, for tests.
#pragma once

#include <memory>
#include <vector>

#include "schema/messages.h"

namespace eps {
namespace samples {

inline JobSpec FullSpec() {
  JobSpec s;
  s.job_id = "job-42";
  s.model = "resnet-tiny";
  s.data_dir = "/data/mnist";
  s.virtual_workers = 13;
  s.batch_per_vw = 32;
  s.seed = 0xfeedfacecafebeefULL;
  s.steps = 1234567890123LL;
  s.threads = 3;
  s.optimizer.kind = "adamw";
  s.optimizer.lr = 0.125;
  s.optimizer.momentum = 0.875;
  s.optimizer.dampening = 0.25;
  s.optimizer.nesterov = true;
  s.optimizer.weight_decay = 5e-4;
  s.optimizer.beta1 = 0.8;
  s.optimizer.beta2 = 0.9875;
  s.optimizer.eps = 1e-6;
  s.optimizer.schedule = "cosine";
  s.optimizer.step_size = 77;
  s.optimizer.gamma = 0.5;
  s.optimizer.warmup_steps = 11;
  s.optimizer.min_lr = 1e-5;
  s.train_limit = 6000;
  s.test_limit = -1;
  s.chunk_elems = 4096;
  s.num_shards = 5;
  s.eval_batch = 250;
  s.allow_mixed_devices = true;
  s.grad_wire_dtype = WireDType::kBF16;
  s.weight_wire_dtype = WireDType::kFP16;
  return s;
}

inline std::vector<TensorSpec> FullTensors() {
  return {
      {"conv.weight", TensorKind::kParameter, DType::kFloat32, {8, 3, 5, 5}},
      {"bn.num_batches_tracked", TensorKind::kBuffer, DType::kInt64, {}},
      {"bn.running_var", TensorKind::kBuffer, DType::kFloat32, {8}},
      {"huge", TensorKind::kParameter, DType::kFloat32, {int64_t{1} << 40, 1, 2, 3, 4, 5, 6, 7}},
      LossTensor()};
}

// Chunk bytes with an owner, filled with a pattern that depends on `seed`.
inline ChunkBytes MakeChunk(uint32_t id, size_t size, uint8_t seed) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(size);
  for (size_t i = 0; i < size; ++i) (*bytes)[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 8));
  return ChunkBytes{ChunkId(id), bytes->data(), bytes->size(), bytes};
}

inline std::vector<Envelope> EveryMessageKind() {
  std::vector<Envelope> out;
  out.push_back({"tok-error", ErrorReply{StatusCode::kFailedPrecondition, "step 7 is over"}});
  out.push_back({"tok-rw", RegisterWorker{"host-a.example", 4242, "cuda:NVIDIA H200", "host-a:9100"}});
  out.push_back({"tok-rwr", RegisterWorkerReply{WorkerId(9),
                                                FullSpec(),
                                                {"tcp://10.0.0.1:5000", "", "ipc:///x"},
                                                std::string("PK\x03\x04\0model", 10),
                                                std::string("init\0bytes", 10),
                                                "<pad>\n<unk>\nmail\n",
                                                uint64_t{5} << 30,
                                                12345,
                                                4 << 20,
                                                InitialShardMap({40, 8, 8}, 3)}});
  out.push_back({"tok-rs", RegisterShard{ShardId(3), "tcp://10.0.0.2:6000", Step(40), Step(41), "10.0.0.2:9101"}});
  {
    ShardMap map = InitialShardMap({40, 8, 8}, 2);
    map.generation = 3;
    map.chunk_owner[2] = ShardId(1000);  // codecs carry owners as they are; layouts check them
    out.push_back({"tok-sc", ShardConfig{FullSpec(), FullTensors(), 6, map}});
  }
  StepRequest request{WorkerId(5), Step(-1), FullTensors()};
  request.data_fingerprint = "npy:60000:9f86d081884c7d65";
  out.push_back({"tok-sr", request});
  StepPlan plan;
  plan.kind = PlanKind::kEval;
  plan.step = Step(99);
  plan.epoch = Epoch(0x1234567890ULL);
  plan.vw_lo = 3;
  plan.vw_hi = 11;
  plan.eval_lo = 100;
  plan.eval_hi = 20000;
  plan.timeline = 0x1234567890abULL;
  out.push_back({"tok-plan", plan});
  out.push_back(
      {"tok-done", StepDone{ShardId(2), Step(17), true, 2.71828f, Step(15), "disk full", 0.0125,
                            uint64_t{1} << 40, 123456789, 212.5, 4080.25}});
  Push push;
  push.epoch = Epoch(6);
  push.step = Step(-1);
  push.block = Block{8, 4};
  push.chunks = {MakeChunk(0, 1000, 1), MakeChunk(7, 4, 2), MakeChunk(3, 0, 3),
                 MakeChunk(12, 1 << 16, 4)};
  push.shm = ShmRegionRef{4243, 9, 0xbeefULL << 32,
                          1 << 24};  // chunks both in frames and in shared memory
  push.shm_chunks = {{ChunkId(2), 64, 4096}, {ChunkId(9), 8192, 1 << 20}};
  out.push_back({"tok-push", push});
  out.push_back({"tok-pr", PushReply{Step(41), 5, 2}});
  out.push_back({"tok-pull", Pull{Step(8),
                                  {ChunkId(1), ChunkId(5), ChunkId(4000000000u)},
                                  WireDType::kBF16,
                                  ShmRegionRef{4242, 17, 0xfeedULL << 40, 1 << 20},
                                  {64, 4096, 1 << 19},
                                  {},
                                  false,
                                  77}});
  out.push_back({"tok-pullr", PullReply{Step(8),
                                        {MakeChunk(1, 300, 5), MakeChunk(5, 70000, 6)},
                                        {{ChunkId(2), 64, 4000}, {ChunkId(7), 4096, 12}}}});
  out.push_back({"tok-eval", EvalResult{WorkerId(4), Step(30), 1000, 2000, 987, 123.5}});
  out.push_back({"", Shutdown{"job finished"}});
  out.push_back({"tok-hb", Heartbeat{WorkerId(17)}});
  out.push_back({"tok-leave", Leave{WorkerId(9), "SIGTERM", true}});
  out.push_back({"tok-rb", Rollback{Step(120), 9}});
  out.push_back(
      {"tok-rbd", RollbackDone{ShardId(4), Step(120), Step(130), Step(130),
                               StatusCode::kInvalidArgument, "no checkpoint of step 120"}});
  out.push_back({"tok-ret", Retain{Step(96)}});
  out.push_back({"tok-pool", PoolRequest{"node7:4242", "cuda:NVIDIA H200", "job-a", "job-b"}});
  out.push_back({"tok-pa", PoolAssign{"job-b", "tcp://10.0.0.2:5555", "secret-b", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"}});
  out.push_back({"tok-ji", JobInfo{}});
  out.push_back({"tok-jir", JobInfoReply{"job-b",
                                         8,
                                         32,
                                         2,
                                         4,
                                         1000,
                                         417,
                                         {{"node7:4242", "cpu", 0.0125}, {"node8:17", "cpu", 0}}}});
  out.push_back({"tok-jsr", JobStatusRequest{7}});
  JobStatusReply status{"job-s", "cnn",  "training", true,   41,       100,   0.5, true,
                        1.25f,   0.05,   812.5,      73.8,   30.5,     8,     32,  Epoch(3),
                        true,    0.9125, {},         {},     {}};
  status.workers = {{WorkerId(2), "node7", 4242, "cpu", "ready", 0, 5, 0.02, 0.25, 40, "node7:1"},
                    {WorkerId(5), "node8", 17, "cuda:X", "dead", 5, 5, 0, 9.5, 3, ""}};
  status.shards = {{ShardId(0), "tcp://n:1", true, Step(41), Step(40), 2.5, 1 << 20, 5, "n:2"},
                   {ShardId(1), "", false, Step(-1), Step(-1), -1, 0, 0, ""}};
  status.events = {R"({"kind":"worker_joined"})", ""};
  status.rejected_messages = uint64_t{1} << 33;
  status.hold_from = 44;
  status.map_generation = 5;
  status.resharding = true;
  status.shards[1].role = "spare";
  out.push_back({"tok-jst", status});
  out.push_back({"tok-jc", JobControl{true, 45, ShardId(kMaxShardId - 1)}});
  out.push_back({"tok-fm", FetchModel{std::string(64, 'a'), uint64_t{4} << 30, 4 << 20}});
  const ChunkBytes file = MakeChunk(0, 70000, 9);
  out.push_back({"tok-fmr", FetchModelReply{std::string(64, 'b'), uint64_t{4} << 30,
                                            uint64_t{5} << 30, file.data, file.size, file.owner}});
  ShardMap map = InitialShardMap({40, 8, 8}, 3);
  map.generation = 9;
  out.push_back({"tok-rs", Reshard{map, Step(46), {"tcp://a:1", "", "tcp://c:3"}}});
  out.push_back(
      {"tok-rr", ReshardReady{ShardId(2), 9, StatusCode::kDataLoss, "crc", 1ull << 33, true}});
  out.push_back({"tok-mq", MoveRequest{9, Step(46), {ChunkId(0), ChunkId(70000)}, {0, 4095}}});
  const ChunkBytes value = MakeChunk(1, 300, 10), slot = MakeChunk(1, 300, 11);
  out.push_back({"tok-mr", MoveReply{9,
                                     Step(46),
                                     {{"value/1", value.data, value.size, value.owner, 0xdeadbeef},
                                      {"slot0/1", slot.data, slot.size, slot.owner, 7}}}});
  return out;
}

}  // namespace samples
}  // namespace eps
