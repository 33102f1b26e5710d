// Elementwise optimizers and learning-rate schedules applied by a server shard.
//
// A shard owns fp32 chunks of every parameter tensor. When the barrier of step t completes it
// calls ApplyOptimizer once per chunk with g = sum / V. The arithmetic reproduces libtorch
// 1.13's C++ torch::optim::SGD, Adam and AdamW on an x86-64 CPU with FMA bit for bit: the same
// float/double roundings, the same order of operations, and a fused multiply-add exactly where
// ATen's vectorized kernels fuse. The result is a pure function of the inputs (it never depends
// on threads, chunking, vector width or the CPU that runs it), which the consistency contract of
// docs/design.md needs.
//
// Everything here is libtorch-free and thread-compatible: functions keep no hidden state;
// concurrent calls on distinct OptimizerState objects and parameter buffers are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/parallel_for.h"
#include "common/status.h"
#include "schema/messages.h"

namespace eps {

// kSgd covers plain SGD, SGD with momentum (and dampening) and Nesterov momentum. kAdagrad is
// torch::optim::Adagrad with lr_decay 0 and initial_accumulator_value 0 (their defaults).
enum class OptimizerKind { kSgd, kAdam, kAdamW, kAdagrad };

// kConstant: lr.  kStep: lr * gamma^floor(t / step_size).
// kCosine: linear warmup lr * (t + 1) / warmup_steps for t < warmup_steps, then cosine decay from
// lr (at t = warmup_steps) to min_lr (at t = total_steps), and min_lr after that.
enum class ScheduleKind { kConstant, kStep, kCosine };

// The optimizer and schedule of a job, part of its job spec. A field that does not apply to the
// chosen kind / schedule is ignored, except the ones ValidateOptimizerOptions rejects because
// ignoring them would surprise (momentum for Adam, warmup without the cosine schedule).
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.01;
  // SGD only (torch::optim::SGDOptions).
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  // SGD, Adam and Adagrad: L2 penalty added to the gradient. AdamW: decoupled decay
  // p *= 1 - lr * wd.
  double weight_decay = 0;
  // Adam / AdamW only (torch::optim::AdamOptions; amsgrad is not supported); eps Adagrad's too
  // (torch's default there is 1e-10, the job's --eps 1e-8: give it).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;

  ScheduleKind schedule = ScheduleKind::kConstant;
  int64_t step_size = 0;     // kStep: steps between decays, > 0.
  double gamma = 0.1;        // kStep: decay factor, > 0.
  int64_t warmup_steps = 0;  // kCosine: >= 0.
  double min_lr = 0;         // kCosine: in [0, lr].
  int64_t total_steps = 0;   // kCosine: > warmup_steps.
};

// Returns InvalidArgument naming the first bad field (non-finite values, lr <= 0, momentum < 0,
// dampening outside [0, 1], nesterov without momentum or with dampening, weight_decay < 0,
// betas outside [0, 1), eps <= 0, SGD-only fields set for Adam, a step schedule with
// step_size <= 0 or gamma <= 0, a cosine schedule with total_steps <= warmup_steps or min_lr
// outside [0, lr], warmup with another schedule). Options from a user must pass this before
// LearningRate or ApplyOptimizer sees them.
Status ValidateOptimizerOptions(const OptimizerOptions& options);

// The job spec's optimizer section as options, validated (the shards' check, and the
// coordinator's at start: a job whose optimizer a shard would refuse never starts).
StatusOr<OptimizerOptions> OptimizerOptionsFromSpec(const OptimizerSpec& spec, int64_t total_steps);

// "sgd", "adam", "adamw", "adagrad" and "constant", "step", "cosine" (exact, lower case).
StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);
StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);
// The inverse of the parsers; "unknown" for a value outside the enum (e.g. a cast from the wire).
const char* OptimizerKindName(OptimizerKind kind);
const char* ScheduleKindName(ScheduleKind schedule);

// The learning rate used by step `step` (0-based) under validated `options`. A negative step is
// treated as 0. Deterministic: the same inputs give the same bits on every machine with the
// same libm.
double LearningRate(const OptimizerOptions& options, int64_t step);

// Per-chunk optimizer state, kept as plain vectors so durable storage can save and restore it.
// SGD with momentum: slot0 = momentum buffer. Adam / AdamW: slot0 = exp_avg, slot1 = exp_avg_sq.
// Adagrad: slot0 = the sum of squared gradients.
// Plain SGD uses no slot. `initialized` is false until the first ApplyOptimizer (it plays the
// role of libtorch's "no state yet for this parameter"); after it, each used slot holds exactly
// n values. A state restored from storage must be checked against NumOptimizerSlots and n by
// the caller before use.
struct OptimizerState {
  std::vector<float> slot0;
  std::vector<float> slot1;
  bool initialized = false;
};

// How many slots of OptimizerState `options` uses: 0, 1 or 2.
int NumOptimizerSlots(const OptimizerOptions& options);

// Applies step `step` (0-based; Adam's bias correction uses step + 1, like libtorch's state
// step count) to the n parameters `params` with gradient `grad`, at learning rate
// LearningRate(options, step), updating `state` (allocated on first use). `params` and `grad`
// must not overlap. Preconditions (bugs if broken, checked with assert): options validated,
// step >= 0, state consistent with options and n. A pure function of its inputs;
// thread-compatible.
void ApplyOptimizer(const OptimizerOptions& options, int64_t step, float* params, const float* grad,
                    size_t n, OptimizerState* state);

// Where a step reads the optimizer slots' values before it, when not from the state it
// writes them to: n floats per slot the optimizer uses (null for the others).
struct SlotsBefore {
  const float* slot0 = nullptr;
  const float* slot1 = nullptr;
};

// The same step with gradient grad_sum[i] / divisor (the float division a shard's mean of V
// VWs is), written to `out`: the bits of dividing first and stepping in place, without
// either pass. `out` may be `params`, `grad_sum` or a buffer overlapping neither; the
// optimizer state must not overlap any of them. With `parallel`, the elements are cut
// over its threads in ranges of at least kParallelGrain: the same bits.
// With `before`, the slots' old values are read from there and the new ones written to
// `state`'s slots (initialized, n floats each, overlapping nothing else): the bits of copying
// `before` into `state` and stepping in place, without the copy's pass. What a shard steps
// with while a checkpoint still holds its slots (server/shard_state.h, ShardSnapshot).
void ApplyOptimizer(const OptimizerOptions& options, int64_t step, const float* params,
                    const float* grad_sum, float divisor, float* out, size_t n,
                    OptimizerState* state, ParallelFor* parallel = nullptr,
                    const SlotsBefore* before = nullptr);

// One row of a sparse table stepped by the SGD family (plain, momentum, dampening, Nesterov,
// L2 weight decay; o.kind must be kSgd) at learning rate `lr`: the arithmetic of ApplyOptimizer
// on n elements with gradient grad_sum[i] / divisor, in place on `params`. `buf` is the row's
// momentum buffer (n floats, unused without momentum), taken as empty when `first` (the row's
// first step: the buffer becomes the gradient, as libtorch's first step does). The lazy,
// row-wise form of SGD (server/sparse_table.h): rows no step touches keep their buffer.
void ApplySgdRow(const OptimizerOptions& o, double lr, bool first, float* params,
                 const float* grad_sum, float divisor, float* buf, size_t n);

// The fewest elements worth a thread of their own (about 64 KiB of each buffer).
inline constexpr size_t kParallelGrain = 16384;

}  // namespace eps
