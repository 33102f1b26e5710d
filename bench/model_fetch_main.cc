// model_fetch_bench: how fast a worker gets a model file (docs/design.md, "How
// the model reaches the workers"): the coordinator's ModelFileServer on a
// ROUTER thread, the worker's FetchModelFile on a DEALER over loopback TCP, a
// synthetic file of --mb MB. No libtorch, no coordinator process.
//
// Rows: chunk size x requests in flight with no cache (the wire, the copy
// into the file's buffer and SHA-256), then with a host cache: a miss (the
// fetch and the cache entry written, fsynced and renamed) and a hit (the
// entry read and hashed; nothing fetched). References in the same run: memcpy
// of the file into fresh pages, and SHA-256 of it. The median of --reps runs.
// Prints a table; never fails on timing.
#include <gflags/gflags.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/digest.h"
#include "elastic/model_file_server.h"
#include "schema/channel.h"
#include "worker/model_fetch.h"

DEFINE_int64(mb, 147, "the file's size in MB (10^6 bytes): 147 is a 36.8 M-parameter model's");
DEFINE_int32(reps, 3, "runs per row; the median is printed");
DEFINE_string(dir, "", "where the cache rows write (empty: a temporary directory)");

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The coordinator's side: a ROUTER answering FetchModel on its own thread.
class Server {
 public:
  Server(zmq::context_t* context, uint64_t chunk, std::shared_ptr<const std::string> file,
         const std::string& sha256)
      : files_(eps::ModelFileServer::Open(chunk).value()),
        router_(eps::Channel::Bind(context, "tcp://127.0.0.1:0").value()) {
    files_->Add(sha256, file->data(), file->size(), file);
    thread_ = std::thread([this] {
      while (!stop_) {
        auto in = router_->Receive(std::chrono::milliseconds(20));
        if (!in.ok() || !in->envelope.ok()) continue;
        const auto* fetch = std::get_if<eps::FetchModel>(&in->envelope->body);
        if (fetch == nullptr) continue;
        auto reply = files_->Serve(*fetch);
        if (reply.ok()) (void)router_->SendTo(in->peer, eps::Envelope{"", std::move(*reply)});
      }
    });
  }
  ~Server() {
    stop_ = true;
    thread_.join();
  }
  std::string endpoint() const { return router_->endpoint(); }

 private:
  std::unique_ptr<eps::ModelFileServer> files_;
  std::unique_ptr<eps::Channel> router_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const size_t size = static_cast<size_t>(FLAGS_mb) * 1000 * 1000;
  auto file = std::make_shared<std::string>(size, '\0');
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t v = i * 0x9e3779b97f4a7c15ULL;
    std::memcpy(file->data() + i, &v, std::min<size_t>(8, size - i));
  }
  std::vector<double> memcpy_ms, sha_ms;
  std::string sha256;
  for (int r = 0; r < FLAGS_reps; ++r) {
    auto t = Clock::now();
    std::string copy(*file);
    memcpy_ms.push_back(Ms(t));
    t = Clock::now();
    eps::Sha256 sha;
    sha.Update(file->data(), file->size());
    sha256 = sha.HexDigest();
    sha_ms.push_back(Ms(t));
  }
  const double mb = size / 1e6;
  std::printf("model_fetch_bench: a file of %.0f MB, median of %d runs\n\n", mb, FLAGS_reps);
  std::printf("%-34s %10s %10s\n", "what", "ms", "MB/s");
  std::printf("%-34s %10.0f %10.0f\n", "memcpy into fresh pages", Median(memcpy_ms),
              mb / Median(memcpy_ms) * 1e3);
  std::printf("%-34s %10.0f %10.0f\n", "SHA-256", Median(sha_ms), mb / Median(sha_ms) * 1e3);

  std::string dir = FLAGS_dir;
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / "eps-fetch-bench-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return 1;
  }
  zmq::context_t context;
  const std::atomic<bool> stop{false};
  struct Row {
    uint64_t chunk_mib;
    int in_flight;
    const char* cache;  // "off", "miss", "hit"
  };
  const std::vector<Row> rows = {{1, 1, "off"},  {1, 4, "off"},  {4, 1, "off"},  {4, 4, "off"},
                                 {16, 4, "off"}, {64, 4, "off"}, {4, 4, "miss"}, {4, 4, "hit"}};
  for (const Row& row : rows) {
    const uint64_t chunk = (row.chunk_mib << 20) - eps::ModelFileServer::kEnvelopeRoom;
    Server server(&context, chunk, file, sha256);
    std::vector<double> ms;
    uint64_t fetched = 0;
    for (int r = 0; r < FLAGS_reps; ++r) {
      std::unique_ptr<eps::ModelCache> cache;
      if (std::string(row.cache) != "off") {
        const std::string cache_dir = dir + "/cache";
        if (std::string(row.cache) == "miss") std::filesystem::remove_all(cache_dir);
        cache = eps::ModelCache::Open(cache_dir).value();
        if (std::string(row.cache) == "hit") {
          std::string unused;
          if (cache->Read(sha256, size, &unused).value() != eps::ModelCache::Found::kHit) {
            // Fill it first (not timed).
            auto dealer = eps::Channel::Connect(&context, server.endpoint()).value();
            eps::FetchOptions fo;
            fo.chunk_bytes = chunk;
            (void)eps::FetchModelFile(dealer.get(), "model", sha256, size, cache.get(), fo, stop);
          }
        }
      }
      auto dealer = eps::Channel::Connect(&context, server.endpoint()).value();
      eps::FetchOptions fo;
      fo.chunk_bytes = chunk;
      fo.max_in_flight = row.in_flight;
      const auto t = Clock::now();
      auto got = eps::FetchModelFile(dealer.get(), "model", sha256, size, cache.get(), fo, stop);
      ms.push_back(Ms(t));
      if (!got.ok()) {
        std::fprintf(stderr, "fetch failed: %s\n", got.status().ToString().c_str());
        return 1;
      }
      fetched = got->report.fetched_bytes;
    }
    char what[64];
    std::snprintf(what, sizeof(what), "fetch %3llu MiB chunks x%d, cache %s",
                  static_cast<unsigned long long>(row.chunk_mib), row.in_flight, row.cache);
    std::printf("%-34s %10.0f %10.0f   (%llu bytes fetched)\n", what, Median(ms),
                mb / Median(ms) * 1e3, static_cast<unsigned long long>(fetched));
  }
  if (FLAGS_dir.empty()) std::filesystem::remove_all(dir);
  return 0;
}
