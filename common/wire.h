// Wire dtypes: the number formats gradients and weights may travel in
// (`--wire_dtype`). fp32 is exact; bf16 and fp16 halve the bytes and change the
// numerics against fp32, identically wherever a value is computed, so digests
// stay independent of placement:
// - gradients: every node of the canonical tree (tree.h), leaves included, is
//   rounded to the wire dtype after it is formed, on workers and on shards
//   alike; a pushed block is then exactly representable and travels without
//   further loss. The shard divides the rounded root by V and optimizes in fp32.
// - weights: shards keep fp32 master weights and optimizer state; workers
//   compute with each version rounded once to the wire dtype.
// Rounding is IEEE round-to-nearest-even. fp16 overflows to infinity beyond
// 65504 and loses precision below 6.1e-5 (subnormals); bf16 keeps fp32's range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace eps {

enum class WireDType : uint8_t { kFP32 = 0, kBF16 = 1, kFP16 = 2 };

// "fp32", "bf16", "fp16"; InvalidArgument otherwise.
StatusOr<WireDType> ParseWireDType(const std::string& name);
// InvalidArgument for a value that names no WireDType (from the network or a file).
StatusOr<WireDType> WireDTypeFromCode(uint32_t code);
const char* WireDTypeName(WireDType d);
// Bytes per element: 4 or 2.
size_t WireDTypeSize(WireDType d);

// Rounds each of the n floats in place to the nearest value `d` represents
// (identity for fp32). Idempotent.
void RoundToWire(WireDType d, float* data, size_t n);
// Writes n floats as `d` (n * WireDTypeSize(d) bytes, rounding as RoundToWire).
void EncodeWire(WireDType d, const float* in, size_t n, void* out);
// Reads n values of `d` into floats (exact).
void DecodeWire(WireDType d, const void* in, size_t n, float* out);

}  // namespace eps
