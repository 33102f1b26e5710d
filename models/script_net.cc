// A TorchScript module as a Net (models/net.h).
#include <torch/csrc/jit/passes/graph_fuser.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <sstream>

#include "models/model_runner.h"
#include "models/net.h"

namespace eps {
namespace {

// An istream's buffer over bytes it does not own (no copy: a model file may be
// gigabytes), seekable as torch::jit::load needs.
class BytesStreamBuf final : public std::streambuf {
 public:
  explicit BytesStreamBuf(const std::string& bytes) {
    char* begin = const_cast<char*>(bytes.data());  // read only: no put area
    setg(begin, begin, begin + bytes.size());
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir,
                   std::ios_base::openmode which) override {
    if (!(which & std::ios_base::in)) return pos_type(off_type(-1));
    const off_type base = dir == std::ios_base::beg   ? 0
                          : dir == std::ios_base::cur ? gptr() - eback()
                                                      : egptr() - eback();
    return seekpos(pos_type(base + off), which);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    if (!(which & std::ios_base::in) || off_type(pos) < 0 || off_type(pos) > egptr() - eback())
      return pos_type(off_type(-1));
    setg(eback(), eback() + off_type(pos), egptr());
    return pos;
  }
};

NamedTensors Collect(const torch::jit::named_parameter_list& list) {
  NamedTensors out;
  for (const auto& p : list) out.emplace_back(p.name, p.value);
  return out;
}

class ScriptNet final : public Net {
 public:
  explicit ScriptNet(torch::jit::Module module) : module_(std::move(module)) {
    has_loss_ = module_.find_method("loss").has_value();
    has_table_ids_ = module_.find_method("table_ids").has_value();
    rewrites_ids_ = has_table_ids_ && module_.find_method("with_table_ids").has_value();
  }

  NamedTensors NamedParameters() override { return Collect(module_.named_parameters()); }

  NamedTensors NamedBuffers() override {
    NamedTensors out;
    for (const auto& b : module_.named_buffers()) out.emplace_back(b.name, b.value);
    return out;
  }

  // A scripted nn.Embedding / nn.EmbeddingBag keeps `sparse` among its class's
  // constants (the modules' __constants__).
  std::vector<std::pair<std::string, bool>> EmbeddingWeights() override {
    std::vector<std::pair<std::string, bool>> out;
    for (const auto& m : module_.named_modules()) {
      const auto type = m.value.type();
      if (!type->hasConstant("sparse") || !m.value.hasattr("weight")) continue;
      const c10::IValue sparse = type->getConstant("sparse");
      out.emplace_back(m.name.empty() ? "weight" : m.name + ".weight",
                       sparse.isBool() && sparse.toBool());
    }
    return out;
  }

  bool HasTableIds() const override { return has_table_ids_; }
  std::vector<std::pair<std::string, torch::Tensor>> TableIds(const torch::Tensor& x) override {
    const torch::jit::IValue out = module_.get_method("table_ids")({x});
    if (!out.isGenericDict())
      throw std::runtime_error("table_ids(x) returned a " + out.tagKind() + ", not a dict");
    std::vector<std::pair<std::string, torch::Tensor>> ids;
    for (const auto& item : out.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor())
        throw std::runtime_error("table_ids(x) must map weight names to tensors of row ids");
      ids.emplace_back(item.key().toStringRef(), item.value().toTensor());
    }
    return ids;
  }

  bool RewritesTableIds() const override { return rewrites_ids_; }
  torch::Tensor WithTableIds(const torch::Tensor& x, const NamedTensors& ids) override {
    c10::Dict<std::string, torch::Tensor> by_name;
    for (const auto& [name, t] : ids) by_name.insert(name, t);
    const torch::jit::IValue out = module_.get_method("with_table_ids")({x, by_name});
    if (!out.isTensor())
      throw std::runtime_error("with_table_ids(x, ids) returned a " + out.tagKind() +
                               ", not a tensor");
    return out.toTensor();
  }

  Status CheckData(const Dataset& data) const override {
    if (data.size > 0 && (data.features == nullptr || data.labels == nullptr))
      return InvalidArgument("the data set has no samples in memory");
    return OkStatus();
  }
  bool builtin() const override { return false; }
  torch::Tensor Input(const torch::Tensor& features) const override { return features; }

  torch::Tensor Forward(const torch::Tensor& x) override {
    const torch::jit::IValue out = module_.forward({x});
    if (!out.isTensor())
      throw std::runtime_error("forward returned a " + out.tagKind() + ", not a tensor");
    return out.toTensor();
  }

  torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) override {
    if (!has_loss_) return DefaultLoss(output, target);
    const torch::jit::IValue loss = module_.get_method("loss")({output, target});
    if (!loss.isTensor())
      throw std::runtime_error("loss(output, target) returned a " + loss.tagKind() +
                               ", not a tensor");
    return loss.toTensor();
  }

  void Train(bool on) override { module_.train(on); }
  void To(const torch::Device& device) override { module_.to(device); }

 private:
  torch::jit::Module module_;
  bool has_loss_ = false;
  bool has_table_ids_ = false;
  bool rewrites_ids_ = false;  // table_ids and with_table_ids
};

}  // namespace

void DisableJitOptimization() {
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::getProfilingMode() = false;
  torch::jit::setTensorExprFuserEnabled(false);
  torch::jit::overrideCanFuseOnCPULegacy(false);
}

bool JitOptimizationDisabled() {
  return !torch::jit::getGraphExecutorOptimize() && !torch::jit::tensorExprFuserEnabled();
}

bool JitGraphOptimizationIsOff() { return JitOptimizationDisabled(); }

StatusOr<std::unique_ptr<Net>> LoadScriptNet(const std::string& bytes) {
  DisableJitOptimization();
  torch::jit::Module module;
  try {
    BytesStreamBuf buffer(bytes);
    std::istream in(&buffer);
    module = torch::jit::load(in, torch::kCPU);
  } catch (const c10::Error& e) {
    return InvalidArgument(
        std::string("the model file is not a TorchScript module libtorch loads: ") +
        e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InvalidArgument(
        std::string("the model file is not a TorchScript module libtorch loads: ") + e.what());
  }
  if (!module.find_method("forward"))
    return InvalidArgument("the TorchScript module has no forward method");
  if (auto loss = module.find_method("loss")) {
    const size_t args = loss->function().getSchema().arguments().size();
    if (args != 3) {  // self, output, target
      return InvalidArgument("the TorchScript module's loss method takes " +
                             std::to_string(args - 1) +
                             " arguments; it must take (output, target)");
    }
  }
  return std::unique_ptr<Net>(new ScriptNet(std::move(module)));
}

}  // namespace eps
