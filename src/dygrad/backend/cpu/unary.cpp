// CPU kernels: unary math functions, pow and maximum/minimum over strided, broadcast operands. The per-element
// math is the device-neutral functions of math/ (elementary.h, activations.h, arithmetic.h), which contiguous
// float32 loops vectorise; float16/bfloat16 compute in float32.
//
// Shapes: out[N...] = f(x[N...]) and out[N...] = f(a[N...], b[N...]), inputs broadcast to the output.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "dygrad/backend/cpu/elementwise_kernels.h"
#include "dygrad/core/error.h"
#include "dygrad/math/activations.h"
#include "dygrad/math/arithmetic.h"
#include "dygrad/math/elementary.h"

// Kernel lambdas carry the whole per-element computation; forcing them inline keeps the loops vectorisable.
#define DG_VEC_INLINE_LAMBDA __attribute__((always_inline))

// The kernels of this file and their operands:
// input (x), output out of x's floating dtype (abs and relu also take integers): out = f(x)
//   void exp_kernel(Task& task);
//   void log_kernel(Task& task);
//   void expm1_kernel(Task& task);
//   void log1p_kernel(Task& task);
//   void sqrt_kernel(Task& task);
//   void rsqrt_kernel(Task& task);
//   void abs_kernel(Task& task);
//   void sin_kernel(Task& task);
//   void cos_kernel(Task& task);
//   void tanh_kernel(Task& task);
//   void sigmoid_kernel(Task& task);
//   void silu_kernel(Task& task);
//   void relu_kernel(Task& task);
// input (x) of any dtype but bool, output of x's dtype: floor, ceil, trunc, round (integers unchanged)
//   void floor_kernel(Task& task);
//   void ceil_kernel(Task& task);
//   void trunc_kernel(Task& task);
// RoundAttrs: half to even after scaling by 10^decimals
//   void round_kernel(Task& task);
// input (x) of any dtype, output of x's dtype: sign(x) in {-1, 0, 1} (0 for nan; bool unchanged)
//   void sign_kernel(Task& task);
// input (x), output of x's floating dtype: 1 / x
//   void reciprocal_kernel(Task& task);
// input (x) of any dtype, output bool: isnan, isinf, isfinite (integers and bool: false, false, true)
//   void isnan_kernel(Task& task);
//   void isinf_kernel(Task& task);
//   void isfinite_kernel(Task& task);
// GeluAttrs: x * Phi(x) (approximate="none") or the tanh approximation
//   void gelu_kernel(Task& task);
// inputs (grad, x), GeluAttrs as gelu: out = grad * gelu'(x)
//   void gelu_backward_kernel(Task& task);
// Fused first-order backward kernels (used when backward records no graph): inputs (grad, v)
//   void sigmoid_backward_kernel(Task& task);  // v = y = sigmoid(x): grad * y (1 - y)
//   void tanh_backward_kernel(Task& task);     // v = y = tanh(x): grad * (1 - y^2)
//   void silu_backward_kernel(Task& task);     // v = x: grad * s (1 + x (1 - s)), s = sigmoid(x)
//   void relu_backward_kernel(Task& task);     // v = y = relu(x): y > 0 ? grad : 0
// inputs (base, exponent): out = base ^ exponent
//   void pow_kernel(Task& task);
// input (base), ScalarAttrs value = exponent (integral dtypes: a non-negative integer)
//   void pow_scalar_kernel(Task& task);
// input (exponent), ScalarAttrs value = base: out = base ^ exponent
//   void rpow_scalar_kernel(Task& task);
// inputs (a, b): nan-propagating elementwise max / min
//   void maximum_kernel(Task& task);
//   void minimum_kernel(Task& task);
// inputs (y, x) of one floating dtype: the angle of (x, y), in [-pi, pi] (std::atan2)
//   void atan2_kernel(Task& task);
// inputs (a, b) of one dtype, not bool: fmod (C's sign, of a) and remainder (Python's sign, of b); an integer
// b == 0 throws (torch's "ZeroDivisionError")
//   void fmod_kernel(Task& task);
//   void remainder_kernel(Task& task);

namespace dg::cpu {

namespace {
template <typename T>
using C = compute_t<T>;

// out = fn(in) for one dtype T, through the one unary loop (elementwise_kernels.h).
template <typename T, typename Fn>
void unary_map(Task& task, const Fn& fn) {
  unary_loop<Fn, T, T>(task, fn);
}

// A function of floating dtypes only (the op layer has promoted integers to float32).
template <typename Fn>
void floating_unary(Task& task, const Fn& fn) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() { unary_map<T>(task, fn); });
}

// Any dtype but bool.
template <typename Fn>
void numeric_unary(Task& task, const Fn& fn) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) unary_map<T>(task, fn);
  });
}

template <typename Fn>
void floating_binary(Task& task, const Fn& fn) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() { binary_loop<Fn, T, T>(task, fn); });
}

template <typename Fn>
void same_type_binary(Task& task, const Fn& fn) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() { binary_loop<Fn, T, T>(task, fn); });
}

// exp, log, sin and cos (compute type float): a fast vectorised version valid on a range (`in_range`) over blocks of
// a contiguous input, with an or-reduction in the same loop marking whether any element of the block lies outside
// (exp: a subnormal or infinite result, nan; log: x not normal positive finite; sin and cos: |x| > math::kSinCosMax,
// inf, nan); only then are those elements recomputed with the full function (`full`: math::exp, math::log, libm's
// sinf and cosf). A call that is not in place writes the output directly; an in-place one goes through a block
// buffer, so every x is read before it is written. Other layouts choose per element; float64 calls `full`.
//
// recompute_out_of_range: a function of its own, called directly from the block loop (never inlined into it), so
// the vectorised loop holds no call into libm at any level (tools/check_kernel_code.py: on aarch64 a call through
// the GOT names no function, so the loop must hold none).
template <typename T, typename TOut, typename InRange, typename Full>
[[gnu::noinline, gnu::cold]] void recompute_out_of_range(const T* x, TOut* out, int64_t n, const InRange& in_range,
                                                         const Full& full) {
  for (int64_t i = 0; i < n; ++i)
    if (const float v = static_cast<float>(x[i]); !in_range(v)) out[i] = static_cast<TOut>(full(v));
}

template <typename Fast, typename InRange, typename Full>
void guarded_unary(Task& task, const Fast& fast, const InRange& in_range, const Full& full) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() {
    using V = C<T>;
    if constexpr (std::is_same_v<V, float>) {
      const Tensor& out = task.outputs[0];
      const Tensor& in = task.inputs[0];
      if (flat_operands(out, {&in})) {
        T* o = out.data<T>();
        const T* x = in.data<T>();
        const bool in_place = static_cast<const void*>(o) == static_cast<const void*>(x);
        parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
          constexpr int64_t kBlock = 512;
          float buffer[kBlock];
          for (int64_t b = begin; b < end; b += kBlock) {
            const int64_t n = std::min(kBlock, end - b);
            int outside = 0;
            if (in_place) {
              for (int64_t i = 0; i < n; ++i) {
                const float v = static_cast<float>(x[b + i]);
                buffer[i] = fast(v);
                outside |= !in_range(v);
              }
              if (outside) recompute_out_of_range(x + b, buffer, n, in_range, full);
              for (int64_t i = 0; i < n; ++i) o[b + i] = static_cast<T>(buffer[i]);
            } else {
              T* __restrict ob = o + b;
              const T* __restrict xb = x + b;
              for (int64_t i = 0; i < n; ++i) {
                const float v = static_cast<float>(xb[i]);
                ob[i] = static_cast<T>(fast(v));
                outside |= !in_range(v);
              }
              if (outside) recompute_out_of_range(xb, ob, n, in_range, full);
            }
          }
        });
        return;
      }
      unary_map<T>(task, [&](float v) { return in_range(v) ? fast(v) : full(v); });
    } else {
      unary_map<T>(task, full);
    }
  });
}

// base^exponent in integers, wrapping on overflow as torch does. A negative exponent gives 0 unless
// |base| == 1 (torch's integer pow).
template <typename I>
I integer_pow(I base, I exponent) {
  if constexpr (std::is_signed_v<I>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) ? I(-1) : I(1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<decltype(base + base)>;
  U result = 1, factor = static_cast<U>(base);
  for (U e = static_cast<U>(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return static_cast<I>(result);
}

// math::pow for floats (vectorised for float32, std::pow for double), the integer forms otherwise.
template <typename V>
inline __attribute__((always_inline)) V power(V base, V exponent) {
  if constexpr (std::is_floating_point_v<V>) return math::pow(base, exponent);
  else if constexpr (std::is_same_v<V, bool>) return base || !exponent;
  else return integer_pow(base, exponent);
}
}  // namespace

void exp_kernel(Task& task) {
  guarded_unary(task, [](float x) DG_VEC_INLINE_LAMBDA { return math::exp_normal_range(x); },
                [](float x) DG_VEC_INLINE_LAMBDA { return math::exp_in_normal_range(x); },
                [](auto x) DG_VEC_INLINE_LAMBDA { return math::exp(x); });
}
void log_kernel(Task& task) {
  guarded_unary(task, [](float x) DG_VEC_INLINE_LAMBDA { return math::log_normal_range(x); },
                [](float x) DG_VEC_INLINE_LAMBDA { return math::log_in_normal_range(x); },
                [](auto x) DG_VEC_INLINE_LAMBDA { return math::log(x); });
}
// math/elementary.h: vectorised for float32 (selects for the special values), libm for float64.
void expm1_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::expm1(x); }); }
void log1p_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::log1p(x); }); }
void sqrt_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return std::sqrt(x); }); }
void rsqrt_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return decltype(x)(1) / std::sqrt(x); }); }
void sin_kernel(Task& task) {
  guarded_unary(task, [](float x) DG_VEC_INLINE_LAMBDA { return math::sin_bounded(x); },
                [](float x) DG_VEC_INLINE_LAMBDA { return math::sin_cos_in_range(x); },
                [](auto x) { return std::sin(x); });
}
void cos_kernel(Task& task) {
  guarded_unary(task, [](float x) DG_VEC_INLINE_LAMBDA { return math::cos_bounded(x); },
                [](float x) DG_VEC_INLINE_LAMBDA { return math::sin_cos_in_range(x); },
                [](auto x) { return std::cos(x); });
}
void tanh_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::tanh(x); }); }
void sigmoid_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::sigmoid(x); }); }
void silu_kernel(Task& task) { floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::silu(x); }); }

void gelu_kernel(Task& task) {
  if (!task.attrs.get<GeluAttrs>().tanh_approximation) floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::gelu_erf(x); });
  else floating_unary(task, [](auto x) DG_VEC_INLINE_LAMBDA { return math::gelu_tanh(x); });
}

void abs_kernel(Task& task) {
  numeric_unary(task, []<typename V>(V x) DG_VEC_INLINE_LAMBDA -> V {
    if constexpr (std::is_floating_point_v<V>) return std::fabs(x);
    else if constexpr (std::is_unsigned_v<V>) return x;
    else {  // negation in unsigned arithmetic: the most negative value wraps to itself, as in torch
      using U = std::make_unsigned_t<V>;
      return x < 0 ? static_cast<V>(U(0) - static_cast<U>(x)) : x;
    }
  });
}

// Rounding: integers are already integral.
template <typename Round>
void rounding_kernel(Task& task, Round round) {
  numeric_unary(task, [round]<typename V>(V x) DG_VEC_INLINE_LAMBDA -> V {
    if constexpr (std::is_floating_point_v<V>) return round(x);
    else return x;
  });
}
void floor_kernel(Task& task) { rounding_kernel(task, [](auto x) DG_VEC_INLINE_LAMBDA { return std::floor(x); }); }
void ceil_kernel(Task& task) { rounding_kernel(task, [](auto x) DG_VEC_INLINE_LAMBDA { return std::ceil(x); }); }
void trunc_kernel(Task& task) { rounding_kernel(task, [](auto x) DG_VEC_INLINE_LAMBDA { return std::trunc(x); }); }
// std::nearbyint in the default rounding mode: half to even, as torch. The scale 10^|decimals| is computed in
// double and cast to the compute type (float32 for 16-bit floats), as torch's round_decimals kernel does.
void round_kernel(Task& task) {
  const int64_t decimals = task.attrs.get<RoundAttrs>().decimals;
  if (decimals == 0) return rounding_kernel(task, [](auto x) DG_VEC_INLINE_LAMBDA { return std::nearbyint(x); });
  const double scale = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  if (decimals > 0)
    rounding_kernel(task, [scale](auto x) DG_VEC_INLINE_LAMBDA {
      const auto s = static_cast<decltype(x)>(scale);
      return std::nearbyint(x * s) / s;
    });
  else
    rounding_kernel(task, [scale](auto x) DG_VEC_INLINE_LAMBDA {
      const auto s = static_cast<decltype(x)>(scale);
      return std::nearbyint(x / s) * s;
    });
}

// (0 < x) - (x < 0): 0 for +-0 and nan, as torch's CPU sign.
void sign_kernel(Task& task) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    unary_map<T>(task, []<typename V>(V x) DG_VEC_INLINE_LAMBDA -> V {
      if constexpr (std::is_same_v<V, bool>) return x;
      else return static_cast<V>(static_cast<int>(V(0) < x) - static_cast<int>(x < V(0)));
    });
  });
}

void reciprocal_kernel(Task& task) {
  floating_unary(task, []<typename V>(V x) DG_VEC_INLINE_LAMBDA -> V { return V(1) / x; });
}

// A floating predicate written as bool; integers and bool give `integral`.
template <typename Pred>
void predicate_kernel(Task& task, bool integral, Pred pred) {
  visit_dtype(task.inputs[0].dtype(), [&]<typename T>() {
    auto fn = [integral, pred](C<T> x) DG_VEC_INLINE_LAMBDA -> bool {
      if constexpr (std::is_floating_point_v<C<T>>) return pred(x);
      return integral;
    };
    unary_loop<decltype(fn), bool, T>(task, fn);
  });
}
void isnan_kernel(Task& task) { predicate_kernel(task, false, [](auto x) { return x != x; }); }
void isinf_kernel(Task& task) { predicate_kernel(task, false, [](auto x) { return std::isinf(x); }); }
void isfinite_kernel(Task& task) { predicate_kernel(task, true, [](auto x) { return std::isfinite(x); }); }

// max(x, 0) with nan kept (torch.relu(nan) is nan).
void relu_kernel(Task& task) {
  numeric_unary(task, []<typename V>(V x) DG_VEC_INLINE_LAMBDA -> V {
    if constexpr (std::is_unsigned_v<V>) return x;
    else return x < V(0) ? V(0) : x;
  });
}

// gelu', sigmoid', tanh', silu', relu': math/activations.h.
void gelu_backward_kernel(Task& task) {
  if (!task.attrs.get<GeluAttrs>().tanh_approximation)
    floating_binary(task, []<typename V>(V g, V x) DG_VEC_INLINE_LAMBDA -> V { return math::gelu_erf_backward(g, x); });
  else
    floating_binary(task, []<typename V>(V g, V x) DG_VEC_INLINE_LAMBDA -> V { return math::gelu_tanh_backward(g, x); });
}

void sigmoid_backward_kernel(Task& task) {
  floating_binary(task, []<typename V>(V g, V y) DG_VEC_INLINE_LAMBDA -> V { return math::sigmoid_backward(g, y); });
}
void tanh_backward_kernel(Task& task) {
  floating_binary(task, []<typename V>(V g, V y) DG_VEC_INLINE_LAMBDA -> V { return math::tanh_backward(g, y); });
}
void silu_backward_kernel(Task& task) {
  floating_binary(task, []<typename V>(V g, V x) DG_VEC_INLINE_LAMBDA -> V { return math::silu_backward(g, x); });
}
void relu_backward_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V g, V y) DG_VEC_INLINE_LAMBDA -> V { return math::relu_backward(g, y); });
}

void pow_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V base, V exponent) DG_VEC_INLINE_LAMBDA { return power(base, exponent); });
}

// Exponents with a cheaper exact form get their own loop; the rest call math::pow.
void pow_scalar_kernel(Task& task) {
  const Scalar exponent = task.attrs.get<ScalarAttrs>().value;
  const double p = exponent.to_double();
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    using V = C<T>;
    if constexpr (std::is_same_v<T, bool>) {
      unary_map<T>(task, [p](bool x) { return x || p == 0.0; });
    } else {
      if (p == 0.0) return unary_map<T>(task, [](V) { return V(1); });
      if (p == 1.0) return unary_map<T>(task, [](V x) { return x; });
      if (p == 2.0) return unary_map<T>(task, [](V x) { return V(x * x); });
      if (p == 3.0) return unary_map<T>(task, [](V x) { return V(x * x * x); });
      if constexpr (std::is_floating_point_v<V>) {
        if (p == -1.0) return unary_map<T>(task, [](V x) { return V(1) / x; });
        if (p == -2.0) return unary_map<T>(task, [](V x) { return V(1) / (x * x); });
        if (p == 0.5) return unary_map<T>(task, [](V x) { return std::sqrt(x); });
        if (p == -0.5) return unary_map<T>(task, [](V x) { return V(1) / std::sqrt(x); });
        const V e = static_cast<V>(p);
        unary_map<T>(task, [e](V x) DG_VEC_INLINE_LAMBDA { return math::pow(x, e); });
      } else {
        const V e = exponent.to<V>();
        unary_map<T>(task, [e](V x) { return integer_pow(x, e); });
      }
    }
  });
}

void rpow_scalar_kernel(Task& task) {
  const Scalar base = task.attrs.get<ScalarAttrs>().value;
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    using V = C<T>;
    const V b = base.to<V>();
    unary_map<T>(task, [b](V x) DG_VEC_INLINE_LAMBDA { return power(b, x); });
  });
}

// nan in either operand gives nan (torch.maximum), unlike std::max.
void maximum_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V a, V b) DG_VEC_INLINE_LAMBDA -> V { return math::maximum(a, b); });
}
// inputs (a, b) of one floating dtype: out = log(exp(a) + exp(b)) = max(a, b) + log1p(exp(-|a - b|)).
void logaddexp_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V a, V b) DG_VEC_INLINE_LAMBDA -> V {
    if constexpr (std::is_floating_point_v<V>) {
      return math::logaddexp(a, b);  // math/elementary.h: vectorised for float
    } else {
      return a > b ? a : b;  // not reached: the op refuses integral dtypes
    }
  });
}
// inputs (self, end, weight) of one floating dtype, broadcast.
void lerp_kernel(Task& task) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() {
    auto fn = [](T a, T b, T w) { return T(math::lerp<C<T>>(C<T>(a), C<T>(b), C<T>(w))); };
    ternary_loop<decltype(fn), T, T, T, T>(task, fn);
  });
}
// inputs (self, end); ScalarAttrs value = weight.
void lerp_scalar_kernel(Task& task) {
  const double weight = task.attrs.get<ScalarAttrs>().value.to_double();
  floating_binary(task, [weight]<typename V>(V a, V b) -> V { return math::lerp<V>(a, b, V(weight)); });
}
void minimum_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V a, V b) DG_VEC_INLINE_LAMBDA -> V { return math::minimum(a, b); });
}

void atan2_kernel(Task& task) {
  floating_binary(task, []<typename V>(V y, V x) -> V { return std::atan2(y, x); });
}

namespace {
[[noreturn, gnu::cold]] void raise_zero_division(const char* op) {
  DG_CHECK(false, Runtime, "[", op, "] ZeroDivisionError");
  __builtin_unreachable();
}
// Integer a mod b with the sign of a (C's %); INT_MIN % -1 is 0, not a trap.
template <typename V>
V integer_fmod(V a, V b, const char* op) {
  if (b == V(0)) raise_zero_division(op);
  if constexpr (std::is_signed_v<V>) {
    if (b == V(-1)) return V(0);
  }
  return static_cast<V>(a % b);
}
}  // namespace

// Floating: std::fmod, exact. Integers: C's remainder, the sign of a.
void fmod_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V a, V b) -> V {
    if constexpr (std::is_floating_point_v<V>) return std::fmod(a, b);
    else if constexpr (std::is_same_v<V, bool>) return a;  // not reached: the op refuses bool
    else return integer_fmod(a, b, "fmod");
  });
}
// Python's a % b, the sign of b: fmod moved by b where the signs differ (exact: no a - b floor(a / b) rounding).
void remainder_kernel(Task& task) {
  same_type_binary(task, []<typename V>(V a, V b) -> V {
    if constexpr (std::is_same_v<V, bool>) {
      return a;  // not reached: the op refuses bool
    } else {
      V mod;
      if constexpr (std::is_floating_point_v<V>) mod = std::fmod(a, b);
      else mod = integer_fmod(a, b, "remainder");
      if (mod != V(0) && ((b < V(0)) != (mod < V(0)))) mod = static_cast<V>(mod + b);
      return mod;
    }
  });
}

DG_REGISTER_KERNEL(exp, Device::Type::CPU, exp_kernel);
DG_REGISTER_KERNEL(log, Device::Type::CPU, log_kernel);
DG_REGISTER_KERNEL(expm1, Device::Type::CPU, expm1_kernel);
DG_REGISTER_KERNEL(log1p, Device::Type::CPU, log1p_kernel);
DG_REGISTER_KERNEL(sqrt, Device::Type::CPU, sqrt_kernel);
DG_REGISTER_KERNEL(rsqrt, Device::Type::CPU, rsqrt_kernel);
DG_REGISTER_KERNEL(abs, Device::Type::CPU, abs_kernel);
DG_REGISTER_KERNEL(floor, Device::Type::CPU, floor_kernel);
DG_REGISTER_KERNEL(round, Device::Type::CPU, round_kernel);
DG_REGISTER_KERNEL(ceil, Device::Type::CPU, ceil_kernel);
DG_REGISTER_KERNEL(trunc, Device::Type::CPU, trunc_kernel);
DG_REGISTER_KERNEL(sign, Device::Type::CPU, sign_kernel);
DG_REGISTER_KERNEL(reciprocal, Device::Type::CPU, reciprocal_kernel);
DG_REGISTER_KERNEL(isnan, Device::Type::CPU, isnan_kernel);
DG_REGISTER_KERNEL(isinf, Device::Type::CPU, isinf_kernel);
DG_REGISTER_KERNEL(isfinite, Device::Type::CPU, isfinite_kernel);
DG_REGISTER_KERNEL(sin, Device::Type::CPU, sin_kernel);
DG_REGISTER_KERNEL(cos, Device::Type::CPU, cos_kernel);
DG_REGISTER_KERNEL(tanh, Device::Type::CPU, tanh_kernel);
DG_REGISTER_KERNEL(sigmoid, Device::Type::CPU, sigmoid_kernel);
DG_REGISTER_KERNEL(silu, Device::Type::CPU, silu_kernel);
DG_REGISTER_KERNEL(relu, Device::Type::CPU, relu_kernel);
DG_REGISTER_KERNEL(gelu, Device::Type::CPU, gelu_kernel);
DG_REGISTER_KERNEL(gelu_backward, Device::Type::CPU, gelu_backward_kernel);
DG_REGISTER_KERNEL(sigmoid_backward, Device::Type::CPU, sigmoid_backward_kernel);
DG_REGISTER_KERNEL(tanh_backward, Device::Type::CPU, tanh_backward_kernel);
DG_REGISTER_KERNEL(silu_backward, Device::Type::CPU, silu_backward_kernel);
DG_REGISTER_KERNEL(relu_backward, Device::Type::CPU, relu_backward_kernel);
DG_REGISTER_KERNEL(pow, Device::Type::CPU, pow_kernel);
DG_REGISTER_KERNEL(pow_scalar, Device::Type::CPU, pow_scalar_kernel);
DG_REGISTER_KERNEL(rpow_scalar, Device::Type::CPU, rpow_scalar_kernel);
DG_REGISTER_KERNEL(maximum, Device::Type::CPU, maximum_kernel);
DG_REGISTER_KERNEL(minimum, Device::Type::CPU, minimum_kernel);
DG_REGISTER_KERNEL(logaddexp, Device::Type::CPU, logaddexp_kernel);
DG_REGISTER_KERNEL(lerp, Device::Type::CPU, lerp_kernel);
DG_REGISTER_KERNEL(lerp_scalar, Device::Type::CPU, lerp_scalar_kernel);
DG_REGISTER_KERNEL(atan2, Device::Type::CPU, atan2_kernel);
DG_REGISTER_KERNEL(fmod, Device::Type::CPU, fmod_kernel);
DG_REGISTER_KERNEL(remainder, Device::Type::CPU, remainder_kernel);

}  // namespace dg::cpu
