// SoftmaxRows: the one libtorch call of eps_exported_model (models/exported_model.h).
#include <torch/script.h>

#include <cstring>

#include "models/exported_model.h"

namespace eps {

std::vector<float> SoftmaxRows(const float* logits, int64_t n, int64_t width) {
  std::vector<float> out(static_cast<size_t>(n * width));
  if (out.empty()) return out;
  // from_blob does not copy: the const_cast only lends the memory to a read.
  torch::Tensor values = torch::from_blob(const_cast<float*>(logits), {n, width}, torch::kFloat32);
  torch::Tensor p = torch::softmax(values, 1).contiguous();
  std::memcpy(out.data(), p.data_ptr<float>(), out.size() * sizeof(float));
  return out;
}

}  // namespace eps
