// dygrad.jit's O1 pattern pass, cross-entropy (docs/jit-fusion.md, "Patterns"): the language-model loss as PyTorch
// users compose it from a log-softmax over the class dim (the last),
//   F.nll_loss(F.log_softmax(x, -1), t)                          reduction mean, sum or none, any ignore_index
//   -F.log_softmax(x, -1).gather(-1, t[..., None]).mean()        or .sum(); the minus before or after the reduction
// with, in a training step's graph, the backward autograd recorded for it (nll_loss_backward, or the gather's
// scatter_add into zeros after the reduction's and the minus's backward; then log_softmax_backward), becomes the
// fused cross_entropy and cross_entropy_backward: the [R, C] log-probabilities and their gradient are never stored,
// and the backward recomputes the probabilities from the saved log-sum-exp of each row. Within float rounding of
// the composed result (off in deterministic mode, as the attention pattern).
//
// Notation: x the logits [.., C] (R rows of C classes), y = log_softmax(x), dy its gradient, t the targets (R).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "dygrad/jit/patterns.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

namespace {

// The gather forms have no ignored class: their fused op gets INT64_MIN as ignore_index, which no class index in
// [0, C) equals; cross_entropy raises for any other target outside [0, C), as gather does (a target of exactly
// INT64_MIN counts as ignored: docs/jit-fusion.md).
constexpr int64_t kNoIgnoredClass = std::numeric_limits<int64_t>::min();

// One composed cross-entropy found in the graph: its ops, and the operands the fused ops take.
struct CrossEntropy {
  int32_t log_softmax = -1, nll = -1, gather = -1;  // forward (nll: the nll_loss form; gather: the gather form)
  std::vector<int32_t> tail;                          // the gather form: neg, sum, div_scalar after the gather
  int32_t log_softmax_bw = -1;                        // backward: log_softmax_backward, last
  std::vector<int32_t> backward_rest;                 // the other backward ops
  int32_t logits = -1, loss = -1, grad_logits = -1;  // values: x, the loss, x's gradient
  Value rows, target, grad_loss;  // x as [R, C]; t as [R] int64 contiguous; the loss's gradient
  CrossEntropyAttrs attrs;
  // The gather form whose loss gradient was a constant (loss.backward()'s seed): the fold pass computed the gradient
  // of each picked log-probability, c, once. The fused backward then takes the row loss's gradient, -c, as a
  // constant of its own, with a sum's attributes (each row's gradient is -c, whatever the reduction).
  std::optional<double> row_gradient;
  int32_t forward_last() const { return nll >= 0 ? nll : tail.back(); }
  bool backward() const { return log_softmax_bw >= 0; }
  std::vector<int32_t> forward_ops() const {
    std::vector<int32_t> r{log_softmax};
    if (nll >= 0) r.push_back(nll);
    if (gather >= 0) r.push_back(gather);
    r.insert(r.end(), tail.begin(), tail.end());
    return r;
  }
  std::vector<int32_t> backward_ops() const {
    std::vector<int32_t> r(backward_rest);
    if (log_softmax_bw >= 0) r.push_back(log_softmax_bw);
    return r;
  }
};

// `v` as [R, C] rows of its last dim, when its leading dims collapse into one (any strides along and between rows).
std::optional<Value> as_rows(const Value& v) {
  const size_t nd = v.sizes.size();
  if (nd == 0) return std::nullopt;
  Value r = v;
  r.is_view = true;
  const int64_t C = v.sizes[nd - 1];
  int64_t R = 1, row_stride = C * v.strides[nd - 1];
  for (size_t d = nd - 1; d-- > 0;) {  // innermost leading dim first
    if (v.sizes[d] == 1) continue;
    if (R > 1 && v.strides[d] != row_stride * R) return std::nullopt;
    if (R == 1) row_stride = v.strides[d];
    R *= v.sizes[d];
  }
  r.sizes = {R, C};
  r.strides = {row_stride, v.strides[nd - 1]};
  return r;
}

// `v` (int64, [R..., 1] or [R...]) as [R] contiguous, when its elements lie in row order one after the other.
std::optional<Value> as_flat_target(const Value& v, int64_t rows) {
  if (v.dtype != DType::Int64 || numel_of(v.sizes) != rows) return std::nullopt;
  int64_t expected = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] == 1) continue;
    if (v.strides[d] != expected) return std::nullopt;
    expected *= v.sizes[d];
  }
  Value r = v;
  r.is_view = true;
  r.sizes = {rows};
  r.strides = {1};
  return r;
}

class Matcher {
 public:
  explicit Matcher(PatternGraph& g) : g_(g), uses_(g) {
    log_softmax_ = op_named("log_softmax");
    log_softmax_bw_ = op_named("log_softmax_backward");
    nll_ = op_named("nll_loss");
    nll_bw_ = op_named("nll_loss_backward");
    gather_ = op_named("gather");
    scatter_add_ = op_named("scatter_add");
    neg_ = op_named("neg");
    sum_ = op_named("sum");
    div_scalar_ = op_named("div_scalar");
    copy_ = op_named("copy");
    fill_ = op_named("fill");
  }

  // The cross-entropy whose log_softmax is op `s`, or false.
  bool match(int32_t s, CrossEntropy& ce) {
    const GraphOp& ls = op(s);
    if (ls.op != log_softmax_ || ls.inputs.size() != 1 || ls.outputs.size() != 1) return false;
    const Value& x = val(ls.inputs[0]);
    const size_t nd = x.sizes.size();
    if (nd < 1 || (x.dtype != DType::Float32 && x.dtype != DType::Float64)) return false;
    const Dims& dims = ls.attrs.get<ReduceAttrs>().dims;
    if (dims.size() != 1 || dims[0] != int64_t(nd) - 1) return false;
    const std::optional<Value> rows = as_rows(x);
    const Value& y = val(ls.outputs[0]);
    if (!rows || !is_contiguous(y) || y.dtype != x.dtype || rows->sizes[0] == 0 || rows->sizes[1] == 0) return false;
    ce.log_softmax = s;
    ce.logits = ls.inputs[0];
    ce.rows = *rows;
    const int64_t R = rows->sizes[0];
    // y's readers: the loss (nll_loss or gather) and, in a training step, log_softmax_backward.
    for (int32_t r : uses_.readers[size_t(y.buffer)]) {
      const GraphOp& o = op(r);
      if (o.op == nll_ && ce.nll < 0 && ce.gather < 0) ce.nll = r;
      else if (o.op == gather_ && ce.nll < 0 && ce.gather < 0) ce.gather = r;
      else if (o.op == log_softmax_bw_ && ce.log_softmax_bw < 0 && o.inputs.size() == 2 &&
               same_view(val(o.inputs[0]), y))
        ce.log_softmax_bw = r;
      else return false;
    }
    if (ce.nll >= 0 ? !match_nll(ce, y, R) : ce.gather >= 0 ? !match_gather(ce, y, R) : true) return false;
    if (ce.backward() && !(ce.nll >= 0 ? match_nll_backward(ce) : match_gather_backward(ce))) return false;
    std::set<int32_t> members;
    for (auto part : {ce.forward_ops(), ce.backward_ops()}) members.insert(part.begin(), part.end());
    // Every intermediate is internal, written by the matched ops alone, and read only by them.
    std::set<int32_t> inner;
    for (int32_t o : members)
      for (int32_t v : op(o).outputs)
        if (v >= 0 && v != ce.loss && v != ce.grad_logits) inner.insert(val(v).buffer);
    for (int32_t b : inner) {
      if (g_.buffers[size_t(b)].kind != BufferKind::Internal) return false;
      for (const auto* list : {&uses_.writers[size_t(b)], &uses_.readers[size_t(b)]})
        for (int32_t o : *list)
          if (!members.count(o)) return false;
    }
    return ordered(ce, members);
  }

 private:
  const Value& val(int32_t v) const { return g_.values[size_t(v)]; }
  const GraphOp& op(int32_t i) const { return g_.ops[size_t(i)]; }
  static bool is_contiguous(const Value& v) { return std::ranges::equal(v.strides, contiguous_strides(v.sizes)); }
  // The one op that reads value `v`'s buffer, through a contiguous view of its elements (`v` itself, or squeezed,
  // reshaped) as its first input; else -1.
  int32_t only_reader(int32_t v) const {
    const auto& r = uses_.readers[size_t(val(v).buffer)];
    if (r.size() != 1 || op(r[0]).inputs.empty()) return -1;
    const Value &a = val(op(r[0]).inputs[0]), &b = val(v);
    const bool same = a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype &&
                      numel_of(a.sizes) == numel_of(b.sizes) && is_contiguous(a) && is_contiguous(b);
    return same ? r[0] : -1;
  }

  // nll_loss(y as [R, C], t): unweighted, any reduction and ignore_index.
  bool match_nll(CrossEntropy& ce, const Value& y, int64_t R) {
    const GraphOp& n = op(ce.nll);
    const NllLossAttrs& a = n.attrs.get<NllLossAttrs>();
    if (a.weighted || n.inputs.size() != 2 || n.outputs.size() != 2) return false;
    const std::optional<Value> y_rows = as_rows(y);
    if (!y_rows || !same_view(val(n.inputs[0]), *y_rows)) return false;
    const std::optional<Value> t = as_flat_target(val(n.inputs[1]), R);
    if (!t || val(n.inputs[1]).sizes.size() != 1) return false;
    ce.target = *t;
    ce.loss = n.outputs[0];
    ce.attrs = CrossEntropyAttrs{a.ignore_index, a.reduction};
    return true;
  }

  // gather(y, -1, t[..., None]), then one neg and a sum over every element (a mean: / R after it), in any order.
  bool match_gather(CrossEntropy& ce, const Value& y, int64_t R) {
    const GraphOp& gth = op(ce.gather);
    const size_t nd = y.sizes.size();
    if (gth.inputs.size() != 2 || gth.outputs.size() != 1 || !same_view(val(gth.inputs[0]), y) ||
        gth.attrs.get<DimAttrs>().dim != int64_t(nd) - 1)
      return false;
    const Value& index = val(gth.inputs[1]);
    if (index.sizes.size() != nd || index.sizes[nd - 1] != 1 ||
        !std::equal(index.sizes.begin(), index.sizes.end() - 1, y.sizes.begin()))
      return false;
    const std::optional<Value> t = as_flat_target(index, R);
    if (!t) return false;
    ce.target = *t;
    int32_t cur = gth.outputs[0];
    bool negated = false, summed = false, mean = false;
    for (;;) {  // as far as each value is an internal one that only the next op of the tail reads
      const int32_t next = only_reader(cur);
      if (g_.buffers[size_t(val(cur).buffer)].kind != BufferKind::Internal || next < 0 || op(next).outputs.size() != 1)
        break;
      const GraphOp& o = op(next);
      const Value& out = val(o.outputs[0]);
      if (out.dtype != y.dtype) break;
      if (o.op == neg_ && !negated) {
        negated = true;
      } else if (o.op == sum_ && !summed && o.attrs.get<ReduceAttrs>().dims.size() == val(o.inputs[0]).sizes.size() &&
                 out.sizes.empty()) {
        summed = true;
      } else if (o.op == div_scalar_ && summed && !mean &&
                 o.attrs.get<ScalarAttrs>().value.to_double() == double(R)) {
        mean = true;
      } else {
        break;
      }
      ce.tail.push_back(next);
      cur = o.outputs[0];
    }
    if (!negated || !summed) return false;
    ce.loss = cur;
    ce.attrs = CrossEntropyAttrs{kNoIgnoredClass, mean ? LossReduction::Mean : LossReduction::Sum};
    return true;
  }

  // log_softmax_backward(y, dy), dy = nll_loss_backward(t, total_weight, g): the fused backward reads g.
  bool match_nll_backward(CrossEntropy& ce) {
    const GraphOp& lb = op(ce.log_softmax_bw);
    const int32_t nb = only_writer(val(lb.inputs[1]).buffer);
    if (nb < 0 || op(nb).op != nll_bw_ || op(nb).outputs.size() != 1) return false;
    const GraphOp& b = op(nb);
    const GraphOp& n = op(ce.nll);
    const Value& dy = val(lb.inputs[1]);
    if (!(b.attrs == n.attrs) || b.inputs.size() != 3 || !same_view(val(b.inputs[0]), val(n.inputs[1])) ||
        !same_view(val(b.inputs[1]), val(n.outputs[1])) || !covers(dy, val(op(ce.log_softmax).outputs[0]).sizes))
      return false;
    ce.backward_rest = {nb};
    ce.grad_loss = val(b.inputs[2]);
    return finish_backward(ce);
  }

  // log_softmax_backward(y, dy), dy = scatter_add(zeros, -1, t[..., None], src), src the loss's gradient through
  // the backward of the tail (neg, the sum's expansion, the mean's division) in reverse order.
  bool match_gather_backward(CrossEntropy& ce) {
    const GraphOp& lb = op(ce.log_softmax_bw);
    const GraphOp& gth = op(ce.gather);
    const Value& dy = val(lb.inputs[1]);
    if (!covers(dy, val(op(ce.log_softmax).outputs[0]).sizes)) return false;
    // dy's buffer: a copy of zeros, then the scatter_add into it.
    const auto& writers = uses_.writers[size_t(dy.buffer)];
    if (writers.size() != 2) return false;
    const int32_t clone = writers[0], scatter = writers[1];
    const GraphOp &c = op(clone), &sa = op(scatter);
    if (c.op != copy_ || c.inputs.size() != 1 || !same_view(val(c.outputs[0]), dy) || !zeros(c.inputs[0], clone) ||
        sa.op != scatter_add_ || sa.inputs.size() != 3 || sa.outputs.size() != 1 || !same_view(val(sa.inputs[0]), dy) ||
        !same_view(val(sa.outputs[0]), dy) || !same_view(val(sa.inputs[1]), val(gth.inputs[1])) ||
        !(sa.attrs == gth.attrs))
      return false;
    ce.backward_rest = {clone, scatter};
    if (zero_fill_ >= 0) ce.backward_rest.push_back(zero_fill_);
    if (const std::optional<double> picked_gradient = constant_value(val(sa.inputs[2]))) {
      ce.row_gradient = -*picked_gradient;
      ce.grad_loss = Value();  // made at the rewrite
      ce.grad_loss.dtype = dy.dtype;
      return finish_backward(ce);
    }
    // Back from src through the tail's backward: the tail's ops, first to last, were undone last to first.
    Value cur = val(sa.inputs[2]);
    for (int32_t t : ce.tail) {
      const GraphOp& f = op(t);
      if (f.op == sum_) {  // the sum's backward: its gradient expanded (a view) over the summed shape
        if (numel_of(cur.sizes) != numel_of(val(f.inputs[0]).sizes)) return false;
        for (size_t d = 0; d < cur.sizes.size(); ++d)
          if (cur.sizes[d] != 1 && cur.strides[d] != 0) return false;
        cur.sizes.clear();
        cur.strides.clear();
        continue;
      }
      const auto& w = uses_.writers[size_t(cur.buffer)];
      if (w.size() != 1 || op(w[0]).op != f.op || !(op(w[0]).attrs == f.attrs) || op(w[0]).inputs.size() != 1 ||
          op(w[0]).outputs.size() != 1 || !same_view(val(op(w[0]).outputs[0]), cur))
        return false;
      ce.backward_rest.push_back(w[0]);
      cur = val(op(w[0]).inputs[0]);
    }
    ce.grad_loss = cur;
    return finish_backward(ce);
  }
  // The one value every element of `v` holds, when `v` views a constant buffer (Fixed, written by no op) of this
  // CPU graph: what the fold pass computed.
  std::optional<double> constant_value(const Value& v) const {
    const Buffer& b = g_.buffers[size_t(v.buffer)];
    if (b.kind != BufferKind::Fixed || !b.fixed || !uses_.writers[size_t(v.buffer)].empty() ||
        g_.device.type != Device::Type::CPU || (v.dtype != DType::Float32 && v.dtype != DType::Float64))
      return std::nullopt;
    const auto* base = static_cast<const unsigned char*>(b.fixed->data());
    const size_t item = itemsize(v.dtype);
    std::optional<double> first;
    Dims index(v.sizes.size(), 0);
    for (int64_t n = 0, total = numel_of(v.sizes); n < total; ++n) {
      int64_t at = v.offset;
      for (size_t d = 0; d < index.size(); ++d) at += index[d] * v.strides[d];
      if (at < 0 || size_t(at + 1) * item > b.fixed->nbytes()) return std::nullopt;
      double x;
      if (v.dtype == DType::Float32) {
        float f;
        std::memcpy(&f, base + size_t(at) * item, sizeof f);
        x = f;
      } else {
        std::memcpy(&x, base + size_t(at) * item, sizeof x);
      }
      if (first ? std::memcmp(&x, &*first, sizeof x) != 0 : !std::isfinite(x)) return std::nullopt;
      if (!first) first = x;
      for (size_t d = index.size(); d-- > 0;) {  // the next element, last dim fastest
        if (++index[d] < v.sizes[d]) break;
        index[d] = 0;
      }
    }
    return first;
  }
  // Whether `v` is a contiguous value of `sizes` over the whole of its buffer's start.
  static bool covers(const Value& v, const Dims& sizes) {
    return v.offset == 0 && std::ranges::equal(v.sizes, sizes) && is_contiguous(v);
  }
  int32_t only_writer(int32_t buffer) const {
    const auto& w = uses_.writers[size_t(buffer)];
    return w.size() == 1 ? w[0] : -1;
  }
  // Whether value `v` (read by the copy `reader`) holds zeros: an internal buffer a fill with 0 wrote whole, or a
  // constant buffer of zeros (the fold pass ran that fill when the graph was optimized: its values are on the host).
  bool zeros(int32_t v, int32_t reader) {
    zero_fill_ = -1;
    const Value& z = val(v);
    if (!is_contiguous(z) || z.offset != 0) return false;
    const Buffer& b = g_.buffers[size_t(z.buffer)];
    const size_t bytes = size_t(numel_of(z.sizes)) * itemsize(z.dtype);
    if (b.kind == BufferKind::Fixed) {
      if (g_.device.type != Device::Type::CPU || !b.fixed || b.fixed->nbytes() < bytes ||
          !uses_.writers[size_t(z.buffer)].empty())
        return false;
      const auto* data = static_cast<const unsigned char*>(b.fixed->data());
      return std::all_of(data, data + bytes, [](unsigned char c) { return c == 0; });
    }
    const int32_t f = only_writer(z.buffer);
    if (f < 0 || op(f).op != fill_ || !op(f).inputs.empty() || !same_view(val(op(f).outputs[0]), z) ||
        op(f).attrs.get<ScalarAttrs>().value.to_double() != 0 || uses_.readers[size_t(z.buffer)] != std::vector{reader})
      return false;
    zero_fill_ = f;
    return true;
  }
  // The gradient of x: log_softmax_backward's output, contiguous [.., C] (the fused backward writes it as [R, C]).
  bool finish_backward(CrossEntropy& ce) {
    const GraphOp& lb = op(ce.log_softmax_bw);
    if (lb.outputs.size() != 1) return false;
    const Value& gx = val(lb.outputs[0]);
    if (!is_contiguous(gx) || !std::ranges::equal(gx.sizes, val(ce.logits).sizes) || gx.dtype != val(ce.logits).dtype)
      return false;
    ce.grad_logits = lb.outputs[0];
    if (ce.row_gradient) return true;
    const Value& gl = ce.grad_loss;
    const bool per_row = ce.attrs.reduction == LossReduction::None;
    return gl.dtype == gx.dtype && (per_row ? gl.sizes.size() == 1 && is_contiguous(gl) : gl.sizes.empty());
  }

  // The fused forward runs where the loss's last op ran, the fused backward where log_softmax_backward ran. Legal
  // when nothing else writes x or t from the log-softmax to the last op that reads them now (the backward, in a
  // training step), nor the loss's gradient between the first backward op (which read it) and the last.
  bool ordered(const CrossEntropy& ce, const std::set<int32_t>& members) const {
    const int32_t last_read = ce.backward() ? ce.log_softmax_bw : ce.forward_last();
    for (int32_t b : {val(ce.logits).buffer, ce.target.buffer})
      for (int32_t w : uses_.writers[size_t(b)])
        if (w > ce.log_softmax && w < last_read && !members.count(w)) return false;
    if (!ce.backward()) return true;
    const auto bw = ce.backward_ops();
    const int32_t first = *std::ranges::min_element(bw);
    if (ce.row_gradient) return true;
    for (int32_t w : uses_.writers[size_t(ce.grad_loss.buffer)])
      if (w > first && w < ce.log_softmax_bw && !members.count(w)) return false;
    return true;
  }

  PatternGraph& g_;
  Uses uses_;
  int32_t zero_fill_ = -1;
  const OpDef *log_softmax_, *log_softmax_bw_, *nll_, *nll_bw_, *gather_, *scatter_add_, *neg_, *sum_, *div_scalar_,
      *copy_, *fill_;
};

}  // namespace

std::string cross_entropy_patterns(PatternGraph& g) {
  const OpDef* forward = op_named("cross_entropy");
  const OpDef* backward = op_named("cross_entropy_backward");
  if (!forward || !backward || !forward->kernel(g.device.type) || !backward->kernel(g.device.type)) return "";
  Matcher matcher(g);
  std::vector<CrossEntropy> found;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    CrossEntropy ce;
    if (matcher.match(int32_t(i), ce)) found.push_back(std::move(ce));  // one log_softmax each: never overlapping
  }
  if (found.empty()) return "";
  PatternEdit edit(g);
  for (const CrossEntropy& ce : found) {
    const int64_t R = ce.rows.sizes[0];
    const DType dtype = ce.rows.dtype, lse_dtype = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
    const int32_t rows = edit.add_value(ce.rows), target = edit.add_value(ce.target);
    const int32_t lse = edit.add_buffer(Dims{R}, lse_dtype);
    GraphOp fwd = edit.new_op(forward, ce.attrs, g.ops[size_t(ce.forward_last())]);
    fwd.inputs = {rows, target};
    fwd.outputs = {ce.loss, lse};
    fwd.scratch = rounded_scratch(scratch_bytes(R, itemsize(lse_dtype)));  // one loss per row (cross_entropy_scratch)
    for (int32_t o : ce.forward_ops()) {
      fwd.cost.flops += g.ops[size_t(o)].cost.flops;
      fwd.cost.bytes += g.ops[size_t(o)].cost.bytes;
      edit.remove(o);
    }
    edit.insert_after(ce.forward_last(), std::move(fwd));
    if (!ce.backward()) continue;
    Value grad_rows = *as_rows(g.values[size_t(ce.grad_logits)]);
    CrossEntropyAttrs attrs = ce.attrs;
    int32_t grad_loss;
    if (ce.row_gradient) {
      attrs.reduction = LossReduction::Sum;
      grad_loss = edit.add_constant(*ce.row_gradient, dtype);
    } else {
      grad_loss = edit.add_value(ce.grad_loss);
    }
    GraphOp bwd = edit.new_op(backward, attrs, g.ops[size_t(ce.log_softmax_bw)]);
    bwd.inputs = {rows, target, lse, grad_loss};
    bwd.outputs = {edit.add_value(grad_rows)};
    for (int32_t o : ce.backward_ops()) {
      bwd.cost.flops += g.ops[size_t(o)].cost.flops;
      bwd.cost.bytes += g.ops[size_t(o)].cost.bytes;
      edit.remove(o);
    }
    edit.insert_after(ce.log_softmax_bw, std::move(bwd));
  }
  edit.apply();
  size_t training = 0;
  for (const CrossEntropy& ce : found) training += ce.backward();
  return std::to_string(found.size()) + " cross-entropy(s) into cross_entropy (" + std::to_string(training) +
         " with its backward)";
}

}  // namespace dg::jit
