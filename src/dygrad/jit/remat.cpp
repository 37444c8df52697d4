// dygrad.jit's O1 rematerialize pass (docs/jit-fusion.md, "Rematerialize"): an elementwise result that the forward
// writes and the backward reads again much later is computed again right before that late reader, from operands
// that are alive there anyway (or are computed again too), instead of being held across the gap. A composed GELU's
// tanh and products, a composed LayerNorm's centred rows: autograd saves them for the backward, where the fused
// kernels would have recomputed them. The recomputed ops are the same ops on the same values (eager's bits), placed
// where elementwise fusion folds them into the backward's fused run, so the held buffer disappears from the arena
// over the gap and the recomputation costs arithmetic, not a pass over memory.
#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "dygrad/jit/passes.h"

namespace dg::jit {

namespace {

// A gap shorter than this many ops holds a buffer across too little to be worth a recomputation.
constexpr int32_t kMinGap = 16;
// The most ops one late reader's recomputation may take (a chain back to live operands).
constexpr size_t kMaxChain = 12;

struct Remat {
  std::vector<Buffer>& buffers;
  std::vector<Value>& values;
  std::vector<GraphOp>& ops;
  std::vector<std::vector<int32_t>> writers, readers;  // per buffer, ops in order
  std::vector<int32_t> last_use;                        // per buffer, as decisions so far leave it

  Remat(std::vector<Buffer>& b, std::vector<Value>& v, std::vector<GraphOp>& o)
      : buffers(b), values(v), ops(o), writers(b.size()), readers(b.size()), last_use(b.size(), -1) {
    for (size_t i = 0; i < ops.size(); ++i) {
      for (int32_t x : ops[i].inputs)
        if (x >= 0) readers[size_t(buf(x))].push_back(int32_t(i));
      for (int32_t x : ops[i].outputs)
        if (x >= 0) writers[size_t(buf(x))].push_back(int32_t(i));
      for (const auto* list : {&ops[i].inputs, &ops[i].outputs})
        for (int32_t x : *list)
          if (x >= 0) last_use[size_t(buf(x))] = int32_t(i);
    }
  }
  int32_t buf(int32_t v) const { return values[size_t(v)].buffer; }

  // The op that alone wrote buffer b, as recomputable: pure elementwise (or a `cat`), one output, the buffer
  // internal.
  int32_t recomputable_writer(int32_t b) const {
    if (buffers[size_t(b)].kind != BufferKind::Internal || writers[size_t(b)].size() != 1) return -1;
    const int32_t p = writers[size_t(b)][0];
    const GraphOp& op = ops[size_t(p)];
    if (op.outputs.size() != 1 || op.random) return -1;
    // Elementwise ops, and `cat` (a copy: the composed rotary embedding's interleave of its two halves)
    const bool is_cat = std::string_view(op.op->name) == "cat";
    DType compute;
    if (!is_cat && !fusible_in_run(op, values, compute)) return -1;
    return p;
  }

  // Whether buffer b holds at op r what it held after op p: nothing writes it in between (an internal buffer
  // written once is written at p or before).
  bool unchanged(int32_t b, int32_t p, int32_t r) const {
    for (int32_t w : writers[size_t(b)])
      if (w > p && w < r) return false;
    return true;
  }

  // The ops to compute again before op r so that op p's result is there, in order (p last): each input either
  // alive at r anyway and unchanged since it was read, or itself computed again. False past kMaxChain ops.
  bool plan(int32_t p, int32_t r, std::vector<int32_t>& chain, std::set<int32_t>& seen) const {
    if (seen.count(p)) return true;
    for (int32_t x : ops[size_t(p)].inputs) {
      const int32_t b = buf(x);
      const bool outside = buffers[size_t(b)].kind != BufferKind::Internal;
      if ((outside || last_use[size_t(b)] >= r) && unchanged(b, p, r)) continue;
      const int32_t q = recomputable_writer(b);
      if (q < 0 || !plan(q, r, chain, seen)) return false;
    }
    seen.insert(p);
    chain.push_back(p);
    return chain.size() <= kMaxChain;
  }
};

}  // namespace

// Versions: eager's allocator hands a dying buffer's memory to the next one of its size, and autograd writes some
// gradients into a saved tensor's storage once its last reader ran, so a captured internal buffer can hold several
// values one after the other. An op that writes such a buffer whole without reading it starts a new value: from it
// on (to the next such write) the buffer is a new one, so the arena places each value by its own lifetime and the
// other passes see one writer per value.
std::string Passes::versions(Graph& g) {
  std::vector<uint8_t> pinned(g.buffers_.size(), 0);  // results' and side-effect operands' buffers keep theirs
  for (int32_t v : g.results_) pinned[size_t(g.values_[size_t(v)].buffer)] = 1;
  for (const GraphOp& op : g.ops_)
    if (op.op->flags & kOpSideEffect)
      for (const auto* list : {&op.inputs, &op.outputs})
        for (int32_t v : *list)
          if (v >= 0) pinned[size_t(g.values_[size_t(v)].buffer)] = 1;
  std::vector<int32_t> current(g.buffers_.size());  // per captured buffer: the buffer its current value is in
  for (size_t b = 0; b < current.size(); ++b) current[b] = int32_t(b);
  std::vector<uint8_t> seen_write(g.buffers_.size(), 0);
  size_t renamed = 0;
  auto whole = [&](const Value& v) {
    const Buffer& b = g.buffers_[size_t(v.buffer)];
    int64_t n = 1, step = 1;
    for (size_t d = v.sizes.size(); d-- > 0;) {
      if (v.sizes[d] != 1 && v.strides[d] != step) return false;
      step *= v.sizes[d];
      n *= v.sizes[d];
    }
    return v.offset == 0 && size_t(n) * itemsize(v.dtype) == b.nbytes;
  };
  auto remap = [&](int32_t& x) {
    const int32_t b = g.values_[size_t(x)].buffer;
    if (current[size_t(b)] == b) return;
    Value v = g.values_[size_t(x)];
    v.buffer = current[size_t(b)];
    g.values_.push_back(v);
    x = int32_t(g.values_.size() - 1);
  };
  for (GraphOp& op : g.ops_) {
    for (int32_t& x : op.inputs)
      if (x >= 0) remap(x);
    for (int32_t& x : op.outputs) {
      if (x < 0) continue;
      const int32_t captured = g.values_[size_t(x)].buffer;
      const Buffer& b = g.buffers_[size_t(captured)];
      bool fresh = seen_write[size_t(captured)] && b.kind == BufferKind::Internal && !pinned[size_t(captured)] &&
                   !b.read_before_written && !b.host_memory && whole(g.values_[size_t(x)]);
      for (int32_t in : op.inputs)  // an in-place op reads the value it overwrites
        fresh = fresh && (in < 0 || g.values_[size_t(in)].buffer != current[size_t(captured)]);
      seen_write[size_t(captured)] = 1;
      if (fresh) {
        Buffer nb = b;
        nb.first = nb.last = -1;
        g.buffers_.push_back(nb);
        current.push_back(int32_t(g.buffers_.size() - 1));  // (the new buffer's own entry: never looked up)
        pinned.push_back(0);
        seen_write.push_back(1);
        current[size_t(captured)] = int32_t(g.buffers_.size() - 1);
        ++renamed;
      }
      remap(x);
    }
  }
  return renamed ? std::to_string(renamed) + " buffer value(s) written whole after an earlier one: a buffer each"
                 : "no buffer holds two values";
}

std::string Passes::rematerialize(Graph& g) {
  Remat m(g.buffers_, g.values_, g.ops_);
  // Per late reader: the ops computed again right before it, and the buffers its inputs read instead.
  std::map<int32_t, std::vector<GraphOp>> before;
  std::map<int32_t, std::map<int32_t, int32_t>> redirect;  // reader -> (old buffer -> new buffer)
  size_t held = 0, recomputed = 0;
  for (size_t pi = 0; pi < g.ops_.size(); ++pi) {
    const int32_t p = int32_t(pi);
    if (g.ops_[pi].outputs.size() != 1 || g.ops_[pi].outputs[0] < 0) continue;
    const int32_t b = m.buf(g.ops_[pi].outputs[0]);
    if (m.recomputable_writer(b) != p) continue;
    // The widest gap between p and its readers (or between two of them): the readers after it read a recomputed
    // copy, made right before the first of them.
    const auto& rs = m.readers[size_t(b)];
    if (rs.empty()) continue;
    int32_t prev = p, gap = 0;
    size_t split = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      if (rs[i] - prev > gap) {
        gap = rs[i] - prev;
        split = i;
      }
      prev = rs[i];
    }
    if (gap < kMinGap || split == 0) continue;  // split 0: p itself would move (left to its place)
    const int32_t r = rs[split];
    std::vector<int32_t> chain;
    std::set<int32_t> seen;
    if (!m.plan(p, r, chain, seen)) continue;
    // The chain's copies: new internal buffers of the same sizes, read through the same geometry.
    std::map<int32_t, int32_t> fresh;  // old buffer -> its copy's buffer, for this reader
    for (int32_t q : chain) {
      GraphOp copy = g.ops_[size_t(q)];
      for (int32_t& x : copy.inputs) {
        auto it = fresh.find(m.buf(x));
        if (it == fresh.end()) {  // read where it is: alive to r now
          m.last_use[size_t(m.buf(x))] = std::max(m.last_use[size_t(m.buf(x))], r);
          continue;
        }
        Value v = g.values_[size_t(x)];
        v.buffer = it->second;
        g.values_.push_back(v);
        x = int32_t(g.values_.size() - 1);
      }
      const int32_t old_out = copy.outputs[0];
      Buffer nb = g.buffers_[size_t(m.buf(old_out))];
      nb.first = nb.last = -1;
      g.buffers_.push_back(nb);
      const int32_t nbi = int32_t(g.buffers_.size() - 1);
      Value v = g.values_[size_t(old_out)];
      v.buffer = nbi;
      g.values_.push_back(v);
      copy.outputs[0] = int32_t(g.values_.size() - 1);
      fresh[m.buf(old_out)] = nbi;
      before[r].push_back(std::move(copy));
      ++recomputed;
    }
    // Every reader of b from the split on reads the copy; b's life ends at the reader before the split.
    for (size_t i = split; i < rs.size(); ++i) redirect[rs[i]][b] = fresh.at(b);
    m.last_use[size_t(b)] = rs[split - 1];
    ++held;
  }
  if (!held) return "nothing held across a gap";
  std::vector<GraphOp> next;
  for (size_t i = 0; i < g.ops_.size(); ++i) {
    auto it = before.find(int32_t(i));
    if (it != before.end())
      for (GraphOp& op : it->second) next.push_back(std::move(op));
    GraphOp op = std::move(g.ops_[i]);
    auto rd = redirect.find(int32_t(i));
    if (rd != redirect.end())
      for (int32_t& x : op.inputs) {
        auto to = rd->second.find(m.buf(x));
        if (to == rd->second.end()) continue;
        Value v = g.values_[size_t(x)];
        v.buffer = to->second;
        g.values_.push_back(v);
        x = int32_t(g.values_.size() - 1);
      }
    next.push_back(std::move(op));
  }
  g.ops_ = std::move(next);
  return std::to_string(held) + " result(s) computed again where they are read late (" + std::to_string(recomputed) +
         " op(s))";
}

}  // namespace dg::jit
