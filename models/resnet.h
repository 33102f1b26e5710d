// The zoo's ResNet (libtorch): built by MakeModel (models/models.h) for
// "resnet". Include only from files that already need torch.
#pragma once

#include <torch/torch.h>

#include "common/status.h"
#include "data/model_input.h"

namespace eps {

// resnet: the CIFAR ResNet of He et al. (2016, section 4.2) for 28x28 images:
// Conv3x3(1->16) BN ReLU, three stages of n BasicBlocks (16, 32, 64 channels;
// the first block of stages 2 and 3 has stride 2 and a 1x1 conv + BN
// projection shortcut), global average pooling, Linear(64, 10); depth 6n+2
// (sizes.depth: 20, 32, 44, 56, ...; CheckZooSizes, data/model_input.h).
// Convolutions are initialized as torchvision's ResNets are (Kaiming normal,
// fan_out, ReLU), BatchNorm to 1 and 0, from the default CPU generator. Tensors
// read "conv1.weight", "stage2.0.shortcut.0.weight", "fc.weight".
// InvalidArgument for a depth that is not 6n+2.
[[nodiscard]] StatusOr<torch::nn::Sequential> MakeResnet(const ZooSizes& sizes);

}  // namespace eps
