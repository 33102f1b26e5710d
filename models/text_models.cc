#include "models/text_models.h"

#include "data/text.h"

namespace eps {
namespace {

namespace nn = torch::nn;

class TextTransformerImpl : public nn::Module {
 public:
  TextTransformerImpl(const ZooSizes& s, const TableWeight& table) {
    const int64_t dim = s.dim;
    // sparse=True: a sparse table (each step moves only the rows its batch touched); the
    // position embedding, every row of which every step touches, stays dense.
    auto tok = nn::EmbeddingOptions(s.vocab_size, dim).sparse(true);
    if (table) tok._weight(table("text.tok.weight", s.vocab_size, dim));
    tok_ = register_module("tok", nn::Embedding(tok));
    pos_ = register_module("pos", nn::Embedding(s.seq_len, dim));
    layers_ = register_module("layers", nn::ModuleList());
    for (uint32_t i = 0; i < s.layers; ++i) {
      layers_->push_back(nn::TransformerEncoderLayer(
          nn::TransformerEncoderLayerOptions(dim, s.heads).dim_feedforward(4 * dim).dropout(0.1)));
    }
    head_ = register_module("head", nn::Linear(dim, s.num_classes));
  }

  torch::Tensor forward(torch::Tensor ids) {
    const torch::Tensor pad = ids.eq(kPadId);  // [b, s]: true where padding
    const torch::Tensor positions = torch::arange(ids.size(1), ids.options());
    torch::Tensor x = tok_(ids) + pos_(positions).unsqueeze(0);  // [b, s, d]
    x = x.transpose(0, 1);                                      // the layers take [s, b, d]
    for (const auto& layer : *layers_) {
      x = layer->as<nn::TransformerEncoderLayer>()->forward(x, /*src_mask=*/{}, pad);
    }
    x = x.transpose(0, 1);
    const torch::Tensor keep = pad.logical_not().unsqueeze(-1).to(x.scalar_type());
    // <cls> is never padding, so every sample keeps at least one position.
    const torch::Tensor pooled = (x * keep).sum(1) / keep.sum(1);
    return head_(pooled);
  }

 private:
  nn::Embedding tok_{nullptr}, pos_{nullptr};
  nn::ModuleList layers_{nullptr};
  nn::Linear head_{nullptr};
};
TORCH_MODULE(TextTransformer);

class TextHashedImpl : public nn::Module {
 public:
  TextHashedImpl(const ZooSizes& s, const TableWeight& table) {
    auto bag = nn::EmbeddingBagOptions(s.vocab_size, s.dim)
                   .mode(torch::kMean)
                   .sparse(true)
                   .padding_idx(kPadId);
    if (table) bag._weight(table("text.bag.weight", s.vocab_size, s.dim));
    bag_ = register_module("bag", nn::EmbeddingBag(bag));
    head_ = register_module("head", nn::Linear(s.dim, s.num_classes));
  }

  // <cls> is never padding, so every bag holds at least one row.
  torch::Tensor forward(torch::Tensor ids) { return head_(bag_(ids)); }

 private:
  nn::EmbeddingBag bag_{nullptr};
  nn::Linear head_{nullptr};
};
TORCH_MODULE(TextHashed);

}  // namespace

StatusOr<torch::nn::Sequential> MakeTextModel(const std::string& name, const ZooSizes& sizes,
                                              const TableWeight& table) {
  if (name == "text_hashed") {
    // 0 rows: a table of unbounded keys (--hash_buckets=0).
    if (sizes.dim == 0 || (sizes.vocab_size != 0 && sizes.vocab_size <= kNumSpecials) ||
        sizes.num_classes < 1) {
      return InvalidArgument("text_hashed: --model_dim " + std::to_string(sizes.dim) + ", " +
                             std::to_string(sizes.vocab_size) + " rows and " +
                             std::to_string(sizes.num_classes) + " classes: too small");
    }
    return nn::Sequential({{"text", TextHashed(sizes, table)}});
  }
  if (name != "text_transformer") return InvalidArgument("unknown text model '" + name + "'");
  if (sizes.dim == 0 || sizes.heads == 0 || sizes.dim % sizes.heads != 0) {
    return InvalidArgument("--model_dim " + std::to_string(sizes.dim) +
                           " must be a positive multiple of --model_heads " +
                           std::to_string(sizes.heads));
  }
  if (sizes.layers == 0) return InvalidArgument("--model_layers must be at least 1");
  if (sizes.vocab_size <= kNumSpecials || sizes.seq_len < 2 || sizes.num_classes < 1) {
    return InvalidArgument("text_transformer: --vocab_size " + std::to_string(sizes.vocab_size) +
                           ", --seq_len " + std::to_string(sizes.seq_len) + " and " +
                           std::to_string(sizes.num_classes) + " classes: too small");
  }
  return nn::Sequential({{"text", TextTransformer(sizes, table)}});
}

}  // namespace eps
