// Elementary functions of one float (math/scalar.h: device-neutral, vectorisable). The float32 versions are
// branch-free range reduction plus a polynomial in plain float arithmetic, so loops that call them vectorise (no
// libm calls); they stay within a few ulp of the correctly rounded result (tests/cpp/test_vec_math.cpp and
// test_math.cpp check them against float64: exp over every float, in ulp). The float64 versions call std::
// functions. No -ffast-math is assumed: inf, nan, signed zero and subnormal results are handled explicitly.
//
// Notation: x = n*ln2 + r with |r| <= ln2/2 (exp), x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (log),
// x = k*pi/2 + r with |r| <= pi/4 (sin, cos).
#pragma once
#include <cmath>
#include <cstdint>

#include "dygrad/math/scalar.h"

namespace dg::math {

namespace detail {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;          // ln2's top 15 bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = 1.42860682030941723212e-6f;  // ln2 - kLn2Hi
inline constexpr float kRoundMagic = 12582912.0f;            // 1.5 * 2^23: (v + magic) - magic rounds v
inline constexpr int32_t kRoundMagicBits = 0x4B400000;       // its bits: bits(v + magic) - this == round(v)

// 2^n for integral n in [-126, 127], built from the exponent bits.
DG_MATH float pow2i(int32_t n) { return float_of(static_cast<uint32_t>(n + 127) << 23); }

// x * log2e rounded to the nearest integer, as t = x * log2e + 1.5 * 2^23 (one fma where the target has it):
// n = t - magic as a float, and as an integer from t's bits (no float-to-int conversion; |x * log2e| < 2^22).
struct Rounded {
  float t;  // the rounding sum
  DG_MATH float n() const { return t - kRoundMagic; }
  DG_MATH int32_t n_int() const { return static_cast<int32_t>(bits_of(t)) - kRoundMagicBits; }
};
DG_MATH Rounded round_log2(float x) { return {fmadd(x, kLog2e, kRoundMagic)}; }

// r = x - n*ln2 in two steps (Cody and Waite): n * kLn2Hi is exact, so the first step loses nothing.
DG_MATH float reduce_ln2(float x, float n) { return fmadd(-n, kLn2Lo, fmadd(-n, kLn2Hi, x)); }

// exp(r) - 1 for |r| <= ln2/2: Taylor series to r^8 (truncation error below 2^-30 relative).
DG_MATH float expm1_reduced(float r) {
  float p = 2.48015873e-5f;         // 1/8!
  p = fmadd(p, r, 1.98412698e-4f);  // 1/7!
  p = fmadd(p, r, 1.38888889e-3f);  // 1/6!
  p = fmadd(p, r, 8.33333333e-3f);  // 1/5!
  p = fmadd(p, r, 4.16666667e-2f);  // 1/4!
  p = fmadd(p, r, 1.66666667e-1f);  // 1/3!
  p = fmadd(p, r, 0.5f);
  return fmadd(p * r, r, r);
}
}  // namespace detail

// exp(x) for every float, rounded like libm at both ends: results below FLT_MIN are subnormal (gradual
// underflow, rounded once: 2^n is applied in two halves, each a normal float), exp(x > 88.72) = inf,
// exp(-inf) = 0, exp(nan) = nan. Within 1 ulp of float64 std::exp over every float (tests/cpp/test_math.cpp,
// "ExpFloat32"). The clamp to [-104, 89] is two integer minima (a nan becomes a bound there, so every later step is
// finite, and comes back at the end).
DG_MATH float exp(float x) {
  using namespace detail;
  const float clamped = clamp_by_bits(x, -104.0f, 89.0f);
  const Rounded n = round_log2(clamped);
  const float p = 1.0f + expm1_reduced(reduce_ln2(clamped, n.n()));
  const int32_t ni = n.n_int(), half = ni >> 1;  // n in [-150, 128]: both halves in [-75, 64]
  const float result = (p * pow2i(half)) * pow2i(ni - half);
  return x != x ? x : result;
}
DG_MATH double exp(double x) { return std::exp(x); }

// The largest float below which exp(x) < FLT_MIN (ln FLT_MIN = -87.3365447...): exp_nonpositive flushes there.
inline constexpr float kExpNormalMin = -87.3365402f;

// exp(x) specialised for the softmax family (arguments x - max(x) <= 0 and log-probabilities): the same
// reduction and polynomial as exp, with 2^n applied in one factor, and results that exp would give as a
// subnormal (x < kExpNormalMin) flushed to 0. So no operation underflows: far-negative inputs (masked -inf
// logits) take no microcode assist (tens of cycles per element on x86). Bitwise equal to exp(x) for x in
// [kExpNormalMin, 88.37] (tests/cpp/test_vec_math.cpp checks every float there); -inf gives 0, nan gives nan;
// above 88.37 (2^n would overflow) the result is undefined. 2^n comes from the rounding sum's bits (its low
// mantissa bits hold n, so bits << 23 == n << 23): no nan fix-up either (a nan x makes p nan, and the product).
// The largest float for which 2^n (n = round(x * log2e)) is a normal float: exp_normal_range's upper bound.
inline constexpr float kExpOneScaleMax = 88.37f;

// exp(x) for x in [kExpNormalMin, kExpOneScaleMax], where the result is normal and 2^n one normal factor: the
// reduction and polynomial of exp, scaled once. Bitwise equal to exp(x) there (the two-factor scaling of exp is
// exact for normal results too); outside, the value is meaningless (the exp kernel recomputes those elements with
// exp, exp_nonpositive clamps first).
DG_MATH float exp_normal_range(float x) {
  using namespace detail;
  const Rounded n = round_log2(x);
  const float p = 1.0f + expm1_reduced(reduce_ln2(x, n.n()));
  return p * float_of((bits_of(n.t) << 23) + (127u << 23));  // 2^n from the rounding sum's low bits
}
DG_MATH bool exp_in_normal_range(float x) { return x >= kExpNormalMin && x <= kExpOneScaleMax; }

DG_MATH float exp_nonpositive(float x) {
  const float clamped = x < kExpNormalMin ? kExpNormalMin : x;  // nan passes unchanged
  return x < kExpNormalMin ? 0.0f : exp_normal_range(clamped);
}
DG_MATH double exp_nonpositive(double x) { return std::exp(x); }

// exp(x) - 1 for x <= 0 (tanh's building block): 2^n * expm1(r) + (2^n - 1), exact for n == 0. A nan x gives nan
// (the callers' own test returns it).
DG_MATH float expm1_nonpositive(float x) {
  using namespace detail;
  const float clamped = clamp_by_bits(x, -20.0f, 1.0f);  // x <= 0; expm1(-20) rounds to -1; a nan becomes a bound
  const Rounded n = round_log2(clamped);
  const float scale = float_of((bits_of(n.t) << 23) + (127u << 23));  // 2^n, n in [-29, 0]
  return fmadd(scale, expm1_reduced(reduce_ln2(clamped, n.n())), scale - 1.0f);
}

namespace detail {
// e * ln2 + log(m) for m in [sqrt(1/2), sqrt(2)): f = m - 1, s = f / (2 + f),
// log(m) = 2 atanh(s) = f - s (f - R(s^2)).
DG_MATH float log_scaled(float m, int32_t e) {
  const float f = m - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float z = s * s;
  float poly = 0.222222222f;            // 2/9
  poly = fmadd(poly, z, 0.285714286f);  // 2/7
  poly = fmadd(poly, z, 0.4f);          // 2/5
  poly = fmadd(poly, z, 0.666666667f);  // 2/3
  const float log_m = f - s * (f - poly * z);
  const float ef = static_cast<float>(e);
  return fmadd(ef, kLn2Hi, fmadd(ef, kLn2Lo, log_m));
}

// x = 2^e * m with m in [sqrt(1/2), sqrt(2)) for normal positive x, from its bits alone: 0x3f3504f4 is the float
// just above sqrt(1/2), so bits - 0x3f3504f4 carries into the exponent field exactly when the mantissa is above
// sqrt(2)'s (then e is one more than x's exponent and m is halved).
struct MantissaSplit {
  float m;
  int32_t e;
};
// Unsigned arithmetic throughout: the kernels also call it on negative, zero, infinite and nan arguments (whose
// results they replace), where signed arithmetic on the bits would overflow.
DG_MATH MantissaSplit split_at_sqrt2(float x) {
  const uint32_t bits = bits_of(x);
  const int32_t e = static_cast<int32_t>(bits - 0x3f3504f4u) >> 23;  // arithmetic shift (C++20)
  return {float_of(bits - (static_cast<uint32_t>(e) << 23)), e};
}
}  // namespace detail

// log(x): subnormals scaled by 2^23 first, then detail::split_at_sqrt2 and detail::log_scaled; inf, 0, negatives
// and nan by selects.
DG_MATH float log(float x) {
  using namespace detail;
  const bool subnormal = x < kFloatMin;
  const MantissaSplit split = split_at_sqrt2(subnormal ? x * 8388608.0f : x);  // * 2^23 makes subnormals normal
  float result = log_scaled(split.m, split.e - (subnormal ? 23 : 0));
  result = x == kInfinity ? kInfinity : result;
  result = x == 0.0f ? -kInfinity : result;
  result = x < 0.0f ? kQuietNan : result;
  return x != x ? x : result;
}
DG_MATH double log(double x) { return std::log(x); }

// log(x) for normal positive finite x: log without the subnormal scaling and the special values (bitwise equal to it
// there); outside, the value is meaningless (the log kernel recomputes those elements with log).
DG_MATH float log_normal_range(float x) {
  const detail::MantissaSplit split = detail::split_at_sqrt2(x);
  return detail::log_scaled(split.m, split.e);
}
DG_MATH bool log_in_normal_range(float x) { return x >= kFloatMin && x < kInfinity; }

namespace detail {
// pow's two steps below evaluate their polynomials by Estrin's scheme (pairs, then pairs of pairs): a loop over
// them is bound by the latency of one element's chain (the out-of-order window holds about two iterations of a
// loop this long), and Horner's chain of 8 and 12 fmas was half of it.

// log2(m) for m in [sqrt(1/2), sqrt(2)) in double (pow's logarithm): s = (m - 1) / (m + 1),
// log(m) = 2 atanh(s) = 2s (1 + z/3 + z^2/5 + ... + z^8/17), z = s^2 <= 0.0295; the truncation is below 2^-50.
DG_MATH double log2_reduced(double m) {
  const double f = m - 1.0;  // exact
  const double s = f / (2.0 + f);
  const double z = s * s, z2 = z * z, z4 = z2 * z2;
  const double a = fmadd(fmadd(1.0 / 7, z, 1.0 / 5), z2, fmadd(1.0 / 3, z, 1.0));
  const double b = fmadd(fmadd(1.0 / 15, z, 1.0 / 13), z2, fmadd(1.0 / 11, z, 1.0 / 9));
  const double p = fmadd(fmadd(1.0 / 17, z4, b), z4, a);  // 1 + z/3 + ... + z^8/17
  return s * 2.8853900817779268 * p;                      // 2 / ln 2
}

// 2^t for t in [-1000, 1000] in double (pow's exponential): t = n + r, |r| <= 1/2, 2^r = exp(r ln2) by its Taylor
// series to the 11th power (|r ln2| <= 0.347: the truncation is below 2^-47), times 2^n from the bits of the
// rounding sum t + 1.5 * 2^52 (its low bits hold n; 2^n is a normal double for |n| <= 1022). Outside, the value is
// meaningless but harmless (integer arithmetic wraps).
DG_MATH double exp2_bounded(double t) {
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  const double rounded = t + kMagic;
  const double n = rounded - kMagic;
  const double u = (t - n) * 0.69314718055994531;  // t - n is exact
  const double u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
  const double e0 = fmadd(u, 1.0, 1.0), e1 = fmadd(1.0 / 6, u, 0.5), e2 = fmadd(1.0 / 120, u, 1.0 / 24);
  const double e3 = fmadd(1.0 / 5040, u, 1.0 / 720), e4 = fmadd(1.0 / 362880, u, 1.0 / 40320);
  const double e5 = fmadd(1.0 / 39916800, u, 1.0 / 3628800);
  const double low = fmadd(fmadd(e3, u2, e2), u4, fmadd(e1, u2, e0));  // the terms to u^7
  const double p = fmadd(fmadd(e5, u2, e4), u8, low);
  const uint64_t n_bits = __builtin_bit_cast(uint64_t, rounded) - __builtin_bit_cast(uint64_t, kMagic);  // n mod 2^64
  return p * __builtin_bit_cast(double, (n_bits + 1023u) << 52);
}

// x is an integer (infinities count as even integers), and an odd one.
DG_MATH bool is_integral(float x) { return std::floor(x) == x; }
DG_MATH bool is_odd_integer(float x) { return is_integral(x) & !is_integral(x * 0.5f); }
}  // namespace detail

// x^y (torch.pow on float32), every case of C's powf by selects, vectorisable: |x|^y = 2^(y log2|x|) with both
// steps in double (detail::log2_reduced, detail::exp2_bounded: about 2^-45 relative), so the one rounding to float
// is the only error that matters: within 0.5 ulp plus a hair, where libm's powf allows ~0.8 and torch's vectorised
// one 1 (tests/python/test_math.py checks specials and ranges against float64). Subnormal x are scaled by 2^24
// first; where |y log2|x|| > 300 (the float result is 0 or inf whatever the exact value) and for x = 0 or inf the
// magnitude is chosen by a select at the end, off the chain of arithmetic; the conversion to float rounds subnormal
// results once and overflows to inf. Then: |x| == 1 gives 1 (also for y = +-inf), a negative x with an odd integer
// y the negated power (-0 included), a finite negative x with a non-integer y nan, a nan operand nan, x == 1 or
// y == 0 one (nan included), as C99's pow.
DG_MATH float pow(float x, float y) {
  using namespace detail;
  const float ax = std::fabs(x);
  const bool subnormal = ax < kFloatMin;
  const MantissaSplit split = split_at_sqrt2(subnormal ? ax * 16777216.0f : ax);  // * 2^24 makes subnormals normal
  const double log2_ax =
      static_cast<double>(split.e - (subnormal ? 24 : 0)) + log2_reduced(static_cast<double>(split.m));
  const double t = static_cast<double>(y) * log2_ax;
  float magnitude = static_cast<float>(exp2_bounded(t));
  // 0 or inf: from t's sign for large |t|; for x = 0 or inf from whether |x| and y are on the same side of 1
  // (bitwise & and | on the conditions: && and || would be branches, which the vectoriser gives up on)
  const bool edge = (ax == 0.0f) | (ax == kInfinity);
  const float beyond = (edge ? (ax == kInfinity) == (y > 0.0f) : t > 0.0) ? kInfinity : 0.0f;
  magnitude = edge | (t > 300.0) | (t < -300.0) ? beyond : magnitude;
  magnitude = ax == 1.0f ? 1.0f : magnitude;
  float result = std::signbit(x) & is_odd_integer(y) ? -magnitude : magnitude;
  result = (x < 0.0f) & (x > -kInfinity) & !is_integral(y) ? kQuietNan : result;
  result = (x != x) | (y != y) ? kQuietNan : result;
  return (x == 1.0f) | (y == 0.0f) ? 1.0f : result;
}
DG_MATH double pow(double x, double y) { return std::pow(x, y); }

// log(1 + u) for u in [0, 1] (logaddexp's term): v = 1 + u rounded, plus the rounding's first-order correction
// (u - (v - 1)) / v, so small u keep their digits (u = 0 gives 0, u below 2^-24 gives u).
DG_MATH float log1p_unit(float u) {
  const float v = 1.0f + u;
  return log(v) + (u - (v - 1.0f)) / v;
}
DG_MATH double log1p_unit(double u) { return std::log1p(u); }

// log(exp(a) + exp(b)) = max(a, b) + log1p(exp(-|a - b|)) (torch.logaddexp): nan when either is nan; two equal
// infinities give that infinity (the formula would give nan).
template <typename V>
DG_MATH V logaddexp(V a, V b) {
  const V m = a > b ? a : b;  // nan > b is false: then b + nan below
  const V sum = m + log1p_unit(exp(-std::fabs(a - b)));
  return (a == b && std::fabs(a) == V(kInfinity)) ? a : sum;
}

// exp(x) - 1 for every float (torch.expm1): 2^n * expm1(r) + (2^n - 1) as expm1_nonpositive, for x in [-20, 20]
// (exact reduction for n == 0, so no cancellation near 0); above 20 exp(x) itself (1 is below half an ulp of it);
// below -20 the clamp gives -1 (exp(-20) is below half an ulp of 1). -0 stays -0, nan stays nan, inf gives inf.
DG_MATH float expm1(float x) {
  using namespace detail;
  const float clamped = clamp_by_bits(x, -20.0f, 20.0f);  // a nan becomes a bound (returned below)
  const Rounded n = round_log2(clamped);
  const float scale = float_of((bits_of(n.t) << 23) + (127u << 23));  // 2^n, n in [-29, 29]
  const float result = fmadd(scale, expm1_reduced(reduce_ln2(clamped, n.n())), scale - 1.0f);
  return (x != x) | (x == 0.0f) ? x : (x > 20.0f ? exp(x) : result);
}
DG_MATH double expm1(double x) { return std::expm1(x); }

// log(1 + x) for every float (torch.log1p): u = 1 + x rounded, then log(u) plus the rounding's first-order
// correction (x - (u - 1)) / u, as log1p_unit (u - 1 is exact for u below 2^24; above, the correction is below an
// ulp of the result). Small x keep their digits (|x| below 2^-24 gives x, -0 stays -0); -1 gives -inf, x < -1
// nan, inf inf, nan nan.
// u is never subnormal (the float spacing just above -1 is 2^-24), so the log of its normal range serves, bitwise
// the full log there, and the other values of u (0, negative, inf, nan) are selects: the loop vectorises as the log
// kernel's fast path does (the full log's subnormal scaling kept it 5x slower than log).
DG_MATH float log1p(float x) {
  const float u = 1.0f + x;
  float result = log_normal_range(u) + (x - (u - 1.0f)) / u;
  result = u < 0.0f ? kQuietNan : result;
  result = u == 0.0f ? -kInfinity : result;
  result = x == kInfinity ? kInfinity : result;
  return (x != x) | (x == 0.0f) ? x : result;
}
DG_MATH double log1p(double x) { return std::log1p(x); }

// tanh(x) = sign(x) * -u / (2 + u) with u = expm1(-2|x|): no cancellation near 0, no overflow for large |x|.
DG_MATH float tanh(float x) {
  const float u = expm1_nonpositive(-2.0f * std::fabs(x));
  const float result = std::copysign(-u / (2.0f + u), x);
  return x != x ? x : result;
}
DG_MATH double tanh(double x) { return std::tanh(x); }

// --- sin and cos ------------------------------------------------------------------------------------------------
// One odd polynomial, sin(r) for |r| <= pi/2 (Taylor to r^13, error below 7e-10 relative), after reducing x by a
// multiple of pi/2 that leaves sin: sin x = (-1)^k sin(x - k pi) with k = round(x / pi), and cos x = sin(x + pi/2)
// = (-1)^((q+1)/2) sin(x - q pi/2) with q odd, q = 2 round(x / pi - 1/2) + 1. The reduction is exact or rounded
// once: with FMA, the constant in three floats (72 bits) and the first step exact (k c1 and x are multiples of the
// same power of two and their difference is below 2); without FMA, four parts of 12 significant bits, whose products
// with k < 2^12 are exact. Valid for |x| <= kSinCosMax; larger, inf and nan arguments are the caller's to hand to
// std::sin / std::cos (backend/cpu/unary.cpp does, per block).
#if DG_MATH_HAS_FMA
inline constexpr float kSinCosMax = 131072.0f;  // 2^17: k < 2^16
#else
inline constexpr float kSinCosMax = 4096.0f;  // k < 2^12: the 12-bit parts' products stay exact
#endif

namespace detail {
// x - k c for c = pi (Half false) or pi/2 (Half true), k integral.
template <bool Half>
DG_MATH float reduce_pi(float x, float k) {
#if DG_MATH_HAS_FMA
  constexpr float c1 = Half ? 1.57079637e+00f : 3.14159274e+00f;    // float(c)
  constexpr float c2 = Half ? -4.37113883e-08f : -8.74227766e-08f;  // float(c - c1)
  constexpr float c3 = Half ? -1.71512451e-15f : -3.43024902e-15f;  // float(c - c1 - c2)
  return std::fma(-k, c3, std::fma(-k, c2, std::fma(-k, c1, x)));
#else
  constexpr float c1 = Half ? 1.5703125f : 3.140625f;  // 12 significant bits each
  constexpr float c2 = Half ? 4.83751297e-04f : 9.67502594e-04f;
  constexpr float c3 = Half ? 7.54953362e-08f : 1.50990672e-07f;
  constexpr float c4 = Half ? 2.56334407e-12f : 5.12668814e-12f;  // the rest, rounded
  float r = x - k * c1;
  r = r - k * c2;
  r = r - k * c3;
  return r - k * c4;
#endif
}
// sin(r) for |r| <= pi/2.
DG_MATH float sin_reduced(float r) {
  const float z = r * r;
  float p = 1.60590438e-10f;         // 1/13!
  p = fmadd(p, z, -2.50521084e-8f);  // -1/11!
  p = fmadd(p, z, 2.75573192e-6f);   // 1/9!
  p = fmadd(p, z, -1.98412698e-4f);  // -1/7!
  p = fmadd(p, z, 8.33333333e-3f);   // 1/5!
  p = fmadd(p, z, -1.66666667e-1f);  // -1/3!
  return fmadd(p * z, r, r);
}
}  // namespace detail

// sin(x) and cos(x) for |x| <= kSinCosMax (see above), near their zeros too: within 1.99 ulp of float64 with FMA,
// 2.15 without (every 17th float pattern of the range; tests/cpp/test_vec_math.cpp checks the latter).
DG_MATH float sin_bounded(float x) {
  using namespace detail;
  const float t = fmadd(x, 0.318309886f, kRoundMagic);  // round(x / pi) + magic
  const float s = sin_reduced(reduce_pi<false>(x, t - kRoundMagic));
  const int32_t k = static_cast<int32_t>(bits_of(t)) - kRoundMagicBits;
  // Below 2^-12, sin x rounds to x (x^3/6 is under a quarter ulp): exact, and -0 stays -0 (r + r z p would add +0).
  return std::fabs(x) < 2.44140625e-4f ? x : ((k & 1) ? -s : s);
}
DG_MATH float cos_bounded(float x) {
  using namespace detail;
  const float t = fmadd(x, 0.318309886f, -0.5f) + kRoundMagic;  // round(x / pi - 1/2) + magic
  const float j = t - kRoundMagic;
  const float s = sin_reduced(reduce_pi<true>(x, fmadd(2.0f, j, 1.0f)));
  const int32_t m = static_cast<int32_t>(bits_of(t)) - kRoundMagicBits + 1;  // (q + 1) / 2
  // Below 2^-12, cos x rounds to 1 (x^2/2 is under a quarter ulp): exact there (the polynomial at r = -pi/2 is
  // within an ulp of -1, not -1 itself).
  return std::fabs(x) < 2.44140625e-4f ? 1.0f : ((m & 1) ? -s : s);
}
// True where sin_bounded / cos_bounded apply (false for inf and nan too).
DG_MATH bool sin_cos_in_range(float x) { return std::fabs(x) <= kSinCosMax; }

// The standard normal CDF, Phi(x) = erfc(-x / sqrt2) / 2. With a = |x| / sqrt2:
//   a < 0.75:  erf(a) = a * P(a^2)            (P fitted for relative error 1.5e-9)
//   a >= 0.75: erfc(a) = exp(-a^2) * Q(1/(1+a)) (Q fitted to erfcx on [0.75, 10], 1.8e-9)
// a^2 = x^2/2 is carried with its rounding error (mul_error) so exp(-a^2) keeps full relative accuracy in the tail.
DG_MATH float normal_cdf(float x) {
  const float x2 = x * x;
  const float x2_error = mul_error(x, x);
  const float a = std::fabs(x) * 0.707106781f;
  // erf(a) / a as a polynomial in a^2.
  const float a2 = 0.5f * x2;
  float p = -6.74964103e-4f;
  p = fmadd(p, a2, 5.11436537e-3f);
  p = fmadd(p, a2, -2.68346351e-2f);
  p = fmadd(p, a2, 1.12833768e-1f);
  p = fmadd(p, a2, -3.76126200e-1f);
  p = fmadd(p, a2, 1.12837911f);
  const float erf_a = std::copysign(a * p, x);  // erf(x / sqrt2)
  // erfcx(a) as a polynomial in t = 1/(1+a).
  const float t = 1.0f / (1.0f + (a < 10.0f ? a : 10.0f));
  float q = -2.40737844f;
  q = fmadd(q, t, 8.25369453f);
  q = fmadd(q, t, -11.5168285f);
  q = fmadd(q, t, 7.63983870f);
  q = fmadd(q, t, -1.58187747f);
  q = fmadd(q, t, -0.532433391f);
  q = fmadd(q, t, -0.282469869f);
  q = fmadd(q, t, 0.279123873f);
  q = fmadd(q, t, 0.564607918f);
  q = fmadd(q, t, 0.564164162f);
  q = fmadd(q, t, 6.00550038e-7f);
  const float erfc_a = exp(-a2) * (1.0f - 0.5f * x2_error) * q;  // erfc(|x| / sqrt2)
  float result = a < 0.75f ? 0.5f + 0.5f * erf_a : (x > 0.0f ? 1.0f - 0.5f * erfc_a : 0.5f * erfc_a);
  result = a > 20.0f ? (x > 0.0f ? 1.0f : 0.0f) : result;  // also keeps inf away from fma(inf, inf, -inf)
  return x != x ? x : result;
}
DG_MATH double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

// The standard normal density phi(x) = exp(-x^2/2) / sqrt(2 pi).
DG_MATH float normal_pdf(float x) { return 0.398942280f * exp(-0.5f * x * x); }
DG_MATH double normal_pdf(double x) { return 0.39894228040143267794 * std::exp(-0.5 * x * x); }

}  // namespace dg::math
