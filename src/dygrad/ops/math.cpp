// Elementwise math ops: unary functions and activations, pow, maximum/minimum and the in-place exp_ and
// relu_: validation, type promotion, Task creation and the backward formulas (written with dygrad ops).
#include "dygrad/ops/math.h"

#include <cmath>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

extern const OpDef op_sigmoid_backward, op_tanh_backward, op_silu_backward, op_relu_backward;  // defined below

// --- backward formulas (g = grad_outputs[0]; saved(0) is the input x or the output y, as noted) ---------
namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

// The saved output y, made differentiable again when backward itself records a graph (create_graph).
// y is saved detached (saving it with its own grad_fn would be a reference cycle), so for a double
// backward it is re-attached to a twin of this node: the same op, input edges and saved tensors, which
// is y = op(x) again without recomputing it. `saved` lists the node's saved tensors in order.
Tensor differentiable_output(const Node& n, std::initializer_list<Tensor> saved, const Tensor& y) {
  bool any_input = false;
  for (size_t i = 0; i < n.next.size(); ++i) any_input = any_input || n.needs_grad(i);
  if (!grad_enabled() || !any_input) return y;
  Ref<Node> twin = make_ref<Node>(n.op(), 1);
  twin->next = n.next;
  twin->input_meta = n.input_meta;
  twin->attrs = n.attrs;
  for (const Tensor& t : saved) twin->save(t);
  Tensor attached = detach(y);
  rebase_history(attached, twin);
  return attached;
}
Tensor saved_output(const Node& n) {  // unary ops that save only y
  Tensor y = n.saved(0);
  return differentiable_output(n, {y}, y);
}

void exp_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], saved_output(n)); }  // y
void log_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], n.saved(0)); }        // x
void sqrt_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], mul(saved_output(n), 2)); }  // y
void rsqrt_backward(Node& n, Grads g, GradInputs gi) {  // y: d/dx x^(-1/2) = -y^3 / 2
  Tensor y = saved_output(n);
  gi[0] = mul(g[0], mul(mul(y, mul(y, y)), -0.5));
}
void abs_backward(Node& n, Grads g, GradInputs gi) {  // x: g * sign(x), 0 at 0
  Tensor x = n.saved(0);
  Tensor sign = sub(to(gt(x, 0), x.dtype()), to(lt(x, 0), x.dtype()));
  gi[0] = mul(g[0], sign);
}
void sin_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], cos(n.saved(0))); }       // x
void cos_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], neg(sin(n.saved(0)))); }  // x
// Without a graph to record (the usual backward), one fused kernel; under create_graph, the composition
// of differentiable ops.
Tensor fused_backward(const OpDef& op, const Tensor& g, const Tensor& v);

void tanh_backward(Node& n, Grads g, GradInputs gi) {  // y: 1 - y^2
  if (!grad_enabled()) return void(gi[0] = fused_backward(op_tanh_backward, g[0], n.saved(0)));
  Tensor y = saved_output(n);
  gi[0] = mul(g[0], rsub(mul(y, y), 1));
}
void sigmoid_backward(Node& n, Grads g, GradInputs gi) {  // y: y (1 - y)
  if (!grad_enabled()) return void(gi[0] = fused_backward(op_sigmoid_backward, g[0], n.saved(0)));
  Tensor y = saved_output(n);
  gi[0] = mul(g[0], mul(y, rsub(y, 1)));
}
void silu_backward(Node& n, Grads g, GradInputs gi) {  // x: s (1 + x (1 - s)), s = sigmoid(x)
  Tensor x = n.saved(0);
  if (!grad_enabled()) return void(gi[0] = fused_backward(op_silu_backward, g[0], x));
  Tensor s = sigmoid(x);
  gi[0] = mul(g[0], mul(s, add(mul(x, rsub(s, 1)), 1)));
}
// y: the mask is piecewise constant, so y needs no history even for a double backward.
void relu_backward(Node& n, Grads g, GradInputs gi) {
  if (!grad_enabled()) return void(gi[0] = fused_backward(op_relu_backward, g[0], n.saved(0)));
  gi[0] = where(gt(n.saved(0), 0), g[0], 0);
}
Tensor gelu_derivative_times(const Tensor& g, const Tensor& x, bool tanh_approximation);
void gelu_backward(Node& n, Grads g, GradInputs gi) { gi[0] = gelu_derivative_times(g[0], n.saved(0), n.attrs.get<GeluAttrs>().tanh_approximation); }

void pow_backward(Node& n, Grads g, GradInputs gi) {  // saved: base, exponent, output
  Tensor base = n.saved(0), exponent = n.saved(1);
  if (n.needs_grad(0)) {
    // d/da a^b = b a^(b-1); exactly 0 where b == 0 (torch), even at a == 0.
    Tensor d = where(eq(exponent, 0), 0, mul(exponent, pow(base, sub(exponent, 1))));
    gi[0] = sum_to(mul(g[0], d), n.input_meta[0].shape);
  }
  if (n.needs_grad(1)) {
    // d/db a^b = a^b log(a); 0 where a == 0 and b >= 0 (the limit torch takes).
    Tensor d = mul(differentiable_output(n, {base, exponent, n.saved(2)}, n.saved(2)), log(base));
    d = where(logical_and(eq(base, 0), ge(exponent, 0)), 0, d);
    gi[1] = sum_to(mul(g[0], d), n.input_meta[1].shape);
  }
}
void pow_scalar_backward(Node& n, Grads g, GradInputs gi) {  // x; attrs.scalars[0] = p
  const Scalar p = n.attrs.get<ScalarAttrs>().value;
  const double pd = p.to_double();
  if (pd == 0.0) gi[0] = zeros_like(g[0]);
  else if (pd == 1.0) gi[0] = g[0];
  else if (pd == 2.0) gi[0] = mul(g[0], mul(n.saved(0), 2));
  else gi[0] = mul(g[0], mul(pow(n.saved(0), p.is_floating() ? Scalar(pd - 1.0) : Scalar(p.to_int() - 1)), p));
}
void rpow_scalar_backward(Node& n, Grads g, GradInputs gi) {  // x, y; attrs.scalars[0] = base s: y log(s)
  const double s = n.attrs.get<ScalarAttrs>().value.to_double();
  Tensor x = n.saved(0), y = n.saved(1);
  Tensor d = mul(differentiable_output(n, {x, y}, y), std::log(s));
  if (s == 0.0) d = where(ge(x, 0), 0, d);
  gi[0] = mul(g[0], d);
}
// maximum: the gradient goes to the larger operand, split evenly on ties (torch).
void extremum_backward(Node& n, Grads g, GradInputs gi, bool is_max) {
  Tensor a = n.saved(0), b = n.saved(1);
  Tensor tie = eq(a, b);
  Tensor half = mul(g[0], 0.5);
  if (n.needs_grad(0)) {
    Tensor wins = is_max ? gt(a, b) : lt(a, b);
    gi[0] = sum_to(where(wins, g[0], where(tie, half, 0)), n.input_meta[0].shape);
  }
  if (n.needs_grad(1)) {
    Tensor wins = is_max ? lt(a, b) : gt(a, b);
    gi[1] = sum_to(where(wins, g[0], where(tie, half, 0)), n.input_meta[1].shape);
  }
}
void maximum_backward(Node& n, Grads g, GradInputs gi) { extremum_backward(n, g, gi, true); }
void minimum_backward(Node& n, Grads g, GradInputs gi) { extremum_backward(n, g, gi, false); }

OpCost elementwise_cost(const Task& t) {
  OpCost c;
  for (const Tensor& in : t.inputs) c.bytes += double(in.numel()) * double(in.itemsize());
  c.bytes += double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  c.flops = double(t.outputs[0].numel());
  return c;
}
// Transcendental functions: about 20 flops per element for the range reduction and polynomial.
OpCost transcendental_cost(const Task& t) {
  OpCost c = elementwise_cost(t);
  c.flops *= 20;
  return c;
}
}  // namespace

#define DG_UNARY_OP(name, attrs, cost_fn) \
  const OpDef op_##name(#name, attrs, {.fusion = FusionClass::Elementwise, .backward = name##_backward, .cost = cost_fn})
DG_UNARY_OP(exp, nullptr, transcendental_cost);
DG_UNARY_OP(log, nullptr, transcendental_cost);
DG_UNARY_OP(sqrt, nullptr, elementwise_cost);
DG_UNARY_OP(rsqrt, nullptr, elementwise_cost);
DG_UNARY_OP(abs, nullptr, elementwise_cost);
DG_UNARY_OP(sin, nullptr, transcendental_cost);
DG_UNARY_OP(cos, nullptr, transcendental_cost);
DG_UNARY_OP(tanh, nullptr, transcendental_cost);
DG_UNARY_OP(sigmoid, nullptr, transcendental_cost);
DG_UNARY_OP(silu, nullptr, transcendental_cost);
DG_UNARY_OP(gelu, attrs_type<GeluAttrs>(), transcendental_cost);
DG_UNARY_OP(relu, nullptr, elementwise_cost);
DG_UNARY_OP(pow, nullptr, transcendental_cost);
DG_UNARY_OP(pow_scalar, attrs_type<ScalarAttrs>(), transcendental_cost);
DG_UNARY_OP(rpow_scalar, attrs_type<ScalarAttrs>(), transcendental_cost);
DG_UNARY_OP(maximum, nullptr, elementwise_cost);
DG_UNARY_OP(minimum, nullptr, elementwise_cost);
#undef DG_UNARY_OP
// Fused backward kernels: inputs (grad, y or x). Only run without grad mode, so they need no backward.
const OpDef op_sigmoid_backward("sigmoid_backward", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});
const OpDef op_tanh_backward("tanh_backward", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});
const OpDef op_silu_backward("silu_backward", nullptr, {.fusion = FusionClass::Elementwise, .cost = transcendental_cost});
const OpDef op_relu_backward("relu_backward", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});

namespace {
// gelu_backward(g, x) = g * gelu'(x) is linear in g; in x its derivative is g * gelu''(x), composed from ops:
//   "none": gelu''(x) = phi(x) (2 - x^2)
//   "tanh": with s = sigmoid(2u), u = k (x + c x^3), u' = k (1 + 3 c x^2), u'' = 6 k c x:
//           gelu''(x) = s (1 - s) (4 u' + 2 x u'' + 4 x u'^2 (1 - 2 s))
Tensor gelu_second_derivative(const Tensor& x, bool tanh_approximation) {
  if (!tanh_approximation) {
    Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 0.39894228040143267794);
    return mul(pdf, rsub(mul(x, x), 2));
  }
  const double k = 0.79788456080286535588, c = 0.044715;
  Tensor x2 = mul(x, x);
  Tensor du = mul(add(mul(x2, 3 * c), 1), k);
  Tensor ddu = mul(x, 6 * k * c);
  Tensor s = sigmoid(mul(mul(add(mul(mul(x2, x), c), x), k), 2));
  Tensor ds = mul(s, rsub(s, 1));
  Tensor bracket = add(add(mul(du, 4), mul(mul(x, ddu), 2)), mul(mul(mul(x, mul(du, du)), 4), rsub(mul(s, 2), 1)));
  return mul(ds, bracket);
}
void gelu_backward_backward(Node& n, Grads g, GradInputs gi) {  // inputs (grad, x); saved: grad, x
  Tensor grad = n.saved(0), x = n.saved(1);
  if (n.needs_grad(0)) gi[0] = gelu_derivative_times(g[0], x, n.attrs.get<GeluAttrs>().tanh_approximation);
  if (n.needs_grad(1)) gi[1] = mul(mul(g[0], grad), gelu_second_derivative(x, n.attrs.get<GeluAttrs>().tanh_approximation));
}
}  // namespace
// inputs (grad, x), attrs.i[0] as gelu: grad * gelu'(x).
const OpDef op_gelu_backward("gelu_backward", attrs_type<GeluAttrs>(), {.fusion = FusionClass::Elementwise, .backward = gelu_backward_backward, .cost = transcendental_cost});

namespace {
enum class Save { Input, Output };

// out = op(a) with the result dtype `dtype` (a is cast to it); records the node saving x or y.
Tensor unary(const OpDef& op, const Tensor& a, DType dtype, Save save, const Attrs& attrs = Attrs()) {
  Tensor x = to(a, dtype);
  Tensor out = empty_elementwise(x.shape(), dtype, std::span<const Tensor>(&x, 1));
  enqueue(op, {x}, {out}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    node->save(save == Save::Input ? x : detach(out));
  }
  return out;
}

// Floating functions: integers and bool become float32 (torch's int-to-float promotion).
Tensor floating_unary(const OpDef& op, const Tensor& a, Save save, const Attrs& attrs = Attrs()) {
  check_defined(op.name, a);
  return unary(op, a, is_floating(a.dtype()) ? a.dtype() : DType::Float32, save, attrs);
}

// Functions that keep integer dtypes (bool is refused, as torch does for abs and relu).
Tensor numeric_unary(const OpDef& op, const Tensor& a, Save save) {
  check_defined(op.name, a);
  DG_CHECK(a.dtype() != DType::Bool, Type, "[", op.name, "] not supported for bool tensors");
  return unary(op, a, a.dtype(), save);
}

// In place: a = op(a) in a's dtype; the node saves the result (exp_, relu_ both differentiate through y).
Tensor& unary_inplace(const OpDef& op, const char* name, Tensor& a) {
  check_defined(name, a, "self");
  detail::check_no_internal_overlap(name, a);
  check_inplace(name, a);
  bool record = needs_grad_any({a});
  Ref<Node> node;
  if (record) {
    node = make_ref<Node>(&op, 1);
    Tensor inputs[1] = {a};
    record_node(node, inputs, {});
  }
  a.storage().bump_version();
  enqueue(op, {a}, {a});
  if (record) {
    node->save(detach(a));
    rebase_history(a, node);
  }
  return a;
}

Tensor fused_backward(const OpDef& op, const Tensor& g, const Tensor& v) {
  Tensor out = empty_elementwise(v.shape(), v.dtype(), std::span<const Tensor>(&v, 1));
  enqueue(op, {to(g, v.dtype()), v}, {out});
  return out;
}

Tensor gelu_derivative_times(const Tensor& g, const Tensor& x, bool tanh_approximation) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const Attrs attrs = GeluAttrs{tanh_approximation};
  Tensor grad = to(g, x.dtype());
  enqueue(op_gelu_backward, {grad, x}, {out}, attrs);
  if (needs_grad_any({grad, x})) {
    Tensor inputs[2] = {grad, x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_gelu_backward, inputs, outputs);
    node->attrs = attrs;
    node->save(grad);
    node->save(x);
  }
  return out;
}
}  // namespace

void detail::check_no_internal_overlap(const char* op, const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    DG_CHECK(t.shape()[d] <= 1 || t.strides()[d] != 0, Runtime, "[", op, "] unsupported operation: more than one "
             "element of the written-to tensor (shape ", t.shape(), ", strides ", t.strides(), ") refers to a single "
             "memory location; clone() the tensor first");
}

Tensor exp(const Tensor& a) { return floating_unary(op_exp, a, Save::Output); }
Tensor log(const Tensor& a) { return floating_unary(op_log, a, Save::Input); }
Tensor sqrt(const Tensor& a) { return floating_unary(op_sqrt, a, Save::Output); }
Tensor rsqrt(const Tensor& a) { return floating_unary(op_rsqrt, a, Save::Output); }
Tensor sin(const Tensor& a) { return floating_unary(op_sin, a, Save::Input); }
Tensor cos(const Tensor& a) { return floating_unary(op_cos, a, Save::Input); }
Tensor tanh(const Tensor& a) { return floating_unary(op_tanh, a, Save::Output); }
Tensor sigmoid(const Tensor& a) { return floating_unary(op_sigmoid, a, Save::Output); }
Tensor silu(const Tensor& a) { return floating_unary(op_silu, a, Save::Input); }
Tensor abs(const Tensor& a) { return numeric_unary(op_abs, a, Save::Input); }
Tensor relu(const Tensor& a) { return numeric_unary(op_relu, a, Save::Output); }

Tensor gelu(const Tensor& a, std::string_view approximate) {
  DG_CHECK(approximate == "none" || approximate == "tanh", Value, "[gelu] approximate must be 'none' or 'tanh', got '",
           approximate, "'");
  const Attrs attrs = GeluAttrs{approximate == "tanh"};
  return floating_unary(op_gelu, a, Save::Input, attrs);
}

Tensor& exp_(Tensor& a) {
  check_defined("exp_", a, "self");
  DG_CHECK(is_floating(a.dtype()), Type, "[exp_] result type Float can't be cast to the desired output type ",
           dtype_name(a.dtype()));
  return unary_inplace(op_exp, "exp_", a);
}

Tensor& relu_(Tensor& a) {
  check_defined("relu_", a, "self");
  DG_CHECK(a.dtype() != DType::Bool, Type, "[relu_] not supported for bool tensors");
  return unary_inplace(op_relu, "relu_", a);
}

// --- pow -----------------------------------------------------------------------------------------------
namespace {
Tensor binary_op(const OpDef& op, const Tensor& a, const Tensor& b, DType dtype, bool save_output) {
  check_same_device(op.name, a, b);
  Dims shape = broadcast_shapes(op.name, a.shape(), b.shape());
  Tensor x = to(a, dtype), y = to(b, dtype);
  Tensor out = Tensor::empty(shape, dtype);
  enqueue(op, {x, y}, {out});
  if (needs_grad_any({x, y})) {
    Tensor inputs[2] = {x, y}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->save(x);
    node->save(y);
    if (save_output) node->save(detach(out));
  }
  return out;
}
}  // namespace

Tensor pow(const Tensor& base, const Tensor& exponent) {
  check_defined("pow", base, "input");
  check_defined("pow", exponent, "exponent");
  DType dtype = result_type(base, exponent);
  DG_CHECK(dtype != DType::Bool, Type, "[pow] not supported for two bool tensors");
  return binary_op(op_pow, base, exponent, dtype, true);
}

Tensor pow(const Tensor& base, Scalar exponent) {
  check_defined("pow", base, "input");
  DType dtype = result_type(base, exponent);
  if (is_integral(dtype, true) && exponent.is_integral())
    DG_CHECK(exponent.to_int() >= 0, Value, "[pow] Integers to negative integer powers are not allowed (",
             dtype_name(dtype), " tensor to the power ", exponent.to_int(), ")");
  DG_CHECK(dtype != DType::Bool || exponent.is_bool(), Type, "[pow] not supported for bool tensors");
  const Attrs attrs = ScalarAttrs{exponent};
  return unary(op_pow_scalar, base, dtype, Save::Input, attrs);
}

Tensor pow(Scalar base, const Tensor& exponent) {
  check_defined("pow", exponent, "exponent");
  DType dtype = result_type(exponent, base);
  DG_CHECK(dtype != DType::Bool, Type, "[pow] not supported for bool tensors");
  Tensor x = to(exponent, dtype);
  Tensor out = Tensor::empty(x.shape(), dtype);
  const Attrs attrs = ScalarAttrs{base};
  enqueue(op_rpow_scalar, {x}, {out}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_rpow_scalar, inputs, outputs);
    node->attrs = attrs;
    node->save(x);
    node->save(detach(out));
  }
  return out;
}

// --- maximum / minimum --------------------------------------------------------------------------------
Tensor maximum(const Tensor& a, const Tensor& b) {
  check_defined("maximum", a, "input");
  check_defined("maximum", b, "other");
  return binary_op(op_maximum, a, b, result_type(a, b), false);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  check_defined("minimum", a, "input");
  check_defined("minimum", b, "other");
  return binary_op(op_minimum, a, b, result_type(a, b), false);
}

}  // namespace dg
