// Comparison and selection ops: eq/ne/lt/le/gt/ge, logical ops, where, masked_fill(_) and clamp(_):
// validation, type promotion, Task creation and the backward formulas (written with dygrad ops).
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"

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

#define DG_COMPARE_OP(name)                                                                                    \
  const OpDef op_##name(#name, nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});                \
  const OpDef op_##name##_scalar(#name "_scalar", attrs_type<ScalarAttrs>(),                                        \
                                 {.fusion = FusionClass::Elementwise, .cost = select_cost})
DG_COMPARE_OP(eq);
DG_COMPARE_OP(ne);
DG_COMPARE_OP(lt);
DG_COMPARE_OP(le);
DG_COMPARE_OP(gt);
DG_COMPARE_OP(ge);
#undef DG_COMPARE_OP
const OpDef op_logical_not("logical_not", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_logical_and("logical_and", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_logical_or("logical_or", nullptr, {.fusion = FusionClass::Elementwise, .cost = select_cost});
const OpDef op_where("where", nullptr, {.fusion = FusionClass::Elementwise, .backward = where_backward, .cost = select_cost});
const OpDef op_where_scalar("where_scalar", attrs_type<WhereScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = where_scalar_backward, .cost = select_cost});
const OpDef op_masked_fill("masked_fill", attrs_type<ScalarAttrs>(), {.fusion = FusionClass::Elementwise, .backward = masked_fill_backward, .cost = select_cost});
const OpDef op_clamp_scalar("clamp_scalar", attrs_type<ClampAttrs>(), {.fusion = FusionClass::Elementwise, .backward = clamp_scalar_backward, .cost = select_cost});
const OpDef op_clamp_tensor("clamp_tensor", attrs_type<ClampAttrs>(), {.fusion = FusionClass::Elementwise, .backward = clamp_tensor_backward, .cost = select_cost});

// --- comparisons and logical ops -------------------------------------------------------------------------
namespace {
Tensor compare(const OpDef& op, const Tensor& a, const Tensor& b) {
  check_defined(op.name, a, "input");
  check_defined(op.name, b, "other");
  check_same_device(op.name, a, b);
  const DType dtype = result_type(a, b);
  Dims shape = broadcast_shapes(op.name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, DType::Bool);
  enqueue(op, {to(a, dtype), to(b, dtype)}, {out});
  return out;
}

Tensor compare(const OpDef& op, const Tensor& a, Scalar b) {
  check_defined(op.name, a, "input");
  Tensor x = to(a, result_type(a, b));
  Tensor out = Tensor::empty(x.shape(), DType::Bool);
  enqueue(op, {x}, {out}, ScalarAttrs{b});
  return out;
}

Tensor logical_binary(const OpDef& op, const Tensor& a, const Tensor& b) {
  check_defined(op.name, a, "input");
  check_defined(op.name, b, "other");
  check_same_device(op.name, a, b);
  Dims shape = broadcast_shapes(op.name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, DType::Bool);
  enqueue(op, {to(a, DType::Bool), to(b, DType::Bool)}, {out});
  return out;
}

void check_bool_mask(const char* op, const Tensor& mask, const char* what) {
  DG_CHECK(mask.dtype() == DType::Bool, Type, "[", op, "] expected ", what, " to be a bool tensor, got ",
           dtype_name(mask.dtype()));
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

Tensor logical_not(const Tensor& a) {
  check_defined("logical_not", a);
  Tensor out = Tensor::empty(a.shape(), DType::Bool);
  enqueue(op_logical_not, {a}, {out});
  return out;
}
Tensor logical_and(const Tensor& a, const Tensor& b) { return logical_binary(op_logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical_binary(op_logical_or, a, b); }

// --- where, masked_fill ----------------------------------------------------------------------------------
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", cond, "condition");
  check_defined("where", a, "input");
  check_defined("where", b, "other");
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  check_bool_mask("where", cond, "condition");
  const DType dtype = result_type(a, b);
  Dims shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  Tensor x = to(a, dtype), y = to(b, dtype);
  Tensor out = Tensor::empty(shape, dtype);
  enqueue(op_where, {cond, x, y}, {out});
  if (needs_grad_any({x, y})) {
    Tensor inputs[3] = {cond, x, y}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_where, inputs, outputs);
    node->save(cond);
  }
  return out;
}

namespace {
// where with one scalar operand (an attribute, never a tensor): cond ? t : s, or cond ? s : t.
Tensor where_scalar(const Tensor& cond, const Tensor& t, Scalar s, bool scalar_when_true) {
  check_defined("where", cond, "condition");
  check_defined("where", t, scalar_when_true ? "other" : "input");
  check_same_device("where", cond, t);
  check_bool_mask("where", cond, "condition");
  Tensor x = to(t, result_type(t, s));
  Dims shape = broadcast_shapes("where", cond.shape(), x.shape());
  Tensor out = Tensor::empty(shape, x.dtype());
  const Attrs attrs = WhereScalarAttrs{s, scalar_when_true};
  enqueue(op_where_scalar, {cond, x}, {out}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[2] = {cond, x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_where_scalar, inputs, outputs);
    node->attrs = attrs;
    node->save(cond);
  }
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) { return where_scalar(cond, a, b, false); }
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) { return where_scalar(cond, b, a, true); }

Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value) {
  check_defined("masked_fill", a, "input");
  check_defined("masked_fill", mask, "mask");
  check_same_device("masked_fill", a, mask);
  check_bool_mask("masked_fill", mask, "mask");
  Dims shape = broadcast_shapes("masked_fill", a.shape(), mask.shape());
  Tensor out = Tensor::empty(shape, a.dtype());
  const Attrs attrs = ScalarAttrs{value};
  enqueue(op_masked_fill, {a, mask}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[2] = {a, mask}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_masked_fill, inputs, outputs);
    node->save(mask);
  }
  return out;
}

// --- in place --------------------------------------------------------------------------------------------
namespace {
// a = op(a, others...) in a's dtype: the node is recorded against a's old history, `save` stores what the
// backward needs (before the write), then a's history is rebased onto the node.
template <typename Save>
Tensor& inplace(const OpDef& op, const char* name, Tensor& a, std::span<const Tensor> others, const Attrs& attrs,
                Save save) {
  detail::check_no_internal_overlap(name, a);
  check_inplace(name, a);
  SmallVector<Tensor, 4> inputs;
  inputs.push_back(a);
  for (const Tensor& o : others) inputs.push_back(o);
  std::span<const Tensor> all(inputs.data(), inputs.size());
  const bool record = needs_grad_any(all);
  Ref<Node> node;
  if (record) {
    node = make_ref<Node>(&op, 1);
    record_node(node, all, {});
    node->attrs = attrs;
    save(*node);
  }
  a.storage().bump_version();
  enqueue(op, all, std::span<const Tensor>(&a, 1), attrs);
  if (record) rebase_history(a, node);
  return a;
}

// The broadcast of `other` must keep a's shape (torch: "output with shape ... doesn't match ...").
void check_broadcasts_to(const char* op, const Tensor& a, const Tensor& other) {
  Dims shape = broadcast_shapes(op, a.shape(), other.shape());
  DG_CHECK(same_shape(shape, a.shape()), Value, "[", op, "] output with shape ", a.shape(),
           " doesn't match the broadcast shape ", IntSpan(shape));
}
}  // namespace

Tensor& masked_fill_(Tensor& a, const Tensor& mask, Scalar value) {
  check_defined("masked_fill_", a, "self");
  check_defined("masked_fill_", mask, "mask");
  check_same_device("masked_fill_", a, mask);
  check_bool_mask("masked_fill_", mask, "mask");
  check_broadcasts_to("masked_fill_", a, mask);
  const Attrs attrs = ScalarAttrs{value};
  const Tensor others[1] = {mask};
  return inplace(op_masked_fill, "masked_fill_", a, others, attrs, [&](Node& n) { n.save(mask); });
}

// --- clamp -----------------------------------------------------------------------------------------------
namespace {
Attrs clamp_attrs(const char* op, std::optional<Scalar> min, std::optional<Scalar> max) {
  DG_CHECK(min || max, Value, "[", op, "] at least one of 'min' or 'max' must not be None");
  ClampAttrs attrs;
  if (min) attrs.min = *min;
  if (max) attrs.max = *max;
  attrs.has_min = min.has_value();
  attrs.has_max = max.has_value();
  return attrs;
}

// The Task inputs (x, present bounds...) of a clamp with tensor bounds; the attributes say which are present.
SmallVector<Tensor, 4> clamp_inputs(const Tensor& x, const Tensor& lo, const Tensor& hi, Attrs& attrs) {
  SmallVector<Tensor, 4> inputs;
  inputs.push_back(x);
  if (lo.defined()) inputs.push_back(lo);
  if (hi.defined()) inputs.push_back(hi);
  ClampAttrs present;
  present.has_min = lo.defined();
  present.has_max = hi.defined();
  attrs = present;
  return inputs;
}
}  // namespace

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined("clamp", a);
  Attrs attrs = clamp_attrs("clamp", min, max);
  DG_CHECK(a.dtype() != DType::Bool, Type, "[clamp] not supported for bool tensors");
  ResultType r;
  r.add_tensor(a.dtype(), a.dim());
  if (min) r.add_scalar(*min);
  if (max) r.add_scalar(*max);
  Tensor x = to(a, r.result());
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  enqueue(op_clamp_scalar, {x}, {out}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_clamp_scalar, inputs, outputs);
    node->attrs = attrs;
    node->save(x);
  }
  return out;
}

Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max) {
  check_defined("clamp", a);
  DG_CHECK(min.defined() || max.defined(), Value, "[clamp] at least one of 'min' or 'max' must not be None");
  DG_CHECK(a.dtype() != DType::Bool, Type, "[clamp] not supported for bool tensors");
  ResultType r;
  r.add_tensor(a.dtype(), a.dim());
  Dims shape(a.shape());
  for (const Tensor* bound : {&min, &max}) {
    if (!bound->defined()) continue;
    check_same_device("clamp", a, *bound);
    r.add_tensor(bound->dtype(), bound->dim());
    shape = broadcast_shapes("clamp", shape, bound->shape());
  }
  const DType dtype = r.result();
  Attrs attrs;
  SmallVector<Tensor, 4> inputs = clamp_inputs(to(a, dtype), min.defined() ? to(min, dtype) : Tensor(),
                                               max.defined() ? to(max, dtype) : Tensor(), attrs);
  std::span<const Tensor> in(inputs.data(), inputs.size());
  Tensor out = Tensor::empty(shape, dtype);
  enqueue(op_clamp_tensor, in, std::span<const Tensor>(&out, 1), attrs);
  if (needs_grad_any(in)) {
    Ref<Node> node = record_node(&op_clamp_tensor, in, std::span<const Tensor>(&out, 1));
    node->attrs = attrs;
    for (const Tensor& t : inputs) node->save(t);
  }
  return out;
}

Tensor& clamp_(Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_defined("clamp_", a, "self");
  Attrs attrs = clamp_attrs("clamp_", min, max);
  DG_CHECK(a.dtype() != DType::Bool, Type, "[clamp_] not supported for bool tensors");
  const bool float_bound = (min && min->is_floating()) || (max && max->is_floating());
  DG_CHECK(is_floating(a.dtype()) || !float_bound, Type, "[clamp_] result type Float can't be cast to the desired "
           "output type ", dtype_name(a.dtype()));
  return inplace(op_clamp_scalar, "clamp_", a, {}, attrs, [&](Node& n) { n.save(clone(detach(a))); });
}

Tensor& clamp_(Tensor& a, const Tensor& min, const Tensor& max) {
  check_defined("clamp_", a, "self");
  DG_CHECK(min.defined() || max.defined(), Value, "[clamp_] at least one of 'min' or 'max' must not be None");
  DG_CHECK(a.dtype() != DType::Bool, Type, "[clamp_] not supported for bool tensors");
  Tensor bounds[2];
  for (int k = 0; k < 2; ++k) {
    const Tensor& bound = k == 0 ? min : max;
    if (!bound.defined()) continue;
    check_same_device("clamp_", a, bound);
    check_broadcasts_to("clamp_", a, bound);
    DG_CHECK(is_floating(a.dtype()) || !is_floating(bound.dtype()), Type, "[clamp_] result type ",
             dtype_name(result_type(a, bound)), " can't be cast to the desired output type ", dtype_name(a.dtype()));
    bounds[k] = to(bound, a.dtype());
  }
  Attrs attrs;
  SmallVector<Tensor, 4> inputs = clamp_inputs(a, bounds[0], bounds[1], attrs);
  std::span<const Tensor> others(inputs.data() + 1, inputs.size() - 1);
  return inplace(op_clamp_tensor, "clamp_", a, others, attrs, [&](Node& n) {
    n.save(clone(detach(a)));
    for (const Tensor& t : others) n.save(t);
  });
}

}  // namespace dg
