// The CUDA elementwise kernels' launch interface (elementwise.cu), in plain types so that the kernels' translation
// unit includes no runtime header: the host side (elementwise_ops.cpp) turns a Task into these calls.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "dygrad/backend/cuda/fault.h"
#include "dygrad/backend/cuda/offset_calc.h"

namespace dg::cuda {

// The dtypes the elementwise kernels take (storage types; bfloat16 and float16 compute in float, as on the CPU).
enum class ElemType : int32_t { Float32, Float64, BFloat16, Float16, Int64, Int32, Int16, Int8, UInt8, Bool };

// One output element from one input (and a scalar s, in the compute type's double or integer form).
enum class UnaryOp : int32_t {
  Copy,  // a cast: out = convert(in)
  Neg, Abs, Exp, Log, Expm1, Log1p, Sqrt, Rsqrt, Reciprocal, Sigmoid, Silu, Tanh, Relu, GeluErf, GeluTanh, Sin, Cos,
  Floor, Ceil, Trunc, Sign,
  AddScalar, MulScalar, DivScalar, RsubScalar, RdivScalar, PowScalar, RpowScalar,
  Clamp,                                            // s: the min (has_min), s2: the max (has_max); nan propagates
  BitNot, BitAndScalar, BitOrScalar, BitXorScalar,  // integral and bool only
  EqScalar, NeScalar, LtScalar, LeScalar, GtScalar, GeScalar,  // out: bool
  IsNan, IsInf, IsFinite, LogicalNot,                          // out: bool
};
// One output element from two inputs of one dtype (alpha: add's multiplier).
enum class BinaryOp : int32_t {
  Add, Mul, Div, Maximum, Minimum, Pow,
  SigmoidBackward, TanhBackward, SiluBackward, ReluBackward, GeluErfBackward, GeluTanhBackward,
  Swiglu,  // silu(gate) * up (the fused op's forward)
  Logaddexp, LerpScalar,  // floating only; LerpScalar's weight is alpha
  BitAnd, BitOr, BitXor,   // integral and bool only
  Eq, Ne, Lt, Le, Gt, Ge,  // out: bool
  LogicalAnd, LogicalOr,   // bool inputs, out: bool
};

struct ScalarArg {
  double f = 0;   // for a floating compute type
  int64_t i = 0;  // for an integer or bool one
  double f2 = 0;  // a second scalar (clamp's max)
  int64_t i2 = 0;
  bool has_min = false, has_max = false;  // clamp's bounds
};

struct LaunchArgs {
  cudaStream_t stream;
  FaultContext fault;
};

// out[n] = op(in[n]) over the calculator's offsets (operand 0 the output): out_type is in_type, bool for the
// predicates (EqScalar and after), any type for Copy.
void launch_unary(UnaryOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<2>& calc, int64_t n,
                  void* out, const void* in, ScalarArg s, const LaunchArgs& args);
void launch_fill(ElemType type, const OffsetCalculator<1>& calc, int64_t n, void* out, ScalarArg s,
                 const LaunchArgs& args);
// out[n] = op(a[n], b[n]); a and b of in_type; out of in_type, bool for the comparisons (Eq and after).
void launch_binary(BinaryOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<3>& calc, int64_t n,
                   void* out, const void* a, const void* b, ScalarArg alpha, const LaunchArgs& args);
// out[n] = cond[n] ? s : a[n] (scalar_when_true) or cond[n] ? a[n] : s; cond bool, a and out of `type`
// (where_scalar; masked_fill is cond = its mask, scalar_when_true). Operands of calc: out, cond, a.
void launch_select_scalar(ElemType type, const OffsetCalculator<3>& calc, int64_t n, void* out, const void* cond,
                          const void* a, ScalarArg s, bool scalar_when_true, const LaunchArgs& args);
// SwiGLU's backward (backend/cpu/fused_swiglu.cpp): s = sigmoid(gate), (grad_gate, grad_up) =
// math::swiglu_backward(g, gate, up, s); operands of calc: grad_gate, grad_up, g, gate, up, all of floating `type`.
void launch_swiglu_backward(ElemType type, const OffsetCalculator<5>& calc, int64_t n, void* grad_gate,
                            void* grad_up, const void* g, const void* gate, const void* up, const LaunchArgs& args);
// out[n] = cond[n] ? a[n] : b[n]; cond bool, a, b and out of `type`.
void launch_where(ElemType type, const OffsetCalculator<4>& calc, int64_t n, void* out, const void* cond,
                  const void* a, const void* b, const LaunchArgs& args);

}  // namespace dg::cuda
