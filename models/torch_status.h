// libtorch's exceptions as Status, for models/'s libtorch translation units
// (it includes torch).
#pragma once

#include <torch/torch.h>

#include <exception>
#include <string>

#include "common/status.h"

namespace eps {

// `e`'s message, without libtorch's C++ backtrace.
std::string WhatOf(const std::exception& e);
// "[2, 3]".
std::string ShapeOf(const torch::Tensor& t);
// `e` from a libtorch call in `what`: ResourceExhausted for out of (device)
// memory, the host's limit rather than a bug (a worker leaves with a host
// fault); Internal otherwise.
Status FromTorch(const char* what, const std::exception& e);

}  // namespace eps
