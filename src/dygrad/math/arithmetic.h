// Elementwise arithmetic, one element at a time (math/scalar.h: device-neutral): what the CPU's arithmetic kernels
// compute, written once so a GPU kernel or generated code computes the same bits. Every operation here is rounded
// once per arithmetic operator, without contraction (scalar.h): add with alpha is x + round(alpha * y), as torch's
// scalar path, at every kernel level.
#pragma once
#include <type_traits>

#include "dygrad/math/scalar.h"

namespace dg::math {

// x + alpha * y (torch.add's alpha; alpha == 1 is exact: 1 * y == y). bool: x or (alpha and y).
template <typename C>
DG_MATH C add_scaled(C x, C y, C alpha) {
  if constexpr (std::is_same_v<C, bool>) return x || (alpha && y);
  else return x + alpha * y;
}
template <typename C>
DG_MATH C mul(C x, C y) {
  if constexpr (std::is_same_v<C, bool>) return x && y;
  else return x * y;
}
template <typename C>
DG_MATH C div(C x, C y) { return x / y; }
template <typename C>
DG_MATH C rsub(C x, C v) { return v - x; }  // torch.rsub(x, v) = v - x
template <typename C>
DG_MATH C neg(C x) { return -x; }

// Elementwise maximum and minimum that propagate nan from either operand (torch.maximum / minimum; std::max
// returns its first operand when the comparison is false). Integers: the plain comparison.
template <typename C>
DG_MATH C maximum(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return (a > b || a != a) ? a : b;
  else return a > b ? a : b;
}
template <typename C>
DG_MATH C minimum(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return (a < b || a != a) ? a : b;
  else return a < b ? a : b;
}

// torch.clamp's bounds, as eager's clamp kernels apply them (backend/cpu/compare.cpp) and fused programs
// (dygrad.jit). Number bounds: `lo > x ? lo : x` (one packed max on x86: a nan x stays nan; a bound of -inf, +inf
// for the other side, is the identity bit for bit). Tensor bounds: a nan bound gives that bound's nan, a nan x stays.
template <typename C>
DG_MATH C clamp_below(C x, C lo) { return lo > x ? lo : x; }
template <typename C>
DG_MATH C clamp_above(C x, C hi) { return hi < x ? hi : x; }
template <typename C>
DG_MATH C clamp_below_propagating(C x, C lo) { return (lo != lo || x < lo) ? lo : x; }
template <typename C>
DG_MATH C clamp_above_propagating(C x, C hi) { return (hi != hi || x > hi) ? hi : x; }

// lerp(a, b, w) = a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w): torch's two formulas, exact at w = 0 and
// w = 1 (the AdamW kernel's first moment).
template <typename C>
DG_MATH C lerp(C a, C b, C w) {
  const C diff = b - a;
  return (w < C(0.5) && w > C(-0.5)) ? a + w * diff : b - diff * (C(1) - w);
}

}  // namespace dg::math
