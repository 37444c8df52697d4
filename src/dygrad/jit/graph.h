// dygrad.jit's core (docs/jit.md): a capture, an op sink on the calling thread that records every op a Python
// function issues (its operands as values: buffer, offset, sizes, strides, dtype; never the capture's tensors), and
// the Graph built from it, which a later call replays as one Task. And the segment batcher: where the function
// reads values on the host (a cut), Python runs each call and the ops between two cuts are gathered and enqueued as
// one Task.
//
// Both run their sub-ops with the eager guarantees: each sub-op's kernel is the one eager would run, on the same
// operands' geometry with the same attributes (so the results are bitwise eager's); RNG counters are reserved anew
// at each launch, in the order eager would reserve them; the poisoned-input rule applies per sub-op (a failing
// sub-op poisons what it and the sub-ops after it make, and leaves buffers that existed before the launch as they
// were); version counters of buffers visible outside are bumped at launch as eager bumps them.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dygrad/core/storage_hooks.h"
#include "dygrad/core/tensor.h"
#include "dygrad/jit/fusion.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/op_sink.h"

namespace dg::jit {

// Where the memory of a captured operand comes from at a replay.
enum class BufferKind : uint8_t {
  Fixed,     // existed before the capture and is no argument: the same buffer each replay (parameters, optimizer
             // state, a learning-rate tensor), held by the graph
  Argument,  // the storage of tensor argument `arg`: bound at each call
  Internal,  // made and dropped inside the function: a slot of the graph's arena, planned by lifetime
  Escaping,  // made inside and kept after it (a returned tensor, a new .grad): a new buffer each replay
};
const char* buffer_kind_name(BufferKind k);

struct Buffer {
  BufferKind kind = BufferKind::Internal;
  Ref<Storage> fixed;          // Fixed
  int32_t arg = -1;            // Argument: which tensor argument
  int64_t arg_byte_offset = 0;  // Argument: that argument's storage offset at the capture, in bytes
  size_t nbytes = 0;           // Internal, Escaping
  MemoryCategory category = MemoryCategory::Activation;  // Escaping: as the capture's buffer
  size_t arena_offset = 0;     // Internal
  uint32_t version_at_start = 0;  // Fixed, Argument: before the capture's first write
  uint32_t bumps = 0;             // Fixed, Argument: version bumps the function made (replayed at launch)
  bool written = false;        // some op writes it
  bool read_before_written = false;  // Internal: an op read it before any op wrote it (host-made data)
  bool host_memory = false;    // made over external memory (from NumPy) inside the function
  int32_t first = -1, last = -1;  // the first and last op that use it
  const Storage* capture_storage = nullptr;  // identity while the capture runs (never dereferenced after it)
  bool alive = true;           // Internal: not destroyed when the capture ended
};

// A tensor operand as the graph sees it.
struct Value {
  int32_t buffer = -1;
  int64_t offset = 0;  // elements of `dtype`
  Dims sizes, strides;
  DType dtype = DType::Float32;
  bool is_view = false;
};

struct GraphOp {
  const OpDef* op = nullptr;
  Kernel kernel = nullptr;
  Attrs attrs;
  CallSite site;  // file points into Graph::files
  std::vector<int32_t> inputs, outputs;  // value indices
  bool random = false;
  uint64_t rng_delta = 0;  // its first counter minus the capture's first
  size_t scratch = 0;      // its declared scratch at these shapes
  OpCost cost;             // its cost at these shapes (a fused op: its members'): the replay's, summed
};

// A host read inside the function: the function is cut there.
struct Cut {
  size_t before_op = 0;  // the number of ops captured before it
  std::string reader, file;
  uint32_t line = 0;
};

class Graph;

// The capture: on the calling thread from construction to end(). Ops run as usual (it consumes nothing).
class Capture final : public OpSink, public StorageLifeLog {
 public:
  // `args`: the function's tensor arguments (bound per call at replay). `fullgraph`: a host read raises, naming the
  // reader and the line (dygrad.jit(fullgraph=True)).
  explicit Capture(std::vector<Tensor> args, bool fullgraph = false);
  ~Capture() override;
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  void end();  // leaves the op sinks and the storage life log; idempotent

  bool on_op(const OpCall& call) override;
  void on_host_read(const HostRead& read) override;
  void on_storage_born(const Storage* s, bool external) override;
  void on_storage_died(const Storage* s) override;

  // After end(): the graph whose replay returns `results` (new buffers each replay where the capture's were made
  // inside the function, else views of the arguments or of fixed buffers). Synchronizes (a kernel error of the
  // capture raises here). Null when it cannot be replayed without Python: `problems()` says why.
  std::shared_ptr<Graph> build(const std::vector<Tensor>& results);
  // The forward of a backward that runs outside the function (a compiled Module's forward under grad mode): the
  // buffers made inside and still alive (what the autograd graph saved, and the results' own) escape too. Each is
  // appended to the graph's results as a flat uint8 view of its whole buffer, and `saved` gets the same views of
  // the capture's buffers, in the same order: a capture of the backward takes them as arguments, so its replay
  // binds each to the forward replay's buffer.
  std::shared_ptr<Graph> build_with_saved(const std::vector<Tensor>& results, std::vector<Tensor>& saved);

  // The device whose stream the graph replays on: its ops' (docs/jit.md, "On a device").
  Device device() const { return device_; }
  const std::vector<Cut>& cuts() const { return cuts_; }
  const std::vector<std::string>& problems() const { return problems_; }
  size_t num_ops() const { return ops_.size(); }
  // One line per captured op: "name(shapes) dtype  file:line".
  std::vector<std::string> describe() const;

 private:
  std::shared_ptr<Graph> build_impl(const std::vector<Tensor>& results, std::vector<Tensor>* saved);
  int32_t buffer_of(const Tensor& t, bool as_output, size_t op_index, bool filled = false);
  int32_t value_of(const Tensor& t, bool as_output, size_t op_index, bool filled = false);
  const char* intern(const char* file);
  void problem(std::string text);
  // Once a second device exists: the op's device, which must be the graph's; a copy between devices is a problem.
  [[gnu::noinline]] void note_device(const OpCall& call);

  std::vector<Tensor> args_;
  std::mutex mutex_;  // the storage life log may be told from another thread
  std::unordered_map<const Storage*, int32_t> live_;  // a storage seen or born during the capture -> its buffer
  std::vector<Buffer> buffers_;
  std::vector<Value> values_;
  std::vector<GraphOp> ops_;
  std::vector<Cut> cuts_;
  std::vector<std::string> problems_;
  std::vector<std::unique_ptr<std::string>> files_;
  uint64_t rng_seed_ = 0, rng_first_ = 0;
  Device device_ = Device::cpu();
  uint32_t streams_ = 1;  // bit per stream id its ops ran on (the CPU's always)
  bool device_seen_ = false;
  bool sink_in_ = false, log_in_ = false, ended_ = false, fullgraph_ = false;
  friend class Graph;
};

// A captured function, replayed as one Task.
class Graph : public std::enable_shared_from_this<Graph> {
 public:
  // Binds the arguments, makes the escaping buffers, reserves RNG counters, bumps versions, and enqueues the replay.
  // Returns the results (in build()'s order). Raises (before enqueuing anything) when an argument cannot be bound:
  // the caller falls back to eager.
  std::vector<Tensor> launch(const std::vector<Tensor>& args);

  size_t num_ops() const { return ops_.size(); }
  Device device() const { return device_; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t max_scratch() const { return max_scratch_; }
  // The ops' costs at the captured shapes, summed: the replay's cost (the stream's run-ahead estimate).
  const OpCost& cost() const { return cost_; }
  size_t num_escaping() const;
  std::vector<std::string> describe() const;
  // The addresses of the Fixed buffers (identity guards: a .grad the graph accumulates into must still be that one).
  std::vector<uintptr_t> fixed_addresses() const;
  // The recorded graph, read-only, for tools that translate it (dygrad.onnx: docs/onnx.md): its buffers, the values
  // over them, its ops in issue order and the values its replay returns.
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<GraphOp>& ops() const { return ops_; }
  const std::vector<int32_t>& results() const { return results_; }

  // O1 (docs/jit-fusion.md): a new graph of this one's ops after the passes of `config` (DCE, CSE, elementwise
  // fusion), with its own arena planned from the new lifetimes. `log` gets the graph after each pass. Its fused
  // sub-ops run the interpreter until load_kernels() gives them their generated code.
  std::shared_ptr<Graph> optimized(const PassConfig& config, std::vector<PassLog>* log = nullptr) const;
  const std::vector<std::shared_ptr<FusedProgram>>& programs() const { return programs_; }
  // The generated C++ of its fused programs (one translation unit), "" when it has none.
  std::string source() const;
  // dlopen()s a shared object compiled from source() and gives each program its function. Raises on failure.
  // measure: the first launches time each program's generated function against the interpreter and keep the
  // faster (FusedProgram::choice); otherwise the generated functions run.
  void load_kernels(const std::string& path, bool measure = true);
  // Per program: "measuring", "generated" or "interpreted" (what its launches run now).
  std::vector<std::string> kernel_choices() const;
  bool kernels_loaded() const;

  // The replay Task's kernel and scratch (jit/graph.cpp).
  struct Launch;
  void run(Task& task, Launch& launch);

 private:
  friend class Capture;
  friend class SymbolicGraph;
  friend struct Passes;
  // Plans what follows from the sizes: the arena, the internal buffers' storages, the bound slots, the prebuilt Tasks.
  void prepare();
  Tensor make_tensor(const Value& v, const Ref<Storage>& storage, int64_t byte_shift) const;
  // Once a second device exists: the other streams' event the replay waits for (a copy still reading or writing a
  // buffer it uses), folded over its fixed and argument buffers.
  [[gnu::noinline]] uint64_t foreign_wait(const std::vector<Ref<Storage>>& storages) const;
  Device device_ = Device::cpu();  // the stream it replays on; its arena and escaping buffers are this device's
  std::vector<Buffer> buffers_;
  std::vector<Value> values_;
  std::vector<GraphOp> ops_;
  std::vector<int32_t> results_;  // value indices
  std::vector<std::unique_ptr<std::string>> files_;
  Ref<Storage> arena_;
  size_t arena_bytes_ = 0;
  std::vector<Ref<Storage>> internal_;  // per buffer (Internal only): a Storage over its arena slot
  size_t max_scratch_ = 0;
  OpCost cost_;
  uint64_t rng_total_ = 0;
  bool uses_rng_ = false;
  // Per op, prebuilt: a Task whose operands over Fixed and Internal buffers are held, and the positions bound per
  // launch (values over Argument and Escaping buffers).
  struct Patch {
    uint32_t op;
    bool output;
    uint32_t position;
    uint32_t bound;  // index into Launch::bound
  };
  std::vector<Task> tasks_;
  std::vector<Patch> patches_;
  std::vector<int32_t> bound_values_;  // per bound slot: its value
  std::vector<int32_t> value_bound_;   // per value: its bound slot, or -1
  std::vector<std::pair<int32_t, uint32_t>> bumps_;  // (buffer, bumps) of Fixed and Argument buffers written
  // O1: its fused programs.
  std::vector<std::shared_ptr<FusedProgram>> programs_;
};

// The segment batcher: on the calling thread while a function with cuts runs; consumes each op and enqueues those
// gathered as one Task at the next host read and at flush(). Collectives and other side-effect ops are not
// gathered: what is pending is enqueued first, then they go to the stream as eager.
class SegmentBatcher final : public OpSink, public StorageLifeLog {
 public:
  SegmentBatcher();
  ~SegmentBatcher() override;
  SegmentBatcher(const SegmentBatcher&) = delete;
  SegmentBatcher& operator=(const SegmentBatcher&) = delete;
  void flush(bool at_host_read = false);  // enqueues what is pending (the segment's Task: jit_segment)
  void end();    // flush(), then leaves the sinks and the log; idempotent
  size_t segments() const { return segments_; }
  size_t ops_gathered() const { return ops_gathered_; }

  bool on_op(const OpCall& call) override;
  void on_host_read(const HostRead& read) override;
  void on_storage_born(const Storage* s, bool external) override;
  void on_storage_died(const Storage* s) override;

  struct Pending;
  // Once a second device exists: a segment gathers one device's ops (an op of another device flushes it first) and
  // a copy between devices passes through as eager issues it. True: the op goes to the stream as eager.
  [[gnu::noinline]] bool route_by_device(const OpCall& call);

 private:
  std::mutex mutex_;
  std::unordered_map<const Storage*, bool> born_;  // storages made since the segment began
  std::shared_ptr<Pending> pending_;
  size_t segments_ = 0, ops_gathered_ = 0;
  bool in_ = false, flushing_ = false;
};

// Whether a capture or a segment batcher is active on this thread (a nested dygrad.jit call then runs inline).
bool active_on_this_thread();

}  // namespace dg::jit
