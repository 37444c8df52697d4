// dygrad.jit's O1 pattern pass (docs/jit-fusion.md, "Patterns"): composed code matched into the fused ops that
// exist. This file: the pass, its shared pieces (jit/patterns.h), and attention written as PyTorch users write it,
//   s = q @ k.transpose(-2, -1)  (/ c  or  * c);  s = s.masked_fill(mask, -inf);  p = s.softmax(-1);  o = p @ v
// with, in a training step's graph, the backward autograd recorded for it (dp = do @ v^T, dv = p^T @ do,
// softmax_backward, the masked fill of the gradient, its scaling, dq = ds @ k, dk^T = q^T @ ds), becomes
// scaled_dot_product_attention and its backward: the [.., T, S] scores, probabilities and their gradients are never
// stored, and a causal mask takes the kernel's causal path (backend/cpu/fused_attention.cpp). The result is equal
// to the composed one within float rounding, not bitwise: dygrad.jit runs this pass only outside deterministic mode.
// Cross-entropy: jit/patterns_loss.cpp.
#include "dygrad/jit/patterns.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <string_view>

#include "dygrad/core/allocator.h"
#include "dygrad/jit/passes.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/fused.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

// --- the shared pieces (jit/patterns.h) ------------------------------------------------------------------------

const OpDef* op_named(std::string_view name) {
  for (const OpDef* op : all_ops())
    if (name == op->name) return op;
  return nullptr;
}

bool same_view(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype && std::ranges::equal(a.sizes, b.sizes) &&
         std::ranges::equal(a.strides, b.strides);
}

Dims contiguous_strides(const Dims& sizes) {
  Dims s(sizes.size());
  int64_t step = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    s[d] = step;
    step *= std::max<int64_t>(sizes[d], 1);
  }
  return s;
}

int64_t numel_of(const Dims& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

size_t rounded_scratch(size_t n) { return (n + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

Uses::Uses(const PatternGraph& g) : writers(g.buffers.size()), readers(g.buffers.size()) {
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (int32_t v : g.ops[i].inputs)
      if (v >= 0) readers[size_t(g.values[size_t(v)].buffer)].push_back(int32_t(i));
    for (int32_t v : g.ops[i].outputs)
      if (v >= 0) writers[size_t(g.values[size_t(v)].buffer)].push_back(int32_t(i));
  }
}

int32_t PatternEdit::add_buffer(const Dims& sizes, DType dtype) {
  Buffer b;
  b.kind = BufferKind::Internal;
  b.nbytes = size_t(numel_of(sizes)) * itemsize(dtype);
  b.written = true;
  g_.buffers.push_back(b);
  Value v;
  v.buffer = int32_t(g_.buffers.size() - 1);
  v.sizes = sizes;
  v.strides = contiguous_strides(sizes);
  v.dtype = dtype;
  return add_value(v);
}

int32_t PatternEdit::add_value(const Value& v) {
  g_.values.push_back(v);
  return int32_t(g_.values.size() - 1);
}

int32_t PatternEdit::add_constant(double value, DType dtype) {
  Tensor holder;
  {
    MemoryCategoryScope category(MemoryCategory::Other);
    holder = full(Dims{}, Scalar(value), {.dtype = dtype, .device = g_.device});
  }
  holder.wait_readable();  // this op's own completion, as the fold pass waits for its constants
  Buffer b;
  b.kind = BufferKind::Fixed;
  b.fixed = holder.impl()->storage;
  b.nbytes = itemsize(dtype);
  g_.buffers.push_back(b);
  Value v;
  v.buffer = int32_t(g_.buffers.size() - 1);
  v.offset = holder.storage_offset();
  v.dtype = dtype;
  return add_value(v);
}

GraphOp PatternEdit::new_op(const OpDef* def, Attrs attrs, const GraphOp& like) const {
  GraphOp op;
  op.op = def;
  op.kernel = def->kernel(g_.device.type);
  op.attrs = std::move(attrs);
  op.site = like.site;
  return op;
}

void PatternEdit::apply() {
  std::vector<GraphOp> next;
  for (size_t i = 0; i < g_.ops.size(); ++i) {
    if (!removed_[i]) next.push_back(std::move(g_.ops[i]));
    for (GraphOp& op : at_[i]) next.push_back(std::move(op));
  }
  g_.ops = std::move(next);
}

std::string Passes::patterns(Graph& g) {
  PatternGraph graph{g.buffers_, g.values_, g.ops_, g.device_};
  std::string done;
  for (auto family : {&attention_patterns, &cross_entropy_patterns}) {
    const std::string note = family(graph);
    if (!note.empty()) done += (done.empty() ? "" : "; ") + note;
  }
  return done.empty() ? "nothing matched" : done;
}

// --- attention -------------------------------------------------------------------------------------------------

namespace {

// The value with its last two dims swapped (x.transpose(-2, -1)).
Value transposed(Value v) {
  const size_t n = v.sizes.size();
  std::swap(v.sizes[n - 1], v.sizes[n - 2]);
  std::swap(v.strides[n - 1], v.strides[n - 2]);
  v.is_view = true;
  return v;
}

bool same_lead(const Value& a, const Value& b) {
  return a.sizes.size() == b.sizes.size() && std::equal(a.sizes.begin(), a.sizes.end() - 2, b.sizes.begin());
}

// One composed attention found in the graph: its ops, and the operands the fused ops take.
struct Attention {
  int32_t qk = -1, scale = -1, fill = -1, softmax = -1, pv = -1;              // forward
  int32_t dp = -1, dv = -1, softmax_bw = -1, fill_bw = -1, scale_bw = -1, dq = -1, dkt = -1;  // backward
  int32_t q = -1, kt = -1, v = -1, mask = -1, out = -1;  // values: q, k^T, v, the mask (true: masked), o
  int32_t dout = -1, grad_q = -1, grad_v = -1, grad_kt = -1;  // values: do, dq, dv, dk^T
  double scale_value = 1;
  bool backward() const { return dp >= 0; }
  std::vector<int32_t> forward_ops() const {
    std::vector<int32_t> r{qk, scale, fill, softmax, pv};
    std::erase(r, -1);
    return r;
  }
  std::vector<int32_t> backward_ops() const {
    std::vector<int32_t> r{dp, dv, softmax_bw, fill_bw, scale_bw, dq, dkt};
    std::erase(r, -1);
    return r;
  }
};

class Matcher {
 public:
  explicit Matcher(PatternGraph& g) : buffers_(g.buffers), values_(g.values), ops_(g.ops), uses_(g) {
    softmax_ = op_named("softmax");
    softmax_bw_ = op_named("softmax_backward");
    matmul_ = op_named("matmul");
    masked_fill_ = op_named("masked_fill");
    div_scalar_ = op_named("div_scalar");
    mul_scalar_ = op_named("mul_scalar");
  }

  // The attention whose softmax is op `s`, or false.
  bool match(int32_t s, Attention& a) {
    const GraphOp& sm = ops_[size_t(s)];
    if (sm.op != softmax_ || sm.inputs.size() != 1 || sm.outputs.size() != 1) return false;
    const Value& scores = val(sm.inputs[0]);
    const size_t nd = scores.sizes.size();
    // bfloat16 too (autocast's attention: matmuls, scaling, masked fill and softmax all in bfloat16): sdpa computes
    // it in float32 and rounds its results once, where the composed ops round at every step.
    if (nd < 2 || (scores.dtype != DType::Float32 && scores.dtype != DType::Float64 &&
                   scores.dtype != DType::BFloat16))
      return false;
    const Dims& dims = sm.attrs.get<ReduceAttrs>().dims;
    if (dims.size() != 1 || (dims[0] != -1 && dims[0] != int64_t(nd) - 1)) return false;
    a.softmax = s;
    const int32_t probs = sm.outputs[0];
    // Back from the scores: the masked fill, the scaling, q @ k^T; each an intermediate of the pattern.
    int32_t cur = sm.inputs[0];
    int32_t op = producer(cur);
    if (op >= 0 && ops_[size_t(op)].op == masked_fill_) {
      const GraphOp& f = ops_[size_t(op)];
      if (!is_neg_inf(f.attrs.get<ScalarAttrs>().value) || !bool_mask(f.inputs[1], scores)) return false;
      a.fill = op;
      a.mask = f.inputs[1];
      cur = f.inputs[0];
      op = producer(cur);
    }
    if (op >= 0 && (ops_[size_t(op)].op == div_scalar_ || ops_[size_t(op)].op == mul_scalar_)) {
      const GraphOp& c = ops_[size_t(op)];
      const double x = c.attrs.get<ScalarAttrs>().value.to_double();
      if (!std::isfinite(x) || x == 0) return false;
      a.scale = op;
      a.scale_value = c.op == div_scalar_ ? 1.0 / x : x;
      cur = c.inputs[0];
      op = producer(cur);
    }
    if (op < 0 || ops_[size_t(op)].op != matmul_) return false;
    a.qk = op;
    a.q = ops_[size_t(op)].inputs[0];
    a.kt = ops_[size_t(op)].inputs[1];
    const Value &q = val(a.q), &kt = val(a.kt);
    if (q.dtype != scores.dtype || kt.dtype != scores.dtype || !same_lead(q, scores) || !same_lead(kt, scores) ||
        q.sizes[nd - 1] != kt.sizes[nd - 2] || q.sizes[nd - 1] == 0)
      return false;
    // Forward from the probabilities: p @ v, and in a training step the backward's readers of p.
    for (int32_t r : uses_.readers[size_t(val(probs).buffer)]) {
      const GraphOp& o = ops_[size_t(r)];
      if (o.op == matmul_ && same_view(val(o.inputs[0]), val(probs)) && a.pv < 0) {
        a.pv = r;
      } else if (o.op == matmul_ && same_view(val(o.inputs[0]), transposed(val(probs))) && a.dv < 0) {
        a.dv = r;
      } else if (o.op == softmax_bw_ && same_view(val(o.inputs[0]), val(probs)) && a.softmax_bw < 0) {
        a.softmax_bw = r;
      } else {
        return false;
      }
    }
    if (a.pv < 0) return false;
    a.v = ops_[size_t(a.pv)].inputs[1];
    a.out = ops_[size_t(a.pv)].outputs[0];
    const Value &v = val(a.v), &out = val(a.out);
    if (v.dtype != scores.dtype || !same_lead(v, scores) || v.sizes[nd - 2] != kt.sizes[nd - 1] ||
        out.strides[nd - 1] != 1 || only_writer(out.buffer) != a.pv)
      return false;
    if ((a.dv >= 0) != (a.softmax_bw >= 0)) return false;
    if (a.softmax_bw >= 0 && !match_backward(a)) return false;
    // Every intermediate is internal, written once, and read only inside the pattern.
    std::vector<int32_t> inner{ops_[size_t(a.qk)].outputs[0], sm.inputs[0], probs};
    if (a.scale >= 0) inner.push_back(ops_[size_t(a.scale)].outputs[0]);
    if (a.fill >= 0) inner.push_back(ops_[size_t(a.fill)].outputs[0]);
    if (a.backward()) {
      for (int32_t o : {a.dp, a.softmax_bw, a.fill_bw, a.scale_bw})
        if (o >= 0) inner.push_back(ops_[size_t(o)].outputs[0]);
    }
    std::set<int32_t> members;
    for (int32_t o : a.forward_ops()) members.insert(o);
    for (int32_t o : a.backward_ops()) members.insert(o);
    for (int32_t value : inner) {
      const int32_t b = val(value).buffer;
      if (buffers_[size_t(b)].kind != BufferKind::Internal || uses_.writers[size_t(b)].size() != 1) return false;
      for (int32_t r : uses_.readers[size_t(b)])
        if (!members.count(r)) return false;
    }
    return ordered(a, members);
  }

 private:
  const Value& val(int32_t v) const { return values_[size_t(v)]; }
  int32_t only_writer(int32_t buffer) const {
    const auto& w = uses_.writers[size_t(buffer)];
    return w.size() == 1 ? w[0] : -1;
  }
  // The op that wrote what value `v` reads, when that op alone writes its buffer and `v` is its output as written.
  int32_t producer(int32_t v) const {
    const int32_t op = only_writer(val(v).buffer);
    if (op < 0 || ops_[size_t(op)].outputs.size() != 1 || !same_view(val(ops_[size_t(op)].outputs[0]), val(v)))
      return -1;
    return op;
  }
  static bool is_neg_inf(const Scalar& s) { return s.is_floating() && std::isinf(s.to_double()) && s.to_double() < 0; }
  static bool is_zero(const Scalar& s) { return s.to_double() == 0; }
  // A boolean mask that broadcasts to the scores' [.., T, S] without a broadcast of its last two dims.
  bool bool_mask(int32_t m, const Value& scores) const {
    const Value& mask = val(m);
    const size_t nd = scores.sizes.size(), md = mask.sizes.size();
    if (mask.dtype != DType::Bool || md < 2 || md > nd) return false;
    for (size_t d = 0; d < md; ++d) {
      const int64_t s = scores.sizes[nd - md + d], x = mask.sizes[d];
      if (d + 2 >= md ? x != s : x != s && x != 1) return false;
    }
    return true;
  }

  // dp = do @ v^T; dv = p^T @ do; ds = softmax_backward(p, dp), masked and scaled as the forward; dq = ds @ k and
  // dk^T = q^T @ ds.
  bool match_backward(Attention& a) {
    const GraphOp& sb = ops_[size_t(a.softmax_bw)];
    const GraphOp& sm = ops_[size_t(a.softmax)];
    if (!(sb.attrs == sm.attrs) || sb.inputs.size() != 2) return false;
    a.dp = producer(sb.inputs[1]);
    if (a.dp < 0 || ops_[size_t(a.dp)].op != matmul_) return false;
    const GraphOp& dp = ops_[size_t(a.dp)];
    const GraphOp& dv = ops_[size_t(a.dv)];
    if (!same_view(val(dp.inputs[1]), transposed(val(a.v))) || !same_view(val(dp.inputs[0]), val(dv.inputs[1])))
      return false;
    a.dout = dp.inputs[0];
    a.grad_v = dv.outputs[0];
    if (val(a.grad_v).strides.back() != 1 || val(a.dout).dtype != val(a.v).dtype) return false;
    int32_t grad = sb.outputs[0];
    auto next = [&](int32_t value) {  // the one op that reads `value`'s buffer
      const auto& r = uses_.readers[size_t(val(value).buffer)];
      return r.size() == 1 && same_view(val(ops_[size_t(r[0])].inputs[0]), val(value)) ? r[0] : -1;
    };
    if (a.fill >= 0) {
      a.fill_bw = next(grad);
      if (a.fill_bw < 0) return false;
      const GraphOp& f = ops_[size_t(a.fill_bw)];
      if (f.op != masked_fill_ || !is_zero(f.attrs.get<ScalarAttrs>().value) || !same_view(val(f.inputs[1]), val(a.mask)))
        return false;
      grad = f.outputs[0];
    }
    if (a.scale >= 0) {
      a.scale_bw = next(grad);
      if (a.scale_bw < 0) return false;
      const GraphOp& c = ops_[size_t(a.scale_bw)];
      if (c.op != ops_[size_t(a.scale)].op || !(c.attrs == ops_[size_t(a.scale)].attrs)) return false;
      grad = c.outputs[0];
    }
    // The gradient of the scores: read by dq = ds @ k and dk^T = q^T @ ds, in either order.
    const auto& readers = uses_.readers[size_t(val(grad).buffer)];
    if (readers.size() != 2) return false;
    for (int32_t r : readers) {
      const GraphOp& o = ops_[size_t(r)];
      if (o.op != matmul_) return false;
      if (same_view(val(o.inputs[0]), val(grad)) && same_view(val(o.inputs[1]), transposed(val(a.kt)))) a.dq = r;
      else if (same_view(val(o.inputs[1]), val(grad)) && same_view(val(o.inputs[0]), transposed(val(a.q)))) a.dkt = r;
    }
    if (a.dq < 0 || a.dkt < 0) return false;
    a.grad_q = ops_[size_t(a.dq)].outputs[0];
    a.grad_kt = ops_[size_t(a.dkt)].outputs[0];
    return val(a.grad_q).strides.back() == 1;
  }

  // The fused forward runs where p @ v ran, the fused backward where the first of the backward's ops ran (its
  // inputs are ready there: the gradient of o is read by that op or the other first one). Legal when no other op
  // between the first and the last matched op writes what the fused op reads earlier than the op it replaces
  // did, or touches a gradient before the op it replaces wrote it.
  bool ordered(const Attention& a, const std::set<int32_t>& members) const {
    auto buffer = [&](int32_t v) { return v >= 0 ? val(v).buffer : -1; };
    auto writes_any = [&](int32_t m, std::initializer_list<int32_t> buffers) {
      for (int32_t v : ops_[size_t(m)].outputs)
        if (v >= 0 && std::ranges::find(buffers, buffer(v)) != buffers.end()) return true;
      return false;
    };
    auto touches = [&](int32_t m, int32_t b) {
      for (const auto* list : {&ops_[size_t(m)].inputs, &ops_[size_t(m)].outputs})
        for (int32_t v : *list)
          if (v >= 0 && buffer(v) == b) return true;
      return false;
    };
    for (int32_t m = a.qk + 1; m < a.pv; ++m)  // q and k are read at p @ v now, and so is the mask (nanoGPT makes it
      if (!members.count(m) && writes_any(m, {buffer(a.q), buffer(a.kt)})) return false;  // after q @ k^T)
    for (int32_t m = a.fill + 1; a.fill >= 0 && m < a.pv; ++m)
      if (!members.count(m) && writes_any(m, {buffer(a.mask)})) return false;
    if (!a.backward()) return true;
    const auto bw = a.backward_ops();
    const auto [lo, hi] = std::ranges::minmax(bw);
    // The saved operands (q, k, v, o, the mask) are not written between the forward and the backward.
    for (int32_t b : {buffer(a.q), buffer(a.kt), buffer(a.v), buffer(a.mask), buffer(a.out)}) {
      if (b < 0) continue;
      for (int32_t w : uses_.writers[size_t(b)])
        if (w > a.pv && w < hi && !members.count(w)) return false;
    }
    for (int32_t m = lo + 1; m < hi; ++m)  // the gradient of o is read at the first backward op now
      if (!members.count(m) && writes_any(m, {buffer(a.dout)})) return false;
    for (int32_t op : {a.dq, a.dkt, a.dv})  // each gradient is written at the first backward op now
      for (int32_t m = lo + 1; m < op; ++m)
        if (!members.count(m) && touches(m, buffer(ops_[size_t(op)].outputs[0]))) return false;
    return true;
  }

  std::vector<Buffer>& buffers_;
  std::vector<Value>& values_;
  std::vector<GraphOp>& ops_;
  Uses uses_;
  const OpDef *softmax_, *softmax_bw_, *matmul_, *masked_fill_, *div_scalar_, *mul_scalar_;
};

}  // namespace

std::string attention_patterns(PatternGraph& g) {
  const OpDef* sdpa = op_named("scaled_dot_product_attention");
  const OpDef* sdpa_bw = op_named("scaled_dot_product_attention_backward");
  const OpDef* logical_not = op_named("logical_not");
  const OpDef* copy = op_named("copy");
  if (!sdpa || !sdpa_bw || !logical_not || !copy || !sdpa->kernel(g.device.type) || !sdpa_bw->kernel(g.device.type))
    return "";  // no fused attention on this device
  Matcher matcher(g);
  std::vector<Attention> found;
  std::set<int32_t> taken;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Attention a;
    if (!matcher.match(int32_t(i), a)) continue;
    bool overlaps = false;
    for (auto part : {a.forward_ops(), a.backward_ops()})
      for (int32_t o : part) overlaps |= taken.count(o) > 0;
    if (overlaps) continue;
    for (auto part : {a.forward_ops(), a.backward_ops()}) taken.insert(part.begin(), part.end());
    found.push_back(a);
  }
  if (found.empty()) return "";

  // What replaces each matched op's position: the fused ops at the last op of each part, nothing at the others.
  PatternEdit edit(g);
  for (const Attention& a : found) {
    const Value q = g.values[size_t(a.q)], v = g.values[size_t(a.v)], k = transposed(g.values[size_t(a.kt)]);
    const size_t nd = q.sizes.size();
    const Dims lead(q.sizes.begin(), q.sizes.end() - 2);
    const int64_t T = q.sizes[nd - 2], D = q.sizes[nd - 1], S = k.sizes[nd - 2], Dv = v.sizes[nd - 1];
    const int64_t batch = numel_of(lead);
    const DType dtype = q.dtype, lse_dtype = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
    const int32_t key = edit.add_value(k);
    const int32_t lse = edit.add_buffer(Dims{batch, T}, lse_dtype);
    const Attrs attrs = AttentionAttrs{a.scale_value, false, a.fill >= 0 ? AttentionMask::Bool : AttentionMask::None};
    const GraphOp& first = g.ops[size_t(a.qk)];
    int32_t keep = -1;  // the mask as sdpa takes it: true = attend, [lead.., T, S]
    if (a.fill >= 0) {
      const Value m = g.values[size_t(a.mask)];
      const int32_t inverted = edit.add_buffer(m.sizes, DType::Bool);
      GraphOp inv = edit.new_op(logical_not, Attrs(), first);
      inv.inputs = {a.mask};
      inv.outputs = {inverted};
      inv.cost = {0, double(2 * numel_of(m.sizes))};
      edit.insert_after(a.pv, std::move(inv));
      Value expanded = g.values[size_t(inverted)];
      const size_t md = expanded.sizes.size();
      Dims sizes(lead), strides(nd, 0);
      sizes.push_back(T);
      sizes.push_back(S);
      for (size_t d = nd - md; d < nd; ++d) {
        const size_t from = d - (nd - md);
        strides[d] = expanded.sizes[from] == 1 && sizes[d] != 1 ? 0 : expanded.strides[from];
      }
      expanded.sizes = sizes;
      expanded.strides = strides;
      expanded.is_view = true;
      keep = edit.add_value(expanded);
    }
    GraphOp fwd = edit.new_op(sdpa, attrs, first);
    fwd.inputs = {a.q, key, a.v};
    if (keep >= 0) fwd.inputs.push_back(keep);
    fwd.outputs = {a.out, lse};
    fwd.scratch = rounded_scratch(attention_scratch_of(batch, T, S, D, Dv, dtype, true, false));
    for (int32_t o : a.forward_ops()) {
      fwd.cost.flops += g.ops[size_t(o)].cost.flops;
      fwd.cost.bytes += g.ops[size_t(o)].cost.bytes;
      edit.remove(o);
    }
    edit.insert_after(a.pv, std::move(fwd));
    if (!a.backward()) continue;
    const auto bw_ops = a.backward_ops();
    const int32_t lo = *std::ranges::min_element(bw_ops);
    Dims k_sizes(lead);
    k_sizes.push_back(S);
    k_sizes.push_back(D);
    const int32_t grad_k = edit.add_buffer(k_sizes, dtype);
    GraphOp bwd = edit.new_op(sdpa_bw, attrs, g.ops[size_t(lo)]);
    bwd.inputs = {a.dout, a.q, key, a.v, a.out, lse};
    if (keep >= 0) bwd.inputs.push_back(keep);
    bwd.outputs = {a.grad_q, grad_k, a.grad_v};
    bwd.scratch = rounded_scratch(attention_scratch_of(batch, T, S, D, Dv, dtype, false, false));
    for (int32_t o : bw_ops) {
      bwd.cost.flops += g.ops[size_t(o)].cost.flops;
      bwd.cost.bytes += g.ops[size_t(o)].cost.bytes;
      edit.remove(o);
    }
    // dk^T's buffer gets dk through its transposed view: what read dk^T (as dk, usually) reads the same elements.
    GraphOp join = edit.new_op(copy, Attrs(), g.ops[size_t(lo)]);
    join.inputs = {grad_k};
    join.outputs = {edit.add_value(transposed(g.values[size_t(a.grad_kt)]))};
    join.cost = {0, double(2 * numel_of(k_sizes) * int64_t(itemsize(dtype)))};
    edit.insert_after(lo, std::move(bwd));
    edit.insert_after(lo, std::move(join));
  }
  edit.apply();
  size_t training = 0;
  for (const Attention& a : found) training += a.backward();
  return std::to_string(found.size()) + " attention(s) into scaled_dot_product_attention (" +
         std::to_string(training) + " with its backward)";
}

}  // namespace dg::jit
