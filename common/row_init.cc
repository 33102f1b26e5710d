#include "common/row_init.h"

#include <algorithm>
#include <cmath>

namespace eps {
namespace {

// ---- the initializer ------------------------------------------------------------

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t Mix(uint64_t z) { return Finalize(z + kGolden); }
uint64_t Next(uint64_t* state) {
  *state += kGolden;
  return Finalize(*state);
}
// [0, 1) with 53 random bits: exact.
double Unit(uint64_t u) { return static_cast<double>(u >> 11) * 0x1p-53; }

// ln(x) for finite x > 0 from + - * / and frexp (exact): x = m * 2^e with m in
// [1/sqrt(2), sqrt(2)), ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by
// the series to s^29 in Horner's form (truncation below 1e-23 relative).
double Log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // [0.5, 1)
  if (m < 0.7071067811865476) {
    m = m * 2;
    e = e - 1;
  }
  const double s = (m - 1) / (m + 1);
  const double s2 = s * s;
  double p = 1.0 / 29;
  for (int k = 13; k >= 0; --k) p = p * s2 + 1.0 / (2 * k + 1);
  return static_cast<double>(e) * 0.6931471805599453 + 2 * s * p;
}

}  // namespace

void InitialRow(const RowInitializer& init, uint64_t seed, uint32_t table, uint64_t row, float* out,
                size_t dim) {
  uint64_t state = Mix(Mix(Mix(seed) ^ table) ^ row);
  switch (init.kind) {
    case RowInitializer::Kind::kZeros:
      std::fill(out, out + dim, 0.0f);
      return;
    case RowInitializer::Kind::kUniform:
      for (size_t j = 0; j < dim; ++j) {
        out[j] = static_cast<float>(init.low + (init.high - init.low) * Unit(Next(&state)));
      }
      return;
    case RowInitializer::Kind::kNormal:
      for (size_t j = 0; j < dim; j += 2) {
        double a = 0, b = 0, s = 0;
        do {
          a = 2 * Unit(Next(&state)) - 1;
          b = 2 * Unit(Next(&state)) - 1;
          s = a * a + b * b;
        } while (!(s > 0 && s < 1));
        const double f = std::sqrt(-2 * Log(s) / s);
        out[j] = static_cast<float>(init.mean + init.stddev * a * f);
        if (j + 1 < dim) out[j + 1] = static_cast<float>(init.mean + init.stddev * b * f);
      }
      return;
  }
}

}  // namespace eps
