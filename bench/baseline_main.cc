// baseline: plain single-process libtorch training, the yardstick for the
// overhead of virtual workers. Same model (models/models.h) and data
// (Fashion-MNIST, or --train_data, through data/job_data.h) as a job; each step runs
// --microbatches microbatches of --batch_per_vw samples, accumulates their
// gradients (loss / k each, backward each) and then takes one optimizer step.
// No parameter server, no messages, no copies of gradients. With
// --device=cuda:N (a build against a CUDA libtorch) the model, the optimizer
// state and each microbatch live on that GPU, with the worker's deterministic
// settings (PrepareDevice), and the loss is read back once per step.
//
// Prints one JSON object on one line on stdout at the end, timed over --steps
// steps after --warmup_steps untimed ones:
//   {"program":"baseline","samples_per_s":X,"steps":N,"seconds":T}
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/job_data.h"
#include "models/model_runner.h"
#include "models/models.h"

DEFINE_string(model, "cnn", "mlp | cnn | cnn_bn");
DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist",
              "Folder with the Fashion-MNIST IDX files (.gz)");
DEFINE_int64(train_limit, -1, "Use the first N training samples (<= 0: all)");
DEFINE_string(train_data, "", "Training features: .npy, .csv or IDX (empty: --data_dir's Fashion-MNIST)");
DEFINE_string(train_labels, "", "Training labels: .npy or IDX (CSV: the --label_column)");
DEFINE_string(data_format, "", "idx, npy or csv; empty: from the files' extensions");
DEFINE_string(label_column, "label", "CSV: the header name of the label column");
DEFINE_int32(microbatches, 8, "Microbatches per step (k, the job's V)");
DEFINE_int32(batch_per_vw, 16, "Samples per microbatch");
DEFINE_int32(steps, 300, "Timed optimizer steps");
DEFINE_int32(warmup_steps, 5, "Untimed steps before the timed ones");
DEFINE_int32(threads, 1, "libtorch intra-op threads");
DEFINE_string(device, "cpu", "cpu, or cuda:N in a build against a CUDA libtorch");
DEFINE_string(optimizer, "adamw", "adamw | sgd");
DEFINE_double(lr, 0.002, "Learning rate (constant)");
DEFINE_double(weight_decay, 0.0001, "Weight decay");
DEFINE_double(momentum, 0.9, "SGD momentum");
DEFINE_uint64(seed, 1, "Seeds initialization, sampling and dropout");
DEFINE_string(cpu_kernels, eps::kDefaultCpuKernels,
              "The CPU kernel set to run (a job's --cpu_kernels; common/cpu_kernels.h)");

namespace {

eps::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    torch::nn::Sequential& model) {
  if (FLAGS_optimizer == "adamw") {
    return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::AdamW>(
        model->parameters(),
        torch::optim::AdamWOptions(FLAGS_lr).weight_decay(FLAGS_weight_decay)));
  }
  if (FLAGS_optimizer == "sgd") {
    return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(FLAGS_lr)
                                 .momentum(FLAGS_momentum)
                                 .weight_decay(FLAGS_weight_decay)));
  }
  return eps::InvalidArgument("unknown optimizer '" + FLAGS_optimizer +
                              "' (expected adamw or sgd)");
}

// Draws microbatches without replacement from a fresh random permutation per epoch.
class Batches {
 public:
  Batches(int64_t size, int64_t batch) : size_(size), batch_(batch) {}
  torch::Tensor Next() {
    if (pos_ + batch_ > size_ || !perm_.defined()) {
      perm_ = torch::randperm(size_, torch::kInt64);
      pos_ = 0;
    }
    torch::Tensor idx = perm_.narrow(0, pos_, batch_);
    pos_ += batch_;
    return idx;
  }

 private:
  const int64_t size_, batch_;
  torch::Tensor perm_;
  int64_t pos_ = 0;
};

int Run() {
  if (FLAGS_microbatches < 1 || FLAGS_batch_per_vw < 1 || FLAGS_steps < 1 ||
      FLAGS_warmup_steps < 0 || FLAGS_threads < 1) {
    LOG(ERROR) << "--microbatches, --batch_per_vw, --steps and --threads must be >= 1, "
                  "--warmup_steps >= 0";
    return 2;
  }
  eps::JobSpec spec;
  spec.data_dir = FLAGS_data_dir;
  spec.train_data = FLAGS_train_data;
  spec.train_labels = FLAGS_train_labels;
  spec.data_format = FLAGS_data_format;
  spec.label_column = FLAGS_label_column;
  spec.train_limit = FLAGS_train_limit;
  spec.test_limit = -1;  // no test set
  auto train = eps::OpenDataset(eps::DataFilesOf(spec).train);
  if (!train.ok()) {
    LOG(ERROR) << train.status().ToString();
    return 2;
  }
  eps::Status st = eps::CheckModelInput(*train);
  if (st.ok() && train->size < FLAGS_batch_per_vw) {
    st = eps::InvalidArgument("the training set holds fewer than --batch_per_vw samples");
  }
  if (!st.ok()) {
    LOG(ERROR) << st.ToString();
    return 2;
  }

  auto device = eps::ParseDevice(FLAGS_device);
  if (device.ok()) st = eps::PrepareDevice(*device);
  if (!device.ok() || !st.ok()) {
    LOG(ERROR) << (device.ok() ? st : device.status()).ToString();
    return 2;
  }
  eps::SetCpuThreads(FLAGS_threads);
  torch::manual_seed(FLAGS_seed);
  auto model = eps::MakeModel(FLAGS_model);
  if (!model.ok()) {
    LOG(ERROR) << model.status().ToString();
    return 2;
  }
  (*model)->to(*device);
  (*model)->train();
  auto optimizer = MakeOptimizer(*model);
  if (!optimizer.ok()) {
    LOG(ERROR) << optimizer.status().ToString();
    return 2;
  }

  Batches batches(train->size, FLAGS_batch_per_vw);
  const double k = FLAGS_microbatches;
  float step_loss = 0;
  auto step = [&] {
    (*optimizer)->zero_grad();
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(*device));
    for (int m = 0; m < FLAGS_microbatches; ++m) {
      const torch::Tensor idx = batches.Next();
      const torch::Tensor x = eps::AsImages(eps::FeatureRows(*train, idx)).to(*device);
      const torch::Tensor y = eps::LabelRows(*train, idx).to(*device);
      torch::Tensor loss = torch::nn::functional::cross_entropy((*model)->forward(x), y) / k;
      loss.backward();
      loss_sum += loss.detach();
    }
    (*optimizer)->step();
    step_loss = loss_sum.item<float>();  // waits for the step on a GPU
  };

  for (int s = 0; s < FLAGS_warmup_steps; ++s) step();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < FLAGS_steps; ++s) step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double samples = static_cast<double>(FLAGS_steps) * FLAGS_microbatches * FLAGS_batch_per_vw;
  LOG(INFO) << "model " << FLAGS_model << " on " << FLAGS_device << ", " << FLAGS_threads
            << " thread(s), last step loss " << step_loss;
  std::printf("{\"program\":\"baseline\",\"samples_per_s\":%.1f,\"steps\":%d,\"seconds\":%.3f}\n",
              samples / seconds, FLAGS_steps, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  setenv("CUBLAS_WORKSPACE_CONFIG", eps::kCublasWorkspaceConfig,
         /*overwrite=*/1);  // as the worker does
  gflags::SetUsageMessage(
      "baseline [--model=cnn] [--microbatches=8] [--batch_per_vw=16] [--steps=300] [--threads=1] "
      "[--device=cpu]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (auto kernels = eps::UseCpuKernels(FLAGS_cpu_kernels, args); !kernels.ok()) {
    LOG(ERROR) << "--cpu_kernels: " << kernels.status().ToString();
    return 2;
  }
  try {
    return Run();
  } catch (const c10::Error& e) {
    LOG(ERROR) << "libtorch: " << e.what_without_backtrace();
  } catch (const std::exception& e) {
    LOG(ERROR) << e.what();
  }
  return 1;
}
