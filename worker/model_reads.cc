#include "worker/model_reads.h"

#include <cstring>

namespace eps {

BufferCopies SnapshotBuffers(const Layout& layout, const ModelRunner& model) {
  BufferCopies out(layout.tensors.size());
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    if (t.kind != TensorKind::kBuffer) continue;
    const size_t n = t.numel() * DTypeSize(t.dtype);
    const auto* p = static_cast<const uint8_t*>(model.Data(i));
    out[i] = std::make_shared<std::vector<uint8_t>>(p, p + n);
  }
  return out;
}

Status RestoreBuffers(ModelRunner* model, const BufferCopies& saved) {
  for (size_t i = 0; i < saved.size(); ++i) {
    if (saved[i]) EPS_RETURN_IF_ERROR(model->Write(i, 0, saved[i]->data(), saved[i]->size()));
  }
  return OkStatus();
}

StatusOr<TableRows> RowsRead(ModelRunner& model, const Layout& layout, const Dataset& data,
                             const std::vector<int64_t>& indices, bool held_too) {
  EPS_ASSIGN_OR_RETURN(std::vector<std::vector<uint64_t>> by_tensor,
                       model.TableRows(data, indices, held_too));
  TableRows out(layout.sparse.size());
  for (size_t t = 0; t < layout.sparse.size(); ++t) {
    const uint32_t i = layout.sparse[t];
    if (i < by_tensor.size()) out[t] = std::move(by_tensor[i]);
  }
  return out;
}

StatusOr<TableRows> RangeRowsRead(ModelRunner& model, const Layout& layout, const Dataset& data,
                                  int64_t lo, int64_t hi) {
  std::vector<int64_t> samples;
  for (int64_t i = lo; i < hi; ++i) samples.push_back(i);
  return RowsRead(model, layout, data, samples, /*held_too=*/false);
}

StatusOr<TableRows> PlanRows::Of(ModelRunner& model, const Layout& layout, Sampler& sampler,
                                 const Dataset& data, uint32_t lo, uint32_t hi, Step step,
                                 bool held_too) {
  for (Kept& k : kept_) {
    if (k.step == step && k.lo == lo && k.hi == hi && k.held_too == held_too) {
      std::swap(k, kept_[0]);
      return kept_[0].rows;
    }
  }
  std::vector<int64_t> samples, vw;
  for (uint32_t v = lo; v < hi; ++v) {
    sampler.Indices(VirtualWorkerId(v), step, &vw);
    samples.insert(samples.end(), vw.begin(), vw.end());
  }
  EPS_ASSIGN_OR_RETURN(TableRows rows, RowsRead(model, layout, data, samples, held_too));
  kept_[1] = std::move(kept_[0]);
  kept_[0] = Kept{lo, hi, step, held_too, std::move(rows)};
  return kept_[0].rows;
}

}  // namespace eps
