// Elementwise math ops: unary functions and activations, pow, maximum/minimum and the in-place exp_ and
// relu_: validation, type promotion, Task creation and the backward formulas (written with dygrad ops).
#include "dygrad/ops/math.h"

#include <cmath>

#include "dygrad/ops/complex.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/elementwise_call.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

extern const OpDef op_sigmoid_backward, op_tanh_backward, op_silu_backward, op_relu_backward;  // defined below

// --- backward formulas (g = grad_outputs[0]; saved(0) is the input x or the output y, as noted) ---------
namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

// The saved output y (saved(0) for unary ops that save only y; pow's saved(2), rpow's saved(1)): differentiable
// again under create_graph (Node::saved_output).
Tensor saved_output(Node& n) { return n.saved_output(0); }

void exp_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], saved_output(n)); }  // y
void log_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], n.saved(0)); }        // x
// expm1: exp(x), not torch's y + 1, which loses exp(x) where it is below half an ulp of 1 (x < -17 in float32), so
// the ELU family composed on it has torch's elu_backward, alpha exp(x), to the last digit
void expm1_backward(Node& n, Grads g, GradInputs gi) { gi[0] = mul(g[0], exp(n.saved(0))); }  // x
void log1p_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], add(n.saved(0), 1)); }       // x: 1 / (1 + x)
void sqrt_backward(Node& n, Grads g, GradInputs gi) { gi[0] = div(g[0], mul(saved_output(n), 2)); }  // y
void rsqrt_backward(Node& n, Grads g, GradInputs gi) {  // y: d/dx x^(-1/2) = -y^3 / 2
  Tensor y = saved_output(n);
  gi[0] = mul(g[0], mul(mul(y, mul(y, y)), -0.5));
}
// floor, ceil, trunc, sign: piecewise constant, a zero gradient everywhere (torch's, also at the jumps).
void zero_backward(Node&, Grads g, GradInputs gi) { gi[0] = zeros_like(g[0]); }
void reciprocal_backward(Node& n, Grads g, GradInputs gi) {  // y: d/dx 1/x = -y^2
  Tensor y = saved_output(n);
  gi[0] = mul(g[0], neg(mul(y, y)));
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
    Tensor d = mul(n.saved_output(2), log(base));
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
  else if (p.kind == Scalar::Kind::Int) gi[0] = mul(g[0], mul(pow(n.saved(0), Scalar(p.to_int() - 1)), p));
  else gi[0] = mul(g[0], mul(pow(n.saved(0), Scalar(pd - 1.0)), p));  // a float, or an int beyond int64
}
void rpow_scalar_backward(Node& n, Grads g, GradInputs gi) {  // x, y; attrs.scalars[0] = base s: y log(s)
  const double s = n.attrs.get<ScalarAttrs>().value.to_double();
  Tensor x = n.saved(0);
  Tensor d = mul(n.saved_output(1), std::log(s));
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
// logaddexp: d out / da = exp(a) / (exp(a) + exp(b)) = sigmoid(a - b), and sigmoid(b - a) for b: from the
// operands alone (exp(a - out) would carry out's rounding into every weight). saved: a, b. 16-bit operands are
// differentiated in float32.
void logaddexp_backward(Node& n, Grads g, GradInputs gi) {
  Tensor a = n.saved(0), b = n.saved(1);
  const DType dtype = a.dtype(), compute = itemsize(dtype) == 2 ? DType::Float32 : dtype;
  Tensor grad = to(g[0], compute), difference = sub(to(a, compute), to(b, compute));
  if (n.needs_grad(0)) gi[0] = to(sum_to(mul(grad, sigmoid(difference)), n.input_meta[0].shape), dtype);
  if (n.needs_grad(1)) gi[1] = to(sum_to(mul(grad, sigmoid(neg(difference))), n.input_meta[1].shape), dtype);
}
void minimum_backward(Node& n, Grads g, GradInputs gi) { extremum_backward(n, g, gi, false); }
// lerp: out = self + weight (end - self): d/dself = g (1 - weight), d/dend = g weight, d/dweight = g (end - self).
// saved: self, end, weight (lerp) or self, end (lerp_scalar, the weight in ScalarAttrs).
void lerp_backward(Node& n, Grads g, GradInputs gi) {
  const Tensor weight = n.saved(2);
  if (n.needs_grad(0)) gi[0] = sum_to(mul(g[0], rsub(weight, 1)), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], weight), n.input_meta[1].shape);
  if (n.needs_grad(2)) gi[2] = sum_to(mul(g[0], sub(n.saved(1), n.saved(0))), n.input_meta[2].shape);
}
void lerp_scalar_backward(Node& n, Grads g, GradInputs gi) {
  const double weight = n.attrs.get<ScalarAttrs>().value.to_double();
  if (n.needs_grad(0)) gi[0] = sum_to(mul(g[0], Scalar(1.0 - weight)), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], Scalar(weight)), n.input_meta[1].shape);
}

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
DG_UNARY_OP(expm1, nullptr, transcendental_cost);
DG_UNARY_OP(log1p, nullptr, transcendental_cost);
DG_UNARY_OP(sqrt, nullptr, elementwise_cost);
DG_UNARY_OP(rsqrt, nullptr, elementwise_cost);
DG_UNARY_OP(abs, nullptr, elementwise_cost);
DG_UNARY_OP(reciprocal, nullptr, elementwise_cost);
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
DG_UNARY_OP(logaddexp, nullptr, transcendental_cost);
DG_UNARY_OP(lerp, nullptr, elementwise_cost);
DG_UNARY_OP(lerp_scalar, attrs_type<ScalarAttrs>(), elementwise_cost);
#undef DG_UNARY_OP
#define DG_PIECEWISE_CONSTANT_OP(name) \
  const OpDef op_##name(#name, nullptr, {.fusion = FusionClass::Elementwise, .backward = zero_backward, .cost = elementwise_cost})
DG_PIECEWISE_CONSTANT_OP(floor);
DG_PIECEWISE_CONSTANT_OP(ceil);
DG_PIECEWISE_CONSTANT_OP(trunc);
DG_PIECEWISE_CONSTANT_OP(sign);
#undef DG_PIECEWISE_CONSTANT_OP
const OpDef op_round("round", attrs_type<RoundAttrs>(), {.fusion = FusionClass::Elementwise, .backward = zero_backward, .cost = elementwise_cost});
// isnan, isinf, isfinite: bool results, no gradient.
const OpDef op_isnan("isnan", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});
const OpDef op_isinf("isinf", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});
const OpDef op_isfinite("isfinite", nullptr, {.fusion = FusionClass::Elementwise, .cost = elementwise_cost});
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
// What unary backward formulas read: the input x or the output y.
void save_input(Node& n, std::span<const Tensor> in, const Tensor&) { n.save(in[0]); }
void save_output(Node& n, std::span<const Tensor>, const Tensor& out) { n.save(out); }
void save_operands_and_output(Node& n, std::span<const Tensor> in, const Tensor& out) {
  for (const Tensor& t : in) n.save(t);
  n.save(out);
}
void save_operands(Node& n, std::span<const Tensor> in, const Tensor&) {
  for (const Tensor& t : in) n.save(t);
}

// Floating functions: integers and bool become float32 (torch's int-to-float promotion).
Tensor floating_unary(const OpDef& op, const Tensor& a, SaveFn save, Attrs attrs = Attrs()) {
  return ElementwiseCall(op, op.name).input(a).promotion(Promotion::PromoteFloat).attrs(std::move(attrs)).save(save).run();
}
// Functions that keep integer dtypes (bool is refused, as torch does for abs and relu).
Tensor numeric_unary(const OpDef& op, const Tensor& a, SaveFn save) {
  return ElementwiseCall(op, op.name).input(a).refuse_bool().save(save).run();
}
// In place: a = op(a) in a's dtype; the node saves the result (exp_, relu_ both differentiate through y).
Tensor& unary_inplace(const OpDef& op, const char* name, Tensor& a, Promotion promotion) {
  return ElementwiseCall(op, name).input(a, "self").promotion(promotion).refuse_bool().save(save_output).run_inplace(a);
}

Tensor fused_backward(const OpDef& op, const Tensor& g, const Tensor& v) {
  Tensor out = empty_elementwise(v.shape(), v.dtype(), std::span<const Tensor>(&v, 1));
  enqueue(op, {to(g, v.dtype()), v}, {out});
  return out;
}

Tensor gelu_derivative_times(const Tensor& g, const Tensor& x, bool tanh_approximation) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
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

// The rule of core/shape.h (the stream checks it again at enqueue, naming the primitive); here, before any
// recording, with the name of the function the user called.
void detail::check_no_internal_overlap(const char* op, const Tensor& t) {
  DG_CHECK(!has_internal_overlap(t.shape(), t.strides()), Runtime, "[", op, "] unsupported operation: more than "
           "one element of the written-to tensor (shape ", t.shape(), ", strides ", t.strides(), ") refers to a "
           "single memory location; clone() the tensor first");
}

Tensor exp(const Tensor& a) { return floating_unary(op_exp, a, save_output); }
Tensor log(const Tensor& a) { return floating_unary(op_log, a, save_input); }
Tensor expm1(const Tensor& a) { return floating_unary(op_expm1, a, save_input); }
Tensor log1p(const Tensor& a) { return floating_unary(op_log1p, a, save_input); }
Tensor sqrt(const Tensor& a) { return floating_unary(op_sqrt, a, save_output); }
Tensor rsqrt(const Tensor& a) { return floating_unary(op_rsqrt, a, save_output); }
Tensor sin(const Tensor& a) { return floating_unary(op_sin, a, save_input); }
Tensor cos(const Tensor& a) { return floating_unary(op_cos, a, save_input); }
Tensor tanh(const Tensor& a) { return floating_unary(op_tanh, a, save_output); }
Tensor sigmoid(const Tensor& a) { return floating_unary(op_sigmoid, a, save_output); }
Tensor silu(const Tensor& a) { return floating_unary(op_silu, a, save_input); }
Tensor abs(const Tensor& a) {
  if (storage_only::float8(a)) [[unlikely]] return storage_only::abs(a);
  return numeric_unary(op_abs, a, save_input);
}
Tensor relu(const Tensor& a) { return numeric_unary(op_relu, a, save_output); }
// Rounding keeps integer dtypes (the values unchanged) and refuses bool, as torch.
// uint32/uint64 (no kernel): a copy, as torch's (storage_only::round_integers).
Tensor floor(const Tensor& a) {  // the backward reads nothing
  if (storage_only::wide_unsigned(a)) [[unlikely]] return storage_only::round_integers(a);
  return numeric_unary(op_floor, a, nullptr);
}
Tensor ceil(const Tensor& a) {
  if (storage_only::wide_unsigned(a)) [[unlikely]] return storage_only::round_integers(a);
  return numeric_unary(op_ceil, a, nullptr);
}
Tensor trunc(const Tensor& a) {
  if (storage_only::wide_unsigned(a)) [[unlikely]] return storage_only::round_integers(a);
  return numeric_unary(op_trunc, a, nullptr);
}
namespace {
// torch has no integer kernel for round with decimals.
void check_round_decimals(const char* name, const Tensor& a, int64_t decimals) {
  check_defined(name, a);
  DG_CHECK(decimals == 0 || is_floating(a.dtype()) || a.dtype() == DType::Bool, NotImplemented, "[", name,
           "] decimals=", decimals, " is implemented for floating tensors only, got ", dtype_name(a.dtype()),
           " of shape ", a.shape());
}
}  // namespace
Tensor round(const Tensor& a, int64_t decimals) {
  check_round_decimals("round", a, decimals);
  if (storage_only::wide_unsigned(a)) [[unlikely]] return storage_only::round_integers(a);
  return ElementwiseCall(op_round, "round").input(a).refuse_bool().attrs(RoundAttrs{decimals}).run();
}
// Any dtype, bool included (sign of a bool is itself); sign(nan) = 0, as torch's CPU kernel.
Tensor sign(const Tensor& a) { return ElementwiseCall(op_sign, "sign").input(a).run(); }
// Integers and bool become float32 (torch: reciprocal(int) is floating).
Tensor reciprocal(const Tensor& a) { return floating_unary(op_reciprocal, a, save_output); }
// Any dtype; integers and bool are finite, never nan or inf.
// The storage-only dtypes (docs/dtypes.md) have no isnan/isfinite kernel; torch runs both on uint32/uint64 and
// float8, so they are composed of what takes them: an integer is never NaN and always finite, a float8 NaN is the
// value unequal to itself, and a float8_e5m2 is finite where its exact float32 is (torch has no isfinite for
// float8_e4m3fn: it reaches the op and is refused there).
Tensor isnan(const Tensor& a) {
  if (is_storage_only(a.dtype())) [[unlikely]] {
    if (is_complex(a.dtype())) return logical_or(isnan(real(a)), isnan(imag(a)));  // nan in either part
    return is_floating(a.dtype()) ? ne(a, a) : full(a.shape(), false, {.dtype = DType::Bool, .device = a.device()});
  }
  return ElementwiseCall(op_isnan, "isnan").input(a).promotion(Promotion::Compare).run();
}
// uint32/uint64: never infinite; float8_e5m2: where its exact float32 is (torch has no isinf for float8_e4m3fn).
Tensor isinf(const Tensor& a) {
  if (storage_only::has(a) && a.dtype() != DType::Float8_e4m3fn) [[unlikely]]
    return is_floating(a.dtype()) ? isinf(to(a, DType::Float32))
                                  : full(a.shape(), false, {.dtype = DType::Bool, .device = a.device()});
  return ElementwiseCall(op_isinf, "isinf").input(a).promotion(Promotion::Compare).run();
}
Tensor isfinite(const Tensor& a) {
  if (is_complex(a.dtype())) [[unlikely]] return logical_and(isfinite(real(a)), isfinite(imag(a)));
  if (is_storage_only(a.dtype()) && a.dtype() != DType::Float8_e4m3fn) [[unlikely]]
    return is_floating(a.dtype()) ? isfinite(to(a, DType::Float32))
                                  : full(a.shape(), true, {.dtype = DType::Bool, .device = a.device()});
  return ElementwiseCall(op_isfinite, "isfinite").input(a).promotion(Promotion::Compare).run();
}

Tensor gelu(const Tensor& a, std::string_view approximate) {
  DG_CHECK(approximate == "none" || approximate == "tanh", Value, "[gelu] approximate must be 'none' or 'tanh', got '",
           approximate, "'");
  return floating_unary(op_gelu, a, save_input, GeluAttrs{approximate == "tanh"});
}

Tensor& exp_(Tensor& a) { return unary_inplace(op_exp, "exp_", a, Promotion::PromoteFloat); }

Tensor& relu_(Tensor& a) { return unary_inplace(op_relu, "relu_", a, Promotion::Promote); }
Tensor& floor_(Tensor& a) { return unary_inplace(op_floor, "floor_", a, Promotion::Promote); }
Tensor& ceil_(Tensor& a) { return unary_inplace(op_ceil, "ceil_", a, Promotion::Promote); }
Tensor& trunc_(Tensor& a) { return unary_inplace(op_trunc, "trunc_", a, Promotion::Promote); }
Tensor& round_(Tensor& a, int64_t decimals) {
  check_round_decimals("round_", a, decimals);
  return ElementwiseCall(op_round, "round_").input(a, "self").refuse_bool().attrs(RoundAttrs{decimals}).run_inplace(a);
}
Tensor& sign_(Tensor& a) {
  return ElementwiseCall(op_sign, "sign_").input(a, "self").run_inplace(a);
}
Tensor& reciprocal_(Tensor& a) { return unary_inplace(op_reciprocal, "reciprocal_", a, Promotion::PromoteFloat); }

// --- pow ---------------------------------------------------------------------------------------------
Tensor pow(const Tensor& base, const Tensor& exponent) {
  return ElementwiseCall(op_pow, "pow").input(base).input(exponent, "exponent")
      .refuse_bool("not supported for two bool tensors").save(save_operands_and_output).run();
}

Tensor pow(const Tensor& base, Scalar exponent) {
  ElementwiseCall call(op_pow_scalar, "pow");
  call.input(base).scalar(exponent).attrs(ScalarAttrs{exponent}).save(save_input);
  const DType dtype = call.compute_dtype();
  // torch converts the exponent with its checked conversion: an int in [2**63, 2**64) suits floating tensors only
  if (exponent.is_uint()) [[unlikely]] check_scalar_fits("pow", exponent, dtype);
  if (is_integral(dtype, true) && exponent.is_integral())
    DG_CHECK(exponent.to_int() >= 0, Value, "[pow] Integers to negative integer powers are not allowed (",
             dtype_name(dtype), " tensor to the power ", exponent.to_int(), ")");
  DG_CHECK(dtype != DType::Bool || exponent.is_bool(), Type, "[pow] not supported for bool tensors");
  return call.run();
}

Tensor pow(Scalar base, const Tensor& exponent) {
  return ElementwiseCall(op_rpow_scalar, "pow").input(exponent, "exponent").scalar(base).attrs(ScalarAttrs{base})
      .refuse_bool().save(save_operands_and_output).run();
}

// --- maximum / minimum --------------------------------------------------------------------------------
Tensor maximum(const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_maximum, "maximum").input(a).input(b, "other").save(save_operands).run();
}

// Floating dtypes only, as torch ("logaddexp_cpu" not implemented for 'Long').
Tensor logaddexp(const Tensor& a, const Tensor& b) {
  ElementwiseCall call(op_logaddexp, "logaddexp");
  call.input(a).input(b, "other").save(save_operands);
  DG_CHECK(is_floating(call.compute_dtype()), NotImplemented, "[logaddexp] not implemented for '",
           dtype_torch_name(call.compute_dtype()), "'");
  return call.run();
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return ElementwiseCall(op_minimum, "minimum").input(a).input(b, "other").save(save_operands).run();
}

// --- lerp ------------------------------------------------------------------------------------------------
// Floating dtypes; end (and a weight tensor of one dim or more) must have self's dtype, as torch requires.
namespace {
ElementwiseCall lerp_call(const char* name, const Tensor& self, const Tensor& end, const Tensor* weight, Scalar w) {
  check_defined(name, self, "input");
  check_defined(name, end, "end");
  DG_CHECK(self.dtype() == end.dtype(), Runtime, "[", name, "] expected dtype ", dtype_name(self.dtype()),
           " for `end` but got dtype ", dtype_name(end.dtype()));
  if (weight) {
    check_defined(name, *weight, "weight");
    DG_CHECK(weight->dim() == 0 || weight->dtype() == self.dtype(), Runtime, "[", name, "] expected dtype ",
             dtype_name(self.dtype()), " for `weight` but got dtype ", dtype_name(weight->dtype()));
  }
  DG_CHECK(is_floating(self.dtype()), NotImplemented, "[", name, "] not implemented for '",
           dtype_torch_name(self.dtype()), "'");
  ElementwiseCall call(weight ? op_lerp : op_lerp_scalar, name);
  call.input(self).input(end, "end");
  if (weight) call.input(*weight, "weight");
  else call.attrs(ScalarAttrs{w});
  return std::move(call.save(save_operands));
}
}  // namespace

Tensor lerp(const Tensor& self, const Tensor& end, const Tensor& weight) {
  return lerp_call("lerp", self, end, &weight, Scalar(0)).run();
}
Tensor lerp(const Tensor& self, const Tensor& end, Scalar weight) {
  return lerp_call("lerp", self, end, nullptr, weight).run();
}
Tensor& lerp_(Tensor& self, const Tensor& end, const Tensor& weight) {
  return lerp_call("lerp_", self, end, &weight, Scalar(0)).save(save_operands, true).run_inplace(self);
}
Tensor& lerp_(Tensor& self, const Tensor& end, Scalar weight) {
  return lerp_call("lerp_", self, end, nullptr, weight).run_inplace(self);
}

}  // namespace dg
