// Tests for the wire dtypes (common/wire.h): rounding is IEEE
// round-to-nearest-even, checked against a reference written here from the
// definition, and encoding carries rounded values exactly.
#include "common/wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

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

float Rounded(WireDType d, float x) {
  RoundToWire(d, &x, 1);
  return x;
}

// bf16 by definition: of the two bf16 values around finite x (its upper 16 bits
// and the next one away from zero, fp32's infinity past the largest), the
// nearer in exact arithmetic; on a tie the one whose last kept bit is 0.
float ReferenceBF16(float x) {
  const uint32_t u = Bits(x);
  const uint32_t down = u & 0xffff0000u;
  const uint32_t up = down + 0x10000u;
  const double below = std::fabs(static_cast<double>(FromBits(down)));
  // The value past the largest finite bf16 is infinity: for rounding, 2^128.
  const double above =
      (up & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(FromBits(up));
  const double ax = std::fabs(static_cast<double>(x));
  if (ax - below < above - ax) return FromBits(down);
  if (ax - below > above - ax) return FromBits(up);
  return FromBits((down & 0x10000u) == 0 ? down : up);
}

TEST(Wire, BF16RoundsToNearestEvenLikeTheDefinition) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float x = FromBits(static_cast<uint32_t>(rng()));
    if (!std::isfinite(x)) continue;
    const float r = Rounded(WireDType::kBF16, x);
    ASSERT_EQ(Bits(r), Bits(ReferenceBF16(x))) << std::hexfloat << x;
    ASSERT_EQ(Bits(r) & 0xffffu, 0u);
  }
}

TEST(Wire, BF16HandCases) {
  const float ulp = std::ldexp(1.0f, -7);                      // bf16's spacing in [1, 2)
  EXPECT_EQ(Rounded(WireDType::kBF16, 1.0f + ulp / 2), 1.0f);  // tie: to even (down)
  EXPECT_EQ(Rounded(WireDType::kBF16, 1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);  // tie: to even (up)
  EXPECT_EQ(Rounded(WireDType::kBF16, 1.0f + ulp / 2 + ulp / 64), 1.0f + ulp);
  EXPECT_EQ(Rounded(WireDType::kBF16, std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(Rounded(WireDType::kBF16, -std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Rounded(WireDType::kBF16, std::nanf(""))));
  EXPECT_TRUE(
      std::isnan(Rounded(WireDType::kBF16, FromBits(0x7f800001u))));  // a NaN that truncates to inf
  EXPECT_EQ(Bits(Rounded(WireDType::kBF16, -0.0f)), Bits(-0.0f));
}

TEST(Wire, FP16HandCases) {
  const float ulp = std::ldexp(1.0f, -10);  // fp16's spacing in [1, 2)
  EXPECT_EQ(Rounded(WireDType::kFP16, 1.0f + ulp / 2), 1.0f);
  EXPECT_EQ(Rounded(WireDType::kFP16, 1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);
  EXPECT_EQ(Rounded(WireDType::kFP16, 65504.0f), 65504.0f);  // largest fp16
  EXPECT_EQ(Rounded(WireDType::kFP16, 65519.0f), 65504.0f);  // below the tie
  EXPECT_EQ(Rounded(WireDType::kFP16, 65520.0f),
            std::numeric_limits<float>::infinity());                       // tie: to even (inf)
  EXPECT_EQ(Rounded(WireDType::kFP16, 1e-7f), 2 * std::ldexp(1.0f, -24));  // subnormal
  EXPECT_EQ(Rounded(WireDType::kFP16, 2e-8f), 0.0f);                       // below half the least
  EXPECT_TRUE(std::isnan(Rounded(WireDType::kFP16, std::nanf(""))));
}

TEST(Wire, EncodingCarriesRoundedValuesExactlyAndRoundingIsIdempotent) {
  std::mt19937_64 rng(2);
  for (WireDType d : {WireDType::kFP32, WireDType::kBF16, WireDType::kFP16}) {
    std::vector<float> x(100000);
    for (float& f : x)
      f = static_cast<float>(std::ldexp(static_cast<double>(rng() >> 11) / 9007199254740992.0 - 0.5,
                                        static_cast<int>(rng() % 40) - 30));
    std::vector<uint8_t> wire(x.size() * WireDTypeSize(d));
    std::vector<float> back(x.size());
    EncodeWire(d, x.data(), x.size(), wire.data());
    DecodeWire(d, wire.data(), x.size(), back.data());
    std::vector<float> rounded = x;
    RoundToWire(d, rounded.data(), rounded.size());
    ASSERT_EQ(0, std::memcmp(back.data(), rounded.data(), x.size() * sizeof(float)))
        << WireDTypeName(d);
    std::vector<float> twice = rounded;
    RoundToWire(d, twice.data(), twice.size());
    ASSERT_EQ(0, std::memcmp(twice.data(), rounded.data(), x.size() * sizeof(float)))
        << WireDTypeName(d);
    if (d == WireDType::kFP32) {
      EXPECT_EQ(0, std::memcmp(rounded.data(), x.data(), x.size() * sizeof(float)));
    } else {
      EXPECT_NE(0, std::memcmp(rounded.data(), x.data(), x.size() * sizeof(float)));
    }
  }
}

TEST(Wire, NamesAndCodes) {
  for (WireDType d : {WireDType::kFP32, WireDType::kBF16, WireDType::kFP16}) {
    auto parsed = ParseWireDType(WireDTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
    auto coded = WireDTypeFromCode(static_cast<uint32_t>(d));
    ASSERT_TRUE(coded.ok());
    EXPECT_EQ(*coded, d);
  }
  EXPECT_EQ(WireDTypeSize(WireDType::kFP32), 4u);
  EXPECT_EQ(WireDTypeSize(WireDType::kBF16), 2u);
  EXPECT_EQ(WireDTypeSize(WireDType::kFP16), 2u);
  EXPECT_EQ(ParseWireDType("float16").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseWireDType("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WireDTypeFromCode(3).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eps
