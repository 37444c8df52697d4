// dygrad.jit's O1 pass pipeline (jit/passes.h, docs/jit-fusion.md): the order the passes run in, the small passes
// (dead code, common subexpressions, lifetimes, slot aliases) and the Graph's O1 entry points (optimized, the
// generated source, loading its kernels). Fusion is jit/fusion.cpp; the other passes have files of their own.
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dygrad/core/error.h"
#include "dygrad/jit/fusion.h"
#include "dygrad/jit/graph.h"
#include "dygrad/jit/passes.h"

namespace dg::jit {

namespace {

// What a pass may remove or merge: ops whose kernels compute from their operands and attributes only and raise on
// no value (elementwise, reductions, matmuls on floating results), never side effects or random draws.
bool pure(const GraphOp& op, const std::vector<Value>& values) {
  if (op.op->flags & (kOpSideEffect | kOpRandom | kOpDataDependentShape)) return false;
  if (op.op->fusion == FusionClass::Opaque || op.op->host_read) return false;
  if (op.op == &op_jit_fused) return false;
  // An integer result may come from a kernel that raises on values (an index out of range); a boolean one from an
  // elementwise op (a comparison, a logical op) never does.
  for (int32_t v : op.outputs)
    if (v >= 0 && !is_floating(values[size_t(v)].dtype) &&
        !(values[size_t(v)].dtype == DType::Bool && op.op->fusion == FusionClass::Elementwise))
      return false;
  return true;
}

bool same_geometry(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.dtype == b.dtype &&
         std::ranges::equal(a.sizes, b.sizes) && std::ranges::equal(a.strides, b.strides);
}

}  // namespace

// Lifetimes of Internal buffers from the ops as they now are (prepare() plans the arena from them).
void Passes::lifetimes(Graph& g) {
  for (Buffer& b : g.buffers_)
    if (b.kind == BufferKind::Internal) b.first = b.last = -1;
  for (size_t i = 0; i < g.ops_.size(); ++i)
    for (const auto* list : {&g.ops_[i].inputs, &g.ops_[i].outputs})
      for (int32_t v : *list) {
        if (v < 0) continue;
        Buffer& b = g.buffers_[size_t(g.values_[size_t(v)].buffer)];
        if (b.kind != BufferKind::Internal) continue;
        if (b.first < 0) b.first = int32_t(i);
        b.last = int32_t(i);
      }
}

// Dead code: walking back from the end, an op is live when it has a side effect, may raise, or writes a buffer that
// is visible outside the graph (fixed, argument, escaping) or that a later live op reads. Refuses: nothing of
// docs/jit.md's guarantees depends on a dead pure op (its RNG counters, if it had drawn, are still reserved by the
// launch's total; it bumps no version: it writes only internal buffers).
std::string Passes::dce(Graph& g) {
  std::vector<uint8_t> needed(g.buffers_.size(), 0);
  for (size_t b = 0; b < g.buffers_.size(); ++b) needed[b] = g.buffers_[b].kind != BufferKind::Internal;
  std::vector<uint8_t> live(g.ops_.size(), 0);
  for (size_t i = g.ops_.size(); i-- > 0;) {
    const GraphOp& op = g.ops_[i];
    bool keep = !pure(op, g.values_) || op.op == &op_jit_fused;
    for (int32_t v : op.outputs)
      if (v >= 0 && needed[size_t(g.values_[size_t(v)].buffer)]) keep = true;
    if (!keep) continue;
    live[i] = 1;
    for (int32_t v : op.inputs)
      if (v >= 0) needed[size_t(g.values_[size_t(v)].buffer)] = 1;
    for (int32_t v : op.outputs)
      if (v >= 0) needed[size_t(g.values_[size_t(v)].buffer)] = 1;
  }
  std::vector<GraphOp> kept;
  for (size_t i = 0; i < g.ops_.size(); ++i)
    if (live[i]) kept.push_back(std::move(g.ops_[i]));
  const size_t removed = g.ops_.size() - kept.size();
  g.ops_ = std::move(kept);
  return removed ? "removed " + std::to_string(removed) + " op(s) whose results nothing reads" : "nothing to remove";
}

// Common subexpressions: op j is op i again (the same OpDef, kernel and attributes, input values of the same
// geometry, no write into an input between them) and each of their outputs is an internal buffer that op alone
// writes, of one geometry: j is dropped and its buffers' values read i's. Refuses random and side-effect ops and
// ops that may raise (pure()).
std::string Passes::cse(Graph& g) {
  std::vector<int32_t> writers(g.buffers_.size(), 0);
  for (const GraphOp& op : g.ops_)
    for (int32_t v : op.outputs)
      if (v >= 0) ++writers[size_t(g.values_[size_t(v)].buffer)];
  auto own_outputs = [&](const GraphOp& op) {
    for (int32_t v : op.outputs) {
      if (v < 0) return false;
      const int32_t b = g.values_[size_t(v)].buffer;
      if (g.buffers_[size_t(b)].kind != BufferKind::Internal || writers[size_t(b)] != 1) return false;
    }
    return true;
  };
  std::vector<uint8_t> drop(g.ops_.size(), 0);
  std::vector<int32_t> remap(g.buffers_.size(), -1);
  size_t merged = 0;
  for (size_t j = 0; j < g.ops_.size(); ++j) {
    GraphOp& oj = g.ops_[j];
    // inputs read through buffers an earlier merge replaced
    for (int32_t& v : oj.inputs)
      if (v >= 0 && remap[size_t(g.values_[size_t(v)].buffer)] >= 0) {
        Value copy = g.values_[size_t(v)];
        copy.buffer = remap[size_t(copy.buffer)];
        g.values_.push_back(copy);
        v = int32_t(g.values_.size() - 1);
      }
    if (!pure(oj, g.values_) || !own_outputs(oj)) continue;
    for (size_t i = j; i-- > 0;) {
      const GraphOp& oi = g.ops_[i];
      if (drop[i] || oi.op != oj.op || oi.kernel != oj.kernel || oi.inputs.size() != oj.inputs.size() ||
          oi.outputs.size() != oj.outputs.size() || !(oi.attrs == oj.attrs) || !own_outputs(oi))
        continue;
      bool same = true;
      for (size_t k = 0; k < oi.inputs.size() && same; ++k) {
        const int32_t a = oi.inputs[k], b = oj.inputs[k];
        same = (a < 0 && b < 0) || (a >= 0 && b >= 0 && same_geometry(g.values_[size_t(a)], g.values_[size_t(b)]));
      }
      for (size_t k = 0; k < oi.outputs.size() && same; ++k) {
        const Value& a = g.values_[size_t(oi.outputs[k])];
        const Value& b = g.values_[size_t(oj.outputs[k])];
        same = a.offset == b.offset && a.dtype == b.dtype && std::ranges::equal(a.sizes, b.sizes) &&
               std::ranges::equal(a.strides, b.strides) &&
               g.buffers_[size_t(a.buffer)].nbytes == g.buffers_[size_t(b.buffer)].nbytes;
      }
      if (!same) continue;
      // No op between them writes what they read.
      std::set<int32_t> read;
      for (int32_t v : oj.inputs)
        if (v >= 0) read.insert(g.values_[size_t(v)].buffer);
      bool written_between = false;
      for (size_t m = i + 1; m < j && !written_between; ++m) {
        if (drop[m]) continue;
        for (int32_t v : g.ops_[m].outputs)
          if (v >= 0 && read.count(g.values_[size_t(v)].buffer)) written_between = true;
      }
      if (written_between) continue;
      for (size_t k = 0; k < oi.outputs.size(); ++k)
        remap[size_t(g.values_[size_t(oj.outputs[k])].buffer)] = g.values_[size_t(oi.outputs[k])].buffer;
      drop[j] = 1;
      ++merged;
      break;
    }
  }
  if (!merged) return "nothing to merge";
  std::vector<GraphOp> kept;
  for (size_t i = 0; i < g.ops_.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(g.ops_[i]));
  g.ops_ = std::move(kept);
  // Results (never internal) and side-effect operands need no remap: only internal buffers merge.
  return "merged " + std::to_string(merged) + " op(s) into an earlier equal one";
}

void Passes::alias_slots(Graph& g) {
  for (GraphOp& op : g.ops_) {
    if (op.op != &op_jit_fused) continue;
    FusedProgram& p = *op.attrs.get<FusedAttrs>().program;
    p.slot_base.clear();
    p.slot_delta.clear();
    if (p.row_reduction || p.full_reduction) continue;
    const size_t slots = p.num_slots();
    auto value = [&](size_t s) -> const Value& {
      const int32_t v = p.slot_output[s] >= 0 ? op.outputs[size_t(p.slot_output[s])] : op.inputs[size_t(p.slot_input[s])];
      return g.values_[size_t(v)];
    };
    std::vector<int32_t> base(slots);
    std::vector<int64_t> delta(slots, 0);
    bool any = false;
    for (size_t s = 0; s < slots; ++s) {
      base[s] = int32_t(s);
      const Value& vs = value(s);
      for (size_t b = 0; b < s; ++b) {
        const Value& vb = value(b);
        if (base[b] != int32_t(b) || vb.buffer != vs.buffer || p.slot_dtype[b] != p.slot_dtype[s] ||
            p.strides[b] != p.strides[s])
          continue;
        base[s] = int32_t(b);
        delta[s] = vs.offset - vb.offset;
        any = true;
        break;
      }
    }
    if (!any) continue;
    p.slot_base = std::move(base);
    p.slot_delta = std::move(delta);
  }
}

void Passes::run(Graph& g, const PassConfig& config, std::vector<PassLog>* log) {
  if (log) log->push_back({"captured", g.describe(), ""});
  auto step = [&](const char* name, std::string (*pass)(Graph&)) {
    std::string note = pass(g);
    if (log) log->push_back({name, g.describe(), std::move(note)});
  };
  if (config.rematerialize) step("versions", &Passes::versions);
  if (config.cse) step("cse", &Passes::cse);
  if (config.dce) step("dce", &Passes::dce);
  if (config.fold) step("fold", &Passes::fold);
  if (config.patterns) step("patterns", &Passes::patterns);
  if (config.rematerialize) step("rematerialize", &Passes::rematerialize);
  if (config.fusion) step("fusion", &Passes::fuse);
  if (config.inplace) step("inplace", &Passes::inplace);
  alias_slots(g);
  lifetimes(g);
}

// ---------------------------------------------------------------------------------------------------------------
// Graph's O1 entry points
std::shared_ptr<Graph> Graph::optimized(const PassConfig& config, std::vector<PassLog>* log) const {
  auto g = std::make_shared<Graph>();
  g->device_ = device_;
  g->buffers_ = buffers_;
  for (Buffer& b : g->buffers_) b.arena_offset = 0;
  g->values_ = values_;
  g->ops_ = ops_;
  g->results_ = results_;
  g->rng_total_ = rng_total_;
  // Its own copy of the call sites' file names: holding the captured graph for them held its arena too (the
  // composed GPT-2 step's O0 arena stayed allocated beside the O1 one).
  std::unordered_map<const char*, const char*> files;
  for (const auto& f : files_) {
    g->files_.push_back(std::make_unique<std::string>(*f));
    files[f->c_str()] = g->files_.back()->c_str();
  }
  for (GraphOp& op : g->ops_)
    if (op.site.file) op.site.file = files.at(op.site.file);
  Passes::run(*g, config, log);
  g->prepare();
  return g;
}

std::string Graph::source() const { return programs_.empty() ? std::string() : generate_cpp(programs_); }

bool Graph::kernels_loaded() const {
  for (const auto& p : programs_)
    if (!p->compiled.load(std::memory_order_acquire)) return false;
  return true;
}

std::vector<std::string> Graph::kernel_choices() const {
  std::vector<std::string> out;
  for (const auto& p : programs_) {
    if (!p->compiled.load(std::memory_order_acquire)) {
      out.emplace_back("interpreted");  // not loaded (yet): the interpreter runs it
      continue;
    }
    const FusedProgram::Choice c = p->choice.load(std::memory_order_relaxed);
    out.emplace_back(c == FusedProgram::Choice::Measuring ? "measuring"
                     : c == FusedProgram::Choice::Generated ? "generated" : "interpreted");
  }
  return out;
}

void Graph::load_kernels(const std::string& path, bool measure) {
  // One handle per shared object for the process (never closed: a replay in flight may be running its code).
  static std::mutex mutex;
  static std::map<std::string, void*> handles;
  void* handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = handles.find(path);
    if (it != handles.end()) {
      handle = it->second;
    } else {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      DG_CHECK(handle, Runtime, "[jit] cannot load the generated kernels ", path, ": ", dlerror());
      handles[path] = handle;
    }
  }
  std::vector<FusedProgram::Fn> fns;
  for (const auto& p : programs_) {
    const std::string name = "dg_fused_" + std::to_string(p->index);
    void* f = dlsym(handle, name.c_str());
    DG_CHECK(f, Runtime, "[jit] the generated kernels ", path, " have no ", name);
    fns.push_back(reinterpret_cast<FusedProgram::Fn>(f));
  }
  for (size_t k = 0; k < programs_.size(); ++k) {
    FusedProgram& p = *programs_[k];
    p.trials.store(0, std::memory_order_relaxed);
    for (auto& b : p.best_ns) b.store(INT64_MAX, std::memory_order_relaxed);
    p.choice.store(measure ? FusedProgram::Choice::Measuring : FusedProgram::Choice::Generated,
                   std::memory_order_relaxed);
    p.compiled.store(fns[k], std::memory_order_release);
  }
}

}  // namespace dg::jit
