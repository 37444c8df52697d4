// Arithmetic ops (add, sub, mul, div, neg and their scalar and in-place forms), casts and copies: each
// elementwise op is its OpDef, its backward formula and a call of the elementwise builder
// (ops/elementwise_call.h), which does validation, promotion, layout, the in-place form and saving.
#include "dygrad/core/shape.h"
#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/elementwise_call.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

// --- backward formulas (grad_outputs[0] = g) -------------------------------------------------------------
namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

void add_backward(Node& n, Grads g, GradInputs gi) {
  const Scalar alpha = n.attrs.get<AddAttrs>().alpha;
  if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(alpha.to_double() == 1.0 ? g[0] : mul(g[0], alpha), n.input_meta[1].shape);
}
void mul_backward(Node& n, Grads g, GradInputs gi) {  // saved: x (when y needs grad), y (when x needs grad)
  if (n.needs_grad(0)) gi[0] = sum_to(mul(g[0], n.saved(1)), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], n.saved(0)), n.input_meta[1].shape);
}
void div_backward(Node& n, Grads g, GradInputs gi) {  // saved: x (when y needs grad), y
  Tensor b = n.saved(1);
  if (n.needs_grad(0)) gi[0] = sum_to(div(g[0], b), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(neg(div(mul(g[0], n.saved(0)), mul(b, b))), n.input_meta[1].shape);
}
void add_scalar_backward(Node&, Grads g, GradInputs gi) { gi[0] = g[0]; }
void mul_scalar_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], n.attrs.get<ScalarAttrs>().value); }
void div_scalar_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], n.attrs.get<ScalarAttrs>().value); }
void rsub_scalar_backward(Node&, Grads g, GradInputs gi) { gi[0] = neg(g[0]); }
void rdiv_scalar_backward(Node& n, Grads g, GradInputs gi) {  // saved: a, out. out = s / a: d/da = -out / a
  gi[0] = neg(div(mul(g[0], n.saved_output(1)), n.saved(0)));
}
void neg_backward(Node&, Grads g, GradInputs gi) { gi[0] = neg(g[0]); }
void copy_backward(Node& n, Grads g, GradInputs gi) {
  // A cast (or a broadcast copy): the gradient goes back in the source's dtype and shape.
  gi[0] = to(sum_to(g[0], n.input_meta[0].shape), n.input_meta[0].dtype);
}

// What the backward formulas above read.
void save_for_mul(Node& n, std::span<const Tensor> in, const Tensor&) {
  n.save(n.needs_grad(1) ? in[0] : Tensor());
  n.save(n.needs_grad(0) ? in[1] : Tensor());
}
void save_for_div(Node& n, std::span<const Tensor> in, const Tensor&) {
  n.save(n.needs_grad(1) ? in[0] : Tensor());
  n.save(in[1]);
}
void save_input_and_output(Node& n, std::span<const Tensor> in, const Tensor& out) {
  n.save(in[0]);
  n.save(out);
}

OpCost arithmetic_cost(const Task& t) {
  OpCost c;
  for (const Tensor& in : t.inputs) c.bytes += double(in.numel()) * double(in.itemsize());
  c.bytes += double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  c.flops = double(t.outputs[0].numel());
  return c;
}
constexpr OpTraits elementwise(BackwardFn backward) {
  return {.fusion = FusionClass::Elementwise, .backward = backward, .cost = arithmetic_cost};
}
}  // namespace

const OpDef op_add("add", attrs_type<AddAttrs>(), elementwise(add_backward));
const OpDef op_mul("mul", nullptr, elementwise(mul_backward));
const OpDef op_div("div", nullptr, elementwise(div_backward));
const OpDef op_add_scalar("add_scalar", attrs_type<ScalarAttrs>(), elementwise(add_scalar_backward));
const OpDef op_mul_scalar("mul_scalar", attrs_type<ScalarAttrs>(), elementwise(mul_scalar_backward));
const OpDef op_div_scalar("div_scalar", attrs_type<ScalarAttrs>(), elementwise(div_scalar_backward));
const OpDef op_rsub_scalar("rsub_scalar", attrs_type<ScalarAttrs>(), elementwise(rsub_scalar_backward));
const OpDef op_rdiv_scalar("rdiv_scalar", attrs_type<ScalarAttrs>(), elementwise(rdiv_scalar_backward));
const OpDef op_neg("neg", nullptr, elementwise(neg_backward));
// copy and fill take every dtype, the storage-only ones too (kOpAnyDType: docs/dtypes.md).
const OpDef op_copy("copy", nullptr, {.fusion = FusionClass::Elementwise, .backward = copy_backward,
                                      .cost = arithmetic_cost, .flags = kOpAnyDType});
const OpDef op_fill("fill", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = arithmetic_cost,
                                                        .flags = kOpAnyDType});

DType result_type(const Tensor& a, const Tensor& b) {
  ResultType r;
  r.add_tensor(a.dtype(), a.dim());
  r.add_tensor(b.dtype(), b.dim());
  return r.result();
}

DType result_type(const Tensor& a, Scalar b) {
  ResultType r;
  r.add_tensor(a.dtype(), a.dim());
  r.add_scalar(b);
  return r.result();
}

namespace {
Scalar times(Scalar a, Scalar b) {
  // alpha = 1 (the default) leaves the operand's kind alone: bool_tensor + True stays bool, as in torch.
  if (!b.is_floating() && b.to_int() == 1) return a;
  if (a.is_floating() || b.is_floating()) return Scalar(a.to_double() * b.to_double());
  return Scalar(static_cast<int64_t>(static_cast<uint64_t>(a.to_int()) * static_cast<uint64_t>(b.to_int())));
}

// An int in [2**63, 2**64) (a UInt Scalar) beside `a`: torch converts alpha to the result dtype with its checked
// conversion (an integral result refuses it), the operand with a plain cast (it wraps). A UInt operand or alpha
// has no exact product or negation among Scalars, so a floating or complex result takes them as doubles
// (docs/dtypes.md, "Python ints beyond int64"). Rare: the callers test is_uint() first.
[[gnu::noinline]] Scalar uint_operand(const char* name, const Tensor& a, Scalar b, Scalar alpha, bool negate) {
  const DType r = result_type(a, b);
  if (alpha.is_uint()) check_scalar_fits(api_name(name), alpha, r);
  if (!is_integral(r, true)) {
    const double v = b.to_double() * alpha.to_double();
    return Scalar(negate ? -v : v);
  }
  const Scalar product = times(b, alpha);
  return negate ? product.negated() : product;
}
// alpha * b for a + alpha * b, and -(alpha * b) for a - alpha * b.
Scalar scaled(const char* name, const Tensor& a, Scalar b, Scalar alpha) {
  if (b.is_uint() || alpha.is_uint()) [[unlikely]] return uint_operand(name, a, b, alpha, false);
  return times(b, alpha);
}
Scalar negated_scaled(const char* name, const Tensor& a, Scalar b, Scalar alpha) {
  if (b.is_uint() || alpha.is_uint()) [[unlikely]] return uint_operand(name, a, b, alpha, true);
  return times(b, alpha).negated();  // -(-2**63) is the UInt 2**63
}
// alpha of a tensor-tensor add/sub: a UInt alpha takes torch's checked conversion to the result dtype.
Scalar checked_alpha(const char* name, const Tensor& a, const Tensor& b, Scalar alpha, bool negate) {
  if (alpha.is_uint()) [[unlikely]] {
    const DType r = result_type(a, b);
    check_scalar_fits(api_name(name), alpha, r);
    return negate ? Scalar(-alpha.to_double()) : alpha;  // r is floating or uint64 here
  }
  return negate ? alpha.negated() : alpha;
}
void check_not_both_bool(const char* name, const Tensor& a, const Tensor& b) {
  DG_CHECK(a.dtype() != DType::Bool || b.dtype() != DType::Bool, Type, "[", api_name(name),
           "] subtraction, the `-` operator, with two bool tensors is not supported");
}

// The calls, shared by the out-of-place and in-place forms.
ElementwiseCall add_call(const char* name, const Tensor& a, const Tensor& b, Scalar alpha) {
  ElementwiseCall call(op_add, name);
  call.input(a).input(b, "other").attrs(AddAttrs{alpha});
  return call;
}
ElementwiseCall scalar_call(const OpDef& op, const char* name, const Tensor& a, Scalar s) {
  ElementwiseCall call(op, name);
  call.input(a).scalar(s).attrs(ScalarAttrs{s});
  return call;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return add_call("add", a, b, checked_alpha("add", a, b, alpha, false)).run();
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_not_both_bool("sub", a, b);
  return add_call("sub", a, b, checked_alpha("sub", a, b, alpha, true)).run();
}
Tensor mul(const Tensor& a, const Tensor& b) {
  if (storage_only::has(a) || storage_only::has(b)) [[unlikely]]
    if (Tensor composed = storage_only::mul(a, b); composed.defined()) return composed;
  return ElementwiseCall(op_mul, "mul").input(a).input(b, "other").save(save_for_mul).run();
}
Tensor div(const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_div, "div").input(a).input(b, "other").promotion(Promotion::PromoteFloat)
      .save(save_for_div).run();
}

Tensor add(const Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "add", a, scaled("add", a, b, alpha)).run();
}
Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "sub", a, negated_scaled("sub", a, b, alpha)).run();
}
Tensor rsub(const Tensor& a, Scalar b) { return scalar_call(op_rsub_scalar, "rsub", a, b).run(); }
Tensor mul(const Tensor& a, Scalar b) {
  if (storage_only::has(a)) [[unlikely]]
    if (Tensor composed = storage_only::mul(a, b); composed.defined()) return composed;
  return scalar_call(op_mul_scalar, "mul", a, b).run();
}
Tensor div(const Tensor& a, Scalar b) {
  return scalar_call(op_div_scalar, "div", a, b).promotion(Promotion::PromoteFloat).run();
}
Tensor rdiv(const Tensor& a, Scalar b) {
  return scalar_call(op_rdiv_scalar, "rdiv", a, b).promotion(Promotion::PromoteFloat).save(save_input_and_output).run();
}
Tensor neg(const Tensor& a) {
  return ElementwiseCall(op_neg, "neg").input(a).refuse_bool("negation, the `-` operator, on a bool tensor is not "
                                                              "supported").run();
}

// In place: the result is computed in a's dtype; mul_ and div_ save a's old value for b's gradient.
Tensor& add_(Tensor& a, const Tensor& b, Scalar alpha) {
  return add_call("add_", a, b, checked_alpha("add_", a, b, alpha, false)).run_inplace(a);
}
Tensor& sub_(Tensor& a, const Tensor& b, Scalar alpha) {
  check_not_both_bool("sub_", a, b);
  return add_call("sub_", a, b, checked_alpha("sub_", a, b, alpha, true)).run_inplace(a);
}
Tensor& mul_(Tensor& a, const Tensor& b) {
  if (storage_only::has(a) && storage_only::mul_(a, b)) [[unlikely]] return a;
  return ElementwiseCall(op_mul, "mul_").input(a, "self").input(b, "other").save(save_for_mul, true).run_inplace(a);
}
Tensor& div_(Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_div, "div_").input(a, "self").input(b, "other").promotion(Promotion::PromoteFloat)
      .save(save_for_div, true).run_inplace(a);
}
Tensor& add_(Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "add_", a, scaled("add_", a, b, alpha)).run_inplace(a);
}
Tensor& sub_(Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "sub_", a, negated_scaled("sub_", a, b, alpha)).run_inplace(a);
}
Tensor& mul_(Tensor& a, Scalar b) {
  if (storage_only::has(a) && storage_only::mul_(a, b)) [[unlikely]] return a;
  return scalar_call(op_mul_scalar, "mul_", a, b).run_inplace(a);
}
Tensor& div_(Tensor& a, Scalar b) {
  return scalar_call(op_div_scalar, "div_", a, b).promotion(Promotion::PromoteFloat).run_inplace(a);
}

// out= forms.
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) {
  return add_call("add", a, b, checked_alpha("add", a, b, alpha, false)).run_out(out);
}
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) {
  check_not_both_bool("sub", a, b);
  return add_call("sub", a, b, checked_alpha("sub", a, b, alpha, true)).run_out(out);
}
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  if (storage_only::has(a) || storage_only::has(b)) [[unlikely]]
    if (Tensor composed = storage_only::mul(a, b); composed.defined()) return storage_only::into_out("mul", out, composed);
  return ElementwiseCall(op_mul, "mul").input(a).input(b, "other").run_out(out);
}
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_div, "div").input(a).input(b, "other").promotion(Promotion::PromoteFloat).run_out(out);
}
Tensor& add_out(Tensor& out, const Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "add", a, scaled("add", a, b, alpha)).run_out(out);
}
Tensor& sub_out(Tensor& out, const Tensor& a, Scalar b, Scalar alpha) {
  return scalar_call(op_add_scalar, "sub", a, negated_scaled("sub", a, b, alpha)).run_out(out);
}
Tensor& mul_out(Tensor& out, const Tensor& a, Scalar b) {
  if (storage_only::has(a)) [[unlikely]]
    if (Tensor composed = storage_only::mul(a, b); composed.defined()) return storage_only::into_out("mul", out, composed);
  return scalar_call(op_mul_scalar, "mul", a, b).run_out(out);
}
Tensor& div_out(Tensor& out, const Tensor& a, Scalar b) {
  return scalar_call(op_div_scalar, "div", a, b).promotion(Promotion::PromoteFloat).run_out(out);
}

namespace {
// The nodes of copy_ and fill_ (torch's CopyBackwards, FillBackward0): input 0 is the target's old value,
// which the write overwrote, so its gradient is zeros; copy_'s input 1 is the source, which gets the gradient
// summed back to its shape (the engine casts it to the source's dtype).
void copy_into_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = n.input_meta[0].device});
  if (n.needs_grad(1)) gi[1] = sum_to(g[0], n.input_meta[1].shape);
}
void fill_into_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = n.input_meta[0].device});
}
// Recorded before the write bumps the version (input 0's edge is the old value's history), rebased after.
Ref<Node> overwrite_node(const char* name, BackwardFn backward, std::span<const Tensor> inputs) {
  Ref<Node> node = make_ref<Node>(std::string(name), backward, 1);
  node->named_as_is = true;
  return record_node(node, inputs, {});
}
}  // namespace

// --- casts and copies --------------------------------------------------------------------------------------
Tensor to(const Tensor& a, DType dtype, bool copy) {
  check_defined("to", a);
  if (a.dtype() == dtype && !copy) return a;
  Tensor out = Tensor::empty(a.shape(), dtype, a.device());
  enqueue(op_copy, {a}, {out});
  if (is_differentiable(dtype) && needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_copy, inputs, outputs);
  }
  return out;
}

Tensor clone(const Tensor& a) { return to(a, a.dtype(), true); }

Tensor contiguous(const Tensor& a) {
  check_defined("contiguous", a);
  return a.is_contiguous() ? a : clone(a);
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  check_defined("copy_", dst, "self");
  check_defined("copy_", src, "src");
  if (dst.device() != src.device()) [[unlikely]] return copy_across_devices(dst, src);
  Dims shape = broadcast_shapes("copy_", dst.shape(), src.shape());
  DG_CHECK(same_shape(shape, dst.shape()), Value, "[copy_] source of shape ", src.shape(),
           " cannot be broadcast to the destination shape ", dst.shape());
  check_inplace("copy_", dst, src.requires_grad());
  // Reading dst's own storage while writing it (overlapping views): copy the source first.
  Tensor source = src.shares_storage(dst) ? clone(src) : src;
  Ref<Node> node;
  if (is_differentiable(dst.dtype()) && needs_grad_any({dst, source})) {
    Tensor inputs[2] = {dst, is_differentiable(source.dtype()) ? source : Tensor()};
    node = overwrite_node("CopyBackwards", copy_into_backward, inputs);
  }
  dst.storage().bump_version();
  enqueue(op_copy, {source}, {dst});
  if (node) rebase_history(dst, std::move(node));
  return dst;
}

Tensor& fill_(Tensor& dst, Scalar value) {
  check_defined("fill_", dst, "self");
  check_inplace("fill_", dst);
  check_scalar_fits("fill_", value, dst.dtype());
  Ref<Node> node;
  if (is_differentiable(dst.dtype()) && needs_grad_any({dst})) {
    Tensor inputs[1] = {dst};
    node = overwrite_node("FillBackward0", fill_into_backward, inputs);
  }
  dst.storage().bump_version();
  enqueue(op_fill, {}, {dst}, ScalarAttrs{value});
  if (node) rebase_history(dst, std::move(node));
  return dst;
}

Tensor sum_to(const Tensor& g, IntSpan shape) {
  if (same_shape(g.shape(), shape)) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  Dims keep_dims;  // dims that are 1 in the target but not in g
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && g.shape()[lead + static_cast<int64_t>(i)] != 1) keep_dims.push_back(lead + static_cast<int64_t>(i));
  Tensor r = keep_dims.empty() ? g : sum(g, keep_dims, true);
  if (lead > 0) {
    Dims lead_dims;
    for (int64_t i = 0; i < lead; ++i) lead_dims.push_back(i);
    r = sum(r, lead_dims, false);
  }
  return same_shape(r.shape(), shape) ? r : reshape(r, shape);
}

}  // namespace dg
