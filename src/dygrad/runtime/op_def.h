// The op table's record (OpDef) and the unit of work (Task). Every op is data: one OpDef per op, declared with
// its backward formula, cost model and traits in ops/; each backend registers its kernels for it by name
// (DG_REGISTER_KERNEL in backend/<device>/), and the stream resolves the kernel for the operands' device at
// enqueue. The same Task is what the stream runs, the profiler names and the JIT records. See docs/ops.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dygrad/core/allocator.h"
#include "dygrad/core/device.h"
#include "dygrad/core/dtype.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/attrs.h"

namespace dg {

struct Task;
class Node;
class ScratchArena;

// What a fusing JIT may do with an op: Elementwise (outputs depend on the same index of broadcast inputs),
// Reduction (over dims), Matmul, Opaque (anything else: the JIT keeps it a Task of its own).
enum class FusionClass : uint8_t { Elementwise, Reduction, Matmul, Opaque };
const char* fusion_class_name(FusionClass f);

// Op traits the executor, profiler and JIT read (docs/ops.md, "What makes a Task traceable").
enum OpFlag : uint32_t {
  kOpDataDependentShape = 1u << 1,    // the output's shape depends on input values (the host reads them)
  kOpRandom = 1u << 2,                // consumes RNG counters (Attrs::rng(): seed and first counter)
  kOpSideEffect = 1u << 4,            // an effect beyond its outputs (a collective's communication): never dead
                                      // code, never reordered across another side effect
  kOpCrossDevice = 1u << 5,           // operands on two devices (a copy between them): the Task runs on the stream
                                      // ops/dispatch.cpp picks, with that device's kernel (docs/devices.md)
  kOpAnyDType = 1u << 6,              // its kernels take the storage-only dtypes too (uint32, uint64, float8:
                                      // copies, fills, equality); enqueue refuses them for every other op
                                      // (docs/dtypes.md, "Storage-only dtypes")
  kOpNeverInline = 1u << 7,           // a batch of sub-ops (jit_graph): never run inline on the host, whatever
                                      // its cost (docs/stream.md, "Inline execution")
};
const char* op_flag_name(OpFlag flag);

// The host-read trait: whether the call issuing a Task read values of its operands on the host first (a sync, so a
// traced graph must end before it): to size an output (nonzero's count, repeat_interleave without output_size) or
// to check values. A function of the attributes where it depends on them; host_read_always where it does not.
// The conformance sweep checks it against the reads the op sinks see (docs/ops.md, "Op sinks").
using HostReadFn = bool (*)(const Attrs& attrs);
bool host_read_always(const Attrs& attrs);

// The aliasing trait: output i of a Task is input alias_of(i, number of outputs), the same tensor, which the Task
// updates in place reading its old value (accumulations, optimizer steps), or -1: a buffer of its own. Checked at
// enqueue. alias_each_output: every output i is input i.
using AliasFn = int (*)(size_t output, size_t num_outputs);
int alias_each_output(size_t output, size_t num_outputs);

// The filled-input trait: the index of an input the Task hands to another thread to write (a collective's result
// slot, which comm_wait later names as its output), or -1. The JIT's capture counts that input as written there,
// not read: an all-gather into a fresh buffer is not a read of uninitialised (host) memory (docs/jit.md).
using FilledInputFn = int (*)(const Attrs& attrs, size_t num_inputs);

struct OpCost {
  double flops = 0;  // floating-point operations (a fused multiply-add counts 2)
  double bytes = 0;  // bytes read and written
};

// Where an op was issued: set by the caller (the Python binding records its frame; C++ users may set
// a scope), reported with a deferred kernel error.
struct CallSite {
  const char* file = nullptr;
  const char* function = nullptr;
  uint32_t line = 0;
};
CallSite current_call_site();
class CallSiteScope {
 public:
  explicit CallSiteScope(CallSite site);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  CallSite saved_;
};

// A kernel reads task.inputs and task.attrs and writes task.outputs (docs/ops.md).
using Kernel = void (*)(Task& task);
// Computes the gradients of a node's inputs from the gradients of its outputs, with dygrad ops (so
// backward is async and traceable too). grad_inputs has one slot per input; fill those node.needs_grad(i).
using BackwardFn = void (*)(Node& node, std::span<const Tensor> grad_outputs, std::span<Tensor> grad_inputs);
using CostFn = OpCost (*)(const Task& task);
// Bytes of temporary memory a kernel takes for itself while it runs (partial sums, packed panels), at most: the
// peak over the run, summed over the pool threads that run its chunks (runtime/scratch.h has the helpers);
// tests/cpp/test_scratch.cpp checks each declaration against the kernel's allocations.
using ScratchFn = size_t (*)(const Task& task);

// Recomputes output `output_nr` of the op's node from what the node itself saved for its backward, bitwise equal to
// the forward's (autograd/node.h, "Rematerialized saves"): a later node that saves that output keeps the producer
// instead of the tensor. Only for ops whose recompute is cheap next to the memory it saves (rms_norm).
using RematerializeFn = Tensor (*)(Node& producer, uint32_t output_nr);

// The optional parts of an op's declaration, by name: `{.fusion = FusionClass::Elementwise, .backward = f}`.
struct OpTraits {
  FusionClass fusion = FusionClass::Opaque;
  BackwardFn backward = nullptr;  // null: not differentiable (recording a Node for it raises)
  CostFn cost = nullptr;          // null: flops = output elements, bytes = inputs + outputs
  uint32_t flags = 0;
  ScratchFn scratch = nullptr;    // null: the kernel needs no memory beyond its outputs
  RematerializeFn rematerialize = nullptr;  // null: a node that saves an output keeps the tensor
  HostReadFn host_read = nullptr;  // null: the call reads nothing on the host
  AliasFn alias_of = nullptr;      // null: every output is a buffer of its own
  FilledInputFn filled_input = nullptr;  // null: every input is read
};

// What the stream has measured of an op's Tasks, for its run-ahead bound (runtime/run_ahead.h): exponentially
// weighted means of a Task's run time and cost units. Written by the threads that run Tasks (a lost update between
// two streams' workers only drops one sample), read at enqueue.
struct OpTiming {
  std::atomic<float> ns{0}, units{0}, samples{0};
};

struct OpDef {
  const char* name;
  const AttrsType* attrs_type;  // the attribute struct its Tasks carry (null: none); checked at enqueue
  FusionClass fusion;
  BackwardFn backward;
  CostFn cost;
  uint32_t flags;
  ScratchFn scratch;
  RematerializeFn rematerialize;
  HostReadFn host_read;
  AliasFn alias_of;
  FilledInputFn filled_input;
  mutable OpTiming timing;  // measured, not declared (runtime/run_ahead.h)

  // The traits for one Task's attributes and operands.
  bool reads_host(const Attrs& attrs) const { return host_read && host_read(attrs); }
  int output_alias(size_t output, size_t num_outputs) const { return alias_of ? alias_of(output, num_outputs) : -1; }
  int input_filled(const Attrs& attrs, size_t num_inputs) const {
    return filled_input ? filled_input(attrs, num_inputs) : -1;
  }

  OpDef(const char* name_, const AttrsType* attrs_type_, OpTraits traits = {});
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;

  // The kernel for a device type; null when no backend registered one.
  // The test device runs the CPU's kernels on its launcher, unless one is registered for it (docs/devices.md).
  Kernel kernel(Device::Type type) const {
    const Kernel k = kernels_[static_cast<int>(type)];
    return type == Device::Type::Test && !k ? kernels_[0] : k;
  }
  // The ISA level of that kernel (kKernelIsaBaseline, kKernelIsaAvx2, kKernelIsaAvx512).
  int kernel_isa(Device::Type type) const {
    return type == Device::Type::Test && !kernels_[static_cast<int>(type)] ? kernel_isa_[0]
                                                                           : kernel_isa_[static_cast<int>(type)];
  }

 private:
  friend void register_kernel(const char* op_name, Device::Type type, Kernel kernel, int isa);
  friend void attach_registered_kernels(OpDef& op);
  Kernel kernels_[kNumDeviceTypes] = {};
  uint8_t kernel_isa_[kNumDeviceTypes] = {};
};

// Every OpDef registers itself here at static initialisation: the one table.
const std::vector<const OpDef*>& all_ops();
const OpDef* find_op(const char* name);

// Kernel ISA levels: the CPU kernels are compiled once per level, into the library for the baseline ISA and into a
// plugin for AVX2 and one for AVX-512, of which the library loads the highest the CPU runs at start-up
// (runtime/cpu_isa.h); a kernel of a higher level replaces a lower one. DG_KERNEL_ISA is the level of the
// translation unit being compiled.
constexpr int kKernelIsaBaseline = 0;
constexpr int kKernelIsaAvx2 = 1;
constexpr int kKernelIsaAvx512 = 2;
#ifndef DG_KERNEL_ISA
#define DG_KERNEL_ISA 0
#endif

// Kernel registration, at load time (before main or when the library is loaded): the kernel of op `op_name`
// for device `type`, of ISA level `isa`. Order-independent: an OpDef made later picks up the kernels
// registered for its name, and the highest level registered for an (op, device) wins.
void register_kernel(const char* op_name, Device::Type type, Kernel kernel, int isa = kKernelIsaBaseline);
// Registrations whose op name matches no OpDef, or that registered a second kernel for the same (op, device):
// mistakes the op-table test reports ("name: reason").
std::vector<std::string> kernel_registry_problems();
// Backends mark themselves built when they load; an op without a kernel then says which is the case.
void register_backend(Device::Type type);
bool backend_built(Device::Type type);
// Facts a backend reports about itself (the CPU's "sgemm": "onednn" or "openblas"), for diagnostics and tests.
void set_backend_info(Device::Type type, const char* key, std::string value);
std::string backend_info(Device::Type type, const char* key);  // "" when unset

// In a backend's source file: DG_REGISTER_KERNEL(add, Device::Type::CPU, add_kernel).
#define DG_REGISTER_KERNEL(op, device, kernel) \
  DG_REGISTER_KERNEL_AT_(op, device, kernel, __COUNTER__)
#define DG_REGISTER_KERNEL_AT_(op, device, kernel, n) DG_REGISTER_KERNEL_AT2_(op, device, kernel, n)
#define DG_REGISTER_KERNEL_AT2_(op, device, kernel, n)                                              \
  [[maybe_unused]] static const bool dg_kernel_registered_##n =                                       \
      (::dg::register_kernel(#op, ::dg::device, kernel, DG_KERNEL_ISA), true)

struct Task {
  const OpDef* op = nullptr;
  Kernel kernel = nullptr;  // op->kernel(device), resolved at enqueue
  SmallVector<Tensor, 4> inputs;
  SmallVector<Tensor, 2> outputs;
  Attrs attrs;
  uint64_t seq = 0;  // position on the stream, 1-based
  uint8_t stream = 0;  // the stream's number (core/device.h, stream_id): (stream, seq) names the Task
  // An event (core/device.h) of another stream this Task waits for before it runs (a copy between devices, or a
  // write into a buffer such a copy still reads): CUDA's cudaStreamWaitEvent. 0: none.
  uint64_t wait_event = 0;
  CallSite site;
  // While the kernel runs: the Task's scratch (runtime/scratch.h, task_scratch), when its op declares any for it.
  ScratchArena* scratch = nullptr;

  OpCost cost() const;
  Task() = default;
  Task(const Task&) = default;
  Task& operator=(const Task&) = default;
  Task(Task&&) = default;
  Task& operator=(Task&&) = default;
  [[gnu::always_inline]] ~Task() = default;  // inlined into the stream's submit (bench/enqueue_callgrind.sh)
};

// The kernel of `op` for the device of the operands, or raises: NotImplemented naming the op and the device
// (and whether that device's backend is built at all), Runtime when the operands are on several devices.
// Called at enqueue, so a missing kernel is reported where the op is issued.
Kernel resolve_kernel(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
[[noreturn]] void raise_no_kernel(const OpDef& op, Device device);
[[noreturn]] void raise_devices_differ(const OpDef& op, Device a, Device b);

inline Kernel resolve_kernel(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  if (cpu_only()) [[likely]] {  // no other device has memory: every operand is a CPU tensor
    const Kernel k = op.kernel(Device::Type::CPU);
    if (!k) [[unlikely]] raise_no_kernel(op, Device::cpu());
    return k;
  }
  const Tensor* first = nullptr;
  for (std::span<const Tensor> operands : {inputs, outputs})
    for (const Tensor& t : operands) {
      if (!t.defined()) continue;
      if (!first) first = &t;
      else if (t.device() != first->device()) [[unlikely]] raise_devices_differ(op, first->device(), t.device());
    }
  const Device device = first ? first->device() : Device::cpu();
  const Kernel k = op.kernel(device.type);
  if (!k) [[unlikely]] raise_no_kernel(op, device);
  return k;
}

}  // namespace dg
