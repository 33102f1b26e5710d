// Transfer learning's tensor matching (docs/models.md, "Transfer learning"):
// which tensors of a model an --init_from file initializes, and the regex
// selections --reinit and --freeze name. Torch-free pure functions, shared by
// the worker, the shards and the coordinator so every side derives the same
// sets from the job spec. Thread-compatible.
#pragma once

#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace eps {

// A set of tensors named by a regex (std::regex, ECMAScript grammar, searched:
// "^conv" matches names that start with "conv", "bias" any name holding it).
// An empty pattern selects nothing.
class TensorSelection {
 public:
  TensorSelection() = default;
  // InvalidArgument naming `flag` when `pattern` is not a valid regex.
  static StatusOr<TensorSelection> Compile(const std::string& pattern, const std::string& flag);
  bool empty() const { return regex_ == nullptr; }
  bool Matches(const std::string& name) const;

 private:
  std::shared_ptr<const std::regex> regex_;
};

// What MatchInit decided for one tensor of the model.
struct InitDecision {
  enum class Action { kLoad, kMissing, kShape, kDType, kReinit };
  size_t model_index = 0;  // into the model's tensors
  size_t file_index = 0;   // into the file's tensors (kLoad, kShape, kDType, kReinit)
  Action action = Action::kMissing;
};

// "load", "missing", "shape", "dtype", "reinit".
const char* InitActionName(InitDecision::Action a);

// One decision per model tensor, in model order: kLoad when the file holds a
// tensor of the same name, shape and dtype and `reinit` does not select it;
// kReinit when it would load but `reinit` selects it; kMissing, kShape or
// kDType otherwise. Only names are compared, never kinds (a file does not say
// which tensors are buffers).
std::vector<InitDecision> MatchInit(const std::vector<TensorSpec>& model,
                                    const std::vector<TensorSpec>& file,
                                    const TensorSelection& reinit);

// How many decisions load.
size_t LoadedCount(const std::vector<InitDecision>& decisions);

// What starting from an --init_from file did to a model, by tensor name: for
// the worker's report (docs/events.md) and its log.
struct InitReport {
  std::vector<std::string> loaded;  // the file's values
  std::vector<std::string> reinit;  // would load, but --reinit starts them afresh
  std::vector<std::pair<std::string, std::string>> skipped;  // (name, "missing" | "shape" | "dtype")
  std::vector<std::string> unused;  // the file's tensors no model tensor took
};

// The report of `decisions` (MatchInit's over `model` and `file`).
InitReport ReportInit(const std::vector<InitDecision>& decisions,
                      const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& file);

// OK when `decisions` load at least one tensor, or `allow_mismatch`; else
// InvalidArgument naming the file (`what`) and a few tensors of each side:
// an --init_from of another architecture.
Status CheckInitMatches(const std::vector<InitDecision>& decisions,
                        const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& file,
                        bool allow_mismatch, const std::string& what);

// By tensor of `tensors`: 1 for a parameter `freeze` selects (--freeze: never
// given a gradient, pushed, reduced or stepped), 0 for the rest. Buffers and
// the loss are never frozen.
std::vector<char> FrozenTensors(const std::vector<TensorSpec>& tensors,
                                const TensorSelection& freeze);

// The job's --freeze against its model's tensors: InvalidArgument when the
// pattern is not a regex, or when it selects no parameter (almost always a
// typo), naming a few of the parameters it could have meant. OK for an empty
// pattern.
Status CheckFreeze(const std::string& freeze, const std::vector<TensorSpec>& tensors);

}  // namespace eps
