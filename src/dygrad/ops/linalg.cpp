// Linear algebra ops: two primitives, matmul over >= 2-D operands with broadcast batch dims (its OpDef, cost
// and backward are here; the kernel is backend/cpu/matmul.cpp) and addmm (beta * input + alpha * the product, in
// the same GEMM), and the compositions built on them (1-D promotion, mm, bmm, outer, linear, baddbmm, addbmm).
#include "dygrad/ops/linalg.h"

#include <climits>
#include <cstdlib>
#include <cstring>

#include "dygrad/autograd/saved_buffers.h"
#include "dygrad/ops/complex.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

namespace {
int64_t batch_numel(IntSpan shape) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) n *= shape[d];
  return n;
}
// t as [rows, last]: every dim but the last stacked (a reshape to {-1, last} is ambiguous when last is 0).
Tensor stacked_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  const int64_t shape[2] = {rows, t.size(-1)};
  return reshape(t, shape);
}

// out [..., M, N] = a [..., M, K] @ b [..., K, N], g = d loss / d out:
//   grad_a = g @ b^T, grad_b = a^T @ g, each summed over the batch dims its operand was broadcast along.
void matmul_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Tensor& grad = g[0];
  if (n.needs_grad(0)) gi[0] = sum_to(matmul(grad, transpose(n.saved(1), -1, -2)), n.input_meta[0].shape);
  if (n.needs_grad(1)) {
    const Tensor a = n.saved(0);
    IntSpan b_shape = n.input_meta[1].shape;
    if (batch_numel(b_shape) == 1 && grad.dim() > 2) {
      // b is shared by every batch (a linear layer): one GEMM over the stacked rows,
      // [K, batch * M] @ [batch * M, N], instead of a batched product summed afterwards.
      gi[1] = reshape(matmul(transpose(stacked_rows(a), 0, 1), stacked_rows(grad)), b_shape);
    } else {
      gi[1] = sum_to(matmul(transpose(a, -1, -2), grad), b_shape);
    }
  }
}

OpCost matmul_cost(const Task& t) {
  const Tensor& a = t.inputs[0];
  const Tensor& b = t.inputs[1];
  const Tensor& out = t.outputs[0];
  OpCost c;
  const double M = double(out.size(-2)), N = double(out.size(-1)), K = double(a.size(-1));
  c.flops = 2.0 * M * N * K * double(batch_numel(out.shape()));
  c.bytes = double(a.numel()) * double(a.itemsize()) + double(b.numel()) * double(b.itemsize()) +
            double(out.numel()) * double(out.itemsize());
  return c;
}
}  // namespace

// Scratch of the CPU kernel (backend/cpu/matmul.cpp), an upper bound from the shapes (a tile is at most the whole
// output, the batch folded into M: rows = batch * M): the per-batch offsets of A and B (and addmm's input), and per
// worker a buffer of its tile where the kernel needs one: float32 tiles whose A aliases in the caches (computed as
// C^T, [tile]: the weight gradient of a layer of 1024 outputs), the float32 blocks of 16-bit tiles (B [K, nb],
// A [mb, K], C [mb, nb] with mb <= 256 and nb <= 1024 when converted; C [tile] when bf16 takes oneDNN's GEMM: addmm,
// or DYGRAD_BF16_GEMM=gemm), a tile row of uint64 accumulators for integers. What the BLAS libraries allocate
// for themselves (oneDNN, OpenBLAS) is theirs, outside the Task's scratch.
size_t matmul_scratch_of(const Task& t, const Tensor& a, const Tensor& b, bool addmm) {
  const Tensor& out = t.outputs[0];
  const int64_t M = out.size(-2), N = out.size(-1), K = a.size(-1);
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < out.dim(); ++d) batch *= out.shape()[d];
  const int64_t rows = batch * M;
  int64_t per_worker = 0;  // float32 elements (uint64 for integers)
  size_t item = sizeof(float);
  if (out.dtype() == DType::Float32) {
    const BlasLayout lb = blas_layout(K, N, b.stride(-2), b.stride(-1));
    const bool aliased_a = a.stride(-1) != 1 && (a.stride(-1) * 4) % 4096 == 0 && K >= 256;
    if (!addmm && aliased_a && lb.ok && !lb.transposed) per_worker = rows * N;
  } else if (out.dtype() == DType::Float16 || out.dtype() == DType::BFloat16) {
    const int64_t mb = std::min<int64_t>(rows, 256), nb = std::min<int64_t>(N, 1024);
    per_worker = K * nb + mb * K + mb * nb;
    static const bool bf16_gemm = [] {
      const char* v = std::getenv("DYGRAD_BF16_GEMM");
      return v != nullptr && std::strcmp(v, "gemm") == 0;
    }();
    if (out.dtype() == DType::BFloat16 && (addmm || bf16_gemm)) per_worker = std::max(per_worker, rows * N);
  } else if (!is_floating(out.dtype())) {
    per_worker = N;
    item = sizeof(uint64_t);
  }
  if (out.numel() == 0 || K == 0) return 0;
  return (addmm ? 3 : 2) * scratch_bytes<int64_t>(batch) + per_worker_scratch_bytes(per_worker, item, batch * 64);
}
size_t matmul_scratch(const Task& t) { return matmul_scratch_of(t, t.inputs[0], t.inputs[1], false); }
const OpDef op_matmul("matmul", nullptr,
                      {.fusion = FusionClass::Matmul, .backward = matmul_backward, .cost = matmul_cost, .scratch = matmul_scratch});

namespace {
bool blas_readable(const Tensor& t) {
  return blas_layout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1)).ok;
}

// The shape of a [..., M, K] @ b [..., K, N]: the broadcast batch dims, then M, N.
Dims product_shape(const char* name, const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  DG_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, NotImplemented, "[", name, "] shapes ", a.shape(), " and ",
           b.shape(), ": matrix dims above 2^31 - 1 are not supported by the BLAS interface");
  Dims shape = broadcast_shapes(name, a.shape().subspan(0, static_cast<size_t>(a.dim() - 2)),
                                b.shape().subspan(0, static_cast<size_t>(b.dim() - 2)));
  shape.push_back(M);
  shape.push_back(N);
  return shape;
}

// The operands as the GEMM Task reads them: BLAS reads row- or column-major matrices in place; anything else
// (zero or general strides) is copied (float types only: the other dtypes have a strided kernel).
void blas_operands(const Tensor& a, const Tensor& b, Tensor& x, Tensor& y) {
  x = a;
  y = b;
  if (a.dtype() == DType::Float32 || a.dtype() == DType::Float64) {
    NoGradGuard no_grad;  // the node differentiates with respect to a and b themselves
    if (!blas_readable(x)) x = clone(x);
    if (!blas_readable(y)) y = clone(y);
  }
}

// The primitive: a [..., M, K] @ b [..., K, N] with a.dim(), b.dim() >= 2, shapes and dtypes already checked.
Tensor matmul_nd(const char* name, const Tensor& a, const Tensor& b) {
  const Dims shape = product_shape(name, a, b);
  Tensor x, y;
  blas_operands(a, b, x, y);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  enqueue(op_matmul, {x, y}, {out});
  if (needs_grad_any({a, b})) {
    Tensor inputs[2] = {a, b}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_matmul, inputs, outputs);
    node->save(node->needs_grad(1) ? a : Tensor());
    node->save(node->needs_grad(0) ? b : Tensor());
  }
  return out;
}

// torch.matmul's rules, with errors naming `name` (the op the user called).
Tensor matmul_impl(const char* name, const Tensor& a, const Tensor& b) {
  check_defined(name, a, "input");
  check_defined(name, b, "other");
  check_same_device(name, a, b);
  DG_CHECK(a.dim() >= 1 && b.dim() >= 1, Value, "[", name, "] both arguments need to be at least 1-D, got shapes ",
           a.shape(), " and ", b.shape());
  DG_CHECK(a.dtype() == b.dtype(), Type, "[", name, "] expected both operands to have the same dtype, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  DG_CHECK(a.dtype() != DType::Bool, NotImplemented, "[", name, "] not implemented for dtype bool");
  const int64_t k_a = a.size(-1), k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  DG_CHECK(k_a == k_b, Value, "[", name, "] shapes ", a.shape(), " and ", b.shape(), ": inner dimensions ", k_a,
           " and ", k_b, " differ");
  // complex64/complex128: four real products, (ar br - ai bi) + i (ar bi + ai br), composed of real ops on the parts'
  // views, so autograd follows torch's convention with no formula of its own (docs/dtypes.md, "Complex").
  if (is_complex(a.dtype())) [[unlikely]] {
    const Tensor ar = real(a), ai = imag(a), br = real(b), bi = imag(b);
    return complex(sub(matmul_impl(name, ar, br), matmul_impl(name, ai, bi)),
                   add(matmul_impl(name, ar, bi), matmul_impl(name, ai, br)));
  }
  // float8: torch's CPU has a kernel for two matrices only (mm, addmm); 1-D and batched operands reach the GEMM and
  // are refused there.
  if (storage_only::float8(a) && a.dim() == 2 && b.dim() == 2) [[unlikely]] return storage_only::mm(a, b);
  // A 1-D operand becomes a matrix (a row on the left, a column on the right) and its dim is removed after.
  const int64_t row[2] = {1, k_a}, column[2] = {k_b, 1};
  Tensor out = matmul_nd(name, a.dim() == 1 ? reshape(a, row) : a, b.dim() == 1 ? reshape(b, column) : b);
  if (a.dim() == 1 || b.dim() == 1) {
    Dims shape(out.shape());
    if (b.dim() == 1) shape.pop_back();
    if (a.dim() == 1) shape.erase(shape.size() - (b.dim() == 1 ? 1 : 2));
    out = reshape(out, shape);
  }
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul_impl("matmul", a, b); }

Tensor mm(const Tensor& a, const Tensor& b) {
  check_defined("mm", a, "input");
  check_defined("mm", b, "mat2");
  DG_CHECK(a.dim() == 2 && b.dim() == 2, Value, "[mm] expected 2-D tensors, got shapes ", a.shape(), " and ",
           b.shape());
  return matmul_impl("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_defined("bmm", a, "input");
  check_defined("bmm", b, "mat2");
  DG_CHECK(a.dim() == 3 && b.dim() == 3, Value, "[bmm] expected 3-D tensors, got shapes ", a.shape(), " and ",
           b.shape());
  DG_CHECK(a.size(0) == b.size(0), Value, "[bmm] shapes ", a.shape(), " and ", b.shape(), ": batch sizes ",
           a.size(0), " and ", b.size(0), " differ");
  return matmul_impl("bmm", a, b);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  check_defined("outer", a, "input");
  check_defined("outer", b, "vec2");
  DG_CHECK(a.dim() == 1 && b.dim() == 1, Value, "[outer] expected 1-D tensors, got shapes ", a.shape(), " and ",
           b.shape());
  // An elementwise product of a column and a row: exact, and differentiable through mul.
  const int64_t column[2] = {a.size(0), 1}, row[2] = {1, b.size(0)};
  return mul(reshape(a, column), reshape(b, row));
}

namespace {
// out [..., N] = x [..., K] @ weight [N, K]^T, g = d loss / d out [..., N]:
//   grad_x = g @ weight [..., K];  grad_weight = g^T @ x over the stacked rows [N, K].

void linear_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Tensor& grad = g[0];
  Tensor x;
  if (n.needs_grad(1)) {  // first: it reads x, whose memory grad_x may take below
    x = n.saved(0);
    gi[1] = matmul(transpose(stacked_rows(grad), 0, 1), stacked_rows(x));
  }
  if (!n.needs_grad(0)) return;
  const Tensor weight = n.saved(1);
  if (x.defined() && !grad_enabled() && grad.dtype() == x.dtype() && weight.dtype() == x.dtype() &&
      grad.dim() == x.dim() && blas_readable(grad) && blas_readable(weight)) {
    // x's memory may take grad_x (autograd/saved_buffers.h); a rematerialized x (a norm's output recomputed,
    // autograd/node.h) is the formula's alone.
    const Tensor into = reuse_saved_buffer(x, n.holds_saved(0));
    if (into.defined()) {  // grad_x = grad @ weight into x's memory (x has grad_x's shape [..., K])
      x = Tensor();
      enqueue(op_matmul, {grad, weight}, {into});
      gi[0] = into;
      return;
    }
  }
  gi[0] = matmul(grad, weight);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined("linear", x, "input");
  check_defined("linear", weight, "weight");
  DG_CHECK(weight.dim() == 1 || weight.dim() == 2, Value, "[linear] weight must be 1-D or 2-D, got shape ",
           weight.shape());
  DG_CHECK(x.dim() >= 1, Value, "[linear] input must be at least 1-D, got shape ", x.shape());
  DG_CHECK(x.size(-1) == weight.size(-1), Value, "[linear] input of shape ", x.shape(), " and weight of shape ",
           weight.shape(), ": in_features ", x.size(-1), " and ", weight.size(-1), " differ");
  if (weight.dim() == 2 && x.dim() >= 2 && needs_grad_any({weight})) {
    // Its own backward, so that the weight's gradient is one GEMM g^T @ x written in the weight's layout
    // [out, in]: a fresh contiguous buffer the engine can take as .grad without a copy (docs/autograd.md).
    Tensor out;
    {
      NoGradGuard no_grad;
      out = matmul_impl("linear", x, t(weight));
    }
    Ref<Node> node = make_ref<Node>(std::string("linear"), linear_backward, 1);
    Tensor inputs[2] = {x, weight}, outputs[1] = {out};
    record_node(node, inputs, outputs);
    node->save(node->needs_grad(1) ? x : Tensor());
    node->save(node->needs_grad(0) ? weight : Tensor());
    if (!bias.defined()) return out;
    const int64_t out_features = weight.size(0);
    DG_CHECK(bias.numel() == out_features && bias.dim() <= 1, Value, "[linear] bias of shape ", bias.shape(),
             " does not match out_features ", out_features, " of weight ", weight.shape());
    return add(out, bias);
  }
  Tensor out = matmul_impl("linear", x, t(weight));  // weight^T is a view: BLAS reads it transposed in place
  if (!bias.defined()) return out;
  const int64_t out_features = weight.dim() == 2 ? weight.size(0) : 1;
  DG_CHECK(bias.numel() == out_features && bias.dim() <= 1, Value, "[linear] bias of shape ", bias.shape(),
           " does not match out_features ", out_features, " of weight ", weight.shape());
  return add(out, weight.dim() == 2 ? bias : reshape(bias, IntSpan()));
}

// --- addmm, baddbmm, addbmm: beta * input + alpha * (a product), one GEMM Task -------------------------------
namespace {
// out [..., M, N] = beta * input + alpha * a [..., M, K] @ b [..., K, N]; saved: a, b. g = d loss / d out:
//   grad_input = beta * g (summed to input's shape), grad_a = alpha * g @ b^T, grad_b = alpha * a^T @ g,
//   each summed over the batch dims its operand was broadcast along.
void addmm_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const AddmmAttrs& attrs = n.attrs.get<AddmmAttrs>();
  const Tensor& grad = g[0];
  const bool unit_alpha = attrs.alpha.to_double() == 1;
  if (n.needs_grad(0))
    gi[0] = sum_to(attrs.beta.to_double() == 1 ? grad : mul(grad, attrs.beta), n.input_meta[0].shape);
  if (n.needs_grad(1)) {
    const Tensor product = matmul(grad, transpose(n.saved(1), -1, -2));
    gi[1] = sum_to(unit_alpha ? product : mul(product, attrs.alpha), n.input_meta[1].shape);
  }
  if (n.needs_grad(2)) {
    const Tensor product = matmul(transpose(n.saved(0), -1, -2), grad);
    gi[2] = sum_to(unit_alpha ? product : mul(product, attrs.alpha), n.input_meta[2].shape);
  }
}

OpCost addmm_cost(const Task& t) {
  const Tensor& a = t.inputs[1];
  const Tensor& out = t.outputs[0];
  OpCost c;
  const double M = double(out.size(-2)), N = double(out.size(-1)), K = double(a.size(-1));
  c.flops = 2.0 * M * N * K * double(batch_numel(out.shape())) + 2.0 * double(out.numel());
  for (const Tensor& x : t.inputs) c.bytes += double(x.numel()) * double(x.itemsize());
  c.bytes += double(out.numel()) * double(out.itemsize());
  return c;
}
// The kernel is matmul's (backend/cpu/matmul.cpp) with the input read into each output tile: the same scratch.
size_t addmm_scratch(const Task& t) { return matmul_scratch_of(t, t.inputs[1], t.inputs[2], true); }
}  // namespace
const OpDef op_addmm("addmm", attrs_type<AddmmAttrs>(),
                     {.fusion = FusionClass::Matmul, .backward = addmm_backward, .cost = addmm_cost, .scratch = addmm_scratch});

namespace {
// The addmm Task: a [..., M, K], b [..., K, N] (>= 2-D, shapes checked by the caller), input broadcast to the
// product's shape [batch..., M, N] (not beyond it, as torch).
Tensor addmm_nd(const char* name, const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  check_defined(name, input, "input");
  check_same_device(name, input, a);
  check_same_device(name, a, b);
  DG_CHECK(input.dtype() == a.dtype() && a.dtype() == b.dtype(), Runtime, "[", name, "] expected input and the "
           "matrices to have the same dtype, but got ", dtype_name(input.dtype()), ", ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()));
  DG_CHECK(a.dtype() != DType::Bool, NotImplemented, "[", name, "] not implemented for dtype bool");
  const Dims shape = product_shape(name, a, b);
  const Dims joint = broadcast_shapes(name, input.shape(), shape);
  DG_CHECK(same_shape(joint, shape), Runtime, "[", name, "] input of shape ", input.shape(), " does not broadcast to "
           "the product's shape ", IntSpan(shape));
  Tensor x, y;
  blas_operands(a, b, x, y);
  const Tensor base = detach(broadcast_to(input, shape));
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Attrs attrs = AddmmAttrs{beta, alpha};
  enqueue(op_addmm, {base, x, y}, {out}, attrs);
  if (needs_grad_any({input, a, b})) {
    Tensor inputs[3] = {input, a, b}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_addmm, inputs, outputs);
    node->attrs = attrs;
    node->save(node->needs_grad(2) ? a : Tensor());
    node->save(node->needs_grad(1) ? b : Tensor());
  }
  return out;
}
}  // namespace

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  check_defined("addmm", mat1, "mat1");
  check_defined("addmm", mat2, "mat2");
  DG_CHECK(mat1.dim() == 2 && mat2.dim() == 2, Runtime, "[addmm] mat1 and mat2 must be matrices, got shapes ",
           mat1.shape(), " and ", mat2.shape());
  if (storage_only::float8(mat1) && input.defined() && input.dtype() == mat1.dtype() && mat2.dtype() == mat1.dtype())
    [[unlikely]] return storage_only::addmm(input, mat1, mat2, beta, alpha);
  DG_CHECK(mat1.size(1) == mat2.size(0), Runtime, "[addmm] mat1 and mat2 shapes cannot be multiplied (",
           mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  return addmm_nd("addmm", input, mat1, mat2, beta, alpha);
}

Tensor& addmm_(Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  check_defined("addmm_", self, "self");
  const Tensor result = addmm(self, mat1, mat2, beta, alpha);
  DG_CHECK(same_shape(result.shape(), self.shape()), Runtime, "[addmm_] the result of shape ", result.shape(),
           " does not fit self of shape ", self.shape());
  return copy_(self, result);
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta, Scalar alpha) {
  check_defined("baddbmm", batch1, "batch1");
  check_defined("baddbmm", batch2, "batch2");
  DG_CHECK(batch1.dim() == 3 && batch2.dim() == 3, Runtime, "[baddbmm] batch1 and batch2 must be 3-D tensors, got "
           "shapes ", batch1.shape(), " and ", batch2.shape());
  DG_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1), Runtime, "[baddbmm] batch1 ",
           batch1.shape(), " and batch2 ", batch2.shape(), " cannot be multiplied");
  return addmm_nd("baddbmm", input, batch1, batch2, beta, alpha);
}

// sum_b batch1[b] @ batch2[b] is one GEMM: [M, B * K] (batch1 permuted to [M, B, K]) @ [B * K, N].
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta, Scalar alpha) {
  check_defined("addbmm", batch1, "batch1");
  check_defined("addbmm", batch2, "batch2");
  DG_CHECK(batch1.dim() == 3 && batch2.dim() == 3, Runtime, "[addbmm] batch1 and batch2 must be 3-D tensors, got "
           "shapes ", batch1.shape(), " and ", batch2.shape());
  DG_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1), Runtime, "[addbmm] batch1 ",
           batch1.shape(), " and batch2 ", batch2.shape(), " cannot be multiplied");
  const int64_t B = batch1.size(0), M = batch1.size(1), K = batch1.size(2), N = batch2.size(2);
  const int64_t order[3] = {1, 0, 2}, left[2] = {M, B * K}, right[2] = {B * K, N};
  return addmm_nd("addbmm", input, reshape(permute(batch1, order), left), reshape(batch2, right), beta, alpha);
}

}  // namespace dg
