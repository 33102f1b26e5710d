#include "serve/request.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "data/criteo.h"

namespace eps {
namespace {

using json = nlohmann::json;

// Deeper than any sample a model here takes ({1, 28, 28} is three levels
// below "instances"): a body of nested brackets is refused while it is read.
constexpr int kMaxDepth = 16;

struct TooDeep {};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> WithoutLeadingOnes(const std::vector<int64_t>& shape) {
  size_t i = 0;
  while (i < shape.size() && shape[i] == 1) ++i;
  return std::vector<int64_t>(shape.begin() + static_cast<std::ptrdiff_t>(i), shape.end());
}

// The nested list's shape along its first elements (checked whole by Flatten).
std::vector<int64_t> ShapeOf(const json& j) {
  std::vector<int64_t> shape;
  const json* cur = &j;
  while (cur->is_array()) {
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  return shape;
}

// Appends the numbers of `j`, a list of `shape` from dimension `dim` on;
// false (and `why`) for a ragged list or an element that is not a finite
// float32.
bool FlattenFloats(const json& j, const std::vector<int64_t>& shape, size_t dim,
                   std::vector<float>* out, std::string* why) {
  if (dim == shape.size()) {
    if (!j.is_number()) {
      *why = "holds " + std::string(j.type_name()) + " where a number belongs";
      return false;
    }
    const float v = static_cast<float>(j.get<double>());
    if (!std::isfinite(v)) {
      *why = "holds " + j.dump() + ", which is no finite float32";
      return false;
    }
    out->push_back(v);
    return true;
  }
  if (!j.is_array() || static_cast<int64_t>(j.size()) != shape[dim]) {
    *why = "is a ragged list (its first elements make it " + ShapeString(shape) + ")";
    return false;
  }
  for (const json& e : j)
    if (!FlattenFloats(e, shape, dim + 1, out, why)) return false;
  return true;
}

Status ParseFloatInstance(const json& j, const ModelInput& input, const std::string& name,
                          std::vector<float>* out) {
  const std::vector<int64_t> shape = ShapeOf(j);
  const int64_t elems = input.SampleElems();
  const bool fits = WithoutLeadingOnes(shape) == WithoutLeadingOnes(input.sample_shape) ||
                    shape == std::vector<int64_t>{elems};
  if (!fits) {
    return InvalidArgument(name + " is of shape " + ShapeString(shape) + "; the model takes " +
                           input.ShapeText() + " (or without its leading 1s, or " +
                           std::to_string(elems) + " numbers in one list)");
  }
  std::string why;
  if (!FlattenFloats(j, shape, 0, out, &why)) return InvalidArgument(name + " " + why);
  return OkStatus();
}

Status ParseIdsInstance(const json& j, const ModelInput& input, const std::string& name,
                        std::vector<int64_t>* out) {
  const int64_t elems = input.SampleElems();
  if (j.is_string()) {
    const size_t at = out->size();
    if (input.criteo_buckets.has_value()) {
      out->resize(at + kCriteoFeatures);
      const Status st = ParseCriteoFeatures(j.get_ref<const std::string&>(), *input.criteo_buckets,
                                            out->data() + at);
      if (!st.ok()) return InvalidArgument(name + ", a Criteo sample, " + st.message());
      return OkStatus();
    }
    if (input.vocab == nullptr)
      return InvalidArgument(name + " is a text, but the model has no vocabulary (--vocab)");
    out->resize(at + static_cast<size_t>(elems));
    input.vocab->Encode(j.get<std::string>(), out->data() + at);
    return OkStatus();
  }
  if (!j.is_array() || static_cast<int64_t>(j.size()) != elems) {
    return InvalidArgument(name + " is neither a text nor a list of " + std::to_string(elems) +
                           " token ids");
  }
  for (const json& e : j) {
    if (!e.is_number_integer())
      return InvalidArgument(name + " holds a token id that is no integer");
    const int64_t id = e.get<int64_t>();
    if (id < input.min_id || (input.max_id > 0 && id >= input.max_id)) {
      return InvalidArgument(name + " holds the id " + std::to_string(id) + ", outside [" +
                             std::to_string(input.min_id) + ", " +
                             (input.max_id > 0 ? std::to_string(input.max_id) : "") + ")");
    }
    out->push_back(id);
  }
  return OkStatus();
}

void AppendFloat(std::string* s, float v) {
  if (!std::isfinite(v)) {
    *s += "null";
    return;
  }
  char cell[32];
  std::snprintf(cell, sizeof cell, "%.9g", static_cast<double>(v));
  *s += cell;
}

// `v` as a nested list of `shape` from dimension `dim` on.
const float* AppendNested(std::string* s, const float* v, const std::vector<int64_t>& shape,
                          size_t dim) {
  if (dim == shape.size()) {
    AppendFloat(s, *v);
    return v + 1;
  }
  *s += '[';
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i > 0) *s += ", ";
    v = AppendNested(s, v, shape, dim + 1);
  }
  *s += ']';
  return v;
}

}  // namespace

int64_t ModelInput::SampleElems() const {
  int64_t n = 1;
  for (int64_t d : sample_shape) n *= d;
  return n;
}

std::string ModelInput::ShapeText() const { return ShapeString(sample_shape); }

void Instances::Append(const Instances& other) {
  count += other.count;
  floats.insert(floats.end(), other.floats.begin(), other.floats.end());
  ids.insert(ids.end(), other.ids.begin(), other.ids.end());
}

StatusOr<Instances> ParsePredictRequest(std::string_view body, const ModelInput& input,
                                        int64_t max_instances) {
  json j;
  try {
    j = json::parse(body.begin(), body.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const json::parse_error& e) {
    return InvalidArgument(std::string("the body is not JSON: ") + e.what());
  } catch (const TooDeep&) {
    return InvalidArgument("the body nests lists deeper than " + std::to_string(kMaxDepth) +
                           " levels");
  }
  if (!j.is_object()) return InvalidArgument("the body is not a JSON object");
  auto it = j.find("instances");
  if (it == j.end()) {
    return InvalidArgument(j.contains("inputs")
                               ? "the columnar \"inputs\" form is not served: send \"instances\""
                               : "the body has no \"instances\"");
  }
  if (!it->is_array()) return InvalidArgument("\"instances\" is not a list");
  const json& list = *it;
  if (list.empty()) return InvalidArgument("\"instances\" is empty");
  if (static_cast<int64_t>(list.size()) > max_instances) {
    return InvalidArgument("\"instances\" holds " + std::to_string(list.size()) +
                           " instances, more than the " + std::to_string(max_instances) +
                           " a request may (--max_instances)");
  }
  Instances out;
  out.count = static_cast<int64_t>(list.size());
  const size_t elems = static_cast<size_t>(input.SampleElems());
  if (input.dtype == DataType::kInt64) {
    out.ids.reserve(list.size() * elems);
  } else {
    out.floats.reserve(list.size() * elems);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "instance " + std::to_string(i);
    EPS_RETURN_IF_ERROR(input.dtype == DataType::kInt64
                            ? ParseIdsInstance(list[i], input, name, &out.ids)
                            : ParseFloatInstance(list[i], input, name, &out.floats));
  }
  return out;
}

int64_t BatchOutputs::RowElems() const {
  int64_t n = 1;
  for (int64_t d : row_shape) n *= d;
  return n;
}

std::string FormatPredictions(const BatchOutputs& outputs, int64_t first, int64_t count,
                              const std::vector<std::string>* labels) {
  const int64_t width = outputs.RowElems();
  const bool classifier = !outputs.probabilities.empty();
  std::string s = "{\"predictions\": [";
  s.reserve(static_cast<size_t>(count * (width * 16 + 48)));
  for (int64_t r = first; r < first + count; ++r) {
    if (r > first) s += ", ";
    const float* raw = outputs.values.data() + r * width;
    if (!classifier) {
      AppendNested(&s, raw, outputs.row_shape, 0);
      continue;
    }
    // The class is the output's arg-max, as `elasticps predict` and the
    // evaluation count it.
    int64_t best = 0;
    for (int64_t c = 1; c < width; ++c) best = raw[c] > raw[best] ? c : best;
    s += "{\"class\": " + std::to_string(best);
    if (labels != nullptr && static_cast<int64_t>(labels->size()) == width)
      s += ", \"label\": " + json((*labels)[static_cast<size_t>(best)]).dump();
    s += ", \"probabilities\": [";
    const float* p = outputs.probabilities.data() + r * width;
    for (int64_t c = 0; c < width; ++c) {
      if (c > 0) s += ", ";
      AppendFloat(&s, p[c]);
    }
    s += "]}";
  }
  s += "]}";
  return s;
}

std::string ErrorBody(const std::string& message) {
  return "{\"error\": " + json(message).dump(-1, ' ', false, json::error_handler_t::replace) + "}";
}

}  // namespace eps
