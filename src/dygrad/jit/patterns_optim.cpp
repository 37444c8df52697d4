// dygrad.jit's O1 pattern pass, AdamW (docs/jit-fusion.md, "Patterns"): torch.optim.AdamW's per-parameter loop
// (foreach=False, torch/optim/adam.py's single-tensor path) as a captured function issues it at step k,
//   p.mul_(1 - lr wd)                                   (absent without weight decay: torch's Adam loop)
//   m.lerp_(g, 1 - beta1);  v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
//   denom = (v.sqrt() / bias_correction2_sqrt).add_(eps);  p.addcdiv_(m, denom, value=-step_size)
// for each parameter, becomes one adamw_step Task over every parameter whose constants agree (backend/cpu/
// fused_adamw.cpp: the same operations in the same order, so the result is eager's bits). The step-dependent
// scalars are Python numbers the capture recorded (the loop's step is a Python value: each replay is step k again),
// while adamw_step counts steps in a tensor and derives them from the count: the pass recovers lr, the betas, eps,
// the weight decay and k from the recorded constants, accepts them only where adamw_step's own formulas give back
// every constant exactly, and makes the count k - 1 before each replay's step (a fill of its step tensors).
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "dygrad/jit/patterns.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

namespace {

// One parameter's update: its ops in torch's order, its tensors, and the constants recorded in its ops.
struct AdamUpdate {
  int32_t decay = -1, lerp = -1, v_scale = -1, g_scale = -1, g_square = -1, v_add = -1, root = -1, bias_div = -1,
          eps_add = -1, m_scale = -1, quotient = -1, p_add = -1;  // ops
  int32_t param = -1, grad = -1, exp_avg = -1, exp_avg_sq = -1;  // values
  double decay_value = 1, weight = 0, beta2 = 0, one_minus_beta2 = 0, bias2_sqrt = 0, eps = 0, neg_step = 0;
  std::vector<int32_t> ops() const {
    std::vector<int32_t> r{decay, lerp, v_scale, g_scale, g_square, v_add, root, bias_div, eps_add, m_scale, quotient,
                           p_add};
    std::erase(r, -1);
    return r;
  }
  int32_t first() const { return decay >= 0 ? decay : lerp; }
};

// What adamw_step reads (its lr and hyper tensors, the step count before its increment) when its formulas give back
// an update's constants exactly.
struct AdamHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 0;
  auto key() const { return std::tuple(lr, beta1, beta2, eps, weight_decay, step); }
};

// adamw_step's scalars (fused_adamw.cpp, a float64 lr): what it computes from (lr, betas, eps, wd) at step k.
bool reproduces(const AdamUpdate& u, const AdamHyper& h) {
  const double k = double(h.step);
  return 1.0 - h.beta1 == u.weight && 1.0 - h.beta2 == u.one_minus_beta2 && h.beta2 == u.beta2 &&
         h.eps == u.eps && std::sqrt(1.0 - std::pow(h.beta2, k)) == u.bias2_sqrt &&
         -(h.lr / (1.0 - std::pow(h.beta1, k))) == u.neg_step &&
         (u.decay < 0 ? h.weight_decay == 0 : 1.0 - h.lr * h.weight_decay == u.decay_value);
}

// The closest doubles around x, nearest first: x, x+, x-, x++, x-- ...
std::vector<double> around(double x, int count) {
  std::vector<double> r{x};
  double up = x, down = x;
  for (int i = 0; i < count; ++i) {
    up = std::nextafter(up, INFINITY);
    down = std::nextafter(down, -INFINITY);
    r.push_back(up);
    r.push_back(down);
  }
  return r;
}

std::optional<AdamHyper> recover(const AdamUpdate& u) {
  AdamHyper h;
  h.beta1 = 1.0 - u.weight;  // exact for beta1 in [0.5, 1): checked by reproduces()
  h.beta2 = u.beta2;
  h.eps = u.eps;
  if (!(h.beta1 > 0 && h.beta1 < 1 && h.beta2 > 0 && h.beta2 < 1 && u.bias2_sqrt > 0 && u.bias2_sqrt <= 1 &&
        u.neg_step < 0 && std::isfinite(u.neg_step)))
    return std::nullopt;
  // k from bias_correction2 = 1 - beta2^k; past the point where beta2^k no longer changes 1 - beta2^k, the largest
  // such k that the float32 count holds exactly gives the same constants too.
  const double estimate = std::log1p(-u.bias2_sqrt * u.bias2_sqrt) / std::log(h.beta2);
  std::vector<int64_t> steps;
  if (std::isfinite(estimate) && estimate < double(1 << 24))
    for (int64_t k = std::llround(estimate) - 3; k <= std::llround(estimate) + 3; ++k) steps.push_back(k);
  steps.push_back(int64_t(1) << 24);
  for (int64_t k : steps) {
    if (k < 1 || k > (int64_t(1) << 24) || std::sqrt(1.0 - std::pow(h.beta2, double(k))) != u.bias2_sqrt) continue;
    h.step = k;
    for (double lr : around(-u.neg_step * (1.0 - std::pow(h.beta1, double(k))), 8)) {
      h.lr = lr;
      if (u.decay < 0) {
        h.weight_decay = 0;
        if (reproduces(u, h)) return h;
        continue;
      }
      for (double wd : around((1.0 - u.decay_value) / lr, 64)) {
        h.weight_decay = wd;
        if (wd >= 0 && reproduces(u, h)) return h;
      }
    }
  }
  return std::nullopt;
}

class Matcher {
 public:
  explicit Matcher(PatternGraph& g) : g_(g), uses_(g) {
    lerp_ = op_named("lerp_scalar");
    mul_scalar_ = op_named("mul_scalar");
    div_scalar_ = op_named("div_scalar");
    add_scalar_ = op_named("add_scalar");
    mul_ = op_named("mul");
    div_ = op_named("div");
    add_ = op_named("add");
    sqrt_ = op_named("sqrt");
  }

  // The update whose first-moment lerp_ is op `l`, or false.
  bool match(int32_t l, AdamUpdate& u) {
    const GraphOp& lerp = op(l);
    if (lerp.op != lerp_ || lerp.inputs.size() != 2 || !in_place(l, 0)) return false;
    u.lerp = l;
    u.exp_avg = lerp.inputs[0];
    u.grad = lerp.inputs[1];
    u.weight = scalar(l);
    const Value& m = val(u.exp_avg);
    const Value& g = val(u.grad);
    if ((m.dtype != DType::Float32 && m.dtype != DType::Float64) || g.dtype != m.dtype || !dense(m) || !dense(g) ||
        !std::ranges::equal(g.sizes, m.sizes))
      return false;
    // v.mul_(beta2).addcmul_(g, g, value=1 - beta2): (g * (1 - beta2)) * g added into v.
    for (int32_t r : uses_.readers[size_t(g.buffer)]) {
      if (r <= l || op(r).op != mul_scalar_ || !reads(r, 0, u.grad) || op(r).outputs.size() != 1) continue;
      u.g_scale = r;
      break;
    }
    if (u.g_scale < 0) return false;
    u.one_minus_beta2 = scalar(u.g_scale);
    u.g_square = only_reader(op(u.g_scale).outputs[0]);
    if (u.g_square < 0 || op(u.g_square).op != mul_ || !reads(u.g_square, 1, u.grad)) return false;
    u.v_add = only_reader(op(u.g_square).outputs[0]);
    if (u.v_add < 0 || op(u.v_add).op != add_ || op(u.v_add).inputs.size() != 2 || !in_place(u.v_add, 0) ||
        !reads(u.v_add, 1, op(u.g_square).outputs[0]) || op(u.v_add).attrs.get<AddAttrs>().alpha.to_double() != 1)
      return false;
    u.exp_avg_sq = op(u.v_add).inputs[0];
    const Value& v = val(u.exp_avg_sq);
    if (!dense(v) || v.dtype != m.dtype || !std::ranges::equal(v.sizes, m.sizes)) return false;
    u.v_scale = previous_writer(v.buffer, u.v_add);
    if (u.v_scale < 0 || op(u.v_scale).op != mul_scalar_ || !in_place(u.v_scale, 0) ||
        !reads(u.v_scale, 0, u.exp_avg_sq))
      return false;
    u.beta2 = scalar(u.v_scale);
    // denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
    u.root = next_reader(v.buffer, u.v_add);
    if (u.root < 0 || op(u.root).op != sqrt_ || !reads(u.root, 0, u.exp_avg_sq)) return false;
    u.bias_div = only_reader(op(u.root).outputs[0]);
    if (u.bias_div < 0 || op(u.bias_div).op != div_scalar_) return false;
    u.bias2_sqrt = scalar(u.bias_div);
    const int32_t denom = op(u.bias_div).outputs[0];
    const auto& denom_readers = uses_.readers[size_t(val(denom).buffer)];
    if (denom_readers.size() != 2) return false;
    u.eps_add = denom_readers[0];
    u.quotient = denom_readers[1];
    if (op(u.eps_add).op != add_scalar_ || !reads(u.eps_add, 0, denom) || !in_place(u.eps_add, 0)) return false;
    u.eps = scalar(u.eps_add);
    // p.addcdiv_(m, denom, value=-step_size): (m * -step_size) / denom added into p.
    u.m_scale = next_reader(m.buffer, l);
    if (u.m_scale < 0 || op(u.m_scale).op != mul_scalar_ || !reads(u.m_scale, 0, u.exp_avg) ||
        only_reader(op(u.m_scale).outputs[0]) != u.quotient)
      return false;
    u.neg_step = scalar(u.m_scale);
    const GraphOp& q = op(u.quotient);
    if (q.op != div_ || !reads(u.quotient, 0, op(u.m_scale).outputs[0]) || !reads(u.quotient, 1, denom)) return false;
    u.p_add = only_reader(q.outputs[0]);
    if (u.p_add < 0 || op(u.p_add).op != add_ || !in_place(u.p_add, 0) || !reads(u.p_add, 1, q.outputs[0]) ||
        op(u.p_add).attrs.get<AddAttrs>().alpha.to_double() != 1)
      return false;
    u.param = op(u.p_add).inputs[0];
    const Value& p = val(u.param);
    if (!dense(p) || p.dtype != m.dtype || !std::ranges::equal(p.sizes, m.sizes)) return false;
    // p.mul_(1 - lr wd), before the lerp_: the write into p right before the addcdiv_'s
    const int32_t d = previous_writer(p.buffer, u.p_add);
    if (d >= 0 && d < l && op(d).op == mul_scalar_ && in_place(d, 0) && reads(d, 0, u.param)) {
      u.decay = d;
      u.decay_value = scalar(d);
    }
    return intermediates_internal(u) && ordered(u);
  }

 private:
  const Value& val(int32_t v) const { return g_.values[size_t(v)]; }
  const GraphOp& op(int32_t i) const { return g_.ops[size_t(i)]; }
  double scalar(int32_t o) const { return op(o).attrs.get<ScalarAttrs>().value.to_double(); }
  static bool dense(const Value& v) { return std::ranges::equal(v.strides, contiguous_strides(v.sizes)); }
  bool reads(int32_t o, size_t position, int32_t value) const {
    return op(o).inputs.size() > position && same_view(val(op(o).inputs[position]), val(value));
  }
  // Op `o` writes its one output in place over its input `position`.
  bool in_place(int32_t o, size_t position) const {
    return op(o).outputs.size() == 1 && op(o).inputs.size() > position &&
           same_view(val(op(o).outputs[0]), val(op(o).inputs[position]));
  }
  int32_t only_reader(int32_t v) const {
    const auto& r = uses_.readers[size_t(val(v).buffer)];
    return r.size() == 1 ? r[0] : -1;
  }
  int32_t previous_writer(int32_t buffer, int32_t before) const {
    int32_t found = -1;
    for (int32_t w : uses_.writers[size_t(buffer)])
      if (w < before) found = w;
    return found;
  }
  int32_t next_reader(int32_t buffer, int32_t after) const {
    for (int32_t r : uses_.readers[size_t(buffer)])
      if (r > after) return r;
    return -1;
  }
  // g * (1 - beta2), its square, sqrt(v), denom, m * -step_size and the quotient: internal, written and read by the
  // update alone.
  bool intermediates_internal(const AdamUpdate& u) const {
    const std::vector<int32_t> members = u.ops();
    for (int32_t o : {u.g_scale, u.g_square, u.root, u.bias_div, u.m_scale, u.quotient}) {
      const int32_t b = val(op(o).outputs[0]).buffer;
      if (g_.buffers[size_t(b)].kind != BufferKind::Internal) return false;
      for (const auto* list : {&uses_.writers[size_t(b)], &uses_.readers[size_t(b)]})
        for (int32_t x : *list)
          if (std::ranges::find(members, x) == members.end()) return false;
    }
    return true;
  }
  // torch's order (the decay, the lerp_, v's two writes, then its sqrt; m's scaling after its lerp_), and from the
  // update's first op to its last nothing else touches p, m or v nor writes g (the fused op runs at the last
  // parameter's last op: the caller checks the ops after it).
  bool ordered(const AdamUpdate& u) const {
    if (!(u.v_scale < u.v_add && u.v_add < u.root && u.lerp < u.m_scale && u.g_scale < u.g_square &&
          u.g_square < u.v_add && u.eps_add < u.quotient && u.quotient < u.p_add))
      return false;
    return untouched(u, u.first(), u.p_add + 1);
  }

 public:
  // Nothing but the update's own ops touches its p, m or v, or writes its g, in ops [from, to).
  bool untouched(const AdamUpdate& u, int32_t from, int32_t to) const {
    const std::vector<int32_t> members = u.ops();
    auto member = [&](int32_t o) { return std::ranges::find(members, o) != members.end(); };
    for (int32_t value : {u.param, u.exp_avg, u.exp_avg_sq})
      for (const auto* list : {&uses_.writers[size_t(val(value).buffer)], &uses_.readers[size_t(val(value).buffer)]})
        for (int32_t o : *list)
          if (o >= from && o < to && !member(o)) return false;
    for (int32_t o : uses_.writers[size_t(val(u.grad).buffer)])
      if (o >= from && o < to && !member(o)) return false;
    return true;
  }

 private:
  PatternGraph& g_;
  Uses uses_;
  const OpDef *lerp_, *mul_scalar_, *div_scalar_, *add_scalar_, *mul_, *div_, *add_, *sqrt_;
};

}  // namespace

std::string adamw_patterns(PatternGraph& g) {
  const OpDef* adamw = op_named("adamw_step");
  const OpDef* fill = op_named("fill");
  if (!adamw || !fill || !adamw->kernel(g.device.type) || !fill->kernel(g.device.type)) return "";
  Matcher matcher(g);
  // The updates by their hyper-parameters: each group becomes one adamw_step.
  std::map<std::tuple<double, double, double, double, double, int64_t>, std::vector<AdamUpdate>> groups;
  std::map<std::tuple<double, double, double, double, double, int64_t>, AdamHyper> hyper_of;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    AdamUpdate u;
    if (!matcher.match(int32_t(i), u)) continue;
    const std::optional<AdamHyper> h = recover(u);
    if (!h) continue;
    groups[h->key()].push_back(u);
    hyper_of[h->key()] = *h;
  }
  size_t updates = 0, steps = 0;
  PatternEdit edit(g);
  for (auto& [key, members] : groups) {
    // The fused step runs at the last update's last op: each earlier update's p, m, v and g stay untouched until there.
    const int32_t at = members.back().p_add;
    std::erase_if(members, [&](const AdamUpdate& u) { return !matcher.untouched(u, u.p_add + 1, at + 1); });
    if (members.empty()) continue;
    const int32_t last = members.back().p_add;
    const AdamHyper& h = hyper_of[key];
    const int64_t count = int64_t(members.size());
    // The step counts, k - 1 before each replay's step: one fill of a [P] float32 buffer, a 0-d view per parameter.
    const int32_t counts = edit.add_buffer(Dims{count}, DType::Float32);
    GraphOp reset = edit.new_op(fill, ScalarAttrs{Scalar(double(h.step - 1))}, g.ops[size_t(last)]);
    reset.outputs = {counts};
    reset.cost = {0, double(4 * count)};
    std::vector<int32_t> step_values;
    for (int64_t i = 0; i < count; ++i) {
      Value one = g.values[size_t(counts)];
      one.offset = i;
      one.sizes.clear();
      one.strides.clear();
      one.is_view = true;
      step_values.push_back(edit.add_value(one));
    }
    GraphOp fused = edit.new_op(adamw, AdamWAttrs{true}, g.ops[size_t(last)]);
    for (const AdamUpdate& u : members) fused.outputs.push_back(u.param);
    for (const AdamUpdate& u : members) fused.outputs.push_back(u.exp_avg);
    for (const AdamUpdate& u : members) fused.outputs.push_back(u.exp_avg_sq);
    fused.outputs.insert(fused.outputs.end(), step_values.begin(), step_values.end());
    fused.inputs = fused.outputs;
    for (const AdamUpdate& u : members) fused.inputs.push_back(u.grad);
    fused.inputs.push_back(edit.add_constants({h.lr}, DType::Float64));
    fused.inputs.push_back(edit.add_constants({h.beta1, h.beta2, h.eps, h.weight_decay}, DType::Float64));
    int64_t pieces = 0;
    for (const AdamUpdate& u : members) {
      pieces += (numel_of(g.values[size_t(u.param)].sizes) + kAdamWPiece - 1) / kAdamWPiece;
      for (int32_t o : u.ops()) {
        fused.cost.flops += g.ops[size_t(o)].cost.flops;
        fused.cost.bytes += g.ops[size_t(o)].cost.bytes;
        edit.remove(o);
      }
    }
    fused.scratch = rounded_scratch(scratch_bytes(pieces, 3 * sizeof(int64_t)) + 2 * scratch_bytes<double>(count));
    edit.insert_after(last, std::move(reset));
    edit.insert_after(last, std::move(fused));
    updates += members.size();
    ++steps;
  }
  if (!updates) return "";
  edit.apply();
  return std::to_string(updates) + " AdamW update(s) into " + std::to_string(steps) + " adamw_step(s)";
}

}  // namespace dg::jit
