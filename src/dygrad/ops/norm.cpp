// Vector norms (torch.linalg.vector_norm, and torch.norm's vector cases): compositions of reductions. ord 2 and
// general ord compute the forward without a graph and record one node whose backward is torch's formula
// (aten/src/ATen/native/.../FunctionsManual.cpp norm_backward), so the gradient at a zero norm is 0, not nan;
// ord 1, inf and -inf differentiate through abs / sum / amax / amin; ord 0 (a count) has zero gradient.
#include <cmath>
#include <limits>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/linalg.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"

namespace dg {

namespace {
// The norm node's attributes: the order and the reduced dims (sorted, wrapped), and whether they were kept.
struct VectorNormAttrs {
  static constexpr const char* kName = "VectorNormAttrs";
  double ord = 2;
  Dims dims;
  bool keepdim = false;
  DG_ATTRS_FIELDS(ord, dims, keepdim);
};

// inputs (x); saved: x, norm (detached). g and norm are unsqueezed back to x's rank when the dims were dropped:
//   ord 2:        x * (g / norm), 0 where norm == 0
//   ord >= 1:     x |x|^(ord - 2) (0 where x == 0) * (g / norm^(ord - 1)), 0 where norm == 0
//   0 < ord < 1:  x |x|^(ord - 2) (0 where x == 0) * g * norm^(1 - ord)
void vector_norm_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const VectorNormAttrs& attrs = n.attrs.get<VectorNormAttrs>();
  const Tensor x = n.saved(0);
  Tensor norm = n.saved_output(1), grad = g[0];
  if (!attrs.keepdim) {
    for (int64_t d : attrs.dims) {
      norm = unsqueeze(norm, d);
      grad = unsqueeze(grad, d);
    }
  }
  const Tensor zero_norm = eq(norm, Scalar(0.0));
  if (attrs.ord == 2) {
    gi[0] = mul(x, masked_fill(div(grad, norm), zero_norm, 0.0));
    return;
  }
  const Tensor scaled = masked_fill(mul(x, pow(abs(x), attrs.ord - 2)), eq(x, Scalar(0.0)), 0.0);
  if (attrs.ord < 1) {
    gi[0] = mul(scaled, mul(grad, pow(norm, 1 - attrs.ord)));
    return;
  }
  gi[0] = mul(scaled, masked_fill(div(grad, pow(norm, attrs.ord - 1)), zero_norm, 0.0));
}
}  // namespace

Tensor vector_norm(const Tensor& x_in, double ord, IntSpan dim, bool keepdim, std::optional<DType> dtype) {
  check_defined("linalg.vector_norm", x_in, "x");
  DG_CHECK(is_floating(x_in.dtype()), Runtime, "[linalg.vector_norm] expected a floating point tensor as input, "
           "got ", dtype_name(x_in.dtype()));
  if (dtype) DG_CHECK(is_floating(*dtype), Runtime, "[linalg.vector_norm] dtype must be a floating dtype, got ",
                      dtype_name(*dtype));
  const Tensor x = dtype ? to(x_in, *dtype) : x_in;
  const Dims dims = reduction_dims("linalg.vector_norm", dim, x.dim());
  const bool infinite = std::isinf(ord);
  if (infinite) {
    DG_CHECK(x.numel() > 0, Runtime, "[linalg.vector_norm] cannot compute the ", ord > 0 ? "inf" : "-inf",
             " norm on an empty tensor because the operation does not have an identity");
    return ord > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  }
  if (ord == 1) return sum(abs(x), dims, keepdim);
  if (ord == 0) {
    NoGradGuard no_grad;  // a count: its gradient is zero everywhere
    return to(sum(ne(x, Scalar(0.0)), dims, keepdim), x.dtype());
  }
  // 16-bit inputs are reduced in float32 and rounded once.
  const DType compute = itemsize(x.dtype()) == 2 ? DType::Float32 : x.dtype();
  Tensor norm;
  {
    NoGradGuard no_grad;
    const Tensor xc = to(x, compute);
    norm = ord == 2 ? sqrt(sum(mul(xc, xc), dims, keepdim))
                    : pow(sum(pow(abs(xc), ord), dims, keepdim), 1.0 / ord);
    norm = to(norm, x.dtype());
  }
  if (needs_grad_any({x})) {
    Ref<Node> node = make_ref<Node>(std::string("linalg_vector_norm"), vector_norm_backward, 1);
    node->attrs = VectorNormAttrs{ord, dims, keepdim};
    Tensor inputs[1] = {x}, outputs[1] = {norm};
    record_node(node, inputs, outputs);
    node->save(x);
    node->save(detach(norm));
  }
  return norm;
}

}  // namespace dg
