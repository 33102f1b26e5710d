#include "common/wire.h"

#include <cstring>

namespace eps {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is fp32's upper half: round the lower half away, to nearest, ties to even.
uint16_t ToBF16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN (quiet)
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float FromBF16(uint16_t h) { return FromBits(uint32_t{h} << 16); }

// fp16 through the compiler's IEEE conversions (GCC and Clang's _Float16).
// Clang before 15 has no _Float16 on x86-64; its __fp16 converts the same IEEE
// way, through compiler-rt's builtins (the fuzz build links them).
#if defined(__clang__) && __clang_major__ < 15
using Half = __fp16;
#else
using Half = _Float16;
#endif

uint16_t ToFP16(float f) {
  const Half h = static_cast<Half>(f);
  uint16_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

float FromFP16(uint16_t bits) {
  Half h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

// The loops below are compiled twice on x86-64: for CPUs with F16C/AVX2 (the
// conversions become single instructions) and for the rest (libgcc's
// software conversion, 30-40x slower); the loader picks one at startup. Both
// round the same IEEE way, so the bits do not depend on the CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#define EPS_WIRE_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define EPS_WIRE_CLONES
#endif

EPS_WIRE_CLONES void RoundFP16(float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(static_cast<Half>(data[i]));
}

EPS_WIRE_CLONES void EncodeFP16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = ToFP16(in[i]);
}

EPS_WIRE_CLONES void DecodeFP16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FromFP16(in[i]);
}

}  // namespace

StatusOr<WireDType> ParseWireDType(const std::string& name) {
  if (name == "fp32") return WireDType::kFP32;
  if (name == "bf16") return WireDType::kBF16;
  if (name == "fp16") return WireDType::kFP16;
  return InvalidArgument("unknown wire dtype '" + name + "' (fp32, bf16 or fp16)");
}

StatusOr<WireDType> WireDTypeFromCode(uint32_t code) {
  if (code > static_cast<uint32_t>(WireDType::kFP16)) {
    return InvalidArgument("unknown wire dtype code " + std::to_string(code));
  }
  return static_cast<WireDType>(code);
}

const char* WireDTypeName(WireDType d) {
  switch (d) {
    case WireDType::kFP32:
      return "fp32";
    case WireDType::kBF16:
      return "bf16";
    case WireDType::kFP16:
      return "fp16";
  }
  return "?";
}

size_t WireDTypeSize(WireDType d) { return d == WireDType::kFP32 ? 4 : 2; }

void RoundToWire(WireDType d, float* data, size_t n) {
  switch (d) {
    case WireDType::kFP32:
      return;
    case WireDType::kBF16:
      for (size_t i = 0; i < n; ++i) data[i] = FromBF16(ToBF16(data[i]));
      return;
    case WireDType::kFP16:
      RoundFP16(data, n);
      return;
  }
}

void EncodeWire(WireDType d, const float* in, size_t n, void* out) {
  auto* half = static_cast<uint16_t*>(out);
  switch (d) {
    case WireDType::kFP32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case WireDType::kBF16:
      for (size_t i = 0; i < n; ++i) half[i] = ToBF16(in[i]);
      return;
    case WireDType::kFP16:
      EncodeFP16(in, n, half);
      return;
  }
}

void DecodeWire(WireDType d, const void* in, size_t n, float* out) {
  const auto* half = static_cast<const uint16_t*>(in);
  switch (d) {
    case WireDType::kFP32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case WireDType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = FromBF16(half[i]);
      return;
    case WireDType::kFP16:
      DecodeFP16(half, n, out);
      return;
  }
}

}  // namespace eps
