#include "models/init_file.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "models/net.h"
#include "models/torch_status.h"

namespace eps {
namespace {

StatusOr<ExportedTensor> Exported(const std::string& name, const torch::Tensor& value,
                                  const std::string& what) {
  const torch::Tensor t = value.detach().to(torch::kCPU).contiguous();
  ExportedTensor e;
  e.spec.name = name;
  if (t.scalar_type() == torch::kFloat32) {
    e.spec.dtype = DType::kFloat32;
  } else if (t.scalar_type() == torch::kInt64) {
    e.spec.dtype = DType::kInt64;
  } else {
    return InvalidArgument(what + ": tensor '" + name + "' is neither float32 nor int64");
  }
  e.spec.kind = TensorKind::kParameter;  // as ParseSafetensors: the file does not say
  e.spec.shape.assign(t.sizes().begin(), t.sizes().end());
  e.bytes.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return e;
}

bool IsZip(const std::string& bytes) { return bytes.rfind("PK\x03\x04", 0) == 0; }

}  // namespace

StatusOr<std::vector<ExportedTensor>> ParseStateDict(const std::string& bytes,
                                                     const std::string& what) {
  std::vector<ExportedTensor> out;
  try {
    const torch::IValue v = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
    if (!v.isGenericDict()) return InvalidArgument(what + ": not a state dict");
    for (const auto& item : v.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor())
        return InvalidArgument(what + ": not a dict of name -> tensor");
      EPS_ASSIGN_OR_RETURN(ExportedTensor e,
                           Exported(item.key().toStringRef(), item.value().toTensor(), what));
      out.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(what + ": not a state dict torch.load reads (" + WhatOf(e) + ")");
  }
  return out;
}

StatusOr<std::vector<ExportedTensor>> ParseInitFile(const std::string& bytes,
                                                    const std::string& what) {
  if (LooksLikeSafetensors(bytes)) {
    auto parsed = ParseSafetensors(bytes, what, nullptr);
    if (!parsed.ok()) return InvalidArgument(parsed.status().message());
    return parsed;
  }
  if (!IsZip(bytes)) {
    return InvalidArgument(what + " is neither a safetensors file nor a torch zip archive");
  }
  auto dict = ParseStateDict(bytes, what);
  if (dict.ok()) return dict;
  // Not a state dict: a TorchScript module's own tensors, then.
  auto net = LoadScriptNet(bytes);
  if (!net.ok()) {
    return InvalidArgument(what + " is neither a state dict nor a TorchScript module (" +
                           dict.status().message() + "; " + net.status().message() + ")");
  }
  std::vector<ExportedTensor> out;
  try {
    for (const NamedTensors& group : {(*net)->NamedParameters(), (*net)->NamedBuffers()}) {
      for (const auto& [name, value] : group) {
        EPS_ASSIGN_OR_RETURN(ExportedTensor e, Exported(name, value, what));
        out.push_back(std::move(e));
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(what + ": " + WhatOf(e));
  }
  return out;
}

}  // namespace eps
