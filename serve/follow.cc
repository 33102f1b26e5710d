#include "serve/follow.h"

#include <glog/logging.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "common/digest.h"
#include "common/files.h"
#include "common/threads.h"

namespace eps {
namespace {

// What tells that the file was replaced or rewritten.
struct FileStamp {
  bool exists = false;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp& o) const {
    return exists == o.exists && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
};

FileStamp StampOf(const std::string& path) {
  struct stat st;
  FileStamp s;
  if (::stat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.inode = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

class ModelFollowerImpl final : public ModelFollower {
 public:
  ModelFollowerImpl(const ModelFollowerOptions& options, std::string served_sha256,
                    ModelLoader load, ModelSink serve, Metrics* metrics)
      : options_(options),
        load_(std::move(load)),
        serve_(std::move(serve)),
        served_sha256_(std::move(served_sha256)),
        stamp_() {  // the first look hashes the file: it may have changed since the load
    if (metrics != nullptr) {
      swaps_metric_ =
          &metrics->GetCounter("eps_serve_model_swaps_total", "New models --follow swapped in.");
      failures_metric_ = &metrics->GetCounter(
          "eps_serve_model_load_failures_total",
          "Versions of the followed export that did not load (the old model served on).");
    }
  }

  ~ModelFollowerImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status Run() {
    EPS_ASSIGN_OR_RETURN(thread_, StartThreadWithoutStopSignals([this] { Loop(); }));
    return OkStatus();
  }

  int64_t swaps() const override { return swaps_.load(); }
  int64_t failures() const override { return failures_.load(); }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, options_.interval, [this] { return stop_; })) {
      lock.unlock();
      CheckOnce();
      lock.lock();
    }
  }

  void CheckOnce() {
    const FileStamp now = StampOf(options_.path);
    if (now == stamp_ || !now.exists) return;
    stamp_ = now;
    auto bytes = ReadFileToString(options_.path);
    if (!bytes.ok()) return;  // replaced again meanwhile: the next look sees it
    Sha256 sha;
    sha.Update(bytes->data(), bytes->size());
    if (sha.HexDigest() == served_sha256_) return;  // the same bytes, rewritten
    auto loaded = load_(options_.path);
    Status st = loaded.ok() ? serve_(*loaded) : loaded.status();
    if (!st.ok()) {
      failures_.fetch_add(1);
      if (failures_metric_ != nullptr) failures_metric_->Add();
      LOG(WARNING) << "--follow: " << options_.path
                   << " not swapped in (the old model serves on): " << st.ToString();
      return;
    }
    served_sha256_ = (*loaded)->sha256;
    swaps_.fetch_add(1);
    if (swaps_metric_ != nullptr) swaps_metric_->Add();
    LOG(INFO) << "--follow: serving " << options_.path << " (sha256 " << served_sha256_ << ")";
  }

  const ModelFollowerOptions options_;
  const ModelLoader load_;
  const ModelSink serve_;
  std::string served_sha256_;  // the follower thread's
  FileStamp stamp_;            // the follower thread's
  Counter* swaps_metric_ = nullptr;
  Counter* failures_metric_ = nullptr;
  std::atomic<int64_t> swaps_{0};
  std::atomic<int64_t> failures_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<ModelFollower>> ModelFollower::Start(const ModelFollowerOptions& options,
                                                              const std::string& served_sha256,
                                                              ModelLoader load, ModelSink serve,
                                                              Metrics* metrics) {
  if (options.path.empty()) return InvalidArgument("--follow: no file to follow");
  if (options.interval.count() <= 0)
    return InvalidArgument("--follow_interval_ms must be positive");
  auto follower = std::make_unique<ModelFollowerImpl>(options, served_sha256, std::move(load),
                                                      std::move(serve), metrics);
  EPS_RETURN_IF_ERROR(follower->Run());
  return std::unique_ptr<ModelFollower>(std::move(follower));
}

}  // namespace eps
