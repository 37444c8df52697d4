// The float32 functions of math/elementary.h and activations.h against float64 libm, in ulp of the float32
// result: exp over every float (or every 17th float pattern by default: DYGRAD_EXHAUSTIVE=1 checks all 2^32), its
// softmax specialisation exp_nonpositive, bitwise equal to it where both are defined; sigmoid and silu built on
// it; sin and cos over their reduced range. DYGRAD_PATTERN_STEP=N samples every Nth pattern in every sweep
// instead (N odd): `make test-aarch64` runs them under qemu, where the default steps took 93 s and 274 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "dygrad/math/activations.h"

namespace dg::cpu {
namespace {

// The distance in ulp of float32 `got` from the exact value `want` (a double): |got - want| over the spacing
// of floats at want (2^-149 in the subnormal range). Past FLT_MAX the spacing stays 2^104 and inf counts as
// 2^128, so inf is within half an ulp exactly where round-to-nearest overflows.
double ulp_error(float got, double want) {
  if (std::isinf(got) && std::isinf(want)) return got == want ? 0.0 : INFINITY;
  if (std::isinf(got) && std::fabs(want) >= std::ldexp(1.0, 128)) return want * got > 0 ? 0.0 : INFINITY;
  const double value = std::isinf(got) ? std::copysign(std::ldexp(1.0, 128), got) : static_cast<double>(got);
  const double magnitude = std::fabs(want);
  const int exponent = magnitude < std::numeric_limits<float>::min() ? -126 : std::min(std::ilogb(magnitude), 127);
  const double spacing = std::ldexp(1.0, exponent - 23);
  return std::fabs(value - want) / spacing;
}

// The step between sampled float patterns: 1 with DYGRAD_EXHAUSTIVE=1, else DYGRAD_PATTERN_STEP, else the sweep's
// own default. An odd step: the sampled patterns cover every low-bit residue over the range.
uint32_t pattern_step(uint32_t default_step) {
  const char* all = std::getenv("DYGRAD_EXHAUSTIVE");
  if (all && all[0] == '1') return 1u;
  const char* step = std::getenv("DYGRAD_PATTERN_STEP");
  if (!step || !*step) return default_step;
  const long n = std::strtol(step, nullptr, 10);
  EXPECT_TRUE(n > 0 && n % 2 == 1) << "DYGRAD_PATTERN_STEP=" << step << " is not an odd positive step";
  return n > 0 && n % 2 == 1 ? static_cast<uint32_t>(n) : default_step;
}

TEST(VecMath, ExpFloat32WithinOneUlpOfFloat64) {
  const uint32_t step = pattern_step(17);
  double worst = 0, worst_subnormal = 0;
  float worst_x = 0;
  int64_t checked = 0;
  // An odd step: the sampled patterns cover every low-bit residue over the range.
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += step) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(x)) continue;
    const float got = math::exp(x);
    const double want = std::exp(static_cast<double>(x));
    const double e = ulp_error(got, want);
    if (e > worst) worst = e, worst_x = x;
    if (want < std::numeric_limits<float>::min() && e > worst_subnormal) worst_subnormal = e;
    ++checked;
  }
  RecordProperty("max_ulp", std::to_string(worst));
  std::printf("math::exp: %lld floats, max error %.3f ulp (at x = %.9g), %.3f ulp where the result is subnormal\n",
              static_cast<long long>(checked), worst, static_cast<double>(worst_x), worst_subnormal);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_LE(worst_subnormal, 1.0);
}

TEST(VecMath, ExpFloat32SpecialValues) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(math::exp(0.0f), 1.0f);
  EXPECT_EQ(math::exp(-0.0f), 1.0f);
  EXPECT_EQ(math::exp(inf), inf);
  EXPECT_EQ(math::exp(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(math::exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(math::exp(-std::numeric_limits<float>::quiet_NaN())));
  // Overflow: ln(FLT_MAX) = 88.7228391...; the float below it is finite, the one above is inf, as in libm.
  EXPECT_EQ(math::exp(88.72283f), std::exp(88.72283f));
  EXPECT_TRUE(std::isfinite(math::exp(88.72283f)));
  EXPECT_EQ(math::exp(88.72284f), inf);
  EXPECT_EQ(math::exp(1000.0f), inf);
  // Underflow is gradual: subnormal results down to 2^-149, then 0 (exp(-103.97) is half of 2^-149).
  EXPECT_GT(math::exp(-100.0f), 0.0f);
  EXPECT_LT(math::exp(-100.0f), std::numeric_limits<float>::min());
  EXPECT_EQ(math::exp(-103.2789f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(math::exp(-104.0f), 0.0f);
  EXPECT_EQ(math::exp(-1e30f), 0.0f);
}

// exp_nonpositive is exp with the subnormal range flushed: bitwise equal on [kExpNormalMin, 88.37] (every
// float there), 0 below kExpNormalMin, where exp itself is below FLT_MIN.
TEST(VecMath, ExpNonpositiveIsExpWithSubnormalsFlushed) {
  const uint32_t step = pattern_step(3);
  int64_t mismatches = 0, checked = 0;
  auto check = [&](float x) {
    ++checked;
    if (std::bit_cast<uint32_t>(math::exp_nonpositive(x)) != std::bit_cast<uint32_t>(math::exp(x))) {
      if (++mismatches <= 5) ADD_FAILURE() << "exp_nonpositive(" << x << ") != exp(" << x << ")";
    }
  };
  // Negative floats from -0 down to kExpNormalMin, then positive ones up to 88.37.
  const uint32_t lowest = std::bit_cast<uint32_t>(math::kExpNormalMin);
  for (uint32_t bits = 0x80000000u; bits <= lowest; bits += step) check(std::bit_cast<float>(bits));
  check(math::kExpNormalMin);
  for (uint32_t bits = 0; bits <= std::bit_cast<uint32_t>(88.37f); bits += step) check(std::bit_cast<float>(bits));
  EXPECT_EQ(mismatches, 0) << "of " << checked;
  // Below kExpNormalMin: exp is subnormal or 0 there, exp_nonpositive gives 0 (every float down to -104).
  for (uint32_t bits = lowest + 1; bits <= std::bit_cast<uint32_t>(-104.0f); ++bits) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_LT(math::exp(x), std::numeric_limits<float>::min()) << x;
    ASSERT_EQ(math::exp_nonpositive(x), 0.0f) << x;
  }
  EXPECT_GE(math::exp(math::kExpNormalMin), std::numeric_limits<float>::min());
  EXPECT_EQ(math::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(math::exp_nonpositive(-1e30f), 0.0f);
  EXPECT_TRUE(std::isnan(math::exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
}

// sigmoid and silu, built on exp_nonpositive(-|x|): within 2.5 and 3.5 ulp of float64 for x >= -87.33 (over
// every float: 2.40 and 3.39; the x / (1 + exp(-x)) forms they replace: 2.48 and 2.40), checked on every 51st
// float pattern (every one with DYGRAD_EXHAUSTIVE=1); 0 below kExpNormalMin; the special values.
TEST(VecMath, SigmoidAndSiluFromExpOfMinusAbs) {
  constexpr double kSigmoidUlp = 2.5, kSiluUlp = 3.5;
  const uint32_t step = pattern_step(51);
  double worst_sigmoid = 0, worst_silu = 0;
  float worst_sigmoid_x = 0, worst_silu_x = 0;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += step) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (!(x >= -87.33f) || std::isinf(x)) continue;  // nan, -inf, the flushed range
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    const double e_sigmoid = ulp_error(math::sigmoid(x), s), e_silu = ulp_error(math::silu(x), x * s);
    if (e_sigmoid > worst_sigmoid) worst_sigmoid = e_sigmoid, worst_sigmoid_x = x;
    if (e_silu > worst_silu) worst_silu = e_silu, worst_silu_x = x;
  }
  EXPECT_LE(worst_sigmoid, kSigmoidUlp) << "sigmoid at " << worst_sigmoid_x;
  EXPECT_LE(worst_silu, kSiluUlp) << "silu at " << worst_silu_x;
  // Below kExpNormalMin, exp(-|x|) flushes: sigmoid and silu are 0 (-0 for silu).
  for (float x : {-87.34f, -88.0f, -100.0f, -1e30f}) {
    EXPECT_EQ(math::sigmoid(x), 0.0f) << x;
    EXPECT_EQ(math::silu(x), 0.0f) << x;
  }
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(math::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(math::sigmoid(-0.0f), 0.5f);
  EXPECT_EQ(math::sigmoid(inf), 1.0f);
  EXPECT_EQ(math::sigmoid(-inf), 0.0f);
  EXPECT_EQ(math::sigmoid(100.0f), 1.0f);
  EXPECT_TRUE(std::isnan(math::sigmoid(nan)));
  EXPECT_EQ(math::silu(inf), inf);
  EXPECT_TRUE(std::isnan(math::silu(-inf)));  // torch: -inf / (1 + exp(inf)) = nan
  EXPECT_TRUE(std::isnan(math::silu(nan)));
  EXPECT_TRUE(std::signbit(math::silu(-0.0f)));
  EXPECT_EQ(math::silu(1e30f), 1e30f);
}

// sin and cos over their reduced range (math/elementary.h, "sin and cos"), against float64 libm, in ulp of the
// float32 result: every 119th float pattern with |x| <= kSinCosMax (this file compiles at the library's level, the
// baseline's: no FMA, the 12-bit parts of pi). The bound holds near the zeros too, where r is small: every
// reduction step is exact or rounded relative to its own result.
TEST(VecMath, SinCosFloat32WithinTwoAndAHalfUlpOfFloat64) {
  const uint32_t step = pattern_step(119);  // 2 s; every 17th took 13
  double worst_sin = 0, worst_cos = 0;
  float at_sin = 0, at_cos = 0;
  int64_t checked = 0;
  const uint32_t last = std::bit_cast<uint32_t>(math::kSinCosMax);
  for (uint64_t bits = 0; bits <= last; bits += step) {
    const float magnitude = std::bit_cast<float>(static_cast<uint32_t>(bits));
    for (const float x : {magnitude, -magnitude}) {
      ASSERT_TRUE(math::sin_cos_in_range(x));
      const double s = ulp_error(math::sin_bounded(x), std::sin(static_cast<double>(x)));
      const double c = ulp_error(math::cos_bounded(x), std::cos(static_cast<double>(x)));
      if (s > worst_sin) worst_sin = s, at_sin = x;
      if (c > worst_cos) worst_cos = c, at_cos = x;
      ++checked;
    }
  }
  std::printf("math::sin, cos: %lld floats, max error %.3f ulp (x = %.9g), %.3f ulp (x = %.9g)\n",
              static_cast<long long>(checked), worst_sin, static_cast<double>(at_sin), worst_cos,
              static_cast<double>(at_cos));
  // Measured over every 17th pattern: 2.11 (sin) and 2.15 ulp (cos) without FMA, 1.96 and 1.99 with it (|x| <= 2^17).
  EXPECT_LE(worst_sin, 2.5) << "at x = " << at_sin;
  EXPECT_LE(worst_cos, 2.5) << "at x = " << at_cos;
  // Outside the range the kernels call libm: the predicate says so for inf, nan and the first float above.
  EXPECT_FALSE(math::sin_cos_in_range(std::numeric_limits<float>::infinity()));
  EXPECT_FALSE(math::sin_cos_in_range(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_FALSE(math::sin_cos_in_range(std::nextafter(math::kSinCosMax, INFINITY)));
  EXPECT_EQ(math::sin_bounded(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(math::sin_bounded(-0.0f)));
  EXPECT_EQ(math::cos_bounded(0.0f), 1.0f);
}

// The fast-range forms the exp and log kernels run on most blocks (backend/cpu/unary.cpp, guarded_unary) are the
// full functions' arithmetic: bitwise equal to math::exp on [kExpNormalMin, kExpOneScaleMax] and to math::log on
// the normal positive floats (sampled with an odd step, every exponent and every low-bit residue).
TEST(VecMath, FastRangeFormsAreBitwiseTheFullFunctions) {
  const uint32_t step = pattern_step(67);
  int64_t exp_checked = 0, log_checked = 0, mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += step) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (math::exp_in_normal_range(x)) {
      ++exp_checked;
      const float fast = math::exp_normal_range(x), full = math::exp(x);
      if (std::bit_cast<uint32_t>(fast) != std::bit_cast<uint32_t>(full) && ++mismatches <= 5)
        ADD_FAILURE() << "exp_normal_range(" << x << ") = " << fast << ", exp " << full;
    }
    if (math::log_in_normal_range(x)) {
      ++log_checked;
      const float fast = math::log_normal_range(x), full = math::log(x);
      if (std::bit_cast<uint32_t>(fast) != std::bit_cast<uint32_t>(full) && ++mismatches <= 5)
        ADD_FAILURE() << "log_normal_range(" << x << ") = " << fast << ", log " << full;
    }
  }
  EXPECT_GT(exp_checked, 0);
  EXPECT_GT(log_checked, 0);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace dg::cpu
