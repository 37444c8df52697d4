// The one float32 exp of the CPU kernels (backend/cpu/vec_math.h) against float64 std::exp, in ulp of the
// float32 result, over every float (or every 17th float pattern by default: DYGRAD_EXHAUSTIVE=1 checks
// all 2^32), and its softmax specialisation exp_nonpositive, bitwise equal to it where both are defined; sigmoid
// and silu built on it. DYGRAD_PATTERN_STEP=N samples every Nth pattern in every sweep instead (N odd): `make
// test-aarch64` runs them under qemu, where the default steps took 93 s and 274 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "dygrad/backend/cpu/vec_math.h"

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
    const float got = vm::exp(x);
    const double want = std::exp(static_cast<double>(x));
    const double e = ulp_error(got, want);
    if (e > worst) worst = e, worst_x = x;
    if (want < std::numeric_limits<float>::min() && e > worst_subnormal) worst_subnormal = e;
    ++checked;
  }
  RecordProperty("max_ulp", std::to_string(worst));
  std::printf("vm::exp: %lld floats, max error %.3f ulp (at x = %.9g), %.3f ulp where the result is subnormal\n",
              static_cast<long long>(checked), worst, static_cast<double>(worst_x), worst_subnormal);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_LE(worst_subnormal, 1.0);
}

TEST(VecMath, ExpFloat32SpecialValues) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vm::exp(0.0f), 1.0f);
  EXPECT_EQ(vm::exp(-0.0f), 1.0f);
  EXPECT_EQ(vm::exp(inf), inf);
  EXPECT_EQ(vm::exp(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(vm::exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(vm::exp(-std::numeric_limits<float>::quiet_NaN())));
  // Overflow: ln(FLT_MAX) = 88.7228391...; the float below it is finite, the one above is inf, as in libm.
  EXPECT_EQ(vm::exp(88.72283f), std::exp(88.72283f));
  EXPECT_TRUE(std::isfinite(vm::exp(88.72283f)));
  EXPECT_EQ(vm::exp(88.72284f), inf);
  EXPECT_EQ(vm::exp(1000.0f), inf);
  // Underflow is gradual: subnormal results down to 2^-149, then 0 (exp(-103.97) is half of 2^-149).
  EXPECT_GT(vm::exp(-100.0f), 0.0f);
  EXPECT_LT(vm::exp(-100.0f), std::numeric_limits<float>::min());
  EXPECT_EQ(vm::exp(-103.2789f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(vm::exp(-104.0f), 0.0f);
  EXPECT_EQ(vm::exp(-1e30f), 0.0f);
}

// exp_nonpositive is exp with the subnormal range flushed: bitwise equal on [kExpNormalMin, 88.37] (every
// float there), 0 below kExpNormalMin, where exp itself is below FLT_MIN.
TEST(VecMath, ExpNonpositiveIsExpWithSubnormalsFlushed) {
  const uint32_t step = pattern_step(3);
  int64_t mismatches = 0, checked = 0;
  auto check = [&](float x) {
    ++checked;
    if (std::bit_cast<uint32_t>(vm::exp_nonpositive(x)) != std::bit_cast<uint32_t>(vm::exp(x))) {
      if (++mismatches <= 5) ADD_FAILURE() << "exp_nonpositive(" << x << ") != exp(" << x << ")";
    }
  };
  // Negative floats from -0 down to kExpNormalMin, then positive ones up to 88.37.
  const uint32_t lowest = std::bit_cast<uint32_t>(vm::kExpNormalMin);
  for (uint32_t bits = 0x80000000u; bits <= lowest; bits += step) check(std::bit_cast<float>(bits));
  check(vm::kExpNormalMin);
  for (uint32_t bits = 0; bits <= std::bit_cast<uint32_t>(88.37f); bits += step) check(std::bit_cast<float>(bits));
  EXPECT_EQ(mismatches, 0) << "of " << checked;
  // Below kExpNormalMin: exp is subnormal or 0 there, exp_nonpositive gives 0 (every float down to -104).
  for (uint32_t bits = lowest + 1; bits <= std::bit_cast<uint32_t>(-104.0f); ++bits) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_LT(vm::exp(x), std::numeric_limits<float>::min()) << x;
    ASSERT_EQ(vm::exp_nonpositive(x), 0.0f) << x;
  }
  EXPECT_GE(vm::exp(vm::kExpNormalMin), std::numeric_limits<float>::min());
  EXPECT_EQ(vm::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(vm::exp_nonpositive(-1e30f), 0.0f);
  EXPECT_TRUE(std::isnan(vm::exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
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
    const double e_sigmoid = ulp_error(vm::sigmoid(x), s), e_silu = ulp_error(vm::silu(x), x * s);
    if (e_sigmoid > worst_sigmoid) worst_sigmoid = e_sigmoid, worst_sigmoid_x = x;
    if (e_silu > worst_silu) worst_silu = e_silu, worst_silu_x = x;
  }
  EXPECT_LE(worst_sigmoid, kSigmoidUlp) << "sigmoid at " << worst_sigmoid_x;
  EXPECT_LE(worst_silu, kSiluUlp) << "silu at " << worst_silu_x;
  // Below kExpNormalMin, exp(-|x|) flushes: sigmoid and silu are 0 (-0 for silu).
  for (float x : {-87.34f, -88.0f, -100.0f, -1e30f}) {
    EXPECT_EQ(vm::sigmoid(x), 0.0f) << x;
    EXPECT_EQ(vm::silu(x), 0.0f) << x;
  }
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(vm::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(vm::sigmoid(-0.0f), 0.5f);
  EXPECT_EQ(vm::sigmoid(inf), 1.0f);
  EXPECT_EQ(vm::sigmoid(-inf), 0.0f);
  EXPECT_EQ(vm::sigmoid(100.0f), 1.0f);
  EXPECT_TRUE(std::isnan(vm::sigmoid(nan)));
  EXPECT_EQ(vm::silu(inf), inf);
  EXPECT_TRUE(std::isnan(vm::silu(-inf)));  // torch: -inf / (1 + exp(inf)) = nan
  EXPECT_TRUE(std::isnan(vm::silu(nan)));
  EXPECT_TRUE(std::signbit(vm::silu(-0.0f)));
  EXPECT_EQ(vm::silu(1e30f), 1e30f);
}

}  // namespace
}  // namespace dg::cpu
