#include "data/model_input.h"

namespace eps {

bool IsBuiltinModel(const std::string& model) {
  return model == "mlp" || model == "cnn" || model == "cnn_bn";
}

Status CheckModelInput(const Dataset& data) {
  const std::vector<int64_t>& shape = data.sample_shape;
  const bool images = (shape.size() == 3 && shape[0] == 1 && shape[1] == kImageSide &&
                       shape[2] == kImageSide) ||
                      (shape.size() == 2 && shape[0] == kImageSide && shape[1] == kImageSide) ||
                      (shape.size() == 1 && shape[0] == kImageSide * kImageSide);  // CSV pixels
  auto dims = [&shape] {
    std::string s;
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
    return s.empty() ? std::string("scalar") : s;
  };
  if (!images) {
    return InvalidArgument("the built-in models (mlp, cnn, cnn_bn) take 28x28 samples (1x28x28, "
                           "28x28, or 784 values as in a CSV row), the data set's are " + dims());
  }
  if (data.feature_dtype != DataType::kFloat32) {
    return InvalidArgument(std::string("the built-in models take float32 samples, the data "
                                       "set's are ") + DataTypeName(data.feature_dtype));
  }
  if (data.label_dtype != DataType::kInt64 || !data.label_shape.empty()) {
    return InvalidArgument("the built-in models take one integer class per sample, the data "
                           "set's labels are " + std::string(DataTypeName(data.label_dtype)) +
                           (data.label_shape.empty() ? "" : " arrays"));
  }
  if (data.num_classes > kNumClasses) {
    return InvalidArgument("the built-in models have 10 classes, the data set's labels go up to " +
                           std::to_string(data.num_classes - 1));
  }
  if (data.size < 0 || (data.size > 0 && (data.features == nullptr || data.labels == nullptr))) {
    return InvalidArgument("inconsistent data set: size " + std::to_string(data.size) +
                           " without its features or labels");
  }
  return OkStatus();
}

}  // namespace eps
