// Exports Python loads (docs/models.md, "Exports"): the trained model as
//   model.pt         what torch.save(module.state_dict()) writes: torch.load
//                    gives a dict name -> tensor (parameters, then buffers),
//                    which load_state_dict takes into the user's module;
//   model.script.pt  for a TorchScript job, the user's scripted module with
//                    the trained weights: torch.jit.load runs it as it is.
// Library eps_torch_export, used by export_model (tools/export_main.cc): the
// coordinator writes only model.safetensors (models/model_export.h) and stays
// torch-free. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "models/model_export.h"

namespace eps {

// Writes `path` atomically with torch::pickle_save of a dict name -> tensor in
// the order of `tensors`. Internal if libtorch fails.
[[nodiscard]] Status WriteStateDictPt(const std::string& path,
                                      const std::vector<ExportedTensor>& tensors);

// Loads `script` (torch.jit.save's bytes), sets every named parameter and
// buffer of the module from `tensors` (matched by name; every one must be
// there, of its shape and dtype: InvalidArgument otherwise) and saves the
// module to `path` (atomically). InvalidArgument for bytes libtorch cannot load.
[[nodiscard]] Status WriteScriptedModel(const std::string& path, const std::string& script,
                                        const std::vector<ExportedTensor>& tensors);

}  // namespace eps
