// Elementwise binary math: atan2, fmod (C's sign) and remainder (Python's sign, the `%` operator), with their
// backward formulas. Scalar operands become zero-dim tensors of the call's result dtype (so promotion is torch's
// for a Python number).
#include "dygrad/ops/math.h"

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/elementwise_call.h"
#include "dygrad/ops/factory.h"

namespace dg {

namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

// atan2(y, x): d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2). saved: y, x.
void atan2_backward(Node& n, Grads g, GradInputs gi) {
  const Tensor y = n.saved(0), x = n.saved(1);
  const Tensor scaled = div(g[0], add(mul(x, x), mul(y, y)));
  if (n.needs_grad(0)) gi[0] = sum_to(mul(scaled, x), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(mul(scaled, neg(y)), n.input_meta[1].shape);
}
// fmod(a, b) = a - trunc(a / b) b and remainder(a, b) = a - floor(a / b) b: d/da = 1, d/db = -trunc or -floor
// of a / b (torch's formulas). saved: a, b. The quotient of 16-bit floats is rounded after the trunc or floor, as
// torch's div(rounding_mode=...) does (4.99 must not round to 5 first).
Tensor rounded_quotient(const Tensor& a, const Tensor& b, bool toward_zero) {
  if (!is_reduced_float(a.dtype())) return toward_zero ? trunc(div(a, b)) : floor(div(a, b));
  const Tensor q = div(to(a, DType::Float32), to(b, DType::Float32));
  return to(toward_zero ? trunc(q) : floor(q), a.dtype());
}
void fmod_backward(Node& n, Grads g, GradInputs gi) {
  if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_meta[0].shape);
  if (n.needs_grad(1))
    gi[1] = sum_to(mul(g[0], neg(rounded_quotient(n.saved(0), n.saved(1), true))), n.input_meta[1].shape);
}
void remainder_backward(Node& n, Grads g, GradInputs gi) {
  if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_meta[0].shape);
  if (n.needs_grad(1))
    gi[1] = sum_to(mul(g[0], neg(rounded_quotient(n.saved(0), n.saved(1), false))), n.input_meta[1].shape);
}

void save_operands(Node& n, std::span<const Tensor> in, const Tensor&) {
  for (const Tensor& t : in) n.save(t);
}

OpCost binary_cost(const Task& t) {
  OpCost c;
  for (const Tensor& in : t.inputs) c.bytes += double(in.numel()) * double(in.itemsize());
  c.bytes += double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  c.flops = double(t.outputs[0].numel()) * 10;  // a division and its correction (atan2: a polynomial)
  return c;
}
}  // namespace

const OpDef op_atan2("atan2", nullptr, {.fusion = FusionClass::Elementwise, .backward = atan2_backward,
                                        .cost = binary_cost});
const OpDef op_fmod("fmod", nullptr, {.fusion = FusionClass::Elementwise, .backward = fmod_backward,
                                      .cost = binary_cost});
const OpDef op_remainder("remainder", nullptr, {.fusion = FusionClass::Elementwise, .backward = remainder_backward,
                                                .cost = binary_cost});

namespace {
ElementwiseCall modulo_call(const OpDef& op, const char* name, const Tensor& a, const Tensor& b) {
  ElementwiseCall call(op, name);
  call.input(a).input(b, "other").refuse_bool("not implemented for 'Bool'").save(save_operands);
  return call;
}
// A Python number beside a tensor, as the zero-dim tensor of the pair's result dtype. An int in [2**63, 2**64) is cast
// into an integral one as torch casts its wrapped number: it wraps (full's checked conversion would refuse it).
Tensor scalar_operand(const char* name, const Tensor& a, Scalar s) {
  check_defined(name, a, "input");
  const DType dtype = result_type(a, s);
  if (s.is_uint() && is_integral(dtype, false)) [[unlikely]]
    return to(full(Dims{}, s, {.dtype = DType::UInt64, .device = a.device()}), dtype);
  return full(Dims{}, s, {.dtype = dtype, .device = a.device()});
}
}  // namespace

Tensor atan2(const Tensor& y, const Tensor& x) {
  return ElementwiseCall(op_atan2, "atan2").input(y).input(x, "other").promotion(Promotion::PromoteFloat)
      .save(save_operands).run();
}
Tensor& atan2_(Tensor& y, const Tensor& x) {
  return ElementwiseCall(op_atan2, "atan2_").input(y, "self").input(x, "other").promotion(Promotion::PromoteFloat)
      .save(save_operands, true).run_inplace(y);
}

Tensor fmod(const Tensor& a, const Tensor& b) { return modulo_call(op_fmod, "fmod", a, b).run(); }
Tensor fmod(const Tensor& a, Scalar b) { return fmod(a, scalar_operand("fmod", a, b)); }
Tensor& fmod_(Tensor& a, const Tensor& b) {
  return modulo_call(op_fmod, "fmod_", a, b).save(save_operands, true).run_inplace(a);
}
Tensor& fmod_(Tensor& a, Scalar b) {
  const Tensor other = scalar_operand("fmod_", a, b);
  return fmod_(a, other);
}

Tensor remainder(const Tensor& a, const Tensor& b) { return modulo_call(op_remainder, "remainder", a, b).run(); }
Tensor remainder(const Tensor& a, Scalar b) { return remainder(a, scalar_operand("remainder", a, b)); }
Tensor remainder(Scalar a, const Tensor& b) { return remainder(scalar_operand("remainder", b, a), b); }
Tensor& remainder_(Tensor& a, const Tensor& b) {
  return modulo_call(op_remainder, "remainder_", a, b).save(save_operands, true).run_inplace(a);
}
Tensor& remainder_(Tensor& a, Scalar b) {
  const Tensor other = scalar_operand("remainder_", a, b);
  return remainder_(a, other);
}

}  // namespace dg
