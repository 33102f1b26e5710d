// The row-wise (lazy) optimizers of the sparse tables (server/sparse_table.h):
// one row stepped by the gradient sum of a step, bit for bit as torch 1.13
// steps a sparse gradient (SGD with libtorch's dense arithmetic per row,
// Adagrad, SparseAdam, AdamW as SparseAdam after the decay). Pure functions of
// their arguments; sparse_table_test.cc checks them against torch.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "server/optimizer.h"
#include "server/sparse_table.h"

namespace eps {

// InvalidArgument naming the option a table's optimizer cannot take.
Status ValidateSparseOptimizer(const SparseOptimizerOptions& o);

// The arithmetic of one step of a table's optimizer at learning rate `lr`, the
// table's `count`-th step (SparseAdam's bias corrections count the table's
// steps, not a row's).
class SparseRowStepper {
 public:
  SparseRowStepper(const SparseOptimizerOptions& o, size_t dim, double lr, double count);
  // Steps the row `p` (dim weights, then the optimizer's slots, dim floats
  // each) by `grad_sum` / `divisor`. `initialized`: the optimizer stepped the
  // row before (its slots are live; else they start as the optimizer starts).
  void Step(float* p, const float* grad_sum, float divisor, bool initialized) const;

  // Constants as torch hands them to its float kernels: computed in double, rounded to float.
  struct Constants {
    float wd = 0;
    bool l2 = false;
    float decay = 1;  // AdamW: 1 - lr * wd
    bool decoupled = false;
    float one_minus_beta1 = 0, one_minus_beta2 = 0, eps = 0;
    float neg_step = 0;  // Adagrad: -lr; SparseAdam: -(lr * sqrt(bc2) / bc1)
  };

 private:
  const SparseOptimizerOptions o_;
  const size_t dim_;
  const double lr_;
  Constants c_;
  OptimizerOptions sgd_;
};

}  // namespace eps
