// The device-neutral scalar math every backend's kernels share (docs/ops.md, "One scalar math"): the building
// blocks of math/elementary.h, math/activations.h and math/arithmetic.h. A function here computes one element in
// plain arithmetic, so the CPU compiler vectorises loops that call it at any width (128, 256, 512 bits; GCC, no
// intrinsics) and nvcc compiles it for a GPU thread (DG_MATH is `__host__ __device__` there). Headers of this
// layer include only the standard library.
//
// Contraction is explicit. Every dygrad target compiles with -ffp-contract=off (CMakeLists.txt), so `a * b + c`
// is two roundings everywhere, and a fused multiply-add happens only where `fmadd` asks for one: then the avx2 and
// avx512 kernel levels and a GPU compute the same bits, and the baseline level (x86-64-v2, no FMA) multiplies and
// adds (docs/ops.md says which kernels that makes bitwise equal across levels).
#pragma once
#include <cmath>
#include <cstdint>

// Forced inline: a loop that calls these vectorises only when the whole body is visible in it.
#if defined(__CUDACC__)
#define DG_MATH __host__ __device__ __forceinline__
#else
#define DG_MATH inline __attribute__((always_inline))
#endif

// True where the target has a fused multiply-add instruction: x86 with FMA (the avx2 and avx512 levels), every
// aarch64 CPU, a GPU.
#if defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA) || defined(__CUDA_ARCH__)
#define DG_MATH_HAS_FMA 1
#else
#define DG_MATH_HAS_FMA 0
#endif

namespace dg::math {

inline constexpr bool kHasFma = DG_MATH_HAS_FMA;

// float's limits as constants device code can read (std::numeric_limits' functions are host-only there).
inline constexpr float kFloatMin = 1.17549435e-38f;  // FLT_MIN, the smallest normal float
inline constexpr float kInfinity = __builtin_huge_valf();
inline constexpr float kQuietNan = __builtin_nanf("");

// The bits of a float and back (std::bit_cast, which device code cannot call without relaxed constexpr).
DG_MATH uint32_t bits_of(float x) { return __builtin_bit_cast(uint32_t, x); }
DG_MATH float float_of(uint32_t b) { return __builtin_bit_cast(float, b); }

// a * b + c: one fma, rounded once, where the target has it; else multiply then add, rounded twice (std::fma
// without the instruction is a libm call, ~20x a vector multiply-add, and no loop that calls it vectorises). The
// functions of this layer stay within their documented ulps either way (tests/cpp/test_vec_math.cpp runs at the
// baseline level too).
DG_MATH float fmadd(float a, float b, float c) {
#if DG_MATH_HAS_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}
DG_MATH double fmadd(double a, double b, double c) {
#if DG_MATH_HAS_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// The same over a GCC vector of floats (`float __attribute__((vector_size(N)))`): one packed fma per register where
// the target has it (the lane loop becomes one instruction), multiply then add otherwise.
template <typename Vec>
DG_MATH Vec fmadd_lanes(Vec a, Vec b, Vec c) {
#if DG_MATH_HAS_FMA
  Vec r;
  for (int l = 0; l < int(sizeof(Vec) / sizeof(a[0])); ++l) r[l] = std::fma(a[l], b[l], c[l]);
  return r;
#else
  return a * b + c;
#endif
}

// The rounding error of a * b, exactly: a * b == round(a * b) + mul_error(a, b) (no overflow or underflow). One
// fma where the target has it; else Dekker's product (Veltkamp's split of each operand into 12-bit halves, whose
// products are exact), the same value in plain vectorisable arithmetic.
DG_MATH float mul_error(float a, float b) {
  const float p = a * b;
#if DG_MATH_HAS_FMA
  return std::fma(a, b, -p);
#else
  constexpr float kSplit = 4097.0f;  // 2^12 + 1
  const float ca = kSplit * a, cb = kSplit * b;
  const float a_hi = ca - (ca - a), b_hi = cb - (cb - b);
  const float a_lo = a - a_hi, b_lo = b - b_hi;
  return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
#endif
}

// x clamped to [lo, hi], lo < 0 < hi, as two integer minima of the bit patterns, one vector instruction each (GCC
// compiles a float `x < hi ? x : hi` into compares and blends: it keeps nan's semantics, and minps does not): the
// signed minimum with hi orders non-negative floats as floats and keeps every negative one, the unsigned minimum
// with lo orders negative floats by magnitude and keeps every non-negative one. A nan becomes hi or lo: for
// clamping before a final nan fix-up (exp).
DG_MATH float clamp_by_bits(float x, float lo, float hi) {
  const int32_t below_hi = static_cast<int32_t>(bits_of(x)) < static_cast<int32_t>(bits_of(hi))
                               ? static_cast<int32_t>(bits_of(x)) : static_cast<int32_t>(bits_of(hi));
  const uint32_t u = static_cast<uint32_t>(below_hi);
  return float_of(u < bits_of(lo) ? u : bits_of(lo));
}

}  // namespace dg::math
