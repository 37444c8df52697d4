// Arithmetic ops (add, sub, mul, div, neg and their scalar and in-place forms), casts and copies:
// validation, type promotion, Task creation and the backward formulas.
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

// --- backward formulas (grad_outputs[0] = g) -------------------------------------------------------------
namespace {
void add_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Scalar alpha = n.attrs.get<AddAttrs>().alpha;
  if (n.needs_grad(0)) gi[0] = sum_to(g[0], n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(alpha.to_double() == 1.0 ? g[0] : mul(g[0], alpha), n.input_meta[1].shape);
}
void mul_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = sum_to(mul(g[0], n.saved(1)), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(mul(g[0], n.saved(0)), n.input_meta[1].shape);
}
void div_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor b = n.saved(1);
  if (n.needs_grad(0)) gi[0] = sum_to(div(g[0], b), n.input_meta[0].shape);
  if (n.needs_grad(1)) gi[1] = sum_to(neg(div(mul(g[0], n.saved(0)), mul(b, b))), n.input_meta[1].shape);
}
void add_scalar_backward(Node&, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = g[0]; }
void mul_scalar_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = mul(g[0], n.attrs.get<ScalarAttrs>().value); }
void div_scalar_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = div(g[0], n.attrs.get<ScalarAttrs>().value); }
void rsub_scalar_backward(Node&, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = neg(g[0]); }
void rdiv_scalar_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  // out = s / a: d out / d a = -s / a^2 = -out / a
  Tensor a = n.saved(0), out = n.saved(1);
  gi[0] = neg(div(mul(g[0], out), a));
}
void neg_backward(Node&, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = neg(g[0]); }
void copy_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  // A cast (or a broadcast copy): the gradient goes back in the source's dtype and shape.
  gi[0] = to(sum_to(g[0], n.input_meta[0].shape), n.input_meta[0].dtype);
}

OpCost arithmetic_cost(const Task& t) {
  OpCost c;
  for (const Tensor& in : t.inputs) c.bytes += double(in.numel()) * double(in.itemsize());
  c.bytes += double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  c.flops = double(t.outputs[0].numel());
  return c;
}
}  // namespace

const OpDef op_add("add", attrs_type<AddAttrs>(), {.fusion = FusionClass::Elementwise, .backward = add_backward, .cost = arithmetic_cost});
const OpDef op_mul("mul", nullptr, {.fusion = FusionClass::Elementwise, .backward = mul_backward, .cost = arithmetic_cost});
const OpDef op_div("div", nullptr, {.fusion = FusionClass::Elementwise, .backward = div_backward, .cost = arithmetic_cost});
const OpDef op_add_scalar("add_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = add_scalar_backward, .cost = arithmetic_cost});
const OpDef op_mul_scalar("mul_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = mul_scalar_backward, .cost = arithmetic_cost});
const OpDef op_div_scalar("div_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = div_scalar_backward, .cost = arithmetic_cost});
const OpDef op_rsub_scalar("rsub_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = rsub_scalar_backward, .cost = arithmetic_cost});
const OpDef op_rdiv_scalar("rdiv_scalar", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = rdiv_scalar_backward, .cost = arithmetic_cost});
const OpDef op_neg("neg", nullptr, {.fusion = FusionClass::Elementwise, .backward = neg_backward, .cost = arithmetic_cost});
const OpDef op_copy("copy", nullptr, {.fusion = FusionClass::Elementwise, .backward = copy_backward, .cost = arithmetic_cost});
const OpDef op_fill("fill", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .cost = arithmetic_cost});

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
// out = op(a, b) with promotion and broadcasting; `floating` forces a floating result (true division).
Tensor binary(const OpDef& op, const Tensor& a, const Tensor& b, Scalar alpha, bool floating,
              void (*save)(Node&, const Tensor&, const Tensor&)) {
  check_defined(op.name, a, "input");
  check_defined(op.name, b, "other");
  check_same_device(op.name, a, b);
  DType dtype = result_type(a, b);
  if (floating && !is_floating(dtype)) dtype = DType::Float32;
  DG_CHECK(dtype != DType::Bool || &op != &op_div, Type, "[", op.name, "] not supported for bool tensors");
  Dims shape = broadcast_shapes(op.name, a.shape(), b.shape());
  // Operands live in arrays handed on as spans: no temporary copies (each an atomic refcount pair) per call.
  Tensor inputs[2] = {to(a, dtype), to(b, dtype)};
  Tensor outputs[1] = {empty_elementwise(shape, dtype, inputs)};
  const Attrs attrs = &op == &op_add ? Attrs(AddAttrs{alpha}) : Attrs();
  enqueue(op, inputs, outputs, attrs);
  if (needs_grad_any(inputs)) {
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    if (save) save(*node, inputs[0], inputs[1]);
  }
  return std::move(outputs[0]);
}

// out = op(a, s): the scalar is an attribute. `floating` forces a floating result.
Tensor binary_scalar(const OpDef& op, const Tensor& a, Scalar s, bool floating, bool save_input, bool save_output) {
  check_defined(op.name, a, "input");
  DType dtype = result_type(a, s);
  if (floating && !is_floating(dtype)) dtype = DType::Float32;
  Tensor inputs[1] = {to(a, dtype)};  // arrays handed on as spans, as in binary()
  Tensor outputs[1] = {empty_elementwise(inputs[0].shape(), dtype, inputs)};
  const Attrs attrs = ScalarAttrs{s};
  enqueue(op, inputs, outputs, attrs);
  if (needs_grad_any(inputs)) {
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    if (save_input) node->save(inputs[0]);
    if (save_output) node->save(detach(outputs[0]));
  }
  return std::move(outputs[0]);
}

// A non-leaf overwritten by a constant keeps requiring grad (as in torch) but its new grad_fn has no
// edges: no gradient reaches the history it no longer depends on.
void no_gradient(Node&, std::span<const Tensor>, std::span<Tensor>) {}
void cut_history_if_overwritten(const Tensor& dst) {
  if (!grad_enabled() || !dst.requires_grad() || dst.is_leaf()) return;
  rebase_history(dst, make_ref<Node>(std::string("fill_"), no_gradient, 1));
}

// In place: dst = op(dst, ...) computed in dst's dtype.
Tensor& inplace(const OpDef& op, Tensor& dst, std::initializer_list<Tensor> others, const Attrs& attrs,
                bool save_others) {
  check_defined(op.name, dst, "self");
  check_inplace(op.name, dst);
  SmallVector<Tensor, 4> inputs;
  inputs.push_back(dst);
  for (const Tensor& o : others) {
    check_defined(op.name, o, "other");
    Dims shape = broadcast_shapes(op.name, dst.shape(), o.shape());
    DG_CHECK(same_shape(shape, dst.shape()), Value, "[", op.name, "_] output with shape ", dst.shape(),
             " doesn't match the broadcast shape ", IntSpan(shape));
    inputs.push_back(to(o, dst.dtype()));
  }
  // Promotion must not need a wider type than dst (torch: "result type Float can't be cast to Long").
  for (const Tensor& o : others) {
    DType r = result_type(dst, o);
    DG_CHECK(!(is_floating(r) && !is_floating(dst.dtype())), Type, "[", op.name, "_] result type ",
             dtype_name(r), " can't be cast to the desired output type ", dtype_name(dst.dtype()));
  }
  bool record = needs_grad_any(std::span<const Tensor>(inputs.data(), inputs.size()));
  Ref<Node> node;
  if (record) {
    node = make_ref<Node>(&op, 1);
    record_node(node, std::span<const Tensor>(inputs.data(), inputs.size()), {});
    node->attrs = attrs;
    if (save_others) {
      node->save(clone(dst));  // the old value of dst, which the op overwrites
      node->save(inputs.size() > 1 ? inputs[1] : Tensor());
    }
  }
  SmallVector<Tensor, 4> task_inputs = inputs;
  dst.storage().bump_version();
  uint64_t seq = enqueue(op, std::span<const Tensor>(task_inputs.data(), task_inputs.size()),
                         std::span<const Tensor>(&dst, 1), attrs);
  (void)seq;
  if (record) rebase_history(dst, node);
  return dst;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) { return binary(op_add, a, b, alpha, false, nullptr); }
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  DG_CHECK(a.dtype() != DType::Bool || b.dtype() != DType::Bool, Type,
           "[sub] subtraction, the `-` operator, with two bool tensors is not supported");
  return add(a, b, alpha.negated());
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(op_mul, a, b, 1, false, [](Node& n, const Tensor& x, const Tensor& y) {
    n.save(n.needs_grad(1) ? x : Tensor());
    n.save(n.needs_grad(0) ? y : Tensor());
  });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(op_div, a, b, 1, true, [](Node& n, const Tensor& x, const Tensor& y) {
    n.save(n.needs_grad(1) ? x : Tensor());
    n.save(y);
  });
}

static Scalar times(Scalar a, Scalar b) {
  // alpha = 1 (the default) leaves the operand's kind alone: bool_tensor + True stays bool, as in torch.
  if (!b.is_floating() && b.to_int() == 1) return a;
  if (a.is_floating() || b.is_floating()) return Scalar(a.to_double() * b.to_double());
  return Scalar(a.to_int() * b.to_int());
}

Tensor add(const Tensor& a, Scalar b, Scalar alpha) { return binary_scalar(op_add_scalar, a, times(b, alpha), false, false, false); }
Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  Scalar s = times(b, alpha);
  return add(a, s.negated());
}
Tensor rsub(const Tensor& a, Scalar b) { return binary_scalar(op_rsub_scalar, a, b, false, false, false); }
Tensor mul(const Tensor& a, Scalar b) { return binary_scalar(op_mul_scalar, a, b, false, false, false); }
Tensor div(const Tensor& a, Scalar b) { return binary_scalar(op_div_scalar, a, b, true, false, false); }
Tensor rdiv(const Tensor& a, Scalar b) { return binary_scalar(op_rdiv_scalar, a, b, true, true, true); }

Tensor neg(const Tensor& a) {
  check_defined("neg", a);
  DG_CHECK(a.dtype() != DType::Bool, Type, "[neg] negation, the `-` operator, on a bool tensor is not supported");
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  enqueue(op_neg, {a}, {out});
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_neg, inputs, outputs);
  }
  return out;
}

// In-place forms. Their backward uses the same formulas with the old value of dst where needed.
Tensor& add_(Tensor& a, const Tensor& b, Scalar alpha) {
  return inplace(op_add, a, {b}, AddAttrs{alpha}, false);
}
Tensor& sub_(Tensor& a, const Tensor& b, Scalar alpha) {
  return add_(a, b, alpha.is_floating() ? Scalar(-alpha.to_double()) : Scalar(-alpha.to_int()));
}
Tensor& mul_(Tensor& a, const Tensor& b) { return inplace(op_mul, a, {b}, Attrs(), needs_grad_any({a, b})); }
Tensor& div_(Tensor& a, const Tensor& b) {
  DG_CHECK(is_floating(a.dtype()), Type, "[div_] result type Float can't be cast to the desired output type ",
           dtype_name(a.dtype()));
  return inplace(op_div, a, {b}, Attrs(), needs_grad_any({a, b}));
}
Tensor& add_(Tensor& a, Scalar b, Scalar alpha) {
  const Scalar s = times(b, alpha);
  DG_CHECK(!(s.is_floating() && !is_floating(a.dtype())), Type, "[add_] result type Float can't be "
           "cast to the desired output type ", dtype_name(a.dtype()));
  return inplace(op_add_scalar, a, {}, ScalarAttrs{s}, false);
}
Tensor& sub_(Tensor& a, Scalar b, Scalar alpha) {
  Scalar s = times(b, alpha);
  return add_(a, s.is_floating() ? Scalar(-s.to_double()) : Scalar(-s.to_int()));
}
Tensor& mul_(Tensor& a, Scalar b) {
  DG_CHECK(!(b.is_floating() && !is_floating(a.dtype())), Type, "[mul_] result type Float can't be cast to the "
           "desired output type ", dtype_name(a.dtype()));
  return inplace(op_mul_scalar, a, {}, ScalarAttrs{b}, false);
}
Tensor& div_(Tensor& a, Scalar b) {
  DG_CHECK(is_floating(a.dtype()), Type, "[div_] result type Float can't be cast to the desired output type ",
           dtype_name(a.dtype()));
  return inplace(op_div_scalar, a, {}, ScalarAttrs{b}, false);
}

// --- casts and copies --------------------------------------------------------------------------------------
Tensor to(const Tensor& a, DType dtype, bool copy) {
  check_defined("to", a);
  if (a.dtype() == dtype && !copy) return a;
  Tensor out = Tensor::empty(a.shape(), dtype);
  enqueue(op_copy, {a}, {out});
  if (is_floating(dtype) && needs_grad_any({a})) {
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
  Dims shape = broadcast_shapes("copy_", dst.shape(), src.shape());
  DG_CHECK(same_shape(shape, dst.shape()), Value, "[copy_] source of shape ", src.shape(),
           " cannot be broadcast to the destination shape ", dst.shape());
  check_inplace("copy_", dst);
  // Reading dst's own storage while writing it (overlapping views): copy the source first.
  Tensor source = src.shares_storage(dst) ? clone(src) : src;
  bool record = needs_grad_any({source}) && is_floating(dst.dtype());
  dst.storage().bump_version();
  enqueue(op_copy, {source}, {dst});
  if (record) {
    Ref<Node> node = make_ref<Node>(&op_copy, 1);
    Tensor inputs[1] = {source};
    record_node(node, inputs, {});
    rebase_history(dst, node);
  } else {
    cut_history_if_overwritten(dst);
  }
  return dst;
}

Tensor& fill_(Tensor& dst, Scalar value) {
  check_defined("fill_", dst, "self");
  check_inplace("fill_", dst);
  check_scalar_fits("fill_", value, dst.dtype());
  dst.storage().bump_version();
  enqueue(op_fill, {}, {dst}, ScalarAttrs{value});
  cut_history_if_overwritten(dst);
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
