// scaled_dot_product_attention (PyTorch's signature), flash-style: validation, the Task, and the backward
// that recomputes probabilities from the saved log-sum-exp. Kernels: backend/cpu/fused_attention.cpp.
#include <cmath>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/fused.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

namespace {
constexpr const char* kName = "scaled_dot_product_attention";

// saved: query, key, value, out (detached), lse, mask expanded to [..., T, S] (or undefined).
void attention_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);

// flops: QK^T and PV forward (2 GEMMs), 5 GEMMs backward; causal halves them.
double attention_flops(const Task& t, int gemms) {
  const Tensor& q = t.inputs[gemms == 2 ? 0 : 1];
  const Tensor& v = t.inputs[gemms == 2 ? 2 : 3];
  const double rows = double(q.numel()) / double(std::max<int64_t>(q.shape()[q.dim() - 1], 1));
  const double keys = double(v.shape()[v.dim() - 2]);
  const double flops = 2.0 * rows * keys * double(q.shape()[q.dim() - 1]) * gemms;
  return t.attrs.get<AttentionAttrs>().is_causal ? flops / 2 : flops;
}
OpCost attention_cost(const Task& t) {
  double bytes = 0;
  for (const Tensor& x : t.inputs) bytes += double(x.numel()) * double(x.itemsize());
  for (const Tensor& x : t.outputs) bytes += double(x.numel()) * double(x.itemsize());
  return {attention_flops(t, 2), bytes};
}
OpCost attention_backward_cost(const Task& t) {
  double bytes = 0;
  for (const Tensor& x : t.inputs) bytes += double(x.numel()) * double(x.itemsize());
  for (const Tensor& x : t.outputs) bytes += double(x.numel()) * double(x.itemsize());
  return {attention_flops(t, 5), bytes};
}
}  // namespace

// Scratch of the CPU kernels (backend/cpu/fused_attention.cpp), in the compute type, with Bq = kAttentionQueryBlock,
// Bk = kAttentionKeyBlock query and key rows per tile, N batch-heads, q[N, T, D], k[N, S, D], v[N, S, Dv].
// Forward: K^T of every batch-head [N, D, S], then per pool thread either one packed K [S, D] or one query
// block's packed Q [Bq, D] and V tile [Bk, Dv], scores [Bq, Bk], accumulator [Bq, Dv] and row max and sum.
// Backward, per pool thread (one batch-head each): 16-bit accumulators for dQ, dK, dV, Dr [T], packed Q, dO,
// K and V tiles, K^T and V^T tiles [D, Bk], [Dv, Bk], and P, dP [Bq, Bk].
size_t attention_scratch_of(const Task& t, bool forward) {
  const Tensor& q = t.inputs[forward ? 0 : 1];
  const Tensor& v = t.inputs[forward ? 2 : 3];
  const int64_t T = q.shape()[q.dim() - 2], D = q.shape()[q.dim() - 1], S = v.shape()[v.dim() - 2], Dv = v.shape()[v.dim() - 1];
  int64_t batch = 1;
  for (int64_t d = 0; d < q.dim() - 2; ++d) batch *= q.shape()[d];
  const int64_t bq = std::min(kAttentionQueryBlock, T), bk = std::min(kAttentionKeyBlock, S);
  auto at_least_1 = [](int64_t n) { return std::max<int64_t>(n, 1); };
  int64_t elements;
  if (forward) {
    const int64_t query_blocks = (T + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
    const int64_t pack_keys = int64_t(scratch_workers(batch)) * at_least_1(S * D);
    const int64_t per_block = at_least_1(bq * D) + at_least_1(bk * Dv) + bq * kAttentionKeyBlock + bq * Dv + 2 * bq;
    elements = at_least_1(batch * D * S) + std::max(pack_keys, int64_t(scratch_workers(batch * query_blocks)) * per_block);
  } else {
    const int64_t accumulators = q.dtype() == DType::Float32 || q.dtype() == DType::Float64 ? 0 : T * D + S * D + S * Dv;
    const int64_t per_head = accumulators + T + at_least_1(bq * D) + at_least_1(bq * Dv) + at_least_1(bk * D) +
                             at_least_1(bk * Dv) + (D + Dv) * kAttentionKeyBlock + 2 * kAttentionQueryBlock * kAttentionKeyBlock;
    elements = int64_t(scratch_workers(batch)) * per_head;
  }
  return static_cast<size_t>(elements) * compute_itemsize(q.dtype());
}
size_t attention_scratch(const Task& t) { return attention_scratch_of(t, true); }
size_t attention_backward_scratch(const Task& t) { return attention_scratch_of(t, false); }
const OpDef op_attention(kName, attrs_type<AttentionAttrs>(), {.backward = attention_backward, .cost = attention_cost, .scratch = attention_scratch});
const OpDef op_attention_backward("scaled_dot_product_attention_backward", attrs_type<AttentionAttrs>(), {.cost = attention_backward_cost, .scratch = attention_backward_scratch});

namespace {
void attention_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor q = n.saved(0), k = n.saved(1), v = n.saved(2), out = n.saved(3), lse = n.saved(4), mask = n.saved(5);
  DG_CHECK(!needs_grad_any({g[0], q, k, v}), NotImplemented, "[", kName, "] double backward (create_graph=True) "
           "is not supported by the fused kernel; use the composed ops");
  Tensor grad = to(g[0], q.dtype());
  Tensor grad_q = Tensor::empty(q.shape(), q.dtype()), grad_k = Tensor::empty(k.shape(), k.dtype()),
         grad_v = Tensor::empty(v.shape(), v.dtype());
  if (mask.defined()) enqueue(op_attention_backward, {grad, q, k, v, out, lse, mask}, {grad_q, grad_k, grad_v}, n.attrs);
  else enqueue(op_attention_backward, {grad, q, k, v, out, lse}, {grad_q, grad_k, grad_v}, n.attrs);
  if (n.needs_grad(0)) gi[0] = grad_q;
  if (n.needs_grad(1)) gi[1] = grad_k;
  if (n.needs_grad(2)) gi[2] = grad_v;
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  check_defined(kName, query, "query");
  check_defined(kName, key, "key");
  check_defined(kName, value, "value");
  check_same_device(kName, query, key);
  check_same_device(kName, query, value);
  DG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, Value, "[", kName, "] dropout_p must be in [0, 1], got ", dropout_p);
  DG_CHECK(dropout_p == 0.0, NotImplemented, "[", kName, "] dropout_p > 0 is not implemented, got ", dropout_p);
  DG_CHECK(query.dtype() == key.dtype() && query.dtype() == value.dtype(), Type, "[", kName,
           "] expected query, key and value to have the same dtype, got ", dtype_name(query.dtype()), ", ",
           dtype_name(key.dtype()), " and ", dtype_name(value.dtype()));
  check_floating(kName, query);
  const int64_t nd = query.dim();
  DG_CHECK(nd >= 2 && key.dim() == nd && value.dim() == nd, Value, "[", kName,
           "] expected query, key and value with the same number of dims (at least 2), got shapes ", query.shape(), ", ",
           key.shape(), " and ", value.shape());
  const IntSpan lead = query.shape().first(static_cast<size_t>(nd - 2));
  DG_CHECK(same_shape(lead, key.shape().first(lead.size())) && same_shape(lead, value.shape().first(lead.size())), Value,
           "[", kName, "] query, key and value must share their leading (batch, head) dims, got shapes ", query.shape(),
           ", ", key.shape(), " and ", value.shape());
  const int64_t T = query.shape()[nd - 2], D = query.shape()[nd - 1], S = key.shape()[nd - 2], Dv = value.shape()[nd - 1];
  DG_CHECK(key.shape()[nd - 1] == D, Value, "[", kName, "] query of shape ", query.shape(), " and key of shape ",
           key.shape(), " differ in their last dim");
  DG_CHECK(value.shape()[nd - 2] == S, Value, "[", kName, "] key of shape ", key.shape(), " and value of shape ",
           value.shape(), " differ in their sequence length");
  Dims score_shape(lead);
  score_shape.push_back(T);
  score_shape.push_back(S);
  Tensor mask;
  AttentionMask mask_kind = AttentionMask::None;
  if (attn_mask.defined()) {
    check_same_device(kName, query, attn_mask);
    DG_CHECK(!is_causal, Value, "[", kName, "] explicit attn_mask should not be set when is_causal=True");
    DG_CHECK(attn_mask.dtype() == DType::Bool || attn_mask.dtype() == query.dtype(), Type, "[", kName,
             "] attn_mask must be bool or of the query's dtype ", dtype_name(query.dtype()), ", got ",
             dtype_name(attn_mask.dtype()));
    DG_CHECK(!needs_grad_any({attn_mask}), NotImplemented, "[", kName, "] the gradient of attn_mask is not supported; "
             "detach the mask");
    Dims shape = broadcast_shapes(kName, attn_mask.shape(), score_shape);
    DG_CHECK(same_shape(shape, score_shape), Value, "[", kName, "] attn_mask of shape ", attn_mask.shape(),
             " cannot be broadcast to the scores' shape ", IntSpan(score_shape));
    mask = expand(detach(attn_mask), score_shape);
    mask_kind = attn_mask.dtype() == DType::Bool ? AttentionMask::Bool : AttentionMask::Additive;
  }
  const double scale_value = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
  Dims out_shape(lead);
  out_shape.push_back(T);
  out_shape.push_back(Dv);
  // 4-D: the output is stored as [B, T, H, Dv] and returned as its [B, H, T, Dv] view (as torch's CPU flash
  // kernel does), so the usual out.transpose(1, 2).reshape(B, T, H * Dv) that follows is free.
  Tensor out = nd == 4 ? permute(Tensor::empty(Dims{out_shape[0], T, out_shape[1], Dv}, query.dtype()), Dims{0, 2, 1, 3})
                       : Tensor::empty(out_shape, query.dtype());
  out.impl()->is_view = false;  // it owns its storage alone: not a view of any tensor the user holds
  Tensor lse = Tensor::empty(Dims{shape_numel(lead), T}, query.dtype() == DType::Float64 ? DType::Float64 : DType::Float32);
  const Attrs attrs = AttentionAttrs{scale_value, is_causal, mask_kind};
  if (mask.defined()) enqueue(op_attention, {query, key, value, mask}, {out, lse}, attrs);
  else enqueue(op_attention, {query, key, value}, {out, lse}, attrs);
  if (needs_grad_any({query, key, value})) {
    Tensor inputs[3] = {query, key, value}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_attention, inputs, outputs);
    node->attrs = attrs;
    node->save(query);
    node->save(key);
    node->save(value);
    node->save(detach(out));
    node->save(lse);
    node->save(mask);
  }
  return out;
}

}  // namespace dg
