// dygrad.jit's O1: `cat` lowered into copies into the slices of its output (docs/jit-fusion.md, "Fusion"), before
// elementwise fusion runs, so a run that computes the pieces writes them where the concatenation puts them: the
// composed rotary embedding's `stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1)` becomes one fused pass that
// stores the two halves interleaved, and its temporaries and the `cat` kernel's pass over memory disappear. A copy
// is exact, so the result is eager's bits.
#include <algorithm>
#include <string_view>

#include "dygrad/jit/passes.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg::jit {

namespace {
const OpDef* copy_op() {
  for (const OpDef* op : all_ops())
    if (std::string_view(op->name) == "copy") return op;
  return nullptr;
}
}  // namespace

size_t Passes::lower_cats(Graph& g) {
  const OpDef* copy = copy_op();
  if (!copy || !copy->kernel(g.device_.type)) return 0;
  std::vector<GraphOp> next;
  size_t lowered = 0;
  for (GraphOp& op : g.ops_) {
    const bool is_cat = std::string_view(op.op->name) == "cat" && op.outputs.size() == 1 && op.outputs[0] >= 0;
    if (!is_cat) {
      next.push_back(std::move(op));
      continue;
    }
    const Value out = g.values_[size_t(op.outputs[0])];
    const size_t nd = out.sizes.size();
    int64_t dim = op.attrs.get<DimAttrs>().dim;
    if (dim < 0) dim += int64_t(nd);
    bool ok = dim >= 0 && dim < int64_t(nd) && (out.dtype == DType::Float32 || out.dtype == DType::Float64);
    for (int32_t v : op.inputs) {
      const Value& in = ok && v >= 0 ? g.values_[size_t(v)] : out;
      ok = ok && v >= 0 && in.dtype == out.dtype && in.sizes.size() == nd;
    }
    if (!ok) {
      next.push_back(std::move(op));
      continue;
    }
    int64_t at = 0;
    for (int32_t v : op.inputs) {
      Value src = g.values_[size_t(v)];
      Value dst = out;
      dst.offset += at * out.strides[size_t(dim)];
      dst.sizes[size_t(dim)] = src.sizes[size_t(dim)];
      dst.is_view = true;
      at += src.sizes[size_t(dim)];
      // Dims of size 1 dropped from both (a stack's new dim): the copy then has the shape of what computed the piece.
      Value s2 = src, d2 = dst;
      s2.sizes.clear(), s2.strides.clear(), d2.sizes.clear(), d2.strides.clear();
      for (size_t d = 0; d < nd; ++d) {
        if (src.sizes[d] == 1 && nd > 1) continue;
        s2.sizes.push_back(src.sizes[d]), s2.strides.push_back(src.strides[d]);
        d2.sizes.push_back(dst.sizes[d]), d2.strides.push_back(dst.strides[d]);
      }
      if (s2.sizes.empty()) s2 = src, d2 = dst;
      if (std::ranges::find(d2.sizes, 0) != d2.sizes.end()) continue;  // an empty piece: nothing to copy
      GraphOp c;
      c.op = copy;
      c.kernel = copy->kernel(g.device_.type);
      c.site = op.site;
      g.values_.push_back(s2);
      c.inputs = {int32_t(g.values_.size() - 1)};
      g.values_.push_back(d2);
      c.outputs = {int32_t(g.values_.size() - 1)};
      int64_t n = 1;
      for (int64_t s : s2.sizes) n *= s;
      c.cost = {0, double(2 * n * int64_t(itemsize(out.dtype)))};
      next.push_back(std::move(c));
    }
    ++lowered;
  }
  g.ops_ = std::move(next);
  return lowered;
}

}  // namespace dg::jit
