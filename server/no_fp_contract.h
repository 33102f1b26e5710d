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
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
