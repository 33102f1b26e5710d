// Included last by a translation unit whose float arithmetic must round as
// written (the optimizers, bit for bit against libtorch): no contraction of a
// multiply and an add into a fused multiply-add, but for explicit std::fma.
//
// Why: with -ffp-contract=fast (GCC's default outside ISO C) and FMA available
// (-march=native, or an "fma" function clone) GCC may fuse a multiply into a
// later add even across statements, e.g. AdamW's p * (1 - lr * wd) into the
// addcdiv that follows, where libtorch rounds the product first. The pragma
// holds for every function defined after it in the translation unit (checked to
// take effect). Not a header to include from other headers.
//
// It also names EPS_OPTIMIZER_CLONES, for the optimizers' loops: they run once
// per chunk (or row) per step, and without -mfma std::fma is a libm call per
// element. The "fma" clone inlines it as one instruction and lets GCC vectorize
// (with -fno-math-errno on the file, also sqrt). Both clones compute the same
// bits: a fused multiply-add, a division and a square root are correctly
// rounded wherever they are computed.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define EPS_OPTIMIZER_CLONES __attribute__((target_clones("default", "fma")))
#else
#define EPS_OPTIMIZER_CLONES
#endif
