// Comparison and selection ops: eq/ne/lt/le/gt/ge, logical ops, where, masked_fill(_), clamp(_), and the
// compositions isclose / allclose:
// validation, type promotion, Task creation and the backward formulas (written with dygrad ops).
#include <algorithm>
#include <limits>

#include "dygrad/runtime/op_sink.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise_call.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

// --- backward formulas (g = grad_outputs[0]) -----------------------------------------------------------
namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

void where_backward(Node& n, Grads g, GradInputs gi) {  // inputs (cond, a, b); saved: cond
  Tensor cond = n.saved(0);
  if (n.needs_grad(1)) gi[1] = sum_to(where(cond, g[0], 0), n.input_meta[1].shape);
  if (n.needs_grad(2)) gi[2] = sum_to(where(cond, 0, g[0]), n.input_meta[2].shape);
}
void where_scalar_backward(Node& n, Grads g, GradInputs gi) {  // inputs (cond, a); saved: cond
  Tensor cond = n.saved(0);
  if (!n.needs_grad(1)) return;
  gi[1] = sum_to(n.attrs.get<WhereScalarAttrs>().scalar_when_true ? where(cond, 0, g[0]) : where(cond, g[0], 0), n.input_meta[1].shape);
}
void masked_fill_backward(Node& n, Grads g, GradInputs gi) {  // inputs (a, mask); saved: mask
  if (n.needs_grad(0)) gi[0] = sum_to(masked_fill(g[0], n.saved(0), 0), n.input_meta[0].shape);
}
// Scalar bounds: the gradient passes where min <= x <= max (ties included, as torch).
void clamp_scalar_backward(Node& n, Grads g, GradInputs gi) {  // saved: x
  Tensor x = n.saved(0);
  const ClampAttrs& attrs = n.attrs.get<ClampAttrs>();
  Tensor pass;
  if (attrs.has_min) pass = ge(x, attrs.min);
  if (attrs.has_max) pass = pass.defined() ? logical_and(pass, le(x, attrs.max)) : le(x, attrs.max);
  gi[0] = where(pass, g[0], 0);
}
// Tensor bounds: x gets the gradient where min <= x <= max; min where x < min (and min <= max); max where
// x > max or min > max (the output is max there). Inputs (x, min, max), (x, min) or (x, max) by ClampAttrs.
void clamp_tensor_backward(Node& n, Grads g, GradInputs gi) {  // saved: x and the bounds, as the inputs
  const ClampAttrs& attrs = n.attrs.get<ClampAttrs>();
  const int64_t bounds = (attrs.has_min ? 1 : 0) | (attrs.has_max ? 2 : 0);
  Tensor x = n.saved(0);
  Tensor lo = bounds & 1 ? n.saved(1) : Tensor(), hi = bounds & 2 ? n.saved(bounds == 3 ? 2 : 1) : Tensor();
  auto grad_where = [&](const Tensor& pass, size_t input) { gi[input] = sum_to(where(pass, g[0], 0), n.input_meta[input].shape); };
  if (bounds == 3) {
    if (n.needs_grad(0)) grad_where(logical_and(ge(x, lo), le(x, hi)), 0);
    if (n.needs_grad(1)) grad_where(logical_and(lt(x, lo), le(lo, hi)), 1);
    if (n.needs_grad(2)) grad_where(logical_or(gt(x, hi), gt(lo, hi)), 2);
  } else if (bounds == 1) {
    if (n.needs_grad(0)) grad_where(ge(x, lo), 0);
    if (n.needs_grad(1)) grad_where(lt(x, lo), 1);
  } else {
    if (n.needs_grad(0)) grad_where(le(x, hi), 0);
    if (n.needs_grad(1)) grad_where(gt(x, hi), 1);
  }
}

OpCost select_cost(const Task& t) {
  OpCost c;
  for (const Tensor& in : t.inputs) c.bytes += double(in.numel()) * double(in.itemsize());
  c.bytes += double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  c.flops = double(t.outputs[0].numel());
  return c;
}
}  // namespace

// flags: kOpAnyDType for eq and ne, which torch runs on uint32, uint64 and float8 too (docs/dtypes.md).
#define DG_COMPARE_OP(name, flags_)                                                                            \
  const OpDef op_##name(#name, nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = flags_});\
  const OpDef op_##name##_scalar(#name "_scalar", attrs_type<ScalarAttrs>(),                                        \
                                 {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = flags_})
DG_COMPARE_OP(eq, kOpAnyDType);
DG_COMPARE_OP(ne, kOpAnyDType);
DG_COMPARE_OP(lt, 0);
DG_COMPARE_OP(le, 0);
DG_COMPARE_OP(gt, 0);
DG_COMPARE_OP(ge, 0);
#undef DG_COMPARE_OP
const OpDef op_logical_not("logical_not", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_logical_and("logical_and", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_logical_or("logical_or", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
// bitwise and/or/xor run on uint32 and uint64 as in torch (kOpAnyDType; the op refuses floating dtypes itself).
const OpDef op_bitwise_and("bitwise_and", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_or("bitwise_or", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_xor("bitwise_xor", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_left_shift("bitwise_left_shift", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_bitwise_right_shift("bitwise_right_shift", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_bitwise_and_scalar("bitwise_and_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_or_scalar("bitwise_or_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_xor_scalar("bitwise_xor_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = select_cost, .flags = kOpAnyDType});
const OpDef op_bitwise_left_shift_scalar("bitwise_left_shift_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_bitwise_right_shift_scalar("bitwise_right_shift_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_bitwise_not("bitwise_not", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
// where selects elements: it takes the storage-only dtypes too (kOpAnyDType; the kernel moves them by width).
const OpDef op_where("where", nullptr, {.fusion = FusionClass::Elementwise, .backward = where_backward, .cost = select_cost,
                                        .flags = kOpAnyDType});
const OpDef op_where_scalar("where_scalar", attrs_type<WhereScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = where_scalar_backward, .cost = select_cost});
const OpDef op_masked_fill("masked_fill", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = masked_fill_backward, .cost = select_cost});
const OpDef op_clamp_scalar("clamp_scalar", attrs_type<ClampAttrs>(), {.fusion = FusionClass::Elementwise, .backward = clamp_scalar_backward, .cost = select_cost});
const OpDef op_clamp_tensor("clamp_tensor", attrs_type<ClampAttrs>(), {.fusion = FusionClass::Elementwise, .backward = clamp_tensor_backward, .cost = select_cost});

// --- comparisons and logical ops -------------------------------------------------------------------------
namespace {
Tensor compare(const OpDef& op, const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op, op.name).input(a).input(b, "other").promotion(Promotion::Compare).run();
}
Tensor compare(const OpDef& op, const Tensor& a, Scalar b) {
  return ElementwiseCall(op, op.name).input(a).scalar(b).attrs(ScalarAttrs{b}).promotion(Promotion::Compare).run();
}
Tensor logical(const OpDef& op, const Tensor& a, const Tensor& b) {
  // torch has no logical kernel for uint32/uint64/float8 (casting them to bool first would run): refused as torch's,
  // a mix with another dtype by the promotion (RuntimeError), else NotImplementedError.
  if ((storage_only::has(a) || storage_only::has(b)) && a.defined() && b.defined()) [[unlikely]] {
    const DType common = promote_types(a.dtype(), b.dtype());
    DG_CHECK(false, NotImplemented, "[", api_name(op.name), "] not implemented for '", dtype_torch_name(common), "'");
  }
  return ElementwiseCall(op, op.name).input(a).input(b, "other").promotion(Promotion::Logical).run();
}
void save_condition(Node& n, std::span<const Tensor> in, const Tensor&) { n.save(in[0]); }
void save_mask(Node& n, std::span<const Tensor> in, const Tensor&) { n.save(in[1]); }
void save_operands(Node& n, std::span<const Tensor> in, const Tensor&) {
  for (const Tensor& t : in) n.save(t);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(op_eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(op_ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(op_lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(op_le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(op_gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(op_ge, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare(op_eq_scalar, a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare(op_ne_scalar, a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare(op_lt_scalar, a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare(op_le_scalar, a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare(op_gt_scalar, a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare(op_ge_scalar, a, b); }

// The kernel reads any dtype (a == 0) and writes bool, so the input is not cast to bool first (a copy that took
// two thirds of the time over float32).
Tensor logical_not(const Tensor& a) {
  return ElementwiseCall(op_logical_not, "logical_not").input(a).promotion(Promotion::Compare).run();
}
Tensor logical_and(const Tensor& a, const Tensor& b) { return logical(op_logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical(op_logical_or, a, b); }

// --- bitwise ops ------------------------------------------------------------------------------------------
// Integral and bool operands, torch's promotion (int64 & bool is int64); a floating result raises as torch's
// ("bitwise_and_cpu" not implemented for 'Float'), and shifts refuse bool ("lshift_cpu" ... 'Bool').
namespace {
struct Bitwise {
  const OpDef& tensor_op;
  const OpDef& scalar_op;
  const char* kernel_name;  // torch's name in its error: bitwise_and_cpu, lshift_cpu ...
  bool refuses_bool;
};
const Bitwise kAnd{op_bitwise_and, op_bitwise_and_scalar, "bitwise_and_cpu", false};
const Bitwise kOr{op_bitwise_or, op_bitwise_or_scalar, "bitwise_or_cpu", false};
const Bitwise kXor{op_bitwise_xor, op_bitwise_xor_scalar, "bitwise_xor_cpu", false};
const Bitwise kLeft{op_bitwise_left_shift, op_bitwise_left_shift_scalar, "lshift_cpu", true};
const Bitwise kRight{op_bitwise_right_shift, op_bitwise_right_shift_scalar, "rshift_cpu", true};

void check_bitwise(const Bitwise& op, const ElementwiseCall& call) {
  const DType t = call.result_dtype();
  DG_CHECK(!is_floating(t) && !(op.refuses_bool && t == DType::Bool), NotImplemented, "\"", op.kernel_name,
           "\" not implemented for '", dtype_torch_name(t), "'");
}
Tensor bitwise(const Bitwise& op, const Tensor& a, const Tensor& b) {
  ElementwiseCall call(op.tensor_op, op.tensor_op.name);
  call.input(a).input(b, "other");
  check_bitwise(op, call);
  return call.run();
}
Tensor bitwise(const Bitwise& op, const Tensor& a, Scalar b) {
  ElementwiseCall call(op.scalar_op, op.tensor_op.name);
  call.input(a).scalar(b).attrs(ScalarAttrs{b});
  check_bitwise(op, call);
  return call.run();
}
Tensor& bitwise_(const Bitwise& op, const char* name, Tensor& a, const Tensor& b) {
  ElementwiseCall call(op.tensor_op, name);
  call.input(a).input(b, "other");
  check_bitwise(op, call);
  return call.run_inplace(a);
}
Tensor& bitwise_(const Bitwise& op, const char* name, Tensor& a, Scalar b) {
  ElementwiseCall call(op.scalar_op, name);
  call.input(a).scalar(b).attrs(ScalarAttrs{b});
  check_bitwise(op, call);
  return call.run_inplace(a);
}
}  // namespace

Tensor bitwise_and(const Tensor& a, const Tensor& b) { return bitwise(kAnd, a, b); }
Tensor bitwise_or(const Tensor& a, const Tensor& b) { return bitwise(kOr, a, b); }
Tensor bitwise_xor(const Tensor& a, const Tensor& b) { return bitwise(kXor, a, b); }
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b) { return bitwise(kLeft, a, b); }
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b) { return bitwise(kRight, a, b); }
Tensor bitwise_and(const Tensor& a, Scalar b) { return bitwise(kAnd, a, b); }
Tensor bitwise_or(const Tensor& a, Scalar b) { return bitwise(kOr, a, b); }
Tensor bitwise_xor(const Tensor& a, Scalar b) { return bitwise(kXor, a, b); }
Tensor bitwise_left_shift(const Tensor& a, Scalar b) { return bitwise(kLeft, a, b); }
Tensor bitwise_right_shift(const Tensor& a, Scalar b) { return bitwise(kRight, a, b); }
Tensor& bitwise_and_(Tensor& a, const Tensor& b) { return bitwise_(kAnd, "bitwise_and_", a, b); }
Tensor& bitwise_or_(Tensor& a, const Tensor& b) { return bitwise_(kOr, "bitwise_or_", a, b); }
Tensor& bitwise_xor_(Tensor& a, const Tensor& b) { return bitwise_(kXor, "bitwise_xor_", a, b); }
Tensor& bitwise_left_shift_(Tensor& a, const Tensor& b) { return bitwise_(kLeft, "bitwise_left_shift_", a, b); }
Tensor& bitwise_right_shift_(Tensor& a, const Tensor& b) { return bitwise_(kRight, "bitwise_right_shift_", a, b); }
Tensor& bitwise_and_(Tensor& a, Scalar b) { return bitwise_(kAnd, "bitwise_and_", a, b); }
Tensor& bitwise_or_(Tensor& a, Scalar b) { return bitwise_(kOr, "bitwise_or_", a, b); }
Tensor& bitwise_xor_(Tensor& a, Scalar b) { return bitwise_(kXor, "bitwise_xor_", a, b); }
Tensor& bitwise_left_shift_(Tensor& a, Scalar b) { return bitwise_(kLeft, "bitwise_left_shift_", a, b); }
Tensor& bitwise_right_shift_(Tensor& a, Scalar b) { return bitwise_(kRight, "bitwise_right_shift_", a, b); }
Tensor bitwise_not(const Tensor& a) {
  DG_CHECK(!is_floating(a.dtype()), Type, "[bitwise_not] ~ (operator.invert) is only implemented on integer and "
           "Boolean-type tensors, got ", dtype_name(a.dtype()));
  return ElementwiseCall(op_bitwise_not, "bitwise_not").input(a).run();
}
Tensor& bitwise_not_(Tensor& a) {
  DG_CHECK(!is_floating(a.dtype()), Type, "[bitwise_not_] ~ (operator.invert) is only implemented on integer and "
           "Boolean-type tensors, got ", dtype_name(a.dtype()));
  return ElementwiseCall(op_bitwise_not, "bitwise_not_").input(a).run_inplace(a);
}

// --- where, masked_fill ----------------------------------------------------------------------------------
namespace {
// torch converts where's scalar, a clamp bound and masked_fill's value with its checked conversion (arithmetic
// casts and wraps): an int in [2**63, 2**64) fits a uint64, floating or bool result only ("value cannot be
// converted to type int64 without overflow"; docs/dtypes.md, "Python ints beyond int64").
void check_uint_fits(const char* name, const Scalar& s, DType result) {
  if (s.is_uint()) [[unlikely]] check_scalar_fits(api_name(name), s, result);
}
void check_uint_fits(const char* name, const Tensor& a, const Scalar& s) {
  if (s.is_uint()) [[unlikely]] check_scalar_fits(api_name(name), s, result_type(a, s));
}
// where of a uint32/uint64 tensor and a number: the number as a zero-dim tensor of the result dtype, which where's
// tensor form moves by width (the scalar form's kernel has the compute dtypes only; torch runs both).
bool wide_unsigned(const Tensor& a) { return a.dtype() == DType::UInt32 || a.dtype() == DType::UInt64; }
Tensor number_beside(const Tensor& a, Scalar s) {
  return full({}, s, {.dtype = result_type(a, s), .device = a.device()});
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_where, "where").mask(cond, "condition").input(a).input(b, "other").save(save_condition).run();
}
// where with one scalar operand (an attribute, never a tensor): cond ? t : s, or cond ? s : t.
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  check_uint_fits("where", a, b);
  if (wide_unsigned(a)) [[unlikely]] return where(cond, a, number_beside(a, b));
  return ElementwiseCall(op_where_scalar, "where").mask(cond, "condition").input(a).scalar(b)
      .attrs(WhereScalarAttrs{b, false}).save(save_condition).run();
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  check_uint_fits("where", b, a);
  if (wide_unsigned(b)) [[unlikely]] return where(cond, number_beside(b, a), b);
  return ElementwiseCall(op_where_scalar, "where").mask(cond, "condition").input(b, "other").scalar(a)
      .attrs(WhereScalarAttrs{a, true}).save(save_condition).run();
}

// masked_fill keeps the input's dtype: the value is cast to it (torch), it does not promote.
Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value) {
  check_uint_fits("masked_fill", value, a.dtype());
  return ElementwiseCall(op_masked_fill, "masked_fill").input(a).mask(mask, "mask").attrs(ScalarAttrs{value})
      .contiguous_output().save(save_mask).run();
}
Tensor& masked_fill_(Tensor& a, const Tensor& mask, Scalar value) {
  check_uint_fits("masked_fill_", value, a.dtype());
  return ElementwiseCall(op_masked_fill, "masked_fill_").input(a, "self").mask(mask, "mask").attrs(ScalarAttrs{value})
      .save(save_mask).run_inplace(a);
}

// --- clamp -----------------------------------------------------------------------------------------------
namespace {
ClampAttrs clamp_attrs(const char* op, std::optional<Scalar> min, std::optional<Scalar> max) {
  DG_CHECK(min || max, Value, "[", api_name(op), "] at least one of 'min' or 'max' must not be None");
  ClampAttrs attrs;
  if (min) attrs.min = *min;
  if (max) attrs.max = *max;
  attrs.has_min = min.has_value();
  attrs.has_max = max.has_value();
  return attrs;
}
void check_not_bool(const char* name, const Tensor& a) {
  check_defined(api_name(name), a, "self");
  DG_CHECK(a.dtype() != DType::Bool, Type, "[", api_name(name), "] not supported for bool tensors");
}
ElementwiseCall clamp_call(const char* name, const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  if (min) check_uint_fits(name, a, *min);  // before the bool check: a bool tensor refuses to promote, as torch
  if (max) check_uint_fits(name, a, *max);
  check_not_bool(name, a);
  ElementwiseCall call(op_clamp_scalar, name);
  call.input(a, "self").attrs(clamp_attrs(name, min, max)).refuse_bool().save(save_operands, true);
  if (min) call.scalar(*min);
  if (max) call.scalar(*max);
  return call;
}
// The Task inputs (x, present bounds...) of a clamp with tensor bounds; the attributes say which are present.
ElementwiseCall clamp_call(const char* name, const Tensor& a, const Tensor& min, const Tensor& max) {
  check_not_bool(name, a);
  DG_CHECK(min.defined() || max.defined(), Value, "[", api_name(name), "] at least one of 'min' or 'max' must not be None");
  ClampAttrs present;
  present.has_min = min.defined();
  present.has_max = max.defined();
  ElementwiseCall call(op_clamp_tensor, name);
  call.input(a, "self").attrs(present).refuse_bool().save(save_operands, true);
  if (min.defined()) call.input(min, "min");
  if (max.defined()) call.input(max, "max");
  return call;
}
}  // namespace

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  return clamp_call("clamp", a, min, max).run();
}
Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max) { return clamp_call("clamp", a, min, max).run(); }
Tensor& clamp_(Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  return clamp_call("clamp_", a, min, max).run_inplace(a);
}
Tensor& clamp_(Tensor& a, const Tensor& min, const Tensor& max) { return clamp_call("clamp_", a, min, max).run_inplace(a); }

// --- isclose, allclose: compositions of comparisons, as torch's own (aten/native/TensorCompare.cpp) ---------
// close = a == b, or (equal_nan) both nan, or |a - b| finite and <= atol + |rtol * b|; integral operands are
// compared in float32 (torch's default dtype), bool ones by equality alone.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("isclose", a, "input");
  check_defined("isclose", b, "other");
  DG_CHECK(a.dtype() == b.dtype(), Runtime, "[isclose] ", dtype_name(a.dtype()), " did not match ",
           dtype_name(b.dtype()), " (input and other must have the same dtype)");
  DG_CHECK(rtol >= 0, Runtime, "[isclose] rtol must be greater than or equal to zero, but got ", rtol);
  DG_CHECK(atol >= 0, Runtime, "[isclose] atol must be greater than or equal to zero, but got ", atol);
  NoGradGuard no_grad;  // a bool result: nothing to differentiate
  Tensor close = eq(a, b);
  if (a.dtype() == DType::Bool) return close;
  if (equal_nan && is_floating(a.dtype())) close = logical_or(close, logical_and(ne(a, a), ne(b, b)));
  if (rtol == 0 && atol == 0) return close;
  const Tensor x = is_floating(a.dtype()) ? a : to(a, DType::Float32);
  const Tensor y = is_floating(b.dtype()) ? b : to(b, DType::Float32);
  const Tensor allowed = add(abs(mul(y, Scalar(rtol))), Scalar(atol));
  const Tensor actual = abs(sub(x, y));
  const Tensor finite = ne(actual, Scalar(std::numeric_limits<double>::infinity()));  // nan fails the <= below
  return logical_or(close, logical_and(finite, le(actual, allowed)));
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined("equal", a, "input");
  check_defined("equal", b, "other");
  if (!std::ranges::equal(a.shape(), b.shape())) return false;
  NoGradGuard no_grad;
  HostReadScope read("equal");
  return all(eq(a, b)).item<bool>();  // a sync: the caller gets a Python bool
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  const Tensor close = isclose(a, b, rtol, atol, equal_nan);
  NoGradGuard no_grad;
  HostReadScope read("allclose");
  return sum(logical_not(close)).item<int64_t>() == 0;  // a sync: the caller gets a Python bool
}

}  // namespace dg
