// write_corpus DIR: writes the fuzz targets' seed corpus (fuzz/corpus/) from
// real messages: DIR/decode/ every message kind (tests/sample_messages.h, the
// ones with large chunks left out) and pushes of the fuzz job, DIR/shard/ and
// DIR/job_state/ short conversations of the fuzz job (fuzz/fuzz_jobs.h) in
// the input formats of shard_fuzz.cc and job_state_fuzz.cc. Deterministic:
// the same files every run. scripts/fuzz_corpus.sh runs it.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_jobs.h"
#include "tests/sample_messages.h"

namespace {

using namespace eps;

std::vector<Frame> Frames(const Envelope& e) {
  auto frames = Encode(e);
  if (!frames.ok()) {
    std::fprintf(stderr, "%s\n", frames.status().ToString().c_str());
    std::exit(1);
  }
  return *frames;
}

size_t Bytes(const std::vector<Frame>& frames) {
  size_t n = 0;
  for (const Frame& f : frames) n += f.size;
  return n;
}

// One message of a conversation: [how byte (job_state only)] [frame count] [frames].
void AppendMessage(const Envelope& e, std::string* out, int how = -1) {
  const std::vector<Frame> frames = Frames(e);
  if (frames.size() > 8) std::exit(1);  // the targets read at most 8 frames a message
  if (how >= 0) out->push_back(static_cast<char>(how));
  out->push_back(static_cast<char>(frames.size() - 1));
  fuzz::AppendFrames(frames, out);
}

void Write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  FILE* f = std::fopen((dir / name).c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror((dir / name).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_corpus DIR\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  const Layout layout = *MakeLayout(fuzz::FuzzTensors(), 1, fuzz::FuzzSpec().chunk_elems);
  const Envelope init{"", fuzz::InitPush(layout)};
  auto block = [&](uint32_t lo, uint32_t n, int64_t t = 0) {
    return Envelope{"", fuzz::StepPush(layout, Step(t), Block{lo, n})};
  };

  // decode: one envelope per file.
  int i = 0;
  for (const Envelope& e : samples::EveryMessageKind()) {
    const std::vector<Frame> frames = Frames(e);
    if (Bytes(frames) > 8192) continue;  // keeps the corpus small
    std::string bytes;
    fuzz::AppendFrames(frames, &bytes);
    Write(root / "decode", std::to_string(i++) + "-" + BodyName(e.body), bytes);
  }
  for (const Envelope& e : {init, block(0, 1), block(1, 2)}) {
    std::string bytes;
    fuzz::AppendFrames(Frames(e), &bytes);
    Write(root / "decode", std::to_string(i++) + "-Push", bytes);
  }

  // shard: conversations with a shard that serves version 0.
  const Envelope pull0{"", Pull{Step(0), {}}};
  const Envelope pull1{"", Pull{Step(1), {ChunkId(0), ChunkId(1)}, WireDType::kBF16}};
  Pull shm_pull{Step(0), {ChunkId(0)}, WireDType::kFP32, ShmRegionRef{1, 3, 7, 4096}, {64}};
  Push shm_push = fuzz::StepPush(layout, Step(0), Block{2, 1});
  shm_push.shm = ShmRegionRef{1, 3, 7, 4096};
  shm_push.shm_chunks = {{shm_push.chunks[0].chunk, 64, shm_push.chunks[0].size}};
  shm_push.chunks.erase(shm_push.chunks.begin());
  const std::vector<std::vector<Envelope>> shard = {
      {pull0},
      {block(0, 1), pull1},
      {block(0, 1), block(1, 1), block(2, 1), pull1, block(0, 1, 1)},
      {block(0, 2), block(2, 1), block(2, 1), Envelope{"", Pull{Step(1), {}}}},
      {Envelope{"", shm_pull}, Envelope{"", shm_push}},
      {init, block(0, 1, 5)},
  };
  for (size_t k = 0; k < shard.size(); ++k) {
    std::string bytes;
    for (const Envelope& e : shard[k]) AppendMessage(e, &bytes);
    Write(root / "shard", std::to_string(k), bytes);
  }

  // job_state: senders 0 unknown, 1 the shard, 2 worker 0; +4: Tick; +8 * n: n * 250 ms first.
  const int kStranger = 0, kShard = 1, kWorker = 2, kTick = 4, kSecond = 32;
  StepDone init_done{ShardId(0), Step(-1), false, 0, Step(-1), ""};
  StepDone step0{ShardId(0), Step(0), true, 1.5f, Step(-1), "", 0.1, 100, 200};
  const std::vector<std::vector<std::pair<int, Envelope>>> job = {
      {{kShard, {"", init_done}}, {kWorker, {"", StepRequest{WorkerId(0), Step(-1), {}}}}},
      {{kShard, {"", init_done}},
       {kWorker, {"", StepRequest{WorkerId(0), Step(-1), {}}}},
       {kWorker | kTick, {"", Heartbeat{WorkerId(0)}}},
       {kShard, {"", step0}},
       {kWorker, {"", StepRequest{WorkerId(0), Step(0), {}, 0, 0, false, 0.01}}}},
      {{kStranger, {"", RegisterWorker{"other:2", 2, "cpu", ""}}},
       {kStranger, {"", StepRequest{WorkerId(1), Step(-1), fuzz::FuzzTensors(), 100, 10}}},
       {kWorker | kTick | 4 * kSecond, {"", Heartbeat{WorkerId(1)}}}},
      {{kWorker, {"", Leave{WorkerId(0), "SIGTERM", false}}},
       {kStranger | kTick, {"", JobStatusRequest{5}}}},
      {{kStranger, {"", JobControl{true, 1}}},
       {kShard, {"", init_done}},
       {kWorker, {"", StepRequest{WorkerId(0), Step(-1), {}}}},
       {kStranger | kTick, {"", JobControl{false, 0}}}},
      {{kShard, {"", RegisterShard{ShardId(0), "tcp://shard0b", Step(-1), Step(-1), ""}}},
       {kShard, {"", RollbackDone{ShardId(0), Step(-1), Step(-1), Step(-1), StatusCode::kOk, ""}}}},
      {{kWorker, {"", ErrorReply{StatusCode::kNotFound, "no model tiny"}}}},
      {{kShard, {"", init_done}},
       {kWorker, {"", EvalResult{WorkerId(0), Step(0), 0, 10, 5, 1.0}}},
       {kShard, {"", ErrorReply{StatusCode::kInvalidArgument, "bad spec"}}}},
      {{kStranger, {"", JobInfo{}}}, {kStranger | kTick | 31 * 8, {"", Retain{Step(0)}}}},
  };
  for (size_t k = 0; k < job.size(); ++k) {
    std::string bytes;
    for (const auto& [how, e] : job[k]) AppendMessage(e, &bytes, how);
    Write(root / "job_state", std::to_string(k), bytes);
  }
  return 0;
}
