#include "common/transfer.h"

#include <algorithm>
#include <unordered_map>

namespace eps {

StatusOr<TensorSelection> TensorSelection::Compile(const std::string& pattern,
                                                   const std::string& flag) {
  TensorSelection s;
  if (pattern.empty()) return s;
  try {
    s.regex_ = std::make_shared<const std::regex>(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgument(flag + " '" + pattern + "' is not a valid regex: " + e.what());
  }
  return s;
}

bool TensorSelection::Matches(const std::string& name) const {
  return regex_ != nullptr && std::regex_search(name, *regex_);
}

const char* InitActionName(InitDecision::Action a) {
  switch (a) {
    case InitDecision::Action::kLoad: return "load";
    case InitDecision::Action::kMissing: return "missing";
    case InitDecision::Action::kShape: return "shape";
    case InitDecision::Action::kDType: return "dtype";
    case InitDecision::Action::kReinit: return "reinit";
  }
  return "?";
}

std::vector<InitDecision> MatchInit(const std::vector<TensorSpec>& model,
                                    const std::vector<TensorSpec>& file,
                                    const TensorSelection& reinit) {
  std::unordered_map<std::string, size_t> by_name;
  for (size_t j = 0; j < file.size(); ++j) by_name.emplace(file[j].name, j);
  std::vector<InitDecision> out;
  out.reserve(model.size());
  for (size_t i = 0; i < model.size(); ++i) {
    InitDecision d;
    d.model_index = i;
    auto it = by_name.find(model[i].name);
    if (it == by_name.end()) {
      d.action = InitDecision::Action::kMissing;
    } else {
      d.file_index = it->second;
      const TensorSpec& f = file[it->second];
      if (f.shape != model[i].shape) {
        d.action = InitDecision::Action::kShape;
      } else if (f.dtype != model[i].dtype) {
        d.action = InitDecision::Action::kDType;
      } else if (reinit.Matches(model[i].name)) {
        d.action = InitDecision::Action::kReinit;
      } else {
        d.action = InitDecision::Action::kLoad;
      }
    }
    out.push_back(d);
  }
  return out;
}

size_t LoadedCount(const std::vector<InitDecision>& decisions) {
  size_t n = 0;
  for (const InitDecision& d : decisions) n += d.action == InitDecision::Action::kLoad;
  return n;
}

InitReport ReportInit(const std::vector<InitDecision>& decisions,
                      const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& file) {
  InitReport r;
  std::vector<char> taken(file.size(), 0);
  for (const InitDecision& d : decisions) {
    const std::string& name = model[d.model_index].name;
    switch (d.action) {
      case InitDecision::Action::kLoad:
        r.loaded.push_back(name);
        taken[d.file_index] = 1;
        break;
      case InitDecision::Action::kReinit:
        r.reinit.push_back(name);
        taken[d.file_index] = 1;
        break;
      default:
        r.skipped.emplace_back(name, InitActionName(d.action));
    }
  }
  for (size_t j = 0; j < file.size(); ++j) {
    if (!taken[j]) r.unused.push_back(file[j].name);
  }
  return r;
}

namespace {

// "a, b, c, ..." of the first names of `tensors`.
std::string SomeNames(const std::vector<TensorSpec>& tensors, bool parameters_only) {
  std::string names;
  size_t shown = 0;
  for (const TensorSpec& t : tensors) {
    if (parameters_only && t.kind != TensorKind::kParameter) continue;
    if (shown++ == 6) return names + ", ...";
    names += (names.empty() ? "" : ", ") + t.name;
  }
  return names;
}

}  // namespace

Status CheckInitMatches(const std::vector<InitDecision>& decisions,
                        const std::vector<TensorSpec>& model, const std::vector<TensorSpec>& file,
                        bool allow_mismatch, const std::string& what) {
  if (allow_mismatch || LoadedCount(decisions) > 0) return OkStatus();
  return InvalidArgument(what + ": none of its " + std::to_string(file.size()) + " tensors (" +
                         SomeNames(file, false) +
                         ") matches a tensor of the model by name, shape and dtype (" +
                         SomeNames(model, false) +
                         "): a model of another architecture? --init_allow_mismatch starts anyway");
}

std::vector<char> FrozenTensors(const std::vector<TensorSpec>& tensors,
                                const TensorSelection& freeze) {
  std::vector<char> out(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i)
    out[i] = tensors[i].kind == TensorKind::kParameter && freeze.Matches(tensors[i].name);
  return out;
}

Status CheckFreeze(const std::string& freeze, const std::vector<TensorSpec>& tensors) {
  EPS_ASSIGN_OR_RETURN(TensorSelection s, TensorSelection::Compile(freeze, "--freeze"));
  if (s.empty()) return OkStatus();
  const std::vector<char> frozen = FrozenTensors(tensors, s);
  if (std::find(frozen.begin(), frozen.end(), 1) != frozen.end()) return OkStatus();
  return InvalidArgument("--freeze '" + freeze + "' selects no parameter of the model (" +
                         SomeNames(tensors, true) +
                         "); the regex is searched in each name, e.g. '^conv' or 'weight$'");
}

}  // namespace eps
