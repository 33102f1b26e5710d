// The zoo's text models (libtorch): built by MakeModel (models/models.h) for
// the names IsTextModel (data/model_input.h) knows. Include only from files
// that already need torch.
#pragma once

#include <torch/torch.h>

#include "common/status.h"
#include "data/model_input.h"
#include "models/models.h"  // TableWeight

namespace eps {

// text_transformer: token embedding (vocab_size, dim) + learned position
// embedding (seq_len, dim), `layers` TransformerEncoderLayers (dim, heads,
// feed-forward 4*dim, dropout 0.1, post-norm, ReLU) that ignore the <pad>
// positions (id 0: data/text.h), the mean of the non-padding positions, and
// Linear(dim, num_classes). Takes int64 token ids [b, seq_len]; one module
// "text" inside the Sequential, so tensors read "text.tok.weight",
// "text.layers.0.self_attn.in_proj_weight", "text.head.weight". The token
// embedding is built sparse=True: "text.tok.weight" is a sparse table
// (docs/design.md, "Sparse tables"; dense with --sparse_optimizer=exact);
// "text.pos.weight" is dense.
// text_hashed (fastText-style): EmbeddingBag(rows, dim, mean, sparse=True,
// padding <pad>) over a sample's hashed words and word bigrams
// (--hash_buckets: data/text.h), then Linear(dim, num_classes): "text.bag.weight"
// is a sparse table (docs/design.md, "Sparse tables"), "text.head.weight".
// InvalidArgument for sizes it cannot have (dim not a multiple of heads, a zero).
// The sparse tables' weights are `table`'s when set (MakeModel's TableWeight).
[[nodiscard]] StatusOr<torch::nn::Sequential> MakeTextModel(
    const std::string& name, const ZooSizes& sizes,
    const TableWeight& table = nullptr);

}  // namespace eps
