#include "common/transfer.h"

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

}  // namespace eps
