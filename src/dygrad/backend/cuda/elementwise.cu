// CUDA kernels: elementwise arithmetic, unary math, comparisons, where, casts and fills over strided, broadcast
// operands (elementwise.h; docs/cuda.md, "Kernels"). Compiles for sm_90; not yet run on a GPU.
//
// Shapes: out[N...] = f(a[N...] broadcast, b[N...] broadcast); one thread per output element (a grid-stride loop),
// each finding its operands through the offset calculator (offset_calc.h). The element math is the CPU's
// (math/*.h, __host__ __device__), in the compute type: float for bfloat16 and float16 (rounded once on store, to
// nearest even), the storage type otherwise. The op is a kernel argument, the same for every thread (a uniform
// branch), so the kernels are instantiated per dtype, not per op and dtype: the plugin's compile time is CI's.
// Every kernel first checks the stream's error word and does nothing after a fault (fault.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/backend/cuda/elementwise.h"
#include "dygrad/math/activations.h"
#include "dygrad/math/arithmetic.h"
#include "dygrad/math/elementary.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;

// --- storage and compute types ------------------------------------------------------------------------------------

template <typename C>
__device__ __forceinline__ C scalar_as(ScalarArg s) {
  if constexpr (std::is_floating_point_v<C>) return static_cast<C>(s.f);
  else if constexpr (std::is_same_v<C, bool>) return s.i != 0;
  else return static_cast<C>(s.i);
}

// --- the element math (the host launches floating ops only for floating dtypes) -------------------------------------
template <typename C>
__device__ __forceinline__ C unary_value(UnaryOp op, C x, C s) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case UnaryOp::Neg: return math::neg(x);
      case UnaryOp::Abs: return fabs(x);
      case UnaryOp::Exp: return math::exp(x);
      case UnaryOp::Log: return math::log(x);
      case UnaryOp::Expm1: return math::expm1(x);
      case UnaryOp::Log1p: return math::log1p(x);
      case UnaryOp::Sqrt: return sqrt(x);
      case UnaryOp::Rsqrt: return C(1) / sqrt(x);
      case UnaryOp::Reciprocal: return C(1) / x;
      case UnaryOp::Sigmoid: return math::sigmoid(x);
      case UnaryOp::Silu: return math::silu(x);
      case UnaryOp::Tanh: return math::tanh(x);
      case UnaryOp::Relu: return x > C(0) || x != x ? x : C(0);  // nan passes, as torch's
      case UnaryOp::GeluErf: return math::gelu_erf(x);
      case UnaryOp::GeluTanh: return math::gelu_tanh(x);
      case UnaryOp::Sin: return sin(x);
      case UnaryOp::Cos: return cos(x);
      case UnaryOp::Floor: return floor(x);
      case UnaryOp::Ceil: return ceil(x);
      case UnaryOp::Trunc: return trunc(x);
      case UnaryOp::Sign: return static_cast<C>(static_cast<int>(C(0) < x) - static_cast<int>(x < C(0)));
      case UnaryOp::AddScalar: return x + s;
      case UnaryOp::MulScalar: return x * s;
      case UnaryOp::DivScalar: return x / s;
      case UnaryOp::RsubScalar: return math::rsub(x, s);
      case UnaryOp::RdivScalar: return s / x;
      case UnaryOp::PowScalar: return math::pow(x, s);
      case UnaryOp::RpowScalar: return math::pow(s, x);
      default: return x;
    }
  } else {
    if constexpr (std::is_same_v<C, bool>) {
      if (op == UnaryOp::BitNot) return !x;
    } else if (op == UnaryOp::BitNot) {
      return static_cast<C>(~x);
    }
    switch (op) {
      case UnaryOp::BitAndScalar: return static_cast<C>(x & s);
      case UnaryOp::BitOrScalar: return static_cast<C>(x | s);
      case UnaryOp::BitXorScalar: return static_cast<C>(x ^ s);
      default: break;
    }
    switch (op) {
      case UnaryOp::Neg: return static_cast<C>(C(0) - x);
      case UnaryOp::Abs:
        if constexpr (std::is_signed_v<C>) return x < C(0) ? static_cast<C>(C(0) - x) : x;
        else return x;
      case UnaryOp::Relu: return x > C(0) ? x : C(0);
      case UnaryOp::Sign:
        if constexpr (std::is_signed_v<C>) return static_cast<C>(static_cast<int>(C(0) < x) - static_cast<int>(x < C(0)));
        else return static_cast<C>(C(0) < x);
      case UnaryOp::AddScalar: return static_cast<C>(x + s);
      case UnaryOp::MulScalar: return static_cast<C>(x * s);
      case UnaryOp::RsubScalar: return static_cast<C>(s - x);
      default: return x;  // floor, ceil, trunc: integers are integral
    }
  }
}

// nan-propagating bounds, as torch.clamp and the CPU kernel (backend/cpu/compare.cpp, clamp_value).
template <typename C>
__device__ __forceinline__ C clamp_value(C x, C lo, C hi, bool has_lo, bool has_hi) {
  if constexpr (std::is_floating_point_v<C>) {
    if (has_lo) x = (lo != lo || x < lo) ? lo : x;
    if (has_hi) x = (hi != hi || x > hi) ? hi : x;
  } else {
    if (has_lo) x = x < lo ? lo : x;
    if (has_hi) x = x > hi ? hi : x;
  }
  return x;
}

template <typename C>
__device__ __forceinline__ bool unary_predicate(UnaryOp op, C x, C s) {
  switch (op) {
    case UnaryOp::EqScalar: return x == s;
    case UnaryOp::NeScalar: return x != s;
    case UnaryOp::LtScalar: return x < s;
    case UnaryOp::LeScalar: return x <= s;
    case UnaryOp::GtScalar: return x > s;
    case UnaryOp::GeScalar: return x >= s;
    case UnaryOp::IsNan: if constexpr (std::is_floating_point_v<C>) return x != x; else return false;
    case UnaryOp::IsInf: if constexpr (std::is_floating_point_v<C>) return isinf(x); else return false;
    case UnaryOp::IsFinite: if constexpr (std::is_floating_point_v<C>) return isfinite(x); else return true;
    case UnaryOp::LogicalNot: return !(x != C(0));  // nan is true, so its negation is false
    default: return false;
  }
}

template <typename C>
__device__ __forceinline__ C binary_value(BinaryOp op, C a, C b, C alpha) {
  switch (op) {
    case BinaryOp::Add: return math::add_scaled(a, b, alpha);
    case BinaryOp::Mul: return math::mul(a, b);
    case BinaryOp::Div: return math::div(a, b);
    case BinaryOp::Maximum: return math::maximum(a, b);
    case BinaryOp::Minimum: return math::minimum(a, b);
    case BinaryOp::ReluBackward: return math::relu_backward(a, b);
    default: break;
  }
  if constexpr (!std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::BitAnd: return static_cast<C>(a & b);
      case BinaryOp::BitOr: return static_cast<C>(a | b);
      case BinaryOp::BitXor: return static_cast<C>(a ^ b);
      default: break;
    }
  }
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::Pow: return math::pow(a, b);
      case BinaryOp::SigmoidBackward: return math::sigmoid_backward(a, b);
      case BinaryOp::TanhBackward: return math::tanh_backward(a, b);
      case BinaryOp::SiluBackward: return math::silu_backward(a, b);
      case BinaryOp::GeluErfBackward: return math::gelu_erf_backward(a, b);
      case BinaryOp::GeluTanhBackward: return math::gelu_tanh_backward(a, b);
      case BinaryOp::Swiglu: return math::swiglu(a, b);
      case BinaryOp::Logaddexp: return math::logaddexp(a, b);
      case BinaryOp::LerpScalar: return math::lerp<C>(a, b, alpha);
      default: break;
    }
  }
  return a;
}

template <typename C>
__device__ __forceinline__ bool binary_predicate(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return (a != C(0)) && (b != C(0));
    case BinaryOp::LogicalOr: return (a != C(0)) || (b != C(0));
    default: return false;
  }
}

// --- the kernels ------------------------------------------------------------------------------------------------------
#define DG_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

bool is_predicate(UnaryOp op) { return op >= UnaryOp::EqScalar; }
bool is_predicate(BinaryOp op) { return op >= BinaryOp::Eq; }

// out: S [n] (strided), in: S [n] (strided, broadcast); out = op(in, s), or bool out = predicate(in, s)
template <typename S, typename SOut, bool kPredicate>
__global__ void unary_kernel(FaultContext fault, OffsetCalculator<2> calc, int64_t n, SOut* out, const S* in,
                             UnaryOp op, ScalarArg s) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  const C sc = scalar_as<C>(s);
  ScalarArg upper = s;
  upper.f = s.f2, upper.i = s.i2;
  const C hi = scalar_as<C>(upper);
  DG_GRID_STRIDE(i, n) {
    int64_t off[2];
    calc.get(i, off);
    const C x = load(in + off[1]);
    if constexpr (kPredicate) store(out + off[0], unary_predicate(op, x, sc));
    else if (op == UnaryOp::Clamp) store(out + off[0], clamp_value(x, sc, hi, s.has_min, s.has_max));
    else store(out + off[0], unary_value(op, x, sc));
  }
}

// out: SOut [n], in: SIn [n]; out = convert(in) (in-range values as torch's; out-of-range ones are undefined in both)
template <typename SOut, typename SIn>
__global__ void cast_kernel(FaultContext fault, OffsetCalculator<2> calc, int64_t n, SOut* out, const SIn* in) {
  if (stream_faulted(fault)) return;
  DG_GRID_STRIDE(i, n) {
    int64_t off[2];
    calc.get(i, off);
    store(out + off[0], load(in + off[1]));
  }
}

// out: S [n]; out = s
template <typename S>
__global__ void fill_kernel(FaultContext fault, OffsetCalculator<1> calc, int64_t n, S* out, ScalarArg s) {
  if (stream_faulted(fault)) return;
  const compute_t<S> v = scalar_as<compute_t<S>>(s);
  DG_GRID_STRIDE(i, n) {
    int64_t off[1];
    calc.get(i, off);
    store(out + off[0], v);
  }
}

// out: S or bool [n], a, b: S [n] (broadcast); out = op(a, b, alpha)
template <typename S, typename SOut, bool kPredicate>
__global__ void binary_kernel(FaultContext fault, OffsetCalculator<3> calc, int64_t n, SOut* out, const S* a,
                              const S* b, BinaryOp op, ScalarArg alpha) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  const C al = scalar_as<C>(alpha);
  DG_GRID_STRIDE(i, n) {
    int64_t off[3];
    calc.get(i, off);
    const C x = load(a + off[1]), y = load(b + off[2]);
    if constexpr (kPredicate) store(out + off[0], binary_predicate(op, x, y));
    else store(out + off[0], binary_value(op, x, y, al));
  }
}

// out, a, b: S [n], cond: bool [n] (all broadcast); out = cond ? a : b
template <typename S>
__global__ void where_kernel(FaultContext fault, OffsetCalculator<4> calc, int64_t n, S* out, const bool* cond,
                             const S* a, const S* b) {
  if (stream_faulted(fault)) return;
  DG_GRID_STRIDE(i, n) {
    int64_t off[4];
    calc.get(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// out, a: S [n], cond: bool [n] (broadcast); out = cond ? s : a (scalar_when_true) or cond ? a : s
template <typename S>
__global__ void select_scalar_kernel(FaultContext fault, OffsetCalculator<3> calc, int64_t n, S* out,
                                     const bool* cond, const S* a, ScalarArg s, bool scalar_when_true) {
  if (stream_faulted(fault)) return;
  S value;
  store(&value, scalar_as<compute_t<S>>(s));
  DG_GRID_STRIDE(i, n) {
    int64_t off[3];
    calc.get(i, off);
    out[off[0]] = cond[off[1]] == scalar_when_true ? value : a[off[2]];
  }
}

// grad_gate, grad_up: S [n], g, gate, up: S [n] (all strided); the CPU kernel's per-element math
template <typename S>
__global__ void swiglu_backward_kernel(FaultContext fault, OffsetCalculator<5> calc, int64_t n, S* grad_gate,
                                       S* grad_up, const S* g, const S* gate, const S* up) {
  if (stream_faulted(fault)) return;
  DG_GRID_STRIDE(i, n) {
    int64_t off[5];
    calc.get(i, off);
    const auto a = load(gate + off[3]);
    const auto grad = math::swiglu_backward(load(g + off[2]), a, load(up + off[4]), math::sigmoid(a));
    store(grad_gate + off[0], grad.a);
    store(grad_up + off[1], grad.b);
  }
}

// --- dispatch ---------------------------------------------------------------------------------------------------------

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (int64_t{1} << 20) ? (blocks > 0 ? blocks : 1) : (int64_t{1} << 20));
}

}  // namespace

void launch_unary(UnaryOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<2>& calc, int64_t n,
                  void* out, const void* in, ScalarArg s, const LaunchArgs& args) {
  if (n == 0) return;
  if (op == UnaryOp::Copy) {
    visit(out_type, [&]<typename SOut>() {
      visit(in_type, [&]<typename SIn>() {
        cast_kernel<SOut, SIn><<<blocks_for(n), kThreads, 0, args.stream>>>(args.fault, calc, n, static_cast<SOut*>(out),
                                                                            static_cast<const SIn*>(in));
      });
    });
    return;
  }
  visit(in_type, [&]<typename S>() {
    if (is_predicate(op))
      unary_kernel<S, bool, true><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, calc, n, static_cast<bool*>(out), static_cast<const S*>(in), op, s);
    else
      unary_kernel<S, S, false><<<blocks_for(n), kThreads, 0, args.stream>>>(args.fault, calc, n, static_cast<S*>(out),
                                                                      static_cast<const S*>(in), op, s);
  });
}

void launch_fill(ElemType type, const OffsetCalculator<1>& calc, int64_t n, void* out, ScalarArg s,
                 const LaunchArgs& args) {
  if (n == 0) return;
  visit(type, [&]<typename S>() {
    fill_kernel<S><<<blocks_for(n), kThreads, 0, args.stream>>>(args.fault, calc, n, static_cast<S*>(out), s);
  });
}

void launch_binary(BinaryOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<3>& calc, int64_t n,
                   void* out, const void* a, const void* b, ScalarArg alpha, const LaunchArgs& args) {
  if (n == 0) return;
  visit(in_type, [&]<typename S>() {
    if (is_predicate(op))
      binary_kernel<S, bool, true><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, calc, n, static_cast<bool*>(out), static_cast<const S*>(a), static_cast<const S*>(b), op, alpha);
    else
      binary_kernel<S, S, false><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, calc, n, static_cast<S*>(out), static_cast<const S*>(a), static_cast<const S*>(b), op, alpha);
  });
}

void launch_where(ElemType type, const OffsetCalculator<4>& calc, int64_t n, void* out, const void* cond,
                  const void* a, const void* b, const LaunchArgs& args) {
  if (n == 0) return;
  visit(type, [&]<typename S>() {
    where_kernel<S><<<blocks_for(n), kThreads, 0, args.stream>>>(args.fault, calc, n, static_cast<S*>(out),
                                                                 static_cast<const bool*>(cond),
                                                                 static_cast<const S*>(a), static_cast<const S*>(b));
  });
}

void launch_select_scalar(ElemType type, const OffsetCalculator<3>& calc, int64_t n, void* out, const void* cond,
                          const void* a, ScalarArg s, bool scalar_when_true, const LaunchArgs& args) {
  if (n == 0) return;
  visit(type, [&]<typename S>() {
    select_scalar_kernel<S><<<blocks_for(n), kThreads, 0, args.stream>>>(
        args.fault, calc, n, static_cast<S*>(out), static_cast<const bool*>(cond), static_cast<const S*>(a), s,
        scalar_when_true);
  });
}

void launch_swiglu_backward(ElemType type, const OffsetCalculator<5>& calc, int64_t n, void* grad_gate,
                            void* grad_up, const void* g, const void* gate, const void* up, const LaunchArgs& args) {
  if (n == 0) return;
  auto run = [&]<typename S>() {
    swiglu_backward_kernel<S><<<blocks_for(n), kThreads, 0, args.stream>>>(
        args.fault, calc, n, static_cast<S*>(grad_gate), static_cast<S*>(grad_up), static_cast<const S*>(g),
        static_cast<const S*>(gate), static_cast<const S*>(up));
  };
  switch (type) {
    case ElemType::Float64: return run.template operator()<double>();
    case ElemType::BFloat16: return run.template operator()<__nv_bfloat16>();
    case ElemType::Float16: return run.template operator()<__half>();
    default: return run.template operator()<float>();
  }
}

}  // namespace dg::cuda
