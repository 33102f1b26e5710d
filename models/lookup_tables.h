// The sparse tables a worker's model looks up by its batches' rows instead of
// holding them whole (ModelOptions::lookup_table_bytes, docs/design.md "Sparse
// tables"): which they are, the rows a batch reads, and where the rows pulled
// for them live. Two kinds:
//   compact  a table of a model that can rewrite its ids (the zoo's, a module's
//            with with_table_ids: Net::RewritesTableIds, a module's checked each
//            batch against its table_ids): the rows pulled live in a RowStore by id,
//            and each forward reads a weight of exactly the batch's rows, its
//            ids rewritten as their ranks among them. Ranks keep the ids' order
//            (the sort that sums a row's duplicates in backward permutes them
//            alike), so the gradient, its ranks mapped back to ids, has the bits
//            of the table held whole. Any id below 2^63 - 1: the only kind for a
//            table of unbounded keys (a weight of 0 rows). Row 0 is always among
//            a batch's rows, so that id 0 (the text models' padding, which their
//            forward compares ids against) stays 0.
//   lazy     a TorchScript module's without with_table_ids (its forward indexes its
//            own weight with the batch's ids): the weight lives in lazy memory
//            (models/table_memory.h) and a row is written at its id; the pages written are counted.
//
// Internal to models/'s libtorch translation units (it includes torch). Not
// thread-safe: the runner's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/layout.h"
#include "common/row_store.h"
#include "common/status.h"
#include "models/net.h"
#include "models/table_memory.h"

namespace eps {

class LookupTables {
 public:
  enum class Kind : uint8_t { kHeld, kLazy, kCompact };

  // `memory` made the zoo's tables (MakeModel's TableWeight) and makes a module's.
  explicit LookupTables(std::unique_ptr<TableMemory> memory) : memory_(std::move(memory)) {}
  TableMemory& memory() { return *memory_; }

  // The runner's next parameter, `weight` (the module's own): a table of `rows` rows (0:
  // unbounded keys) and `dim` floats a row looked up so, or not a lookup table (kHeld). A
  // compact table's weight becomes empty until a batch binds it; a lazy one's, a module's,
  // becomes lazy memory (the file's values dropped: the table starts from InitialRow).
  void Add(Kind kind, int64_t rows, const torch::Tensor& weight);
  bool any() const { return any_; }
  Kind kind(size_t i) const { return i < tables_.size() ? tables_[i].kind : Kind::kHeld; }
  bool lookup(size_t i) const { return kind(i) != Kind::kHeld; }
  // Compact table i (of bounded rows) made lazy: --init_from writes a table's rows whole
  // (ModelRunner::Write), and the worker seeds the shards from them.
  void MakeLazy(size_t i, const torch::Tensor& weight);

  // By parameter: the rows of each lookup table forward reads for the batch `x`, ascending
  // and distinct (empty for the others; with `held_too`, the tables held whole too where the net
  // names their ids, Net::HasTableIds). InvalidArgument for ids outside a table, a net whose
  // table ids leave a lookup table out. `specs` are the runner's tensors.
  [[nodiscard]] Status RowsOf(Net& net, const std::vector<TensorSpec>& specs,
                              const torch::Tensor& x, bool held_too,
                              std::vector<std::vector<uint64_t>>* out) const;
  // Before a forward on `x`: the batch's rows (kept for GradientIds), each compact table's
  // `weights[i]` set to its rows, and `x` with their ids rewritten. A row not written is
  // FailedPrecondition (the worker pulls the rows TableRows names first), or reads zeros with
  // `zero_missing` (the dry run's, before any pull).
  [[nodiscard]] StatusOr<torch::Tensor> Bind(Net& net, const std::vector<TensorSpec>& specs,
                                             const torch::Tensor& x,
                                             const std::vector<torch::Tensor>& weights,
                                             bool zero_missing);
  // Lookup table i's gradient row ids after backward on the bound batch, in place: a compact
  // table's ranks become ids (the order stays); a lazy table's are checked to be rows of the
  // batch (a row it does not name was never pulled). Throws std::invalid_argument.
  void GradientIds(size_t i, const std::string& name, torch::Tensor& ids) const;

  // Rows pulled for lookup table i (`weight`: its parameter): `n` ids and n x dim floats.
  [[nodiscard]] Status Write(size_t i, const torch::Tensor& weight, const uint64_t* ids,
                             const float* values, size_t n);
  // Every row written to lookup table i given back: a compact table's dropped, a lazy one's
  // pages back to the host (reading zeros).
  [[nodiscard]] Status Drop(size_t i, const torch::Tensor& weight);
  // The memory the rows written to lookup table i since its last Drop take: a lazy table's
  // pages (4 KiB each, counted as written: a batch's rows rarely share one), a compact one's
  // rows.
  size_t HeldBytes(size_t i) const;

 private:
  // RowsOf, from the net's TableIds of the batch.
  [[nodiscard]] Status RowsOfIds(const std::vector<TensorSpec>& specs,
                                 const NamedTensors& table_ids, bool held_too,
                                 std::vector<std::vector<uint64_t>>* out) const;

  struct Table {
    Kind kind = Kind::kHeld;
    int64_t rows = 0;  // 0: unbounded keys
    int64_t dim = 0;
    std::unique_ptr<RowStore> store;     // compact
    std::unordered_set<uint64_t> pages;  // lazy: pages written since the last Drop
    std::vector<uint64_t> batch;         // the bound batch's rows
  };
  const std::unique_ptr<TableMemory> memory_;
  std::vector<Table> tables_;  // by parameter
  bool any_ = false;
};

}  // namespace eps
