// Reduction ops (sum, mean, extrema, logsumexp, var/std): validation, output shapes, Tasks and backward
// formulas.
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/complex.h"

#include <algorithm>
#include <cmath>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

namespace {
// The reduced dims a reduction's node recorded (ReduceAttrs, or VarianceAttrs for var and std).
const Dims& reduce_dims(const Node& n) {
  if (n.attrs.type() == attrs_type<VarianceAttrs>()) return n.attrs.get<VarianceAttrs>().dims;
  return n.attrs.get<ReduceAttrs>().dims;
}
// The gradient of a reduction, broadcast back to the input shape.
Tensor expand_reduced_grad(const Tensor& g, const Node& n) {
  IntSpan in_shape = n.input_meta[0].shape;
  Dims keep_shape = reduced_shape(in_shape, reduce_dims(n), true);
  return expand(reshape(g, keep_shape), in_shape);
}
void sum_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = expand_reduced_grad(g[0], n); }

// A reduced tensor (output or its gradient) in the keepdim shape, contiguous, as backward kernels read it.
Tensor keepdim_contiguous(const Tensor& t, const Node& n) {
  return contiguous(reshape(t, reduced_shape(n.input_meta[0].shape, reduce_dims(n), true)));
}
// Runs a backward kernel: inputs (...) -> a gradient of the input's shape and dtype.
Tensor run_backward_kernel(const OpDef& op, const Node& n, std::initializer_list<Tensor> inputs) {
  Tensor grad = Tensor::empty(n.input_meta[0].shape, n.input_meta[0].dtype, n.input_meta[0].device);
  enqueue(op, inputs, {grad}, n.attrs);
  return grad;
}
void amax_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
void max_dim_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
void logsumexp_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
void var_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
void std_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);

OpCost reduce_cost(const Task& t) {
  OpCost c;
  c.flops = double(t.inputs[0].numel());
  c.bytes = double(t.inputs[0].numel()) * double(t.inputs[0].itemsize()) +
            double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
}  // namespace

// Scratch of the CPU kernels (backend/cpu/reduce.cpp, reduce_minmax.cpp): a reduction to one output keeps one
// partial per kFullReduceChunk elements (an accumulator of at most 16 bytes: a value and an index for the
// extrema); logsumexp keeps each output's maximum, var and std each output's mean (float64).
size_t full_reduce_partials(const Task& t, size_t accumulator_bytes) {
  if (t.outputs[0].numel() != 1) return 0;
  return scratch_bytes((t.inputs[0].numel() + kFullReduceChunk - 1) / kFullReduceChunk, accumulator_bytes);
}
size_t sum_scratch(const Task& t) { return full_reduce_partials(t, sizeof(int64_t)); }
size_t extremum_scratch(const Task& t) { return full_reduce_partials(t, 2 * sizeof(int64_t)); }
size_t logsumexp_scratch(const Task& t) {
  const size_t item = compute_itemsize(t.inputs[0].dtype());
  return scratch_bytes(t.outputs[0].numel(), item) + full_reduce_partials(t, item);
}
size_t variance_scratch(const Task& t) {
  return scratch_bytes(t.outputs[0].numel(), sizeof(double)) + full_reduce_partials(t, sizeof(double));
}
const OpDef op_sum("sum", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = sum_backward, .cost = reduce_cost, .scratch = sum_scratch});
const OpDef op_amax("amax", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = amax_backward, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_amin("amin", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = amax_backward, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_max_dim("max_dim", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = max_dim_backward, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_min_dim("min_dim", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = max_dim_backward, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_argmax("argmax", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_argmin("argmin", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .cost = reduce_cost, .scratch = extremum_scratch});
const OpDef op_logsumexp("logsumexp", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = logsumexp_backward, .cost = reduce_cost, .scratch = logsumexp_scratch});
const OpDef op_var("var", attrs_type<VarianceAttrs>(), {.fusion = FusionClass::Reduction, .backward = var_backward, .cost = reduce_cost, .scratch = variance_scratch});
const OpDef op_std("std", attrs_type<VarianceAttrs>(), {.fusion = FusionClass::Reduction, .backward = std_backward, .cost = reduce_cost, .scratch = variance_scratch});
// Backward kernels, not differentiable themselves: under create_graph the formulas compose ops instead.
const OpDef op_extremum_backward("extremum_backward", attrs_type<ReduceAttrs>());
const OpDef op_extremum_index_backward("extremum_index_backward", attrs_type<ReduceAttrs>());
const OpDef op_logsumexp_backward("logsumexp_backward", attrs_type<ReduceAttrs>());

namespace {
// The backward kernels below are not differentiable: while backward records a graph (create_graph, grad mode
// on), each formula takes instead a composed path of differentiable ops giving the same values, so that the
// gradient is differentiable again (docs/autograd.md, "Double backward").
Tensor keepdim_view(const Tensor& t, const Node& n) {
  return reshape(t, reduced_shape(n.input_meta[0].shape, reduce_dims(n), true));
}
// amax/amin, max()/min(): g / (number of ties) to every element equal to the result. Saved: a, out.
void amax_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (grad_enabled()) {
    Tensor a = n.saved(0);
    Tensor ties = to(eq(a, keepdim_view(n.saved(1), n)), a.dtype());
    gi[0] = mul(ties, div(keepdim_view(g[0], n), sum(ties, reduce_dims(n), true)));
    return;
  }
  gi[0] = run_backward_kernel(op_extremum_backward, n,
                              {n.saved(0), keepdim_contiguous(n.saved(1), n), keepdim_contiguous(g[0], n)});
}
// max/min over a dim: the gradient goes to the selected index only (torch's value-selecting backward). Saved:
// the indices. Composed: g scattered into zeros at the indices (scatter is differentiable in its source).
void max_dim_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (grad_enabled()) {
    const Dims& dims = reduce_dims(n);
    if (dims.empty()) return void(gi[0] = reshape(g[0], n.input_meta[0].shape));  // a 0-dim input
    Tensor zero = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = g[0].device()});
    gi[0] = scatter(zero, dims[0], keepdim_view(n.saved(0), n), keepdim_view(g[0], n));
    return;
  }
  gi[0] = run_backward_kernel(op_extremum_index_backward, n, {keepdim_contiguous(g[0], n), keepdim_contiguous(n.saved(0), n)});
}
// d logsumexp / d a = exp(a - logsumexp). Saved: a, out.
void logsumexp_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (grad_enabled()) {
    Tensor a = n.saved(0);
    gi[0] = mul(keepdim_view(g[0], n), exp(sub(a, keepdim_view(n.saved_output(1), n))));
    return;
  }
  gi[0] = run_backward_kernel(op_logsumexp_backward, n,
                              {n.saved(0), keepdim_contiguous(n.saved(1), n), keepdim_contiguous(g[0], n)});
}
// The divisor max(N - correction, 0) of var/std over the node's dims.
double var_divisor(const Node& n) {
  double count = 1;
  for (int64_t d : reduce_dims(n)) count *= static_cast<double>(n.input_meta[0].shape[static_cast<size_t>(d)]);
  return std::max(count - n.attrs.get<VarianceAttrs>().correction, 0.0);
}
// d var / d a = 2 (a - mean) / divisor; composed of dygrad ops, so it is differentiable again.
void var_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor a = n.saved(0);
  Tensor centered = sub(a, mean(a, reduce_dims(n), true));
  gi[0] = mul(centered, mul(reshape(g[0], reduced_shape(a.shape(), reduce_dims(n), true)), 2.0 / var_divisor(n)));
}
// d std / d a = (a - mean) / (divisor * std).
void std_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor a = n.saved(0);
  Dims keep = reduced_shape(a.shape(), reduce_dims(n), true);
  Tensor centered = sub(a, mean(a, reduce_dims(n), true));
  gi[0] = mul(centered, div(reshape(g[0], keep), mul(reshape(n.saved_output(1), keep), var_divisor(n))));
}
}  // namespace

Dims reduction_dims(const char* op, IntSpan dims, int64_t ndim) {
  Dims out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(ndim == 0 ? (wrap_dim(op, d, 0), 0) : wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    DG_CHECK(out[i] != out[i - 1] || ndim == 0, Runtime, "[", op, "] dim ", out[i], " appears multiple times in the list of dims");
  if (ndim == 0) out.clear();
  return out;
}

Dims reduced_shape(IntSpan shape, IntSpan dims, bool keepdim) {
  Dims out;
  size_t k = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (k < dims.size() && dims[k] == d) {
      ++k;
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(shape[d]);
    }
  }
  return out;
}

namespace {
// Enqueues `op` reducing x over attrs.dims into a new tensor of `dtype` and records its node; the node saves
// the input and the output when its backward formula needs them.
Tensor reduce_to_new(const OpDef& op, const Tensor& x, const ReduceAttrs& attrs, bool keepdim, DType dtype,
                     bool save_input_and_output) {
  Tensor out = Tensor::empty(reduced_shape(x.shape(), attrs.dims, keepdim), dtype, x.device());
  enqueue(op, {x}, {out}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    if (save_input_and_output) {
      node->save(x);
      node->save(detach(out));
    }
  }
  return out;
}
}  // namespace

Tensor sum(const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined("sum", a);
  if (storage_only::wide_unsigned(a)) [[unlikely]] return storage_only::sum(a, dims, keepdim);
  if (is_complex(a.dtype())) [[unlikely]] return complex_sum(a, dims, keepdim, false);
  ReduceAttrs attrs;
  attrs.dims = reduction_dims("sum", dims, a.dim());
  return reduce_to_new(op_sum, a, attrs, keepdim, is_floating(a.dtype()) ? a.dtype() : DType::Int64, false);
}

Tensor mean(const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined("mean", a);
  if (is_complex(a.dtype())) [[unlikely]] return complex_sum(a, dims, keepdim, true);
  DG_CHECK(is_floating(a.dtype()), Runtime, "[mean] could not infer output dtype. Input dtype must be either a "
           "floating point or complex dtype. Got: ", dtype_name(a.dtype()));
  Dims rd = reduction_dims("mean", dims, a.dim());
  int64_t count = 1;
  for (int64_t d : rd) count *= a.shape()[d];
  return div(sum(a, rd, keepdim), Scalar(static_cast<double>(count)));
}

// --- extrema ------------------------------------------------------------------------------------------------
namespace {
// Raises, as torch does, when a reduction over dims `rd` of an empty tensor has no element to pick.
void check_nonempty_reduction(const char* op, const Tensor& a, IntSpan rd) {
  if (a.numel() != 0) return;
  for (int64_t d : rd)
    DG_CHECK(a.shape()[d] != 0, Index, "[", op, "] Expected reduction dim ", d, " to have non-zero size; input shape ",
             a.shape());
}
void check_full_reduction_nonempty(const char* op, const Tensor& a) {
  DG_CHECK(a.numel() != 0, Runtime, "[", op, "] Expected reduction dim to be specified for input.numel() == 0. "
           "Specify the reduction dim with the 'dim' argument; input shape ", a.shape());
}

// amax/amin: values over any dims.
Tensor extremum(const OpDef& op, const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined(op.name, a);
  ReduceAttrs attrs;
  attrs.dims = reduction_dims(op.name, dims, a.dim());
  check_nonempty_reduction(op.name, a, attrs.dims);
  return reduce_to_new(op, a, attrs, keepdim, a.dtype(), true);
}

// max/min over one dim: values and indices.
ValuesIndices extremum_dim(const OpDef& op, const char* name, const Tensor& a, int64_t dim, bool keepdim) {
  check_defined(name, a);
  ReduceAttrs attrs;
  const int64_t d = wrap_dim(name, dim, a.dim());
  attrs.dims = reduction_dims(name, IntSpan(&d, 1), a.dim());
  check_nonempty_reduction(name, a, attrs.dims);
  return enqueue_values_indices(op, a, reduced_shape(a.shape(), attrs.dims, keepdim), attrs);
}

Tensor arg_extremum(const OpDef& op, const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  check_defined(op.name, a);
  ReduceAttrs attrs;
  Dims shape;
  if (dim) {
    const int64_t d = wrap_dim(op.name, *dim, a.dim());
    attrs.dims = reduction_dims(op.name, IntSpan(&d, 1), a.dim());
    check_nonempty_reduction(op.name, a, attrs.dims);
    shape = reduced_shape(a.shape(), attrs.dims, keepdim);
  } else {
    check_full_reduction_nonempty(op.name, a);
    attrs.dims = reduction_dims(op.name, {}, a.dim());
    shape = keepdim ? Dims(static_cast<size_t>(a.dim()), 1) : Dims();
  }
  Tensor out = Tensor::empty(shape, DType::Int64, a.device());
  enqueue(op, {a}, {out}, attrs);
  return out;
}
}  // namespace

ValuesIndices max(const Tensor& a, int64_t dim, bool keepdim) { return extremum_dim(op_max_dim, "max", a, dim, keepdim); }
ValuesIndices min(const Tensor& a, int64_t dim, bool keepdim) { return extremum_dim(op_min_dim, "min", a, dim, keepdim); }
Tensor max(const Tensor& a) {
  check_defined("max", a);
  check_full_reduction_nonempty("max", a);
  return extremum(op_amax, a, {}, false);
}
Tensor min(const Tensor& a) {
  check_defined("min", a);
  check_full_reduction_nonempty("min", a);
  return extremum(op_amin, a, {}, false);
}
namespace {
// all / any count the zeros / nonzeros (a sum of bools, exact in int64, zero over nothing) and compare.
Tensor truth_reduction(const char* name, const Tensor& a, IntSpan dims, bool keepdim, bool every) {
  check_defined(name, a);
  const Dims over = reduction_dims(name, dims, a.dim());  // raises naming the op
  NoGradGuard no_grad;  // a bool result: nothing to differentiate
  Tensor count = sum(every ? eq(a, Scalar(0)) : ne(a, Scalar(0)), over, keepdim);
  Tensor out = every ? eq(count, Scalar(0)) : ne(count, Scalar(0));
  return a.dtype() == DType::UInt8 ? to(out, DType::UInt8) : out;
}
}  // namespace
Tensor all(const Tensor& a, IntSpan dims, bool keepdim) { return truth_reduction("all", a, dims, keepdim, true); }
Tensor any(const Tensor& a, IntSpan dims, bool keepdim) { return truth_reduction("any", a, dims, keepdim, false); }

Tensor amax(const Tensor& a, IntSpan dims, bool keepdim) { return extremum(op_amax, a, dims, keepdim); }
Tensor amin(const Tensor& a, IntSpan dims, bool keepdim) { return extremum(op_amin, a, dims, keepdim); }
Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_extremum(op_argmax, a, dim, keepdim); }
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) { return arg_extremum(op_argmin, a, dim, keepdim); }

// --- logsumexp, var, std -------------------------------------------------------------------------------------
Tensor logsumexp(const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined("logsumexp", a);
  Tensor x = is_floating(a.dtype()) ? a : to(a, DType::Float32);
  ReduceAttrs attrs;
  attrs.dims = reduction_dims("logsumexp", dims, x.dim());
  return reduce_to_new(op_logsumexp, x, attrs, keepdim, x.dtype(), true);
}

namespace {
Tensor variance(const OpDef& op, const Tensor& a, IntSpan dims, double correction, bool keepdim, bool standard_deviation) {
  check_defined(op.name, a);
  DG_CHECK(is_floating(a.dtype()), Type, "[", op.name, "] std and var only support floating point dtypes, got ",
           dtype_name(a.dtype()));
  DG_CHECK(std::isfinite(correction), Value, "[", op.name, "] correction must be finite, got ", correction);
  VarianceAttrs attrs{reduction_dims(op.name, dims, a.dim()), correction, standard_deviation};
  Tensor out = Tensor::empty(reduced_shape(a.shape(), attrs.dims, keepdim), a.dtype(), a.device());
  enqueue(op, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    node->save(a);
    if (standard_deviation) node->save(detach(out));
  }
  return out;
}
}  // namespace

Tensor var(const Tensor& a, IntSpan dims, double correction, bool keepdim) {
  return variance(op_var, a, dims, correction, keepdim, false);
}
Tensor std_dev(const Tensor& a, IntSpan dims, double correction, bool keepdim) {
  return variance(op_std, a, dims, correction, keepdim, true);
}

// ops/dispatch.h: shared by max/min over a dim, sort and topk.
ValuesIndices enqueue_values_indices(const OpDef& op, const Tensor& a, IntSpan shape, const Attrs& attrs) {
  ValuesIndices out{Tensor::empty(shape, a.dtype(), a.device()), Tensor::empty(shape, DType::Int64, a.device())};
  enqueue(op, {a}, {out.values, out.indices}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out.values};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    node->save(out.indices);
  }
  return out;
}

}  // namespace dg
