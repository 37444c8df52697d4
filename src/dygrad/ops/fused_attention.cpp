// scaled_dot_product_attention (PyTorch's signature), flash-style: validation, the Task, and the backward
// that recomputes probabilities from the saved log-sum-exp. Kernels: backend/cpu/fused_attention.cpp.
// dropout_p > 0 takes torch's math path, composed of ops (softmax, a Bernoulli keep mask, two matmuls);
// enable_gqa repeats key/value heads as torch's repeat_interleave does (their gradients sum back).
#include <cmath>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/fused.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/linalg.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/nn.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

namespace {
constexpr const char* kName = "scaled_dot_product_attention";

// saved: query, key, value, out (detached), lse, mask expanded to [..., T, S] (or undefined). A double backward
// (create_graph) takes the composed path of attention_composed.
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
// Every operand read or written once.
double operand_bytes(const Task& t) {
  double bytes = 0;
  for (const Tensor& x : t.inputs) bytes += double(x.numel()) * double(x.itemsize());
  for (const Tensor& x : t.outputs) bytes += double(x.numel()) * double(x.itemsize());
  return bytes;
}
OpCost attention_cost(const Task& t) { return {attention_flops(t, 2), operand_bytes(t)}; }
OpCost attention_backward_cost(const Task& t) { return {attention_flops(t, 5), operand_bytes(t)}; }
}  // namespace

// Scratch of the CPU kernels (backend/cpu/fused_attention.cpp), in the compute type, with Bq = kAttentionQueryBlock,
// Bk = kAttentionKeyBlock query and key rows per tile, N batch-heads, q[N, T, D], k[N, S, D], v[N, S, Dv].
// Forward: K^T of every batch-head [N, D, S], then per pool thread either one packed K [S, D] or one query
// block's packed Q [Bq, D] and V tile [Bk, Dv], scores [Bq, Bk], accumulator [Bq, Dv] and row max and sum.
// Backward, per pool thread (one batch-head each): 16-bit accumulators for dQ, dK, dV, Dr [T], packed Q, dO,
// K and V tiles, K^T and V^T tiles [D, Bk], [Dv, Bk], and P, dP [Bq, Bk].
// rotary_attention: the same, and in the backward q and k of the batch-head rotated, [T, D] and [S, D].
size_t attention_scratch_of(int64_t batch, int64_t T, int64_t S, int64_t D, int64_t Dv, DType dtype, bool forward,
                            bool rotary) {
  const int64_t bq = std::min(kAttentionQueryBlock, T), bk = std::min(kAttentionKeyBlock, S);
  auto at_least_1 = [](int64_t n) { return std::max<int64_t>(n, 1); };
  const size_t item = compute_itemsize(dtype);
  if (forward) {
    const int64_t query_blocks = (T + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
    const int64_t per_block = at_least_1(bq * D) + at_least_1(bk * Dv) + bq * kAttentionKeyBlock + bq * Dv + 2 * bq;
    return scratch_bytes(at_least_1(batch * D * (S + kAttentionKeyPad)), item) +
           std::max(per_worker_scratch_bytes(at_least_1(S * D), item, batch),
                    per_worker_scratch_bytes(per_block, item, batch * query_blocks));
  }
  const int64_t accumulators = dtype == DType::Float32 || dtype == DType::Float64 ? 0 : T * D + S * D + S * Dv;
  const int64_t per_head = accumulators + (rotary ? at_least_1(T * D) + at_least_1(S * D) : 0) + T + at_least_1(bq * D) + at_least_1(bq * Dv) + at_least_1(bk * D) +
                           at_least_1(bk * Dv) + (D + Dv) * kAttentionKeyBlock + 2 * kAttentionQueryBlock * kAttentionKeyBlock;
  return per_worker_scratch_bytes(per_head, item, batch);
}
size_t sdpa_scratch_of(const Task& t, bool forward) {
  const Tensor& q = t.inputs[forward ? 0 : 1];
  const Tensor& v = t.inputs[forward ? 2 : 3];
  int64_t batch = 1;
  for (int64_t d = 0; d < q.dim() - 2; ++d) batch *= q.shape()[d];
  return attention_scratch_of(batch, q.shape()[q.dim() - 2], v.shape()[v.dim() - 2], q.shape()[q.dim() - 1],
                              v.shape()[v.dim() - 1], q.dtype(), forward, false);
}
size_t attention_scratch(const Task& t) { return sdpa_scratch_of(t, true); }
size_t attention_backward_scratch(const Task& t) { return sdpa_scratch_of(t, false); }
const OpDef op_attention(kName, attrs_type<AttentionAttrs>(), {.backward = attention_backward, .cost = attention_cost, .scratch = attention_scratch});
const OpDef op_attention_backward("scaled_dot_product_attention_backward", attrs_type<AttentionAttrs>(), {.cost = attention_backward_cost, .scratch = attention_backward_scratch});

namespace {
constexpr const char* kRotaryName = "rotary_attention";
// saved: qkv, out (detached), lse, cos, sin (in qkv's dtype). A double backward takes rotary_attention_composed.
void rotary_attention_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
// qkv [B, T, 3 H D]: B H T query rows.
struct RotaryShape {
  int64_t B, T, H, D;
};
RotaryShape rotary_shape(const Tensor& qkv, const Attrs& attrs) {
  const int64_t H = attrs.get<RotaryAttentionAttrs>().heads;
  return {qkv.shape()[0], qkv.shape()[1], H, qkv.shape()[2] / (3 * H)};
}
// flops as sdpa's (two GEMMs forward, five backward; causal halves them) plus the rotations (6 per pair).
OpCost rotary_attention_cost_of(const Task& t, const Tensor& qkv, int gemms) {
  const RotaryShape r = rotary_shape(qkv, t.attrs);
  const double rows = double(r.B * r.H * r.T);
  double flops = 2.0 * rows * double(r.T) * double(r.D) * gemms;
  if (t.attrs.get<RotaryAttentionAttrs>().is_causal) flops /= 2;
  flops += 2 * rows * 3.0 * double(r.D) * (gemms == 2 ? 1 : 2);
  return {flops, operand_bytes(t)};
}
OpCost rotary_attention_cost(const Task& t) { return rotary_attention_cost_of(t, t.inputs[0], 2); }
OpCost rotary_attention_backward_cost(const Task& t) { return rotary_attention_cost_of(t, t.inputs[1], 5); }
size_t rotary_attention_scratch_of(const Task& t, const Tensor& qkv, bool forward) {
  const RotaryShape r = rotary_shape(qkv, t.attrs);
  return attention_scratch_of(r.B * r.H, r.T, r.T, r.D, r.D, qkv.dtype(), forward, true);
}
size_t rotary_attention_scratch(const Task& t) { return rotary_attention_scratch_of(t, t.inputs[0], true); }
size_t rotary_attention_backward_scratch(const Task& t) { return rotary_attention_scratch_of(t, t.inputs[1], false); }
}  // namespace
const OpDef op_rotary_attention(kRotaryName, attrs_type<RotaryAttentionAttrs>(),
                                {.backward = rotary_attention_backward, .cost = rotary_attention_cost,
                                 .scratch = rotary_attention_scratch});
const OpDef op_rotary_attention_backward("rotary_attention_backward", attrs_type<RotaryAttentionAttrs>(),
                                         {.cost = rotary_attention_backward_cost,
                                          .scratch = rotary_attention_backward_scratch});

namespace {
// The scores q k^T * scale with the node's causal or explicit mask applied: [..., T, S].
Tensor masked_scores(const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal, double scale) {
  const int64_t T = q.shape()[q.dim() - 2], S = k.shape()[k.dim() - 2];
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), Scalar(scale));
  if (is_causal) {
    const Device device = q.device();
    Tensor keep_causal = ge(unsqueeze(arange(Scalar(T), device), 1), arange(Scalar(S), device));  // [T, S]: j <= i
    return masked_fill(scores, logical_not(keep_causal), Scalar(-INFINITY));
  }
  if (!mask.defined()) return scores;
  return mask.dtype() == DType::Bool ? masked_fill(scores, logical_not(mask), Scalar(-INFINITY)) : add(scores, mask);
}
// While backward records a graph (create_graph), the flash backward kernel (not differentiable) is replaced by
// torch's math-path gradient, composed of differentiable ops: P = softmax(scores) recomputed, dV = P^T g,
// dS = P * (g V^T - rowsum(g V^T * P)), dQ = dS K * scale, dK = dS^T Q * scale; O(T S) memory per head.
// In the compute type: q, k, v, grad (of out) [..., T, D]; writes dq, dk, dv where wanted (need[0..2]).
void attention_math_gradients(const Tensor& qc, const Tensor& kc, const Tensor& vc, const Tensor& grad, const Tensor& mask,
                              bool is_causal, double scale, const bool need[3], Tensor gradients[3]) {
  Tensor p = softmax(masked_scores(qc, kc, mask, is_causal, scale), -1);
  const int64_t last = -1;
  if (need[2]) gradients[2] = matmul(transpose(p, -2, -1), grad);
  if (!need[0] && !need[1]) return;
  Tensor dp = matmul(grad, transpose(vc, -2, -1));
  Tensor ds = mul(p, sub(dp, sum(mul(dp, p), IntSpan(&last, 1), true)));
  if (need[0]) gradients[0] = mul(matmul(ds, kc), Scalar(scale));
  if (need[1]) gradients[1] = mul(matmul(transpose(ds, -2, -1), qc), Scalar(scale));
}
void attention_composed(Node& n, const Tensor& g, std::span<Tensor> gi) {
  Tensor q = n.saved(0), k = n.saved(1), v = n.saved(2), mask = n.saved(5);
  const AttentionAttrs& attrs = n.attrs.get<AttentionAttrs>();
  const DType dtype = q.dtype(), compute = itemsize(dtype) == 2 ? DType::Float32 : dtype;
  Tensor m = mask.defined() && mask.dtype() != DType::Bool ? to(mask, compute) : mask;
  const bool need[3] = {n.needs_grad(0), n.needs_grad(1), n.needs_grad(2)};
  Tensor gradients[3];
  attention_math_gradients(to(q, compute), to(k, compute), to(v, compute), to(g, compute), m, attrs.is_causal,
                           attrs.scale, need, gradients);
  for (int i = 0; i < 3; ++i)
    if (need[i]) gi[i] = to(gradients[i], dtype);
}
void attention_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (grad_enabled()) return attention_composed(n, g[0], gi);
  Tensor q = n.saved(0), k = n.saved(1), v = n.saved(2), out = n.saved(3), lse = n.saved(4), mask = n.saved(5);
  Tensor grad = to(g[0], q.dtype());
  // Each gradient laid out like its input (q, k, v of a fused projection are [B, T, H, D] in memory): the ops
  // that take them next (rotary's backward, the join of the q, k, v gradients) then walk memory in order.
  Tensor grad_q = empty_rows_like(q, q.dtype()), grad_k = empty_rows_like(k, k.dtype()),
         grad_v = empty_rows_like(v, v.dtype());
  if (mask.defined()) enqueue(op_attention_backward, {grad, q, k, v, out, lse, mask}, {grad_q, grad_k, grad_v}, n.attrs);
  else enqueue(op_attention_backward, {grad, q, k, v, out, lse}, {grad_q, grad_k, grad_v}, n.attrs);
  if (n.needs_grad(0)) gi[0] = grad_q;
  if (n.needs_grad(1)) gi[1] = grad_k;
  if (n.needs_grad(2)) gi[2] = grad_v;
}

// qkv [B, T, 3 H D] -> its part `part` (0 q, 1 k, 2 v) as [B, H, T, D] views (differentiable).
Tensor heads_view(const Tensor& qkv, const RotaryShape& r, int64_t part) {
  const int64_t split[5] = {r.B, r.T, 3, r.H, r.D}, order[4] = {0, 2, 1, 3};
  return permute(select(reshape(qkv, split), 2, part), order);
}
// A double backward (create_graph): the same gradient composed of differentiable ops (rotary_position_embedding,
// torch's math-path attention gradient, the inverse rotation, the three gradients stacked into qkv's shape).
void rotary_attention_composed(Node& n, const Tensor& g, std::span<Tensor> gi) {
  Tensor qkv = n.saved(0), cos = n.saved(3), sin = n.saved(4);
  const RotaryAttentionAttrs& attrs = n.attrs.get<RotaryAttentionAttrs>();
  const RotaryShape r = rotary_shape(qkv, n.attrs);
  const DType dtype = qkv.dtype(), compute = itemsize(dtype) == 2 ? DType::Float32 : dtype;
  const RopeMode mode = attrs.rotate_half ? RopeMode::RotateHalf : RopeMode::Interleaved;
  Tensor x = to(qkv, compute), c = to(cos, compute), s = to(sin, compute);
  Tensor q = rotary_position_embedding(heads_view(x, r, 0), c, s, mode), k = rotary_position_embedding(heads_view(x, r, 1), c, s, mode);
  const int64_t heads_shape[4] = {r.B, r.T, r.H, r.D}, order[4] = {0, 2, 1, 3}, qkv_shape[3] = {r.B, r.T, 3 * r.H * r.D};
  Tensor grad = permute(reshape(to(g, compute), heads_shape), order);
  const bool need[3] = {true, true, true};
  Tensor d[3];
  attention_math_gradients(q, k, heads_view(x, r, 2), grad, Tensor(), attrs.is_causal, attrs.scale, need, d);
  d[0] = rotary_position_embedding(d[0], c, neg(s), mode);
  d[1] = rotary_position_embedding(d[1], c, neg(s), mode);
  Tensor parts[3] = {permute(d[0], order), permute(d[1], order), permute(d[2], order)};  // [B, T, H, D] each
  gi[0] = to(reshape(stack(parts, 2), qkv_shape), dtype);
}
void rotary_attention_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (!n.needs_grad(0)) return;
  if (grad_enabled()) return rotary_attention_composed(n, g[0], gi);
  Tensor qkv = n.saved(0), out = n.saved(1), lse = n.saved(2), cos = n.saved(3), sin = n.saved(4);
  Tensor grad = to(g[0], qkv.dtype());
  Tensor grad_qkv = Tensor::empty(qkv.shape(), qkv.dtype(), qkv.device());
  enqueue(op_rotary_attention_backward, {grad, qkv, out, lse, cos, sin}, {grad_qkv}, n.attrs);
  gi[0] = grad_qkv;
}
}  // namespace

namespace {
// enable_gqa: key/value of shape [..., Hkv, S, D] repeated to the query's H heads, each head G = H / Hkv times
// in a row (torch's repeat_interleave(G, dim=-3)); a view expanded then copied once, so the gradient of the
// repeated heads sums back to each key/value head through expand's backward.
Tensor repeat_heads(const Tensor& t, int64_t heads) {
  const int64_t nd = t.dim(), kv_heads = t.shape()[nd - 3];
  if (kv_heads == heads) return t;
  Dims expanded(t.shape());
  expanded.insert(static_cast<size_t>(nd - 2), heads / kv_heads);
  Dims merged(t.shape());
  merged[nd - 3] = heads;
  return reshape(expand(unsqueeze(t, nd - 2), expanded), merged);
}

// torch's math path with dropout: softmax(q k^T * scale + bias) * keep / (1 - p) @ v, keep ~ Bernoulli(1 - p)
// from the counter-based generator (so it repeats under manual_seed). q [..., T, D], k [..., S, D], v [..., S, Dv].
Tensor attention_with_dropout(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p,
                              bool is_causal, double scale) {
  Tensor probabilities = softmax(masked_scores(q, k, mask, is_causal, scale), -1);
  if (p >= 1.0) {
    probabilities = mul(probabilities, Scalar(0.0));
  } else {
    Tensor keep = bernoulli_mask(probabilities.shape(), 1.0 - p, probabilities.dtype(), std::nullopt, q.device());
    probabilities = mul(mul(probabilities, keep), Scalar(1.0 / (1.0 - p)));
  }
  return matmul(probabilities, v);
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key_in, const Tensor& value_in,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  check_defined(kName, query, "query");
  check_defined(kName, key_in, "key");
  check_defined(kName, value_in, "value");
  check_same_device(kName, query, key_in);
  check_same_device(kName, query, value_in);
  DG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, Runtime, "[", kName, "] dropout probability has to be between 0 "
           "and 1, but got ", dropout_p);
  DG_CHECK(query.dtype() == key_in.dtype() && query.dtype() == value_in.dtype(), Type, "[", kName,
           "] expected query, key and value to have the same dtype, got ", dtype_name(query.dtype()), ", ",
           dtype_name(key_in.dtype()), " and ", dtype_name(value_in.dtype()));
  check_floating(kName, query);
  const int64_t nd = query.dim();
  DG_CHECK(nd >= 2 && key_in.dim() == nd && value_in.dim() == nd, Value, "[", kName,
           "] expected query, key and value with the same number of dims (at least 2), got shapes ", query.shape(), ", ",
           key_in.shape(), " and ", value_in.shape());
  Tensor key = key_in, value = value_in;
  if (enable_gqa) {
    DG_CHECK(nd >= 3, Index, "[", kName, "] enable_gqa=True needs a head dim -3: query has shape ", query.shape());
    const int64_t heads = query.shape()[nd - 3], key_heads = key.shape()[nd - 3], value_heads = value.shape()[nd - 3];
    DG_CHECK(key_heads > 0 && value_heads > 0 && heads % key_heads == 0 && heads % value_heads == 0, Runtime, "[",
             kName, "] Number of heads in key and value must divide the number of heads in query: query of shape ",
             query.shape(), ", key of shape ", key.shape(), ", value of shape ", value.shape());
    key = repeat_heads(key, heads);
    value = repeat_heads(value, heads);
  }
  const IntSpan lead = query.shape().first(static_cast<size_t>(nd - 2));
  DG_CHECK(same_shape(lead, key.shape().first(lead.size())) && same_shape(lead, value.shape().first(lead.size())), Runtime,
           "[", kName, "] query, key and value must share their leading (batch, head) dims, got shapes ", query.shape(),
           ", ", key_in.shape(), " and ", value_in.shape(), enable_gqa || nd < 3 || key_in.shape()[nd - 3] == query.shape()[nd - 3]
           ? "" : " (key/value with fewer heads than query need enable_gqa=True)");
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
  if (dropout_p > 0.0) return attention_with_dropout(query, key, value, mask, dropout_p, is_causal, scale_value);
  Dims out_shape(lead);
  out_shape.push_back(T);
  out_shape.push_back(Dv);
  // 4-D: the output is stored as [B, T, H, Dv] and returned as its [B, H, T, Dv] view (as torch's CPU flash
  // kernel does), so the usual out.transpose(1, 2).reshape(B, T, H * Dv) that follows is free.
  const Device device = query.device();
  Tensor out = nd == 4 ? permute(Tensor::empty(Dims{out_shape[0], T, out_shape[1], Dv}, query.dtype(), device),
                                 Dims{0, 2, 1, 3})
                       : Tensor::empty(out_shape, query.dtype(), device);
  out.impl()->is_view = false;  // it owns its storage alone: not a view of any tensor the user holds
  out.impl()->view_base.reset();
  const DType lse_dtype = query.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor lse = Tensor::empty(Dims{shape_numel(lead), T}, lse_dtype, device);
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

Tensor rotary_attention(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t heads, RopeMode mode,
                        bool is_causal, std::optional<double> scale) {
  const char* name = kRotaryName;
  check_defined(name, qkv, "qkv");
  check_defined(name, cos, "cos");
  check_defined(name, sin, "sin");
  check_same_device(name, qkv, cos);
  check_same_device(name, qkv, sin);
  check_floating(name, qkv);
  DG_CHECK(qkv.dim() == 3, Value, "[", name, "] expected qkv of 3 dims (B, T, 3 * heads * D), got shape ", qkv.shape());
  DG_CHECK(heads > 0, Value, "[", name, "] heads must be positive, got ", heads);
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], width = qkv.shape()[2];
  DG_CHECK(width % (3 * heads) == 0, Value, "[", name, "] the last dim of qkv of shape ", qkv.shape(),
           " is not 3 * heads * D for heads=", heads);
  const int64_t D = width / (3 * heads);
  DG_CHECK(D % 2 == 0 && D > 0, Value, "[", name, "] the head dim D must be even and positive, got D=", D,
           " from qkv of shape ", qkv.shape(), " and heads=", heads);
  const int64_t want[2] = {T, D / 2};
  DG_CHECK(same_shape(cos.shape(), want) && same_shape(sin.shape(), want), Value, "[", name, "] cos and sin must have shape ",
           IntSpan(want), " (T, D/2) for qkv of shape ", qkv.shape(), " and heads=", heads, ", got ", cos.shape(), " and ",
           sin.shape());
  DG_CHECK(is_floating(cos.dtype()) && is_floating(sin.dtype()), Type, "[", name, "] cos and sin must be floating, got ",
           dtype_name(cos.dtype()), " and ", dtype_name(sin.dtype()));
  Tensor c = to(detach(cos), qkv.dtype()), s = to(detach(sin), qkv.dtype());
  const double scale_value = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
  Tensor out = Tensor::empty(Dims{B, T, heads * D}, qkv.dtype(), qkv.device());
  Tensor lse = Tensor::empty(Dims{B * heads, T}, qkv.dtype() == DType::Float64 ? DType::Float64 : DType::Float32,
                             qkv.device());
  const Attrs attrs = RotaryAttentionAttrs{scale_value, is_causal, heads, mode == RopeMode::RotateHalf};
  enqueue(op_rotary_attention, {qkv, c, s}, {out, lse}, attrs);
  if (needs_grad_any({qkv})) {
    Tensor inputs[1] = {qkv}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_rotary_attention, inputs, outputs);
    node->attrs = attrs;
    node->save(qkv);
    node->save(detach(out));
    node->save(lse);
    node->save(c);
    node->save(s);
  }
  return out;
}

}  // namespace dg
