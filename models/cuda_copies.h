// The side stream of a runner on a GPU (models/model_runner.cc). Only for
// builds against a CUDA libtorch (EPS_WITH_CUDA).
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

namespace eps {

// The side stream of a runner on a GPU, and what is in flight on it.
struct CudaCopies {
  explicit CudaCopies(c10::DeviceIndex device)
      : compute(c10::cuda::getCurrentCUDAStream(device)),
        side(c10::cuda::getStreamFromPool(false, device)) {}

  // Host byte ranges an upload on `side` may still read, by tensor: a Write
  // into one of them first waits for the side stream.
  struct Range {
    size_t tensor, lo, hi;
  };

  bool UploadOverlaps(size_t tensor, size_t lo, size_t hi) const {
    for (const Range& r : uploads) {
      if (r.tensor == tensor && r.lo < hi && lo < r.hi) return true;
    }
    return false;
  }

  // The compute stream waits for every upload started so far.
  void ComputeAfterUploads() {
    if (uploads.empty()) return;
    uploaded.record(side);
    uploaded.block(compute);
  }

  // Blocks until the side stream is idle; its host ranges are free again.
  void Drain() {
    side.synchronize();
    uploads.clear();
  }

  c10::cuda::CUDAStream compute;  // where the model runs (the device's current stream)
  c10::cuda::CUDAStream side;     // host <-> device copies
  at::cuda::CUDAEvent uploaded, computed;
  std::vector<Range> uploads;
};

}  // namespace eps
