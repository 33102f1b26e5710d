// The zoo's recommendation model (libtorch): built by MakeModel (models/models.h)
// for "dlrm". Include only from files that already need torch.
#pragma once

#include <torch/torch.h>

#include "common/status.h"
#include "data/model_input.h"
#include "models/models.h"  // TableWeight

namespace eps {

// dlrm (DLRM-style, Naumov et al. 2019, as in examples/criteo/dlrm.py): takes a
// Criteo sample as the Criteo reader gives it (data/criteo.h): int64 [39], the 13
// integer features, then the 26 categories already hashed into rows of one
// shared table of vocab_size (--hash_buckets) rows, or any int64 ids but the
// largest with vocab_size 0 (unbounded keys: the table's weight has 0 rows and
// the worker looks it up, models/lookup_tables.h). The integers, log(1 +
// max(x, 0)), go through a bottom MLP 13-64-dim (ReLU); the categories through
// Embedding(vocab_size, dim, sparse=True), "dlrm.emb.weight", a sparse table
// (docs/design.md, "Sparse tables"); the pairwise dot products of the 27
// vectors (dense and 26 embeddings: 351) with the dense vector go through a top
// MLP 64 (ReLU) to 2 classes (click or not). Tensors read "dlrm.bottom1.weight",
// "dlrm.emb.weight", "dlrm.top2.bias". InvalidArgument for sizes it cannot have.
// The table's weight is `table`'s when set (MakeModel's TableWeight).
[[nodiscard]] StatusOr<torch::nn::Sequential> MakeDlrm(
    const ZooSizes& sizes,
    const TableWeight& table = nullptr);

// The table's rows a batch `x` of dlrm's input reads: its 26 categories.
torch::Tensor DlrmTableIds(const torch::Tensor& x);

}  // namespace eps
