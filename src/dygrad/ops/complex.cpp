// complex64 / complex128 ops, composed of real ops on the float pairs (ops/complex.h; docs/dtypes.md, "Complex").
// view_as_real and view_as_complex are the only new differentiable primitives (views, no Task); every complex op
// is real arithmetic between them, so the gradient of a complex input comes back as dL/dre + i dL/dim, torch's
// convention (the conjugate Wirtinger derivative times two), with no complex backward formula to write.
//
// Notation: z = re + i im; a pair tensor P [N..., 2] is view_as_real(z), P[..., 0] = re, P[..., 1] = im.
#include "dygrad/ops/complex.h"

#include <cmath>
#include <cstring>

#include "dygrad/autograd/node.h"
#include "dygrad/core/shape.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

// The same storage read as another dtype with new sizes, strides and offset (in elements of `dtype`).
Tensor reinterpret(const Tensor& a, DType dtype, Dims sizes, Dims strides, int64_t offset) {
  auto impl = make_ref<TensorImpl>(a.impl()->storage, std::move(sizes), std::move(strides), offset, dtype);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

void record_view(const char* name, BackwardFn backward, const Tensor& in, const Tensor& out) {
  if (!needs_grad_any({in})) return;
  Ref<Node> node = make_ref<Node>(std::string(name), backward, 1);
  Tensor inputs[1] = {in}, outputs[1] = {out};
  record_node(node, inputs, outputs);
}

// Whether x [N..., 2] can be viewed as complex as it is (torch's conditions, checked in view_as_complex).
bool pairs_viewable(const Tensor& x) {
  if (x.dim() == 0 || x.shape().back() != 2 || x.strides().back() != 1 || x.storage_offset() % 2 != 0) return false;
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    if (x.strides()[static_cast<size_t>(d)] % 2 != 0) return false;
  return true;
}
// Pairs computed by real ops (any layout) as complex: a view when the layout allows, else of a contiguous copy.
Tensor as_complex(const Tensor& pairs) { return view_as_complex(pairs_viewable(pairs) ? pairs : contiguous(pairs)); }

void view_as_real_backward(Node&, Grads g, GradInputs gi) { gi[0] = as_complex(g[0]); }
void view_as_complex_backward(Node&, Grads g, GradInputs gi) { gi[0] = view_as_real(g[0]); }

Tensor re_of(const Tensor& z) { return select(view_as_real(z), -1, 0); }
Tensor im_of(const Tensor& z) { return select(view_as_real(z), -1, 1); }
Tensor from_parts(const Tensor& re, const Tensor& im) {
  const Tensor parts[2] = {re, im};
  return view_as_complex(stack(parts, -1));
}
// A real number as a zero-dim complex tensor of z's dtype.
Tensor complex_scalar(const Tensor& z, Scalar s) { return full(Dims{}, s, {.dtype = z.dtype(), .device = z.device()}); }

// The ops, on complex operands of one dtype (broadcast by the real ops: each pair tensor ends in the same 2).
Tensor complex_add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return as_complex(add(view_as_real(a), view_as_real(b), alpha));
}
// (ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br)
Tensor complex_mul(const Tensor& a, const Tensor& b) {
  const Tensor ar = re_of(a), ai = im_of(a), br = re_of(b), bi = im_of(b);
  return from_parts(sub(mul(ar, br), mul(ai, bi)), add(mul(ar, bi), mul(ai, br)));
}
// a / b = a conj(b) / |b|^2 (not torch's scaled division: the last bit can differ, and |b|^2 overflows sooner)
Tensor complex_div(const Tensor& a, const Tensor& b) {
  const Tensor ar = re_of(a), ai = im_of(a), br = re_of(b), bi = im_of(b);
  const Tensor norm = add(mul(br, br), mul(bi, bi));
  return from_parts(div(add(mul(ar, br), mul(ai, bi)), norm), div(sub(mul(ai, br), mul(ar, bi)), norm));
}
// |z| = sqrt(re^2 + im^2), with a zero gradient at z = 0 (torch's sgn(0) = 0) where sqrt's would be nan.
Tensor complex_abs(const Tensor& z) {
  const Tensor re = re_of(z), im = im_of(z);
  const Tensor squared = add(mul(re, re), mul(im, im));
  const Tensor zero = eq(squared, 0);
  return where(zero, 0, sqrt(where(zero, 1, squared)));
}
// exp(re + i im) = exp(re) (cos im + i sin im)
Tensor complex_exp(const Tensor& z) {
  const Tensor re = re_of(z), im = im_of(z);
  const Tensor scale = exp(re);
  return from_parts(mul(scale, cos(im)), mul(scale, sin(im)));
}

// log z = log|z| + i angle(z), |z| as sqrt(re^2 + im^2) taken inside the log: 0.5 log(re^2 + im^2).
Tensor complex_log(const Tensor& z) {
  const Tensor re = re_of(z), im = im_of(z);
  return from_parts(mul(log(add(mul(re, re), mul(im, im))), 0.5), atan2(im, re));
}
// z^w = exp(w log z) (the principal branch, as torch's std::pow).
Tensor complex_pow(const Tensor& z, const Tensor& w) { return complex_exp(complex_mul(w, complex_log(z))); }
// z^p for a real p: |z|^p (cos p angle + i sin p angle), so 0^p is 0 for p > 0; z^2 is z z (torch's kernel squares).
Tensor complex_pow_scalar(const Tensor& z, Scalar exponent) {
  const double p = exponent.to_double();
  if (p == 2.0) return complex_mul(z, z);
  if (p == 1.0) return clone(z);
  const Tensor re = re_of(z), im = im_of(z);
  const Tensor scale = pow(add(mul(re, re), mul(im, im)), p / 2.0);
  const Tensor turn = mul(atan2(im, re), p);
  return from_parts(mul(scale, cos(turn)), mul(scale, sin(turn)));
}
// s^w for a real s: exp(w log s), log s = log|s| + i pi for s < 0.
Tensor complex_rpow_scalar(Scalar base, const Tensor& w) {
  const double s = base.to_double();
  const TensorOptions options{.dtype = to_real_dtype(w.dtype()), .device = w.device()};
  const Tensor log_base = from_parts(full(Dims{}, std::log(std::fabs(s)), options), full(Dims{}, s < 0 ? M_PI : 0.0,
                                                                                           options));
  return complex_exp(complex_mul(w, log_base));
}

[[noreturn]] void raise_not_implemented(const char* name, DType t) {
  DG_CHECK(false, NotImplemented, "[", name, "] not implemented for '", dtype_torch_name(t), "'");
  __builtin_unreachable();
}

void check_real_floating_pair(const char* name, const Tensor& a, const char* a_name, const Tensor& b,
                              const char* b_name) {
  check_defined(name, a, a_name);
  check_defined(name, b, b_name);
  DG_CHECK(a.dtype() == b.dtype(), Type, "[", name, "] expected ", a_name, " and ", b_name, " to have the same dtype, "
           "but got ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  DG_CHECK(a.dtype() == DType::Float32 || a.dtype() == DType::Float64, Type, "[", name, "] expected float32 or "
           "float64 tensors, got ", dtype_name(a.dtype()));
}
}  // namespace

Tensor view_as_real(const Tensor& z) {
  check_defined("view_as_real", z);
  DG_CHECK(is_complex(z.dtype()), Runtime, "[view_as_real] is only supported for complex tensors, got ",
           dtype_name(z.dtype()));
  Dims sizes(z.shape()), strides(z.strides());
  for (int64_t& s : strides) s *= 2;
  sizes.push_back(2);
  strides.push_back(1);
  Tensor out = reinterpret(z, to_real_dtype(z.dtype()), std::move(sizes), std::move(strides), z.storage_offset() * 2);
  record_view("view_as_real", view_as_real_backward, z, out);
  return out;
}

Tensor view_as_complex(const Tensor& x) {
  const char* name = "view_as_complex";
  check_defined(name, x);
  DG_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, Runtime, "[", name, "] is only supported "
           "for float32 and float64 tensors, but got a tensor of dtype ", dtype_name(x.dtype()));
  DG_CHECK(x.dim() > 0, Runtime, "[", name, "] input tensor must have one or more dimensions");
  DG_CHECK(x.shape().back() == 2, Runtime, "[", name, "] tensor must have a last dimension of size 2, got shape ",
           x.shape());
  DG_CHECK(x.strides().back() == 1, Runtime, "[", name, "] tensor must have a last dimension with stride 1, got "
           "strides ", x.strides());
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    DG_CHECK(x.strides()[static_cast<size_t>(d)] % 2 == 0, Runtime, "[", name, "] tensor must have a stride "
             "divisible by 2 for all but the last dimension, got strides ", x.strides());
  DG_CHECK(x.storage_offset() % 2 == 0, Runtime, "[", name, "] tensor must have a storage_offset divisible by 2, "
           "got ", x.storage_offset());
  Dims sizes(x.shape()), strides(x.strides());
  sizes.pop_back();
  strides.pop_back();
  for (int64_t& s : strides) s /= 2;
  Tensor out = reinterpret(x, to_complex_dtype(x.dtype()), std::move(sizes), std::move(strides),
                           x.storage_offset() / 2);
  record_view(name, view_as_complex_backward, x, out);
  return out;
}

Tensor real(const Tensor& z) {
  check_defined("real", z);
  return is_complex(z.dtype()) ? re_of(z) : z;
}

Tensor imag(const Tensor& z) {
  check_defined("imag", z);
  DG_CHECK(is_complex(z.dtype()), Runtime, "[imag] is not implemented for tensors with non-complex dtypes, got ",
           dtype_name(z.dtype()));
  return im_of(z);
}

Tensor complex(const Tensor& re, const Tensor& im) {
  check_real_floating_pair("complex", re, "real", im, "imag");
  const Dims shape = broadcast_shapes("complex", re.shape(), im.shape());
  return from_parts(expand(re, shape), expand(im, shape));
}

Tensor polar(const Tensor& abs, const Tensor& angle) {
  check_real_floating_pair("polar", abs, "abs", angle, "angle");
  return complex(mul(abs, cos(angle)), mul(abs, sin(angle)));
}

Tensor conj(const Tensor& z) {
  check_defined("conj", z);
  if (!is_complex(z.dtype())) return z;
  return from_parts(re_of(z), neg(im_of(z)));
}

Tensor angle(const Tensor& z) {
  check_defined("angle", z);
  if (is_complex(z.dtype())) return atan2(im_of(z), re_of(z));
  // A real x: 0 for x >= 0, pi below, nan kept (torch); integers become float32.
  const Tensor x = is_floating(z.dtype()) ? z : to(z, DType::Float32);
  return where(isnan(x), x, where(lt(x, 0), full_like(x, 3.14159265358979323846), 0));
}

Tensor complex_elementwise(const OpDef& op, const char* name, std::span<const Tensor> in, const Attrs& attrs) {
  const char* primitive = op.name;
  auto is = [primitive](const char* n) { return std::strcmp(primitive, n) == 0; };
  auto scalar = [&]() { return attrs.get<ScalarAttrs>().value; };
  if (is("add")) return complex_add(in[0], in[1], attrs.get<AddAttrs>().alpha);
  if (is("mul")) return complex_mul(in[0], in[1]);
  if (is("div")) return complex_div(in[0], in[1]);
  if (is("neg")) return as_complex(neg(view_as_real(in[0])));
  if (is("add_scalar")) return complex_add(in[0], complex_scalar(in[0], scalar()), 1);
  if (is("rsub_scalar")) return complex_add(complex_scalar(in[0], scalar()), in[0], -1);
  if (is("mul_scalar")) return as_complex(mul(view_as_real(in[0]), scalar()));
  if (is("div_scalar")) return as_complex(div(view_as_real(in[0]), scalar()));
  if (is("rdiv_scalar")) return complex_div(complex_scalar(in[0], scalar()), in[0]);
  if (is("abs")) return complex_abs(in[0]);
  if (is("exp")) return complex_exp(in[0]);
  if (is("pow")) return complex_pow(in[0], in[1]);
  if (is("pow_scalar")) return complex_pow_scalar(in[0], scalar());
  if (is("rpow_scalar")) return complex_rpow_scalar(scalar(), in[0]);
  raise_not_implemented(name, in[0].dtype());
}

Tensor complex_sum(const Tensor& z, IntSpan dims, bool keepdim, bool mean) {
  // Dims of z (negative ones counted from z's last), reduced over the pair tensor, whose last dim is the pair.
  const Dims rd = reduction_dims(mean ? "mean" : "sum", dims, z.dim());
  const Tensor pairs = view_as_real(z);
  return as_complex(mean ? dg::mean(pairs, rd, keepdim) : dg::sum(pairs, rd, keepdim));
}

}  // namespace dg
