// Elementary functions for the elementwise kernels. The float32 versions are branch-free range reduction
// plus a polynomial in plain float arithmetic, so GCC vectorises loops that call them (no libm calls);
// they stay within a few ulp of the correctly rounded result (tests/cpp/test_math.cpp checks them against
// float64 with rtol 1e-6; exp over every float, in ulp). The float64 versions call std:: functions. No -ffast-math is assumed: inf, nan,
// signed zero and subnormal results are handled explicitly.
//
// Notation: x = n*ln2 + r with |r| <= ln2/2 (exp), x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (log).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

// Forced inline: the loops that call these only vectorise when the whole body is visible in them.
#define DG_VEC_INLINE inline __attribute__((always_inline))

namespace dg::cpu::vm {

// Whether the ISA has fused multiply-add: x86's avx2 and avx512 kernel levels, every aarch64 CPU (the neon level:
// fmla on vectors, fmadd on scalars), a GPU.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA) || defined(__CUDA_ARCH__)
#define DG_VEC_HAVE_FMA 1
#else
#define DG_VEC_HAVE_FMA 0
#endif

// a * b + c, the polynomial step of every function below. Where the ISA has fused multiply-add (DG_VEC_HAVE_FMA)
// it is one fma, rounded once: those levels compute the same bits. x86's baseline level (x86-64-v2) has none, and
// std::fma there is a libm call (a software fma, ~20x a vector multiply-add, and no loop that calls it
// vectorises): it multiplies then adds, rounded twice, which keeps the functions within their documented ulps
// (tests/cpp/test_vec_math.cpp runs on the baseline) and vectorised at 128 bits.
DG_VEC_INLINE float fmadd(float a, float b, float c) {
#if DG_VEC_HAVE_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// The rounding error of a * b, exactly: a * b == round(a * b) + mul_error(a, b) (no overflow or underflow). One
// fma where the ISA has it; else Dekker's product (Veltkamp's split of each operand into 12-bit halves, whose
// products are exact), the same value in plain vectorisable arithmetic.
DG_VEC_INLINE float mul_error(float a, float b) {
  const float p = a * b;
#if DG_VEC_HAVE_FMA
  return std::fma(a, b, -p);
#else
  constexpr float kSplit = 4097.0f;  // 2^12 + 1
  const float ca = kSplit * a, cb = kSplit * b;
  const float a_hi = ca - (ca - a), b_hi = cb - (cb - b);
  const float a_lo = a - a_hi, b_lo = b - b_hi;
  return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
#endif
}

namespace detail {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;          // ln2's top 15 bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = 1.42860682030941723212e-6f;  // ln2 - kLn2Hi
inline constexpr float kRoundMagic = 12582912.0f;            // 1.5 * 2^23: (v + magic) - magic rounds v

// 2^n for integral n in [-126, 127], built from the exponent bits.
DG_VEC_INLINE float pow2i(int32_t n) { return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23); }

// Round to the nearest integer (|v| < 2^22), exactly as rint does, in vectorisable arithmetic.
DG_VEC_INLINE float round_nearest(float v) { return (v + kRoundMagic) - kRoundMagic; }

// exp(r) - 1 for |r| <= ln2/2: Taylor series to r^8 (truncation error below 2^-30 relative).
DG_VEC_INLINE float expm1_reduced(float r) {
  float p = 2.48015873e-5f;          // 1/8!
  p = fmadd(p, r, 1.98412698e-4f);  // 1/7!
  p = fmadd(p, r, 1.38888889e-3f);  // 1/6!
  p = fmadd(p, r, 8.33333333e-3f);  // 1/5!
  p = fmadd(p, r, 4.16666667e-2f);  // 1/4!
  p = fmadd(p, r, 1.66666667e-1f);  // 1/3!
  p = fmadd(p, r, 0.5f);
  return fmadd(p * r, r, r);
}
}  // namespace detail

// The one float32 exp. Every exp below is this range reduction and polynomial, x = n*ln2 + r:
// exp(x) = 2^n * p with p = 1 + expm1(r). Measured against float64 std::exp over every float
// (tests/cpp/test_math.cpp, "ExpFloat32"): within 1 ulp, subnormal results included.
namespace detail {
struct ExpReduced {
  float n;  // round(x / ln2), an integer held in a float (nan for nan)
  float p;  // exp(r) = 1 + expm1(r), in [0.70, 1.42]
};
// The reduction of an x clamped to [-104, 89] (or nan, which passes through as n = p = nan).
DG_VEC_INLINE ExpReduced exp_reduced(float clamped) {
  const float n = round_nearest(clamped * kLog2e);
  float r = fmadd(-n, kLn2Hi, clamped);
  r = fmadd(-n, kLn2Lo, r);
  return {n, 1.0f + expm1_reduced(r)};
}
}  // namespace detail

// exp(x) for every float, rounded like libm at both ends: results below FLT_MIN are subnormal (gradual
// underflow, rounded once: 2^n is applied in two halves, each a normal float), exp(x > 88.72) = inf,
// exp(-inf) = 0, exp(nan) = nan.
DG_VEC_INLINE float exp(float x) {
  using namespace detail;
  float clamped = x > 89.0f ? 89.0f : x;
  clamped = clamped < -104.0f ? -104.0f : clamped;  // nan passes both tests unchanged and is fixed below
  const ExpReduced e = exp_reduced(clamped);
  const int32_t ni = static_cast<int32_t>(e.n == e.n ? e.n : 0.0f);
  const int32_t half = ni / 2;
  const float result = (e.p * pow2i(half)) * pow2i(ni - half);
  return x != x ? x : result;
}
DG_VEC_INLINE double exp(double x) { return std::exp(x); }

// The largest float below which exp(x) < FLT_MIN (ln FLT_MIN = -87.3365447...): exp_nonpositive flushes there.
inline constexpr float kExpNormalMin = -87.3365402f;

// exp(x) specialised for the softmax family (arguments x - max(x) <= 0 and log-probabilities): the same
// reduction and polynomial as exp, with 2^n applied in one factor, and results that exp would give as a
// subnormal (x < kExpNormalMin) flushed to 0. So no operation underflows: far-negative inputs (masked -inf
// logits) take no microcode assist (tens of cycles per element on x86). Bitwise equal to exp(x) for x in
// [kExpNormalMin, 88.37] (tests/cpp/test_vec_math.cpp checks every float there); -inf gives 0, nan gives nan;
// above 88.37 (2^n would overflow) the result is undefined.
// 2^n is built from the bits of the rounding sum t = x*log2e + 1.5*2^23, whose low mantissa bits hold n
// (t's bits are 0x4B400000 + n, so bits << 23 == n << 23): no float-to-int conversion, no nan fix-up (a nan
// x makes p nan, and the product with it); 4 fewer vector operations than going through pow2i(int).
DG_VEC_INLINE float exp_nonpositive(float x) {
  using namespace detail;
  const float clamped = x < kExpNormalMin ? kExpNormalMin : x;  // nan passes unchanged
  const float t = clamped * kLog2e + kRoundMagic;                // round_nearest(clamped * kLog2e) + magic
  const float n = t - kRoundMagic;
  float r = fmadd(-n, kLn2Hi, clamped);
  r = fmadd(-n, kLn2Lo, r);
  const float p = 1.0f + expm1_reduced(r);
  const float scale = std::bit_cast<float>((std::bit_cast<uint32_t>(t) << 23) + (127u << 23));  // 2^n, normal
  return x < kExpNormalMin ? 0.0f : p * scale;
}
DG_VEC_INLINE double exp_nonpositive(double x) { return std::exp(x); }

// exp(x) - 1 for x <= 0 (tanh's building block): 2^n * expm1(r) + (2^n - 1), exact for n == 0.
DG_VEC_INLINE float expm1_nonpositive(float x) {
  using namespace detail;
  const float clamped = x < -20.0f ? -20.0f : x;  // expm1(-20) rounds to -1
  const float n = round_nearest(clamped * kLog2e);
  float r = fmadd(-n, kLn2Hi, clamped);
  r = fmadd(-n, kLn2Lo, r);
  const float scale = pow2i(static_cast<int32_t>(n == n ? n : 0.0f));
  return fmadd(scale, expm1_reduced(r), scale - 1.0f);
}

// log(x): x = 2^e * m, f = m - 1, s = f / (2 + f), log(m) = 2*atanh(s) = f - s*(f - R(s^2)).
DG_VEC_INLINE float log(float x) {
  using namespace detail;
  const bool subnormal = x < std::numeric_limits<float>::min();
  const float scaled = subnormal ? x * 8388608.0f : x;  // * 2^23 makes subnormals normal
  const int32_t bits = std::bit_cast<int32_t>(scaled);
  int32_t e = ((bits >> 23) & 0xff) - 127 - (subnormal ? 23 : 0);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  const float f = m - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float z = s * s;
  float poly = 0.222222222f;               // 2/9
  poly = fmadd(poly, z, 0.285714286f);  // 2/7
  poly = fmadd(poly, z, 0.4f);          // 2/5
  poly = fmadd(poly, z, 0.666666667f);  // 2/3
  const float log_m = f - s * (f - poly * z);
  const float ef = static_cast<float>(e);
  float result = fmadd(ef, kLn2Hi, fmadd(ef, kLn2Lo, log_m));
  constexpr float inf = std::numeric_limits<float>::infinity();
  result = x == inf ? inf : result;
  result = x == 0.0f ? -inf : result;
  result = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : result;
  return x != x ? x : result;
}
DG_VEC_INLINE double log(double x) { return std::log(x); }

// tanh(x) = sign(x) * -u / (2 + u) with u = expm1(-2|x|): no cancellation near 0, no overflow for large |x|.
DG_VEC_INLINE float tanh(float x) {
  const float u = expm1_nonpositive(-2.0f * std::fabs(x));
  const float result = std::copysign(-u / (2.0f + u), x);
  return x != x ? x : result;
}
DG_VEC_INLINE double tanh(double x) { return std::tanh(x); }

// sigmoid and silu from e = exp(-|x|) in (0, 1] (exp_nonpositive: one-factor scale, no overflow path):
//   sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0;  silu(x) = x * sigmoid(x), as one division.
// Within 2.40 (sigmoid) and 3.39 ulp (silu) of float64 for x >= -87.33 (every float; tests/cpp/test_vec_math.cpp). Below
// (e < FLT_MIN) they flush to 0 where torch's 1 / (1 + exp(-x)) gives sigmoid a subnormal and silu a value under
// 2e-36 down to x = -88.72 (torch's exp(-x) overflows there and gives 0 too). sigmoid(-inf) = 0,
// silu(-inf) = nan (-inf * 0, as torch's -inf / inf), nan gives nan.
DG_VEC_INLINE float sigmoid(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}
DG_VEC_INLINE double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

DG_VEC_INLINE float silu(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  return (x < 0.0f ? x * e : x) / (1.0f + e);
}
DG_VEC_INLINE double silu(double x) { return x / (1.0 + std::exp(-x)); }

// The standard normal CDF, Phi(x) = erfc(-x / sqrt2) / 2. With a = |x| / sqrt2:
//   a < 0.75:  erf(a) = a * P(a^2)            (P fitted for relative error 1.5e-9)
//   a >= 0.75: erfc(a) = exp(-a^2) * Q(1/(1+a)) (Q fitted to erfcx on [0.75, 10], 1.8e-9)
// a^2 = x^2/2 is carried with its rounding error (fma) so exp(-a^2) keeps full relative accuracy in the tail.
DG_VEC_INLINE float normal_cdf(float x) {
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
DG_VEC_INLINE double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

// The standard normal density phi(x) = exp(-x^2/2) / sqrt(2 pi).
DG_VEC_INLINE float normal_pdf(float x) { return 0.398942280f * exp(-0.5f * x * x); }
DG_VEC_INLINE double normal_pdf(double x) { return 0.39894228040143267794 * std::exp(-0.5 * x * x); }

// gelu(x) = x * Phi(x) (approximate="none").
template <typename C>
DG_VEC_INLINE C gelu_erf(C x) { return x * normal_cdf(x); }

// gelu(x) ~ x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3) (approximate="tanh"), evaluated as
// x * sigmoid(2u), which avoids the cancellation in 1 + tanh(u) for negative x.
inline constexpr double kGeluTanhScale = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kGeluTanhCubic = 0.044715;
template <typename C>
DG_VEC_INLINE C gelu_tanh(C x) {
  const C u = C(kGeluTanhScale) * (x + C(kGeluTanhCubic) * x * x * x);
  return x / (C(1) + exp(C(-2) * u));
}

}  // namespace dg::cpu::vm
