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

// What tells that a file was replaced or rewritten.
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

class FileSource final : public ModelSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}
  std::optional<std::string> Poll() override {
    // The first look names the file: it may have changed since the served load.
    const FileStamp now = StampOf(path_);
    if (now == stamp_ || !now.exists) return std::nullopt;
    stamp_ = now;
    return path_;
  }

 private:
  const std::string path_;
  FileStamp stamp_;
};

class CheckpointSource final : public ModelSource {
 public:
  CheckpointSource(const std::string& events_path, const CheckpointExportOptions& options)
      : watch_(events_path), options_(options) {}
  std::optional<std::string> Poll() override {
    const int64_t step = watch_.Poll();
    if (step <= exported_) return std::nullopt;
    exported_ = step;  // a failed export is not retried: the next checkpoint is
    auto file = ExportCheckpoint(options_, step);
    if (!file.ok()) {
      LOG(WARNING) << "--follow: " << file.status().ToString();
      return std::nullopt;
    }
    return *file;
  }

 private:
  DurableStepWatch watch_;
  const CheckpointExportOptions options_;
  int64_t exported_ = -1;
};

class ModelFollowerImpl final : public ModelFollower {
 public:
  ModelFollowerImpl(const ModelFollowerOptions& options, std::shared_ptr<const LoadedModel> served,
                    std::vector<std::unique_ptr<ModelSource>> sources, ModelLoader load,
                    ModelSink serve, Metrics* metrics)
      : options_(options),
        sources_(std::move(sources)),
        load_(std::move(load)),
        serve_(std::move(serve)),
        served_sha256_(served->sha256),
        served_step_(StepOf(*served)) {
    if (metrics != nullptr) {
      swaps_metric_ =
          &metrics->GetCounter("eps_serve_model_swaps_total", "New models --follow swapped in.");
      failures_metric_ = &metrics->GetCounter(
          "eps_serve_model_load_failures_total",
          "Versions of the followed model that did not load (the old model served on).");
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
      for (auto& source : sources_) {
        if (std::optional<std::string> path = source->Poll()) Consider(*path);
      }
      lock.lock();
    }
  }

  void Fail(const std::string& path, const Status& st) {
    failures_.fetch_add(1);
    if (failures_metric_ != nullptr) failures_metric_->Add();
    LOG(WARNING) << "--follow: " << path
                 << " not swapped in (the old model serves on): " << st.ToString();
  }

  void Consider(const std::string& path) {
    auto bytes = ReadFileToString(path);
    if (!bytes.ok()) return;  // replaced again meanwhile: the next look sees it
    Sha256 sha;
    sha.Update(bytes->data(), bytes->size());
    if (sha.HexDigest() == served_sha256_) return;  // the same bytes, rewritten
    auto loaded = load_(path);
    if (!loaded.ok() && loaded.status().code() == StatusCode::kFailedPrecondition) {
      LOG(INFO) << "--follow: " << loaded.status().message();  // not for serving: no failure
      return;
    }
    if (!loaded.ok()) return Fail(path, loaded.status());
    const int64_t step = StepOf(**loaded);
    if (step >= 0 && served_step_ >= 0 && step < served_step_) {
      LOG(INFO) << "--follow: " << path << " is of step " << step << ", older than the served "
                << served_step_ << ": not swapped in";
      return;
    }
    if (Status st = serve_(*loaded); !st.ok()) return Fail(path, st);
    served_sha256_ = (*loaded)->sha256;
    served_step_ = step;
    swaps_.fetch_add(1);
    if (swaps_metric_ != nullptr) swaps_metric_->Add();
    LOG(INFO) << "--follow: serving " << path << " (step " << step << ", sha256 " << served_sha256_
              << ")";
  }

  const ModelFollowerOptions options_;
  const std::vector<std::unique_ptr<ModelSource>> sources_;
  const ModelLoader load_;
  const ModelSink serve_;
  std::string served_sha256_;  // the follower thread's
  int64_t served_step_;        // the follower thread's
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

std::unique_ptr<ModelSource> WatchFile(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

std::unique_ptr<ModelSource> WatchCheckpoints(const std::string& events_path,
                                              const CheckpointExportOptions& options) {
  return std::make_unique<CheckpointSource>(events_path, options);
}

int64_t StepOf(const LoadedModel& model) {
  auto it = model.metadata.find("steps");
  if (it == model.metadata.end()) return -1;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return -1;
  }
}

StatusOr<std::unique_ptr<ModelFollower>> ModelFollower::Start(
    const ModelFollowerOptions& options, std::shared_ptr<const LoadedModel> served,
    std::vector<std::unique_ptr<ModelSource>> sources, ModelLoader load, ModelSink serve,
    Metrics* metrics) {
  if (served == nullptr) return InvalidArgument("--follow: no model served");
  if (options.interval.count() <= 0)
    return InvalidArgument("--follow_interval_ms must be positive");
  auto follower = std::make_unique<ModelFollowerImpl>(
      options, std::move(served), std::move(sources), std::move(load), std::move(serve), metrics);
  EPS_RETURN_IF_ERROR(follower->Run());
  return std::unique_ptr<ModelFollower>(std::move(follower));
}

}  // namespace eps
