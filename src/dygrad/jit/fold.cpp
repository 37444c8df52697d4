// dygrad.jit's O1 constant folding (docs/jit-fusion.md, "Constant folding"): values a function makes from nothing
// but factories (`arange`, `full`, `ones_like` of a shape: a position index, a loss's seed gradient, a mask built
// inside the function) and elementwise ops on them are the same at every call. They are computed once, when the
// graph is optimized, by the same kernels eager runs (eager's bits), and kept as the graph's own buffers: the replay
// no longer runs those ops, and the arena no longer holds their results.
#include <exception>

#include "dygrad/core/allocator.h"
#include "dygrad/jit/passes.h"
#include "dygrad/ops/dispatch.h"

namespace dg::jit {

std::string Passes::fold(Graph& g) {
  const size_t nb = g.buffers_.size();
  std::vector<std::vector<int32_t>> writers(nb), readers(nb);
  for (size_t i = 0; i < g.ops_.size(); ++i) {
    for (int32_t v : g.ops_[i].inputs)
      if (v >= 0) readers[size_t(g.values_[size_t(v)].buffer)].push_back(int32_t(i));
    for (int32_t v : g.ops_[i].outputs)
      if (v >= 0) writers[size_t(g.values_[size_t(v)].buffer)].push_back(int32_t(i));
  }
  // Constant: an op that draws nothing, has no side effect and reads no value on the host, is a factory (no inputs)
  // or elementwise (its kernel raises on no value), reads only constant buffers and writes internal buffers no other
  // op writes.
  std::vector<uint8_t> constant(nb, 0), folded(g.ops_.size(), 0);
  size_t count = 0;
  for (size_t i = 0; i < g.ops_.size(); ++i) {
    const GraphOp& op = g.ops_[i];
    if (op.op->flags & (kOpSideEffect | kOpRandom | kOpDataDependentShape | kOpCrossDevice)) continue;
    if (op.op->host_read || !op.kernel || op.op->scratch || op.outputs.empty() || op.random) continue;
    if (!op.inputs.empty() && op.op->fusion != FusionClass::Elementwise) continue;
    bool ok = true;
    for (int32_t v : op.inputs) ok = ok && v >= 0 && constant[size_t(g.values_[size_t(v)].buffer)];
    for (int32_t v : op.outputs) {
      if (!ok || v < 0) {
        ok = false;
        break;
      }
      const int32_t b = g.values_[size_t(v)].buffer;
      const Buffer& buf = g.buffers_[size_t(b)];
      ok = buf.kind == BufferKind::Internal && writers[size_t(b)].size() == 1 && !buf.read_before_written &&
           !buf.host_memory;
    }
    if (!ok) continue;
    folded[i] = 1;
    ++count;
    for (int32_t v : op.outputs) constant[size_t(g.values_[size_t(v)].buffer)] = 1;
  }
  if (!count) return "nothing constant";
  // Run them now, in order, each on buffers of its own (the graph's device's memory).
  std::vector<Ref<Storage>> storage(nb);
  std::vector<Tensor> results;
  try {
    MemoryCategoryScope category(MemoryCategory::Other);
    for (size_t i = 0; i < g.ops_.size(); ++i) {
      if (!folded[i]) continue;
      const GraphOp& op = g.ops_[i];
      auto tensor = [&](int32_t v) {
        const Value& val = g.values_[size_t(v)];
        Ref<Storage>& s = storage[size_t(val.buffer)];
        if (!s) s = Storage::allocate(g.buffers_[size_t(val.buffer)].nbytes, g.device_);
        return g.make_tensor(val, s, 0);
      };
      std::vector<Tensor> in, out;
      for (int32_t v : op.inputs) in.push_back(tensor(v));
      for (int32_t v : op.outputs) out.push_back(tensor(v));
      enqueue(*op.op, in, out, op.attrs);
      for (const Tensor& t : out) results.push_back(t);
    }
    for (const Tensor& t : results) t.wait_readable();  // these ops' own completion (nothing else of the stream's)
  } catch (const std::exception& e) {
    return std::string("left as captured: computing them raised: ") + e.what();
  }
  // A constant buffer that an op left in the graph reads becomes the graph's own (Fixed: held, never written).
  size_t kept = 0;
  for (size_t b = 0; b < nb; ++b) {
    if (!constant[b]) continue;
    bool read = false;
    for (int32_t r : readers[b]) read = read || !folded[size_t(r)];
    if (!read) continue;
    Buffer& buf = g.buffers_[b];
    buf.kind = BufferKind::Fixed;
    buf.fixed = storage[b];
    buf.written = false;
    buf.bumps = 0;
    buf.first = buf.last = -1;
    ++kept;
  }
  std::vector<GraphOp> next;
  for (size_t i = 0; i < g.ops_.size(); ++i)
    if (!folded[i]) next.push_back(std::move(g.ops_[i]));
  g.ops_ = std::move(next);
  return std::to_string(count) + " op(s) computed once, now: " + std::to_string(kept) + " constant buffer(s)";
}

}  // namespace dg::jit
