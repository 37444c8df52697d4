// The row reductions of dygrad.jit's row programs that read a whole contiguous row after a pass (docs/jit-fusion.md,
// runtime/fused_program.h): each computes what eager's kernel computes on its row path for one row, in its order,
// so a fused reduction has eager's bits. Called by the generated code (jit/fusion_codegen.cpp) and the interpreter
// (fused_jit.cpp); the eager kernels they mirror are named on each. A row here is n >= 2 contiguous float32/float64
// values (the fusion pass takes no other: jit/fusion.cpp, row_reduction_at).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/math/elementary.h"

namespace dg::cpu {

// max(dim=-1).values / min(dim=-1).values (reduce_minmax.cpp, first_extremum on a contiguous row): the row's
// extremum (lane_extremum), then the first element equal to it, or the first NaN, whose value is returned. So among
// +0 and -0 the first of them in the row wins (amax's lane order may pick the other), and a NaN keeps its payload.
// The search tests blocks of 16 elements at once, then finds the element inside the first block holding one: the
// same element, since it is the first (rows of 256 float32 at -O2: 0.99 ms per 12288 rows, against 1.11 for eager's
// element by element search and 0.60 for the extremum alone).
template <bool IsMax, typename C>
inline C first_extremum_value(const C* x, int64_t n) {
  const C value = lane_extremum<IsMax, C>(x, n);
  const bool nan = value != value;
  constexpr int64_t kBlock = 16;
  int64_t r = 0;
  for (; r + kBlock <= n; r += kBlock) {
    int found = 0;
    for (int64_t k = 0; k < kBlock; ++k) found |= nan ? x[r + k] != x[r + k] : x[r + k] == value;
    if (found) break;
  }
  while (nan ? x[r] == x[r] : x[r] != value) ++r;
  return x[r];
}

// var / std over the row (reduce.cpp, var_kernel on a contiguous row): the mean and then the squared deviations,
// both accumulated in float64 in the eight-lane order, divided by max(n - correction, 0); the square root for std.
template <typename T>
inline T row_variance(const T* x, int64_t n, double correction, bool standard_deviation) {
  const double count = static_cast<double>(n);
  const double divisor = std::max(count - correction, 0.0);
  auto value = [x](int64_t i) { return static_cast<double>(x[i]); };
  auto plus = [](double a, double b) { return a + b; };
  const double mean = eight_lane_reduce<double>(n, 0.0, value, plus, plus) / count;
  const double squares = eight_lane_reduce<double>(
      n, 0.0, value, [mean](double acc, double v) { return acc + (v - mean) * (v - mean); }, plus);
  const double v = squares / divisor;
  return static_cast<T>(standard_deviation ? std::sqrt(v) : v);
}

// logsumexp over the row (reduce.cpp, logsumexp_kernel on a contiguous row): m = the row's maximum (lane_extremum:
// NaN if any is NaN); a row whose maximum is not finite gives m; else m + log(s), s = the sum of exp(x - m) in the
// eight-lane order (exp(x[i] - m) to lane i % 8, the tail to lane 0, the same merge tree). The exps are computed a
// block at a time into a buffer (a loop the compiler vectorises at the level's full width) and then added into the
// lanes in that order: the same additions, in the same order, as eager's fold.
template <typename T>
inline T row_logsumexp(const T* x, int64_t n) {
  const T m = lane_extremum<true, T>(x, n);
  if (!std::isfinite(m)) return m;
  constexpr int64_t kBlock = 256;  // a multiple of 8: lane k keeps receiving the elements i with i % 8 == k
  T buffer[kBlock];
  T lane[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};
  const int64_t body = n - n % 8;
  for (int64_t b = 0; b < body; b += kBlock) {
    const int64_t len = std::min(kBlock, body - b);
    for (int64_t j = 0; j < len; ++j) buffer[j] = math::exp(x[b + j] - m);
    for (int64_t j = 0; j < len; j += 8)
      for (int k = 0; k < 8; ++k) lane[k] = lane[k] + buffer[j + k];
  }
  for (int64_t i = body; i < n; ++i) lane[0] = lane[0] + math::exp(x[i] - m);
  const T s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  return m + std::log(s);
}

}  // namespace dg::cpu
