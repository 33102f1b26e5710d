// The model zoo: the image classifiers a job can name, and the tensor views of
// a Dataset (data/dataset.h) every model takes. One definition shared by the torch adapter
// (models/model_runner.h) and the single-process baseline (bench/baseline_main.cc),
// so both train exactly the same network.
//
// Unlike model_runner.h this header includes libtorch: include it only from
// files that already need torch. Every c10::Error is caught here and returned
// as a Status.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/model_input.h"

namespace eps {

// Every model takes [b, 1, 28, 28] float32 images and has 10 classes
// (kImageSide, kNumClasses and CheckModelInput: data/model_input.h).

// Builds model `name` with freshly initialized parameters, drawn from the
// default CPU generator in module order (seed it first with torch::manual_seed
// for reproducible weights). Layers are named, so tensors read "conv1.weight".
//   mlp     flatten, Linear(784, 128), ReLU, Linear(128, 10).
//   cnn     Conv(1->16, 5x5) ReLU MaxPool2, Conv(16->32, 5x5) ReLU MaxPool2,
//           Linear(1568, 256) ReLU Dropout(0.25), Linear(256, 10); ~0.42 M parameters.
//   cnn_bn  cnn with BatchNorm2d after each convolution and no dropout.
//   resnet  the CIFAR-style ResNet of --model_depth layers (models/resnet.h);
//           0.27 M parameters at depth 20.
//   text_transformer  a Transformer encoder over token ids (models/text_models.h).
// InvalidArgument for an unknown name; Internal if libtorch fails.
// `table`, when set, may give each sparse=True embedding (dlrm's,
// text_hashed's and text_transformer's) its weight [rows, dim], by the
// weight's tensor name, instead of a drawn one (an undefined tensor: drawn):
// the runner trains those as sparse tables, whose values it writes itself
// (their initial rows, or pulled ones), so nothing need be drawn for them
// (and the layers after them then draw other values than without).
using TableWeight =
    std::function<torch::Tensor(const std::string& name, int64_t rows, int64_t dim)>;
[[nodiscard]] StatusOr<torch::nn::Sequential> MakeModel(const std::string& name,
                                                        const ZooSizes& sizes = {},
                                                        const TableWeight& table = nullptr);

// The rows of each sparse=True embedding weight of zoo model `name` (by its
// tensor name) that forward reads for the batch `x` (its input): dlrm's 26
// categories, the text models' token ids. Empty for the models without one.
std::vector<std::pair<std::string, torch::Tensor>> ZooTableIds(const std::string& name,
                                                               const torch::Tensor& x);
// `x` with those ids replaced by `ids` (ZooTableIds's names and shapes; those it does not
// name stay): dlrm's categories written into a copy of x, the text models' ids as they are.
torch::Tensor ZooWithTableIds(const std::string& name, const torch::Tensor& x,
                              const std::vector<std::pair<std::string, torch::Tensor>>& ids);

// The device a --device flag names: "cpu", or "cuda:N" ("cuda" is "cuda:0")
// in a build against a CUDA libtorch (EPS_WITH_CUDA). InvalidArgument for
// anything else, with a message that says so when it is the build that lacks
// CUDA. Touches no device.
[[nodiscard]] StatusOr<torch::Device> ParseDevice(const std::string& name);

// Readies `device` for reproducible computation (docs/design.md, "The
// consistency contract": one GPU model, deterministic kernels): on a CUDA
// device, checks that it exists (FailedPrecondition otherwise), makes it
// current, and turns on deterministic algorithms and deterministic cuDNN with
// benchmark mode off. Process-wide; nothing happens for the CPU. The process
// must have set CUBLAS_WORKSPACE_CONFIG=:4096:8 (kCublasWorkspaceConfig in
// models/model_runner.h) before its first cuBLAS call: deterministic mode makes
// libtorch refuse a cuBLAS operation otherwise.
[[nodiscard]] Status PrepareDevice(const torch::Device& device);

// Fixes the CPU threads this process computes with: libtorch's intra-op
// threads, one inter-op thread (settable once per process; later calls keep
// it), and the pool of the BLAS library where it keeps its own: OpenBLAS built
// with pthreads (Debian's libopenblas0-pthread) ignores libtorch's setting and
// would run one spinning thread per core of the host, so a 1-thread worker
// used every core and several workers on one host fought over them. Part of
// the bits: every worker of a job computes with the same count.
void SetCpuThreads(int threads);

// The torch views of a Dataset, in the file's dtypes: features float32, uint8
// or int64, labels int64 or float32. Rows: the samples `idx` (int64 [b]), as
// a new tensor [b, sample_shape...] (labels [b, label_shape...]); Range:
// samples [first, first + n), copied too, so that nothing downstream can write
// into (or keep alive) the data set's read-only mapping. Indices must be in
// range (the caller checks). Throw c10::Error like any libtorch call.
torch::Tensor FeatureRows(const Dataset& data, const torch::Tensor& idx);
torch::Tensor FeatureRange(const Dataset& data, int64_t first, int64_t n);
torch::Tensor LabelRows(const Dataset& data, const torch::Tensor& idx);
torch::Tensor LabelRange(const Dataset& data, int64_t first, int64_t n);

// Features of the built-in models' input shape [b, 1, 28, 28] (a view).
torch::Tensor AsImages(const torch::Tensor& features);

}  // namespace eps
