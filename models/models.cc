#include "models/models.h"

#include <dlfcn.h>

#include <exception>
#include <mutex>

#include "models/dlrm.h"
#include "models/resnet.h"
#include "models/text_models.h"

#ifdef EPS_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace eps {

StatusOr<torch::nn::Sequential> MakeModel(const std::string& name, const ZooSizes& sizes,
                                          const TableWeight& table) {
  namespace nn = torch::nn;
  try {
    if (IsTextModel(name)) return MakeTextModel(name, sizes, table);
    if (name == "resnet") return MakeResnet(sizes);
    if (name == "dlrm") return MakeDlrm(sizes, table);
    if (name == "mlp") {
      return nn::Sequential({{"flatten", nn::Flatten()},
                             {"fc1", nn::Linear(kImageSide * kImageSide, 128)},
                             {"relu1", nn::ReLU()},
                             {"fc2", nn::Linear(128, kNumClasses)}});
    }
    if (name == "cnn") {
      return nn::Sequential({{"conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2))},
                             {"relu1", nn::ReLU()},
                             {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                             {"conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2))},
                             {"relu2", nn::ReLU()},
                             {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                             {"flatten", nn::Flatten()},
                             {"fc1", nn::Linear(32 * 7 * 7, 256)},
                             {"relu3", nn::ReLU()},
                             {"dropout", nn::Dropout(nn::DropoutOptions(0.25))},
                             {"fc2", nn::Linear(256, kNumClasses)}});
    }
    if (name == "cnn_bn") {
      return nn::Sequential({{"conv1", nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2))},
                             {"bn1", nn::BatchNorm2d(16)},
                             {"relu1", nn::ReLU()},
                             {"pool1", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                             {"conv2", nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2))},
                             {"bn2", nn::BatchNorm2d(32)},
                             {"relu2", nn::ReLU()},
                             {"pool2", nn::MaxPool2d(nn::MaxPool2dOptions(2))},
                             {"flatten", nn::Flatten()},
                             {"fc1", nn::Linear(32 * 7 * 7, 256)},
                             {"relu3", nn::ReLU()},
                             {"fc2", nn::Linear(256, kNumClasses)}});
    }
  } catch (const c10::OutOfMemoryError& e) {
    return ResourceExhausted("MakeModel(" + name +
                             "): out of memory: " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("MakeModel(" + name + "): out of memory");
  } catch (const c10::Error& e) {
    return Internal("MakeModel(" + name + "): libtorch: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal("MakeModel(" + name + "): " + e.what());
  }
  return InvalidArgument("unknown model '" + name +
                         "' (expected mlp, cnn, cnn_bn, resnet, text_transformer, text_hashed or dlrm)");
}

std::vector<std::pair<std::string, torch::Tensor>> ZooTableIds(const std::string& name,
                                                               const torch::Tensor& x) {
  if (name == "dlrm") return {{"dlrm.emb.weight", DlrmTableIds(x)}};
  if (name == "text_hashed") return {{"text.bag.weight", x}};
  if (name == "text_transformer") return {{"text.tok.weight", x}};
  return {};
}

torch::Tensor ZooWithTableIds(const std::string& name, const torch::Tensor& x,
                              const std::vector<std::pair<std::string, torch::Tensor>>& ids) {
  if (ids.empty()) return x;
  if (name == "dlrm") {
    torch::Tensor out = x.clone();
    DlrmTableIds(out).copy_(ids[0].second);
    return out;
  }
  return ids[0].second;  // the text models: the input is the table's ids
}

StatusOr<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) != 0)
    return InvalidArgument("device '" + name + "': expected cpu or cuda:N");
  int index = 0;
  if (name.size() > 4) {
    const std::string digits = name.substr(5);
    if (name[4] != ':' || digits.empty() || digits.size() > 2 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("device '" + name + "': expected cpu or cuda:N");
    }
    index = std::stoi(digits);
  }
#ifdef EPS_WITH_CUDA
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
  return InvalidArgument(
      "device '" + name +
      "': this build has no CUDA (its worker was compiled against a CPU-only libtorch); "
      "use --device=cpu, or build against a CUDA libtorch (README, \"GPU workers\")");
#endif
}

Status PrepareDevice(const torch::Device& device) {
  if (!device.is_cuda()) return OkStatus();
#ifdef EPS_WITH_CUDA
  try {
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    if (device.index() >= count) {
      return FailedPrecondition("device " + device.str() + ": this process sees " +
                                std::to_string(count) + " CUDA device(s)");
    }
    c10::cuda::set_device(device.index());
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    return OkStatus();
  } catch (const c10::Error& e) {
    return Internal("PrepareDevice(" + device.str() + "): libtorch: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal("PrepareDevice(" + device.str() + "): " + e.what());
  }
#else
  return InvalidArgument("device " + device.str() + ": this build has no CUDA");
#endif
}

void SetCpuThreads(int threads) {
  at::set_num_threads(threads);
  static std::once_flag interop_once;
  std::call_once(interop_once, [] {
    try {
      at::set_num_interop_threads(1);
    } catch (const c10::Error&) {
      // Already fixed by someone else in this process: nothing depends on it.
    }
  });
  // Looked up, not linked: present only when the BLAS behind libtorch is OpenBLAS.
  using SetBlasThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(threads);
}

namespace {

torch::ScalarType TorchType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return torch::kFloat32;
    case DataType::kUInt8:
      return torch::kUInt8;
    case DataType::kInt64:
      return torch::kInt64;
  }
  return torch::kFloat32;
}

// The whole array as a tensor [size, shape...] over the data set's memory (read only).
torch::Tensor Whole(const Dataset& data, const void* p, DataType t, const std::vector<int64_t>& shape) {
  std::vector<int64_t> sizes{data.size};
  sizes.insert(sizes.end(), shape.begin(), shape.end());
  return torch::from_blob(const_cast<void*>(p), sizes, TorchType(t));
}

}  // namespace

torch::Tensor FeatureRows(const Dataset& data, const torch::Tensor& idx) {
  return Whole(data, data.features, data.feature_dtype, data.sample_shape).index_select(0, idx);
}

torch::Tensor FeatureRange(const Dataset& data, int64_t first, int64_t n) {
  return Whole(data, data.features, data.feature_dtype, data.sample_shape)
      .narrow(0, first, n)
      .clone();
}

torch::Tensor LabelRows(const Dataset& data, const torch::Tensor& idx) {
  return Whole(data, data.labels, data.label_dtype, data.label_shape).index_select(0, idx);
}

torch::Tensor LabelRange(const Dataset& data, int64_t first, int64_t n) {
  return Whole(data, data.labels, data.label_dtype, data.label_shape).narrow(0, first, n).clone();
}

torch::Tensor AsImages(const torch::Tensor& features) {
  return features.view({features.size(0), 1, kImageSide, kImageSide});
}

}  // namespace eps
