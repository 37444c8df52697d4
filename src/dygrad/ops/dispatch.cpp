// Task construction and enqueue.
#include "dygrad/ops/dispatch.h"
#include "dygrad/core/shape.h"
#include "dygrad/core/storage_only_flag.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/core/error.h"
#include "dygrad/ops/meta_eval.h"
#include "dygrad/runtime/op_sink.h"

namespace dg {

// --- meta evaluation (ops/meta_eval.h) ----------------------------------------------------------------------
namespace meta {
namespace {
// Meta evaluation is a process sink: it consumes every op, recording the scratch its Task would take. Host reads
// go ahead and read zeros (a meta buffer is untouched anonymous memory; docs/memory.md, "Dry run").
struct MetaSink final : OpSink {
  bool on_op(const OpCall& call) override {
    meta::enqueue(call.op, call.inputs, call.outputs, call.attrs);
    return true;
  }
} g_sink;
}  // namespace

void begin() {
  DG_CHECK(!active(), Runtime, "[memory.estimate] a meta evaluation is already running");
  set_active(true);
  op_sinks::add_process_sink(g_sink);
}

Stats end() {
  Stats s = current();
  op_sinks::remove_process_sink(g_sink);
  set_active(false);
  return s;
}

void enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs) {
  if (!op.scratch) {
    note_task(0);
    return;
  }
  Task task;  // borrowed operands: only the scratch declaration reads them
  task.op = &op;
  for (const Tensor& t : inputs) task.inputs.push_back(Tensor::borrow(t));
  for (const Tensor& t : outputs) task.outputs.push_back(Tensor::borrow(t));
  task.attrs = attrs;
  note_task(static_cast<int64_t>(op.scratch(task)));
  for (Tensor& t : task.inputs) t.forget_borrowed();
  for (Tensor& t : task.outputs) t.forget_borrowed();
}
}  // namespace meta

namespace {
// torch's NotImplementedError for an op without a kernel for a dtype: `"[add] not implemented for 'UInt32'"`.
[[gnu::noinline]] void check_operand_dtypes(const OpDef& op, std::span<const Tensor> inputs,
                                            std::span<const Tensor> outputs) {
  if (op.flags & kOpAnyDType) return;
  for (std::span<const Tensor> operands : {inputs, outputs})
    for (const Tensor& t : operands)
      DG_CHECK(!t.defined() || !is_storage_only(t.dtype()), NotImplemented, "[", api_name(op.name),
               "] not implemented for '", dtype_torch_name(t.dtype()), "'");
}
}  // namespace

uint64_t enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs) {
  const CallSite site = current_call_site();
  // One relaxed load until a uint32/uint64/float8 tensor exists: the check costs nothing before.
  if (detail::storage_only_dtype_seen_inline()) [[unlikely]] check_operand_dtypes(op, inputs, outputs);
  if (op_sinks::engaged()) [[unlikely]] {
    if (op_sinks::on_op(OpCall{op, inputs, outputs, attrs, site}))  // consumed: the outputs are as the sink left them
      return outputs.empty() ? 0 : outputs[0].storage().last_write_seq();
  }
  if (cpu_only()) [[likely]] {
    uint64_t seq = Stream::cpu().submit(op, inputs, outputs, attrs, site);
    for (const Tensor& t : outputs)
      if (t.defined() && t.storage().shared_with_host()) finish_write_if_external(t, seq);
    return seq;
  }
  const Device device = task_device(op, inputs, outputs);
  // A device without a kernel says so first (its stream may not exist either: a backend that is not built).
  if (!(op.flags & kOpCrossDevice) && !op.kernel(device.type)) [[unlikely]] raise_no_kernel(op, device);
  Stream& stream = Stream::of(device);
  uint64_t seq = stream.submit(op, inputs, outputs, attrs, site);
  for (const Tensor& t : outputs)
    if (t.defined() && t.storage().shared_with_host()) stream.wait_for(seq);
  return seq;
}

uint64_t enqueue_batch(Device device, const OpDef& op, const Attrs& attrs, uint64_t wait) {
  const CallSite site = current_call_site();
  if (op_sinks::engaged()) [[unlikely]] {
    if (op_sinks::on_op(OpCall{op, {}, {}, attrs, site})) return 0;
  }
  return Stream::of(device).submit_batch(op, attrs, site, wait);
}

Device task_device(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  // A copy between devices runs on the device's stream (a host-device copy is the device's DMA, as on CUDA): the
  // first operand not on the CPU, inputs first, so a copy from one device to another runs on the source's.
  if (op.flags & kOpCrossDevice) {
    for (std::span<const Tensor> operands : {inputs, outputs})
      for (const Tensor& t : operands)
        if (t.defined() && !t.device().is_cpu()) return t.device();
    return Device::cpu();
  }
  for (std::span<const Tensor> operands : {inputs, outputs})
    for (const Tensor& t : operands)
      if (t.defined()) return t.device();
  return Device::cpu();
}

uint64_t enqueue(const OpDef& op, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                 const Attrs& attrs) {
  return enqueue(op, std::span<const Tensor>(inputs.begin(), inputs.size()),
                 std::span<const Tensor>(outputs.begin(), outputs.size()), attrs);
}

namespace {
thread_local const char* tls_api_name = nullptr;
}
const char* api_name(const char* own_name) { return tls_api_name ? tls_api_name : own_name; }
ApiNameScope::ApiNameScope(const char* name) : saved_(tls_api_name) { tls_api_name = name; }
ApiNameScope::~ApiNameScope() { tls_api_name = saved_; }

void check_defined(const char* op, const Tensor& t, const char* argument) {
  DG_CHECK(t.defined(), Value, "[", op, "] argument '", argument, "' is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DG_CHECK(a.device() == b.device(), Runtime, "[", op, "] expected all tensors to be on the same device, but found ",
           a.device().str(), " and ", b.device().str());
}

void check_floating(const char* op, const Tensor& t) {
  DG_CHECK(is_floating(t.dtype()), Type, "[", op, "] expected a floating point tensor, got ", dtype_name(t.dtype()));
}

void finish_write_if_external(const Tensor& dst, uint64_t seq) {
  if (dst.storage().shared_with_host()) Stream::cpu().wait_for(seq);  // seq: a CPU Task's (external memory is host's)
}

}  // namespace dg
