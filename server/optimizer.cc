#include "server/optimizer.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/memory.h"
#include "server/no_fp_contract.h"  // last: every rounding as written

namespace eps {
namespace {

// Scalars as libtorch 1.13's C++ optimizers hand them to ATen: computed in double, then turned into
// float by the kernel (Scalar::to<float>() for an alpha / value, a wrapped-number tensor cast to
// the float common dtype for a tensor-scalar mul or div).
//
// The per-element formulas mirror ATen's vectorized CPU kernels with FMA (AVX2 / AVX512 builds):
//   a.add(b, alpha)            -> fma(b, alpha, a)          (ufunc add: vec::fmadd(b, alpha, a))
//   a.mul(s)                   -> a * s
//   a.addcmul(b, c, s)         -> fma(s * b, c, a)          (a + s * b * c, contracted by GCC)
//   a.addcdiv(b, c, s)         -> a + (s * b) / c
//   a / s, a.sqrt(), a.add(s)  -> a / s, sqrt(a), a + s
// The scalar tails of those kernels are compiled the same way and fuse too (checked by the test).

struct SgdConstants {
  bool weight_decay;  // weight_decay != 0, tested in double like libtorch.
  bool momentum;
  bool nesterov;
  float wd;
  float mom;
  float one_minus_dampening;
  float neg_lr;
};

SgdConstants MakeSgdConstants(const OptimizerOptions& o, double lr) {
  SgdConstants c;
  c.weight_decay = o.weight_decay != 0;
  c.momentum = o.momentum != 0;
  c.nesterov = o.nesterov;
  c.wd = static_cast<float>(o.weight_decay);
  c.mom = static_cast<float>(o.momentum);
  c.one_minus_dampening = static_cast<float>(1 - o.dampening);
  c.neg_lr = static_cast<float>(-1 * lr);
  return c;
}

// torch::optim::SGD::step:
//   d_p = grad; if (wd != 0) d_p = d_p.add(p, wd);
//   if (momentum != 0) {
//     buf = first ? clone(d_p) : buf.mul_(momentum).add_(d_p, 1 - dampening);
//     d_p = nesterov ? d_p.add(buf, momentum) : buf;
//   }
//   p.add_(d_p, -1 * lr);
// One parameter w with gradient d: the new value (buf_in[i] is the momentum buffer, buf[i]
// receives its new value; the same buffer when stepped in place).
inline float SgdElement(const SgdConstants& c, bool first, float w, float d, const float* buf_in,
                        float* buf, size_t i) {
  if (c.weight_decay) d = std::fma(w, c.wd, d);
  if (c.momentum) {
    const float b = first ? d : std::fma(d, c.one_minus_dampening, buf_in[i] * c.mom);
    buf[i] = b;
    d = c.nesterov ? std::fma(b, c.mom, d) : b;
  }
  return std::fma(d, c.neg_lr, w);
}

// Three loops, one per buffer the result goes to (the parameters, the gradient, or a third one:
// a shard stepping a sum it reads where it was pushed), so every pointer can be __restrict (the
// vectorizer needs that: with p, g and out possibly aliased Adam ran 25 % slower). The constants
// come by value: read through a reference they might alias the buffers, and are loaded (and
// branched on) every element, which kept the Adam loops scalar (3x slower). The gradient
// is g[i] / div; div == 1 skips the division (x / 1 == x exactly), which costs as much again.
// The slots are read from `*_in` when given (null: in place), a buffer of their own: the step
// of a shard whose checkpoint still holds the slots writes new ones without copying the old
// (SlotsBefore). Same element functions, same bits.
EPS_OPTIMIZER_CLONES
void SgdOverParams(const SgdConstants c, bool first, float* __restrict p, const float* __restrict g,
                   float div, const float* __restrict buf_in, float* __restrict buf, size_t n) {
  if (buf_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) p[i] = SgdElement(c, first, p[i], g[i], buf, buf, i);
    } else {
      for (size_t i = 0; i < n; ++i) p[i] = SgdElement(c, first, p[i], g[i] / div, buf, buf, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) p[i] = SgdElement(c, first, p[i], g[i], buf_in, buf, i);
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = SgdElement(c, first, p[i], g[i] / div, buf_in, buf, i);
  }
}

EPS_OPTIMIZER_CLONES
void SgdOverGrad(const SgdConstants c, bool first, const float* __restrict p, float* __restrict g,
                 float div, const float* __restrict buf_in, float* __restrict buf, size_t n) {
  if (buf_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) g[i] = SgdElement(c, first, p[i], g[i], buf, buf, i);
    } else {
      for (size_t i = 0; i < n; ++i) g[i] = SgdElement(c, first, p[i], g[i] / div, buf, buf, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) g[i] = SgdElement(c, first, p[i], g[i], buf_in, buf, i);
  } else {
    for (size_t i = 0; i < n; ++i) g[i] = SgdElement(c, first, p[i], g[i] / div, buf_in, buf, i);
  }
}

EPS_OPTIMIZER_CLONES
void SgdInto(const SgdConstants c, bool first, const float* __restrict p, const float* __restrict g,
             float div, const float* __restrict buf_in, float* __restrict buf, float* __restrict out,
             size_t n) {
  if (buf_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) out[i] = SgdElement(c, first, p[i], g[i], buf, buf, i);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = SgdElement(c, first, p[i], g[i] / div, buf, buf, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) out[i] = SgdElement(c, first, p[i], g[i], buf_in, buf, i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = SgdElement(c, first, p[i], g[i] / div, buf_in, buf, i);
  }
}

struct AdamConstants {
  bool l2;         // Adam with weight_decay != 0: grad = grad.add(p, wd).
  bool decoupled;  // AdamW with weight_decay != 0: p.mul_(1 - lr * wd).
  float wd;
  float decay;  // 1 - lr * wd
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float sqrt_bias_correction2;
  float eps;
  float neg_step_size;  // -(lr / bias_correction1)
};

// torch::optim::Adam::step / AdamW::step (amsgrad off):
//   AdamW: if (wd != 0) p.mul_(1 - lr * wd);
//   Adam:  if (wd != 0) grad = grad.add(p, wd);
//   exp_avg.mul_(beta1).add_(grad, 1 - beta1);
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
//   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps);
//   p.addcdiv_(exp_avg, denom, -(lr / bias_correction1));
inline float AdamElement(const AdamConstants& c, float w, float grad, const float* exp_avg_in,
                         const float* exp_avg_sq_in, float* exp_avg, float* exp_avg_sq, size_t i) {
  // Selects, not branches: the loops vectorize only without control flow.
  w = c.decoupled ? w * c.decay : w;
  grad = c.l2 ? std::fma(w, c.wd, grad) : grad;
  const float m = std::fma(grad, c.one_minus_beta1, exp_avg_in[i] * c.beta1);
  const float scaled = c.one_minus_beta2 * grad;
  const float v = std::fma(scaled, grad, exp_avg_sq_in[i] * c.beta2);
  const float denom = std::sqrt(v) / c.sqrt_bias_correction2 + c.eps;
  const float update = (c.neg_step_size * m) / denom;
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  return w + update;
}

EPS_OPTIMIZER_CLONES
void AdamOverParams(const AdamConstants c, float* __restrict p, const float* __restrict g,
                    float div, const float* __restrict m_in, const float* __restrict v_in,
                    float* __restrict m, float* __restrict v, size_t n) {
  if (m_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) p[i] = AdamElement(c, p[i], g[i], m, v, m, v, i);
    } else {
      for (size_t i = 0; i < n; ++i) p[i] = AdamElement(c, p[i], g[i] / div, m, v, m, v, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) p[i] = AdamElement(c, p[i], g[i], m_in, v_in, m, v, i);
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = AdamElement(c, p[i], g[i] / div, m_in, v_in, m, v, i);
  }
}

EPS_OPTIMIZER_CLONES
void AdamOverGrad(const AdamConstants c, const float* __restrict p, float* __restrict g, float div,
                  const float* __restrict m_in, const float* __restrict v_in,
                  float* __restrict m, float* __restrict v, size_t n) {
  if (m_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) g[i] = AdamElement(c, p[i], g[i], m, v, m, v, i);
    } else {
      for (size_t i = 0; i < n; ++i) g[i] = AdamElement(c, p[i], g[i] / div, m, v, m, v, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) g[i] = AdamElement(c, p[i], g[i], m_in, v_in, m, v, i);
  } else {
    for (size_t i = 0; i < n; ++i) g[i] = AdamElement(c, p[i], g[i] / div, m_in, v_in, m, v, i);
  }
}

EPS_OPTIMIZER_CLONES
void AdamInto(const AdamConstants c, const float* __restrict p, const float* __restrict g, float div,
              const float* __restrict m_in, const float* __restrict v_in, float* __restrict m,
              float* __restrict v, float* __restrict out, size_t n) {
  if (m_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) out[i] = AdamElement(c, p[i], g[i], m, v, m, v, i);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = AdamElement(c, p[i], g[i] / div, m, v, m, v, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) out[i] = AdamElement(c, p[i], g[i], m_in, v_in, m, v, i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = AdamElement(c, p[i], g[i] / div, m_in, v_in, m, v, i);
  }
}

// torch::optim::Adagrad::step (lr_decay 0, so clr = lr):
//   if (wd != 0) grad = grad.add(p, wd);
//   sum.addcmul_(grad, grad, 1.0);
//   std = sum.sqrt().add_(eps);
//   p.addcdiv_(grad, std, -clr);
struct AdagradConstants {
  bool l2;
  float wd;
  float eps;
  float neg_clr;
};

inline float AdagradElement(const AdagradConstants& c, float w, float grad, const float* sum_in,
                            float* sum, size_t i) {
  grad = c.l2 ? std::fma(w, c.wd, grad) : grad;
  const float s = std::fma(grad, grad, sum_in[i]);  // 1.0f * grad is grad
  sum[i] = s;
  return w + (c.neg_clr * grad) / (std::sqrt(s) + c.eps);
}

EPS_OPTIMIZER_CLONES
void AdagradOverParams(const AdagradConstants c, float* __restrict p, const float* __restrict g,
                       float div, const float* __restrict sum_in, float* __restrict sum,
                       size_t n) {
  if (sum_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) p[i] = AdagradElement(c, p[i], g[i], sum, sum, i);
    } else {
      for (size_t i = 0; i < n; ++i) p[i] = AdagradElement(c, p[i], g[i] / div, sum, sum, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) p[i] = AdagradElement(c, p[i], g[i], sum_in, sum, i);
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = AdagradElement(c, p[i], g[i] / div, sum_in, sum, i);
  }
}

EPS_OPTIMIZER_CLONES
void AdagradOverGrad(const AdagradConstants c, const float* __restrict p, float* __restrict g,
                     float div, const float* __restrict sum_in, float* __restrict sum, size_t n) {
  if (sum_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) g[i] = AdagradElement(c, p[i], g[i], sum, sum, i);
    } else {
      for (size_t i = 0; i < n; ++i) g[i] = AdagradElement(c, p[i], g[i] / div, sum, sum, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) g[i] = AdagradElement(c, p[i], g[i], sum_in, sum, i);
  } else {
    for (size_t i = 0; i < n; ++i) g[i] = AdagradElement(c, p[i], g[i] / div, sum_in, sum, i);
  }
}

EPS_OPTIMIZER_CLONES
void AdagradInto(const AdagradConstants c, const float* __restrict p, const float* __restrict g,
                 float div, const float* __restrict sum_in, float* __restrict sum,
                 float* __restrict out, size_t n) {
  if (sum_in == nullptr) {
    if (div == 1.0f) {
      for (size_t i = 0; i < n; ++i) out[i] = AdagradElement(c, p[i], g[i], sum, sum, i);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = AdagradElement(c, p[i], g[i] / div, sum, sum, i);
    }
  } else if (div == 1.0f) {
    for (size_t i = 0; i < n; ++i) out[i] = AdagradElement(c, p[i], g[i], sum_in, sum, i);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = AdagradElement(c, p[i], g[i] / div, sum_in, sum, i);
  }
}

bool Finite(double x) { return std::isfinite(x); }

Status Bad(const std::string& field, const std::string& why) {
  return InvalidArgument("optimizer option " + field + " " + why);
}

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

constexpr double kPi = 3.14159265358979323846;

}  // namespace

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdagrad:
      break;
    default:
      return Bad("kind", "is not a known optimizer");
  }
  if (!Finite(o.lr) || o.lr <= 0) return Bad("lr", "must be finite and > 0, got " + Num(o.lr));
  if (!Finite(o.weight_decay) || o.weight_decay < 0) {
    return Bad("weight_decay", "must be finite and >= 0, got " + Num(o.weight_decay));
  }
  if (o.kind == OptimizerKind::kSgd) {
    if (!Finite(o.momentum) || o.momentum < 0) {
      return Bad("momentum", "must be finite and >= 0, got " + Num(o.momentum));
    }
    if (!Finite(o.dampening) || o.dampening < 0 || o.dampening > 1) {
      return Bad("dampening", "must be in [0, 1], got " + Num(o.dampening));
    }
    if (o.nesterov && o.momentum <= 0) return Bad("nesterov", "requires momentum > 0");
    if (o.nesterov && o.dampening != 0) return Bad("nesterov", "requires dampening == 0");
  } else {
    const char* name = OptimizerKindName(o.kind);
    if (o.momentum != 0) return Bad("momentum", std::string("applies to sgd only, not ") + name);
    if (o.dampening != 0) return Bad("dampening", std::string("applies to sgd only, not ") + name);
    if (o.nesterov) return Bad("nesterov", std::string("applies to sgd only, not ") + name);
    if (!Finite(o.beta1) || o.beta1 < 0 || o.beta1 >= 1) {
      return Bad("beta1", "must be in [0, 1), got " + Num(o.beta1));
    }
    if (!Finite(o.beta2) || o.beta2 < 0 || o.beta2 >= 1) {
      return Bad("beta2", "must be in [0, 1), got " + Num(o.beta2));
    }
    if (!Finite(o.eps) || o.eps <= 0)
      return Bad("eps", "must be finite and > 0, got " + Num(o.eps));
  }

  switch (o.schedule) {
    case ScheduleKind::kConstant:
      break;
    case ScheduleKind::kStep:
      if (o.step_size <= 0) {
        return Bad("step_size",
                   "must be > 0 for the step schedule, got " + std::to_string(o.step_size));
      }
      if (!Finite(o.gamma) || o.gamma <= 0) {
        return Bad("gamma", "must be finite and > 0 for the step schedule, got " + Num(o.gamma));
      }
      break;
    case ScheduleKind::kCosine:
      if (o.warmup_steps < 0) {
        return Bad("warmup_steps", "must be >= 0, got " + std::to_string(o.warmup_steps));
      }
      if (o.total_steps <= o.warmup_steps) {
        return Bad("total_steps", "must be > warmup_steps (" + std::to_string(o.warmup_steps) +
                                      ") for the cosine schedule, got " +
                                      std::to_string(o.total_steps));
      }
      if (!Finite(o.min_lr) || o.min_lr < 0 || o.min_lr > o.lr) {
        return Bad("min_lr", "must be in [0, lr] for the cosine schedule, got " + Num(o.min_lr));
      }
      break;
    default:
      return Bad("schedule", "is not a known schedule");
  }
  if (o.schedule != ScheduleKind::kCosine && o.warmup_steps != 0) {
    return Bad("warmup_steps", std::string("is only supported by the cosine schedule, not ") +
                                   ScheduleKindName(o.schedule));
  }
  return OkStatus();
}

StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  return InvalidArgument("unknown optimizer '" + std::string(name) +
                         "' (expected sgd, adam, adamw or adagrad)");
}

StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "step") return ScheduleKind::kStep;
  if (name == "cosine") return ScheduleKind::kCosine;
  return InvalidArgument("unknown lr schedule '" + std::string(name) +
                         "' (expected constant, step or cosine)");
}

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kAdagrad:
      return "adagrad";
  }
  return "unknown";
}

const char* ScheduleKindName(ScheduleKind schedule) {
  switch (schedule) {
    case ScheduleKind::kConstant:
      return "constant";
    case ScheduleKind::kStep:
      return "step";
    case ScheduleKind::kCosine:
      return "cosine";
  }
  return "unknown";
}

StatusOr<OptimizerOptions> OptimizerOptionsFromSpec(const OptimizerSpec& spec,
                                                    int64_t total_steps) {
  OptimizerOptions o;
  EPS_ASSIGN_OR_RETURN(o.kind, ParseOptimizerKind(spec.kind));
  EPS_ASSIGN_OR_RETURN(o.schedule, ParseScheduleKind(spec.schedule));
  o.lr = spec.lr;
  o.momentum = spec.momentum;
  o.dampening = spec.dampening;
  o.nesterov = spec.nesterov;
  o.weight_decay = spec.weight_decay;
  o.beta1 = spec.beta1;
  o.beta2 = spec.beta2;
  o.eps = spec.eps;
  o.step_size = spec.step_size;
  o.gamma = spec.gamma;
  o.warmup_steps = spec.warmup_steps;
  o.min_lr = spec.min_lr;
  o.total_steps = total_steps;
  EPS_RETURN_IF_ERROR(ValidateOptimizerOptions(o));
  return o;
}

double LearningRate(const OptimizerOptions& o, int64_t step) {
  const int64_t t = step < 0 ? 0 : step;
  switch (o.schedule) {
    case ScheduleKind::kConstant:
      return o.lr;
    case ScheduleKind::kStep:
      assert(o.step_size > 0);
      return o.lr * std::pow(o.gamma, static_cast<double>(t / o.step_size));
    case ScheduleKind::kCosine: {
      if (t < o.warmup_steps) {
        // (t + 1) / warmup is exactly 1 at the last warmup step, so that step gets exactly lr.
        return o.lr * (static_cast<double>(t + 1) / static_cast<double>(o.warmup_steps));
      }
      if (t >= o.total_steps) return o.min_lr;
      const double progress = static_cast<double>(t - o.warmup_steps) /
                              static_cast<double>(o.total_steps - o.warmup_steps);
      const double lr = o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(kPi * progress));
      // Rounding can put the step just after warmup a hair above lr; keep the schedule in range.
      return lr > o.lr ? o.lr : (lr < o.min_lr ? o.min_lr : lr);
    }
  }
  return o.lr;
}

int NumOptimizerSlots(const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::kSgd) return o.momentum != 0 ? 1 : 0;
  if (o.kind == OptimizerKind::kAdagrad) return 1;
  return 2;
}

void ApplyOptimizer(const OptimizerOptions& o, int64_t step, float* params, const float* grad,
                    size_t n, OptimizerState* state) {
  ApplyOptimizer(o, step, params, grad, 1.0f, params, n, state);
}

void ApplyOptimizer(const OptimizerOptions& o, int64_t step, const float* params,
                    const float* grad_sum, float divisor, float* out, size_t n,
                    OptimizerState* state, ParallelFor* parallel, const SlotsBefore* before) {
  // Each range is one of the loops below over its own elements: the same bits for every cut.
  const auto over = [parallel, n](const ParallelFor::Range& fn) {
    if (parallel == nullptr) {
      fn(0, n);
    } else {
      parallel->Run(n, kParallelGrain, fn);
    }
  };
  // Each loop writes the parameters, the gradient or a third buffer (which overlaps neither).
  const bool over_grad = out == grad_sum;
  const bool elsewhere = !over_grad && out != params;
  assert(step >= 0);
  assert(state != nullptr);
  const double lr = LearningRate(o, step);
  const int slots = NumOptimizerSlots(o);
  const bool first = !state->initialized;
  assert(before == nullptr || !first);
  if (first) {
    // Adam and Adagrad start from zeros (torch::zeros_like, full_like(0)); SGD's buffer is
    // written on the first step.
    state->slot0 = HugeVector<float>(slots >= 1 ? n : 0);
    state->slot1 = HugeVector<float>(slots >= 2 ? n : 0);
    state->initialized = true;
  }
  assert(state->slot0.size() == (slots >= 1 ? n : 0));
  assert(state->slot1.size() == (slots >= 2 ? n : 0));
  float* const slot0 = state->slot0.data();
  float* const slot1 = state->slot1.data();
  // Where the slots' old values are read from (null: in place); offset by a range's start.
  const float* const in0 = before != nullptr && slots >= 1 ? before->slot0 : nullptr;
  const float* const in1 = before != nullptr && slots >= 2 ? before->slot1 : nullptr;
  const auto at = [](const float* in, size_t lo) { return in == nullptr ? nullptr : in + lo; };

  if (o.kind == OptimizerKind::kSgd) {
    const SgdConstants c = MakeSgdConstants(o, lr);
    over([&](size_t lo, size_t hi) {
      float* const buf = slots >= 1 ? slot0 + lo : nullptr;
      if (elsewhere) {
        SgdInto(c, first, params + lo, grad_sum + lo, divisor, at(in0, lo), buf, out + lo, hi - lo);
      } else if (over_grad) {
        SgdOverGrad(c, first, params + lo, out + lo, divisor, at(in0, lo), buf, hi - lo);
      } else {
        SgdOverParams(c, first, out + lo, grad_sum + lo, divisor, at(in0, lo), buf, hi - lo);
      }
    });
    return;
  }

  if (o.kind == OptimizerKind::kAdagrad) {
    AdagradConstants c;
    c.l2 = o.weight_decay != 0;
    c.wd = static_cast<float>(o.weight_decay);
    c.eps = static_cast<float>(o.eps);
    c.neg_clr = static_cast<float>(-lr);
    over([&](size_t lo, size_t hi) {
      if (elsewhere) {
        AdagradInto(c, params + lo, grad_sum + lo, divisor, at(in0, lo), slot0 + lo, out + lo,
                    hi - lo);
      } else if (over_grad) {
        AdagradOverGrad(c, params + lo, out + lo, divisor, at(in0, lo), slot0 + lo, hi - lo);
      } else {
        AdagradOverParams(c, out + lo, grad_sum + lo, divisor, at(in0, lo), slot0 + lo, hi - lo);
      }
    });
    return;
  }

  // libtorch counts steps from 1 and raises the double betas to that integer (promoted to double).
  const double count = static_cast<double>(step + 1);
  const double bias_correction1 = 1 - std::pow(o.beta1, count);
  const double bias_correction2 = 1 - std::pow(o.beta2, count);
  AdamConstants c;
  c.l2 = o.kind == OptimizerKind::kAdam && o.weight_decay != 0;
  c.decoupled = o.kind == OptimizerKind::kAdamW && o.weight_decay != 0;
  c.wd = static_cast<float>(o.weight_decay);
  c.decay = static_cast<float>(1 - lr * o.weight_decay);
  c.beta1 = static_cast<float>(o.beta1);
  c.one_minus_beta1 = static_cast<float>(1 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1 - o.beta2);
  c.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(o.eps);
  c.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  over([&](size_t lo, size_t hi) {
    if (elsewhere) {
      AdamInto(c, params + lo, grad_sum + lo, divisor, at(in0, lo), at(in1, lo), slot0 + lo,
               slot1 + lo, out + lo, hi - lo);
    } else if (over_grad) {
      AdamOverGrad(c, params + lo, out + lo, divisor, at(in0, lo), at(in1, lo), slot0 + lo,
                   slot1 + lo, hi - lo);
    } else {
      AdamOverParams(c, out + lo, grad_sum + lo, divisor, at(in0, lo), at(in1, lo), slot0 + lo,
                     slot1 + lo, hi - lo);
    }
  });
}

void ApplySgdRow(const OptimizerOptions& o, double lr, bool first, float* params,
                 const float* grad_sum, float divisor, float* buf, size_t n) {
  assert(o.kind == OptimizerKind::kSgd);
  const SgdConstants c = MakeSgdConstants(o, lr);
  SgdOverParams(c, first, params, grad_sum, divisor, nullptr, c.momentum ? buf : nullptr, n);
}

}  // namespace eps
