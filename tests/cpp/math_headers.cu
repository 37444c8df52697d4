// The math/ headers compile as CUDA device code (docs/ops.md, "One scalar math"): one kernel calls every function
// of math/elementary.h, activations.h, arithmetic.h and rows.h for float and double, so a host-only call, a missing
// __host__ __device__ or a host constant read on the device fails the build (ctest MathHeaders.CompileForCuda,
// -Werror all-warnings). Compiled, not run: the CPU machines have nvcc and no GPU.
#include "dygrad/math/activations.h"
#include "dygrad/math/arithmetic.h"
#include "dygrad/math/elementary.h"
#include "dygrad/math/rows.h"

namespace {
namespace m = dg::math;

template <typename C>
__device__ C every_function(C x) {
  C total = m::exp(x) + m::log(x) + m::tanh(x) + m::sigmoid(x) + m::silu(x) + m::gelu_erf(x) + m::gelu_tanh(x);
  total += m::normal_cdf(x) + m::normal_pdf(x) + m::exp_nonpositive(-x * x) + m::expm1(x) + m::log1p(x);
  total += m::gelu_erf_backward(C(1), x) + m::gelu_tanh_backward(C(1), x) + m::sigmoid_backward(C(1), x) +
           m::tanh_backward(C(1), x) + m::relu_backward(C(1), x) + m::silu_backward(C(1), x) + m::swiglu(x, C(2));
  const m::SwigluGrad<C> g = m::swiglu_backward(C(1), x, C(2), m::sigmoid(x));
  total += g.a + g.b + m::add_scaled(x, C(2), C(3)) + m::mul(x, x) + m::div(x, C(3)) + m::rsub(x, C(1)) + m::neg(x) +
           m::maximum(x, C(0)) + m::minimum(x, C(0)) + m::lerp(x, C(1), C(0.25)) + m::fmadd(x, x, x);
  total += m::rms_inverse(x * x, C(1e-6)) + m::rms_norm(x, C(2), C(3)) + m::rms_norm_backward(C(2), x, x, C(1)) +
           m::rotate(x, C(1), C(0.5), C(-0.5));
  return total;
}
}  // namespace

__global__ void math_headers_kernel(const float* xf, float* yf, const double* xd, double* yd, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = xf[i];
  float extra = dg::math::expm1_nonpositive(-x * x) + dg::math::mul_error(x, x);
  extra += dg::math::sin_cos_in_range(x) ? dg::math::sin_bounded(x) + dg::math::cos_bounded(x) : 0.0f;
  yf[i] = every_function(x) + extra;
  yd[i] = every_function(xd[i]);
}
