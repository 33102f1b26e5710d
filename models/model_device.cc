// The devices and CPU kernels a runner computes with (models/model_runner.h).
#include <glog/logging.h>
#include <torch/torch.h>

#include <cctype>
#include <string>
#include <vector>

#ifdef EPS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include "models/model_runner.h"
#include "models/models.h"
#include "models/torch_status.h"

namespace eps {

bool BuildHasCuda() {
#ifdef EPS_WITH_CUDA
  return true;
#else
  return false;
#endif
}

CpuKernelsInEffect ReadCpuKernels() {
  CpuKernelsInEffect k = ReadBlasAndDnnKernels();
  // libtorch exports no getter of ATen's capability; its build summary states the one in use.
  try {
    const std::string config = at::show_config();
    const std::string key = "CPU capability usage: ";
    const size_t at = config.find(key);
    if (at != std::string::npos) {
      std::string v = config.substr(at + key.size());
      v = v.substr(0, v.find('\n'));
      for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      k.aten = v == "no avx" ? "default" : v;
    }
  } catch (const std::exception& e) {
    LOG(WARNING) << "libtorch's build summary: " << e.what();
  }
  return k;
}

StatusOr<std::string> UseCpuKernels(const std::string& name, const std::vector<std::string>& argv,
                                    bool apply) {
  EPS_ASSIGN_OR_RETURN(CpuKernelSet set, FindCpuKernelSet(name));
  std::string why_not;
  if (!apply) {
    why_not = "--testing_skip_cpu_kernels";
  } else if (Status st = ApplyCpuKernels(set, argv); !st.ok()) {
    if (st.code() != StatusCode::kFailedPrecondition) return st;  // exec failed
    why_not = st.message();
  }
  const CpuKernelsInEffect in_effect = ReadCpuKernels();
  std::string report = CpuKernelsReport(set, in_effect, why_not);
  if (report == set.name) {
    LOG(INFO) << "CPU kernels " << set.name << " (" << in_effect.Describe() << ")";
  } else {
    LOG(WARNING) << "CPU kernels: " << report;
  }
  return report;
}

StatusOr<std::string> DeviceKind(const std::string& device) {
  EPS_ASSIGN_OR_RETURN(torch::Device d, ParseDevice(device));
  if (!d.is_cuda()) return std::string("cpu");
#ifdef EPS_WITH_CUDA
  try {
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    if (d.index() >= count) {
      return FailedPrecondition("device '" + device + "': this process sees " +
                                std::to_string(count) + " CUDA device(s)");
    }
    return "cuda:" + std::string(at::cuda::getDeviceProperties(d.index())->name);
  } catch (const std::exception& e) {
    return FromTorch("DeviceKind", e);
  }
#else
  return Internal("ParseDevice accepted a CUDA device in a build without CUDA");
#endif
}

}  // namespace eps
