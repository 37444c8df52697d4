// dygrad.jit's O1 in-place reuse (docs/jit-fusion.md, "In-place reuse"): after fusion, an elementwise sub-op whose
// input dies with it writes its output over that input, as eager's in-place ops do (`x.mul_(2)`), instead of into a
// buffer of its own. The arena (Graph::prepare) plans buffers by lifetime, and two buffers used by one sub-op are
// both alive there: without this, `y = x * 2` with x dead afterwards holds x and y at once. Here y's buffer becomes x's
// (one buffer over both lifetimes), so the arena holds one of them.
//
// Legal only where every element's output is written after that element's input was read and nothing reads the
// input afterwards: the input dies at this sub-op, both have one geometry (dtype, sizes, strides, offset: element i
// of each at one address), and the sub-op reads the input at element i only for output element i:
// - a fused single-pass program (runtime/fused_program.h): its input slot and its output slot merge into one slot
//   read and stored; no record after the first store to the output slot reads the input slot (the program would
//   read the stored value), and no float32 exp or log is in it (a loop that reads a slot it stores cannot run twice,
//   so the generated code would lose the guarded fast forms: jit/fusion_codegen.cpp);
// - a lone elementwise op fusion knows (fusible_elementwise: the functors of eager's kernels, which take out == input
//   0 for the in-place ops) writing over its first input; copies, exp and log are left alone.
// Row programs (reductions over a row, several passes) are left alone. Eager's bits: the same functors on the same
// values, so deterministic mode runs it.
#include <algorithm>

#include "dygrad/jit/passes.h"

namespace dg::jit {
namespace {

bool same_geometry(const Value& a, const Value& b) {
  return a.offset == b.offset && a.dtype == b.dtype && std::ranges::equal(a.sizes, b.sizes) &&
         std::ranges::equal(a.strides, b.strides);
}

// Slot `from` removed from the program: its records' references moved to `to` (the merged slot).
void merge_slot(FusedProgram& p, int32_t from, int32_t to) {
  auto renumber = [&](int32_t s) { return s == from ? to : s > from ? s - 1 : s; };
  if (to > from) to -= 1;  // `to` as renumbered
  for (FusedRecord& r : p.records) {
    for (FusedOperand& o : r.in)
      if (o.slot >= 0) o.slot = renumber(o.slot);
    if (r.out_slot >= 0) r.out_slot = renumber(r.out_slot);
  }
  const int32_t output = p.slot_output[size_t(from)];
  p.slot_input.erase(p.slot_input.begin() + from);
  p.slot_output.erase(p.slot_output.begin() + from);
  p.strides.erase(p.strides.begin() + from);
  p.slot_dtype.erase(p.slot_dtype.begin() + from);
  p.slot_output[size_t(to)] = output;
}

}  // namespace

std::string Passes::inplace(Graph& g) {
  // Other backends' elementwise kernels are not known to take an output over their input.
  if (!g.device_.is_cpu()) return "not on this device";
  lifetimes(g);
  // Buffers a sub-op with a side effect touches live to the end (Graph::prepare): never reused here.
  std::vector<uint8_t> pinned(g.buffers_.size(), 0);
  for (const GraphOp& op : g.ops_) {
    if (!(op.op->flags & kOpSideEffect)) continue;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int32_t v : *list)
        if (v >= 0) pinned[size_t(g.values_[size_t(v)].buffer)] = 1;
  }
  auto reusable = [&](int32_t b) {
    const Buffer& buf = g.buffers_[size_t(b)];
    return buf.kind == BufferKind::Internal && !pinned[size_t(b)] && !buf.alive && !buf.host_memory &&
           !buf.read_before_written;
  };
  // Op i's operands on buffer b: how many, and whether all have value v's geometry.
  auto uses = [&](const GraphOp& op, int32_t b, const Value& v, bool& same) {
    int n = 0;
    same = true;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int32_t u : *list)
        if (u >= 0 && g.values_[size_t(u)].buffer == b) {
          ++n;
          same = same && same_geometry(g.values_[size_t(u)], v);
        }
    return n;
  };
  // Buffer `into` takes over buffer `from` (every value on it), which the arena then no longer holds.
  auto take_over = [&](int32_t from, int32_t into) {
    Buffer& a = g.buffers_[size_t(into)];
    Buffer& b = g.buffers_[size_t(from)];
    for (Value& v : g.values_)
      if (v.buffer == from) v.buffer = into;
    a.nbytes = std::max(a.nbytes, b.nbytes);
    a.last = std::max(a.last, b.last);
    a.written = true;
    b.first = b.last = -1;
  };
  size_t reused = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < g.ops_.size(); ++i) {
    GraphOp& op = g.ops_[i];
    const int32_t at = int32_t(i);
    // An input that can give its buffer to output value `ov`: dead after op i, of ov's geometry, used by op i only
    // through values of that geometry; ov's buffer new at op i and used by it only through ov.
    auto donor = [&](int32_t iv, int32_t ov) {
      const Value& in = g.values_[size_t(iv)];
      const Value& out = g.values_[size_t(ov)];
      const int32_t a = in.buffer, b = out.buffer;
      if (a == b || !reusable(a) || !reusable(b) || !same_geometry(in, out)) return false;
      const Buffer& ba = g.buffers_[size_t(a)];
      const Buffer& bb = g.buffers_[size_t(b)];
      if (ba.last != at || bb.first != at) return false;
      bool same_a = false, same_b = false;
      uses(op, a, in, same_a);
      return same_a && uses(op, b, out, same_b) == 1;
    };
    if (op.op == &op_jit_fused) {
      FusedProgram& p = *op.attrs.get<FusedAttrs>().program;
      auto is_guarded = [&](const FusedRecord& r) { return guarded_op(r, p.dtype); };
      if (p.row_reduction || p.full_reduction || std::ranges::any_of(p.records, is_guarded)) continue;
      for (int32_t s_out = 0; s_out < int32_t(p.num_slots()); ++s_out) {
        if (p.slot_output[size_t(s_out)] < 0 || p.slot_input[size_t(s_out)] >= 0) continue;
        // the first record that stores the output slot: the input slot must not be read after it
        size_t first_store = p.records.size();
        for (size_t r = 0; r < p.records.size() && first_store == p.records.size(); ++r)
          if (p.records[r].out_slot == s_out) first_store = r;
        const int32_t ov = op.outputs[size_t(p.slot_output[size_t(s_out)])];
        for (int32_t s_in = 0; s_in < int32_t(p.num_slots()); ++s_in) {
          if (p.slot_input[size_t(s_in)] < 0 || p.slot_output[size_t(s_in)] >= 0) continue;
          if (p.strides[size_t(s_in)] != p.strides[size_t(s_out)]) continue;
          bool read_late = false;
          for (size_t r = first_store + 1; r < p.records.size() && !read_late; ++r)
            for (const FusedOperand& o : p.records[r].in) read_late = read_late || o.slot == s_in;
          const int32_t iv = op.inputs[size_t(p.slot_input[size_t(s_in)])];
          if (read_late || !donor(iv, ov)) continue;
          const int32_t from = g.values_[size_t(ov)].buffer;
          bytes += g.buffers_[size_t(from)].nbytes;
          take_over(from, g.values_[size_t(iv)].buffer);
          merge_slot(p, s_out, s_in);
          ++reused;
          s_out = -1;  // slots renumbered: look again from the start
          break;
        }
      }
      continue;
    }
    if (!fusible_elementwise(op, g.values_) || op.inputs.empty()) continue;
    const std::string& name = op.op->name;
    if (name == "copy" || name == "exp" || name == "log") continue;
    if (!donor(op.inputs[0], op.outputs[0])) continue;
    const int32_t from = g.values_[size_t(op.outputs[0])].buffer;
    bytes += g.buffers_[size_t(from)].nbytes;
    take_over(from, g.values_[size_t(op.inputs[0])].buffer);
    ++reused;
  }
  lifetimes(g);
  if (!reused) return "nothing to reuse";
  return std::to_string(reused) + " output(s) written over a dying input (" + std::to_string(bytes) +
         " bytes no longer a buffer of their own)";
}

}  // namespace dg::jit
