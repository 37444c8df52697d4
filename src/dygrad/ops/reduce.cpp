// Reduction ops: validation, output shapes and backward formulas.
#include "dygrad/ops/reduce.h"

#include <algorithm>

#include "dygrad/backend/cpu/reduce.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/shape.h"

namespace dg {

namespace {
// The gradient of a reduction, broadcast back to the input shape.
Tensor expand_reduced_grad(const Tensor& g, const Node& n) {
  IntSpan in_shape = n.input_meta[0].shape;
  Dims keep_shape = reduced_shape(in_shape, n.attrs.ints, true);
  return expand(reshape(g, keep_shape), in_shape);
}
void sum_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = expand_reduced_grad(g[0], n); }

OpCost reduce_cost(const Task& t) {
  OpCost c;
  c.flops = double(t.inputs[0].numel());
  c.bytes = double(t.inputs[0].numel()) * double(t.inputs[0].itemsize()) +
            double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
}  // namespace

const OpDef op_sum("sum", FusionClass::Reduction, cpu::sum_kernel, sum_backward, reduce_cost);

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

Tensor sum(const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined("sum", a);
  Attrs attrs;
  attrs.ints = reduction_dims("sum", dims, a.dim());
  DType out_dtype = is_floating(a.dtype()) ? a.dtype() : DType::Int64;
  Tensor out = Tensor::empty(reduced_shape(a.shape(), attrs.ints, keepdim), out_dtype);
  enqueue(op_sum, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op_sum, inputs, outputs)->attrs = attrs;
  }
  return out;
}

Tensor mean(const Tensor& a, IntSpan dims, bool keepdim) {
  check_defined("mean", a);
  DG_CHECK(is_floating(a.dtype()), Runtime, "[mean] could not infer output dtype. Input dtype must be either a "
           "floating point or complex dtype. Got: ", dtype_name(a.dtype()));
  Dims rd = reduction_dims("mean", dims, a.dim());
  int64_t count = 1;
  for (int64_t d : rd) count *= a.shape()[d];
  return div(sum(a, rd, keepdim), Scalar(static_cast<double>(count)));
}

}  // namespace dg
