#include "models/torch_status.h"

#include <new>

namespace eps {

std::string ShapeOf(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

std::string WhatOf(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

Status FromTorch(const char* what, const std::exception& e) {
  if (const auto* oom = dynamic_cast<const c10::OutOfMemoryError*>(&e)) {
    return ResourceExhausted(std::string(what) +
                             ": out of device memory: " + oom->what_without_backtrace());
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return ResourceExhausted(std::string(what) + ": out of memory");
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return Internal(std::string(what) + ": libtorch: " + c10->what_without_backtrace());
  }
  return Internal(std::string(what) + ": " + e.what());
}

}  // namespace eps
