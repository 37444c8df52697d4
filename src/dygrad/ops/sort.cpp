// Ordering and scan ops: validation, output shapes and dtypes, Task creation and backward formulas.
// sort's and topk's gradients go back through their indices (scatter_add into zeros: the indices of one line are
// distinct, so nothing is summed); cumsum's is a reversed cumsum; cumprod's has a kernel of its own that stays
// correct with zeros in the input; flip's is flip. roll is composed of narrow and cat (torch's roll_common).
#include "dygrad/ops/sort.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

extern const OpDef op_cumsum, op_cumprod, op_cumprod_backward;

// --- backward formulas (grad_outputs[0] = g) -------------------------------------------------------------
namespace {
// sort, topk: saved(0) = indices (of g's shape); the dim in the attributes.
int64_t selection_dim(const Node& n) {
  return (n.attrs.type() == attrs_type<SortAttrs>()) ? n.attrs.get<SortAttrs>().dim : n.attrs.get<TopkAttrs>().dim;
}
void selection_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Tensor zero = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  gi[0] = scatter_add(zero, selection_dim(n), n.saved(0), g[0]);
}

Tensor scan(const OpDef& op, const Tensor& a, int64_t dim, bool reverse);
// The gradient of a running sum is the running sum of g from the other end.
void cumsum_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const ScanAttrs& attrs = n.attrs.get<ScanAttrs>();
  gi[0] = scan(op_cumsum, g[0], attrs.dim, !attrs.reverse);
}
// While backward records a graph (create_graph), the gradient composed of differentiable ops, zero-safe without
// division: grad_x[k] = sum_{j >= k} g[j] prod_{i <= j, i != k} x[i], the product for every k at once as the
// cumprod of x with x[k] replaced by 1, over a new dim k: O(n^2) in the scanned length n (torch's composite
// formula divides where x has no zeros; this form has one path for both).
Tensor cumprod_composed(const Tensor& x, const Tensor& g, int64_t dim) {
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  Tensor xt = x.dim() == 0 ? reshape(x, Dims{1}) : transpose(x, dim, -1);  // [..., n]
  Tensor gt = x.dim() == 0 ? reshape(g, Dims{1}) : transpose(g, dim, -1);
  Tensor positions = arange(Scalar(n), x.device());
  Tensor k_index = unsqueeze(positions, 1), j_index = unsqueeze(positions, 0);  // [n, 1] and [1, n]
  Tensor products = cumprod(where(eq(k_index, j_index), Scalar(1.0), unsqueeze(xt, -2)), -1);  // [..., k, j]
  Tensor terms = where(ge(j_index, k_index), mul(products, unsqueeze(gt, -2)), Scalar(0.0));
  Tensor grad = sum(terms, Dims{-1});  // [..., n(k)]
  return x.dim() == 0 ? reshape(grad, IntSpan()) : transpose(grad, dim, -1);
}
// saved(0) = input. One kernel: the zero-aware formula of backend/cpu/sort.cpp, which recomputes the running
// product in the accumulate type (the saved 16-bit output would carry its rounding into every term).
void cumprod_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor x = n.saved(0);
  if (grad_enabled()) return void(gi[0] = cumprod_composed(x, to(g[0], x.dtype()), n.attrs.get<ScanAttrs>().dim));
  Tensor grad = to(g[0], x.dtype());
  Tensor result = Tensor::empty(x.shape(), x.dtype(), x.device());
  enqueue(op_cumprod_backward, {x, grad}, {result}, n.attrs);
  gi[0] = result;
}
Tensor flip_impl(const Tensor& a, Dims dims);
void flip_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  gi[0] = flip_impl(g[0], n.attrs.get<FlipAttrs>().dims);
}

OpCost copy_cost(const Task& t) {
  OpCost c;
  c.bytes = 2.0 * double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
// n log2 n comparisons per line for sort, n log2 k for topk; bytes: the input once, the outputs once.
OpCost sort_cost(const Task& t) {
  const Tensor& in = t.inputs[0];
  const int64_t dim = (t.attrs.type() == attrs_type<SortAttrs>()) ? t.attrs.get<SortAttrs>().dim : t.attrs.get<TopkAttrs>().dim;
  const double line = in.dim() == 0 ? 1.0 : double(in.shape()[dim]);
  const double k = (t.attrs.type() == attrs_type<TopkAttrs>()) ? double(std::max<int64_t>(t.attrs.get<TopkAttrs>().k, 1)) : line;
  OpCost c;
  c.flops = double(in.numel()) * std::max(1.0, std::log2(std::max(k, 2.0)));
  c.bytes = double(in.numel()) * double(in.itemsize());
  for (const Tensor& out : t.outputs) c.bytes += double(out.numel()) * double(out.itemsize());
  return c;
}
// The sort kernel's per-thread buffers: a line of (key, index) pairs and its merge space of as many (16 bytes per
// pair: keys are at most 8 bytes, indices 8); topk's: a line of indices (8 bytes each).
size_t sort_scratch(const Task& t) {
  const Tensor& in = t.inputs[0];
  const int64_t dim = t.attrs.get<SortAttrs>().dim;
  const int64_t line = in.dim() == 0 ? 1 : in.shape()[dim];
  const int64_t lines = line == 0 ? 0 : in.numel() / line;
  return per_worker_scratch_bytes(2 * line, 16, lines);
}
size_t topk_scratch(const Task& t) {
  const Tensor& in = t.inputs[0];
  const int64_t dim = t.attrs.get<TopkAttrs>().dim;
  const int64_t line = in.dim() == 0 ? 1 : in.shape()[dim];
  const int64_t lines = line == 0 ? 0 : in.numel() / line;
  return per_worker_scratch_bytes<int64_t>(line, lines);
}
}  // namespace

const OpDef op_sort("sort", attrs_type<SortAttrs>(), {.backward = selection_backward, .cost = sort_cost, .scratch = sort_scratch});
const OpDef op_topk("topk", attrs_type<TopkAttrs>(), {.backward = selection_backward, .cost = sort_cost, .scratch = topk_scratch});
const OpDef op_cumsum("cumsum", attrs_type<ScanAttrs>(), {.backward = cumsum_backward, .cost = copy_cost});
const OpDef op_cumprod("cumprod", attrs_type<ScanAttrs>(), {.backward = cumprod_backward, .cost = copy_cost});
// Its own gradient is not implemented: no double backward through cumprod.
const OpDef op_cumprod_backward("cumprod_backward", attrs_type<ScanAttrs>(), {.cost = copy_cost});
// The flip kernel reads its input with negated strides (a StridedIteration operand, no view): no scratch.
const OpDef op_flip("flip", attrs_type<FlipAttrs>(), {.backward = flip_backward, .cost = copy_cost});

// --- sort, argsort, topk -----------------------------------------------------------------------------------------
namespace {
// A 0-dim tensor is sorted as one element along dim 0.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, Dims{1}) : t; }

void check_sortable(const char* op, const Tensor& a) {
  check_defined(op, a);
  DG_CHECK(a.dtype() != DType::Bool || std::string_view(op) != "topk", Runtime, "[", op,
           "] does not support bool dtypes on CPU");
}

ValuesIndices as_0d(ValuesIndices r) { return {reshape(r.values, Dims{}), reshape(r.indices, Dims{})}; }
}  // namespace

ValuesIndices sort(const Tensor& a_in, int64_t dim, bool descending, bool stable) {
  check_sortable("sort", a_in);
  if (storage_only::wide_unsigned(a_in)) [[unlikely]] return storage_only::sort(a_in, dim, descending, stable);
  const int64_t d = wrap_dim("sort", dim, a_in.dim());
  const Tensor a = at_least_1d(a_in);
  ValuesIndices out = enqueue_values_indices(op_sort, a, a.shape(), SortAttrs{d, descending, stable});
  return a_in.dim() == 0 ? as_0d(std::move(out)) : out;
}

Tensor argsort(const Tensor& a, int64_t dim, bool descending, bool stable) {
  ApiNameScope name("argsort");
  NoGradGuard no_grad;  // the indices have no gradient
  return sort(a, dim, descending, stable).indices;
}

ValuesIndices topk(const Tensor& a_in, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_sortable("topk", a_in);
  const int64_t d = wrap_dim("topk", dim, a_in.dim());
  const Tensor a = at_least_1d(a_in);
  DG_CHECK(k >= 0 && k <= a.shape()[d], Runtime, "[topk] selected index k out of range: k = ", k,
           " for dimension ", d, " of size ", a.shape()[d], " (input shape ", a_in.shape(), ")");
  Dims shape(a.shape());
  shape[static_cast<size_t>(d)] = k;
  ValuesIndices out = enqueue_values_indices(op_topk, a, shape, TopkAttrs{k, d, largest, sorted});
  return a_in.dim() == 0 && k == 1 ? as_0d(std::move(out)) : out;
}

// --- cumsum, cumprod -----------------------------------------------------------------------------------------
namespace {
// The scan of `a` (already in the result dtype) along dim, recorded when a requires grad.
Tensor scan(const OpDef& op, const Tensor& a_in, int64_t dim, bool reverse) {
  const Tensor a = at_least_1d(a_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const Attrs attrs = ScanAttrs{dim, reverse};
  enqueue(op, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    if (&op == &op_cumprod) node->save(a);
  }
  return a_in.dim() == 0 ? reshape(out, Dims{}) : out;
}

// torch's result dtype: the given one, else int64 for integral and bool inputs, else the input's.
DType scan_dtype(const Tensor& a, std::optional<DType> dtype) {
  if (dtype) return *dtype;
  // A complex tensor keeps its dtype (torch's), so the scan refuses it naming the op, not a silent cast to int64.
  return is_floating(a.dtype()) || is_complex(a.dtype()) ? a.dtype() : DType::Int64;
}

Tensor scan_op(const OpDef& op, const Tensor& a, int64_t dim, std::optional<DType> dtype) {
  check_defined(op.name, a);
  const int64_t d = wrap_dim(op.name, dim, a.dim());
  return scan(op, to(a, scan_dtype(a, dtype)), d, false);
}

Tensor& scan_inplace(const OpDef& op, const char* name, Tensor& a, int64_t dim, std::optional<DType> dtype) {
  check_defined(name, a, "self");
  const DType result = dtype.value_or(a.dtype());
  DG_CHECK(result == a.dtype(), Runtime, "[", name, "] Bad in-place call: input tensor dtype ", dtype_name(a.dtype()),
           " and output tensor dtype ", dtype_name(result), " should match");
  const int64_t d = wrap_dim(name, dim, a.dim());
  Tensor out = scan(op, a, d, false);
  ApiNameScope scope(name);
  return copy_(a, out);
}
}  // namespace

Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype) { return scan_op(op_cumsum, a, dim, dtype); }
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype) { return scan_op(op_cumprod, a, dim, dtype); }
Tensor& cumsum_(Tensor& a, int64_t dim, std::optional<DType> dtype) { return scan_inplace(op_cumsum, "cumsum_", a, dim, dtype); }
Tensor& cumprod_(Tensor& a, int64_t dim, std::optional<DType> dtype) { return scan_inplace(op_cumprod, "cumprod_", a, dim, dtype); }

// --- flip, fliplr, flipud, roll --------------------------------------------------------------------------------
namespace {
// `dims` wrapped and distinct.
Tensor flip_impl(const Tensor& a, Dims dims) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const Attrs attrs = FlipAttrs{std::move(dims)};
  enqueue(op_flip, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_flip, inputs, outputs)->attrs = attrs;
  }
  return out;
}
}  // namespace

Tensor flip(const Tensor& a, IntSpan dims) {
  check_defined("flip", a);
  Dims wrapped;
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim("flip", dim, a.dim());
    DG_CHECK(std::find(wrapped.begin(), wrapped.end(), d) == wrapped.end(), Runtime, "[flip] dim ", d,
             " appears multiple times in the list of dims ", dims);
    wrapped.push_back(d);
  }
  if (a.dim() == 0) wrapped.clear();  // a 0-dim tensor accepts dim 0 and has nothing to reverse
  std::sort(wrapped.begin(), wrapped.end());
  return flip_impl(a, std::move(wrapped));
}

Tensor fliplr(const Tensor& a) {
  check_defined("fliplr", a);
  DG_CHECK(a.dim() >= 2, Runtime, "[fliplr] Input must be >= 2-d, got shape ", a.shape());
  return flip(a, Dims{1});
}

Tensor flipud(const Tensor& a) {
  check_defined("flipud", a);
  DG_CHECK(a.dim() >= 1, Runtime, "[flipud] Input must be >= 1-d, got shape ", a.shape());
  return flip(a, Dims{0});
}

Tensor roll(const Tensor& a, IntSpan shifts, IntSpan dims) {
  check_defined("roll", a);
  DG_CHECK(!shifts.empty(), Runtime, "[roll] `shifts` required");
  if (dims.empty()) {
    DG_CHECK(shifts.size() == 1, Runtime, "[roll] shifts and dimensions must align. shifts: ", shifts.size(),
             ", dims:0");
    return reshape(roll(flatten(a), shifts, Dims{0}), a.shape());
  }
  DG_CHECK(shifts.size() == dims.size(), Runtime, "[roll] shifts and dimensions must align. shifts: ",
           shifts.size(), ", dims:", dims.size());
  Tensor out = a;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim("roll", dims[k], a.dim());
    const int64_t size = a.dim() == 0 ? 1 : a.shape()[d];
    if (size == 0 || a.dim() == 0) continue;
    const int64_t shift = ((shifts[k] % size) + size) % size;
    if (shift == 0) continue;
    // The last `shift` elements first, then the rest: one cat per rolled dim.
    const Tensor pieces[2] = {narrow(out, d, size - shift, shift), narrow(out, d, 0, size - shift)};
    out = cat(pieces, d);
  }
  return out.impl() == a.impl() ? clone(a) : out;
}

}  // namespace dg
