#include "models/dlrm.h"

#include "data/criteo.h"

namespace eps {
namespace {

namespace nn = torch::nn;

constexpr int64_t kBottomHidden = 64, kTopHidden = 64, kClasses = 2;
constexpr int64_t kVectors = 1 + kCriteoCategories;  // the dense vector and one per category

class DlrmImpl : public nn::Module {
 public:
  DlrmImpl(const ZooSizes& s,
           const TableWeight& table)
      : dim_(s.dim) {
    bottom1_ = register_module("bottom1", nn::Linear(kCriteoIntegers, kBottomHidden));
    bottom2_ = register_module("bottom2", nn::Linear(kBottomHidden, dim_));
    auto emb = nn::EmbeddingOptions(s.vocab_size, dim_).sparse(true);
    if (table) emb._weight(table("dlrm.emb.weight", s.vocab_size, dim_));
    emb_ = register_module("emb", nn::Embedding(emb));
    const int64_t pairs = kVectors * (kVectors - 1) / 2;
    top1_ = register_module("top1", nn::Linear(pairs + dim_, kTopHidden));
    top2_ = register_module("top2", nn::Linear(kTopHidden, kClasses));
    // The strict upper triangle of the 27 x 27 interactions, row-major.
    std::vector<int64_t> upper;
    for (int64_t i = 0; i < kVectors; ++i) {
      for (int64_t j = i + 1; j < kVectors; ++j) upper.push_back(i * kVectors + j);
    }
    upper_ = torch::tensor(upper, torch::kInt64);  // not a buffer: no state, nothing to train
  }

  torch::Tensor forward(torch::Tensor x) {
    const torch::Tensor ints = x.narrow(1, 0, kCriteoIntegers).clamp_min(0).to(torch::kFloat32);
    torch::Tensor dense = torch::relu(bottom1_(torch::log1p(ints)));
    dense = torch::relu(bottom2_(dense));                                          // [b, dim]
    const torch::Tensor cats = emb_(DlrmTableIds(x));                              // [b, 26, dim]
    const torch::Tensor t = torch::cat({dense.unsqueeze(1), cats}, 1);              // [b, 27, dim]
    const torch::Tensor z = torch::bmm(t, t.transpose(1, 2)).flatten(1);           // [b, 27 * 27]
    const torch::Tensor features = torch::cat({dense, z.index_select(1, upper_.to(z.device()))}, 1);
    return top2_(torch::relu(top1_(features)));
  }

 private:
  const int64_t dim_;
  nn::Linear bottom1_{nullptr}, bottom2_{nullptr}, top1_{nullptr}, top2_{nullptr};
  nn::Embedding emb_{nullptr};
  torch::Tensor upper_;
};
TORCH_MODULE(Dlrm);

}  // namespace

torch::Tensor DlrmTableIds(const torch::Tensor& x) {
  return x.narrow(1, kCriteoIntegers, kCriteoCategories);
}

StatusOr<torch::nn::Sequential> MakeDlrm(
    const ZooSizes& sizes,
    const TableWeight& table) {
  if (sizes.dim == 0 || sizes.vocab_size == 1) {
    return InvalidArgument("dlrm: --model_dim " + std::to_string(sizes.dim) + " and " +
                           std::to_string(sizes.vocab_size) +
                           " table rows (--hash_buckets): too small (0 rows: unbounded keys)");
  }
  return nn::Sequential({{"dlrm", Dlrm(sizes, table)}});
}

}  // namespace eps
