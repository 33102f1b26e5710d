// The row-wise optimizers of the sparse tables: server/sparse_row_step.h.
#include "server/sparse_row_step.h"

#include <algorithm>
#include <cmath>

#include "server/no_fp_contract.h"  // last: every rounding as written

namespace eps {
namespace {

using RowConstants = SparseRowStepper::Constants;

// torch.optim.Adagrad, sparse gradient (lr_decay 0):
//   state_sum.add_(g.pow(2)); std = state_sum.sparse_mask(g).sqrt_().add_(eps)
//   param.add_(g / std, alpha=-lr)       (dense += alpha * sparse: an axpy, fused)
EPS_OPTIMIZER_CLONES
void AdagradRow(const RowConstants& c, float* p, const float* g_sum, float div, float* sum,
                size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = div == 1.0f ? g_sum[i] : g_sum[i] / div;
    if (c.l2) g = std::fma(p[i], c.wd, g);
    const float s = sum[i] + g * g;
    sum[i] = s;
    const float std_dev = std::sqrt(s) + c.eps;
    p[i] = std::fma(g / std_dev, c.neg_step, p[i]);
  }
}

// torch.optim.SparseAdam (torch/optim/_functional.py sparse_adam), per element:
//   u1 = (g - m) * (1 - beta1); m += u1;  u2 = (g*g - v) * (1 - beta2); v += u2
//   numer = u1 + m_old; denom = sqrt(u2 + v_old) + eps
//   param += -step_size * (numer / denom)   (alpha 1: a plain add)
// AdamW first scales the row: p *= 1 - lr * wd.
EPS_OPTIMIZER_CLONES
void SparseAdamRow(const RowConstants& c, float* p, const float* g_sum, float div, float* m,
                   float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = div == 1.0f ? g_sum[i] : g_sum[i] / div;
    float w = c.decoupled ? p[i] * c.decay : p[i];
    if (c.l2) g = std::fma(w, c.wd, g);
    const float m_old = m[i], v_old = v[i];
    const float u1 = (g - m_old) * c.one_minus_beta1;
    const float u2 = (g * g - v_old) * c.one_minus_beta2;
    m[i] = m_old + u1;
    v[i] = v_old + u2;
    const float numer = u1 + m_old;
    const float denom = std::sqrt(u2 + v_old) + c.eps;
    p[i] = w + (numer / denom) * c.neg_step;
  }
}

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

Status ValidateSparseOptimizer(const SparseOptimizerOptions& o) {
  using K = SparseOptimizerOptions::Kind;
  if (o.kind != K::kSgd && o.kind != K::kAdagrad && o.kind != K::kAdam && o.kind != K::kAdamW) {
    return InvalidArgument("unknown sparse optimizer");
  }
  if (!Finite(o.weight_decay) || o.weight_decay < 0) {
    return InvalidArgument("sparse optimizer weight_decay must be finite and >= 0");
  }
  if (o.kind == K::kSgd) {
    if (!Finite(o.momentum) || o.momentum < 0) {
      return InvalidArgument("sparse optimizer momentum must be finite and >= 0");
    }
    if (!Finite(o.dampening) || o.dampening < 0 || o.dampening > 1) {
      return InvalidArgument("sparse optimizer dampening must be in [0, 1]");
    }
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      return InvalidArgument("sparse optimizer nesterov needs momentum > 0 and no dampening");
    }
    return OkStatus();
  }
  if (o.momentum != 0 || o.dampening != 0 || o.nesterov) {
    return InvalidArgument("momentum, dampening and nesterov apply to sgd only");
  }
  if (!Finite(o.eps) || o.eps <= 0) return InvalidArgument("sparse optimizer eps must be > 0");
  if (o.kind == K::kAdagrad) {
    if (!Finite(o.initial_accumulator_value) || o.initial_accumulator_value < 0) {
      return InvalidArgument("adagrad initial_accumulator_value must be finite and >= 0");
    }
    return OkStatus();
  }
  if (!Finite(o.beta1) || o.beta1 < 0 || o.beta1 >= 1 || !Finite(o.beta2) || o.beta2 < 0 ||
      o.beta2 >= 1) {
    return InvalidArgument("sparse optimizer betas must be in [0, 1)");
  }
  return OkStatus();
}

SparseRowStepper::SparseRowStepper(const SparseOptimizerOptions& o, size_t dim, double lr,
                                   double count)
    : o_(o), dim_(dim), lr_(lr) {
  using K = SparseOptimizerOptions::Kind;
  c_.wd = static_cast<float>(o.weight_decay);
  c_.eps = static_cast<float>(o.eps);
  if (o.kind == K::kAdagrad) {
    c_.l2 = o.weight_decay != 0;
    c_.neg_step = static_cast<float>(-lr);
  } else if (o.kind == K::kAdam || o.kind == K::kAdamW) {
    c_.l2 = o.kind == K::kAdam && o.weight_decay != 0;
    c_.decoupled = o.kind == K::kAdamW && o.weight_decay != 0;
    c_.decay = static_cast<float>(1 - lr * o.weight_decay);
    c_.one_minus_beta1 = static_cast<float>(1 - o.beta1);
    c_.one_minus_beta2 = static_cast<float>(1 - o.beta2);
    const double bias_correction1 = 1 - std::pow(o.beta1, count);
    const double bias_correction2 = 1 - std::pow(o.beta2, count);
    c_.neg_step = static_cast<float>(-(lr * std::sqrt(bias_correction2) / bias_correction1));
  }
  sgd_.kind = OptimizerKind::kSgd;
  sgd_.momentum = o.momentum;
  sgd_.dampening = o.dampening;
  sgd_.nesterov = o.nesterov;
  sgd_.weight_decay = o.weight_decay;
}

void SparseRowStepper::Step(float* p, const float* grad, float divisor, bool initialized) const {
  const size_t d = dim_;
  switch (o_.kind) {
    case SparseOptimizerOptions::Kind::kSgd:
      ApplySgdRow(sgd_, lr_, !initialized, p, grad, divisor,
                  SparseOptimizerSlots(o_) >= 1 ? p + d : nullptr, d);
      break;
    case SparseOptimizerOptions::Kind::kAdagrad:
      if (!initialized) std::fill(p + d, p + 2 * d, static_cast<float>(o_.initial_accumulator_value));
      AdagradRow(c_, p, grad, divisor, p + d, d);
      break;
    case SparseOptimizerOptions::Kind::kAdam:
    case SparseOptimizerOptions::Kind::kAdamW:
      SparseAdamRow(c_, p, grad, divisor, p + d, p + 2 * d, d);  // slots start at zero
      break;
  }
}

}  // namespace eps
