#include "models/torch_export.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "common/files.h"

namespace eps {
namespace {

torch::Tensor ToTorch(const ExportedTensor& t) {
  const auto dtype = t.spec.dtype == DType::kInt64 ? torch::kInt64 : torch::kFloat32;
  return torch::from_blob(const_cast<char*>(t.bytes.data()), t.spec.shape, dtype).clone();
}

Status TorchError(const std::string& what, const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e))
    return Internal(what + ": libtorch: " + c10->what_without_backtrace());
  return Internal(what + ": " + e.what());
}

}  // namespace

Status WriteStateDictPt(const std::string& path, const std::vector<ExportedTensor>& tensors) {
  try {
    c10::Dict<std::string, at::Tensor> dict;
    for (const ExportedTensor& t : tensors) dict.insert(t.spec.name, ToTorch(t));
    const std::vector<char> bytes = torch::jit::pickle_save(dict);
    return WriteFileAtomically(path, std::string(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    return TorchError("writing the state dict " + path, e);
  }
}

Status WriteScriptedModel(const std::string& path, const std::string& script,
                          const std::vector<ExportedTensor>& tensors) {
  torch::jit::Module module;
  try {
    std::istringstream in(script);
    module = torch::jit::load(in, torch::kCPU);
  } catch (const std::exception& e) {
    return InvalidArgument("the job's TorchScript model does not load: " +
                           TorchError("", e).message());
  }
  try {
    std::map<std::string, torch::Tensor> own;
    for (const auto& p : module.named_parameters()) own[p.name] = p.value;
    for (const auto& b : module.named_buffers()) own[b.name] = b.value;
    if (own.size() != tensors.size()) {
      return InvalidArgument("the TorchScript module has " + std::to_string(own.size()) +
                             " parameters and buffers, the trained model " +
                             std::to_string(tensors.size()));
    }
    torch::NoGradGuard no_grad;
    for (const ExportedTensor& t : tensors) {
      auto it = own.find(t.spec.name);
      if (it == own.end())
        return InvalidArgument("the TorchScript module has no tensor '" + t.spec.name + "'");
      const torch::Tensor trained = ToTorch(t);
      if (it->second.sizes() != trained.sizes() ||
          it->second.scalar_type() != trained.scalar_type()) {
        return InvalidArgument("tensor '" + t.spec.name +
                               "' of the TorchScript module differs in shape or dtype from the "
                               "trained one");
      }
      it->second.copy_(trained);
    }
    const std::string tmp = path + ".tmp";
    module.save(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      return Internal("cannot rename " + tmp + " to " + path);
    return OkStatus();
  } catch (const std::exception& e) {
    return TorchError("writing the scripted model " + path, e);
  }
}

}  // namespace eps
