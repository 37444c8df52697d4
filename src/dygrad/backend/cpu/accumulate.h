// The one fixed-order accumulator of the CPU kernels: n values folded into 8 independent lanes (so the
// compiler vectorises the loop without reassociating anything), the lanes merged in a fixed tree. The order
// depends on n alone, never on the thread count or the data, so every sum, dot, maximum and norm built on it
// is bitwise reproducible (docs/threading.md); 8 lanes also add 8 shorter chains, more accurate than one.
//
// Order: value(i) for i < 8 * floor(n / 8) goes to lane i % 8, the tail to lane 0, in increasing i; then
// ((l0 . l1) . (l2 . l3)) . ((l4 . l5) . (l6 . l7)) with . = merge.
//
// The row extremum (lane_extremum) lives here too: the eager kernels (reduce.h, row_extremum) and dygrad.jit's
// generated code (docs/jit-fusion.md) both fold a contiguous row's maximum with it, so they pick the same element
// among equal values (+0 and -0) and the same NaN.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dg::cpu {

// The widest vector register of the kernel level this file is compiled for, in bytes (16 at the baseline, 32 at
// avx2, 64 at avx512). Code with explicit GCC vectors that selects (`a > b ? a : b`) must not exceed it: a select
// on a wider vector is lowered element by element (at avx2, the softmax's 64-byte row maximum ran as scalar
// compares and moves, 4x the whole softmax's time at avx512). Arithmetic on wider vectors splits cleanly.
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif

// Folds value(i), i in [0, n), with acc = step(acc, value(i)) from `init` in every lane, lanes merged as above.
// A: the accumulator type; value(i) returns an A (or converts to one).
template <typename A, typename Value, typename Step, typename Merge>
inline __attribute__((always_inline)) A eight_lane_reduce(int64_t n, A init, Value&& value, Step&& step,
                                                          Merge&& merge) {
  A lane[8] = {init, init, init, init, init, init, init, init};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = step(lane[k], static_cast<A>(value(i + k)));
  for (; i < n; ++i) lane[0] = step(lane[0], static_cast<A>(value(i)));
  return merge(merge(merge(lane[0], lane[1]), merge(lane[2], lane[3])),
               merge(merge(lane[4], lane[5]), merge(lane[6], lane[7])));
}

// The sum of value(i) for i in [0, n) in the order above.
template <typename A, typename Value>
inline __attribute__((always_inline)) A eight_lane_sum(int64_t n, Value&& value) {
  auto plus = [](A a, A b) { return a + b; };
  return eight_lane_reduce<A>(n, A(0), value, plus, plus);
}

// The merge tree of eight lanes of sums, for loops that keep their own lanes (several sums in one pass).
template <typename A>
inline A eight_lane_merge(const A* l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// The sums of N runs of n contiguous values each (run c at x + c * n), each in the order above (value i of a run
// to lane i % 8, the tail to lane 0, the same merge tree), computed together: N independent chains of additions
// where one run at a time is a single chain, latency-bound (the full sum of 4M float32 values took 1.6x torch's
// time at avx2 and 4.2x at avx512). Bitwise equal to eight_lane_sum on each run.
template <int N, typename A>
inline void eight_lane_sums(const A* x, int64_t n, A* out) {
  A lane[N][8] = {};
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8)
    for (int c = 0; c < N; ++c)
      for (int k = 0; k < 8; ++k) lane[c][k] += x[c * n + i + k];
  for (int c = 0; c < N; ++c)
    for (int64_t i = body; i < n; ++i) lane[c][0] += x[c * n + i];
  for (int c = 0; c < N; ++c) out[c] = eight_lane_merge(lane[c]);
}

// The larger (IsMax) or smaller of a and b, NaN if either is NaN (torch.max propagates NaN).
template <bool IsMax, typename C>
C extremum_step(C best, C v) {
  const bool better = IsMax ? v > best : v < best;
  if constexpr (std::is_floating_point_v<C>) return (better || v != v) ? v : best;
  else return better ? v : best;
}

// The extremum of n >= 1 contiguous float32/float64 values, NaN (the quiet NaN) if any is NaN: explicit SIMD
// lanes of the level's width (GCC/Clang vector extensions: the compiler does not vectorise a NaN-propagating
// select by itself), value i to lane i % width over whole vectors, the lanes folded in order, then the tail in
// order. Among equal values the fold keeps the earlier one, so the order above decides between +0 and -0.
template <bool IsMax, typename C>
inline C lane_extremum(const C* x, int64_t n) {
  constexpr int kWidth = kVectorBytes / sizeof(C);  // a select: no wider than the level's registers
  typedef C Lanes __attribute__((vector_size(kVectorBytes)));
  Lanes best, nan_lanes;
  for (int k = 0; k < kWidth; ++k) {
    best[k] = x[0];
    nan_lanes[k] = C(0);
  }
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof(Lanes));
    best = (IsMax ? v > best : v < best) ? v : best;
    nan_lanes = (v != v) ? v : nan_lanes;  // remembers a NaN the comparisons drop
  }
  C result = best[0];
  bool has_nan = false;
  for (int k = 0; k < kWidth; ++k) {
    result = extremum_step<IsMax>(result, static_cast<C>(best[k]));
    has_nan |= nan_lanes[k] != nan_lanes[k];
  }
  for (; i < n; ++i) result = extremum_step<IsMax>(result, x[i]);
  return has_nan ? std::numeric_limits<C>::quiet_NaN() : result;
}

}  // namespace dg::cpu
