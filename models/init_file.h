// An --init_from file's tensors (docs/models.md, "Transfer learning"), read
// from its bytes: a model.safetensors (common/tensor_file.h), a model.pt (what
// torch.save(state_dict) and export_model write: a dict name -> tensor) or a
// model.script.pt (a TorchScript module's named parameters, then buffers).
// The API is torch-free; the implementation (init_file.cc) is libtorch's, in
// eps_torch_model. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_file.h"

namespace eps {

// The tensors of `bytes`, in the file's order (float32 and int64 only).
// InvalidArgument, naming `what`, for bytes of none of the three kinds, a
// dict that is not name -> tensor, and tensors of another dtype.
[[nodiscard]] StatusOr<std::vector<ExportedTensor>> ParseInitFile(const std::string& bytes,
                                                                  const std::string& what);

// A state dict as torch.save / export_model write it (a dict name -> tensor):
// InvalidArgument naming `what` otherwise.
[[nodiscard]] StatusOr<std::vector<ExportedTensor>> ParseStateDict(const std::string& bytes,
                                                                   const std::string& what);

}  // namespace eps
