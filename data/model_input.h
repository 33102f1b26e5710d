// What the built-in models (mlp, cnn, cnn_bn: models/models.h) take, checked
// without libtorch, so that the coordinator refuses a data set they cannot
// train on at start and a worker before its first step.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "data/dataset.h"

namespace eps {

// Every built-in model takes [b, 1, 28, 28] float32 images and has 10 classes.
constexpr int64_t kImageSide = 28;
constexpr int64_t kNumClasses = 10;

// True for "mlp", "cnn", "cnn_bn", "resnet" and "text_transformer".
bool IsBuiltinModel(const std::string& model);
// True for the built-in models that take token ids ("text_transformer",
// "text_hashed").
bool IsTextModel(const std::string& model);
// True for the built-in models whose samples are int64 ids as the data gives
// them (the text models, and "dlrm": a Criteo sample, data/criteo.h), not images.
bool TakesIds(const std::string& model);
// True for the built-in models whose ids are always hashed ("dlrm",
// "text_hashed"): their table has --hash_buckets rows, and 0 makes it a table
// of unbounded keys (63-bit keys). The others take --hash_buckets 0 as none.
bool HashesItsIds(const std::string& model);

// The sizes of the zoo's sized models, from the job spec's fields of the same
// names (schema/messages.h); a model reads the ones it has and ignores the rest.
struct ZooSizes {
  uint32_t dim = 64;      // model_dim
  uint32_t layers = 2;    // model_layers
  uint32_t heads = 4;     // model_heads
  uint32_t depth = 20;    // model_depth
  uint32_t seq_len = 128;
  uint32_t vocab_size = 8000;  // the token table's rows: --vocab_size, or --hash_buckets when set
  uint32_t num_classes = 10;  // text models: the vocabulary's label count (data/text.h)
};

// The sizes (but num_classes) as an export's metadata holds them, by flag
// name (model_dim, model_layers, model_heads, model_depth, seq_len,
// vocab_size), decimal; and back from such metadata: an absent key keeps the
// default, one that is not a positive 32-bit number (vocab_size may be 0: a
// table of unbounded keys) is InvalidArgument naming it. So eps_predict rebuilds a sized zoo model
// from its model.safetensors.
std::map<std::string, std::string> ZooSizesMetadata(const ZooSizes& sizes);
[[nodiscard]] StatusOr<ZooSizes> ZooSizesFromMetadata(
    const std::map<std::string, std::string>& metadata);

// OK if the sized model `model` can have `sizes` (resnet: depth 6n+2, n >= 1);
// InvalidArgument naming the flag otherwise. The coordinator checks it at start.
[[nodiscard]] Status CheckZooSizes(const std::string& model, const ZooSizes& sizes);

// OK if the built-in models can train on `data`: float32 samples of
// [1, 28, 28], [28, 28] or [784] (a CSV row of pixels), one int64 class per sample, below 10, and a data
// set whose pointers are set; InvalidArgument saying what differs.
[[nodiscard]] Status CheckModelInput(const Dataset& data);

// OK if the text models can train on `data`: int64 token ids of [seq_len]
// below vocab_size, one int64 class per sample below num_classes.
[[nodiscard]] Status CheckTextModelInput(const Dataset& data, const ZooSizes& sizes);

// OK if dlrm can train on `data`: Criteo samples (int64 [39], data/criteo.h)
// whose categories are rows below vocab_size (--hash_buckets), one int64 class
// per sample below 2.
[[nodiscard]] Status CheckCriteoModelInput(const Dataset& data, const ZooSizes& sizes);

// CheckTextModelInput for a text model, CheckCriteoModelInput for dlrm,
// CheckModelInput for the others.
[[nodiscard]] Status CheckModelInputFor(const std::string& model, const ZooSizes& sizes,
                                        const Dataset& data);

}  // namespace eps
