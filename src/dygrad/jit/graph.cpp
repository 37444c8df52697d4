// dygrad.jit: capture at the dispatcher, replay as one Task, and the segment batcher (jit/graph.h, docs/jit.md).
#include "dygrad/jit/graph.h"

#include <algorithm>
#include <cstring>

#include "dygrad/core/error.h"
#include "dygrad/core/shape.h"
#include "dygrad/core/storage.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/profiler/profiler.h"
#include "dygrad/runtime/context.h"
#include "dygrad/runtime/poison.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/stream.h"

namespace dg::jit {

const char* buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::Fixed: return "fixed";
    case BufferKind::Argument: return "argument";
    case BufferKind::Internal: return "internal";
    case BufferKind::Escaping: return "escaping";
  }
  return "?";
}

namespace {
thread_local int tls_active = 0;

// The replay and segment Tasks' attributes: what they run, by identity.
struct GraphAttrs {
  static constexpr const char* kName = "GraphAttrs";
  std::shared_ptr<Graph> graph;
  std::shared_ptr<Graph::Launch> launch;
  DG_ATTRS_FIELDS(graph, launch);
};
struct SegmentAttrs {
  static constexpr const char* kName = "SegmentAttrs";
  std::shared_ptr<SegmentBatcher::Pending> pending;
  bool cut = false;  // enqueued at a host read (the host-read trait), not at the function's end
  DG_ATTRS_FIELDS(pending, cut);
};
bool segment_reads_host(const Attrs& attrs) { return attrs.get<SegmentAttrs>().cut; }

std::string site_text(const CallSite& site) {
  if (!site.file) return "";
  return std::string(" (at ") + site.file + ":" + std::to_string(site.line) + ", in a graph dygrad.jit replayed)";
}

// The devices a copy between devices joins, for messages: "cpu to test:0".
std::string copy_devices(const OpCall& call) {
  const Tensor* from = call.inputs.empty() ? nullptr : &call.inputs[0];
  const Tensor* to = call.outputs.empty() ? nullptr : &call.outputs[0];
  return (from && from->defined() ? from->device().str() : std::string("?")) + " to " +
         (to && to->defined() ? to->device().str() : std::string("?"));
}

// One sub-op of a replay or a segment, with the stream's rules (runtime/stream.cpp run_task / run_kernel) applied
// per sub-op: a sub-op reading a poisoned buffer does not run; of its outputs, buffers that existed before the
// launch keep their values, the others are poisoned; a failing kernel poisons its outputs; a full overwrite clears
// poison. The first failure is kept and raised by the caller once every sub-op has had its turn.
struct SubRun {
  uint64_t seq = 0;    // the Task's sequence number on its stream
  uint64_t event = 0;  // the same as an event (core/device.h): the poison mark of what a failing sub-op makes
  int stream = 0;
  bool failed = false;
  ErrorKind kind = ErrorKind::Runtime;
  std::string message;
  char* scratch_base = nullptr;
  size_t scratch_capacity = 0;
};

// `existed(i)`: output i's buffer existed before the launch (a parameter, optimizer state, an argument).
template <typename Existed>
void run_sub_unprofiled(Task& sub, size_t scratch, Existed existed, SubRun& state);
// With the profiler on, each sub-op is a range named with its source line, inside its Task's device span.
template <typename Existed>
void run_sub(Task& sub, size_t scratch, Existed existed, SubRun& state) {
  if (!profiler::recording()) [[likely]] return run_sub_unprofiled(sub, scratch, existed, state);
  const int64_t begin = profiler::now_ns();
  run_sub_unprofiled(sub, scratch, existed, state);
  if (sub.op == &op_jit_fused)  // a fused sub-op is named by the ops it replaced (its records name their lines)
    profiler::record_sub_op(("jit_fused[" + sub.attrs.get<FusedAttrs>().program->name + "]").c_str(), sub.site,
                            begin, profiler::now_ns());
  else
    profiler::record_sub_op(sub.op->name, sub.site, begin, profiler::now_ns());
}

// The poisoned-input rule per sub-op, inside a fused sub-op (docs/jit-fusion.md): what eager would have done op by
// op. A record reading a poisoned slot or a skipped record's result is skipped; its store does not happen, and the
// slot is poisoned unless it existed before the launch and before the failure (then it keeps its values and later
// records read them). The kernel runs the records not skipped (an interpreter run); `poison_after` gets the outputs
// to poison once it has. False: every record is skipped (nothing to run).
template <typename Existed>
bool fused_skips(Task& sub, Existed existed, const SubRun& state,
                 std::vector<std::pair<size_t, uint64_t>>& poison_after) {
  bool any = false;
  for (const Tensor& in : sub.inputs) any = any || (in.defined() && in.storage().poisoned_by());
  if (!any) return true;
  FusedAttrs& attrs = sub.attrs.get<FusedAttrs>();
  const FusedProgram& p = *attrs.program;
  auto tensor_of = [&](size_t s) -> Tensor& {
    return p.slot_output[s] >= 0 ? sub.outputs[size_t(p.slot_output[s])] : sub.inputs[size_t(p.slot_input[s])];
  };
  std::vector<uint64_t> slot_bad(p.num_slots()), record_bad(p.records.size(), 0);
  for (size_t s = 0; s < p.num_slots(); ++s) slot_bad[s] = tensor_of(s).storage().poisoned_by();
  auto skip = std::make_shared<FusedSkip>();
  skip->record.assign(p.records.size(), 0);
  size_t skipped = 0;
  for (size_t r = 0; r < p.records.size(); ++r) {
    const FusedRecord& rec = p.records[r];
    uint64_t bad = 0;
    for (int j = 0; j < fused_op_arity(rec.op) && !bad; ++j)
      bad = rec.in[j].record >= 0 ? record_bad[size_t(rec.in[j].record)] : slot_bad[size_t(rec.in[j].slot)];
    if (!bad) {
      if (rec.out_slot >= 0) slot_bad[size_t(rec.out_slot)] = 0;
      continue;
    }
    skip->record[r] = 1;
    ++skipped;
    record_bad[r] = bad;
    if (rec.out_slot < 0) continue;
    const size_t o = size_t(p.slot_output[size_t(rec.out_slot)]);
    const uint64_t bad_here = event_stream(bad) == state.stream ? event_seq(bad) : 0;
    if (!(existed(o) && sub.outputs[o].storage().birth_seq() < bad_here)) slot_bad[size_t(rec.out_slot)] = bad;
  }
  for (size_t s = 0; s < p.num_slots(); ++s)
    if (p.slot_output[s] >= 0 && slot_bad[s] && !sub.outputs[size_t(p.slot_output[s])].storage().poisoned_by())
      poison_after.emplace_back(size_t(p.slot_output[s]), slot_bad[s]);
  if (skipped == p.records.size()) {
    for (const auto& [o, bad] : poison_after) sub.outputs[o].storage().poison(bad);
    return false;
  }
  if (skipped) attrs.skip = std::move(skip);
  return true;
}

template <typename Existed>
void run_sub_unprofiled(Task& sub, size_t scratch, Existed existed, SubRun& state) {
  std::vector<std::pair<size_t, uint64_t>> poison_after;
  if (sub.op == &op_jit_fused) [[unlikely]] {
    if (!fused_skips(sub, existed, state, poison_after)) return;
  } else {
    for (const Tensor& in : sub.inputs) {
      if (!in.defined()) continue;
      if (const uint64_t bad = in.storage().poisoned_by()) {
        // Birth is compared on this stream's numbers; a failure on another stream counts as before every buffer
        // here (runtime/stream.cpp, run_task).
        const uint64_t bad_here = event_stream(bad) == state.stream ? event_seq(bad) : 0;
        for (size_t i = 0; i < sub.outputs.size(); ++i) {
          Tensor& out = sub.outputs[i];
          if (!out.defined() || out.storage().poisoned_by()) continue;
          if (!(existed(i) && out.storage().birth_seq() < bad_here)) out.storage().poison(bad);
        }
        return;
      }
    }
  }
  alignas(ScratchArena) unsigned char arena_bytes[sizeof(ScratchArena)];
  // As the stream does: an op that declares scratch gets an arena, empty when it declares 0 bytes for these shapes.
  sub.scratch = sub.op->scratch ? new (arena_bytes) ScratchArena(sub.op->name, state.scratch_base, scratch) : nullptr;
  auto fail_with = [&](ErrorKind kind, std::string message) {
    for (Tensor& out : sub.outputs)
      if (out.defined()) out.storage().poison(state.event);
    if (state.failed) return;
    state.failed = true;
    state.kind = kind;
    state.message = std::move(message) + site_text(sub.site);
  };
  try {
    sub.kernel(sub);
  } catch (const Error& e) {
    fail_with(e.kind(), e.message());
    return;
  } catch (const std::exception& e) {
    fail_with(ErrorKind::Runtime, std::string("[") + sub.op->name + "] " + e.what());
    return;
  }
  sub.scratch = nullptr;
  clear_poison_of_overwritten(sub);
  if (sub.op == &op_jit_fused) [[unlikely]] {
    sub.attrs.get<FusedAttrs>().skip.reset();
    for (const auto& [o, bad] : poison_after) sub.outputs[o].storage().poison(bad);
  }
}

size_t round_up(size_t n) { return (n + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

size_t declared_scratch(const Task& t) { return t.op->scratch ? round_up(t.op->scratch(t)) : 0; }

}  // namespace

bool active_on_this_thread() { return tls_active > 0; }

// ---------------------------------------------------------------------------------------------------------------
// The replay Task
struct Graph::Launch {
  std::vector<Tensor> bound;  // per bound slot
  uint64_t rng_seed = 0, rng_base = 0;
  // Keeps the argument storages and escaping buffers alive until the replay has run.
};

namespace {
void graph_kernel(Task& task) {
  GraphAttrs& a = task.attrs.get<GraphAttrs>();
  a.graph->run(task, *a.launch);
}
size_t graph_scratch(const Task& task) { return task.attrs.get<GraphAttrs>().graph->max_scratch(); }
void segment_kernel(Task& task);
size_t segment_scratch(const Task& task);
OpCost segment_cost(const Task& task);
OpCost graph_cost(const Task& task);
}  // namespace

const OpDef op_jit_graph("jit_graph", attrs_type<GraphAttrs>(),
                         {.cost = graph_cost, .flags = kOpSideEffect | kOpNeverInline, .scratch = graph_scratch});
const OpDef op_jit_segment("jit_segment", attrs_type<SegmentAttrs>(),
                           {.cost = segment_cost, .flags = kOpSideEffect, .scratch = segment_scratch,
                            .host_read = segment_reads_host});
DG_REGISTER_KERNEL(jit_graph, Device::Type::CPU, graph_kernel);
DG_REGISTER_KERNEL(jit_segment, Device::Type::CPU, segment_kernel);

// ---------------------------------------------------------------------------------------------------------------
// Capture
Capture::Capture(std::vector<Tensor> args, bool fullgraph) : args_(std::move(args)), fullgraph_(fullgraph) {
  for (size_t k = 0; k < args_.size(); ++k) {
    const Tensor& t = args_[k];
    if (!t.defined() || live_.count(&t.storage())) continue;
    Buffer b;
    b.kind = BufferKind::Argument;
    b.arg = static_cast<int32_t>(k);
    b.arg_byte_offset = t.storage_offset() * static_cast<int64_t>(t.itemsize());
    b.capture_storage = &t.storage();
    b.nbytes = t.storage().nbytes();
    live_[&t.storage()] = static_cast<int32_t>(buffers_.size());
    buffers_.push_back(std::move(b));
  }
  const RngState rng = rng_state();
  rng_seed_ = rng.seed;
  rng_first_ = rng.offset;
  set_storage_life_log(this);
  log_in_ = true;
  op_sinks::push(*this);
  sink_in_ = true;
  ++tls_active;
}

Capture::~Capture() {
  try {
    end();
  } catch (...) {
  }
  if (log_in_) set_storage_life_log(nullptr);
}

void Capture::end() {
  if (ended_) return;
  ended_ = true;
  if (sink_in_) op_sinks::remove(*this);
  sink_in_ = false;
  --tls_active;
  const RngState rng = rng_state();
  if (rng.seed != rng_seed_) problem("the process generator was reseeded inside the function (manual_seed)");
}

void Capture::problem(std::string text) {
  if (std::find(problems_.begin(), problems_.end(), text) == problems_.end()) problems_.push_back(std::move(text));
}

void Capture::note_device(const OpCall& call) {
  // A graph replays as one Task on one device's stream (docs/jit.md, "On a device"): every op of it on that device.
  // A copy between devices runs on a stream of its own choice and the other side's memory is ordered by another
  // stream; such a function runs as segments, one device's ops each, the copies between them as eager issues them.
  const Device device = task_device(call.op, call.inputs, call.outputs);
  streams_ |= 1u << stream_id(device);
  if (call.op.flags & kOpCrossDevice) {
    problem(std::string("[") + call.op.name + "] copies from " + copy_devices(call) + " inside the function" +
            site_text(call.site) + ": a graph replays on one device's stream, so the function runs as segments, "
            "one device's ops each, with the copies between them; copy the data before the call to replay it whole");
    return;
  }
  if (!device_seen_) {
    device_seen_ = true;
    device_ = device;
  } else if (device != device_) {
    problem(std::string("[") + call.op.name + "] runs on " + device.str() + ", ops before it on " + device_.str() +
            site_text(call.site) + ": a graph replays on one device's stream, so the function runs as segments");
  }
}

const char* Capture::intern(const char* file) {
  if (!file) return nullptr;
  for (const auto& f : files_)
    if (*f == file) return f->c_str();
  files_.push_back(std::make_unique<std::string>(file));
  return files_.back()->c_str();
}

int32_t Capture::buffer_of(const Tensor& t, bool as_output, size_t op_index, bool filled) {
  const Storage* s = &t.storage();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(s);
  int32_t index;
  if (it != live_.end()) {
    index = it->second;
  } else {  // existed before the capture began
    Buffer b;
    b.kind = BufferKind::Fixed;
    b.fixed = t.impl()->storage;
    b.capture_storage = s;
    b.nbytes = s->nbytes();
    index = static_cast<int32_t>(buffers_.size());
    live_[s] = index;
    buffers_.push_back(std::move(b));
  }
  Buffer& b = buffers_[static_cast<size_t>(index)];
  if (b.first < 0) b.first = static_cast<int32_t>(op_index);
  b.last = static_cast<int32_t>(op_index);
  if (as_output) {
    b.written = true;
    if (b.kind != BufferKind::Internal) ++b.bumps;
  } else if (b.kind == BufferKind::Internal && !b.written) {
    // a collective's result slot is written by the communication thread (OpDef::filled_input), not read
    (filled ? b.written : b.read_before_written) = true;
  }
  return index;
}

int32_t Capture::value_of(const Tensor& t, bool as_output, size_t op_index, bool filled) {
  if (!t.defined()) return -1;
  Value v;
  v.buffer = buffer_of(t, as_output, op_index, filled);
  v.offset = t.storage_offset();
  v.sizes = Dims(t.shape().begin(), t.shape().end());
  v.strides = Dims(t.strides().begin(), t.strides().end());
  v.dtype = t.dtype();
  v.is_view = t.is_view();
  values_.push_back(std::move(v));
  return static_cast<int32_t>(values_.size() - 1);
}

bool Capture::on_op(const OpCall& call) {
  if (!cpu_only()) [[unlikely]] note_device(call);
  if (op_sinks::detail::tls_first != this)
    problem("an op sink opened inside the function (a recompute or checkpoint context) sees its ops first");
  const size_t index = ops_.size();
  GraphOp g;
  g.op = &call.op;
  // A copy between devices is never replayed (note_device: a problem), and its operands' devices differ.
  g.kernel = (call.op.flags & kOpCrossDevice) ? nullptr : resolve_kernel(call.op, call.inputs, call.outputs);
  g.attrs = call.attrs;
  g.site = call.site;
  g.site.file = intern(call.site.file);
  g.site.function = nullptr;
  const int filled = call.op.input_filled(call.attrs, call.inputs.size());
  for (size_t k = 0; k < call.inputs.size(); ++k)
    g.inputs.push_back(value_of(call.inputs[k], false, index, static_cast<int>(k) == filled));
  for (const Tensor& t : call.outputs) g.outputs.push_back(value_of(t, true, index));
  if (call.op.flags & kOpRandom) {
    const RngCounter* rng = call.attrs.rng();
    if (!rng || rng->seed != rng_seed_ || rng->offset < rng_first_) {
      problem(std::string("[") + call.op.name + "] draws from a generator= object, not the process generator" +
              site_text(call.site));
    } else {
      g.random = true;
      g.rng_delta = rng->offset - rng_first_;
    }
  }
  {
    Task t;
    t.op = &call.op;
    for (const Tensor& x : call.inputs) t.inputs.push_back(Tensor::borrow(x));
    for (const Tensor& x : call.outputs) t.outputs.push_back(Tensor::borrow(x));
    t.attrs = call.attrs;
    if (call.op.scratch) g.scratch = declared_scratch(t);
    g.cost = t.cost();
    for (Tensor& x : t.inputs) x.forget_borrowed();
    for (Tensor& x : t.outputs) x.forget_borrowed();
  }
  ops_.push_back(std::move(g));
  return false;
}

void Capture::on_host_read(const HostRead& read) {
  if (fullgraph_)
    fail(ErrorKind::Runtime, "[", read.reader ? read.reader : "read", "] reads a tensor's values on the host inside a "
         "function compiled with fullgraph=True: the graph would be cut here",
         read.site.file ? std::string(" (at ") + read.site.file + ":" + std::to_string(read.site.line) + ")" : "");
  Cut c;
  c.before_op = ops_.size();
  c.reader = read.reader ? read.reader : "read";
  c.file = read.site.file ? read.site.file : "";
  c.line = read.site.line;
  cuts_.push_back(std::move(c));
}

void Capture::on_storage_born(const Storage* s, bool external) {
  std::lock_guard<std::mutex> lock(mutex_);
  Buffer b;
  b.kind = BufferKind::Internal;
  b.nbytes = s->nbytes();
  b.category = s->category();
  b.host_memory = external;
  b.capture_storage = s;
  live_[s] = static_cast<int32_t>(buffers_.size());
  buffers_.push_back(std::move(b));
}

void Capture::on_storage_died(const Storage* s) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(s);
  if (it == live_.end()) return;
  buffers_[static_cast<size_t>(it->second)].alive = false;
  live_.erase(it);
}

static std::vector<std::string> describe_ops(const std::vector<GraphOp>& ops, const std::vector<Value>& values,
                                      const std::vector<Buffer>& buffers) {
  std::vector<std::string> lines;
  for (const GraphOp& g : ops) {
    std::string line = g.op->name;
    if (g.op == &op_jit_fused) line += "[" + g.attrs.get<FusedAttrs>().program->name + "]";
    line += "(";
    bool first = true;
    DType dtype = DType::Float32;
    bool any = false;
    for (int32_t v : g.inputs) {
      if (!first) line += ", ";
      first = false;
      if (v < 0) {
        line += "None";
        continue;
      }
      const Value& val = values[static_cast<size_t>(v)];
      line += shape_str(val.sizes);
      if (val.buffer >= 0 && buffers[static_cast<size_t>(val.buffer)].kind != BufferKind::Internal &&
          buffers[static_cast<size_t>(val.buffer)].kind != BufferKind::Escaping)
        line += std::string(":") + buffer_kind_name(buffers[static_cast<size_t>(val.buffer)].kind);
    }
    line += ") -> (";
    first = true;
    for (int32_t v : g.outputs) {
      if (!first) line += ", ";
      first = false;
      if (v < 0) continue;
      const Value& val = values[static_cast<size_t>(v)];
      line += shape_str(val.sizes);
      if (!any) dtype = val.dtype, any = true;
    }
    line += ") ";
    line += dtype_name(dtype);
    if (g.site.file) line += std::string("  ") + g.site.file + ":" + std::to_string(g.site.line);
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<std::string> Capture::describe() const { return describe_ops(ops_, values_, buffers_); }

std::shared_ptr<Graph> Capture::build(const std::vector<Tensor>& results) { return build_impl(results, nullptr); }

std::shared_ptr<Graph> Capture::build_with_saved(const std::vector<Tensor>& results, std::vector<Tensor>& saved) {
  return build_impl(results, &saved);
}

std::shared_ptr<Graph> Capture::build_impl(const std::vector<Tensor>& results, std::vector<Tensor>* saved) {
  DG_CHECK(ended_, Runtime, "[jit] internal error: build() before end()");
  // Tasks that have run drop their operands: what is still alive afterwards is held by someone. A kernel error of
  // the capture stays pending for the caller's next sync point, as eager's would (wait_for(0) reclaims and raises
  // only errors of Tasks up to 0: none).
  // Every stream the capture's ops ran on (the CPU's, and a device's).
  for (int id = 0; id < kMaxStreams; ++id)
    if ((streams_ >> id) & 1u) Stream::by_id(id)->wait_until_run(Stream::by_id(id)->enqueued());
  run_release_hooks();  // the communication thread's finished operations drop their tensors
  for (int id = 0; id < kMaxStreams; ++id)
    if ((streams_ >> id) & 1u) Stream::by_id(id)->wait_for(0);
  std::vector<int32_t> result_values;
  for (const Tensor& r : results) {
    if (!r.defined()) {
      result_values.push_back(-1);
      continue;
    }
    const int32_t v = value_of(r, false, ops_.size());
    Buffer& b = buffers_[static_cast<size_t>(values_[static_cast<size_t>(v)].buffer)];
    if (b.kind == BufferKind::Internal) {
      if (!b.written) problem("it returns a tensor made from host data inside the function (dg.tensor, from_numpy)");
      b.kind = BufferKind::Escaping;
      b.category = r.storage().category();  // as it is now: a gradient is retagged after it is made
    }
    result_values.push_back(v);
  }
  if (saved && cuts_.empty()) {
    // Every buffer made by an op inside and still alive escapes: a flat view of it ends the results.
    for (size_t bi = 0; bi < buffers_.size(); ++bi) {
      Buffer& b = buffers_[bi];
      const bool made = b.kind == BufferKind::Escaping || (b.kind == BufferKind::Internal && b.alive && b.first >= 0);
      if (!made || !b.written || b.host_memory || !b.capture_storage) continue;
      b.kind = BufferKind::Escaping;
      b.category = b.capture_storage->category();
      Ref<Storage> storage(const_cast<Storage*>(b.capture_storage));  // alive: the life log saw no death
      auto impl = make_ref<TensorImpl>(std::move(storage), Dims{static_cast<int64_t>(b.nbytes)}, Dims{1}, 0,
                                       DType::UInt8);
      Tensor flat(std::move(impl));
      result_values.push_back(value_of(flat, false, ops_.size()));
      saved->push_back(std::move(flat));
    }
  }
  set_storage_life_log(nullptr);
  log_in_ = false;
  if (!cuts_.empty()) return nullptr;
  for (const Buffer& b : buffers_) {
    if (b.kind != BufferKind::Internal && b.kind != BufferKind::Escaping) continue;
    if (b.first < 0 && b.kind == BufferKind::Internal) continue;  // never used by an op
    const std::string where = b.first >= 0 ? site_text(ops_[static_cast<size_t>(b.first)].site) : "";
    const std::string reader = b.first >= 0 ? std::string(" (") + ops_[static_cast<size_t>(b.first)].op->name + ")" : "";
    if (b.read_before_written || (b.host_memory && b.first >= 0))
      problem("an op" + reader + " reads a tensor made from host data inside the function (dg.tensor, from_numpy: "
              "a replay cannot see Python's values)" + where);
    else if (b.kind == BufferKind::Internal && b.alive)
      problem("a tensor made inside the function is still referenced after it returned (stored on an object, or "
              "held by the autograd graph of an output whose backward runs outside the function)" + where);
  }
  if (!problems_.empty()) return nullptr;

  auto g = std::make_shared<Graph>();
  g->device_ = device_;
  g->buffers_ = std::move(buffers_);
  g->values_ = std::move(values_);
  g->ops_ = std::move(ops_);
  g->files_ = std::move(files_);
  g->results_ = std::move(result_values);
  g->rng_total_ = rng_state().offset - rng_first_;
  g->prepare();
  return g;
}

// ---------------------------------------------------------------------------------------------------------------
// Graph
void Graph::prepare() {
  // Sizes are the graph's own (a capture's, or an instance of a symbolic graph: jit/symbolic.h), so is everything
  // planned from them here: the arena, the prebuilt Tasks and each sub-op's declared scratch.
  // An operand of a side-effect op (a collective's comm_start) is read or written outside the stream, by the
  // communication thread, until its comm_wait: its buffer lives to the end of the graph (eager keeps it alive through
  // the Work's reference; a shorter lifetime would let a later sub-op reuse its arena slot meanwhile).
  const int32_t end = static_cast<int32_t>(ops_.size());
  for (const GraphOp& op : ops_) {
    if (!(op.op->flags & kOpSideEffect)) continue;
    for (const auto* list : {&op.inputs, &op.outputs})
      for (int32_t v : *list)
        if (v >= 0) buffers_[size_t(values_[size_t(v)].buffer)].last = end;
  }
  // The arena: Internal buffers placed by lifetime (ops first..last), largest first, each at the lowest offset free
  // over its lifetime.
  std::vector<int32_t> internal;
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].kind == BufferKind::Internal && buffers_[i].first >= 0) internal.push_back(int32_t(i));
  std::stable_sort(internal.begin(), internal.end(), [&](int32_t a, int32_t b) {
    return buffers_[size_t(a)].nbytes > buffers_[size_t(b)].nbytes;
  });
  std::vector<int32_t> placed;
  for (int32_t bi : internal) {
    Buffer& b = buffers_[size_t(bi)];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int32_t pi : placed) {
      const Buffer& p = buffers_[size_t(pi)];
      if (p.first <= b.last && b.first <= p.last) busy.emplace_back(p.arena_offset, p.arena_offset + round_up(p.nbytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    const size_t need = round_up(std::max<size_t>(b.nbytes, 1));
    for (const auto& [lo, hi] : busy) {
      if (offset + need <= lo) break;
      offset = std::max(offset, hi);
    }
    b.arena_offset = offset;
    arena_bytes_ = std::max(arena_bytes_, offset + need);
    placed.push_back(bi);
  }
  internal_.resize(buffers_.size());
  if (arena_bytes_ > 0) {
    MemoryCategoryScope category(MemoryCategory::Activation);
    arena_ = Storage::allocate(arena_bytes_, device_);
    // A device's memory is never touched on the host: its address only (the replay's sub-ops touch it).
    char* base = device_.is_cpu() ? static_cast<char*>(arena_->data())
                                  : static_cast<char*>(const_cast<void*>(arena_->address()));
    for (int32_t bi : internal) {
      const Buffer& b = buffers_[size_t(bi)];
      internal_[size_t(bi)] = Storage::wrap_external(base + b.arena_offset, b.nbytes, [](void*) {}, nullptr, device_);
    }
  }

  // Bound slots: values over Argument and Escaping buffers.
  value_bound_.assign(values_.size(), -1);
  for (size_t v = 0; v < values_.size(); ++v) {
    const int32_t bi = values_[v].buffer;
    if (bi < 0) continue;
    const BufferKind k = buffers_[size_t(bi)].kind;
    if (k == BufferKind::Argument || k == BufferKind::Escaping) {
      value_bound_[v] = static_cast<int32_t>(bound_values_.size());
      bound_values_.push_back(static_cast<int32_t>(v));
    }
  }
  // The prebuilt Tasks.
  tasks_.resize(ops_.size());
  cost_ = OpCost{};
  for (size_t i = 0; i < ops_.size(); ++i) {
    const GraphOp& op = ops_[i];
    Task& t = tasks_[i];
    t.op = op.op;
    t.kernel = op.kernel;
    t.attrs = op.attrs;
    t.site = op.site;
    auto add = [&](int32_t v, bool output, uint32_t position) {
      if (v < 0) return Tensor();
      if (value_bound_[size_t(v)] >= 0) {
        patches_.push_back({uint32_t(i), output, position, uint32_t(value_bound_[size_t(v)])});
        return Tensor();
      }
      const Value& val = values_[size_t(v)];
      const Buffer& b = buffers_[size_t(val.buffer)];
      return make_tensor(val, b.kind == BufferKind::Fixed ? b.fixed : internal_[size_t(val.buffer)], 0);
    };
    for (size_t j = 0; j < op.inputs.size(); ++j) t.inputs.push_back(add(op.inputs[j], false, uint32_t(j)));
    for (size_t j = 0; j < op.outputs.size(); ++j) t.outputs.push_back(add(op.outputs[j], true, uint32_t(j)));
    max_scratch_ = std::max(max_scratch_, op.scratch);
    cost_.flops += op.cost.flops;
    cost_.bytes += op.cost.bytes;
    if (op.random) {
      uses_rng_ = true;
    }
  }
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    const Buffer& b = buffers_[bi];
    if ((b.kind == BufferKind::Fixed || b.kind == BufferKind::Argument) && b.bumps > 0)
      bumps_.emplace_back(int32_t(bi), b.bumps);
  }
}

Tensor Graph::make_tensor(const Value& v, const Ref<Storage>& storage, int64_t byte_shift) const {
  const int64_t item = static_cast<int64_t>(itemsize(v.dtype));
  DG_CHECK(byte_shift % item == 0, Value, "[jit] an argument's storage offset moved by ", byte_shift,
           " bytes, not a whole number of ", dtype_name(v.dtype), " elements");
  const int64_t offset = v.offset + byte_shift / item;
  check_view_bounds("jit", v.sizes, v.strides, offset, static_cast<int64_t>(storage->nbytes()) / item);
  auto impl = make_ref<TensorImpl>(storage, v.sizes, v.strides, offset, v.dtype);
  impl->is_view = v.is_view;
  return Tensor(std::move(impl));
}

size_t Graph::num_escaping() const {
  size_t n = 0;
  for (const Buffer& b : buffers_) n += b.kind == BufferKind::Escaping;
  return n;
}

std::vector<uintptr_t> Graph::fixed_addresses() const {
  std::vector<uintptr_t> out;
  for (const Buffer& b : buffers_)
    if (b.kind == BufferKind::Fixed) out.push_back(reinterpret_cast<uintptr_t>(b.fixed->address()));
  return out;
}

std::vector<std::string> Graph::describe() const { return describe_ops(ops_, values_, buffers_); }

std::vector<Tensor> Graph::launch(const std::vector<Tensor>& args) {
  auto launch = std::make_shared<Launch>();
  // Buffers of this launch: the arguments' storages (with how far their offsets moved) and new escaping buffers.
  std::vector<Ref<Storage>> storages(buffers_.size());
  std::vector<int64_t> shifts(buffers_.size(), 0);
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    const Buffer& b = buffers_[bi];
    if (b.kind == BufferKind::Argument) {
      DG_CHECK(size_t(b.arg) < args.size() && args[size_t(b.arg)].defined(), Value,
               "[jit] tensor argument ", b.arg, " is missing");
      const Tensor& a = args[size_t(b.arg)];
      storages[bi] = a.impl()->storage;
      shifts[bi] = a.storage_offset() * static_cast<int64_t>(a.itemsize()) - b.arg_byte_offset;
    } else if (b.kind == BufferKind::Escaping) {
      MemoryCategoryScope category(b.category);
      storages[bi] = Storage::allocate(b.nbytes, device_);
    }
  }
  if (!programs_.empty()) {
    // A fused sub-op reads each operand at an element before it stores that element anywhere (docs/jit-fusion.md):
    // right while the buffers it reads and writes are distinct. An argument bound to a buffer the graph holds as
    // fixed (a parameter passed in as well as reached through the module) would alias: refused, the call runs
    // eagerly (O0 keeps eager's order and would be right, but this graph is the fused one).
    for (size_t a = 0; a < buffers_.size(); ++a) {
      if (buffers_[a].kind != BufferKind::Argument) continue;
      for (const Buffer& f : buffers_)
        DG_CHECK(f.kind != BufferKind::Fixed || f.fixed.get() != storages[a].get(), Value, "[jit] tensor argument ",
                 buffers_[a].arg, " shares its storage with a buffer the fused graph holds (a parameter or state "
                 "the function also reaches)");
    }
  }
  launch->bound.reserve(bound_values_.size());
  for (int32_t v : bound_values_) {
    const Value& val = values_[size_t(v)];
    launch->bound.push_back(make_tensor(val, storages[size_t(val.buffer)], shifts[size_t(val.buffer)]));
  }
  std::vector<Tensor> results;
  results.reserve(results_.size());
  for (int32_t v : results_) {
    if (v < 0) {
      results.emplace_back();
      continue;
    }
    const Value& val = values_[size_t(v)];
    const Buffer& b = buffers_[size_t(val.buffer)];
    const Ref<Storage>& s = b.kind == BufferKind::Fixed ? b.fixed : storages[size_t(val.buffer)];
    results.push_back(make_tensor(val, s, shifts[size_t(val.buffer)]));
  }
  if (uses_rng_) {
    const RngState r = reserve_rng(rng_total_);
    launch->rng_seed = r.seed;
    launch->rng_base = r.offset;
  } else if (rng_total_ > 0) {
    reserve_rng(rng_total_);
  }
  for (const auto& [bi, n] : bumps_) {
    Storage& s = buffers_[size_t(bi)].kind == BufferKind::Fixed ? *buffers_[size_t(bi)].fixed : *storages[size_t(bi)];
    for (uint32_t k = 0; k < n; ++k) s.bump_version();
  }
  // The Task holds the graph (the kernel runs it) and this launch's buffers until it has run. On a device's stream
  // (or after another stream's event) it goes in as a batch (docs/jit.md, "On a device").
  std::shared_ptr<Graph> self = shared_from_this();
  const uint64_t wait = cpu_only() ? 0 : foreign_wait(storages);
  const uint64_t seq = device_.is_cpu() && wait == 0
                           ? enqueue(op_jit_graph, std::span<const Tensor>(), std::span<const Tensor>(),
                                     GraphAttrs{self, launch})
                           : enqueue_batch(device_, op_jit_graph, GraphAttrs{self, launch}, wait);
  if (seq > 0) {
    bool external = false;
    for (size_t bi = 0; bi < buffers_.size(); ++bi) {
      const Buffer& b = buffers_[bi];
      if (!b.written) continue;
      Storage* s = b.kind == BufferKind::Fixed ? b.fixed.get() : storages[bi].get();
      if (!s) continue;
      s->set_last_write_seq(seq);
      external = external || s->shared_with_host();
    }
    if (external) Stream::of(device_).wait_for(seq);
  }
  return results;
}

uint64_t Graph::foreign_wait(const std::vector<Ref<Storage>>& storages) const {
  // What cross_stream_wait gives an eager Task, per buffer that existed before the launch: a read waits for another
  // stream's pending write (a copy into it), a write for its pending use (a copy still reading it).
  const Stream& stream = Stream::of(device_);
  uint64_t wait = 0;
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    const Buffer& b = buffers_[bi];
    const Storage* s = b.kind == BufferKind::Fixed ? b.fixed.get() : b.kind == BufferKind::Argument ? storages[bi].get()
                                                                                                     : nullptr;
    if (s) wait = stream.fold_wait(wait, b.written ? s->foreign_use() : s->foreign_write());
  }
  return wait;
}

void Graph::run(Task& task, Launch& launch) {
  for (const Ref<Storage>& s : internal_)
    if (s) s->poison(0);  // a failed earlier replay's marks (the arena is reused)
  SubRun state;
  state.seq = task.seq;
  state.stream = task.stream;
  state.event = make_event(task.stream, task.seq);
  if (max_scratch_ > 0) state.scratch_base = task_scratch(task).take<char>(static_cast<int64_t>(max_scratch_));
  size_t next_patch = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    Task& sub = tasks_[i];
    const GraphOp& op = ops_[i];
    const size_t first_patch = next_patch;
    for (; next_patch < patches_.size() && patches_[next_patch].op == i; ++next_patch) {
      const Patch& p = patches_[next_patch];
      (p.output ? sub.outputs[p.position] : sub.inputs[p.position]) = Tensor::borrow(launch.bound[p.bound]);
    }
    if (op.random) {
      RngCounter* rng = sub.attrs.rng();
      rng->seed = launch.rng_seed;
      rng->offset = launch.rng_base + op.rng_delta;
    }
    sub.seq = task.seq;
    run_sub(sub, op.scratch, [&](size_t o) {
      const int32_t v = op.outputs[o];
      if (v < 0) return false;
      const BufferKind k = buffers_[size_t(values_[size_t(v)].buffer)].kind;
      return k == BufferKind::Fixed || k == BufferKind::Argument;
    }, state);
    for (size_t p = first_patch; p < next_patch; ++p) {
      const Patch& patch = patches_[p];
      (patch.output ? sub.outputs[patch.position] : sub.inputs[patch.position]).forget_borrowed();
    }
  }
  if (state.failed) throw Error(state.kind, state.message);
}

// ---------------------------------------------------------------------------------------------------------------
// The segment batcher
struct SegmentBatcher::Pending {
  Device device = Device::cpu();  // the stream it runs on: its ops' device
  uint64_t wait = 0;              // another stream's event it waits for (a copy into or from its buffers)
  std::vector<Task> tasks;
  std::vector<std::vector<uint8_t>> existed;  // per task, per output
  std::vector<size_t> scratch;
  size_t max_scratch = 0;
  OpCost cost;
};

namespace {
void gather_device(const OpCall& call, SegmentBatcher::Pending& p);
void segment_kernel(Task& task) {
  SegmentBatcher::Pending& p = *task.attrs.get<SegmentAttrs>().pending;
  SubRun state;
  state.seq = task.seq;
  state.stream = task.stream;
  state.event = make_event(task.stream, task.seq);
  if (p.max_scratch > 0) state.scratch_base = task_scratch(task).take<char>(static_cast<int64_t>(p.max_scratch));
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    Task& sub = p.tasks[i];
    sub.seq = task.seq;
    const std::vector<uint8_t>& existed = p.existed[i];
    run_sub(sub, p.scratch[i], [&](size_t o) { return existed[o] != 0; }, state);
  }
  if (state.failed) throw Error(state.kind, state.message);
}
size_t segment_scratch(const Task& task) { return task.attrs.get<SegmentAttrs>().pending->max_scratch; }
OpCost segment_cost(const Task& task) { return task.attrs.get<SegmentAttrs>().pending->cost; }
OpCost graph_cost(const Task& task) { return task.attrs.get<GraphAttrs>().graph->cost(); }
}  // namespace

SegmentBatcher::SegmentBatcher() {
  set_storage_life_log(this);
  op_sinks::push(*this);
  in_ = true;
  ++tls_active;
}

SegmentBatcher::~SegmentBatcher() {
  try {
    end();
  } catch (...) {
  }
}

void SegmentBatcher::end() {
  if (!in_) return;
  try {
    flush();
  } catch (...) {
    op_sinks::remove(*this);
    set_storage_life_log(nullptr);
    in_ = false;
    --tls_active;
    throw;
  }
  op_sinks::remove(*this);
  set_storage_life_log(nullptr);
  in_ = false;
  --tls_active;
}

bool SegmentBatcher::on_op(const OpCall& call) {
  if (!cpu_only()) [[unlikely]] {
    if (route_by_device(call)) return false;
  }
  bool host_shared = false;
  for (const Tensor& t : call.outputs) host_shared = host_shared || (t.defined() && t.storage().shared_with_host());
  if ((call.op.flags & kOpSideEffect) || host_shared || call.attrs.type() != call.op.attrs_type || flushing_) {
    flush();  // in stream order: what is gathered first, then this op as eager issues it
    return false;
  }
  const Kernel kernel = resolve_kernel(call.op, call.inputs, call.outputs);
  for (const Tensor& out : call.outputs)
    DG_CHECK(!out.defined() || !out.is_view() || !has_internal_overlap(out.shape(), out.strides()), Runtime, "[",
             call.op.name, "] unsupported operation: more than one element of the written-to tensor (shape ",
             out.shape(), ", strides ", out.strides(), ") refers to a single memory location. Please clone() the "
             "tensor before performing the operation.");
  if (!pending_) pending_ = std::make_shared<Pending>();
  Pending& p = *pending_;
  p.tasks.emplace_back();
  Task& t = p.tasks.back();
  t.op = &call.op;
  t.kernel = kernel;
  for (const Tensor& x : call.inputs) t.inputs.push_back(x);
  for (const Tensor& x : call.outputs) t.outputs.push_back(x);
  t.attrs = call.attrs;
  t.site = call.site;
  std::vector<uint8_t> existed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Tensor& x : call.outputs) existed.push_back(x.defined() && !born_.count(&x.storage()));
  }
  p.existed.push_back(std::move(existed));
  if (!cpu_only()) [[unlikely]] gather_device(call, p);
  const size_t scratch = declared_scratch(t);
  p.scratch.push_back(scratch);
  p.max_scratch = std::max(p.max_scratch, scratch);
  const OpCost c = t.cost();
  p.cost.flops += c.flops;
  p.cost.bytes += c.bytes;
  ++ops_gathered_;
  return true;
}

bool SegmentBatcher::route_by_device(const OpCall& call) {
  const Device device = task_device(call.op, call.inputs, call.outputs);
  if (call.op.flags & kOpCrossDevice) {
    flush();  // what was gathered first, then the copy on the stream eager gives it
    return true;
  }
  if (pending_ && pending_->device != device) flush();
  return false;
}

namespace {
// A gathered op's device is its segment's; the segment's Task waits for what an eager Task of its operands would
// (Stream::cross_stream_wait).
[[gnu::noinline]] void gather_device(const OpCall& call, SegmentBatcher::Pending& p) {
  if (p.tasks.size() == 1) p.device = task_device(call.op, call.inputs, call.outputs);
  const Stream& stream = Stream::of(p.device);
  for (const Tensor& t : call.inputs)
    if (t.defined()) p.wait = stream.fold_wait(p.wait, t.storage().foreign_write());
  for (const Tensor& t : call.outputs)
    if (t.defined()) p.wait = stream.fold_wait(p.wait, t.storage().foreign_use());
}
}  // namespace

void SegmentBatcher::on_host_read(const HostRead& read) {
  (void)read;
  flush(true);
}

void SegmentBatcher::on_storage_born(const Storage* s, bool external) {
  (void)external;
  std::lock_guard<std::mutex> lock(mutex_);
  born_[s] = true;
}

void SegmentBatcher::on_storage_died(const Storage* s) {
  std::lock_guard<std::mutex> lock(mutex_);
  born_.erase(s);
}

void SegmentBatcher::flush(bool at_host_read) {
  if (!pending_ || flushing_) return;
  std::shared_ptr<Pending> p = std::move(pending_);
  pending_.reset();
  flushing_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{flushing_};
  // The written buffers: the segment's Task is their last writer.
  std::vector<Storage*> written;
  for (const Task& t : p->tasks)
    for (const Tensor& out : t.outputs)
      if (out.defined()) written.push_back(&out.storage());
  const uint64_t seq = p->device.is_cpu() && p->wait == 0
                           ? enqueue(op_jit_segment, std::span<const Tensor>(), std::span<const Tensor>(),
                                     SegmentAttrs{p, at_host_read})
                           : enqueue_batch(p->device, op_jit_segment, SegmentAttrs{p, at_host_read}, p->wait);
  if (seq > 0)
    for (Storage* s : written) s->set_last_write_seq(seq);
  ++segments_;
  std::lock_guard<std::mutex> lock(mutex_);
  born_.clear();
}

}  // namespace dg::jit
