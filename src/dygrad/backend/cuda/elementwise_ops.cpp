// The CUDA backend's elementwise ops: each Task becomes one launch of elementwise.cu's kernels, with the operands'
// strides in an offset calculator (offset_calc.h) and the op's attributes as a scalar. The operands' dtypes are
// the CPU kernels' (the op layer has cast them); a dtype the kernels do not take raises naming the op and dtype.
// Compiles for sm_90; not yet run on a GPU.
#include <type_traits>

#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/backend/cuda/elementwise.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {


bool is_floating_elem(ElemType t) {
  return t == ElemType::Float32 || t == ElemType::Float64 || t == ElemType::BFloat16 || t == ElemType::Float16;
}

// The calculator over the output's shape for operands (output first); raises naming the op past kMaxOffsetDims.
template <int N>
OffsetCalculator<N> calculator(const Task& task, const Tensor* const (&operands)[N]) {
  OperandLayout layouts[N];
  for (int k = 0; k < N; ++k) layouts[k] = {operands[k]->shape(), operands[k]->strides()};
  OffsetCalculator<N> calc;
  DG_CHECK(make_offset_calculator<N>(task.outputs[0].shape(), layouts, calc), NotImplemented, "[", task.op->name,
           "] the CUDA kernels take at most ", kMaxOffsetDims, " dims after merging, got shape ",
           task.outputs[0].shape());
  return calc;
}

ScalarArg scalar_arg(const Scalar& s) { return {s.to<double>(), s.to<int64_t>()}; }

LaunchArgs launch_args(const Task& task) {
  const LaunchContext ctx = launch_context(task);
  return {ctx.stream, ctx.fault};
}

// out = op(in, scalar): floating-only ops refuse integer and bool inputs (the op layer sends floats).
void run_unary(Task& task, UnaryOp op, bool floating_only, ScalarArg s = {}) {
  const Tensor& out = task.outputs[0];
  const Tensor& in = task.inputs[0];
  const ElemType in_type = elem_type(task, in.dtype(), floating_only), out_type = elem_type(task, out.dtype());
  const Tensor* const operands[2] = {&out, &in};
  const LaunchArgs args = launch_args(task);
  launch_unary(op, out_type, in_type, calculator<2>(task, operands), out.numel(), out.raw_data(), in.raw_data(), s,
               args);
  check_launch(task);
}

void run_binary(Task& task, BinaryOp op, bool floating_only, ScalarArg alpha = {1.0, 1}) {
  const Tensor& out = task.outputs[0];
  const Tensor& a = task.inputs[0];
  const Tensor& b = task.inputs[1];
  const ElemType in_type = elem_type(task, a.dtype()), out_type = elem_type(task, out.dtype());
  DG_CHECK(a.dtype() == b.dtype(), Type, "[", task.op->name, "] the CUDA kernel takes operands of one dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  if (floating_only) elem_type(task, a.dtype(), true);  // refuses integer and bool operands
  const Tensor* const operands[3] = {&out, &a, &b};
  const LaunchArgs args = launch_args(task);
  launch_binary(op, out_type, in_type, calculator<3>(task, operands), out.numel(), out.raw_data(), a.raw_data(),
                b.raw_data(), alpha, args);
  check_launch(task);
}

ScalarArg scalar_attr(const Task& task) { return scalar_arg(task.attrs.get<ScalarAttrs>().value); }

template <UnaryOp kOp, bool kFloatingOnly>
void unary_kernel(Task& task) { run_unary(task, kOp, kFloatingOnly); }
template <UnaryOp kOp, bool kFloatingOnly>
void unary_scalar_kernel(Task& task) { run_unary(task, kOp, kFloatingOnly, scalar_attr(task)); }
template <BinaryOp kOp, bool kFloatingOnly>
void binary_kernel(Task& task) { run_binary(task, kOp, kFloatingOnly); }

// inputs (a, b), ScalarAttrs value = the weight: a + w (b - a), torch's two formulas (math::lerp).
void lerp_scalar_kernel(Task& task) { run_binary(task, BinaryOp::LerpScalar, true, scalar_attr(task)); }
void add_kernel(Task& task) { run_binary(task, BinaryOp::Add, false, scalar_arg(task.attrs.get<AddAttrs>().alpha)); }
void gelu_kernel(Task& task) {
  run_unary(task, task.attrs.get<GeluAttrs>().tanh_approximation ? UnaryOp::GeluTanh : UnaryOp::GeluErf, true);
}
void gelu_backward_kernel(Task& task) {
  run_binary(task, task.attrs.get<GeluAttrs>().tanh_approximation ? BinaryOp::GeluTanhBackward
                                                                   : BinaryOp::GeluErfBackward, true);
}

// The bitwise ops take integral and bool dtypes only (the op layer refuses floating ones before a Task exists).
void require_integral(const Task& task, DType d) {
  DG_CHECK(!is_floating_elem(elem_type(task, d)), Type, "[", task.op->name, "] takes integral or bool tensors, got ",
           dtype_name(d));
}
template <BinaryOp kOp>
void bitwise_kernel(Task& task) {
  require_integral(task, task.inputs[0].dtype());
  run_binary(task, kOp, false);
}
template <UnaryOp kOp>
void bitwise_scalar_kernel(Task& task) {
  require_integral(task, task.inputs[0].dtype());
  run_unary(task, kOp, false, scalar_attr(task));
}
void bitwise_not_kernel(Task& task) {  // ~a, or not a for bool
  require_integral(task, task.inputs[0].dtype());
  run_unary(task, UnaryOp::BitNot, false);
}

// input (x), ClampAttrs: min when has_min, max when has_max (nan-propagating).
void clamp_scalar_kernel(Task& task) {
  const ClampAttrs& attrs = task.attrs.get<ClampAttrs>();
  ScalarArg s = scalar_arg(attrs.min);
  const ScalarArg upper = scalar_arg(attrs.max);
  s.f2 = upper.f, s.i2 = upper.i, s.has_min = attrs.has_min, s.has_max = attrs.has_max;
  run_unary(task, UnaryOp::Clamp, false, s);
}

// out = cond ? s : a, or cond ? a : s: where_scalar (inputs (cond, a)) and masked_fill (inputs (a, mask)).
void select_scalar(Task& task, const Tensor& cond, const Tensor& a, const Scalar& value, bool scalar_when_true) {
  const Tensor& out = task.outputs[0];
  DG_CHECK(cond.dtype() == DType::Bool, Type, "[", task.op->name, "] the condition must be bool, got ",
           dtype_name(cond.dtype()));
  const Tensor* const operands[3] = {&out, &cond, &a};
  const LaunchArgs args = launch_args(task);
  launch_select_scalar(elem_type(task, out.dtype()), calculator<3>(task, operands), out.numel(), out.raw_data(),
                       cond.raw_data(), a.raw_data(), scalar_arg(value), scalar_when_true, args);
  check_launch(task);
}
void where_scalar_kernel(Task& task) {
  const WhereScalarAttrs& attrs = task.attrs.get<WhereScalarAttrs>();
  select_scalar(task, task.inputs[0], task.inputs[1], attrs.value, attrs.scalar_when_true);
}
void masked_fill_kernel(Task& task) {
  select_scalar(task, task.inputs[1], task.inputs[0], task.attrs.get<ScalarAttrs>().value, true);
}

// inputs (grad_y, gate, up); outputs (grad_gate, grad_up), any strides, of one floating dtype.
void swiglu_backward_kernel(Task& task) {
  const Tensor& grad_gate = task.outputs[0];
  const Tensor& grad_up = task.outputs[1];
  const ElemType type = elem_type(task, grad_gate.dtype(), true);
  const Tensor* const operands[5] = {&grad_gate, &grad_up, &task.inputs[0], &task.inputs[1], &task.inputs[2]};
  const LaunchArgs args = launch_args(task);
  launch_swiglu_backward(type, calculator<5>(task, operands), grad_gate.numel(), grad_gate.raw_data(),
                         grad_up.raw_data(), task.inputs[0].raw_data(), task.inputs[1].raw_data(),
                         task.inputs[2].raw_data(), args);
  check_launch(task);
}

// out = cast(src), src broadcast to out's shape (any of the kernels' dtypes on either side).
void copy_kernel(Task& task) { run_unary(task, UnaryOp::Copy, false); }

void fill_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const Tensor* const operands[1] = {&out};
  const LaunchArgs args = launch_args(task);
  launch_fill(elem_type(task, out.dtype()), calculator<1>(task, operands), out.numel(), out.raw_data(),
              scalar_attr(task), args);
  check_launch(task);
}

// inputs (cond bool, a, b): out = cond ? a : b
void where_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const Tensor* const operands[4] = {&out, &task.inputs[0], &task.inputs[1], &task.inputs[2]};
  DG_CHECK(task.inputs[0].dtype() == DType::Bool, Type, "[where] the condition must be bool, got ",
           dtype_name(task.inputs[0].dtype()));
  const LaunchArgs args = launch_args(task);
  launch_where(elem_type(task, out.dtype()), calculator<4>(task, operands), out.numel(), out.raw_data(),
               task.inputs[0].raw_data(), task.inputs[1].raw_data(), task.inputs[2].raw_data(), args);
  check_launch(task);
}

}  // namespace

// Arithmetic, casts and fills (backend/cpu/arithmetic.cpp's ops).
DG_REGISTER_KERNEL(add, Device::Type::CUDA, add_kernel);
DG_REGISTER_KERNEL(mul, Device::Type::CUDA, (binary_kernel<BinaryOp::Mul, false>));
DG_REGISTER_KERNEL(div, Device::Type::CUDA, (binary_kernel<BinaryOp::Div, false>));
DG_REGISTER_KERNEL(add_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::AddScalar, false>));
DG_REGISTER_KERNEL(mul_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::MulScalar, false>));
DG_REGISTER_KERNEL(div_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::DivScalar, true>));
DG_REGISTER_KERNEL(rsub_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::RsubScalar, false>));
DG_REGISTER_KERNEL(rdiv_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::RdivScalar, true>));
DG_REGISTER_KERNEL(neg, Device::Type::CUDA, (unary_kernel<UnaryOp::Neg, false>));
DG_REGISTER_KERNEL(copy, Device::Type::CUDA, copy_kernel);
DG_REGISTER_KERNEL(fill, Device::Type::CUDA, fill_kernel);
// Unary math (backend/cpu/unary.cpp's).
DG_REGISTER_KERNEL(exp, Device::Type::CUDA, (unary_kernel<UnaryOp::Exp, true>));
DG_REGISTER_KERNEL(log, Device::Type::CUDA, (unary_kernel<UnaryOp::Log, true>));
DG_REGISTER_KERNEL(expm1, Device::Type::CUDA, (unary_kernel<UnaryOp::Expm1, true>));
DG_REGISTER_KERNEL(log1p, Device::Type::CUDA, (unary_kernel<UnaryOp::Log1p, true>));
DG_REGISTER_KERNEL(sqrt, Device::Type::CUDA, (unary_kernel<UnaryOp::Sqrt, true>));
DG_REGISTER_KERNEL(rsqrt, Device::Type::CUDA, (unary_kernel<UnaryOp::Rsqrt, true>));
DG_REGISTER_KERNEL(abs, Device::Type::CUDA, (unary_kernel<UnaryOp::Abs, false>));
DG_REGISTER_KERNEL(floor, Device::Type::CUDA, (unary_kernel<UnaryOp::Floor, false>));
DG_REGISTER_KERNEL(ceil, Device::Type::CUDA, (unary_kernel<UnaryOp::Ceil, false>));
DG_REGISTER_KERNEL(trunc, Device::Type::CUDA, (unary_kernel<UnaryOp::Trunc, false>));
DG_REGISTER_KERNEL(sign, Device::Type::CUDA, (unary_kernel<UnaryOp::Sign, false>));
DG_REGISTER_KERNEL(reciprocal, Device::Type::CUDA, (unary_kernel<UnaryOp::Reciprocal, true>));
DG_REGISTER_KERNEL(sin, Device::Type::CUDA, (unary_kernel<UnaryOp::Sin, true>));
DG_REGISTER_KERNEL(cos, Device::Type::CUDA, (unary_kernel<UnaryOp::Cos, true>));
DG_REGISTER_KERNEL(tanh, Device::Type::CUDA, (unary_kernel<UnaryOp::Tanh, true>));
DG_REGISTER_KERNEL(sigmoid, Device::Type::CUDA, (unary_kernel<UnaryOp::Sigmoid, true>));
DG_REGISTER_KERNEL(silu, Device::Type::CUDA, (unary_kernel<UnaryOp::Silu, true>));
DG_REGISTER_KERNEL(relu, Device::Type::CUDA, (unary_kernel<UnaryOp::Relu, false>));
DG_REGISTER_KERNEL(gelu, Device::Type::CUDA, gelu_kernel);
DG_REGISTER_KERNEL(isnan, Device::Type::CUDA, (unary_kernel<UnaryOp::IsNan, false>));
DG_REGISTER_KERNEL(isinf, Device::Type::CUDA, (unary_kernel<UnaryOp::IsInf, false>));
DG_REGISTER_KERNEL(isfinite, Device::Type::CUDA, (unary_kernel<UnaryOp::IsFinite, false>));
DG_REGISTER_KERNEL(pow_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::PowScalar, true>));
DG_REGISTER_KERNEL(rpow_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::RpowScalar, true>));
// Binary math and the fused first-order backward kernels.
DG_REGISTER_KERNEL(maximum, Device::Type::CUDA, (binary_kernel<BinaryOp::Maximum, false>));
DG_REGISTER_KERNEL(minimum, Device::Type::CUDA, (binary_kernel<BinaryOp::Minimum, false>));
DG_REGISTER_KERNEL(pow, Device::Type::CUDA, (binary_kernel<BinaryOp::Pow, true>));
DG_REGISTER_KERNEL(logaddexp, Device::Type::CUDA, (binary_kernel<BinaryOp::Logaddexp, true>));
DG_REGISTER_KERNEL(lerp_scalar, Device::Type::CUDA, lerp_scalar_kernel);
DG_REGISTER_KERNEL(sigmoid_backward, Device::Type::CUDA, (binary_kernel<BinaryOp::SigmoidBackward, true>));
DG_REGISTER_KERNEL(tanh_backward, Device::Type::CUDA, (binary_kernel<BinaryOp::TanhBackward, true>));
DG_REGISTER_KERNEL(silu_backward, Device::Type::CUDA, (binary_kernel<BinaryOp::SiluBackward, true>));
DG_REGISTER_KERNEL(relu_backward, Device::Type::CUDA, (binary_kernel<BinaryOp::ReluBackward, false>));
DG_REGISTER_KERNEL(gelu_backward, Device::Type::CUDA, gelu_backward_kernel);
// SwiGLU's forward (backend/cpu/fused_swiglu.cpp): inputs (gate, up) of one shape, any strides.
DG_REGISTER_KERNEL(swiglu, Device::Type::CUDA, (binary_kernel<BinaryOp::Swiglu, true>));
DG_REGISTER_KERNEL(swiglu_packed, Device::Type::CUDA, (binary_kernel<BinaryOp::Swiglu, true>));
DG_REGISTER_KERNEL(swiglu_backward, Device::Type::CUDA, swiglu_backward_kernel);
// Comparisons and selection (backend/cpu/compare.cpp's).
DG_REGISTER_KERNEL(eq, Device::Type::CUDA, (binary_kernel<BinaryOp::Eq, false>));
DG_REGISTER_KERNEL(ne, Device::Type::CUDA, (binary_kernel<BinaryOp::Ne, false>));
DG_REGISTER_KERNEL(lt, Device::Type::CUDA, (binary_kernel<BinaryOp::Lt, false>));
DG_REGISTER_KERNEL(le, Device::Type::CUDA, (binary_kernel<BinaryOp::Le, false>));
DG_REGISTER_KERNEL(gt, Device::Type::CUDA, (binary_kernel<BinaryOp::Gt, false>));
DG_REGISTER_KERNEL(ge, Device::Type::CUDA, (binary_kernel<BinaryOp::Ge, false>));
DG_REGISTER_KERNEL(eq_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::EqScalar, false>));
DG_REGISTER_KERNEL(ne_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::NeScalar, false>));
DG_REGISTER_KERNEL(lt_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::LtScalar, false>));
DG_REGISTER_KERNEL(le_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::LeScalar, false>));
DG_REGISTER_KERNEL(gt_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::GtScalar, false>));
DG_REGISTER_KERNEL(ge_scalar, Device::Type::CUDA, (unary_scalar_kernel<UnaryOp::GeScalar, false>));
DG_REGISTER_KERNEL(where, Device::Type::CUDA, where_kernel);
DG_REGISTER_KERNEL(where_scalar, Device::Type::CUDA, where_scalar_kernel);
DG_REGISTER_KERNEL(masked_fill, Device::Type::CUDA, masked_fill_kernel);
DG_REGISTER_KERNEL(clamp_scalar, Device::Type::CUDA, clamp_scalar_kernel);
DG_REGISTER_KERNEL(logical_not, Device::Type::CUDA, (unary_kernel<UnaryOp::LogicalNot, false>));
DG_REGISTER_KERNEL(logical_and, Device::Type::CUDA, (binary_kernel<BinaryOp::LogicalAnd, false>));
DG_REGISTER_KERNEL(logical_or, Device::Type::CUDA, (binary_kernel<BinaryOp::LogicalOr, false>));
DG_REGISTER_KERNEL(bitwise_and, Device::Type::CUDA, bitwise_kernel<BinaryOp::BitAnd>);
DG_REGISTER_KERNEL(bitwise_or, Device::Type::CUDA, bitwise_kernel<BinaryOp::BitOr>);
DG_REGISTER_KERNEL(bitwise_xor, Device::Type::CUDA, bitwise_kernel<BinaryOp::BitXor>);
DG_REGISTER_KERNEL(bitwise_and_scalar, Device::Type::CUDA, bitwise_scalar_kernel<UnaryOp::BitAndScalar>);
DG_REGISTER_KERNEL(bitwise_or_scalar, Device::Type::CUDA, bitwise_scalar_kernel<UnaryOp::BitOrScalar>);
DG_REGISTER_KERNEL(bitwise_xor_scalar, Device::Type::CUDA, bitwise_scalar_kernel<UnaryOp::BitXorScalar>);
DG_REGISTER_KERNEL(bitwise_not, Device::Type::CUDA, bitwise_not_kernel);

}  // namespace dg::cuda
