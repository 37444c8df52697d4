// dygrad.jit's O1 pattern pass, cross-entropy (docs/jit-fusion.md, "Patterns"): the language-model loss as PyTorch
// users compose it from a log-softmax over the class dim (the last),
//   F.nll_loss(F.log_softmax(x, -1), t)                          reduction mean, sum or none, any ignore_index
//   -F.log_softmax(x, -1).gather(-1, t[..., None]).mean()        or .sum(); the minus before or after the reduction
//   (x.logsumexp(-1) - x.gather(-1, t[..., None]).squeeze(-1)).mean()   or .sum()
// with, in a training step's graph, the backward autograd recorded for it (nll_loss_backward, or the gather's
// scatter_add into zeros after the reduction's and the minus's backward; then log_softmax_backward; or
// logsumexp_backward and the gather's scatter added), becomes the
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
  int32_t row_op = -1;  // the first forward op: log_softmax, or logsumexp (the logsumexp form)
  int32_t nll = -1, gather = -1, difference = -1;  // nll_loss; gather; the logsumexp form's lse - picked
  std::vector<int32_t> tail;  // the gather forms: neg, sum, div_scalar after the gather (or the difference)
  int32_t grad_last = -1;     // backward: log_softmax_backward, or the add of logsumexp's and gather's gradients
  std::vector<int32_t> backward_rest;                 // the other backward ops
  int32_t logits = -1, loss = -1, grad_logits = -1;  // values: x, the loss, x's gradient
  Value rows, target, grad_loss;  // x as [R, C]; t as [R] int64 contiguous; the loss's gradient
  CrossEntropyAttrs attrs;
  // The gather form whose loss gradient was a constant (loss.backward()'s seed): the fold pass computed the gradient
  // of each picked log-probability, c, once. The fused backward then takes the row loss's gradient, -c, as a
  // constant of its own, with a sum's attributes (each row's gradient is -c, whatever the reduction).
  std::optional<double> row_gradient;
  int32_t forward_last() const { return nll >= 0 ? nll : tail.back(); }
  bool backward() const { return grad_last >= 0; }
  std::vector<int32_t> forward_ops() const {
    std::vector<int32_t> r{row_op};
    if (nll >= 0) r.push_back(nll);
    if (gather >= 0) r.push_back(gather);
    if (difference >= 0) r.push_back(difference);
    r.insert(r.end(), tail.begin(), tail.end());
    return r;
  }
  std::vector<int32_t> backward_ops() const {
    std::vector<int32_t> r(backward_rest);
    if (grad_last >= 0) r.push_back(grad_last);
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
    logsumexp_ = op_named("logsumexp");
    logsumexp_bw_ = op_named("logsumexp_backward");
    add_ = op_named("add");
    mul_scalar_ = op_named("mul_scalar");
  }

  // The cross-entropy whose log_softmax (or logsumexp) over the last dim is op `s`, or false.
  bool match(int32_t s, CrossEntropy& ce) {
    const GraphOp& ls = op(s);
    if ((ls.op != log_softmax_ && ls.op != logsumexp_) || ls.inputs.size() != 1 || ls.outputs.size() != 1) return false;
    const Value& x = val(ls.inputs[0]);
    const size_t nd = x.sizes.size();
    if (nd < 1 || (x.dtype != DType::Float32 && x.dtype != DType::Float64)) return false;
    const Dims& dims = ls.attrs.get<ReduceAttrs>().dims;
    if (dims.size() != 1 || dims[0] != int64_t(nd) - 1) return false;
    const std::optional<Value> rows = as_rows(x);
    if (!rows || rows->sizes[0] == 0 || rows->sizes[1] == 0 || val(ls.outputs[0]).dtype != x.dtype) return false;
    ce.row_op = s;
    ce.logits = ls.inputs[0];
    ce.rows = *rows;
    if (ls.op == logsumexp_ ? !match_logsumexp(ce) : !match_log_softmax(ce)) return false;
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
  // y = log_softmax(x), read by nll_loss or gather and, in a training step, log_softmax_backward.
  bool match_log_softmax(CrossEntropy& ce) {
    const Value& y = val(op(ce.row_op).outputs[0]);
    const int64_t R = ce.rows.sizes[0];
    if (!is_contiguous(y)) return false;
    // y's readers: the loss (nll_loss or gather) and, in a training step, log_softmax_backward.
    for (int32_t r : uses_.readers[size_t(y.buffer)]) {
      const GraphOp& o = op(r);
      if (o.op == nll_ && ce.nll < 0 && ce.gather < 0) ce.nll = r;
      else if (o.op == gather_ && ce.nll < 0 && ce.gather < 0) ce.gather = r;
      else if (o.op == log_softmax_bw_ && ce.grad_last < 0 && o.inputs.size() == 2 &&
               same_view(val(o.inputs[0]), y))
        ce.grad_last = r;
      else return false;
    }
    if (ce.nll >= 0 ? !match_nll(ce, y, R) : ce.gather >= 0 ? !match_gather(ce, y, R) : true) return false;
    return !ce.backward() || (ce.nll >= 0 ? match_nll_backward(ce) : match_gather_backward(ce));
  }

  const Value& val(int32_t v) const { return g_.values[size_t(v)]; }
  const GraphOp& op(int32_t i) const { return g_.ops[size_t(i)]; }
  static bool is_contiguous(const Value& v) { return std::ranges::equal(v.strides, contiguous_strides(v.sizes)); }
  // The one op that reads value `v`'s buffer, through a contiguous view of its elements (`v` itself, or squeezed,
  // reshaped) as its first input; else -1.
  int32_t only_reader(int32_t v) const {
    const auto& r = uses_.readers[size_t(val(v).buffer)];
    return r.size() == 1 && !op(r[0]).inputs.empty() && same_elements(val(op(r[0]).inputs[0]), val(v)) ? r[0] : -1;
  }
  // Two contiguous views of the same elements in the same order (a value and its squeeze, unsqueeze or reshape).
  static bool same_elements(const Value& a, const Value& b) {
    return a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype && numel_of(a.sizes) == numel_of(b.sizes) &&
           is_contiguous(a) && is_contiguous(b);
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
    return picks_targets(ce, y, R) && match_tail(ce, op(ce.gather).outputs[0], y.dtype, R, false);
  }
  // ce.gather is gather(from, -1, t[..., None]) with t's elements in row order: ce.target.
  bool picks_targets(CrossEntropy& ce, const Value& from, int64_t R) {
    const GraphOp& gth = op(ce.gather);
    const size_t nd = from.sizes.size();
    if (gth.inputs.size() != 2 || gth.outputs.size() != 1 || !same_view(val(gth.inputs[0]), from) ||
        gth.attrs.get<DimAttrs>().dim != int64_t(nd) - 1)
      return false;
    const Value& index = val(gth.inputs[1]);
    if (index.sizes.size() != nd || index.sizes[nd - 1] != 1 ||
        !std::equal(index.sizes.begin(), index.sizes.end() - 1, from.sizes.begin()))
      return false;
    const std::optional<Value> t = as_flat_target(index, R);
    if (!t) return false;
    ce.target = *t;
    return true;
  }
  // From the row losses (negated: the minus is already taken, by the logsumexp form's difference) through at most
  // one neg and a sum over every element, a mean's / R after it: ce.tail, ce.loss, the reduction.
  bool match_tail(CrossEntropy& ce, int32_t cur, DType dtype, int64_t R, bool negated) {
    bool summed = false, mean = false;
    for (;;) {  // as far as each value is an internal one that only the next op of the tail reads
      const int32_t next = only_reader(cur);
      if (g_.buffers[size_t(val(cur).buffer)].kind != BufferKind::Internal || next < 0 || op(next).outputs.size() != 1)
        break;
      const GraphOp& o = op(next);
      const Value& out = val(o.outputs[0]);
      if (out.dtype != dtype) break;
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
    const GraphOp& lb = op(ce.grad_last);
    const int32_t nb = only_writer(val(lb.inputs[1]).buffer);
    if (nb < 0 || op(nb).op != nll_bw_ || op(nb).outputs.size() != 1) return false;
    const GraphOp& b = op(nb);
    const GraphOp& n = op(ce.nll);
    const Value& dy = val(lb.inputs[1]);
    if (!(b.attrs == n.attrs) || b.inputs.size() != 3 || !same_view(val(b.inputs[0]), val(n.inputs[1])) ||
        !same_view(val(b.inputs[1]), val(n.outputs[1])) || !covers(dy, val(op(ce.row_op).outputs[0]).sizes))
      return false;
    ce.backward_rest = {nb};
    ce.grad_loss = val(b.inputs[2]);
    return finish_backward(ce);
  }

  // log_softmax_backward(y, dy), dy = scatter_add(zeros, -1, t[..., None], src), src the loss's gradient through
  // the backward of the tail (neg, the sum's expansion, the mean's division) in reverse order.
  bool match_gather_backward(CrossEntropy& ce) {
    const Value& dy = val(op(ce.grad_last).inputs[1]);
    if (!covers(dy, val(op(ce.row_op).outputs[0]).sizes)) return false;
    const std::optional<Value> src = scattered(ce, dy);
    if (!src) return false;
    if (const std::optional<double> picked_gradient = constant_value(*src)) {
      ce.row_gradient = -*picked_gradient;
      return finish_backward(ce);
    }
    return walk_tail(ce, *src) && finish_backward(ce);
  }
  // The gather's backward into buffer `dy`: a copy of zeros, then a scatter_add of src at the gather's index; the
  // ops go to ce.backward_rest, src is returned.
  std::optional<Value> scattered(CrossEntropy& ce, const Value& dy) {
    const GraphOp& gth = op(ce.gather);
    const auto& writers = uses_.writers[size_t(dy.buffer)];
    if (writers.size() != 2) return std::nullopt;
    const int32_t clone = writers[0], scatter = writers[1];
    const GraphOp &c = op(clone), &sa = op(scatter);
    if (c.op != copy_ || c.inputs.size() != 1 || !same_view(val(c.outputs[0]), dy) || !zeros(c.inputs[0], clone) ||
        sa.op != scatter_add_ || sa.inputs.size() != 3 || sa.outputs.size() != 1 || !same_view(val(sa.inputs[0]), dy) ||
        !same_view(val(sa.outputs[0]), dy) || !same_view(val(sa.inputs[1]), val(gth.inputs[1])) ||
        !(sa.attrs == gth.attrs))
      return std::nullopt;
    ce.backward_rest.insert(ce.backward_rest.end(), {clone, scatter});
    if (zero_fill_ >= 0) ce.backward_rest.push_back(zero_fill_);
    return through_select(ce, val(sa.inputs[2]));
  }
  // A gradient `v` that a select's backward made (`picked[..., 0]` in the forward: zeros, then the gradient copied
  // into the slice, which is all of it when the selected dim has size 1; the versions pass leaves the copy alone):
  // the gradient copied, the ops to ce.backward_rest. Any other `v` as it is.
  Value through_select(CrossEntropy& ce, const Value& v) {
    const auto& w = uses_.writers[size_t(v.buffer)];
    const int32_t c = w.empty() ? -1 : w.back();
    if (c < 0 || w.size() > 2 || op(c).op != copy_ || op(c).inputs.size() != 1 || op(c).outputs.size() != 1 ||
        !same_elements(val(op(c).outputs[0]), v))
      return v;
    if (w.size() == 2) {
      const GraphOp& f = op(w[0]);
      if (f.op != fill_ || !f.inputs.empty() || f.outputs.size() != 1 ||
          f.attrs.get<ScalarAttrs>().value.to_double() != 0 || !same_elements(val(f.outputs[0]), v))
        return v;
      ce.backward_rest.push_back(w[0]);
    }
    ce.backward_rest.push_back(c);
    return val(op(c).inputs[0]);
  }
  // Back from the gradient of the tail's first input through the tail's backward (its ops, first to last, were
  // undone last to first; the sum's backward is an expansion, a view) to the loss's gradient: ce.grad_loss.
  bool walk_tail(CrossEntropy& ce, Value cur) {
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
    return true;
  }

  // lse = logsumexp(x) and picked = gather(x, -1, t[..., None]) read by lse - picked (a squeezed view of picked),
  // the row losses, then the tail (a sum, a mean's / R); in a training step logsumexp_backward (reading lse) and
  // the gather's scatter, added.
  bool match_logsumexp(CrossEntropy& ce) {
    const GraphOp& l = op(ce.row_op);
    const Value& lse = val(l.outputs[0]);
    const Value& x = val(ce.logits);
    const int64_t R = ce.rows.sizes[0];
    if (!is_contiguous(lse) || numel_of(lse.sizes) != R) return false;
    int32_t lse_bw = -1;
    for (int32_t r : uses_.readers[size_t(lse.buffer)]) {
      const GraphOp& o = op(r);
      if (o.op == add_ && ce.difference < 0) ce.difference = r;
      else if (o.op == logsumexp_bw_ && lse_bw < 0) lse_bw = r;
      else return false;
    }
    const GraphOp* d = ce.difference >= 0 ? &op(ce.difference) : nullptr;
    if (!d || d->inputs.size() != 2 || d->outputs.size() != 1 || d->attrs.get<AddAttrs>().alpha.to_double() != -1 ||
        !same_view(val(d->inputs[0]), lse))
      return false;
    // picked: the gather of x that the difference reads (through a view of its R elements).
    const Value& p = val(d->inputs[1]);
    const auto& picked_writers = uses_.writers[size_t(p.buffer)];
    if (picked_writers.size() != 1 || op(picked_writers[0]).op != gather_) return false;
    ce.gather = picked_writers[0];
    const Value& picked = val(op(ce.gather).outputs[0]);
    if (p.offset != picked.offset || numel_of(p.sizes) != R || !is_contiguous(p) || !is_contiguous(picked) ||
        uses_.readers[size_t(p.buffer)] != std::vector{ce.difference})
      return false;
    if (!picks_targets(ce, x, R) || !match_tail(ce, d->outputs[0], x.dtype, R, true)) return false;
    if (lse_bw < 0) return true;
    return match_logsumexp_backward(ce, lse_bw);
  }
  // gx = logsumexp_backward(x, lse, g1) + scatter(src2): g1 the row losses' gradient (through a copy), src2 its
  // negation (mul_scalar -1), both of the loss's gradient expanded through the tail's backward.
  bool match_logsumexp_backward(CrossEntropy& ce, int32_t lse_bw) {
    const GraphOp& lb = op(lse_bw);
    if (lb.inputs.size() != 3 || lb.outputs.size() != 1 || !same_view(val(lb.inputs[0]), val(ce.logits)) ||
        val(lb.inputs[1]).buffer != val(op(ce.row_op).outputs[0]).buffer || !(lb.attrs == op(ce.row_op).attrs))
      return false;
    const Value& gx1 = val(lb.outputs[0]);
    const auto& sum_readers = uses_.readers[size_t(gx1.buffer)];
    if (sum_readers.size() != 1 || !covers(gx1, val(ce.logits).sizes)) return false;
    const GraphOp& a = op(sum_readers[0]);
    if (a.op != add_ || a.inputs.size() != 2 || a.attrs.get<AddAttrs>().alpha.to_double() != 1) return false;
    const int32_t other = same_view(val(a.inputs[0]), gx1) ? 1 : same_view(val(a.inputs[1]), gx1) ? 0 : -1;
    if (other < 0) return false;
    ce.grad_last = sum_readers[0];
    ce.backward_rest = {lse_bw};
    const Value& gx2 = val(a.inputs[size_t(other)]);
    if (!covers(gx2, val(ce.logits).sizes)) return false;
    const std::optional<Value> src2 = scattered(ce, gx2);
    if (!src2) return false;
    const Value& g1 = val(lb.inputs[2]);
    const std::optional<double> c1 = constant_value(g1), c2 = constant_value(*src2);
    if (c1 && c2) {  // the fold pass computed both
      if (*c2 != -*c1) return false;
      ce.row_gradient = *c1;
      return finish_backward(ce);
    }
    // g1 = copy(e), src2 = e * -1, e one expanded gradient of the row losses
    const auto &w1 = uses_.writers[size_t(g1.buffer)], &w2 = uses_.writers[size_t(src2->buffer)];
    if (w1.size() != 1 || w2.size() != 1 || op(w1[0]).op != copy_ || op(w2[0]).op != mul_scalar_ ||
        op(w2[0]).attrs.get<ScalarAttrs>().value.to_double() != -1 || !same_elements(val(op(w1[0]).outputs[0]), g1) ||
        !same_elements(val(op(w2[0]).outputs[0]), *src2))
      return false;
    const Value &e1 = val(op(w1[0]).inputs[0]), &e2 = val(op(w2[0]).inputs[0]);
    if (e1.buffer != e2.buffer || e1.offset != e2.offset || numel_of(e2.sizes) != ce.rows.sizes[0]) return false;
    for (size_t d = 0; d < e2.sizes.size(); ++d)
      if (e2.sizes[d] != 1 && e2.strides[d] != 0) return false;
    ce.backward_rest.insert(ce.backward_rest.end(), {w1[0], w2[0]});
    return walk_tail(ce, e1) && finish_backward(ce);
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
    const GraphOp& lb = op(ce.grad_last);
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
    const int32_t last_read = ce.backward() ? ce.grad_last : ce.forward_last();
    for (int32_t b : {val(ce.logits).buffer, ce.target.buffer})
      for (int32_t w : uses_.writers[size_t(b)])
        if (w > ce.row_op && w < last_read && !members.count(w)) return false;
    if (!ce.backward()) return true;
    const auto bw = ce.backward_ops();
    const int32_t first = *std::ranges::min_element(bw);
    if (ce.row_gradient) return true;
    for (int32_t w : uses_.writers[size_t(ce.grad_loss.buffer)])
      if (w > first && w < ce.grad_last && !members.count(w)) return false;
    return true;
  }

  PatternGraph& g_;
  Uses uses_;
  int32_t zero_fill_ = -1;
  const OpDef *log_softmax_, *log_softmax_bw_, *nll_, *nll_bw_, *gather_, *scatter_add_, *neg_, *sum_, *div_scalar_,
      *copy_, *fill_, *logsumexp_, *logsumexp_bw_, *add_, *mul_scalar_;
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
    GraphOp bwd = edit.new_op(backward, attrs, g.ops[size_t(ce.grad_last)]);
    bwd.inputs = {rows, target, lse, grad_loss};
    bwd.outputs = {edit.add_value(grad_rows)};
    for (int32_t o : ce.backward_ops()) {
      bwd.cost.flops += g.ops[size_t(o)].cost.flops;
      bwd.cost.bytes += g.ops[size_t(o)].cost.bytes;
      edit.remove(o);
    }
    edit.insert_after(ce.grad_last, std::move(bwd));
  }
  edit.apply();
  size_t training = 0;
  for (const CrossEntropy& ce : found) training += ce.backward();
  return std::to_string(found.size()) + " cross-entropy(s) into cross_entropy (" + std::to_string(training) +
         " with its backward)";
}

}  // namespace dg::jit
