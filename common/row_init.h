// The initial value of a sparse table's row (server/sparse_table.h): a row no
// step has touched is stored nowhere, and both the shards (which step it) and
// the workers (which hold a table whole and pull only the rows that changed)
// compute its value from (seed, table, row) alone, bit for bit the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace eps {

// How a row that was never touched is initialized: a pure function of (seed,
// table id, row id), written down in InitialRow.
struct RowInitializer {
  enum class Kind { kNormal, kUniform, kZeros };
  Kind kind = Kind::kNormal;    // kNormal(0, 1) is nn.Embedding's default
  double mean = 0, stddev = 1;  // kNormal
  double low = -1, high = 1;    // kUniform: [low, high)
};

// The initial value of row `row` of table `table` under `seed`, written to
// out[0, dim). Exactly:
//   state = Mix(Mix(Mix(seed) ^ table) ^ row), Mix(z) the SplitMix64 output
//   function of z + 0x9E3779B97F4A7C15; then a SplitMix64 stream from state
//   gives 64-bit draws u_1, u_2, ... (state += 0x9E3779B97F4A7C15, output Mix).
//   kUniform: element j = float(low + (high - low) * ((u_j >> 11) * 2^-53)).
//   kNormal: Marsaglia's polar method in double, two elements a pair:
//   a = 2 * ((u >> 11) * 2^-53) - 1 and b likewise from the next draw,
//   s = a*a + b*b, retried from the next two draws unless 0 < s < 1;
//   f = sqrt(-2 * Log(s) / s); the elements are float(mean + stddev * a * f)
//   then float(mean + stddev * b * f) (the second dropped past dim). Log is
//   this file's own natural logarithm (frexp and a fixed atanh series, only
//   + - * / and exact scaling: no libm), so the bits never depend on the C
//   library. tests/sparse_reference.py computes the same bits in Python.
// Never std::hash nor a std:: distribution (implementation-defined).
void InitialRow(const RowInitializer& init, uint64_t seed, uint32_t table, uint64_t row, float* out,
                size_t dim);

}  // namespace eps
