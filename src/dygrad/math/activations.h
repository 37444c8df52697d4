// The activation functions and their derivatives, one element at a time (math/scalar.h: device-neutral,
// vectorisable): the CPU's unary and fused kernels call these, and a GPU kernel or generated code can. C is the
// compute type (float, or double, whose versions call std:: functions).
#pragma once
#include <cmath>

#include "dygrad/math/elementary.h"
#include "dygrad/math/scalar.h"

namespace dg::math {

// sigmoid and silu from e = exp(-|x|) in (0, 1] (exp_nonpositive: one-factor scale, no overflow path):
//   sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0;  silu(x) = x * sigmoid(x), as one division.
// Within 2.40 (sigmoid) and 3.39 ulp (silu) of float64 for x >= -87.33 (every float; tests/cpp/test_vec_math.cpp).
// Below (e < FLT_MIN) they flush to 0 where torch's 1 / (1 + exp(-x)) gives sigmoid a subnormal and silu a value
// under 2e-36 down to x = -88.72 (torch's exp(-x) overflows there and gives 0 too). sigmoid(-inf) = 0,
// silu(-inf) = nan (-inf * 0, as torch's -inf / inf), nan gives nan.
DG_MATH float sigmoid(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}
DG_MATH double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

DG_MATH float silu(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  return (x < 0.0f ? x * e : x) / (1.0f + e);
}
DG_MATH double silu(double x) { return x / (1.0 + std::exp(-x)); }

// gelu(x) = x * Phi(x) (approximate="none").
template <typename C>
DG_MATH C gelu_erf(C x) { return x * normal_cdf(x); }

// gelu(x) ~ x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3) (approximate="tanh"), evaluated as
// x * sigmoid(2u), which avoids the cancellation in 1 + tanh(u) for negative x.
inline constexpr double kGeluTanhScale = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kGeluTanhCubic = 0.044715;
template <typename C>
DG_MATH C gelu_tanh(C x) {
  const C u = C(kGeluTanhScale) * (x + C(kGeluTanhCubic) * x * x * x);
  return x / (C(1) + exp(C(-2) * u));
}

// --- derivatives: grad_x from the incoming gradient g ------------------------------------------------------------
// gelu'(x) = Phi(x) + x * phi(x) (approximate="none").
template <typename C>
DG_MATH C gelu_erf_backward(C g, C x) { return g * (normal_cdf(x) + x * normal_pdf(x)); }

// With s = sigmoid(2u), u = k (x + c x^3): d/dx [x s] = s + 2 x s (1 - s) k (1 + 3 c x^2) (approximate="tanh").
template <typename C>
DG_MATH C gelu_tanh_backward(C g, C x) {
  const C k = C(kGeluTanhScale), c = C(kGeluTanhCubic);
  const C u = k * (x + c * x * x * x);
  const C s = C(1) / (C(1) + exp(C(-2) * u));
  return g * (s + C(2) * x * s * (C(1) - s) * k * (C(1) + C(3) * c * x * x));
}

// From the forward output y: sigmoid' = y (1 - y), tanh' = 1 - y^2; relu passes g where y > 0.
template <typename C>
DG_MATH C sigmoid_backward(C g, C y) { return g * (y * (C(1) - y)); }
template <typename C>
DG_MATH C tanh_backward(C g, C y) { return g * (C(1) - y * y); }
template <typename C>
DG_MATH C relu_backward(C g, C y) { return y > C(0) ? g : C(0); }

// From the input x: silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
template <typename C>
DG_MATH C silu_backward(C g, C x) {
  const C s = sigmoid(x);
  return g * (s * (C(1) + x * (C(1) - s)));
}

// SwiGLU's pair (a the gate, b the up projection): out = silu(a) * b; given g and s = sigmoid(a), the gradients
// da = g b s (1 + a (1 - s)) and db = g a s (backend/cpu/fused_swiglu.cpp).
template <typename C>
DG_MATH C swiglu(C a, C b) { return silu(a) * b; }
template <typename C>
struct SwigluGrad {
  C a, b;
};
template <typename C>
DG_MATH SwigluGrad<C> swiglu_backward(C g, C a, C b, C s) {
  return {g * b * s * (C(1) + a * (C(1) - s)), g * (a * s)};
}

}  // namespace dg::math
